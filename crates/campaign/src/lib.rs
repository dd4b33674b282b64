//! Fault-injection campaigns: a grid of runs (models x strategies x fault settings x workers
//! hit x seeds x repetitions) carried out by worker processes, one row per finished run in
//! `runs.jsonl` and `runs.csv`.
//!
//! A campaign directory holds `campaign.toml` (the campaign as run, overrides applied),
//! `campaign.json` (platform and start time), `runs.jsonl` (the record: one JSON object per
//! finished run, appended and flushed as each run ends), `runs.csv` (the same rows, for
//! spreadsheets), `bases/` (base checkpoints and their fault-free continuations), `golden/`
//! (golden runs of `train` campaigns), `runs/` (each `train` run's files) and `logs/` (each
//! worker process's standard error).

mod census;
mod columns;
mod command;
mod csv_record;
mod ending;
mod estimate;
mod exec;
mod fault_log;
pub mod layers;
mod merge;
mod meta;
pub mod output;
mod phases;
mod spec;
mod store;
mod work;

pub use census::{Census, Part, census};
pub use columns::{WALL_CLOCK_COLUMNS, metric_columns};
pub use command::{human_duration, jobs_for, serve, worker_command};
pub use csv_record::{read_csv_rows, read_record, record_path};
pub use estimate::{Estimate, SetupCost, estimate};
pub use exec::{Options, Outcome, execute};
pub use fault_log::{FAULTS_CSV, faults_csv};
pub use merge::{Merged, merge};
pub use meta::parse_shard;
pub use spec::{Axis, Campaign, GridRun, Hypothesis, HypothesisMetric, Kind, MAX_RUNS, RunSpec, SelfTest, Settings};
pub use store::{Row, read_rows, write_csv};
pub use work::{BaseGolden, Job, REPLY_PREFIX, Reply, Worker, base_dir, mean_checkpoint_s, read_json};

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The campaign as run, in its directory.
pub const CAMPAIGN_FILE: &str = "campaign.toml";
/// The record of finished runs.
pub const RUNS_JSONL: &str = "runs.jsonl";
/// The same rows as CSV.
pub const RUNS_CSV: &str = "runs.csv";
/// What a worker prints once it is ready for jobs.
pub const READY_LINE: &str = "@resilab-ready";

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Finished; its metrics are valid.
    Ok,
    /// Failed with an error (message recorded).
    Error,
    /// An altered checkpoint could not be read (structurally corrupt).
    CorruptFile,
    /// Panicked inside the worker.
    Panicked,
    /// The worker process died during the run.
    Crashed,
    /// Took longer than the timeout and was killed.
    Timeout,
    /// Its base (or golden) run failed, so it did not run.
    BaseFailed,
    /// The machine failed, not the experiment: a full, over-quota or read-only file system, or
    /// an I/O error. Never recorded: the campaign stops, and `--resume` runs it again.
    Infrastructure,
}

impl Status {
    /// The spelling in `runs.csv`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::CorruptFile => "corrupt_file",
            Status::Infrastructure => "infrastructure",
            Status::Panicked => "panicked",
            Status::Crashed => "crashed",
            Status::Timeout => "timeout",
            Status::BaseFailed => "base_failed",
        }
    }
}

