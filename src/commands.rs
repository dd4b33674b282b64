//! One handler per command: turns its flags into the library's options, calls the crate that
//! owns the command, and prints what it returns.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use resilab_models::{Arch, Compute, ModelConfig};
use resilab_runner::{BackendKind, RunConfig, RunOptions, default_out_dir};

use crate::cli::{
    AdviseArgs, BenchCheckpointArgs, BenchDetectArgs, BenchModelArgs, BenchParallelArgs, BenchTrainArgs, CampaignArgs, CompareArgs,
    ComputeArgs, DiffArgs, EvalArgs, ExportArgs, ImportArgs, InjectArgs, InspectArgs, MergeArgs, ProjectArgs, ReportArgs, TrainArgs,
    WorkerArgs,
};
use crate::edge::{device_for, print_all, probe_in_child, provenance};

pub(crate) fn compare(args: CompareArgs) -> Result<()> {
    let base = RunConfig::load(&args.train.config, &args.train.set)?;
    let backend = args.train.compute.backend.or(base.backend).unwrap_or_default();
    let (compute, device_name) = device_for(backend, &args.train.compute)?;
    let threads = rayon::current_num_threads();
    let root = args.train.out.clone().unwrap_or_else(|| default_out_dir(&format!("{}-compare", base.run_name())));
    let options = |cfg: &RunConfig, out: PathBuf| RunOptions {
        out,
        compute: compute.clone(),
        provenance: provenance(backend, &device_name, threads, cfg.seed),
        progress: !args.train.quiet,
        resume: None,
        probe: Box::new(|file: &Path| probe_in_child(file)),
        golden: Some(args.train.golden_dir.clone()),
        compare_fault_free: false,
        record_states: false,
        record_samples: args.train.record_samples,
        shortcuts: false,
        record_steps: false,
        data: resilab_runner::DataCache::default(),
    };
    let table = resilab_runner::compare::run(&args.train.config, &args.train.set, &args.strategies, &root, &options)?;
    println!("\n{table}");
    println!("table in {} and {}", root.join("table.txt").display(), root.join("strategies.csv").display());
    Ok(())
}

pub(crate) fn train(args: TrainArgs) -> Result<()> {
    let cfg = RunConfig::load(&args.config, &args.set)?;
    let backend = args.compute.backend.or(cfg.backend).unwrap_or_default();
    let (compute, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let out = args.out.unwrap_or_else(|| default_out_dir(&cfg.run_name()));
    let opts = RunOptions {
        out: out.clone(),
        compute,
        provenance: provenance(backend, &device_name, threads, cfg.seed),
        progress: !args.quiet,
        resume: args.resume,
        probe: Box::new(|file: &Path| probe_in_child(file)),
        golden: Some(args.golden_dir.clone()),
        compare_fault_free: false,
        record_states: false,
        record_samples: args.record_samples,
        shortcuts: false,
        record_steps: false,
        data: resilab_runner::DataCache::default(),
    };
    eprintln!(
        "resilab: training {} ({}) on {} ({threads} threads) -> {}",
        cfg.model.label(),
        cfg.parallel.describe(),
        device_name,
        out.display()
    );
    let s = resilab_runner::train(&cfg, &opts)?;
    println!("{}", s.text(&out, cfg.parallel.world()));
    Ok(())
}

/// Prints `value` as one JSON line with `json`, else `text()`.
fn emit(json: bool, value: &impl serde::Serialize, text: impl FnOnce() -> String) -> Result<()> {
    println!("{}", if json { serde_json::to_string(value)? } else { resilab_text::terminal_lines(&text()).into_owned() });
    Ok(())
}

pub(crate) fn eval(args: EvalArgs) -> Result<()> {
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, _) = device_for(backend, &args.compute)?;
    let probe = |file: &Path| probe_in_child(file);
    let r = resilab_runner::eval(&args.checkpoint, args.config.as_deref(), &args.set, &compute, &probe, args.predictions.as_deref())?;
    if let Some(line) = r.forward_pass.as_ref().and_then(|f| f.warning(&r.checkpoint)) {
        eprintln!("resilab: {}", resilab_text::terminal(&line));
    }
    emit(args.json, &r, || r.text())
}

pub(crate) fn import(args: ImportArgs) -> Result<()> {
    let request = resilab_interop::ImportRequest {
        weights: args.weights,
        config: args.config,
        overrides: args.set,
        out: args.out,
        allow_partial: args.allow_partial,
        probe: args.probe,
    };
    let r = resilab_interop::import(&request, &Compute::native(), &|file: &Path| probe_in_child(file))?;
    emit(args.json, &r, || r.text())
}

