//! The `resilab` command line: parses arguments, picks the backend, and calls the library.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use resilab_inject::Spec;
use resilab_models::{Arch, ModelConfig};
use resilab_runner::{BackendKind, Provenance, RunConfig, RunOptions, default_out_dir};

mod allocator;

/// A testbed for studying how deep-learning training survives soft errors.
#[derive(Parser)]
#[command(name = "resilab", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Optimal checkpoint intervals (Young, Daly) for a checkpoint cost and a mean time between
    /// failures, and the expected share of time lost at each.
    Advise(AdviseArgs),
    /// Each recovery strategy's expected overhead for N data-parallel workers (the model,
    /// batch per worker, cost model and recovery settings of a run configuration), from the
    /// same cost model the simulation charges: step timeline, checkpoint writes and reads,
    /// rollback's copy, relaunches and respawn transfers. Needs parallel.compute.gflops.
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
    /// Merge campaign directories (shards of one campaign) into one: same campaign required,
    /// rows deduplicated by run id and sorted by grid index.
    Merge(MergeArgs),
    /// Write a campaign's report: per grid cell the metrics (ACC, STD, CV, NaN, N-EV by the
    /// outcome, EV injected, RWC, AccR, TF, accuracy loss, time overhead, lost/recomputed steps,
    /// detection latency) with Wilson 95% intervals, as <out>/report.md and <out>/cells.csv; every
    /// pairwise difference with its test (Holm-adjusted) in <out>/comparisons.csv; plots (PNG
    /// and SVG) in <out>/plots.
    Report(ReportArgs),
    /// Internal: a campaign worker process (jobs on standard input, replies on standard output).
    #[command(hide = true, name = "__campaign-worker")]
    CampaignWorker(WorkerArgs),
    /// Measure performance.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Args)]
struct CampaignArgs {
    /// The campaign file (TOML: [campaign], [base], [inject], [grid]; see configs/paper/).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Override a campaign key (repeatable), e.g. --set campaign.repetitions=250 or
    /// --set 'grid."inject.injection_tries"=[1, 10, 100, 1000]'.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Worker processes (default: the cores divided by --threads).
    #[arg(long, short, value_name = "N")]
    jobs: Option<usize>,
    /// Compute threads per worker process.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Allow --jobs x --threads to exceed the machine's cores.
    #[arg(long)]
    oversubscribe: bool,
    /// Run only the runs whose grid index is I modulo N (0 <= I < N), e.g. one Slurm array
    /// task each; combine the shards' directories with `resilab merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Continue the campaign in --out: runs already recorded are skipped.
    #[arg(long)]
    resume: bool,
    /// The campaign directory (default: results/campaigns/<name>); a new campaign needs a new or
    /// empty one.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the number of runs and an estimated time from step times measured now, and stop.
    #[arg(long)]
    dry_run: bool,
    /// Seconds a run may take before it is killed and recorded as `timeout` (default: the
    /// campaign's timeout_s; base runs get ten times as long).
    #[arg(long, value_name = "S")]
    timeout: Option<f64>,
    /// Do not show a progress bar.
    #[arg(long)]
    quiet: bool,
    /// Compute backend: native (default: flex with resilab's kernels), flex,
    /// ndarray, wgpu or tch (LibTorch on the CPU; needs a build with `--features tch`, see
    /// `resilab train --help`).
    #[arg(long, value_name = "NAME")]
    backend: Option<BackendKind>,
    /// The wgpu adapter (see `resilab train --help`).
    #[arg(long, value_name = "ADAPTER", env = "RESILAB_WGPU_DEVICE", default_value = "default")]
    wgpu_device: String,
}

#[derive(Args)]
struct ReportArgs {
    /// The campaign directory (holding campaign.toml and runs.jsonl).
    dir: PathBuf,
    /// Where to write the report (default: <dir>/report): a new or empty directory, or an
    /// earlier report's.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct MergeArgs {
    /// The merged campaign directory (may be one of the inputs; otherwise new or empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Campaign directories to merge.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
}

