//! Recovery strategies as policies: a pure function from what happened to what the training
//! loop should do. No I/O and no tensors, so every rule is unit-tested here; the runner carries
//! the decisions out.
//!
//! | event | `none` | `checkpoint_restart` | `rollback` | `lossy_forward` |
//! |---|---|---|---|---|
//! | bad loss or gradients on worker r (this step) | continue | restart from checkpoint | redo the step | drop r's contribution |
//! | bad weights or optimizer state on r (after the update) | continue | restart from checkpoint | redo the step | re-sync r from a healthy replica |
//! | replicas diverged (ranks D) | continue | restart from checkpoint | re-sync D from a healthy replica | re-sync D from a healthy replica |
//! | checkpoint digest mismatch | continue | fall back to an older checkpoint | fall back | fall back |
//! | worker r crashed | fail the run | restart from checkpoint (r respawned) | redo the step without r, respawn r from a healthy replica | drop r this step, respawn r from a healthy replica next step |
//!
//! Damage found again in a step that rollback already redid was not transient: rollback then
//! restarts from the checkpoint. When no healthy replica exists (one worker, a pipeline, whose
//! stages hold different blocks, or every replica damaged), re-syncing is impossible and the
//! policy falls back: `lossy_forward` and `rollback` then restart from the newest checkpoint
//! (or the initial state).
//!
//! A restart from a checkpoint relaunches the job only when a process died (a crash in that
//! step); while every process is alive (damage found by a check) the runner reloads the
//! checkpoint in place, paying the read and the lost steps (`recovery.in_place_reload`).

pub mod detect;
mod guard;
pub mod job;
pub mod profile;
pub mod signals;
mod supervised;

pub use detect::{DetectConfig, SpikeConfig};
pub use guard::{DetectionRecord, Guard, detections_text};
pub use supervised::Supervised;

use serde::{Deserialize, Serialize};

/// A recovery strategy (`[recovery] strategy = ...`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Keep going whatever happens (the published sensitivity studies).
    #[default]
    None,
    /// Reload the newest verified checkpoint on every worker, losing the steps since it.
    CheckpointRestart,
    /// Restore the state from just before the failed mini-batch and redo it.
    Rollback,
    /// Continue without the failed or corrupted contribution, accepting some accuracy loss.
    LossyForward,
}

/// What a detector saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Detection {
    /// NaN/Inf loss.
    NonFiniteLoss,
    /// Loss far above its moving average.
    LossSpike,
    /// NaN/Inf in a worker's gradients.
    NonFiniteGradients,
    /// NaN/Inf in a worker's weights or optimizer state after its update.
    NonFiniteWeights,
    /// Replicas' parameter digests disagree.
    ReplicaDivergence,
    /// A checkpoint's stored digests do not match its data.
    ChecksumMismatch,
    /// A worker stopped (fail-stop).
    Crash,
}

impl Detection {
    /// The name written in configurations and outputs (`non_finite_loss`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Detection::NonFiniteLoss => "non_finite_loss",
            Detection::LossSpike => "loss_spike",
            Detection::NonFiniteGradients => "non_finite_gradients",
            Detection::NonFiniteWeights => "non_finite_weights",
            Detection::ReplicaDivergence => "replica_divergence",
            Detection::ChecksumMismatch => "checksum_mismatch",
            Detection::Crash => "crash",
        }
    }

    /// Whether the damage is confined to the current step's not-yet-applied work (loss or
    /// gradients): dropping the contribution or redoing the step removes it.
    pub fn before_update(self) -> bool {
        matches!(self, Detection::NonFiniteLoss | Detection::LossSpike | Detection::NonFiniteGradients)
    }
}

/// What the policy may look at besides the event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Situation {
    /// Data-parallel replicas (1 for a single worker or a pipeline, where stages are not replicas).
    pub replicas: usize,
    /// Ranks that are damaged or down right now (including the event's own).
    pub unhealthy: Vec<usize>,
    /// Times the current step has already been redone, when no new fault struck in this
    /// attempt: damage that survives a redo was not transient, and rollback gives way to a
    /// checkpoint restart.
    pub redos: u32,
}

impl Situation {
    /// The lowest-ranked replica not known to be damaged, when the damaged workers have
    /// replicas: never with one replica (a single worker, or a pipeline, whose stage s is worker
    /// s and holds other blocks than stage 0).
    pub fn healthy(&self) -> Option<usize> {
        if self.replicas < 2 {
            return None;
        }
        (0..self.replicas).find(|r| !self.unhealthy.contains(r))
    }
}

