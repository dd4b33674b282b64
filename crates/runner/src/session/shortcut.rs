//! The prefix shortcut (docs/campaigns.md, "Shortcuts"): a run meets no fault before its
//! first event, so its steps until then are the golden run's, bit for bit. The run takes them
//! from the golden run's step cache ([`crate::steps`]) instead of training them, and accounts
//! for each through the code a trained step goes through: the same clock, checkpoints,
//! `metrics.csv` and `compare.csv` rows and evaluations.
//!
//! The remainder shortcut: a run whose faults have all struck and whose full state is the
//! golden run's again (a rollback's redo, a restart's replay) trains the golden run's remaining
//! steps; it takes them from the cache the same way.

use resilab_checkpoint::OnMismatch;
use resilab_recovery::Strategy;
use resilab_train::{Attempts, ParallelMode, Trainer};

use super::{Recovery, Session, whole_model};
use crate::Result;
use crate::steps::{StepCache, StepRecord};

/// The golden detectors' threshold: a run with a lower one could see as extreme what the
/// golden run let through.
const GOLDEN_EXTREME: f64 = 1e10;

impl Session<'_> {
    /// Takes the steps before the run's first fault from the golden run's cache, when the run
    /// allows it; records how many, or why none. Keeps the cache for the remainder shortcut.
    pub(crate) fn fast_forward(&mut self, trainer: &mut Trainer, rec: &mut Recovery) -> Result<()> {
        let cache = match self.usable_cache(trainer)? {
            Ok(cache) => cache,
            Err(why) => {
                self.shortcut_off = Some(why);
                return Ok(());
            }
        };
        match self.prefix_end(trainer, rec, &cache) {
            Err(why) => self.shortcut_off = Some(why),
            Ok(0) => {}
            Ok(to) => {
                self.take_cached(trainer, rec, &cache, 0, to)?;
                rec.guard.prime_donors(&trainer.workers);
                self.shortcut_prefix = to;
            }
        }
        self.cache = Some(cache);
        Ok(())
    }

    /// Takes golden steps `from + 1..=to` from `cache`: accounts for each as a trained step,
    /// writes the checkpoints the run would hold after `to`, and leaves the trainer at the
    /// golden run's state after `to`.
    fn take_cached(&mut self, trainer: &mut Trainer, rec: &mut Recovery, cache: &StepCache, from: u64, to: u64) -> Result<()> {
        let undo = rec.guard.strategy == Strategy::Rollback;
        for r in &cache.records[from as usize..to as usize] {
            self.replay_step(trainer, rec, r, undo)?;
        }
        self.write_cached_checkpoints(trainer, cache, from, to)?;
        let template = trainer.snapshot();
        let (state, _) = resilab_checkpoint::load(&cache.state_dir(to), &template, OnMismatch::Error, self.opts.probe.as_ref())?;
        trainer.restore_exact(&state)?;
        self.bar.set_position(trainer.step);
        Ok(())
    }

    /// The golden run's step cache when this run may take steps from it, or why not.
    fn usable_cache(&self, trainer: &Trainer) -> Result<std::result::Result<StepCache, String>> {
        let (cfg, opts) = (self.cfg, self.opts);
        let off = |why: &str| Ok(Err(why.to_string()));
        if !opts.shortcuts {
            return off("not asked for (resilab campaign --no-shortcuts, or resilab train)");
        }
        if self.resumed {
            return off("the run resumed from a checkpoint");
        }
        if cfg.parallel.mode == ParallelMode::Pipeline {
            return off("a pipeline");
        }
        if cfg.parallel.compute.gflops.is_none() {
            return off("parallel.compute.gflops is unset: the clock is measured, not modelled");
        }
        if opts.record_samples || opts.record_states || opts.record_steps {
            return off("the run records samples, states or steps");
        }
        if cfg.detect.record_signals {
            return off("detect.record_signals records every step's signals");
        }
        if cfg.detect.loss_spike.is_some() {
            return off("detect.loss_spike keeps a history of losses");
        }
        if cfg.detect.extreme_threshold < GOLDEN_EXTREME {
            return off("detect.extreme_threshold is below the golden run's 1e10");
        }
        let Some(golden) = &self.golden else { return off("no golden run") };
        let Some(cache) = StepCache::open(&golden.dir)? else { return off("the golden run has no step cache") };
        if cache.detections != 0 {
            return off("the golden run met detections");
        }
        if cache.records.len() as u64 != trainer.total_steps() {
            return off("the golden run's step cache does not cover the run");
        }
        Ok(Ok(cache))
    }

    /// The last step the prefix shortcut may take from `cache`, or why it takes none.
    fn prefix_end(&self, trainer: &Trainer, rec: &Recovery, cache: &StepCache) -> std::result::Result<u64, String> {
        let total = trainer.total_steps();
        let mut to = rec.faults.first_step().map_or(total, |s| s.saturating_sub(1)).min(total);
        if let Some(r) = self.first_disagreeing(trainer, cache, 0, to) {
            to = r - 1;
        }
        if to > 0 && !cache.state_dir(to).is_dir() {
            return Err("the golden run's step cache lacks the state to start from".to_string());
        }
        Ok(to)
    }

    /// The first step in `from + 1..=to` where the divergence detector would compare golden
    /// replicas whose digests differ (Horovod's buffers): it would fire there, which the golden
    /// run's record does not show.
    fn first_disagreeing(&self, trainer: &Trainer, cache: &StepCache, from: u64, to: u64) -> Option<u64> {
        let k = self.cfg.detect.divergence_every?;
        if trainer.workers.len() < 2 {
            return None;
        }
        cache.records[from as usize..to as usize].iter().find(|r| r.step.is_multiple_of(k) && !r.replicas_agree).map(|r| r.step)
    }

    /// The remainder shortcut: when nothing is left to strike this run, its guard has nothing
    /// pending, it has all its workers and its full state holds the golden run's bits at this
    /// step, the rest of the run is the golden run's. Takes it from the cache as the prefix
    /// shortcut does and leaves the trainer at the golden run's final state. Returns whether it
    /// did.
    pub(crate) fn take_remainder(&mut self, trainer: &mut Trainer, rec: &mut Recovery) -> Result<bool> {
        let step = trainer.step;
        if self.cache.is_none()
            || step == 0
            || !rec.faults.quiescent(step)
            || rec.guard.pending.is_some()
            || trainer.workers.len() != self.cfg.parallel.workers
        {
            return Ok(false);
        }
        let Some(cache) = self.cache.take() else { return Ok(false) };
        let total = trainer.total_steps();
        // The detector would fire in the rest of the golden run: the shortcut is off for good.
        if self.first_disagreeing(trainer, &cache, step, total).is_some() {
            return Ok(false);
        }
        if !self.holds_golden_state(trainer, &cache, step)? {
            self.cache = Some(cache);
            return Ok(false);
        }
        self.take_cached(trainer, rec, &cache, step, total)?;
        self.shortcut_remainder = total - step;
        Ok(true)
    }

    /// Whether the trainer holds the golden run's state after `step`, bit for bit: the digests
    /// first, then the cached state itself.
    fn holds_golden_state(&self, trainer: &Trainer, cache: &StepCache, step: u64) -> Result<bool> {
        let Some(digest) = cache.records[step as usize - 1].state_digest else { return Ok(false) };
        let state = trainer.snapshot();
        if crate::steps::state_digest(&state) != digest || !cache.state_dir(step).is_dir() {
            return Ok(false);
        }
        let (golden, _) = resilab_checkpoint::load(&cache.state_dir(step), &state, OnMismatch::Error, self.opts.probe.as_ref())?;
        Ok(crate::steps::same_bits(&state, &golden))
    }

    /// Accounts for golden step `r` as the loop accounts for a trained step (no fault, no
    /// detection): its attempt charges, crash charges (none), clock, checkpoint and row.
    fn replay_step(&mut self, trainer: &Trainer, rec: &mut Recovery, r: &StepRecord, undo: bool) -> Result<()> {
        let mut s = r.stats();
        let snapshot_bytes = if undo { r.snapshot_bytes } else { 0 };
        trainer.charge_attempts(&mut s, Attempts { snapshot_bytes, ..Attempts::default() });
        self.charge_transfers(trainer, rec);
        self.charge_crashes(rec);
        self.tally.losses.count_step(trainer.workers.len());
        self.account(&s);
        if self.cfg.checkpoint.due(s.step, s.epoch_end) {
            self.charge_checkpoint(trainer, r.state_bytes);
        }
        self.log_step(trainer, &s, Some(r))?;
        Ok(())
    }

    /// The golden run's recorded evaluation after step `r`, recorded as this run's.
    pub(super) fn replay_eval(&mut self, trainer: &Trainer, r: &StepRecord) -> Result<resilab_train::Evaluation> {
        let e =
            r.eval().ok_or_else(|| crate::Error::Golden(format!("the golden run's step cache has no evaluation after step {}", r.step)))?;
        // The model then was the golden run's: its recorded state, if it was recorded (a missing
        // one gives no distance, as for a trained step).
        let whole = match &self.golden {
            Some(g) => {
                let template = whole_model(trainer);
                Some(g.state_at(r.step, &template).unwrap_or(template))
            }
            None => None,
        };
        self.record_eval(r.step, e, whole)
    }

    /// Writes the checkpoints due at steps `from + 1..=to` that the run would still keep after
    /// `to` (`checkpoint.keep_last`), from the golden run's states, as the run writes its own.
    fn write_cached_checkpoints(&mut self, trainer: &Trainer, cache: &StepCache, from: u64, to: u64) -> Result<()> {
        let ck = &self.cfg.checkpoint;
        if !ck.enabled() {
            return Ok(());
        }
        let due: Vec<u64> =
            cache.records[from as usize..to as usize].iter().filter(|r| ck.due(r.step, r.epoch_end)).map(|r| r.step).collect();
        let keep = if ck.keep_last > 0 { ck.keep_last.min(due.len()) } else { due.len() };
        let template = trainer.snapshot();
        let probe = self.opts.probe.as_ref();
        for &step in &due[due.len() - keep..] {
            let (state, _) = resilab_checkpoint::load(&cache.state_dir(step), &template, OnMismatch::Error, probe)?;
            self.watch.check()?;
            resilab_checkpoint::save_claimed(&self.ckpt_root, &state, &self.meta)?;
            if ck.keep_last > 0 {
                self.watch.check()?;
                resilab_checkpoint::prune(&self.ckpt_root, ck.keep_last)?;
            }
        }
        Ok(())
    }
}
