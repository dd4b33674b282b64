//! The command line's types: every subcommand and flag, with the help text `--help` shows.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use resilab_runner::BackendKind;

/// A testbed for studying how deep-learning training survives soft errors.
#[derive(Parser)]
#[command(name = "resilab", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Train a model from a TOML configuration; writes metrics.csv, summary.json and
    /// config.resolved.toml into the output directory.
    Train(TrainArgs),
    /// Run one configuration (with its [[fault]] entries) under several recovery strategies
    /// and print a one-screen comparison against the golden run; each run's files go to
    /// <out>/<strategy>/ and the table to <out>/strategies.csv.
    Compare(CompareArgs),
    /// List a checkpoint's attributes and datasets (shape, type, digest status).
    Inspect(InspectArgs),
    /// Test accuracy and NaN / Inf / extreme-value counts of the model in a (possibly
    /// corrupted) checkpoint, without training; prints a summary, or one JSON line with --json.
    Eval(EvalArgs),
    /// Read a PyTorch state_dict or training checkpoint (.pt, .pth) or a .safetensors file for
    /// the model a run configuration describes, and write it as step 0 of that run: a
    /// checkpoint directory that eval, inject, diff and train --resume take (docs/pytorch.md).
    Import(ImportArgs),
    /// Write a checkpoint's model (and with --optimizer its optimizer state) as a .safetensors
    /// file under PyTorch's names, for load_state_dict(..., strict=True) (docs/pytorch.md).
    Export(ExportArgs),
    /// Optimal checkpoint intervals (Young, Daly) for a checkpoint cost and a mean time between
    /// failures, and the expected share of time lost at each.
    Advise(AdviseArgs),
    /// Each recovery strategy's expected overhead for N data-parallel workers (the model,
    /// batch per worker, cost model and recovery settings of a run configuration), from the
    /// same cost model the simulation charges: step timeline, checkpoint writes and reads,
    /// rollback's copy, failure detection, communicator rebuilds, relaunches and respawn
    /// transfers; then where the cheapest strategy changes as each constant moves. Needs
    /// parallel.compute.gflops.
    Project(ProjectArgs),
    /// Internal: open and verify a checkpoint file in this process (used as a crash guard).
    #[command(hide = true, name = "__probe")]
    Probe {
        /// The file.
        file: PathBuf,
    },
    /// Flip bits in an HDF5 file (checkpoint alteration): values through the HDF5 API, or raw
    /// bytes. Reads the published injector's YAML configs unchanged, or the same keys in TOML.
    /// Writes a corrupted copy (the input is untouched unless --in-place) and a JSON-lines log
    /// with one line per attempt.
    Inject(InjectArgs),
    /// Compare two HDF5 files dataset by dataset: values that differ, their share, the bits that
    /// differ, largest absolute and relative change, NaN/Inf counts.
    Diff(DiffArgs),
    /// Run a fault-injection campaign: a grid of runs (models x fault settings x workers hit x
    /// strategies x seeds x repetitions) in parallel worker processes. Each finished run is
    /// appended to <out>/runs.jsonl and <out>/runs.csv; a run that crashes, hangs or meets a
    /// corrupt file is recorded as such and the campaign goes on.
    Campaign(CampaignArgs),
    /// Merge campaign directories (shards of one campaign) into one, rows sorted by grid index.
    /// Checks that every part holds the same campaign, that no run is recorded by two parts
    /// with different results, and that every run of the grid is recorded (unless --partial).
    Merge(MergeArgs),
    /// Write a campaign's report: per grid cell the metrics (ACC, STD, CV, NaN, N-EV by the
    /// outcome, EV injected, RWC, AccR, TF, accuracy loss, time overhead, lost/recomputed steps,
    /// detection latency) with Wilson 95% intervals, as <out>/report.md and <out>/cells.csv; every
    /// pairwise difference with its test (Holm-adjusted) in <out>/comparisons.csv; plots (PNG
    /// and SVG) in <out>/plots. With --paper, instead: results/paper/README.md from the paper
    /// presets' reports.
    Report(ReportArgs),
    /// Internal: a campaign worker process (jobs on standard input, replies on standard output).
    #[command(hide = true, name = "__campaign-worker")]
    CampaignWorker(WorkerArgs),
    /// Measure performance.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args)]