pub(crate) fn export(args: ExportArgs) -> Result<()> {
    let request = resilab_interop::ExportRequest {
        checkpoint: args.checkpoint,
        out: args.out,
        optimizer: args.optimizer,
        allow_altered: args.allow_altered,
        renames_from: args.renames_from,
    };
    let r = resilab_interop::export(&request, &|file: &Path| probe_in_child(file))?;
    emit(args.json, &r, || r.text())
}

pub(crate) fn advise(args: AdviseArgs) -> Result<()> {
    let (checkpoint_s, step_s) = match (&args.from_run, args.checkpoint_cost) {
        _ if let Some(dir) = &args.from_campaign => (resilab_campaign::mean_checkpoint_s(dir)?, None),
        (Some(dir), _) => {
            let (c, s) = resilab_runner::advise::run_costs(dir)?;
            (c, Some(s))
        }
        (None, Some(c)) => (c, None),
        (None, None) => bail!("give --checkpoint-cost, --from-run or --from-campaign"),
    };
    let mut a = resilab_checkpoint::advise::checked(checkpoint_s, args.restart_cost, args.mtbf)?;
    if let Some(s) = step_s {
        a = a.with_step_s(s);
    }
    emit(args.json, &a, || a.text())
}

pub(crate) fn project(args: ProjectArgs) -> Result<()> {
    use resilab_recovery::profile;
    let profile = match &args.profile {
        Some(name) => Some(
            profile::profile(name)
                .ok_or_else(|| anyhow::anyhow!("--profile {name}: no such cost profile (known: {})", profile::names()))?,
        ),
        None => None,
    };
    // The profile's constants first: the user's own --set overrides win.
    let mut set = profile.map(resilab_runner::project::profile_sets).unwrap_or_default();
    set.extend(args.set);
    let cfg = RunConfig::load(&args.config, &set)?;
    let node_mtbf_years = match args.failures_per_1000_node_days {
        Some(f) if f.is_finite() && f > 0.0 => 1000.0 / f / 365.25,
        Some(f) => anyhow::bail!("--failures-per-1000-node-days must be a number > 0, got {f}"),
        None => args.node_mtbf_years,
    };
    let request = resilab_runner::project::Request {
        workers: args.workers,
        node_mtbf_years,
        system_mtbf_steps: args.system_mtbf_steps,
        gpus_per_node: args.gpus_per_node,
        step_s: args.step_s,
        job_days: args.job_days,
        interval_steps: args.interval_steps,
        daly_factor: args.daly_factor,
        profile,
    };
    let study = (!args.no_study).then_some(args.study.as_path());
    println!("{}", resilab_report::job::answer(&cfg, &request, study, args.json)?);
    Ok(())
}

pub(crate) fn parse_arch(name: &str) -> Result<Arch> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|_| anyhow::anyhow!("--arch {name}: unknown architecture (allowed: resnet, vgg, alexnet)"))
}

/// The model a benchmark's `--arch`, `--depth`, `--width` and `--no-batch-norm` flags describe.
pub(crate) fn bench_model(flags: &BenchModelArgs, depth: usize) -> Result<(Arch, ModelConfig)> {
    let arch = parse_arch(&flags.arch)?;
    let depth = (arch != Arch::Alexnet).then_some(depth);
    Ok((arch, ModelConfig { arch, depth, width: flags.width, batch_norm: Some(!flags.no_batch_norm) }))
}

