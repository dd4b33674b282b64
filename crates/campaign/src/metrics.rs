//! What one run measured ([`Metrics`]): the record of a run in `runs.jsonl`, and the metric
//! columns of `runs.csv` with the kinds of campaign whose runs fill each, declared once.

use resilab_runner::Summary;
use serde::{Deserialize, Serialize};

/// Campaign kinds as bits, for the fields each fills: `restart`.
pub(crate) const R: u8 = 1;
/// `eval`.
pub(crate) const E: u8 = 2;
/// `train`.
pub(crate) const T: u8 = 4;
/// Every kind.
pub(crate) const ALL: u8 = R | E | T;

/// Declares [`Metrics`] with each field's kinds (`[R | E]`) written beside it, and
/// `Metrics::KINDS`, those kinds in field order: a field and the kinds whose `runs.csv` has its
/// column are one declaration.
macro_rules! run_metrics {
    (
        $(#[$outer:meta])*
        pub struct Metrics { $( $(#[$attr:meta])* [$($kind:ident)|+] $field:ident : $ty:ty, )* }
    ) => {
        $(#[$outer])*
        pub struct Metrics { $( $(#[$attr])* pub $field: $ty, )* }

        impl Metrics {
            /// The kinds of campaign (bits of [`R`], [`E`], [`T`]) whose runs fill each field,
            /// in field order.
            pub(crate) const KINDS: &[u8] = &[$( $($kind)|+ ),*];
        }
    };
}

run_metrics! {
/// What one run measured: a run's record (`runs.jsonl`) and the metric columns of `runs.csv`,
/// by their serde names, in field order. Empty fields do not apply to the run's kind; each
/// field's `[kinds]` says which kinds of campaign fill it, and so which `runs.csv` has its
/// column ([`crate::metric_columns`]).
///
/// Adding a metric: a field here (its doc, its kinds), the code that computes it (a `train`
/// run's in [`Metrics::from`] a `Summary`, the others' in `work.rs`), and its line in
/// docs/metrics.md's table of `runs.csv` (a test holds the table to this struct).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Recovery strategy (`train` runs).
    [T] strategy: Option<String>,
    /// `train` runs: the run failed (its strategy gave up, as `none` does at a crash) rather
    /// than completing its steps.
    [T] failed: Option<bool>,
    /// Training steps after the restart (`restart` runs; fewer when the weights collapsed).
    [R] steps: Option<u64>,
    /// Final test accuracy, a fraction in `[0, 1]` (`final_acc_frac`: every accuracy and
    /// overhead in `runs.csv` is a fraction, and its column name says so).
    #[serde(rename = "final_acc_frac", alias = "final_acc")]
    [ALL] final_acc: Option<f64>,
    /// Final test loss (`NaN`, `inf` or `-inf` when not finite).
    #[serde(default, with = "non_finite")]
    [ALL] final_loss: Option<f64>,
    /// Loss of the last training step (`restart` and `train` runs; `NaN`, `inf` or `-inf` when
    /// not finite).
    #[serde(default, with = "non_finite")]
    [R] final_train_loss: Option<f64>,
    /// The golden (fault-free) run's final test accuracy.
    #[serde(rename = "golden_acc_frac", alias = "golden_acc")]
    [ALL] golden_acc: Option<f64>,
    /// `golden_acc - final_acc`, a fraction (`acc_loss_frac`; the reports give it in points).
    #[serde(rename = "acc_loss_frac", alias = "acc_loss")]
    [ALL] acc_loss: Option<f64>,
    /// Data parallel: test accuracy of the first replica hit (`final_acc` is rank 0's).
    #[serde(rename = "hit_acc_frac", alias = "hit_acc")]
    [R | E] hit_acc: Option<f64>,
    /// Data parallel: test loss of the first replica hit.
    #[serde(default, with = "non_finite")]
    [R | E] hit_loss: Option<f64>,
    /// Data parallel: the lowest test accuracy of any replica.
    #[serde(rename = "replica_acc_min_frac", alias = "replica_acc_min")]
    [R | E] replica_acc_min: Option<f64>,
    /// Data parallel: the mean test accuracy of the replicas.
    #[serde(rename = "replica_acc_mean_frac", alias = "replica_acc_mean")]
    [R | E] replica_acc_mean: Option<f64>,
    /// Data parallel: the highest test accuracy of any replica.
    #[serde(rename = "replica_acc_max_frac", alias = "replica_acc_max")]
    [R | E] replica_acc_max: Option<f64>,
    /// Data parallel: every replica's test accuracy, in rank order, `;`-separated.
    #[serde(rename = "replica_accs_frac")]
    [R | E] replica_accs: Option<String>,
    /// Data parallel: every replica's test accuracy in the fault-free reference, evaluated the
    /// same way (each replica has its own BatchNorm statistics where they are not
    /// synchronised); empty where the reference did not evaluate its replicas.
    #[serde(rename = "golden_replica_accs_frac")]
    [R | E] golden_replica_accs: Option<String>,
    /// Data parallel: largest Euclidean distance between a replica's trainable parameters and
    /// rank 0's at the end (0: identical replicas).
    [R | E] replica_divergence: Option<f64>,
    /// Data parallel: replicas whose parameters differ from rank 0's at the end.
    [R | E] replicas_diverged: Option<u64>,
    /// N-EV by the outcome (docs/metrics.md): the run ends (or is stopped) with a NaN/Inf loss, or
    /// with a NaN/Inf or extreme parameter, buffer or optimizer value. In `eval` campaigns,
    /// where nothing trains after the injection, the evaluation's loss is NaN/Inf. The
    /// worker's verdict; the report decides from the evidence columns below, which say the same.
    [ALL] nev: Option<bool>,
    /// The injection itself left a NaN/Inf or extreme value in the state: what the altered
    /// checkpoint files hold, read before any restart broadcast, or what a mid-run fault wrote.
    /// Reported beside N-EV (the rate the injection alone predicts), never instead.
    [ALL] ev_injected: Option<bool>,
    /// Largest finite |value| of the parameters (every replica or stage) at the end.
    #[serde(default, with = "non_finite")]
    [R | E] param_max_abs: Option<f64>,
    /// Largest finite |value| of the buffers (BatchNorm running statistics) at the end.
    #[serde(default, with = "non_finite")]
    [R | E] buffer_max_abs: Option<f64>,
    /// Largest finite |value| of the optimizer state at the end.
    #[serde(default, with = "non_finite")]
    [R | E] optim_max_abs: Option<f64>,
    /// NaN/Inf parameter values at the end.
    [R | E] param_non_finite: Option<u64>,
    /// NaN/Inf buffer values at the end.
    [R | E] buffer_non_finite: Option<u64>,
    /// NaN/Inf optimizer values at the end.
    [R | E] optim_non_finite: Option<u64>,
    /// Largest |value| of the whole state at the restart or after any step (`inf` when one was
    /// infinite; steps whose state held a NaN are left out).
    #[serde(default, with = "non_finite")]
    [R] peak_abs: Option<f64>,
    /// The extreme-value threshold the run's N-EV used (docs/metrics.md: 1e10).
    [R | E] extreme_threshold: Option<f64>,
    /// The step the base checkpoint was written at (`restart` and `eval` runs).
    [R | E] base_step: Option<u64>,
    /// The step counter as the altered checkpoint restored it: differs from `base_step` when a
    /// flip hit the counter, which changes how many steps the continuation trains.
    [R | E] restart_step: Option<u64>,
    /// Steps after the restart at which the state first held a NaN/Inf (0: the altered
    /// checkpoint already did); a NaN/Inf in the state never goes away.
    [R] collapse_step: Option<u64>,
    /// Training collapsed: NaN/Inf in the state or the loss at the end (the NaN column).
    [ALL] collapsed: Option<bool>,
    /// The outcome class of the run's training curve against its golden run's (`train` runs
    /// with a golden run: `no_fault`, `masked`, `immediate_nan`, `slow_degrade`,
    /// `sharp_slow_degrade`, `sharp_degrade`, `low_test_acc`, `failed`; docs/metrics.md,
    /// "Outcome classes"); empty in runs recorded before this column.
    [T] outcome: Option<String>,
    /// The step from which the run stayed harmed to its end (the outcome's onset); empty for
    /// `no_fault` and `masked`.
    [T] outcome_onset_step: Option<u64>,
    /// Attempts of the injection or the faults that corrupted a value (or byte): one that left
    /// its value as it was (a dropped flip, a scaling by 1) counts too.
    [ALL] values_corrupted: Option<u64>,
    /// Of those, values left NaN/Inf/extreme by the injection itself.
    [ALL] non_finite_or_extreme_injected: Option<u64>,
    /// Ranks whose checkpoint files were altered, `;`-separated (the grid's `workers_hit` is
    /// how many).
    #[serde(alias = "workers_hit")]
    [R | E] ranks_hit: Option<String>,
    /// Layers (parameter paths) hit, `;`-separated.
    [ALL] layers: Option<String>,
    /// Bits flipped (reference numbering, 0 = sign), `;`-separated, every one.
    [ALL] bits: Option<String>,
    /// `train` runs: the words the flips altered, `;`-separated: `f32`, or in a bf16/fp16 run's
    /// half values `bf16`/`f16` (`faults.csv`'s `dtype`).
    [T] words: Option<String>,
    /// `train` runs: the targets of the faults that altered values (`gradients`, ...),
    /// `;`-separated.
    [T] fault_targets: Option<String>,
    /// Faults that struck (`train` runs).
    [T] faults: Option<u64>,
    /// Of those, crashes.
    [T] crashes: Option<u64>,
    /// Of those, faults that altered values (every target but a crash).
    [T] flips: Option<u64>,
    /// The first crash the job detected inside a step: the step.
    [T] first_crash_step: Option<u64>,
    /// Its time as a fraction of the step's simulated duration.
    [T] first_crash_fraction: Option<f64>,
    /// What the crashed worker was doing (`forward`, `backward`, `allreduce`, `update`).
    [T] first_crash_phase: Option<String>,
    /// All-reduce buckets completed when it struck (their update includes the crashed
    /// worker's gradient).
    [T] first_crash_buckets: Option<u64>,
    /// Crashes detected inside a step after at least one bucket's all-reduce had completed:
    /// the only ones after which rollback and lossy forward can hold different states.
    [T] crashes_after_bucket: Option<u64>,
    /// Detections (`train` runs).
    [T] detections: Option<u64>,
    /// Mean steps from a fault to its detection (`train` runs).
    [T] detection_latency: Option<f64>,
    /// Completed steps thrown away by restarts.
    [T] steps_lost: Option<u64>,
    /// Steps computed again (redone plus lost).
    [T] steps_recomputed: Option<u64>,
    /// Restarts from a checkpoint that relaunched the job (a process died, or the runtime
    /// cannot reload in place): `recovery.relaunch_s` each (`train` runs; empty in runs
    /// recorded before this column).
    [T] relaunches: Option<u64>,
    /// Restarts from a checkpoint that reloaded it in the running processes (the job was
    /// alive), no relaunch (`train` runs; empty in runs recorded before this column).
    [T] in_place_reloads: Option<u64>,
    /// Times the run was charged `recovery.detect_timeout_s` (a step with crashes the job went
    /// on after; `train` runs; empty in runs recorded before this column).
    [T] detect_charges: Option<u64>,
    /// Communicator rebuilds charged, `recovery.rebuild_s` each (`train` runs; empty in runs
    /// recorded before this column).
    [T] rebuilds: Option<u64>,
    /// Simulated seconds of the checkpoint reads and recomputed steps after relaunches, until
    /// the job was back at the step it had reached: in `sim_s` unless the relaunch's figure
    /// covered them (`recovery.relaunch_covers_redo`); what re-pricing at a profile whose
    /// relaunch does (or does not) cover them takes off (or adds) (`train` runs; empty in runs
    /// recorded before this column).
    [T] relaunch_redo_s: Option<f64>,
    /// fp16 runs: steps whose update the loss scaler skipped, their gradients holding an
    /// infinity or a NaN (empty without a loss scaler).
    [T] overflow_steps: Option<u64>,
    /// fp16 runs: faults that altered values in a step whose update the loss scaler skipped
    /// (what they did to that step's gradients was discarded; empty without a loss scaler).
    [T] scaler_skipped_faults: Option<u64>,
    /// Steps taken from the golden run's step cache instead of trained (`train` runs; 0 with
    /// `--no-shortcuts`): docs/campaigns.md, "Shortcuts".
    [T] shortcut_prefix_steps: Option<u64>,
    /// Steps after the run's last fault taken from the golden run's step cache, once its state
    /// was the golden run's again (`train` runs; 0 when not taken): docs/campaigns.md,
    /// "Shortcuts".
    [T] shortcut_remainder_steps: Option<u64>,
    /// Bytes of state the run's checkpoints held, summed over the checkpoints it wrote
    /// (`train` runs; `summary.json`'s `checkpoint_bytes`).
    [T] checkpoint_bytes: Option<u64>,
    /// Seconds the run took in its worker.
    [ALL] wall_s: Option<f64>,
    /// Where `wall_s` went (`restart` and `eval` runs): the run's phases in order,
    /// `name:seconds` joined by `;`: `copy` (the base files not altered), `inject` (the altered
    /// copies), `build` (model and trainer), `load` (the checkpoint restored), `steps`
    /// (`restart` only), `eval`, `evidence` (state scans and digests), `cleanup`.
    [R | E] phase_s: Option<String>,
    /// Seconds of the golden run (or the fault-free continuation).
    [R | T] golden_wall_s: Option<f64>,
    /// `(wall_s - golden_wall_s) / golden_wall_s`.
    #[serde(rename = "time_overhead_frac", alias = "time_overhead")]
    [R | T] time_overhead: Option<f64>,
    /// Overhead in simulated time against the golden run (`train` runs): deterministic when
    /// `parallel.compute.gflops` is set.
    #[serde(rename = "sim_overhead_frac", alias = "sim_overhead")]
    [T] sim_overhead: Option<f64>,
    /// Simulated seconds of the run (`train` runs).
    [T] sim_s: Option<f64>,
    /// Simulated seconds of its golden run.
    [T] golden_sim_s: Option<f64>,
    /// With `train.golden_ensemble` K > 1: the mean final test accuracy of the golden
    /// ensemble, what `acc_loss` is measured against (`golden_acc` is member 0's, the run's
    /// own golden run); empty without an ensemble and in runs recorded before this column.
    #[serde(rename = "golden_ensemble_mean_acc_frac", default)]
    [T] golden_ensemble_mean_acc: Option<f64>,
    /// With an ensemble: the sample standard deviation of its members' final test accuracies
    /// (the fault-free runs' run-to-run noise); empty otherwise.
    #[serde(rename = "golden_ensemble_sd_frac", default)]
    [T] golden_ensemble_sd: Option<f64>,
    /// Simulated seconds at the first evaluation that reached the golden run's final accuracy
    /// (`train` runs; empty: never reached).
    [T] time_to_golden_acc_s: Option<f64>,
    /// Workers (or stages) at the end (`train` runs).
    [T] workers_end: Option<u64>,
    /// Workers lost for good (`train` runs).
    [T] permanent_losses: Option<u64>,
    /// Spare nodes that took a lost worker's place.
    [T] spares_used: Option<u64>,
    /// Losses met with no spare left under `respawn` or `reinit`, shrunk instead.
    [T] spare_fallbacks: Option<u64>,
    /// Steps computed at each worker count, `workers:steps` pairs `;`-separated (`16:40;15:24`).
    [T] steps_at_workers: Option<String>,
    /// The batch rule in force after a shrink (`keep_global`, `keep_per_worker`); empty when
    /// the job never shrank.
    [T] batch_rule: Option<String>,
    /// The learning rate's factor at the end (the linear scaling rule).
    [T] lr_scale: Option<f64>,
    /// XXH3-64 digest of the final parameters.
    [ALL] digest: Option<String>,
    /// The golden (or base) run compared with and the platform key of its bits (backend,
    /// device, CPU model, instruction-set level): runs compared only where these are equal.
    [ALL] golden_key: Option<String>,
}
}

impl From<&Summary> for Metrics {
    /// A `train` run's record from its `summary.json` (all but `golden_key`, which needs the
    /// campaign's platform).
    fn from(s: &Summary) -> Self {
        let latencies: Vec<u64> = s.detections.iter().filter_map(|d| d.latency_steps).collect();
        let crashes: Vec<&resilab_recovery::DetectionRecord> = s.detections.iter().filter(|d| d.crash_phase.is_some()).collect();
        let first = crashes.first();
        let golden = s.golden.as_ref();
        Metrics {
            strategy: Some(s.strategy.clone()),
            failed: Some(s.status == resilab_runner::RunStatus::Failed),
            crashes: Some(s.faults.crashes_met as u64),
            flips: Some(s.faults.flips_met as u64),
            first_crash_step: first.map(|d| d.step),
            first_crash_fraction: first.and_then(|d| d.crash_fraction),
            first_crash_phase: first.and_then(|d| d.crash_phase).map(str::to_string),
            first_crash_buckets: first.and_then(|d| d.buckets).map(|b| b[0] as u64),
            crashes_after_bucket: Some(crashes.iter().filter(|d| d.buckets.is_some_and(|b| b[0] > 0)).count() as u64),
            final_acc: Some(s.final_test_acc),
            final_loss: Some(s.final_test_loss),
            golden_acc: golden.map(|g| g.final_test_acc),
            acc_loss: s.acc_loss_vs_golden,
            // N-EV by the outcome: what the run's state and loss are at its end, after recovery.
            nev: Some(s.collapsed || s.final_state_extreme),
            ev_injected: Some(s.faults.values_non_finite_or_extreme > 0),
            // A run whose strategy gave up is `failed`, its own class: not a NaN.
            collapsed: Some(s.collapsed),
            outcome: s.outcome.map(|o| o.name().to_string()),
            outcome_onset_step: s.outcome_onset_step,
            values_corrupted: Some(s.faults.values_corrupted as u64),
            non_finite_or_extreme_injected: Some(s.faults.values_non_finite_or_extreme as u64),
            faults: Some(s.faults.faults_injected as u64),
            detections: Some(s.detections.len() as u64),
            detection_latency: (!latencies.is_empty()).then(|| latencies.iter().sum::<u64>() as f64 / latencies.len() as f64),
            steps_lost: Some(s.steps_lost),
            steps_recomputed: Some(s.steps_recomputed),
            relaunches: Some(s.time.relaunches),
            in_place_reloads: Some(s.time.in_place_reloads),
            detect_charges: Some(s.time.detect_charges),
            rebuilds: Some(s.time.rebuilds),
            relaunch_redo_s: Some(s.time.simulated_relaunch_redo_s),
            overflow_steps: s.scaler_skipped_faults.map(|_| s.overflow_steps),
            scaler_skipped_faults: s.scaler_skipped_faults,
            shortcut_prefix_steps: Some(s.shortcut_prefix_steps),
            shortcut_remainder_steps: Some(s.shortcut_remainder_steps),
            checkpoint_bytes: Some(s.checkpoint_bytes),
            wall_s: Some(s.wall_s),
            golden_wall_s: golden.map(|g| g.wall_s),
            time_overhead: s.time_overhead_vs_golden,
            sim_overhead: s.simulated_overhead_vs_golden,
            sim_s: Some(s.time.simulated_s),
            golden_sim_s: golden.and_then(|g| g.simulated_s),
            golden_ensemble_mean_acc: s.golden_ensemble_mean_acc_frac,
            golden_ensemble_sd: s.golden_ensemble_sd_frac,
            time_to_golden_acc_s: s.simulated_s_to_golden_acc,
            workers_end: Some(s.workers.at_end as u64),
            permanent_losses: Some(s.workers.permanent_losses),
            spares_used: Some(s.workers.spares_used),
            spare_fallbacks: Some(s.workers.spare_fallbacks),
            steps_at_workers: Some(s.workers.steps_at_workers.iter().map(|(w, n)| format!("{w}:{n}")).collect::<Vec<_>>().join(";")),
            batch_rule: s.workers.batch_rule.clone(),
            lr_scale: Some(s.workers.lr_scale_at_end),
            digest: Some(s.final_params_digest.clone()),
            ..Metrics::default()
        }
    }
}

/// Serde for a float that may be NaN or infinite: finite values as JSON numbers, the others as
/// the strings `NaN`, `inf` and `-inf` (which pandas and spreadsheets read as such in the CSV),
/// so a non-finite loss or value is recorded as what it was, never as an empty field.
pub mod non_finite {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `v`.
    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(x) if x.is_finite() => s.serialize_f64(*x),
            Some(x) => s.serialize_str(text(*x)),
        }
    }

    /// The spelling of a non-finite value.
    pub fn text(x: f64) -> &'static str {
        if x.is_nan() {
            "NaN"
        } else if x > 0.0 {
            "inf"
        } else {
            "-inf"
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(f64),
        Text(String),
    }

    /// Reads a number, `NaN`, `inf`, `-inf` or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(match Option::<Value>::deserialize(d)? {
            None => None,
            Some(Value::Number(x)) => Some(x),
            Some(Value::Text(t)) => Some(match t.as_str() {
                "NaN" | "nan" => f64::NAN,
                "inf" | "Infinity" => f64::INFINITY,
                "-inf" | "-Infinity" => f64::NEG_INFINITY,
                other => return Err(serde::de::Error::custom(format!("not a number: {other:?}"))),
            }),
        })
    }
}