pub(crate) struct CampaignArgs {
    /// The campaign file (TOML: [campaign], [base], [inject], [grid]; see configs/paper/).
    #[arg(long, short, value_name = "FILE", required_unless_present = "status")]
    pub(crate) config: Option<PathBuf>,
    /// Say how many runs each campaign directory (a shard each, e.g. results/campaigns/nev-shard-*)
    /// has recorded, by status, and how many are missing, without running or merging anything.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with_all = ["config", "resume", "dry_run", "shard", "out"])]
    pub(crate) status: Vec<PathBuf>,
    /// Override a campaign key (repeatable), e.g. --set campaign.repetitions=250 or
    /// --set 'grid."inject.injection_tries"=[1, 10, 100, 1000]'.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Worker processes (default: the cores divided by --threads).
    #[arg(long, short, value_name = "N")]
    pub(crate) jobs: Option<usize>,
    /// Compute threads per worker process.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) threads: usize,
    /// Allow --jobs x --threads to exceed the machine's cores.
    #[arg(long)]
    pub(crate) oversubscribe: bool,
    /// Run only the runs whose grid index is I modulo N (0 <= I < N), e.g. one Slurm array
    /// task each; combine the shards' directories with `resilab merge`.
    #[arg(long, value_name = "I/N")]
    pub(crate) shard: Option<String>,
    /// Continue the campaign in --out: runs already recorded are skipped.
    #[arg(long)]
    pub(crate) resume: bool,
    /// The campaign directory (default: results/campaigns/<name>); a new campaign needs a new or
    /// empty one.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Print the number of runs and an estimated time from step times measured now, and stop.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Seconds a run may take before it is killed and recorded as `timeout` (default: the
    /// campaign's timeout_s; base runs get ten times as long).
    #[arg(long, value_name = "S")]
    pub(crate) timeout: Option<f64>,
    /// Do not show a progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Train every step of every train run: no run takes the steps before its first fault from
    /// the golden run's step cache (the results are the same bits either way; see
    /// docs/campaigns.md, "Shortcuts").
    #[arg(long)]
    pub(crate) no_shortcuts: bool,
    /// Compute backend: native (default: flex with resilab's kernels), flex, ndarray,
    /// wgpu or tch (ndarray, wgpu and tch need a build with their feature, see
    /// `resilab train --help`).
    #[arg(long, value_name = "NAME")]
    pub(crate) backend: Option<BackendKind>,
    /// The wgpu adapter (see `resilab train --help`).
    #[arg(long, value_name = "ADAPTER", env = "RESILAB_WGPU_DEVICE", default_value = "default")]
    pub(crate) wgpu_device: String,
}

