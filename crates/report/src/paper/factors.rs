//! Each factor of the N-EV factor study on its own: N-EV at one level against the other,
//! pooled over the other factors and the models (the grid is a full factorial, so this is the
//! factor's main effect), per flip count, from `runs.csv` (runs with status `ok` whose step
//! counter no flip altered). The report's two-proportion test ([`stats::two_proportions`],
//! Newcombe's interval), Holm-adjusted over these comparisons ([`stats::holm`]); each level's
//! pooled N-EV with its Wilson interval against the published range.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::fmt::{fixed, fmt_g, signed};
use super::presets::PUBLISHED_NEV;
use super::read::{self, Rec, Table};
use super::section::{Section, Summary};
use crate::{Result, stats};

/// A factor: its level `a` against its level `b`, each a value per column.
struct Factor {
    columns: &'static [&'static str],
    a: &'static [&'static str],
    b: &'static [&'static str],
    label: &'static str,
}

/// The column that says which continuation a run belongs to (not in `runs.csv`: the preset
/// it came from).
const CONTINUATION: &str = "continuation";
/// The continuations: the short preset's and the long one's.
const SHORT_STEPS: &str = "20 steps";
const LONG_STEPS: &str = "400 steps";

const FACTORS: &[Factor] = &[
    Factor { columns: &["inject"], a: &["32-bit word"], b: &["64-bit view"], label: "precision" },
    Factor { columns: &["inject.allow_NaN_values"], a: &["true"], b: &["false"], label: "allow_NaN_values" },
    Factor { columns: &["inject.use_random_locations"], a: &["false"], b: &["true"], label: "datasets drawn over the whole file" },
    Factor { columns: &[CONTINUATION], a: &[SHORT_STEPS], b: &[LONG_STEPS], label: "continuation" },
    // The reference injector's sample configs and default against Table 1's setting.
    Factor {
        columns: &["inject", "inject.allow_NaN_values"],
        a: &["32-bit word", "true"],
        b: &["64-bit view", "false"],
        label: "precision and allow_NaN_values together",
    },
];

/// A run whose N-EV counts: status `ok`, step counter unaltered.
struct Run<'a> {
    rec: Rec<'a>,
    continuation: &'static str,
}

