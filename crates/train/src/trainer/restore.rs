//! The trainer's whole state copied out ([`Trainer::snapshot`]) and put back, checked first
//! ([`Trainer::restore`]), and the replicas made copies of rank 0.

use super::Trainer;
use crate::parallel::Broadcast;
use crate::state::{TrainState, WorkerState};
use crate::{Error, Result};

impl Trainer {
    /// Copies the whole training state to the host.
    pub fn snapshot(&self) -> TrainState {
        TrainState { step: self.step, workers: self.workers.iter().map(WorkerState::capture).collect() }
    }

    /// Checks a state's counters against this run before they are used (a checkpoint's counters
    /// pass their digests or were loaded anyway, so they are range-checked here): the step within
    /// the schedule, every data cursor inside an epoch and no further on than the step allows, and
    /// data-parallel replicas at one cursor.
    fn check_in_range(&self, state: &TrainState) -> Result<()> {
        let (total, len, batch) = (self.total_steps(), self.data.train.len(), self.global_batch_size());
        if state.step > total {
            return Err(Error::State(format!(
                "the state is at step {}, beyond this run's last step {total} (train.steps / train.epochs)",
                state.step
            )));
        }
        for w in &state.workers {
            let c = w.cursor;
            if c.sample.checked_add(batch).is_none_or(|end| end > len) {
                return Err(Error::State(format!(
                    "worker {}'s data cursor is at image {} of an epoch of {len} images, where no batch of {batch} fits",
                    w.rank, c.sample
                )));
            }
            if c.epoch as u64 > state.step {
                return Err(Error::State(format!(
                    "worker {}'s data cursor is in epoch {}, after only {} steps",
                    w.rank, c.epoch, state.step
                )));
            }
        }
        if self.stage_ranges().is_none() && state.workers.windows(2).any(|p| p[0].cursor != p[1].cursor) {
            return Err(Error::State("data-parallel replicas hold different data cursors".into()));
        }
        Ok(())
    }

    /// Restores a state taken from a trainer built from the same configuration, then, for
    /// data-parallel replicas, broadcasts from rank 0 what `parallel.broadcast_on_restart`
    /// says (a restart re-creates the job, which synchronises its replicas). Nothing is
    /// changed if any worker's state does not fit or a counter is out of range.
    pub fn restore(&mut self, state: &TrainState) -> Result<()> {
        self.restore_exact(state)?;
        if self.stage_ranges().is_none() && self.workers.len() > 1 {
            self.broadcast_from_rank0(self.parallel.broadcast());
        }
        Ok(())
    }

    /// Restores a state taken from a trainer built from the same configuration as it is, bit for
    /// bit: no broadcast from rank 0 (so replicas whose buffers differ, as under Horovod, keep
    /// them). Nothing is changed if any worker's state does not fit or a counter is out of range.
    pub fn restore_exact(&mut self, state: &TrainState) -> Result<()> {
        if state.workers.len() != self.workers.len() {
            return Err(Error::State(format!("state has {} workers, the trainer has {}", state.workers.len(), self.workers.len())));
        }
        for (s, w) in state.workers.iter().zip(&self.workers) {
            s.check_fits(w)?;
        }
        self.check_in_range(state)?;
        let device = self.device().clone();
        for (s, w) in state.workers.iter().zip(&mut self.workers) {
            s.restore_into(w, &device)?;
        }
        self.step = state.step;
        self.executions.reached(state.step);
        Ok(())
    }

    /// Copies rank 0's parameters and buffers (and, with `ParametersAndOptimizer`, its
    /// optimizer state) over the other data-parallel replicas; their random streams and cursors
    /// stay their own.
    pub fn broadcast_from_rank0(&mut self, what: Broadcast) {
        if what == Broadcast::Nothing || self.workers.len() < 2 {
            return;
        }
        let (first, rest) = self.workers.split_at_mut(1);
        for w in rest {
            w.net = first[0].net.clone();
            if what == Broadcast::ParametersAndOptimizer {
                w.optim = first[0].optim.clone();
            }
        }
    }
}
