//! The `resilab` command line: parses arguments, picks the backend at its edge, and dispatches
//! each command to its handler.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{CommandFactory as _, FromArgMatches as _};

use crate::cli::{BenchCommand, Cli, Command};

mod allocator;
mod cli;
mod commands;
mod edge;

/// The files a one-shot command reads with HDF5, for the commands that run guarded (see
/// [`run_guarded`]); `None` for the others.
fn hdf5_inputs(command: &Command) -> Option<Vec<PathBuf>> {
    match command {
        Command::Inspect(a) => Some(vec![a.checkpoint.clone()]),
        Command::Eval(a) => Some(vec![a.checkpoint.clone()]),
        Command::Export(a) => Some(vec![a.checkpoint.clone()]),
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
        // Stopped by TERM, INT or HUP (to the process group or to the child alone): an
        // interruption, never a corrupt file; this process ends as the signal ends it.
        Ok(Guarded::Crashed { signal, .. }) if resilab_runner::interrupt::SIGNALS.contains(&signal) => {
            resilab_runner::interrupt::end_as(signal)
        }
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
            let line = format!("error: {what}: a corrupt file crashed the HDF5 library while it was read (signal {signal}){detail}");
            eprintln!("{}", resilab_text::terminal_lines(&line));
            1
        }
        Err(e) => {
            eprintln!("error: {}", resilab_text::terminal_lines(&e.to_string()));
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
    // The memory budget every declared size is checked against: a RESILAB_MAX_MEMORY that is
    // not a size is refused here, before any command, naming the variable alone.
    if let Err(e) = resilab_limits::memory_budget() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    // A TERM, INT or HUP removes the temporary directories a command made before the process ends.
    if let Err(e) = resilab_runner::interrupt::install() {
        eprintln!("resilab: warning: cannot watch for TERM, INT and HUP ({e}); an interrupted run may leave temporary directories");
    }
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
    let result = edge::set_threads(edge::requested_threads(&cli.command)).and_then(|()| rayon::scope(|_| dispatch(cli.command)));
    // An error may name a file, a dataset or a label: its control characters are shown as
    // escapes, never sent to the terminal.
    if let Err(e) = result {
        eprintln!("error: {}", resilab_text::terminal_lines(&format!("{e:#}")));
        std::process::exit(1);
    }
}

/// Runs one command.
fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Train(a) => commands::train(a),
        Command::Compare(a) => commands::compare(a),
        Command::Inspect(a) => commands::inspect(a),
        Command::Eval(a) => commands::eval(a),
        Command::Import(a) => commands::import(a),
        Command::Export(a) => commands::export(a),
        Command::Advise(a) => commands::advise(a),
        Command::Project(a) => commands::project(a),
        Command::Probe { file } => resilab_checkpoint::probe::probe_file(&file).map_err(Into::into),
        Command::Inject(a) => commands::inject(a),
        Command::Diff(a) => commands::diff(a),
        Command::Campaign(a) => commands::campaign(a),
        Command::Merge(a) => commands::merge(a),
        Command::Report(a) => commands::report(a),
        Command::CampaignWorker(a) => commands::campaign_worker(a),
        Command::Bench(BenchCommand::Train(a)) => commands::bench_train(a),
        Command::Bench(BenchCommand::Checkpoint(a)) => commands::bench_checkpoint(a),
        Command::Bench(BenchCommand::Parallel(a)) => commands::bench_parallel(a),
        Command::Bench(BenchCommand::Detect(a)) => commands::bench_detect(a),
        Command::Bench(BenchCommand::Precision(a)) => commands::bench_precision(a),
    }
}
