//! The summary table and the CSV rows (one per command) of a fuzzing run.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

use crate::classify::Class;
use crate::driver::Report;

/// Where and on what a fuzzing run ran.
#[derive(Clone, Debug)]
pub struct Provenance {
    /// UTC date and time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The resilab git revision under test.
    pub revision: String,
    /// The HDF5 library the binary under test links (from `resilab --version`), or `unknown`.
    pub hdf5: String,
}

/// The first line a program prints, if it runs.
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().next()?.trim().to_string()).filter(|l| !l.is_empty())
}

impl Provenance {
    /// Now, with the git revision and the HDF5 version the binary `resilab` reports
    /// (`resilab 0.1.0 (f30b14de6e1c, HDF5 1.10.8)`); `fallback` is the revision where it
    /// reports none.
    pub fn now(fallback: &str, resilab: &Path) -> Self {
        let date = first_line("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_else(|| "unknown".into());
        let version = first_line(&resilab.to_string_lossy(), &["--version"]).unwrap_or_default();
        let inside = version.split_once('(').map_or("", |(_, r)| r.trim_end_matches(')'));
        let (revision, hdf5) = match inside.split_once(", HDF5 ") {
            Some((rev, h)) => (rev.to_string(), h.to_string()),
            None => (fallback.to_string(), "unknown".to_string()),
        };
        Self { date, revision, hdf5 }
    }
}

/// The table: one row per command, one column per class, then seconds.
pub fn table(report: &Report) -> String {
    let mut out = format!("{:<8} {:>6}", "command", "cases");
    for c in Class::ALL {
        out += &format!(" {:>w$}", c.name(), w = c.name().len().max(4));
    }
    out += &format!(" {:>9}\n", "seconds");
    for t in &report.tallies {
        out += &format!("{:<8} {:>6}", t.target.name(), t.cases());
        for c in Class::ALL {
            out += &format!(" {:>w$}", t.count(c), w = c.name().len().max(4));
        }
        out += &format!(" {:>9.1}\n", t.seconds);
    }
    out
}

/// The first failing case of each command and class, a few lines each.
pub fn examples(report: &Report) -> String {
    let mut out = String::new();
    for e in &report.examples {
        let stderr: Vec<&str> = e.stderr.lines().filter(|l| !l.trim().is_empty()).take(4).collect();
        out += &format!("{} #{} {}: {}\n  $ {}\n", e.target, e.index, e.class, e.mutation, e.command_line);
        for l in stderr {
            out += &format!("  | {}\n", l.chars().take(300).collect::<String>());
        }
    }
    out
}

/// One CSV row.
#[derive(serde::Serialize)]
struct Row<'a> {
    date: &'a str,
    revision: &'a str,
    hdf5: &'a str,
    command: &'a str,
    cases: usize,
    ok: usize,
    clean_error: usize,
    messy_error: usize,
    panic: usize,
    signal: usize,
    hang: usize,
    input_modified: usize,
    seconds: f64,
}

/// Appends one row per command to the CSV at `path` (header written when the file is new;
/// parent directories created). `seconds` is the summed wall time of the command's cases.
pub fn append_csv(path: &Path, prov: &Provenance, report: &Report) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("{}", parent.display()))?;
    }
    let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("{}", path.display()))?;
    let mut w = resilab_text::CsvWriter::new(file, new);
    for t in &report.tallies {
        w.serialize(Row {
            date: &prov.date,
            revision: &prov.revision,
            hdf5: &prov.hdf5,
            command: t.target.name(),
            cases: t.cases(),
            ok: t.count(Class::Ok),
            clean_error: t.count(Class::CleanError),
            messy_error: t.count(Class::MessyError),
            panic: t.count(Class::Panic),
            signal: t.count(Class::Signal),
            hang: t.count(Class::Hang),
            input_modified: t.count(Class::InputModified),
            seconds: (t.seconds * 10.0).round() / 10.0,
        })
        .with_context(|| format!("{}", path.display()))?;
    }
    w.flush().with_context(|| format!("{}", path.display()))
}