/// What the training loop should do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Decision {
    /// Nothing.
    Continue,
    /// Leave these workers' gradients out of this step's average.
    DropContribution {
        /// Workers left out.
        ranks: Vec<usize>,
    },
    /// Restore the state from before this step and run it again; `without` are left out of
    /// the redone step (crashed workers).
    RedoStep {
        /// Workers left out of the redo.
        without: Vec<usize>,
    },
    /// Copy a healthy replica's whole state over these ranks (re-sync a diverged replica, or
    /// respawn a crashed worker), now or, with `next_step`, before the next step.
    Resync {
        /// Ranks overwritten.
        ranks: Vec<usize>,
        /// The healthy replica copied.
        from: usize,
        /// Wait for the next step (a crashed worker rejoins at a step boundary).
        next_step: bool,
    },
    /// Several decisions, in order.
    Both {
        /// The decisions.
        steps: Vec<Decision>,
    },
    /// Reload the newest verified checkpoint (or the initial state) on every worker: in the
    /// running processes when none died, otherwise after relaunching the job.
    RestartFromCheckpoint,
    /// Try the next older checkpoint.
    FallBackToOlderCheckpoint,
    /// End the run as failed.
    Fail,
}

/// The decision of `strategy` about `detection` on `ranks` (empty: not attributable to a
/// worker, e.g. a pipeline loss).
pub fn decide(strategy: Strategy, detection: Detection, ranks: &[usize], situation: &Situation) -> Decision {
    use Decision as D;
    use Detection as E;
    let ranks = ranks.to_vec();
    if detection == E::ChecksumMismatch {
        return if strategy == Strategy::None { D::Continue } else { D::FallBackToOlderCheckpoint };
    }
    match strategy {
        Strategy::None if detection == E::Crash => D::Fail,
        Strategy::None => D::Continue,
        Strategy::CheckpointRestart => D::RestartFromCheckpoint,
        Strategy::Rollback => match detection {
            E::Crash => match situation.healthy() {
                Some(from) => D::Both { steps: vec![D::RedoStep { without: ranks.clone() }, D::Resync { ranks, from, next_step: true }] },
                None => D::RestartFromCheckpoint,
            },
            E::ReplicaDivergence => resync_or_restart(ranks, situation),
            _ if situation.redos > 0 => D::RestartFromCheckpoint,
            _ => D::RedoStep { without: Vec::new() },
        },
        Strategy::LossyForward => match detection {
            E::Crash => match situation.healthy() {
                Some(from) => {
                    D::Both { steps: vec![D::DropContribution { ranks: ranks.clone() }, D::Resync { ranks, from, next_step: true }] }
                }
                None => D::RestartFromCheckpoint,
            },
            d if d.before_update() && !ranks.is_empty() && situation.healthy().is_some() => D::DropContribution { ranks },
            d if d.before_update() => D::RestartFromCheckpoint,
            _ => resync_or_restart(ranks, situation),
        },
    }
}

fn resync_or_restart(ranks: Vec<usize>, situation: &Situation) -> Decision {
    match situation.healthy() {
        Some(from) if !ranks.is_empty() => Decision::Resync { ranks, from, next_step: false },
        _ => Decision::RestartFromCheckpoint,
    }
}

/// What a job pays beyond its step's timeline once its survivors must learn of a crash: the
/// failure detector's timeout, and the communicator rebuilt without the lost rank. The runner
/// charges `recovery.detect_timeout_s` and `recovery.rebuild_s` for them; a relaunch is the
/// restart's own charge, paid only where a process died (a crash, or a worker lost for good
/// under `reinit`): a restart from a checkpoint while every process is alive (damage found by
/// a check) reloads it in place, with neither a detection nor a relaunch
/// (`recovery.in_place_reload`).
///
/// | decision about a crash | detection | rebuild |
/// |---|---|---|
/// | fail the run (`none`) | no | no |
/// | restart or fall back to a checkpoint | yes | no (the relaunch sets up a new job) |
/// | redo the step without the worker (rollback), drop its contribution (lossy forward) | yes | yes |
///
/// A replica respawned from a healthy one later pays one more rebuild when it joins
/// ([`Guard::take_joins`]). Silent damage is found by the checks, not by a timeout: it pays
/// neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashCharges {
    /// The survivors waited for the failure detector.
    pub detect: bool,
    /// The job went on in the same processes: its communicator was rebuilt without the lost rank.
    pub rebuild: bool,
}

