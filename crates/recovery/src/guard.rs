//! The guard: the detectors, the strategy's decisions, and what can be done inside a step
//! (drop a contribution, redo the step, re-sync or respawn a replica). Restarting from a
//! checkpoint and failing the run end the step with [`Control::Stop`] and leave the decision in
//! [`Guard::pending`] for the runner. It meets a run's faults as training hooks through
//! [`Guard::supervise`] (the `supervised` module); the faults themselves are the faults
//! crate's to apply.
//!
//! No oracle: detection and every decision use only what a real job observes (losses,
//! gradients, weights and optimizer state, digests, a worker that stops answering), step
//! numbers and attempt counts.

use std::collections::{BTreeMap, BTreeSet};

use crate::detect::{DetectConfig, LossSpike};
use crate::signals::{SignalKind, SignalLog, SignalRow};
use resilab_train::{Control, Ctx, Point, Worker};
use serde::Serialize;

use crate::{Decision, Detection, Situation, Strategy, decide};

/// One detection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetectionRecord {
    /// Step during which it fired.
    pub step: u64,
    /// Worker or stage (none for a check across workers that found no culprit).
    pub rank: Option<usize>,
    /// What fired.
    pub kind: Detection,
    /// Where in the step (`None`: while loading a checkpoint).
    pub point: Option<Point>,
    /// Steps since the most recent fault injected before it (on any worker), if any.
    pub latency_steps: Option<u64>,
    /// What the strategy decided.
    pub decision: Decision,
    /// A crash's all-reduce buckets: those whose all-reduce had completed, and all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<[usize; 2]>,
    /// A crash inside the step: when it struck, as a fraction of the step's simulated duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_fraction: Option<f64>,
    /// A crash inside the step: what the crashed worker was doing (`forward`, `backward`,
    /// `allreduce`, `update`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_phase: Option<&'static str>,
}

/// The detections of a run in words: how many, on how many steps, and by what. A detector fires
/// on every step (and for every worker) where its condition holds, so a NaN left in place is
/// detected again each step.
pub fn detections_text(records: &[DetectionRecord]) -> String {
    if records.is_empty() {
        return "0 detections".to_string();
    }
    let steps: std::collections::BTreeSet<u64> = records.iter().map(|r| r.step).collect();
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for r in records {
        let name = r.kind.name();
        match kinds.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => kinds.push((name, 1)),
        }
    }
    let by: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    format!(
        "{} detection(s) on {} step(s) ({}; a detector fires on each step its condition holds)",
        records.len(),
        steps.len(),
        by.join(", ")
    )
}

/// Detectors and a strategy, and what they have seen and decided (see [`Guard::supervise`]).
pub struct Guard {
    /// The strategy.
    pub strategy: Strategy,
    /// Detector settings.
    pub detect: DetectConfig,
    /// Every detection, in order.
    pub detections: Vec<DetectionRecord>,
    /// A decision the runner must carry out (restart from a checkpoint, fall back, fail);
    /// the step that made it ended with [`Control::Stop`].
    pub pending: Option<Decision>,
    /// Whether a step redone without crashed workers spreads their samples over the survivors
    /// (`[recovery] rebalance`: the global batch is kept) rather than dropping them.
    pub rebalance: bool,
    /// Bytes of state sent to each worker respawned from a healthy replica since the runner
    /// last took them ([`Guard::take_transfers`]), for the simulated clock.
    pub(crate) transfers: Vec<u64>,
    /// Crashed workers that rejoined as a copy of a healthy replica since the runner last took
    /// them ([`Guard::take_joins`]): each changed the communicator's membership.
    pub(crate) joins: u32,
    /// Replicas (data-parallel workers; 1 for a single worker or a pipeline).
    pub(crate) replicas: usize,
    pub(crate) spikes: BTreeMap<usize, LossSpike>,
    pub(crate) digests: BTreeMap<usize, u64>,
    /// Workers seen to stop answering and not yet brought back.
    pub(crate) down: BTreeSet<usize>,
    /// `(rank, donor, step)` to re-sync before the rank's first forward pass of a step after
    /// `step` (a crashed worker rejoins at the next step, not in a redo of its crash step).
    pub(crate) resync_next: Vec<(usize, usize, u64)>,
    /// `(rank, donor)` to re-sync once the donor has taken this step's update.
    pub(crate) resync_now: Vec<(usize, usize)>,
    pub(crate) donors: BTreeMap<usize, Worker>,
    /// The detectors' signals, recorded while `detect.record_signals` is on.
    pub signals: Option<SignalLog>,
}