#[derive(Args)]
struct WorkerArgs {
    /// The campaign directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct InjectArgs {
    /// Injection config (.yaml/.yml or .toml; keys in docs/injector.md). Not needed with --replay.
    #[arg(long, short, value_name = "FILE", required_unless_present = "replay")]
    config: Option<PathBuf>,
    /// The HDF5 file to corrupt (overrides the config's `hdf5_file`; with --replay, defaults to
    /// the input named in the log).
    #[arg(long, short, value_name = "H5")]
    file: Option<PathBuf>,
    /// Seed of every draw (overrides the config's `seed`; without either a fresh seed is drawn,
    /// printed and logged).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Where to write the corrupted copy (default: <input stem>.injected.h5 beside the input).
    /// May not name the input or the log, under any spelling (links, `..`).
    #[arg(long, short, value_name = "OUT.h5", conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// Corrupt the input file itself (replaced atomically once every flip is written).
    #[arg(long)]
    in_place: bool,
    /// Where to write the log (default: the output path with .log.jsonl instead of .h5). May not
    /// name the input or the output, under any spelling (links, `..`).
    #[arg(long, value_name = "LOG.jsonl")]
    log: Option<PathBuf>,
    /// Redo exactly the corruption recorded in a log (same datasets, elements, bits, order)
    /// instead of drawing new flips.
    #[arg(long, value_name = "LOG.jsonl")]
    replay: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DiffArgs {
    /// The first file (e.g. the original checkpoint).
    a: PathBuf,
    /// The second file (e.g. the corrupted copy).
    b: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// List every dataset in the table, not only those that differ.
    #[arg(long)]
    all: bool,
}

/// Options shared by every command that computes.
#[derive(Args, Clone)]
struct ComputeArgs {
    /// CPU threads for the compute backend (default: all cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Compute backend: native (the default: Burn's pure-Rust flex CPU backend with resilab's
    /// own kernels: convolutions and fully connected layers as GEMMs, BatchNorm fused with its
    /// ReLU), flex (Burn's flex as Burn ships it), ndarray (Burn's older CPU backend), wgpu
    /// (GPU; needs a build with `--features wgpu`) or tch (LibTorch on the CPU, faster than flex
    /// for VGG and AlexNet; needs a build with `--features tch`).
    /// Overrides the config's `backend` key.
    #[arg(long, value_name = "NAME")]
    backend: Option<BackendKind>,
    /// The wgpu adapter: default (wgpu's choice, a high-performance GPU first), discrete[:N],
    /// integrated[:N], virtual[:N] (the N-th adapter of that kind, from 0) or cpu (a software
    /// rasteriser such as Mesa's lavapipe). The run records the adapter's name.
    #[arg(long, value_name = "ADAPTER", env = "RESILAB_WGPU_DEVICE", default_value = "default")]
    wgpu_device: String,
}

#[derive(Args)]
struct TrainArgs {
    /// The run configuration (TOML).
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// Override a configuration key, e.g. `--set train.epochs=3` (repeatable; dotted keys
    /// address sections; values are TOML: numbers, booleans, "strings", [lists]).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Output directory (default: results/runs/<name>-<UTC time>): new, empty, or an earlier
    /// run's (resilab writes nowhere else). A relative checkpoint.dir lies under it.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Do not show a progress bar.
    #[arg(long)]
    quiet: bool,
    /// Continue from a checkpoint: a `step-*` directory, a worker file in one, or a directory
    /// of checkpoints (the newest is used). The configuration must describe the same model.
    #[arg(long, value_name = "CKPT")]
    resume: Option<PathBuf>,
    /// Where fault-free golden runs are cached: a run with [[fault]] entries is compared with
    /// the golden run of the same configuration (computed once, then reused).
    #[arg(long, value_name = "DIR", default_value = "results/golden")]
    golden_dir: PathBuf,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct CompareArgs {
    #[command(flatten)]
    train: TrainArgs,
    /// Strategies to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "none,checkpoint_restart,rollback,lossy_forward")]
    strategies: Vec<String>,
}

#[derive(Args)]
struct InspectArgs {
    /// A checkpoint file (`worker-N.h5`) or checkpoint directory (`step-*`).
    checkpoint: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct EvalArgs {
    /// A checkpoint file (`worker-N.h5`: that replica), a checkpoint directory (`step-*`), or a
    /// directory of checkpoints (the newest).
    checkpoint: PathBuf,
    /// Use this configuration instead of the one stored in the checkpoint.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override a configuration key (repeatable), e.g. --set data.test_size=1000 or
    /// --set data.path=/data/cifar-10-batches-bin.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct AdviseArgs {
    /// Seconds one checkpoint costs (write time). With --from-run or --from-campaign, the
    /// measured mean.
    #[arg(long, value_name = "S", required_unless_present_any = ["from_run", "from_campaign"])]
    checkpoint_cost: Option<f64>,
    /// Mean time between failures of the whole job, in seconds.
    #[arg(long, value_name = "S")]
    mtbf: f64,
    /// Seconds a restart costs (reload and warm-up), counted in the expected waste.
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    restart_cost: f64,
    /// Take the checkpoint cost from a finished run's summary.json (checkpoint_s / checkpoints).
    #[arg(long, value_name = "DIR", conflicts_with = "checkpoint_cost")]
    from_run: Option<PathBuf>,
    /// Take the checkpoint cost from a campaign directory: the mean write time of its base
    /// checkpoints (bases/*/golden.json).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["checkpoint_cost", "from_run"])]
    from_campaign: Option<PathBuf>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ProjectArgs {
    /// Run configuration (TOML) whose model, per-worker batch, [parallel] cost model and
    /// [recovery] relaunch_s are projected.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Override a configuration key (repeatable), as for `train`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Worker counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,1024,16384")]
    workers: Vec<usize>,
    /// Mean time between failures of one node, in years (failures of the job: this / workers).
    #[arg(long, value_name = "YEARS", default_value_t = 3.0, conflicts_with = "system_mtbf_steps")]
    node_mtbf_years: f64,
    /// Instead: the whole job's mean time between failures, in steps (as a fault's
    /// system_mtbf_steps).
    #[arg(long, value_name = "STEPS")]
    system_mtbf_steps: Option<f64>,
    /// Steps between checkpoints (default: Daly's interval for each worker count, times
    /// --daly-factor).
    #[arg(long, value_name = "K")]
    interval_steps: Option<u64>,
    /// Multiple of Daly's interval when --interval-steps is not given.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    daly_factor: f64,
    /// Print one JSON line per worker count and strategy instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
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
}

#[derive(Args)]
struct BenchDetectArgs {
    /// Architecture: resnet, vgg or alexnet.
    #[arg(long, default_value = "resnet")]
    arch: String,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 20)]
    depth: usize,
    /// Channel width multiplier.
    #[arg(long, default_value_t = 1.0)]
    width: f64,
    /// Data-parallel workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Global batch size.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed steps of each (means are reported).
    #[arg(long, default_value_t = 30)]
    steps: usize,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct BenchParallelArgs {
    /// Architecture: resnet, vgg or alexnet.
    #[arg(long, default_value = "resnet")]
    arch: String,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 20)]
    depth: usize,
    /// Channel width multiplier.
    #[arg(long, default_value_t = 1.0)]
    width: f64,
    /// Leave out BatchNorm (VGG and AlexNet).
    #[arg(long)]
    no_batch_norm: bool,
    /// Global batch size.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Data-parallel worker counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    workers: Vec<usize>,
    /// Pipelines to measure as STAGESxMICRO_BATCHES, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4x8")]
    pipeline: Vec<String>,
    /// Untimed steps of each layout first.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed rounds (one step of every layout each; medians are reported).
    #[arg(long, default_value_t = 7)]
    steps: usize,
    /// Append the rows to this CSV file (header written when the file is new).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct BenchCheckpointArgs {
    /// Architecture: resnet, vgg or alexnet.
    #[arg(long, default_value = "resnet")]
    arch: String,
    /// Depth.
    #[arg(long, default_value_t = 18)]
    depth: usize,
    /// Channel width multiplier.
    #[arg(long, default_value_t = 1.0)]
    width: f64,
    /// Batch size of the training steps timed for comparison.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Training steps timed (median).
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Repetitions of each write and read (median).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Directory for the files: new, empty, or an earlier benchmark's.
    #[arg(long, value_name = "DIR", default_value = "target/bench-checkpoint")]
    dir: PathBuf,
    #[command(flatten)]
    compute: ComputeArgs,
}

#[derive(Args)]
struct BenchTrainArgs {
    /// Architecture: resnet, vgg or alexnet.
    #[arg(long, default_value = "resnet")]
    arch: String,
    /// Depth (ResNet 6n+2 or 18/34; VGG 11 or 16; ignored for AlexNet).
    #[arg(long, default_value_t = 8)]
    depth: usize,
    /// Channel width multiplier.
    #[arg(long, default_value_t = 1.0)]
    width: f64,
    /// Leave out BatchNorm (VGG and AlexNet).
    #[arg(long)]
    no_batch_norm: bool,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed steps (the median is reported).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    #[command(flatten)]
    compute: ComputeArgs,
}

/// Picks the device for a backend, always explicitly (with the wgpu feature on, Burn's
/// `Device::default()` would prefer wgpu): the only place that knows which backends exist.
fn device_for(kind: BackendKind, compute: &ComputeArgs) -> Result<(Device, String)> {
    match kind {
        BackendKind::Flex => Ok((Device::flex(), "cpu (flex)".to_string())),
        BackendKind::Native => {
            resilab_models::kernels::set_enabled(true);
            Ok((Device::flex(), format!("cpu (flex + resilab kernels r{})", resilab_models::kernels::NUMERICS)))
        }
        // burn-ndarray is deprecated by Burn 0.22 in favour of flex; the product keeps it selectable.
        #[allow(deprecated)]
        BackendKind::Ndarray => Ok((Device::ndarray(), "cpu (ndarray)".to_string())),
        BackendKind::Wgpu => wgpu_device(&compute.wgpu_device),
        BackendKind::Tch => tch_device(),
    }
}

/// LibTorch's CPU device (burn-tch is deprecated by Burn 0.22, like ndarray).
#[cfg(feature = "tch")]
#[allow(deprecated)]
fn tch_device() -> Result<(Device, String)> {
    Ok((Device::libtorch(), "cpu (libtorch)".to_string()))
}

#[cfg(not(feature = "tch"))]
fn tch_device() -> Result<(Device, String)> {
    bail!(
        "this resilab binary was built without the tch (LibTorch) backend; rebuild it with \
         `bash scripts/with-tch.sh cargo build --release --features tch` (installs PyTorch 2.9.0's \
         libtorch into a virtual environment first; see the README's Backends section)"
    )
}

/// Brings up the wgpu adapter `selector` names, failing with an error (not a panic) when
/// there is none; the name says which adapter and graphics API it is.
#[cfg(feature = "wgpu")]
fn wgpu_device(selector: &str) -> Result<(Device, String)> {
    use burn::tensor::DeviceKind;
    let (kind_name, index) = match selector.split_once(':') {
        Some((k, n)) => (
            k,
            Some(n.parse::<usize>().map_err(|_| anyhow::anyhow!("--wgpu-device {selector}: the adapter index must be a whole number"))?),
        ),
        None => (selector, None),
    };
    let kind = match (kind_name, index) {
        ("default", None) => DeviceKind::DefaultDevice,
        ("cpu", None) => DeviceKind::Cpu,
        ("discrete", n) => DeviceKind::DiscreteGpu(n.unwrap_or(0)),
        ("integrated", n) => DeviceKind::IntegratedGpu(n.unwrap_or(0)),
        ("virtual", n) => DeviceKind::VirtualGpu(n.unwrap_or(0)),
        _ => bail!("--wgpu-device {selector}: expected default, discrete[:N], integrated[:N], virtual[:N] or cpu"),
    };
    let (device, setup) = Device::wgpu_options().device_kind(kind).init_with_setup().map_err(|e| {
        anyhow::anyhow!(
            "no usable wgpu adapter for --wgpu-device {selector}: {e}. A GPU needs its Vulkan (or Metal, \
             DX12) driver; without a GPU, Debian's software Vulkan works: \
             `apt-get install mesa-vulkan-drivers libvulkan1`. Or use --backend flex."
        )
    })?;
    let info = setup.adapter.get_info();
    Ok((device, format!("wgpu: {} ({:?}, {:?})", info.name, info.backend, info.device_type)))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device(_selector: &str) -> Result<(Device, String)> {
    bail!(
        "this resilab binary was built without the wgpu backend; rebuild it with \
         `cargo build --release --features wgpu` (or run `cargo run --release --features wgpu -- ...`)"
    )
}

/// The `--threads` a command asks for (`None`: all cores, or a command that does not compute).
fn requested_threads(command: &Command) -> Option<usize> {
    match command {
        Command::Train(a) => a.compute.threads,
        Command::Compare(a) => a.train.compute.threads,
        Command::Eval(a) => a.compute.threads,
        // A campaign's own process only starts worker processes (each sized by --threads), but
        // --dry-run times training steps itself.
        Command::Campaign(a) if a.dry_run => Some(a.threads),
        Command::CampaignWorker(a) => a.compute.threads,
        Command::Bench(BenchCommand::Train(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Checkpoint(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Parallel(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Detect(a)) => a.compute.threads,
        _ => None,
    }
}

/// Sizes the global CPU thread pool (before anything uses it) and libtorch's.
fn set_threads(threads: Option<usize>) -> Result<()> {
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().context("could not configure the CPU thread pool")?;
    }
    // libtorch keeps its own (OpenMP) thread pool: give it the same count.
    #[cfg(feature = "tch")]
    tch::set_num_threads(i32::try_from(rayon::current_num_threads()).context("--threads is too large")?);
    Ok(())
}

fn provenance(backend: BackendKind, device: &str, threads: usize, seed: u64) -> Provenance {
    Provenance {
        resilab_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: env!("RESILAB_GIT_REVISION").to_string(),
        backend: backend.name().to_string(),
        device: device.to_string(),
        cpu: resilab_runner::platform::cpu_model(),
        isa: resilab_runner::platform::isa_level(),
        threads,
        seed,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

fn compare(args: CompareArgs) -> Result<()> {
    let base = RunConfig::load(&args.train.config, &args.train.set)?;
    let backend = args.train.compute.backend.or(base.backend).unwrap_or_default();
    let (device, device_name) = device_for(backend, &args.train.compute)?;
    let threads = rayon::current_num_threads();
    let root = args.train.out.clone().unwrap_or_else(|| default_out_dir(&format!("{}-compare", base.run_name())));
    let options = |cfg: &RunConfig, out: PathBuf| RunOptions {
        out,
        device: device.clone(),
        provenance: provenance(backend, &device_name, threads, cfg.seed),
        progress: !args.train.quiet,
        resume: None,
        probe: Box::new(|file: &Path| probe_in_child(file)),
        golden: Some(args.train.golden_dir.clone()),
        compare_fault_free: false,
        record_states: false,
    };
    let table = resilab_runner::compare::run(&args.train.config, &args.train.set, &args.strategies, &root, &options)?;
    println!("\n{table}");
    println!("table in {} and {}", root.join("table.txt").display(), root.join("strategies.csv").display());
    Ok(())
}

fn train(args: TrainArgs) -> Result<()> {
    let cfg = RunConfig::load(&args.config, &args.set)?;
    let backend = args.compute.backend.or(cfg.backend).unwrap_or_default();
    let (device, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let out = args.out.unwrap_or_else(|| default_out_dir(&cfg.run_name()));
    let opts = RunOptions {
        out: out.clone(),
        device,
        provenance: provenance(backend, &device_name, threads, cfg.seed),
        progress: !args.quiet,
        resume: args.resume,
        probe: Box::new(|file: &Path| probe_in_child(file)),
        golden: Some(args.golden_dir.clone()),
        compare_fault_free: false,
        record_states: false,
    };
    eprintln!(
        "resilab: training {} ({}) on {} ({threads} threads) -> {}",
        cfg.model.label(),
        cfg.parallel.describe(),
        device_name,
        out.display()
    );
    let s = resilab_runner::train(&cfg, &opts)?;
    println!(
        "final test accuracy {:.4} after {} steps ({:.2} epochs) in {:.1} s, {:.0} images/s; results in {}",
        s.final_test_acc,
        s.steps,
        s.epochs,
        s.wall_s,
        s.images_per_s,
        out.display()
    );
    if s.faults_injected > 0 || !s.detections.is_empty() || s.status != "completed" {
        println!(
            "{} fault(s) injected ({} values changed), {}, {} restart(s), {} step(s) lost, {} recomputed; strategy {}; run {}",
            s.faults_injected,
            s.values_corrupted,
            resilab_recovery::detections_text(&s.detections),
            s.restarts.len(),
            s.steps_lost,
            s.steps_recomputed,
            s.strategy,
            s.status
        );
        if let (Some(g), Some(loss)) = (&s.golden, s.acc_loss_vs_golden) {
            println!(
                "golden run: test accuracy {:.4} ({:+.4} here), wall {:.1} s ({:+.1}% here); {}",
                g.final_test_acc,
                -loss,
                g.wall_s,
                100.0 * s.time_overhead_vs_golden.unwrap_or(0.0),
                g.dir.display()
            );
        }
    }
    if cfg.parallel.world() > 1 {
        println!(
            "simulated parallel time {:.1} s ({:.2} s of it communication, {:.1} MB moved) for {}",
            s.simulated_s,
            s.simulated_comm_s,
            s.comm_bytes as f64 / 1e6,
            s.parallel
        );
    }
    Ok(())
}

fn eval(args: EvalArgs) -> Result<()> {
    let backend = args.compute.backend.unwrap_or_default();
    let (device, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::eval(&args.checkpoint, args.config.as_deref(), &args.set, &device, &|file: &Path| probe_in_child(file))?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!("checkpoint   {} (step {}, {}, worker {})", r.checkpoint.display(), r.step, r.model, r.worker);
    println!("test         accuracy {:.4}, loss {:.4} on {} images", r.test_acc, r.test_loss, r.test_images);
    if let Some(c) = &r.clean {
        println!("clean        accuracy {:.4}, loss {:.4}: {}, the file it was altered from", c.test_acc, c.test_loss, c.file.display());
    }
    println!("values       {} : {} NaN, {} Inf, {} extreme (|v| > {:e})", r.values, r.nan, r.inf, r.extreme, r.extreme_threshold);
    if !r.digest_mismatches.is_empty() {
        println!("altered      {} dataset(s) no longer match their digest:", r.digest_mismatches.len());
        for d in &r.digest_mismatches {
            println!("             {d}");
        }
    }
    Ok(())
}

fn advise(args: AdviseArgs) -> Result<()> {
    let (checkpoint_s, step_s) = match (&args.from_run, args.checkpoint_cost) {
        _ if let Some(dir) = &args.from_campaign => (resilab_campaign::mean_checkpoint_s(dir)?, None),
        (Some(dir), _) => {
            let (c, s) = resilab_runner::advise::run_costs(dir)?;
            (c, Some(s))
        }
        (None, Some(c)) => (c, None),
        (None, None) => bail!("give --checkpoint-cost, --from-run or --from-campaign"),
    };
    for (name, v) in [("--checkpoint-cost", checkpoint_s), ("--mtbf", args.mtbf)] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name} must be a number of seconds > 0, got {v}");
        }
    }
    if !(args.restart_cost.is_finite() && args.restart_cost >= 0.0) {
        bail!("--restart-cost must be a number of seconds >= 0, got {}", args.restart_cost);
    }
    let mut a = resilab_checkpoint::advise::advise(checkpoint_s, args.restart_cost, args.mtbf);
    if let Some(s) = step_s {
        a = a.with_step_s(s);
    }
    if args.json {
        println!("{}", serde_json::to_string(&a)?);
        return Ok(());
    }
    // Simulated costs are often milliseconds: small values in scientific notation.
    let s = |x: f64| if x != 0.0 && x.abs() < 0.1 { format!("{x:.3e} s") } else { format!("{x:.1} s") };
    let steps = |n: Option<u64>| n.map(|n| format!(" ({n} steps)")).unwrap_or_default();
    println!("checkpoint cost {}, restart cost {}, MTBF {}", s(a.checkpoint_s), s(a.restart_s), s(a.mtbf_s));
    println!("Young: checkpoint every {}{} of work; expected time lost {:.2}%", s(a.young_s), steps(a.young_steps), 100.0 * a.young_waste);
    println!("Daly:  checkpoint every {}{} of work; expected time lost {:.2}%", s(a.daly_s), steps(a.daly_steps), 100.0 * a.daly_waste);
    println!("(lost: checkpoint writes, work redone after failures and restarts; Daly's model, exponential failures)");
    if let (Some(n), Some(step)) = (a.daly_steps, a.step_s) {
        println!("in the run's configuration ({} per step measured): [checkpoint] every_steps = {n}", s(step));
    }
    Ok(())
}

fn project(args: ProjectArgs) -> Result<()> {
    use resilab_runner::project::{Interval, project};
    let cfg = RunConfig::load(&args.config, &args.set)?;
    for (name, v) in [("--node-mtbf-years", args.node_mtbf_years), ("--daly-factor", args.daly_factor)] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name} must be a number > 0, got {v}");
        }
    }
    let interval = args.interval_steps.map_or(Interval::Daly(args.daly_factor), Interval::Steps);
    let node_mtbf_s = args.node_mtbf_years * 365.25 * 86_400.0;
    if !args.json {
        println!(
            "{:>7} {:<19} {:>11} {:>12} {:>10} {:>9} {:>10} {:>9}",
            "workers", "strategy", "step s", "job MTBF s", "ckpt every", "steady", "per fail s", "overhead"
        );
    }
    for &n in &args.workers {
        for p in project(&cfg, n, Some(node_mtbf_s), args.system_mtbf_steps, interval)? {
            if args.json {
                println!("{}", serde_json::to_string(&p)?);
                continue;
            }
            let strategy = serde_json::to_value(p.strategy)?.as_str().unwrap_or_default().to_string();
            let overhead = p.overhead.map_or_else(|| format!("fails ~{:.0} steps", p.steps_to_failure), |o| format!("{:.3}%", 100.0 * o));
            println!(
                "{:>7} {:<19} {:>11.3e} {:>12.3e} {:>10} {:>8.3}% {:>10.3e} {:>9}",
                n,
                strategy,
                p.step_s,
                p.system_mtbf_s,
                p.interval_steps,
                100.0 * p.steady,
                p.per_failure_s,
                overhead
            );
        }
    }
    Ok(())
}

fn parse_arch(name: &str) -> Result<Arch> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| anyhow::anyhow!("--arch {name}: unknown architecture (allowed: resnet, vgg, alexnet)"))
}