#[derive(Args)]
pub(crate) struct ReportArgs {
    /// The campaign directory (holding campaign.toml and runs.jsonl); with --paper, the folder
    /// of the paper presets' reports.
    pub(crate) dir: PathBuf,
    /// Where to write the report (default: <dir>/report): a new or empty directory, or an
    /// earlier report's.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Write nothing; print, for every comparison the report tests, what its runs detect now
    /// and the runs per cell needed to detect a difference of D (points for rates and accuracy
    /// losses, % for overheads) with 80% power at Holm's strictest level for the report.
    #[arg(long, value_name = "D", conflicts_with = "out")]
    pub(crate) power: Option<f64>,
    /// Read <dir> as the folder of the paper presets' reports (results/paper: one folder per
    /// configs/paper/ preset, as scripts/paper.sh leaves them) and write <dir>/README.md from
    /// them: a summary table, each preset's cells and its claims' verdicts counted from its
    /// comparisons.csv, the N-EV factor study's pooled tests. Nothing else is written.
    #[arg(long, conflicts_with_all = ["out", "power"])]
    pub(crate) paper: bool,
    /// Re-price every run of a `train` campaign at another recovery constant, from the events
    /// each run paid for (no run trained again): `recovery.detect_timeout_s`,
    /// `recovery.rebuild_s` or `recovery.relaunch_s`, in seconds; repeatable. The overheads in
    /// simulated time and the study's choices follow the new prices; report.md states them.
    #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with_all = ["power", "paper"])]
    pub(crate) set: Vec<String>,
    /// Re-price every run at a cost profile (megascale-optimised, megascale-unoptimised;
    /// docs/recovery.md, "Cost profiles"): its detection, rebuild and relaunch, each times
    /// --price-scale, and whether its relaunch covers the checkpoint read and the recomputed
    /// steps; --set then overrides one constant at a time.
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["power", "paper"])]
    pub(crate) price: Option<String>,
    /// Simulated seconds per second of the --price profile (the modelled step over the real
    /// job's); default: each run's recovery.profile_scale (an error where a run has none).
    #[arg(long, value_name = "S", requires = "price")]
    pub(crate) price_scale: Option<f64>,
    /// Price the "which strategy when" table of a `train` study at these real jobs instead of
    /// its campaign's `[[campaign.job]]`: a TOML file of `[[job]]` tables (name, gpus,
    /// gpus_per_node, step_s, failures_per_1000_node_days, source; docs/recovery.md, "Priced at
    /// real jobs"). The accuracy side stays the runs'; the cost side is the runs' cost per fault
    /// at the job's step and failure rate.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["power", "paper"])]
    pub(crate) at_jobs: Option<PathBuf>,
    /// Also score every detector from the signals the runs recorded (detect.record_signals):
    /// its runs' own detections are made again from their signals.csv and checked, then each
    /// detector is swept over its thresholds, without training again: recall on the harmed runs
    /// before the harm's onset, precision, false alarms per 1,000 steps in the golden runs and
    /// the masked ones, latency and measured cost per step (detectors.csv), the setting that
    /// meets --false-alarm-budget (detector_choice.csv), what it catches of each outcome class
    /// (detector_classes.csv) and plots/detectors.png.
    #[arg(long, conflicts_with_all = ["power", "paper"])]
    pub(crate) detectors: bool,
    /// With --detectors: the false alarms per 1,000 fault-free steps a detector's chosen
    /// setting may raise, as the one-sided 95% upper bound over the golden runs' steps.
    #[arg(long, value_name = "N", default_value_t = 1.0, requires = "detectors")]
    pub(crate) false_alarm_budget: f64,
}

#[derive(Args)]
pub(crate) struct MergeArgs {
    /// The merged campaign directory (may be one of the inputs; otherwise new or empty).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Campaign directories to merge.
    #[arg(required = true, value_name = "DIR")]
    pub(crate) dirs: Vec<PathBuf>,
    /// Merge even though some runs of the grid are recorded by no part (a shard that has not
    /// finished); they are counted and named on standard error.
    #[arg(long)]
    pub(crate) partial: bool,
}