impl Guard {
    /// A guard for `replicas` data-parallel replicas (1 for a pipeline).
    pub fn new(strategy: Strategy, detect: DetectConfig, replicas: usize) -> Self {
        let signals = detect.record_signals.then(SignalLog::default);
        Self {
            strategy,
            detect,
            detections: Vec::new(),
            pending: None,
            rebalance: false,
            transfers: Vec::new(),
            joins: 0,
            replicas,
            spikes: BTreeMap::new(),
            digests: BTreeMap::new(),
            down: BTreeSet::new(),
            resync_next: Vec::new(),
            resync_now: Vec::new(),
            donors: BTreeMap::new(),
            signals,
        }
    }

    /// Records one evaluation of a signal (while recording).
    pub(crate) fn record(&mut self, ctx: &Ctx, signal: SignalKind, value: f64, max_abs: Option<f64>) {
        let scale = if signal == SignalKind::Gradients { ctx.loss_scale } else { None };
        self.push_signal(SignalRow {
            step: ctx.step,
            attempt: ctx.attempt,
            rank: ctx.rank,
            micro: ctx.micro_batch,
            signal,
            value,
            max_abs,
            scale,
            ranks: None,
        });
    }

    /// Records that worker `rank` left the job for good (while recording), at the step of the
    /// last row.
    pub(crate) fn record_removed(&mut self, rank: usize) {
        let step = self.signals.as_ref().and_then(|l| l.rows.last()).map_or(0, |r| r.step);
        let row = SignalRow {
            step,
            attempt: 0,
            rank,
            micro: None,
            signal: SignalKind::Removed,
            value: 0.0,
            max_abs: None,
            scale: None,
            ranks: None,
        };
        self.push_signal(row);
    }

    fn push_signal(&mut self, row: SignalRow) {
        if let Some(log) = &mut self.signals {
            log.rows.push(row);
        }
    }

    /// Records a tensor signal's device reduction (sum, largest magnitude; none without values).
    pub(crate) fn record_reduced(&mut self, ctx: &Ctx, signal: SignalKind, reduced: Option<(f32, f32)>) {
        if let Some((sum, max)) = reduced {
            self.record(ctx, signal, f64::from(sum), Some(f64::from(max)));
        }
    }

    /// Records the replicas that disagree with the majority digest after a step's updates.
    pub(crate) fn record_digests(&mut self, ctx: &Ctx, odd: &[usize]) {
        self.record(ctx, SignalKind::Digests, odd.len() as f64, None);
        if let Some(row) = self.signals.as_mut().and_then(|l| l.rows.last_mut()) {
            row.ranks = (!odd.is_empty()).then(|| odd.iter().map(usize::to_string).collect::<Vec<_>>().join(";"));
        }
    }

    /// Workers seen to crash and not yet brought back.
    pub fn down(&self) -> &BTreeSet<usize> {
        &self.down
    }

    /// The job went on without worker `rank` for good (the runner removed it from the
    /// trainer): every rank above it moves down one in the guard's records, as the workers did.
    /// Re-syncs waiting for it are dropped; those that would copy from it copy from the lowest
    /// replica left instead.
    pub(crate) fn remove_rank(&mut self, rank: usize) {
        let shift = |r: usize| if r > rank { r - 1 } else { r };
        self.replicas = self.replicas.saturating_sub(1);
        self.down = self.down.iter().filter(|&&r| r != rank).map(|&r| shift(r)).collect();
        self.spikes = std::mem::take(&mut self.spikes).into_iter().filter(|(r, _)| *r != rank).map(|(r, s)| (shift(r), s)).collect();
        self.digests.clear();
        self.donors = std::mem::take(&mut self.donors).into_iter().filter(|(r, _)| *r != rank).map(|(r, w)| (shift(r), w)).collect();
        let lowest = self.donors.keys().next().copied().unwrap_or(0);
        let donor = |from: usize| if from == rank { lowest } else { shift(from) };
        self.resync_next = self.resync_next.iter().filter(|t| t.0 != rank).map(|&(r, from, s)| (shift(r), donor(from), s)).collect();
        self.resync_now = self.resync_now.iter().filter(|t| t.0 != rank).map(|&(r, from)| (shift(r), donor(from))).collect();
    }