/// The model a benchmark's `--arch`, `--depth` and `--width` flags describe.
fn bench_model(arch: &str, depth: usize, width: f64, batch_norm: Option<bool>) -> Result<(Arch, ModelConfig)> {
    let arch = parse_arch(arch)?;
    Ok((arch, ModelConfig { arch, depth: (arch != Arch::Alexnet).then_some(depth), width, batch_norm }))
}

fn bench_checkpoint(args: BenchCheckpointArgs) -> Result<()> {
    let (_, model) = bench_model(&args.arch, args.depth, args.width, None)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (device, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::bench::checkpoint(&model, args.batch, args.steps, args.reps, &args.dir, &device)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

fn bench_train(args: BenchTrainArgs) -> Result<()> {
    let (arch, model) = bench_model(&args.arch, args.depth, args.width, Some(!args.no_batch_norm))?;
    let backend = args.compute.backend.unwrap_or_default();
    let (device, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let timing = resilab_runner::bench::train_step(&model, args.batch, args.warmup, args.steps, &device)?;
    let (median_s, params) = (timing.median_s, timing.params);
    let train_gflop_per_image = 3.0 * timing.forward_flops as f64 / 1e9;
    let images_per_s = args.batch as f64 / median_s;
    let result = resilab_runner::bench::StepBench {
        implementation: "resilab",
        arch: arch.to_string(),
        depth: if arch == Arch::Alexnet { 0 } else { args.depth },
        width: args.width,
        batch_norm: !args.no_batch_norm,
        params,
        batch: args.batch,
        threads,
        backend: backend.name().to_string(),
        device: device_name,
        images_per_s,
        step_ms_median: median_s * 1e3,
        train_gflop_per_image,
        gflops: train_gflop_per_image * images_per_s,
        peak_gflops: (backend != BackendKind::Wgpu).then(|| resilab_runner::platform::peak_gflops(threads)).flatten(),
    };
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

fn bench_detect(args: BenchDetectArgs) -> Result<()> {
    let (_, model) = bench_model(&args.arch, args.depth, args.width, None)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (device, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::bench::detection(&model, args.batch, args.workers, args.warmup, args.steps, &device)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

fn bench_parallel(args: BenchParallelArgs) -> Result<()> {
    let (_, model) = bench_model(&args.arch, args.depth, args.width, Some(!args.no_batch_norm))?;
    let mut pipelines = Vec::new();
    for p in &args.pipeline {
        let parsed = p.split_once('x').and_then(|(s, m)| Some((s.trim().parse::<usize>().ok()?, m.trim().parse::<usize>().ok()?)));
        pipelines.push(parsed.ok_or_else(|| anyhow::anyhow!("--pipeline {p}: expected STAGESxMICRO_BATCHES such as 4x8"))?);
    }
    let backend = args.compute.backend.unwrap_or_default();
    let (device, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let layouts = resilab_runner::bench::layouts(&args.workers, &pipelines);
    let bar = indicatif::ProgressBar::new((layouts.len() + args.steps.max(1)) as u64);
    let mut rows = resilab_runner::bench::parallel(&model, args.batch, &layouts, args.warmup, args.steps, &device, |msg| {
        bar.inc(1);
        bar.set_message(msg.to_string());
    })?;
    bar.finish_and_clear();
    println!(
        "{:<10} {:>7} {:>6} {:>6} {:>10} {:>7} {:>11} {:>9} {:>9} {:>12}",
        "layout", "workers", "stages", "micro", "step ms", "ratio", "compute ms", "ratio", "update ms", "sim step ms"
    );
    for r in &mut rows {
        r.threads = threads;
        r.backend = backend.name().to_string();
        r.device = device_name.clone();
        println!(
            "{:<10} {:>7} {:>6} {:>6} {:>10.1} {:>7.3} {:>11.1} {:>9.3} {:>9.1} {:>12.1}",
            r.layout,
            r.workers,
            r.stages,
            r.micro_batches,
            r.step_ms_median,
            r.ratio_vs_single,
            r.compute_ms_median,
            r.compute_ratio,
            r.update_ms_median,
            r.sim_step_ms_median
        );
    }
    if let Some(path) = &args.csv {
        let new = !path.exists();
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("{}", path.display()))?;
        let mut w = csv::WriterBuilder::new().has_headers(new).from_writer(file);
        for r in &rows {
            w.serialize(r).with_context(|| format!("{}", path.display()))?;
        }
        w.flush().with_context(|| format!("{}", path.display()))?;
    }
    Ok(())
}

/// Reads `file` completely in a child process first (see `resilab_checkpoint::probe`): a crash
/// or hang of the HDF5 library on a corrupt file becomes an error naming the file.
fn probe_in_child(file: &Path) -> resilab_checkpoint::Result<()> {
    resilab_checkpoint::probe::ChildProbe::current()?.check(file)
}

fn inspect(args: InspectArgs) -> Result<()> {
    use std::fmt::Write as _;
    let file = if args.checkpoint.is_dir() { args.checkpoint.join(resilab_checkpoint::file_name(0)) } else { args.checkpoint.clone() };
    probe_in_child(&file)?;
    let report = resilab_checkpoint::inspect(&args.checkpoint)?;
    let mut text = String::new();
    if args.json {
        text = serde_json::to_string_pretty(&report)?;
        text.push('\n');
    } else {
        writeln!(text, "{}", report.file.display())?;
        for (k, v) in &report.attributes {
            let v = if v.contains('\n') { format!("<{} lines>", v.lines().count()) } else { v.clone() };
            writeln!(text, "  @{k} = {v}")?;
        }
        writeln!(text, "  attributes digest: {}", report.attributes_status)?;
        writeln!(text, "{:<60} {:>16} {:>6} hash", "dataset", "shape", "dtype")?;
        for d in &report.datasets {
            writeln!(text, "{:<60} {:>16} {:>6} {}", d.info.path, format!("{:?}", d.info.shape), d.info.dtype.to_string(), d.hash_status)?;
        }
        let bad = report.datasets.iter().filter(|d| d.hash_status != "ok" && d.hash_status != "no-hash").count();
        let attrs = if report.attributes_status == "ok" || report.attributes_status == "no-hash" {
            ""
        } else {
            "; the root attributes fail theirs"
        };
        writeln!(text, "{} datasets, {} failing their digest{attrs}", report.datasets.len(), bad)?;
    }
    print_all(&text)
}

/// Writes to stdout; a closed pipe (`resilab inspect ... | head`) is not an error.
fn print_all(text: &str) -> Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn inject(args: InjectArgs) -> Result<()> {
    use resilab_inject::Output;
    let spec = match &args.config {
        Some(path) => Some(resilab_inject::RawConfig::load(path)?.validate().with_context(|| format!("{}", path.display()))?),
        None => None,
    };
    let replay = args.replay.clone().or_else(|| spec.as_ref().and_then(|s| s.replay.clone()));
    let replay_lines = replay.as_deref().map(resilab_inject::read_log).transpose()?;
    let input = match (&args.file, &spec, &replay_lines) {
        (Some(f), _, _) => f.clone(),
        (None, Some(Spec { file: Some(f), .. }), _) => f.clone(),
        (None, _, Some(lines)) => match resilab_inject::log_header(lines) {
            Some(h) => PathBuf::from(&h.input),
            None => bail!("the replayed log has no header line naming the input file; give --file"),
        },
        _ => bail!("no file to corrupt: set `hdf5_file` in the config or give --file"),
    };
    let output = if args.in_place {
        Output::InPlace
    } else {
        Output::Copy(args.output.clone().unwrap_or_else(|| resilab_inject::default_output(&input)))
    };
    if let Output::Copy(out) = &output
        && resilab_inject::same_file(out, &input)
    {
        bail!("--output {} is the input file; use --in-place to corrupt the input itself", out.display());
    }
    let out_path = match &output {
        Output::Copy(p) => p.clone(),
        Output::InPlace => input.clone(),
    };
    let log = args.log.clone().unwrap_or_else(|| resilab_inject::default_log(&out_path));
    let mut roles: Vec<(&str, &Path)> = vec![("the input file", &input)];
    if let Output::Copy(out) = &output {
        roles.push(("--output", out));
    }
    if let Some(r) = &replay {
        roles.push(("--replay", r));
    } else {
        roles.push(("--log", &log));
    }
    resilab_inject::check_distinct(&roles)?;
    // Raw byte flips over the whole file never open it with HDF5; everything else does, so a
    // file that could crash the library is read in a child process first.
    let raw_bytes =
        spec.as_ref().is_some_and(|s| s.target == resilab_inject::TargetKind::Bytes && s.region == resilab_inject::Region::File);
    if replay.is_some() || !raw_bytes {
        probe_in_child(&input)?;
    }
    if let (Some(replay_log), Some(lines)) = (replay, replay_lines) {
        let r = resilab_inject::replay_file(&replay_log, &lines, &input, &output)?;
        let summary = serde_json::json!({"replayed": r.applied, "differing_from_log": r.differing, "output": r.output});
        if args.json {
            println!("{summary}");
        } else {
            println!(
                "replayed {} corruption(s) from {} on {} -> {}{}",
                r.applied,
                replay_log.display(),
                input.display(),
                r.output.display(),
                if r.differing > 0 {
                    format!(" ({} found a different value than logged: not the same file)", r.differing)
                } else {
                    String::new()
                }
            );
        }
        return Ok(());
    }
    let spec = spec.context("a config is required unless --replay is given")?;
    let seed = args.seed.or(spec.seed).unwrap_or_else(resilab_inject::fresh_seed);
    for key in &spec.ignored {
        eprintln!("resilab: note: ignoring {key}");
    }
    // The log is written before the corrupted copy is put in place, so a failure leaves
    // neither behind.
    let prepared = resilab_inject::prepare_file(&spec, &input, &output, seed)?;
    let staged_log = resilab_inject::stage_log(&log, &prepared.report)?;
    let report = prepared.commit()?;
    staged_log.commit()?;
    let s = &report.summary;
    if args.json {
        println!("{}", serde_json::json!({"summary": s, "seed": seed, "output": report.output, "log": log}));
    } else {
        println!(
            "corrupted {} of {} attempts ({} not selected, {} rejected; {} NaN, {} Inf, {} extreme; {:.6}% of the file's {} elements) seed {seed} -> {}; log {}",
            s.corrupted,
            s.attempts,
            s.not_selected,
            s.rejected,
            s.nan,
            s.inf,
            s.extreme,
            s.share_of_file_percent,
            s.total_elements,
            report.output.display(),
            log.display()
        );
    }
    Ok(())
}

fn parse_shard(s: &str) -> Result<(u64, u64)> {
    let parsed = s.split_once('/').and_then(|(i, n)| Some((i.trim().parse::<u64>().ok()?, n.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((i, n)) if n > 0 && i < n => Ok((i, n)),
        _ => bail!("--shard {s}: expected I/N with 0 <= I < N, e.g. 0/4"),
    }
}

fn campaign(args: CampaignArgs) -> Result<()> {
    let c = resilab_campaign::Campaign::load(&args.config, &args.set)?;
    let backend = args.backend.unwrap_or_default();
    let compute = ComputeArgs { threads: Some(args.threads), backend: Some(backend), wgpu_device: args.wgpu_device.clone() };
    let (device, device_name) = device_for(backend, &compute)?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = args.jobs.unwrap_or((cores / args.threads).max(1));
    if jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    if jobs * args.threads > cores && !args.oversubscribe {
        bail!(
            "--jobs {jobs} x --threads {} = {} threads on {cores} cores would oversubscribe them (each slows the others); lower --jobs, or pass --oversubscribe",
            args.threads,
            jobs * args.threads
        );
    }
    let shard = args.shard.as_deref().map(parse_shard).transpose()?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("results").join("campaigns").join(c.name()));
    let platform = resilab_runner::platform::bits_key(backend.name(), &device_name);
    if args.dry_run {
        let e = resilab_campaign::estimate(&c, &out, shard, jobs, &platform, &device)?;
        println!("campaign     {} ({}): {} runs in the grid", c.name(), c.settings.kind.name(), c.len());
        println!("this shard   {} runs, {} to do, {} base run(s) to train first", e.runs, e.todo, e.bases);
        for k in &e.setups {
            println!(
                "measured     {}: {:.1} ms per training step (+{:.1} ms state scan), {:.1} ms per evaluation, {:.1} ms to build, {:.1} / {:.1} ms to write / read a checkpoint ({} thread(s))",
                k.label,
                k.step_s * 1e3,
                k.scan_s * 1e3,
                k.eval_s * 1e3,
                k.build_s * 1e3,
                k.save_s * 1e3,
                k.load_s * 1e3,
                args.threads
            );
        }
        println!("estimate     {} with {jobs} worker process(es) of {} thread(s)", human_duration(e.eta_s), args.threads);
        if e.eta_min_s < e.eta_s {
            println!(
                "             (as little as {} if every run's state held a NaN/Inf after its first step: such runs stop there)",
                human_duration(e.eta_min_s)
            );
        }
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot find the resilab binary to start workers with")?;
    let worker = vec![
        exe.into_os_string(),
        "__campaign-worker".into(),
        "--threads".into(),
        args.threads.to_string().into(),
        "--backend".into(),
        backend.name().into(),
        "--wgpu-device".into(),
        args.wgpu_device.clone().into(),
    ];
    eprintln!(
        "resilab: campaign {} ({} runs{}) into {} with {jobs} worker process(es) of {} thread(s)",
        c.name(),
        c.len(),
        shard.map_or(String::new(), |(i, n)| format!(", shard {i}/{n}")),
        out.display(),
        args.threads
    );
    let opts = resilab_campaign::Options {
        out: out.clone(),
        jobs,
        shard,
        resume: args.resume,
        worker,
        progress: !args.quiet,
        timeout_s: args.timeout,
        platform,
        revision: env!("RESILAB_GIT_REVISION").to_string(),
    };
    let o = resilab_campaign::execute(&c, &opts)?;
    let statuses: Vec<String> = o.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!(
        "{} runs recorded now ({}), {} recorded before, {} in this shard; {:.1} s ({} base run(s) first: {:.1} s) -> {}",
        o.done,
        if statuses.is_empty() { "none".to_string() } else { statuses.join(", ") },
        o.skipped,
        o.total,
        o.wall_s,
        o.bases,
        o.bases_s,
        out.join(resilab_campaign::RUNS_CSV).display()
    );
    Ok(())
}

fn human_duration(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn report(args: ReportArgs) -> Result<()> {
    let out = args.out.unwrap_or_else(|| args.dir.join("report"));
    let w = resilab_report::report(&args.dir, &out)?;
    println!("{} runs in {} cells -> {} ({} files)", w.runs, w.cells, out.join("report.md").display(), w.files.len());
    Ok(())
}

fn merge(args: MergeArgs) -> Result<()> {
    let m = resilab_campaign::merge(&args.out, &args.dirs)?;
    let platforms: std::collections::BTreeSet<&String> = m.platforms.iter().collect();
    if platforms.len() > 1 {
        eprintln!("resilab: the parts ran on {} platforms (results differ between them without any fault):", platforms.len());
        for (d, p) in args.dirs.iter().zip(&m.platforms) {
            eprintln!("  {}: {p}", d.display());
        }
    }
    if m.mixed_golden_rows > 0 {
        eprintln!(
            "resilab: {} runs share a base configuration with runs compared against a golden run of another platform key (see the golden_key column)",
            m.mixed_golden_rows
        );
    }
    println!("{} runs -> {}", m.rows, args.out.join(resilab_campaign::RUNS_CSV).display());
    Ok(())
}

fn campaign_worker(args: WorkerArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let backend = args.compute.backend.unwrap_or_default();
    let (device, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let prov = provenance(backend, &device_name, threads, 0);
    let probe = |file: &Path| probe_in_child(file);
    let mut worker = resilab_campaign::Worker::new(&args.dir, device, prov, &probe)?;
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "{}", resilab_campaign::READY_LINE)?;
    // Jobs are read on their own thread so that the end of stdin (the campaign process closed it
    // or died, even by SIGKILL) ends this worker at once, mid-run included: an orphaned worker
    // must not go on writing into a campaign directory that a resumed campaign now owns.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
    for line in rx {
        if line.trim().is_empty() {
            continue;
        }
        let job: resilab_campaign::Job = serde_json::from_str(&line).with_context(|| format!("bad job line: {line}"))?;
        let reply = worker.handle(job);
        let mut out = stdout.lock();
        writeln!(out, "{}{}", resilab_campaign::REPLY_PREFIX, serde_json::to_string(&reply)?)?;
        out.flush()?;
    }
    Ok(())
}

fn diff(args: DiffArgs) -> Result<()> {
    probe_in_child(&args.a)?;
    probe_in_child(&args.b)?;
    let d = resilab_inject::diff(&args.a, &args.b)?;
    if args.json { print_all(&format!("{}\n", serde_json::to_string_pretty(&d)?)) } else { print_all(&d.table(args.all)) }
}

/// The files a one-shot command reads with HDF5, for the commands that run guarded (see
/// [`run_guarded`]); `None` for the others.
fn hdf5_inputs(command: &Command) -> Option<Vec<PathBuf>> {
    match command {
        Command::Inspect(a) => Some(vec![a.checkpoint.clone()]),
        Command::Eval(a) => Some(vec![a.checkpoint.clone()]),
        Command::Diff(a) => Some(vec![a.a.clone(), a.b.clone()]),
        Command::Inject(a) => Some(a.file.iter().chain(&a.replay).cloned().collect()),
        _ => None,
    }
}

/// Runs the command in a child process of this binary and returns the exit code to end with:
/// the child's own, or 1 with one error line when a corrupt file crashed it (after removing the
/// files an injection had staged).
fn run_guarded(command: &Command, inputs: &[PathBuf]) -> i32 {
    use resilab_checkpoint::probe::{Guarded, rerun_guarded};
    match rerun_guarded() {
        Ok(Guarded::Exited(code)) => code,
        Ok(Guarded::Crashed { signal, pid, last_line }) => {
            if let Command::Inject(a) = command {
                let dirs = a.output.iter().chain(&a.log).chain(&a.file).map(|p| p.parent().map(Path::to_path_buf).unwrap_or_default());
                for dir in dirs.chain([PathBuf::new()]) {
                    let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
                    resilab_inject::remove_staged(&dir, pid);
                }
            }
            let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
            let detail = if last_line.is_empty() { String::new() } else { format!("; it last said: {last_line}") };
            let what = if names.is_empty() { "the input".to_string() } else { names.join(", ") };
            eprintln!("error: {what}: a corrupt file crashed the HDF5 library while it was read (signal {signal}){detail}");
            1
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn main() {
    allocator::keep_freed_memory();
    // `--version` names the HDF5 library too: which one is linked decides how corrupt files fail.
    let version: &'static str = Box::leak(
        format!("{} ({}, HDF5 {})", env!("CARGO_PKG_VERSION"), env!("RESILAB_GIT_REVISION"), resilab_h5::library_version())
            .into_boxed_str(),
    );
    let cli = Cli::from_arg_matches(&Cli::command().version(version).get_matches()).unwrap_or_else(|e| e.exit());
    if let Some(inputs) = hdf5_inputs(&cli.command)
        && !resilab_checkpoint::probe::is_guarded_child()
    {
        std::process::exit(run_guarded(&cli.command, &inputs));
    }
    // The command runs on a thread of the compute pool, not beside it: every parallel
    // operation then starts on a pool thread that takes its share of the work at once, where a
    // thread outside the pool hands the whole operation over and sleeps until it is done (a
    // futex wake and two context switches per operation: at batch 32, 13% of a VGG-11/4 step
    // on 2 threads and 27% on one).
    let result = set_threads(requested_threads(&cli.command)).and_then(|()| rayon::scope(|_| dispatch(cli.command)));
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Runs one command.
fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Train(a) => train(a),
        Command::Compare(a) => compare(a),
        Command::Inspect(a) => inspect(a),
        Command::Eval(a) => eval(a),
        Command::Advise(a) => advise(a),
        Command::Project(a) => project(a),
        Command::Probe { file } => resilab_checkpoint::probe::probe_file(&file).map_err(Into::into),
        Command::Inject(a) => inject(a),
        Command::Diff(a) => diff(a),
        Command::Campaign(a) => campaign(a),
        Command::Merge(a) => merge(a),
        Command::Report(a) => report(a),
        Command::CampaignWorker(a) => campaign_worker(a),
        Command::Bench(BenchCommand::Train(a)) => bench_train(a),
        Command::Bench(BenchCommand::Checkpoint(a)) => bench_checkpoint(a),
        Command::Bench(BenchCommand::Parallel(a)) => bench_parallel(a),
        Command::Bench(BenchCommand::Detect(a)) => bench_detect(a),
    }
}