/// What one run measured. Empty fields do not apply to the run's kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Recovery strategy (`train` runs).
    pub strategy: Option<String>,
    /// `train` runs: the run failed (its strategy gave up, as `none` does at a crash) rather
    /// than completing its steps.
    pub failed: Option<bool>,
    /// Training steps after the restart (`restart` runs; fewer when the weights collapsed).
    pub steps: Option<u64>,
    /// Final test accuracy, a fraction in `[0, 1]` (`final_acc_frac`: every accuracy and
    /// overhead in `runs.csv` is a fraction, and its column name says so).
    #[serde(rename = "final_acc_frac", alias = "final_acc")]
    pub final_acc: Option<f64>,
    /// Final test loss (`NaN`, `inf` or `-inf` when not finite).
    #[serde(default, with = "non_finite")]
    pub final_loss: Option<f64>,
    /// Loss of the last training step (`restart` and `train` runs; `NaN`, `inf` or `-inf` when
    /// not finite).
    #[serde(default, with = "non_finite")]
    pub final_train_loss: Option<f64>,
    /// The golden (fault-free) run's final test accuracy.
    #[serde(rename = "golden_acc_frac", alias = "golden_acc")]
    pub golden_acc: Option<f64>,
    /// `golden_acc - final_acc`, a fraction (`acc_loss_frac`; the reports give it in points).
    #[serde(rename = "acc_loss_frac", alias = "acc_loss")]
    pub acc_loss: Option<f64>,
    /// Data parallel: test accuracy of the first replica hit (`final_acc` is rank 0's).
    #[serde(rename = "hit_acc_frac", alias = "hit_acc")]
    pub hit_acc: Option<f64>,
    /// Data parallel: test loss of the first replica hit.
    #[serde(default, with = "non_finite")]
    pub hit_loss: Option<f64>,
    /// Data parallel: the lowest test accuracy of any replica.
    #[serde(rename = "replica_acc_min_frac", alias = "replica_acc_min")]
    pub replica_acc_min: Option<f64>,
    /// Data parallel: the mean test accuracy of the replicas.
    #[serde(rename = "replica_acc_mean_frac", alias = "replica_acc_mean")]
    pub replica_acc_mean: Option<f64>,
    /// Data parallel: the highest test accuracy of any replica.
    #[serde(rename = "replica_acc_max_frac", alias = "replica_acc_max")]
    pub replica_acc_max: Option<f64>,
    /// Data parallel: every replica's test accuracy, in rank order, `;`-separated.
    #[serde(rename = "replica_accs_frac")]
    pub replica_accs: Option<String>,
    /// Data parallel: every replica's test accuracy in the fault-free reference, evaluated the
    /// same way (each replica has its own BatchNorm statistics where they are not
    /// synchronised); empty where the reference did not evaluate its replicas.
    #[serde(rename = "golden_replica_accs_frac")]
    pub golden_replica_accs: Option<String>,
    /// Data parallel: largest Euclidean distance between a replica's trainable parameters and
    /// rank 0's at the end (0: identical replicas).
    pub replica_divergence: Option<f64>,
    /// Data parallel: replicas whose parameters differ from rank 0's at the end.
    pub replicas_diverged: Option<u64>,
    /// N-EV by the outcome (docs/metrics.md): the run ends (or is stopped) with a NaN/Inf loss, or
    /// with a NaN/Inf or extreme parameter, buffer or optimizer value. In `eval` campaigns,
    /// where nothing trains after the injection, the evaluation's loss is NaN/Inf. The
    /// worker's verdict; the report decides from the evidence columns below, which say the same.
    pub nev: Option<bool>,
    /// The injection itself left a NaN/Inf or extreme value in the state: what the altered
    /// checkpoint files hold, read before any restart broadcast, or what a mid-run fault wrote.
    /// Reported beside N-EV (the rate the injection alone predicts), never instead.
    pub ev_injected: Option<bool>,
    /// Largest finite |value| of the parameters (every replica or stage) at the end.
    #[serde(default, with = "non_finite")]
    pub param_max_abs: Option<f64>,
    /// Largest finite |value| of the buffers (BatchNorm running statistics) at the end.
    #[serde(default, with = "non_finite")]
    pub buffer_max_abs: Option<f64>,
    /// Largest finite |value| of the optimizer state at the end.
    #[serde(default, with = "non_finite")]
    pub optim_max_abs: Option<f64>,
    /// NaN/Inf parameter values at the end.
    pub param_non_finite: Option<u64>,
    /// NaN/Inf buffer values at the end.
    pub buffer_non_finite: Option<u64>,
    /// NaN/Inf optimizer values at the end.
    pub optim_non_finite: Option<u64>,
    /// Largest |value| of the whole state at the restart or after any step (`inf` when one was
    /// infinite; steps whose state held a NaN are left out).
    #[serde(default, with = "non_finite")]
    pub peak_abs: Option<f64>,
    /// The extreme-value threshold the run's N-EV used (docs/metrics.md: 1e10).
    pub extreme_threshold: Option<f64>,
    /// The step the base checkpoint was written at (`restart` and `eval` runs).
    pub base_step: Option<u64>,
    /// The step counter as the altered checkpoint restored it: differs from `base_step` when a
    /// flip hit the counter, which changes how many steps the continuation trains.
    pub restart_step: Option<u64>,
    /// Steps after the restart at which the state first held a NaN/Inf (0: the altered
    /// checkpoint already did); a NaN/Inf in the state never goes away.
    pub collapse_step: Option<u64>,
    /// Training collapsed: NaN/Inf in the state or the loss at the end (the NaN column).
    pub collapsed: Option<bool>,
    /// Values (or bytes) the injection changed.
    pub values_corrupted: Option<u64>,
    /// Of those, values left NaN/Inf/extreme by the injection itself.
    pub non_finite_or_extreme_injected: Option<u64>,
    /// Ranks whose checkpoint files were altered, `;`-separated (the grid's `workers_hit` is
    /// how many).
    #[serde(alias = "workers_hit")]
    pub ranks_hit: Option<String>,
    /// Layers (parameter paths) hit, `;`-separated.
    pub layers: Option<String>,
    /// Bits flipped (reference numbering, 0 = sign), `;`-separated, every one.
    pub bits: Option<String>,
    /// Faults that struck (`train` runs).
    pub faults: Option<u64>,
    /// Of those, crashes.
    pub crashes: Option<u64>,
    /// Of those, faults that altered values (every target but a crash).
    pub flips: Option<u64>,
    /// The first crash the job detected inside a step: the step.
    pub first_crash_step: Option<u64>,
    /// Its time as a fraction of the step's simulated duration.
    pub first_crash_fraction: Option<f64>,
    /// What the crashed worker was doing (`forward`, `backward`, `allreduce`, `update`).
    pub first_crash_phase: Option<String>,
    /// All-reduce buckets completed when it struck (their update includes the crashed
    /// worker's gradient).
    pub first_crash_buckets: Option<u64>,
    /// Crashes detected inside a step after at least one bucket's all-reduce had completed:
    /// the only ones after which rollback and lossy forward can hold different states.
    pub crashes_after_bucket: Option<u64>,
    /// Detections (`train` runs).
    pub detections: Option<u64>,
    /// Mean steps from a fault to its detection (`train` runs).
    pub detection_latency: Option<f64>,
    /// Completed steps thrown away by restarts.
    pub steps_lost: Option<u64>,
    /// Steps computed again (redone plus lost).
    pub steps_recomputed: Option<u64>,
    /// Steps taken from the golden run's step cache instead of trained (`train` runs; 0 with
    /// `--no-shortcuts`): docs/campaigns.md, "Shortcuts".
    pub shortcut_prefix_steps: Option<u64>,
    /// Steps after the run's last fault taken from the golden run's step cache, once its state
    /// was the golden run's again (`train` runs; 0 when not taken): docs/campaigns.md,
    /// "Shortcuts".
    pub shortcut_remainder_steps: Option<u64>,
    /// Seconds the run took in its worker.
    pub wall_s: Option<f64>,
    /// Where `wall_s` went (`restart` and `eval` runs): the run's phases in order,
    /// `name:seconds` joined by `;`: `copy` (the base files not altered), `inject` (the altered
    /// copies), `build` (model and trainer), `load` (the checkpoint restored), `steps`
    /// (`restart` only), `eval`, `evidence` (state scans and digests), `cleanup`.
    pub phase_s: Option<String>,
    /// Seconds of the golden run (or the fault-free continuation).
    pub golden_wall_s: Option<f64>,
    /// `(wall_s - golden_wall_s) / golden_wall_s`.
    #[serde(rename = "time_overhead_frac", alias = "time_overhead")]
    pub time_overhead: Option<f64>,
    /// Overhead in simulated time against the golden run (`train` runs): deterministic when
    /// `parallel.compute.gflops` is set.
    #[serde(rename = "sim_overhead_frac", alias = "sim_overhead")]
    pub sim_overhead: Option<f64>,
    /// Simulated seconds of the run (`train` runs).
    pub sim_s: Option<f64>,
    /// Simulated seconds of its golden run.
    pub golden_sim_s: Option<f64>,
    /// Simulated seconds at the first evaluation that reached the golden run's final accuracy
    /// (`train` runs; empty: never reached).
    pub time_to_golden_acc_s: Option<f64>,
    /// Workers (or stages) at the end (`train` runs).
    pub workers_end: Option<u64>,
    /// Workers lost for good (`train` runs).
    pub permanent_losses: Option<u64>,
    /// Spare nodes that took a lost worker's place.
    pub spares_used: Option<u64>,
    /// Losses met with no spare left under `respawn` or `reinit`, shrunk instead.
    pub spare_fallbacks: Option<u64>,
    /// Steps computed at each worker count, `workers:steps` pairs `;`-separated (`16:40;15:24`).
    pub steps_at_workers: Option<String>,
    /// The batch rule in force after a shrink (`keep_global`, `keep_per_worker`); empty when
    /// the job never shrank.
    pub batch_rule: Option<String>,
    /// The learning rate's factor at the end (the linear scaling rule).
    pub lr_scale: Option<f64>,
    /// XXH3-64 digest of the final parameters.
    pub digest: Option<String>,
    /// The golden (or base) run compared with and the platform key of its bits (backend,
    /// device, CPU model, instruction-set level): runs compared only where these are equal.
    pub golden_key: Option<String>,
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