impl Run<'_> {
    fn is(&self, columns: &[&str], level: &[&str]) -> Result<bool> {
        for (col, want) in columns.iter().zip(level) {
            let v = if *col == CONTINUATION { self.continuation } else { self.rec.field(col)? };
            if v != *want {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The runs of both presets that ran or met a corrupt file, counted per (preset, flips).
#[derive(Default)]
struct Counts {
    total: BTreeMap<(usize, String), u64>,
    corrupt: BTreeMap<(usize, String), u64>,
    altered: BTreeMap<(usize, String), u64>,
}

impl Counts {
    fn of(map: &BTreeMap<(usize, String), u64>, flips: &str) -> u64 {
        map.get(&(0, flips.to_string())).copied().unwrap_or(0)
    }
}

/// One comparison: `k` of `n` runs with N-EV at each level, the fewer seeds of the two.
struct Group {
    flips: &'static str,
    label: &'static str,
    a: String,
    b: String,
    ka: u64,
    na: u64,
    kb: u64,
    nb: u64,
    seeds: usize,
    test: stats::Test,
}

/// The pooled section of `short` (with the continuation factor against `long` where both
/// ran on the same numerics), or `None` where `short` has no usable run.
pub(super) fn section(root: &Path, short: &str, long: &str) -> Result<Option<Section>> {
    let tables = [Table::read(&root.join(short).join("runs.csv"))?, Table::read(&root.join(long).join("runs.csv"))?];
    let mut counts = Counts::default();
    let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    for (i, (table, steps)) in tables.iter().zip([SHORT_STEPS, LONG_STEPS]).enumerate() {
        for r in table.rows() {
            let key = (i, r.field("inject.injection_tries")?.to_string());
            let status = r.field("status")?;
            if status == "ok" || status == "corrupt_file" {
                *counts.total.entry(key.clone()).or_default() += 1;
            }
            if status == "corrupt_file" {
                *counts.corrupt.entry(key).or_default() += 1;
            } else if status == "ok" && r.get("base_step").unwrap_or_default() != r.get("restart_step").unwrap_or_default() {
                *counts.altered.entry(key).or_default() += 1;
            } else if status == "ok" {
                runs[i].push(Run { rec: r, continuation: steps });
            }
        }
    }
    if runs[0].is_empty() {
        return Ok(None);
    }
    if !runs[1].is_empty() && read::numerics_of(&root.join(short))? != read::numerics_of(&root.join(long))? {
        runs[1].clear();
    }
    let with_long = !runs[1].is_empty();
    let [a, b] = runs;
    let rows: Vec<Run> = a.into_iter().chain(b).collect();
    let groups = groups(&rows, with_long)?;
    let mut lines = intro(short, long, with_long, &counts);
    let verdicts = table(&groups, &mut lines);
    lines.push(String::new());
    let summary = Summary {
        name: format!("{short} (pooled)"),
        published: "table 1: which setting its N-EV came from".to_string(),
        runs: format!("{} ok runs", rows.len()),
        verdicts,
    };
    Ok(Some(Section { text: lines.join("\n"), summary }))
}

/// Per flip count and factor, both levels' pooled N-EV counts and their test, where both
/// levels have runs. The continuation factor only where the long preset's runs count; every
/// other factor within the short continuation.
fn groups(rows: &[Run], with_long: bool) -> Result<Vec<Group>> {
    let mut groups = Vec::new();
    for flips in ["10", "100"] {
        for f in FACTORS.iter().filter(|f| with_long || f.label != "continuation") {
            let mut pools = Vec::new();
            for level in [f.a, f.b] {
                let (mut k, mut n, mut seeds) = (0, 0, BTreeSet::new());
                for r in rows {
                    let within = f.columns == [CONTINUATION] || r.continuation == SHORT_STEPS;
                    if r.rec.field("inject.injection_tries")? == flips && r.is(f.columns, level)? && within {
                        k += u64::from(r.rec.field("nev")? == "true");
                        n += 1;
                        seeds.insert(r.rec.field("seed")?);
                    }
                }
                pools.push((k, n, seeds.len()));
            }
            let [(ka, na, sa), (kb, nb, sb)] = [pools[0], pools[1]];
            if let Some(test) = stats::two_proportions(ka, na, kb, nb) {
                let (a, b) = (f.a.join(" + "), f.b.join(" + "));
                groups.push(Group { flips, label: f.label, a, b, ka, na, kb, nb, seeds: sa.min(sb), test });
            }
        }
    }
    Ok(groups)
}

/// `k of n (p% [Wilson 95%])`.
fn rate(k: u64, n: u64) -> String {
    match stats::wilson(k, n) {
        Some((lo, hi)) => format!("{k} of {n} ({}% [{}, {}])", pct(k, n), fixed(100.0 * lo, 1), fixed(100.0 * hi, 1)),
        None => format!("{k} of {n}"),
    }
}

/// `100 k / n` with one decimal.
fn pct(k: u64, n: u64) -> String {
    fixed(100.0 * k as f64 / n as f64, 1)
}

fn intro(short: &str, long: &str, with_long: bool, counts: &Counts) -> Vec<String> {
    let versus = if with_long { format!(", except for the continuation factor, which compares it with `{long}`") } else { String::new() };
    let left_out: Vec<String> = ["10", "100"]
        .iter()
        .map(|flips| {
            let total = Counts::of(&counts.total, flips);
            format!(
                "{flips} flips: files the loader rejected {}, runs whose step counter a flip altered (their continuation trained another number of steps) {}",
                rate(Counts::of(&counts.corrupt, flips), total),
                rate(Counts::of(&counts.altered, flips), total)
            )
        })
        .collect();
    vec![
        format!("## {short}: each factor's effect on N-EV, pooled"),
        String::new(),
        format!(
            "N-EV (by the outcome) at each level of one factor, pooled over the other factors and the three models (a full factorial, \
             so each factor's main effect), per flip count, within `{short}` (20-step continuation){versus}. The report's two-proportion \
             test (Newcombe's interval), Holm over these comparisons. Published N-EV: 2.8-8.8% at 10 flips, 12.8-66.8% at 100."
        ),
        String::new(),
        format!(
            "Left out of N-EV's denominator, each its own rate of the `{short}` runs that ran or met such a file: {}.",
            left_out.join("; ")
        ),
        String::new(),
        "| flips | factor | level a: N-EV % [95%] | level b: N-EV % [95%] | b - a [95% CI] | p Holm | verdict | in the published range |"
            .to_string(),
        "|---|---|---|---|---|---|---|---|".to_string(),
    ]
}

/// The table's rows, Holm over the groups; "shown" at p < 0.05 with 3 seeds on both sides.
/// Returns the summary's verdicts.
fn table(groups: &[Group], lines: &mut Vec<String>) -> Vec<(String, String)> {
    let p: Vec<f64> = groups.iter().map(|g| g.test.p).collect();
    let mut verdicts = Vec::new();
    for (g, p_holm) in groups.iter().zip(stats::holm(&p)) {
        let (lo_pub, hi_pub) = PUBLISHED_NEV.iter().find(|(f, _, _)| *f == g.flips).map_or((f64::NAN, f64::NAN), |&(_, lo, hi)| (lo, hi));
        let (mut levels, mut inside) = (Vec::new(), Vec::new());
        for (level, k, n) in [(&g.a, g.ka, g.na), (&g.b, g.kb, g.nb)] {
            let (wl, wh) = stats::wilson(k, n).unwrap_or((f64::NAN, f64::NAN));
            levels.push(format!("{level}: {} [{}, {}] (n = {n})", pct(k, n), fixed(100.0 * wl, 1), fixed(100.0 * wh, 1)));
            if 100.0 * wl <= hi_pub && 100.0 * wh >= lo_pub {
                inside.push(level.as_str());
            }
        }
        let verdict = if p_holm < stats::ALPHA && g.seeds >= crate::MIN_SEEDS { "shown" } else { "not shown" };
        let diff = signed(100.0 * g.test.diff, 1);
        let inside = if inside.is_empty() { "neither".to_string() } else { inside.join(", ") };
        lines.push(format!(
            "| {} | {} | {} | {} | {diff} [{}, {}] | {} | {verdict} | {inside} |",
            g.flips,
            g.label,
            levels[0],
            levels[1],
            signed(100.0 * g.test.ci.0, 1),
            signed(100.0 * g.test.ci.1, 1),
            fmt_g(p_holm, 2)
        ));
        verdicts.push((format!("{} at {} flips", g.label, g.flips), format!("{verdict} ({diff} points)")));
    }
    verdicts
}
