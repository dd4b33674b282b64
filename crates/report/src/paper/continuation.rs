//! N-EV after the short continuation against the long one on the same injections: runs are
//! paired by cell, seed and repetition (the same base checkpoint and fault seed, so the same
//! altered files) and tested with the report's exact McNemar test ([`stats::mcnemar_exact`]),
//! Holm over the cells ([`stats::holm`]). Only when both presets ran on the same numerics:
//! otherwise their altered files differ.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::fmt::{fmt_g, signed};
use super::read::{self, Rec, Table};
use super::section::{Section, Summary, Tally};
use crate::{Result, stats};

const CLAIM: &str = "the longer continuation gives less N-EV";
const PUBLISHED: &str = "table 1: the continuation's length";

/// A run's cell (its values on the axes), seed and repetition.
type Key<'a> = (Vec<&'a str>, &'a str, &'a str);

/// The runs of one cell, paired: (N-EV after the short continuation, after the long one,
/// seed).
struct Cell<'a> {
    coords: Vec<&'a str>,
    pairs: Vec<(bool, bool, &'a str)>,
}

/// The paired section, or `None` where either preset has no runs.
pub(super) fn section(root: &Path, short: &str, long: &str) -> Result<Option<Section>> {
    let a_runs = Table::read(&root.join(short).join("runs.csv"))?;
    let b_runs = Table::read(&root.join(long).join("runs.csv"))?;
    if a_runs.is_empty() || b_runs.is_empty() {
        return Ok(None);
    }
    let mut lines = vec![format!("## {short} vs {long}: the continuation's length"), String::new()];
    let na = read::numerics_of(&root.join(short))?;
    let nb = read::numerics_of(&root.join(long))?;
    if na != nb {
        lines.push(format!(
            "Not compared: `{short}` ran on `{na}` and `{long}` on `{nb}`, so their base checkpoints, and the files the same flips altered, \
             differ; the runs are not paired. Rerun both on the same numerics to compare them."
        ));
        lines.push(String::new());
        let verdicts = vec![(CLAIM.to_string(), "not compared (different numerics)".to_string())];
        let summary =
            Summary { name: format!("{short} vs {long}"), published: PUBLISHED.to_string(), runs: "0 pairs".to_string(), verdicts };
        return Ok(Some(Section { text: lines.join("\n"), summary }));
    }
    let (axes, cells) = paired(&a_runs, &b_runs)?;
    let (tally, details) = tests(&axes, &cells, short, long);
    let v = tally.counted();
    lines.push(format!(
        "N-EV after the {short} continuation against the {long} one on the same altered checkpoints (paired by cell, seed and repetition; \
         runs whose step counter was altered left out), exact McNemar test, Holm over the cells."
    ));
    lines.push(String::new());
    lines.push(format!("- **{CLAIM}**: {v}."));
    lines.extend(details);
    lines.push(String::new());
    let pairs: usize = cells.iter().map(|c| c.pairs.len()).sum();
    let summary = Summary {
        name: format!("{short} vs {long}"),
        published: PUBLISHED.to_string(),
        runs: format!("{pairs} paired runs"),
        verdicts: vec![(CLAIM.to_string(), v)],
    };
    Ok(Some(Section { text: lines.join("\n"), summary }))
}

/// The usable runs of `a` (status `ok`, step counter unaltered) paired with those of `b` of
/// the same cell, seed and repetition, per cell in the order `a` first names them. The axes
/// are `a`'s `inject*` and `model` columns, returned first.
fn paired<'a>(a: &'a Table, b: &'a Table) -> Result<(Vec<&'a str>, Vec<Cell<'a>>)> {
    let axes: Vec<&str> = a.headers().iter().map(String::as_str).filter(|k| k.starts_with("inject") || *k == "model").collect();
    let key = |r: &Rec<'a>| -> Result<Key<'a>> {
        let coords = axes.iter().map(|k| r.field(k)).collect::<Result<Vec<_>>>()?;
        Ok((coords, r.field("seed")?, r.field("rep")?))
    };
    let usable = |r: &Rec<'a>| -> Result<bool> {
        Ok(r.field("status")? == "ok" && r.get("base_step").unwrap_or_default() == r.get("restart_step").unwrap_or_default())
    };
    let mut longer: HashMap<Key<'a>, Rec<'a>> = HashMap::new();
    for r in b.rows() {
        if usable(&r)? {
            longer.insert(key(&r)?, r);
        }
    }
    let mut cells: Vec<Cell<'a>> = Vec::new();
    for r in a.rows() {
        if !usable(&r)? {
            continue;
        }
        let k = key(&r)?;
        let Some(l) = longer.get(&k) else { continue };
        let pair = (r.field("nev")? == "true", l.field("nev")? == "true", r.field("seed")?);
        match cells.iter_mut().find(|c| c.coords == k.0) {
            Some(c) => c.pairs.push(pair),
            None => cells.push(Cell { coords: k.0, pairs: vec![pair] }),
        }
    }
    Ok((axes, cells))
}

/// Each cell's McNemar test, Holm over the cells; "shown" at p < 0.05 with 3 seeds. The
/// tally of the cells shown either way, and a line per cell.
fn tests(axes: &[&str], cells: &[Cell], short: &str, long: &str) -> (Tally, Vec<String>) {
    let discordant: Vec<(u64, u64)> = cells
        .iter()
        .map(|c| {
            let only_short = c.pairs.iter().filter(|(x, y, _)| *x && !*y).count() as u64;
            let only_long = c.pairs.iter().filter(|(x, y, _)| *y && !*x).count() as u64;
            (only_short, only_long)
        })
        .collect();
    let p: Vec<f64> = discordant.iter().map(|&(b, c)| stats::mcnemar_exact(b, c)).collect();
    let mut tally = Tally { of: cells.len(), ..Tally::default() };
    let mut lines = Vec::new();
    for ((cell, (b, c)), ph) in cells.iter().zip(&discordant).zip(stats::holm(&p)) {
        let n = cell.pairs.len();
        let seeds = cell.pairs.iter().map(|(_, _, s)| *s).collect::<BTreeSet<_>>().len();
        let with_long = cell.pairs.iter().filter(|(_, y, _)| *y).count() as f64;
        let with_short = cell.pairs.iter().filter(|(x, _, _)| *x).count() as f64;
        let diff = 100.0 * (with_long - with_short) / n as f64;
        let ok = ph < stats::ALPHA && seeds >= crate::MIN_SEEDS;
        tally.shown += usize::from(ok && diff < 0.0);
        tally.against += usize::from(ok && diff > 0.0);
        let label: Vec<String> =
            axes.iter().zip(&cell.coords).map(|(k, v)| format!("{}={v}", k.strip_prefix("inject.").unwrap_or(k))).collect();
        lines.push(format!(
            "  - {}: {} points ({n} paired runs, N-EV in {short} only {b}, in {long} only {c}, McNemar p Holm {}, {seeds} seeds): {}",
            label.join(", "),
            signed(diff, 1),
            fmt_g(ph, 2),
            if ok { "shown" } else { "not shown" }
        ));
    }
    (tally, lines)
}