/// Errors of campaigns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad campaign file, option or state of the campaign directory: only what the user
    /// gave (runtime failures have their own variants).
    #[error("{0}")]
    Config(String),
    /// A campaign worker process could not be started.
    #[error("could not start a worker process ({})", program.display())]
    WorkerStart {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A campaign worker process failed, or broke the job protocol (a reply that is not one, a
    /// closed channel).
    #[error("campaign worker: {0}")]
    Worker(String),
    /// A record could not be encoded or decoded as JSON.
    #[error("{what}")]
    Json {
        /// The record or file.
        what: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A CSV file could not be written.
    #[error("{path}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// Why.
        source: csv::Error,
    },
    /// A base (or golden) run of the campaign left no usable output.
    #[error("{0}")]
    Base(String),
    /// A file could not be read or written. The cause is the error's source, printed once
    /// after the path by `{:#}` (or [`resilab_runner::one_line`]).
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of `runs.jsonl` is not a run record.
    #[error("{path} line {line}: not a run record")]
    Record {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// A row of `runs.jsonl` is not a run of its campaign's grid, or records a run again with
    /// another result.
    #[error("{path} line {line}: {why}")]
    Row {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A campaign directory without its record (`runs.jsonl` or `runs.csv`): a merge or a
    /// campaign's start that did not finish, not a campaign with no runs recorded.
    #[error(
        "{0}: holds {CAMPAIGN_FILE} but no record of runs ({RUNS_JSONL} or {RUNS_CSV}): a merge or a campaign start that did not finish; merge it again, or continue it with `campaign --resume`"
    )]
    NoRecord(PathBuf),
    /// An output directory given is something else.
    #[error("{what} {} is {kind}, not a directory", path.display())]
    NotADirectory {
        /// The option that named it (`--out`).
        what: String,
        /// The path.
        path: PathBuf,
        /// What it is instead (`a file`).
        kind: &'static str,
    },
    /// An altered checkpoint could not be read.
    #[error("{0}")]
    CorruptFile(String),
    /// A worker process was ended by TERM, INT or HUP: someone stopped the campaign. Nothing is
    /// recorded for the run it held, and the campaign stops; `--resume` runs the run again.
    #[error(
        "the campaign was interrupted: worker process {worker} was ended by {} during {during}; nothing is recorded for it, and `campaign --resume` runs it again",
        resilab_runner::interrupt::signal_name(*signal)
    )]
    Interrupted {
        /// The signal.
        signal: i32,
        /// The worker's slot (its log is `logs/worker-{worker}.log`).
        worker: usize,
        /// What it was doing.
        during: String,
    },
    /// A run failed.
    #[error(transparent)]
    Runner(#[from] resilab_runner::Error),
    /// A checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] resilab_checkpoint::Error),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The operating-system errors that are the machine's, not the experiment's.
const MACHINE_ERRNOS: &[(i32, &str)] =
    &[(28, "No space left on device"), (122, "Disk quota exceeded"), (30, "Read-only file system"), (5, "Input/output error")];

/// Whether `e` (or an error it wraps, or the text of one that only carries a message, as the
/// HDF5 library's do) is a full, over-quota or read-only file system or an I/O error: the
/// machine failing rather than the experiment. Returns that cause's description.
pub fn infrastructure(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(code) = err.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error)
            && let Some((_, what)) = MACHINE_ERRNOS.iter().find(|(c, _)| *c == code)
        {
            return Some(what);
        }
        next = err.source();
    }
    infrastructure_text(&e.to_string())
}

/// [`infrastructure`] for an error known only by its text.
pub fn infrastructure_text(text: &str) -> Option<&'static str> {
    MACHINE_ERRNOS.iter().find(|(_, what)| text.contains(what)).map(|(_, what)| *what)
}