impl CrashCharges {
    /// Both charges of `self` and `other` (crashes met in the same step share one timeout and
    /// one rebuild).
    pub fn or(self, other: Self) -> Self {
        Self { detect: self.detect || other.detect, rebuild: self.rebuild || other.rebuild }
    }
}

/// The charges of carrying out `decision` about a crash (see [`CrashCharges`]).
pub fn crash_charges(decision: &Decision) -> CrashCharges {
    use Decision as D;
    match decision {
        D::Fail | D::Continue => CrashCharges::default(),
        D::RestartFromCheckpoint | D::FallBackToOlderCheckpoint => CrashCharges { detect: true, rebuild: false },
        D::DropContribution { .. } | D::RedoStep { .. } | D::Resync { .. } => CrashCharges { detect: true, rebuild: true },
        // A decision that restarts anywhere in the list restarts the job: no rebuild.
        D::Both { steps } => {
            let parts: Vec<CrashCharges> = steps.iter().map(crash_charges).collect();
            let restarts = steps.iter().any(|d| matches!(d, D::RestartFromCheckpoint | D::FallBackToOlderCheckpoint | D::Fail));
            let any = parts.into_iter().fold(CrashCharges::default(), CrashCharges::or);
            CrashCharges { rebuild: any.rebuild && !restarts, ..any }
        }
    }
}

/// What a data-parallel job does once a worker is lost for good, after the step's own recovery
/// (`[recovery] on_permanent_loss`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LossPolicy {
    /// A spare node takes the lost worker's place as a copy of a healthy replica (under
    /// checkpoint-restart: from the checkpoint the job restarts from); the transfer is charged.
    #[default]
    Respawn,
    /// The whole job restarts from the newest verified checkpoint, with a spare node in the
    /// lost worker's place (the Reinit approach); relaunch and read are charged.
    Reinit,
    /// The survivors go on as fewer workers (ULFM's shrunk communicator), spreading the lost
    /// worker's data over themselves; no checkpoint is needed. Data parallelism only.
    Shrink,
}

impl LossPolicy {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            LossPolicy::Respawn => "respawn",
            LossPolicy::Reinit => "reinit",
            LossPolicy::Shrink => "shrink",
        }
    }
}

/// What the job does about one worker lost for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAction {
    /// A spare takes the place: a copy of a healthy replica.
    Respawn,
    /// A spare takes the place and the job restarts from its newest checkpoint.
    Reinit,
    /// Go on without the worker; `fallback`: the policy was respawn or reinit, but no spare
    /// was left.
    Shrink {
        /// Whether this is the fallback of a policy that ran out of spares.
        fallback: bool,
    },
    /// End the run as failed: a pipeline stage lost with no spare left, or no worker left.
    Fail,
}