pub(crate) fn bench_checkpoint(args: BenchCheckpointArgs) -> Result<()> {
    let (_, model) = bench_model(&args.model, args.depth)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::bench::checkpoint(&model, args.batch, args.steps, args.reps, &args.dir, &compute)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

pub(crate) fn bench_train(args: BenchTrainArgs) -> Result<()> {
    let (arch, model) = bench_model(&args.model, args.depth)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let timing = resilab_runner::bench::train_step(&model, args.batch, args.warmup, args.steps, &compute)?;
    let (median_s, params) = (timing.median_s, timing.params);
    let train_gflop_per_image = 3.0 * timing.forward_flops as f64 / 1e9;
    let images_per_s = args.batch as f64 / median_s;
    let result = resilab_runner::bench::StepBench {
        implementation: "resilab",
        arch: arch.to_string(),
        depth: model.depth.unwrap_or(0),
        width: model.width,
        batch_norm: !args.model.no_batch_norm,
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

pub(crate) fn bench_detect(args: BenchDetectArgs) -> Result<()> {
    let (_, model) = bench_model(&args.model, args.depth)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::bench::detection(&model, args.batch, args.workers, args.warmup, args.steps, &compute)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

pub(crate) fn bench_precision(args: BenchTrainArgs) -> Result<()> {
    let (_, model) = bench_model(&args.model, args.depth)?;
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, _) = device_for(backend, &args.compute)?;
    let r = resilab_runner::bench::precision(&model, args.batch, args.warmup, args.steps, &compute)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

pub(crate) fn bench_parallel(args: BenchParallelArgs) -> Result<()> {
    let (_, model) = bench_model(&args.model, args.depth)?;
    let mut pipelines = Vec::new();
    for p in &args.pipeline {
        let parsed = p.split_once('x').and_then(|(s, m)| Some((s.trim().parse::<usize>().ok()?, m.trim().parse::<usize>().ok()?)));
        pipelines.push(parsed.ok_or_else(|| anyhow::anyhow!("--pipeline {p}: expected STAGESxMICRO_BATCHES such as 4x8"))?);
    }
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, device_name) = device_for(backend, &args.compute)?;
    let threads = rayon::current_num_threads();
    let layouts = resilab_runner::bench::layouts(&args.workers, &pipelines);
    let bar = indicatif::ProgressBar::new((layouts.len() + args.steps.max(1)) as u64);
    let mut rows = resilab_runner::bench::parallel(&model, args.batch, &layouts, args.warmup, args.steps, &compute, |msg| {
        bar.inc(1);
        bar.set_message(msg.to_string());
    })?;
    bar.finish_and_clear();
    println!("{}", resilab_runner::bench::ParallelBench::header());
    for r in &mut rows {
        (r.threads, r.backend, r.device) = (threads, backend.name().to_string(), device_name.clone());
        println!("{}", r.row());
    }
    if let Some(path) = &args.csv {
        resilab_runner::bench::append_csv(path, &rows)?;
    }
    Ok(())
}

pub(crate) fn inspect(args: InspectArgs) -> Result<()> {
    let file = if args.checkpoint.is_dir() { args.checkpoint.join(resilab_checkpoint::file_name(0)) } else { args.checkpoint.clone() };
    probe_in_child(&file)?;
    let report = resilab_checkpoint::inspect(&args.checkpoint)?;
    if let Some(line) = report.forward_pass.as_ref().and_then(|f| f.warning(&report.file)) {
        eprintln!("resilab: {}", resilab_text::terminal(&line));
    }
    if args.json { print_all(&format!("{}\n", serde_json::to_string_pretty(&report)?)) } else { print_all(&report.text()) }
}

pub(crate) fn inject(args: InjectArgs) -> Result<()> {
    let json = args.json;
    let request = resilab_inject::Request {
        file: args.file,
        config: args.config,
        replay: args.replay,
        output: args.output,
        in_place: args.in_place,
        log: args.log,
        seed: args.seed,
        unreadable: if args.skip_unreadable { resilab_inject::Unreadable::Skip } else { resilab_inject::Unreadable::Refuse },
        replace_link: args.replace_link,
        force: args.force,
    };
    let spec = resilab_inject::load_spec(&request)?;
    for key in spec.iter().flat_map(|s| &s.ignored) {
        eprintln!("resilab: note: ignoring {}", resilab_text::terminal(key));
    }
    let done = resilab_inject::inject(&request, spec, &|file: &Path| probe_in_child(file).map_err(|e| e.to_string()))?;
    for w in done.warnings() {
        eprintln!("resilab: warning: {w}");
    }
    if json {
        println!("{}", done.json());
    } else {
        println!("{}", resilab_text::terminal_lines(&done.text()));
    }
    Ok(())
}

pub(crate) fn campaign(args: CampaignArgs) -> Result<()> {
    let Some(config) = &args.config else {
        let (census, _, _) = resilab_campaign::census(&args.status)?;
        println!("{}", resilab_text::terminal_lines(&census.text()));
        return Ok(());
    };
    let c = resilab_campaign::Campaign::load(config, &args.set)?;
    let backend = args.backend.unwrap_or_default();
    let compute = ComputeArgs { threads: Some(args.threads), backend: Some(backend), wgpu_device: args.wgpu_device.clone() };
    let (compute, device_name) = device_for(backend, &compute)?;
    let jobs = resilab_campaign::jobs_for(args.threads, args.jobs, args.oversubscribe)?;
    let shard = args.shard.as_deref().map(resilab_campaign::parse_shard).transpose()?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("results").join("campaigns").join(c.name()));
    let platform = resilab_runner::platform::bits_key(backend.name(), &device_name);
    if args.dry_run {
        let e = resilab_campaign::estimate(&c, &out, shard, jobs, &platform, &compute)?;
        println!("{}", e.text(&c, args.threads, jobs));
        return Ok(());
    }
    let shard_text = shard.map_or(String::new(), |(i, n)| format!(", shard {i}/{n}"));
    let (name, runs, threads) = (resilab_text::terminal(&c.name()).into_owned(), c.len(), args.threads);
    eprintln!(
        "resilab: campaign {name} ({runs} runs{shard_text}) into {} with {jobs} worker process(es) of {threads} thread(s)",
        out.display()
    );
    let opts = resilab_campaign::Options {
        out: out.clone(),
        jobs,
        shard,
        resume: args.resume,
        worker: resilab_campaign::worker_command(args.threads, backend.name(), &args.wgpu_device, !args.no_shortcuts)?,
        progress: !args.quiet,
        timeout_s: args.timeout,
        platform,
        revision: env!("RESILAB_GIT_REVISION").to_string(),
    };
    let outcome = match resilab_campaign::execute(&c, &opts) {
        // A worker ended by TERM, INT or HUP: said in one line, then this process ends as that
        // signal ends it, as it would have had the signal reached it first.
        Err(e @ resilab_campaign::Error::Interrupted { signal, .. }) => {
            eprintln!("resilab: {e}");
            resilab_runner::interrupt::end_as(signal)
        }
        r => r?,
    };
    println!("{}", outcome.text(&out));
    Ok(())
}

pub(crate) fn report(args: ReportArgs) -> Result<()> {
    if let Some(d) = args.power {
        return print_all(&resilab_report::power(&args.dir, d)?);
    }
    if args.paper {
        println!("the paper presets' README -> {}", resilab_report::write_paper_readme(&args.dir)?.display());
        return Ok(());
    }
    let out = args.out.unwrap_or_else(|| args.dir.join("report"));
    let mut set = resilab_report::price::Overrides::parse(&args.set)?;
    if let Some(name) = &args.price {
        set = set.with_profile(name, args.price_scale)?;
    }
    if let Some(file) = &args.at_jobs {
        set = set.with_jobs(resilab_report::read_jobs(file)?);
    }
    let detectors = args.detectors.then_some(resilab_report::DetectorOptions { budget_per_1000_steps: args.false_alarm_budget });
    let w = resilab_report::report_with(&args.dir, &out, &set, detectors.as_ref())?;
    println!("{} runs in {} cells -> {} ({} files)", w.runs, w.cells, out.join("report.md").display(), w.files.len());
    Ok(())
}

pub(crate) fn merge(args: MergeArgs) -> Result<()> {
    let m = resilab_campaign::merge(&args.out, &args.dirs, args.partial)?;
    if m.missing > 0 {
        eprintln!("resilab: merged without {} run(s) of the grid that no part recorded (--partial)", m.missing);
    }
    let platforms: std::collections::BTreeSet<&String> = m.platforms.iter().collect();
    if platforms.len() > 1 {
        eprintln!("resilab: the parts ran on {} platforms (results differ between them without any fault):", platforms.len());
        for (d, p) in args.dirs.iter().zip(&m.platforms) {
            eprintln!("  {}: {}", d.display(), resilab_text::terminal(p));
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

pub(crate) fn campaign_worker(args: WorkerArgs) -> Result<()> {
    let backend = args.compute.backend.unwrap_or_default();
    let (compute, device_name) = device_for(backend, &args.compute)?;
    let prov = provenance(backend, &device_name, rayon::current_num_threads(), 0);
    let probe = |file: &Path| probe_in_child(file);
    let mut worker = resilab_campaign::Worker::new(&args.dir, compute, prov, &probe)?.with_shortcuts(!args.no_shortcuts);
    Ok(resilab_campaign::serve(&mut worker)?)
}

pub(crate) fn diff(args: DiffArgs) -> Result<()> {
    probe_in_child(&args.a)?;
    probe_in_child(&args.b)?;
    let d = resilab_inject::diff(&args.a, &args.b)?;
    if args.json { print_all(&format!("{}\n", serde_json::to_string_pretty(&d)?)) } else { print_all(&d.table(args.all)) }
}