#[derive(Args)]
pub(crate) struct WorkerArgs {
    /// The campaign directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// Train every step of every run (see `resilab campaign --no-shortcuts`).
    #[arg(long)]
    pub(crate) no_shortcuts: bool,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct InjectArgs {
    /// Injection config (.yaml/.yml or .toml; keys in docs/injector.md). Not needed with --replay.
    #[arg(long, short, value_name = "FILE", required_unless_present = "replay")]
    pub(crate) config: Option<PathBuf>,
    /// The HDF5 file to corrupt (overrides the config's `hdf5_file`; with --replay, defaults to
    /// the input named in the log).
    #[arg(long, short, value_name = "H5")]
    pub(crate) file: Option<PathBuf>,
    /// Seed of every draw (overrides the config's `seed`; without either a fresh seed is drawn,
    /// printed and logged).
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Where to write the corrupted copy (default: <input stem>.injected.h5 beside the input).
    /// May not name the input or the log, under any spelling (links, `..`).
    #[arg(long, short, value_name = "OUT.h5", conflicts_with = "in_place")]
    pub(crate) output: Option<PathBuf>,
    /// Corrupt the input file itself (replaced atomically once every flip is written). An input
    /// that is a symbolic link or has other hard links is refused unless --replace-link.
    #[arg(long)]
    pub(crate) in_place: bool,
    /// With --in-place on a symbolic link or a file with other hard links: replace that name
    /// with a file of its own holding the corrupted content; the link's target (or the other
    /// names) keep the old content. A warning says so.
    #[arg(long, requires = "in_place")]
    pub(crate) replace_link: bool,
    /// Where to write the log (default: the output path with .log.jsonl instead of .h5). May not
    /// name the input or the output, under any spelling (links, `..`). An existing file is
    /// refused unless --force.
    #[arg(long, value_name = "LOG.jsonl")]
    pub(crate) log: Option<PathBuf>,
    /// Replace an existing --log file.
    #[arg(long, requires = "log")]
    pub(crate) force: bool,
    /// Leave out of the candidates the datasets whose values cannot be read (a type other than
    /// integers and 16/32/64-bit floats), naming them in a warning and in the log's header;
    /// without it, such a dataset the config targets is an error naming it.
    #[arg(long)]
    pub(crate) skip_unreadable: bool,
    /// Redo exactly the corruption recorded in a log (same datasets, elements, bits, order)
    /// instead of drawing new flips.
    #[arg(long, value_name = "LOG.jsonl")]
    pub(crate) replay: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct DiffArgs {
    /// The first file (e.g. the original checkpoint).
    pub(crate) a: PathBuf,
    /// The second file (e.g. the corrupted copy).
    pub(crate) b: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// List every dataset in the table, not only those that differ.
    #[arg(long)]
    pub(crate) all: bool,
}

/// Options shared by every command that computes.
#[derive(Args, Clone)]
pub(crate) struct ComputeArgs {
    /// CPU threads for the compute backend (default: all cores).
    #[arg(long, value_name = "N")]
    pub(crate) threads: Option<usize>,
    /// Compute backend: native (the default: Burn's pure-Rust flex CPU backend with resilab's
    /// own kernels: convolutions and fully connected layers as GEMMs, BatchNorm fused with its
    /// ReLU), flex (Burn's flex as Burn ships it), ndarray (Burn's older CPU backend; needs a
    /// build with `--features ndarray`), wgpu (GPU; needs a build with `--features wgpu`) or
    /// tch (LibTorch on the CPU, faster than flex for VGG and AlexNet; needs a build with
    /// `--features tch`).
    /// Overrides the config's `backend` key.
    #[arg(long, value_name = "NAME")]
    pub(crate) backend: Option<BackendKind>,
    /// The wgpu adapter: default (wgpu's choice, a high-performance GPU first), discrete[:N],
    /// integrated[:N], virtual[:N] (the N-th adapter of that kind, from 0) or cpu (a software
    /// rasteriser such as Mesa's lavapipe). The run records the adapter's name.
    #[arg(long, value_name = "ADAPTER", env = "RESILAB_WGPU_DEVICE", default_value = "default")]
    pub(crate) wgpu_device: String,
}

#[derive(Args)]
pub(crate) struct TrainArgs {
    /// The run configuration (TOML).
    #[arg(long, short, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Override a configuration key, e.g. `--set train.epochs=3` (repeatable; dotted keys
    /// address sections; values are TOML: numbers, booleans, "strings", [lists]).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Output directory (default: results/runs/<name>-<UTC time>): new, empty, or an earlier
    /// run's (resilab writes nowhere else). A relative checkpoint.dir lies under it.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Do not show a progress bar.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Continue from a checkpoint: a `step-*` directory, a worker file in one, or a directory
    /// of checkpoints (the newest is used). The configuration must describe the same model.
    #[arg(long, value_name = "CKPT")]
    pub(crate) resume: Option<PathBuf>,
    /// Where fault-free golden runs are cached: a run with [[fault]] entries is compared with
    /// the golden run of the same configuration (computed once, then reused).
    #[arg(long, value_name = "DIR", default_value = "results/golden")]
    pub(crate) golden_dir: PathBuf,
    /// Write samples.csv into the output directory: the training images (their indices in the
    /// training split) each worker reads at each step, one row per image, so that another
    /// framework can train on the same per-rank batches (scripts/ddp-check.sh does).
    #[arg(long)]
    pub(crate) record_samples: bool,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct CompareArgs {
    #[command(flatten)]
    pub(crate) train: TrainArgs,
    /// Strategies to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "none,checkpoint_restart,rollback,lossy_forward")]
    pub(crate) strategies: Vec<String>,
}

#[derive(Args)]
pub(crate) struct InspectArgs {
    /// A checkpoint file (`worker-N.h5`) or checkpoint directory (`step-*`).
    pub(crate) checkpoint: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct EvalArgs {
    /// A checkpoint file (`worker-N.h5`: that replica), a checkpoint directory (`step-*`), or a
    /// directory of checkpoints (the newest).
    pub(crate) checkpoint: PathBuf,
    /// Use this configuration instead of the one stored in the checkpoint.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Override a configuration key (repeatable), e.g. --set data.test_size=1000 or
    /// --set data.path=/data/cifar-10-batches-bin.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Also write each test image's label, predicted class and logits to this CSV file (new:
    /// never replaced), one row per image in the test set's order: image, label, predicted,
    /// logit_0, logit_1, ... for a comparison with PyTorch's predictions image by image.
    #[arg(long, value_name = "FILE.csv")]
    pub(crate) predictions: Option<PathBuf>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct ImportArgs {
    /// The weights: a PyTorch file (.pt, .pth; a state_dict, or a training checkpoint holding
    /// model_state_dict and optimizer_state_dict) or a .safetensors file.
    pub(crate) weights: PathBuf,
    /// The run configuration the weights are for: its [model], [data] (image shape, classes),
    /// [optimizer] (the state a training checkpoint brings) and [[import.rename]] rules.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Override a configuration key (repeatable), e.g. --set data.path=/data/cifar-10-batches-bin.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// The checkpoint directory to write, new or empty (the checkpoint is <DIR>/step-00000000).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Import the tensors that fit and keep the configured initialisation for the others
    /// (listed); without it, any missing, unexpected or misshapen tensor is an error.
    #[arg(long)]
    pub(crate) allow_partial: bool,
    /// A probe saved with docs/pytorch/resilab_probe.py beside the weights (images and the
    /// logits PyTorch gave for them): the import is refused unless resilab's forward pass, on
    /// the images normalised by data.normalize, gives those logits within 1e-4 of the largest.
    #[arg(long, value_name = "FILE")]
    pub(crate) probe: Option<PathBuf>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct ExportArgs {
    /// A checkpoint directory (`step-*`), a directory of checkpoints (the newest), or a
    /// data-parallel worker file (`worker-N.h5`: that replica).
    pub(crate) checkpoint: PathBuf,
    /// The .safetensors file to write; it must not exist.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// Also write the optimizer's state, as optimizer.state.<index>.<buffer> entries numbered
    /// as PyTorch's optimizer.state_dict() numbers them.
    #[arg(long)]
    pub(crate) optimizer: bool,
    /// Export a checkpoint whose values or attributes fail their stored digest (altered after
    /// it was written, e.g. by `resilab inject`) as it is, listing what failed; without it,
    /// such a checkpoint is refused.
    #[arg(long)]
    pub(crate) allow_altered: bool,
    /// Undo the [[import.rename]] rules of this run configuration on every name written, so
    /// the file carries the names of the module the weights were imported from and loads into
    /// it with strict=True (rules of a fixed text only, e.g. from = "^module\\.").
    #[arg(long, value_name = "CONFIG")]
    pub(crate) renames_from: Option<PathBuf>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct AdviseArgs {
    /// Seconds one checkpoint costs (write time). With --from-run or --from-campaign, the
    /// measured mean.
    #[arg(long, value_name = "S", required_unless_present_any = ["from_run", "from_campaign"])]
    pub(crate) checkpoint_cost: Option<f64>,
    /// Mean time between failures of the whole job, in seconds.
    #[arg(long, value_name = "S")]
    pub(crate) mtbf: f64,
    /// Seconds a restart costs (reload and warm-up), counted in the expected waste.
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub(crate) restart_cost: f64,
    /// Take the checkpoint cost from a finished run's summary.json (checkpoint_s / checkpoints).
    #[arg(long, value_name = "DIR", conflicts_with = "checkpoint_cost")]
    pub(crate) from_run: Option<PathBuf>,
    /// Take the checkpoint cost from a campaign directory: the mean write time of its base
    /// checkpoints (bases/*/golden.json).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["checkpoint_cost", "from_run"])]
    pub(crate) from_campaign: Option<PathBuf>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct ProjectArgs {
    /// Run configuration (TOML) whose model, per-worker batch, [parallel] cost model and
    /// [recovery] detect_timeout_s, rebuild_s and relaunch_s are projected.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Override a configuration key (repeatable), as for `train`; wins over --profile.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// The detection, rebuild and relaunch costs of one published system (each figure's
    /// source is printed): megascale-optimised, megascale-unoptimised. Default: the
    /// configuration's [recovery] constants.
    #[arg(long, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// Worker (GPU) counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,1024,16384")]
    pub(crate) workers: Vec<usize>,
    /// GPUs per node: a node's failure ends all of its workers (the job's MTBF is the node
    /// MTBF divided by the nodes).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) gpus_per_node: usize,
    /// The job's fault-free step in seconds (default: the configuration's cost model, which
    /// then gives only the step's shape).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) step_s: Option<f64>,
    /// Mean time between failures of one node, in years.
    #[arg(long, value_name = "YEARS", default_value_t = 3.0, conflicts_with_all = ["system_mtbf_steps", "failures_per_1000_node_days"])]
    pub(crate) node_mtbf_years: f64,
    /// Instead: node failures per 1,000 node-days, as Meta and Llama 3 publish them (Llama 3:
    /// 3.8).
    #[arg(long = "failures-per-1000-node-days", value_name = "F", conflicts_with = "system_mtbf_steps")]
    pub(crate) failures_per_1000_node_days: Option<f64>,
    /// Instead: the whole job's mean time between failures, in steps (as a fault's
    /// system_mtbf_steps).
    #[arg(long, value_name = "STEPS")]
    pub(crate) system_mtbf_steps: Option<f64>,
    /// The job's length in days of useful work: the intervals are those of jobs this long
    /// (default: Llama 3's 54 days).
    #[arg(long, value_name = "DAYS", default_value_t = 54.0)]
    pub(crate) job_days: f64,
    /// Steps between checkpoints (default: Daly's interval for each worker count, times
    /// --daly-factor).
    #[arg(long, value_name = "K")]
    pub(crate) interval_steps: Option<u64>,
    /// Multiple of Daly's interval when --interval-steps is not given.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub(crate) daly_factor: f64,
    /// A committed recovery study (its campaign.toml, runs.csv, cells_study.csv and
    /// which_strategy.csv): the job is placed against its conditions, with each strategy's
    /// measured accuracy loss at the nearest one and the axes the job lies outside.
    #[arg(long, value_name = "DIR", default_value = "results/paper/recovery")]
    pub(crate) study: PathBuf,
    /// Leave the study out.
    #[arg(long, conflicts_with = "study")]
    pub(crate) no_study: bool,
    /// Print one JSON line per worker count and strategy instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Images per second of full training steps (forward, backward, SGD-momentum update) on
    /// random 3x32x32 images; prints one JSON line.
    Train(BenchTrainArgs),
    /// Checkpoint write/read throughput of a model's full training state against raw fsync'd
    /// writes of the same bytes, and the write time as a share of a training step; prints JSON
    /// and leaves the checkpoint in --dir for other tools (bench/checkpoint.sh).
    Checkpoint(BenchCheckpointArgs),
    /// Simulation overhead of data-parallel workers and pipeline stages: wall time per global
    /// step of each layout against one worker on the same global batch, measured in one run
    /// (steps interleaved across layouts); prints a table and writes CSV (bench/parallel.sh).
    Parallel(BenchParallelArgs),
    /// Cost of the fault detectors: mean step time with every detector on against none,
    /// interleaved in one process; prints one JSON line (bench/recovery.sh).
    Detect(BenchDetectArgs),
    /// Step time of bf16 and fp16 mixed precision (`train.precision`) against fp32, steps of
    /// the three interleaved in one process; prints one JSON line (bench/precision.sh).
    Precision(BenchTrainArgs),
}

#[derive(Args)]
pub(crate) struct BenchDetectArgs {
    #[command(flatten)]
    pub(crate) model: BenchModelArgs,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 20)]
    pub(crate) depth: usize,
    /// Data-parallel workers.
    #[arg(long, default_value_t = 4)]
    pub(crate) workers: usize,
    /// Global batch size.
    #[arg(long, default_value_t = 128)]
    pub(crate) batch: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    pub(crate) warmup: usize,
    /// Timed steps of each (means are reported).
    #[arg(long, default_value_t = 30)]
    pub(crate) steps: usize,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct BenchParallelArgs {
    #[command(flatten)]
    pub(crate) model: BenchModelArgs,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 20)]
    pub(crate) depth: usize,
    /// Global batch size.
    #[arg(long, default_value_t = 256)]
    pub(crate) batch: usize,
    /// Data-parallel worker counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub(crate) workers: Vec<usize>,
    /// Pipelines to measure as STAGESxMICRO_BATCHES, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4x8")]
    pub(crate) pipeline: Vec<String>,
    /// Untimed steps of each layout first.
    #[arg(long, default_value_t = 2)]
    pub(crate) warmup: usize,
    /// Timed rounds (one step of every layout each; medians are reported).
    #[arg(long, default_value_t = 7)]
    pub(crate) steps: usize,
    /// Append the rows to this CSV file (header written when the file is new).
    #[arg(long, value_name = "FILE")]
    pub(crate) csv: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct BenchCheckpointArgs {
    #[command(flatten)]
    pub(crate) model: BenchModelArgs,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 18)]
    pub(crate) depth: usize,
    /// Batch size of the training steps timed for comparison.
    #[arg(long, default_value_t = 64)]
    pub(crate) batch: usize,
    /// Training steps timed (median).
    #[arg(long, default_value_t = 3)]
    pub(crate) steps: usize,
    /// Repetitions of each write and read (median).
    #[arg(long, default_value_t = 5)]
    pub(crate) reps: usize,
    /// Directory for the files: new, empty, or an earlier benchmark's.
    #[arg(long, value_name = "DIR", default_value = "target/bench-checkpoint")]
    pub(crate) dir: PathBuf,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

#[derive(Args)]
pub(crate) struct BenchTrainArgs {
    #[command(flatten)]
    pub(crate) model: BenchModelArgs,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 8)]
    pub(crate) depth: usize,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    pub(crate) batch: usize,
    /// Untimed steps first (of each format, for `bench precision`).
    #[arg(long, default_value_t = 3)]
    pub(crate) warmup: usize,
    /// Timed steps (the median is reported; `bench precision`: rounds of one step of each
    /// format, a median per format).
    #[arg(long, default_value_t = 20)]
    pub(crate) steps: usize,
    #[command(flatten)]
    pub(crate) compute: ComputeArgs,
}

/// The model a benchmark times, but its depth (each benchmark has its own default depth, and
/// clap's derive keeps one default per field, not per use).
#[derive(Args)]
pub(crate) struct BenchModelArgs {
    /// Architecture: resnet, vgg or alexnet.
    #[arg(long, default_value = "resnet")]
    pub(crate) arch: String,
    /// Channel width multiplier.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) width: f64,
    /// Leave out BatchNorm (VGG and AlexNet; ResNet's blocks always have it).
    #[arg(long)]
    pub(crate) no_batch_norm: bool,
}
