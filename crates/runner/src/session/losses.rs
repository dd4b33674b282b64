//! Workers lost for good: after each step (and after a restart), every worker whose node is
//! gone is handled as `recovery.on_permanent_loss` says, with `parallel.spares` spare nodes.

use resilab_recovery::{LossAction, on_loss};
use resilab_train::Trainer;

use super::{Recovery, Session};
use crate::Result;
use crate::records::WorkersSummary;

impl Session<'_> {
    /// Handles every worker lost for good since the last call, highest rank first (removing a
    /// rank moves the ones above it). `restarted`: every worker's state was just restored from
    /// a checkpoint, which serves a spare as well. Returns `false` when the run cannot go on.
    pub(super) fn handle_losses(&mut self, trainer: &mut Trainer, rec: &mut Recovery, restarted: bool) -> Result<bool> {
        let mut lost: Vec<usize> = rec.faults.lost().iter().copied().collect();
        lost.reverse();
        let mut restarted = restarted;
        for rank in lost {
            let spares_left = self.cfg.parallel.spares.map(|k| k.saturating_sub(self.tally.losses.spares_used as usize));
            let pipeline = trainer.stage_ranges().is_some();
            let action = on_loss(self.cfg.recovery.on_permanent_loss, spares_left, trainer.workers.len(), pipeline);
            self.tally.losses.permanent_losses += 1;
            match action {
                LossAction::Respawn | LossAction::Reinit => {
                    self.tally.losses.spares_used += 1;
                    rec.faults.replace(rank);
                    if action == LossAction::Reinit && !restarted {
                        self.tally.losses.reinits += 1;
                        if !self.restart(trainer, rec, false)? {
                            return Ok(false);
                        }
                        restarted = true;
                    } else if restarted {
                        // The restart restored the spare's state with everyone else's.
                        rec.faults.respawn(rank);
                    }
                }
                LossAction::Shrink { fallback } => {
                    self.tally.losses.fallbacks += u64::from(fallback);
                    trainer.remove_worker(rank, self.cfg.recovery.shrink_batch)?;
                    rec.guard.supervise(&mut rec.faults).remove_rank(rank);
                }
                LossAction::Fail => {
                    self.tally.failure = Some(fail_reason(trainer.workers.len(), pipeline, rank));
                    if let Some(why) = &self.tally.failure {
                        eprintln!("resilab: {why}; the run fails");
                    }
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The summary's record of the workers.
    pub(super) fn workers_summary(&self, trainer: &Trainer) -> WorkersSummary {
        let t = &self.tally.losses;
        WorkersSummary {
            at_start: self.cfg.parallel.world().max(1),
            at_end: trainer.workers.len(),
            permanent_losses: t.permanent_losses,
            on_permanent_loss: self.cfg.recovery.on_permanent_loss.name().to_string(),
            spares_used: t.spares_used,
            spare_fallbacks: t.fallbacks,
            reinits: t.reinits,
            steps_at_workers: t.steps_at.clone(),
            batch_rule: trainer.batch_rule().map(|r| r.name().to_string()),
            global_batch_at_end: trainer.global_batch_size(),
            lr_scale_at_end: trainer.lr_scale(),
        }
    }
}

fn fail_reason(workers: usize, pipeline: bool, rank: usize) -> String {
    if pipeline {
        format!(
            "pipeline stage {rank} was lost for good and no spare node is left (parallel.spares): a pipeline cannot go on without a stage"
        )
    } else if workers <= 1 {
        format!("worker {rank}, the last one left, was lost for good: no worker is left to train")
    } else {
        format!("worker {rank} was lost for good and the job cannot go on")
    }
}