    /// The bytes of state sent to each worker respawned from a healthy replica since the last
    /// call (the runner charges them at the network's bandwidth).
    pub fn take_transfers(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.transfers)
    }

    /// How many crashed workers rejoined as a copy of a healthy replica since the last call:
    /// the runner charges a communicator rebuild for the step they joined at.
    pub fn take_joins(&mut self) -> u32 {
        std::mem::take(&mut self.joins)
    }

    /// Records a detection, asks the strategy and turns the decision into a control value.
    pub(crate) fn fire(&mut self, ctx: &Ctx, kind: Detection, ranks: &[usize], latency: Option<u64>) -> Control {
        let mut unhealthy: Vec<usize> = ranks.to_vec();
        unhealthy.extend(self.down.iter().copied().filter(|r| !ranks.contains(r)));
        // Damage seen again in a redone step counts against rollback, whatever caused it: the
        // guard cannot tell a second transient fault from damage the redo did not remove.
        let situation = Situation { replicas: self.replicas, unhealthy, redos: ctx.attempt };
        let decision = decide(self.strategy, kind, ranks, &situation);
        self.detections.push(DetectionRecord {
            step: ctx.step,
            rank: ranks.first().copied(),
            kind,
            point: Some(ctx.point),
            latency_steps: latency,
            decision: decision.clone(),
            buckets: None,
            crash_fraction: None,
            crash_phase: None,
        });
        self.carry_out(decision, ctx.step)
    }

    /// A checkpoint whose stored digests do not match its data was met while restarting at
    /// `step` (worker `rank`'s file): records the detection and returns the strategy's decision
    /// (`Continue`: load it anyway, the published method; otherwise fall back to an older one).
    pub(crate) fn checkpoint_mismatch(&mut self, step: u64, rank: usize, latency: Option<u64>) -> Decision {
        let situation = Situation { replicas: self.replicas, unhealthy: vec![rank], redos: 0 };
        let decision = decide(self.strategy, Detection::ChecksumMismatch, &[rank], &situation);
        self.detections.push(DetectionRecord {
            step,
            rank: Some(rank),
            kind: Detection::ChecksumMismatch,
            point: None,
            latency_steps: latency,
            decision: decision.clone(),
            buckets: None,
            crash_fraction: None,
            crash_phase: None,
        });
        decision
    }

    fn carry_out(&mut self, decision: Decision, step: u64) -> Control {
        match decision {
            Decision::Continue => Control::Continue,
            Decision::DropContribution { .. } => Control::Skip,
            Decision::RedoStep { .. } => Control::Redo,
            Decision::Resync { ranks, from, next_step } => {
                for r in ranks {
                    if next_step { self.resync_next.push((r, from, step)) } else { self.resync_now.push((r, from)) }
                }
                Control::Continue
            }
            Decision::Both { steps: all } => {
                let mut out = Control::Continue;
                for d in all {
                    let c = self.carry_out(d, step);
                    if matches!(out, Control::Continue) {
                        out = c;
                    }
                }
                out
            }
            d @ (Decision::RestartFromCheckpoint | Decision::FallBackToOlderCheckpoint | Decision::Fail) => {
                self.pending = Some(d);
                Control::Stop
            }
        }
    }

    /// Takes `workers` as the donors a rollback or lossy-forward guard would hold after they all
    /// completed a step without detection (each is cloned after its update): for a run that
    /// starts supervising at a step it did not train. Other strategies keep no donors.
    pub fn prime_donors(&mut self, workers: &[Worker]) {
        if matches!(self.strategy, Strategy::Rollback | Strategy::LossyForward) {
            for (rank, w) in workers.iter().enumerate().filter(|(r, _)| !self.down.contains(r)) {
                self.donors.insert(rank, w.clone());
            }
        }
    }

    /// Copies the donor's model and optimizer state into `w` (its rank, random stream and
    /// cursor stay its own).
    pub(crate) fn resync(&self, w: &mut Worker, from: usize) -> bool {
        let Some(d) = self.donors.get(&from) else { return false };
        w.net = d.net.clone();
        w.optim = d.optim.clone();
        true
    }
}