/// The action of `policy` for one worker lost for good, with `spares_left` spare nodes
/// (`None`: as many as needed) and `workers` workers before the loss. A pipeline cannot shrink
/// (every stage holds a different part of the model): it fails when no spare is left. A job
/// whose last worker is lost fails.
pub fn on_loss(policy: LossPolicy, spares_left: Option<usize>, workers: usize, pipeline: bool) -> LossAction {
    let spare = spares_left.is_none_or(|k| k > 0);
    match policy {
        LossPolicy::Respawn if spare => LossAction::Respawn,
        LossPolicy::Reinit if spare => LossAction::Reinit,
        _ if pipeline || workers <= 1 => LossAction::Fail,
        LossPolicy::Shrink => LossAction::Shrink { fallback: false },
        LossPolicy::Respawn | LossPolicy::Reinit => LossAction::Shrink { fallback: true },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision as D;
    use Detection as E;

    fn four(unhealthy: &[usize]) -> Situation {
        Situation { replicas: 4, unhealthy: unhealthy.to_vec(), redos: 0 }
    }

    #[test]
    fn detection_names_are_the_serialized_names_and_the_text_counts_steps_and_kinds() {
        for e in [
            E::NonFiniteLoss,
            E::LossSpike,
            E::NonFiniteGradients,
            E::NonFiniteWeights,
            E::ReplicaDivergence,
            E::ChecksumMismatch,
            E::Crash,
        ] {
            assert_eq!(serde_json::to_value(e).unwrap(), e.name());
        }
        let record = |step, kind| DetectionRecord {
            step,
            rank: Some(0),
            kind,
            point: None,
            latency_steps: None,
            decision: D::Continue,
            buckets: None,
            crash_fraction: None,
            crash_phase: None,
        };
        let records: Vec<DetectionRecord> = (1..=3).flat_map(|s| [record(s, E::NonFiniteLoss), record(s, E::NonFiniteWeights)]).collect();
        let text = detections_text(&records);
        assert!(text.starts_with("6 detection(s) on 3 step(s) (non_finite_loss x3, non_finite_weights x3;"), "{text}");
        assert_eq!(detections_text(&[]), "0 detections");
    }

    #[test]
    fn none_keeps_going_but_a_crash_ends_the_run() {
        assert_eq!(decide(Strategy::None, E::NonFiniteLoss, &[1], &four(&[1])), D::Continue);
        assert_eq!(decide(Strategy::None, E::ReplicaDivergence, &[1], &four(&[1])), D::Continue);
        assert_eq!(decide(Strategy::None, E::Crash, &[2], &four(&[2])), D::Fail);
    }

    #[test]
    fn checkpoint_restart_always_reloads() {
        for e in [E::NonFiniteLoss, E::LossSpike, E::NonFiniteGradients, E::NonFiniteWeights, E::ReplicaDivergence, E::Crash] {
            assert_eq!(decide(Strategy::CheckpointRestart, e, &[0], &four(&[0])), D::RestartFromCheckpoint);
        }
        assert_eq!(decide(Strategy::CheckpointRestart, E::ChecksumMismatch, &[], &four(&[])), D::FallBackToOlderCheckpoint);
    }

    #[test]
    fn rollback_redoes_the_step_and_respawns_crashed_workers() {
        assert_eq!(decide(Strategy::Rollback, E::NonFiniteGradients, &[3], &four(&[3])), D::RedoStep { without: vec![] });
        assert_eq!(decide(Strategy::Rollback, E::NonFiniteWeights, &[3], &four(&[3])), D::RedoStep { without: vec![] });
        let again = Situation { redos: 1, ..four(&[3]) };
        assert_eq!(decide(Strategy::Rollback, E::NonFiniteLoss, &[3], &again), D::RestartFromCheckpoint, "not transient");
        assert_eq!(
            decide(Strategy::Rollback, E::Crash, &[0], &four(&[0])),
            D::Both { steps: vec![D::RedoStep { without: vec![0] }, D::Resync { ranks: vec![0], from: 1, next_step: true }] }
        );
        assert_eq!(
            decide(Strategy::Rollback, E::ReplicaDivergence, &[2], &four(&[2])),
            D::Resync { ranks: vec![2], from: 0, next_step: false }
        );
        // A single worker that crashed has no healthy replica to respawn from.
        assert_eq!(
            decide(Strategy::Rollback, E::Crash, &[0], &Situation { replicas: 1, unhealthy: vec![0], redos: 0 }),
            D::RestartFromCheckpoint
        );
    }

    #[test]
    fn lossy_forward_drops_resyncs_and_respawns() {
        assert_eq!(decide(Strategy::LossyForward, E::NonFiniteGradients, &[1], &four(&[1])), D::DropContribution { ranks: vec![1] });
        assert_eq!(decide(Strategy::LossyForward, E::LossSpike, &[1], &four(&[1])), D::DropContribution { ranks: vec![1] });
        assert_eq!(
            decide(Strategy::LossyForward, E::NonFiniteWeights, &[0], &four(&[0])),
            D::Resync { ranks: vec![0], from: 1, next_step: false }
        );
        assert_eq!(
            decide(Strategy::LossyForward, E::Crash, &[2], &four(&[2])),
            D::Both { steps: vec![D::DropContribution { ranks: vec![2] }, D::Resync { ranks: vec![2], from: 0, next_step: true }] }
        );
        // Nothing healthy to continue from: restart.
        assert_eq!(
            decide(Strategy::LossyForward, E::NonFiniteGradients, &[0], &Situation { replicas: 1, unhealthy: vec![0], redos: 0 }),
            D::RestartFromCheckpoint
        );
        assert_eq!(decide(Strategy::LossyForward, E::NonFiniteLoss, &[], &four(&[])), D::RestartFromCheckpoint);
    }

    #[test]
    fn a_crash_costs_a_detection_when_the_job_goes_on_and_a_rebuild_when_it_stays_in_the_same_processes() {
        let charges = |s: Strategy, situation: &Situation| crash_charges(&decide(s, E::Crash, &[2], situation));
        let (neither, detect, both) =
            (CrashCharges::default(), CrashCharges { detect: true, rebuild: false }, CrashCharges { detect: true, rebuild: true });
        assert_eq!(charges(Strategy::None, &four(&[2])), neither, "the run fails: nothing to wait for");
        assert_eq!(charges(Strategy::CheckpointRestart, &four(&[2])), detect, "the relaunch builds a new job");
        assert_eq!(charges(Strategy::Rollback, &four(&[2])), both);
        assert_eq!(charges(Strategy::LossyForward, &four(&[2])), both);
        // One worker: no healthy replica, so rollback and lossy forward restart.
        let alone = Situation { replicas: 1, unhealthy: vec![0], redos: 0 };
        assert_eq!(charges(Strategy::Rollback, &alone), detect);
        assert_eq!(charges(Strategy::LossyForward, &alone), detect);
        // A pipeline's stage 1: stage 0 holds other blocks, so it is no replica to copy.
        let stage = Situation { replicas: 1, unhealthy: vec![1], redos: 0 };
        for strategy in [Strategy::Rollback, Strategy::LossyForward] {
            assert_eq!(decide(strategy, Detection::Crash, &[1], &stage), D::RestartFromCheckpoint, "{strategy:?}");
        }
        for damage in [Detection::NonFiniteWeights, Detection::NonFiniteGradients] {
            assert_eq!(decide(Strategy::LossyForward, damage, &[1], &stage), D::RestartFromCheckpoint, "{damage:?}");
        }
        assert_eq!(decide(Strategy::Rollback, Detection::NonFiniteWeights, &[1], &stage), D::RedoStep { without: vec![] });
        assert_eq!(crash_charges(&D::Both { steps: vec![D::DropContribution { ranks: vec![1] }, D::RestartFromCheckpoint] }), detect);
        assert_eq!(neither.or(detect).or(both), both);
    }

    #[test]
    fn a_permanent_loss_takes_a_spare_until_none_is_left_then_shrinks() {
        use LossAction as A;
        for (policy, with_spare) in
            [(LossPolicy::Respawn, A::Respawn), (LossPolicy::Reinit, A::Reinit), (LossPolicy::Shrink, A::Shrink { fallback: false })]
        {
            assert_eq!(on_loss(policy, None, 16, false), with_spare, "{policy:?}, unlimited spares");
            assert_eq!(on_loss(policy, Some(1), 16, false), with_spare, "{policy:?}, one spare");
        }
        assert_eq!(on_loss(LossPolicy::Respawn, Some(0), 16, false), A::Shrink { fallback: true });
        assert_eq!(on_loss(LossPolicy::Reinit, Some(0), 16, false), A::Shrink { fallback: true });
        // One worker left, and it is lost: nothing can go on.
        assert_eq!(on_loss(LossPolicy::Shrink, None, 1, false), A::Fail);
        assert_eq!(on_loss(LossPolicy::Respawn, Some(0), 1, false), A::Fail);
        assert_eq!(on_loss(LossPolicy::Respawn, Some(1), 1, false), A::Respawn);
        // A pipeline stage can be replaced, never shrunk.
        assert_eq!(on_loss(LossPolicy::Respawn, Some(1), 4, true), A::Respawn);
        assert_eq!(on_loss(LossPolicy::Reinit, Some(0), 4, true), A::Fail);
        assert_eq!(on_loss(LossPolicy::Shrink, None, 4, true), A::Fail);
    }

    #[test]
    fn strategies_read_from_toml_names() {
        #[derive(Deserialize)]
        struct T {
            s: Vec<Strategy>,
        }
        let t: T = serde_json::from_str(r#"{"s": ["none", "checkpoint_restart", "rollback", "lossy_forward"]}"#).unwrap();
        assert_eq!(t.s, [Strategy::None, Strategy::CheckpointRestart, Strategy::Rollback, Strategy::LossyForward]);
    }
}
