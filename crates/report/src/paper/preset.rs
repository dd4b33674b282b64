//! A preset's section: its cells (`cells.csv`), each claim's verdict with the comparisons it
//! counts (`comparisons.csv`), and for some presets the cells in the published N-EV range,
//! the critical bits (`bits.csv`) or the differences shown. A study's report goes to
//! [`super::study`].

use std::path::Path;

use serde::Deserialize;

use super::fmt::{fixed, fmt_g, num, signed};
use super::presets::{Claim, PUBLISHED_NEV, Preset};
use super::read::{self, Table, bad};
use super::section::{Section, Summary, Tally};
use crate::Result;

/// A row of a grid report's `comparisons.csv`.
#[derive(Deserialize)]
struct Compared {
    axis: String,
    fixed: String,
    a: String,
    b: String,
    metric: String,
    value_a: Option<f64>,
    value_b: Option<f64>,
    n_a: String,
    n_b: String,
    seeds: String,
    diff: Option<f64>,
    ci_lo: Option<f64>,
    ci_hi: Option<f64>,
    p_holm: Option<f64>,
    verdict: String,
}

/// A row of `bits.csv`.
#[derive(Deserialize)]
struct Bit {
    precision: String,
    bit: String,
    nev_pct: Option<f64>,
    nev_lo: Option<f64>,
    nev_hi: Option<f64>,
    others_nev_pct: Option<f64>,
    verdict: String,
}

/// The section of `preset`, or `None` where its folder has no cells or no comparisons (it has
/// not run, or an earlier resilab wrote it).
pub(super) fn section(root: &Path, preset: &Preset) -> Result<Option<Section>> {
    let dir = root.join(preset.folder);
    let cells = Table::read(&dir.join("cells.csv"))?;
    let comparisons = dir.join("comparisons.csv");
    if cells.is_empty() || !comparisons.exists() {
        return Ok(None);
    }
    // A study's report tests hypotheses; one without any tests reads as a grid's.
    if read::has_column(&comparisons, "hypothesis")?
        && let Some(s) = super::study::section(&dir, preset)?
    {
        return Ok(Some(s));
    }
    let comps: Vec<Compared> = read::rows(&comparisons)?;
    let meta = read::meta(&dir)?;
    let runs = cells.rows().map(|c| c.count("runs")).sum::<Result<u64>>()?;
    let wall = read::wall(&dir)?;
    let name = preset.folder;
    let revision = meta.revision.as_deref().filter(|r| !r.is_empty()).map_or(String::new(), |r| format!(", code revision `{r}`"));
    let mut lines = vec![
        format!("## {name}: {}", preset.what),
        String::new(),
        format!(
            "Published: {}. {runs} runs in {wall} s (base and golden runs included) on `{}`, started {}{revision}. \
             Files: `{name}/report.md` (rules, all columns, plots), `cells.csv`, `comparisons.csv` (every test), `runs.csv`.",
            preset.published,
            meta.platform.as_deref().unwrap_or("?"),
            meta.started.as_deref().unwrap_or("?"),
        ),
        String::new(),
        cells_table(&cells)?,
        String::new(),
    ];
    let mut verdicts = Vec::new();
    for claim in preset.claims {
        let (v, rows) = verdict(&comps, claim, &comparisons)?;
        lines.push(format!("- **{}**: {v}.", claim.text));
        for c in rows {
            lines.push(format!("  - {}", detail(c, &comparisons)?));
        }
        verdicts.push((claim.text.to_string(), v));
    }
    if name.starts_with("nev-factors") {
        lines.extend(published_range(&cells)?);
        verdicts.push(("cells in the published range".to_string(), "see section".to_string()));
    }
    if name == "bits" {
        verdicts.extend(critical_bits(&dir, &mut lines)?);
    }
    if dir.join("fields.csv").is_file() {
        verdicts.extend(exponent_flips(&dir, &mut lines)?);
    }
    if preset.claims.is_empty() && !comps.is_empty() {
        verdicts.push(differences_shown(&comps, &comparisons, &mut lines)?);
    }
    lines.push(String::new());
    let summary = Summary { name: name.to_string(), published: preset.published.to_string(), runs: format!("{runs} ({wall} s)"), verdicts };
    Ok(Some(Section { text: lines.join("\n"), summary }))
}

/// The claim's verdict and the comparisons it counts: those of its axis, options and metric,
/// one per combination of the other coordinates. "no test" where there is none.
fn verdict<'a>(comps: &'a [Compared], claim: &Claim, path: &Path) -> Result<(String, Vec<&'a Compared>)> {
    let rows: Vec<&Compared> =
        comps.iter().filter(|c| c.axis == claim.axis && c.a == claim.a && c.b == claim.b && c.metric == claim.metric).collect();
    if rows.is_empty() {
        return Ok(("no test".to_string(), rows));
    }
    let mut tally = Tally { of: rows.len(), ..Tally::default() };
    for c in rows.iter().filter(|c| c.verdict == "shown") {
        let d = value(c.diff, path, "diff")? * f64::from(claim.sign);
        tally.shown += usize::from(d > 0.0);
        tally.against += usize::from(d < 0.0);
    }
    Ok((tally.verdict(), rows))
}

/// A number the line needs; an error naming the file and column where the field is empty.
fn value(v: Option<f64>, path: &Path, col: &str) -> Result<f64> {
    v.ok_or_else(|| bad(path, format!("empty {col} in a comparison")))
}

/// One comparison as a claim lists it: the fixed coordinates, both values, the difference
/// with its interval, Holm's p, the runs and seeds, the verdict.
fn detail(c: &Compared, path: &Path) -> Result<String> {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| fixed(v, 1));
    Ok(format!(
        "{}: {} -> {} ({} [{}, {}], p Holm {}, n = {}/{}, {} seeds): {}",
        c.fixed,
        opt(c.value_a),
        opt(c.value_b),
        signed(value(c.diff, path, "diff")?, 1),
        signed(value(c.ci_lo, path, "ci_lo")?, 1),
        signed(value(c.ci_hi, path, "ci_hi")?, 1),
        fmt_g(value(c.p_holm, path, "p_holm")?, 2),
        c.n_a,
        c.n_b,
        c.seeds,
        c.verdict
    ))
}

/// For the N-EV factor study: per flip count, the cells whose N-EV interval overlaps the
/// published range.
fn published_range(cells: &Table) -> Result<Vec<String>> {
    let mut lines = vec![
        "- **Cells whose N-EV (Wilson 95% interval) overlaps the published range** (10 flips: 2.8-8.8%, 100 flips: 12.8-66.8%):"
            .to_string(),
    ];
    let axes = axes_of(cells);
    for (flips, lo, hi) in PUBLISHED_NEV {
        let total: Vec<_> = cells.rows().filter(|c| c.get("inject.injection_tries") == Some(flips)).collect();
        let mut inside = Vec::new();
        for c in &total {
            if c.has("nev_lo") && c.float("nev_lo")? <= hi && c.float("nev_hi")? >= lo {
                let coords: Vec<String> = axes
                    .iter()
                    .filter(|k| **k != "inject.injection_tries")
                    .map(|k| Ok(format!("{}={}", k.strip_prefix("inject.").unwrap_or(k), c.field(k)?)))
                    .collect::<Result<_>>()?;
                inside.push(format!("{} ({}%)", coords.join(", "), num(c.field("nev_pct")?, 1)));
            }
        }
        let named = if inside.is_empty() { String::new() } else { format!(": {}", inside.join("; ")) };
        lines.push(format!("  - {flips} flips: {} of {} cells{named}", inside.len(), total.len()));
    }
    Ok(lines)
}

/// For the per-bit preset: the bits `bits.csv` shows to give more N-EV than the other bits of
/// their precision, as a line and a summary verdict; nothing without a `bits.csv`.
fn critical_bits(dir: &Path, lines: &mut Vec<String>) -> Result<Option<(String, String)>> {
    let bits: Vec<Bit> = read::rows(&dir.join("bits.csv"))?;
    if bits.is_empty() {
        return Ok(None);
    }
    let crit: Vec<&Bit> = bits.iter().filter(|b| b.verdict.starts_with("more")).collect();
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| fixed(v, 1));
    let named: Vec<String> = crit
        .iter()
        .map(|b| {
            format!(
                "{}-bit bit {} ({}% [{}, {}] vs {}%)",
                b.precision,
                b.bit,
                opt(b.nev_pct),
                opt(b.nev_lo),
                opt(b.nev_hi),
                opt(b.others_nev_pct)
            )
        })
        .collect();
    let named = if named.is_empty() { "none".to_string() } else { named.join(", ") };
    lines.push(format!(
        "- **Bits with more N-EV than the other bits of their precision** (bits.csv, two-proportion test, Holm over all bits): {named}."
    ));
    let short: Vec<String> = crit.iter().map(|b| format!("{}:{}", b.precision, b.bit)).collect();
    let short = if short.is_empty() { "none shown".to_string() } else { short.join(", ") };
    Ok(Some(("critical bits".to_string(), short)))
}

/// A row of `fields.csv` (single flips by word, target and bit field).
#[derive(Deserialize)]
struct FieldLine {
    word: String,
    field: String,
    runs: u64,
    skipped: Option<u64>,
    masked: Option<u64>,
    nev: u64,
}

/// From `fields.csv`: per word, its exponent flips (every target pooled) with N-EV, and where a
/// loss scaler ran, how many it skipped and masked; the summary verdict is the masked share.
fn exponent_flips(dir: &Path, lines: &mut Vec<String>) -> Result<Option<(String, String)>> {
    let rows: Vec<FieldLine> = read::rows(&dir.join("fields.csv"))?;
    let mut words: std::collections::BTreeMap<&str, [u64; 4]> = std::collections::BTreeMap::new();
    for r in rows.iter().filter(|r| r.field.starts_with("exponent")) {
        let w = words.entry(r.word.as_str()).or_default();
        let scaled = r.skipped.map_or(0, |_| r.runs);
        *w = [w[0] + r.runs, w[1] + r.nev, w[2] + scaled, w[3] + r.masked.unwrap_or(0)];
    }
    if words.is_empty() {
        return Ok(None);
    }
    let share = |k: u64, n: u64| {
        let s = crate::Share::of(k, n);
        format!("{k} of {n} ({}% [{}, {}])", fixed(s.pct, 1), fixed(s.lo_pct, 1), fixed(s.hi_pct, 1))
    };
    let mut verdict = None;
    for (word, [runs, nev, scaled, masked]) in &words {
        let mut line = format!("- **Exponent flips in `{word}` values** (fields.csv, every target pooled): N-EV in {}", share(*nev, *runs));
        if *scaled > 0 {
            line.push_str(&format!(
                "; masked by loss scaling (the scaler skipped the step and the run ended without N-EV or NaN) in {}",
                share(*masked, *scaled)
            ));
            verdict = Some((format!("{word} exponent flips masked by loss scaling"), share(*masked, *scaled)));
        }
        lines.push(format!("{line}."));
    }
    Ok(verdict)
}

/// For a preset without claims: how many of its differences are shown, and the first 12.
fn differences_shown(comps: &[Compared], path: &Path, lines: &mut Vec<String>) -> Result<(String, String)> {
    let shown: Vec<&Compared> = comps.iter().filter(|c| c.verdict == "shown").collect();
    lines.push(format!("- {} of {} tested differences shown (see comparisons.csv).", shown.len(), comps.len()));
    for c in shown.iter().take(12) {
        lines.push(format!("  - {} {} vs {}, {}: {}", c.axis, c.a, c.b, c.metric, detail(c, path)?));
    }
    Ok(("differences shown".to_string(), format!("{} of {}", shown.len(), comps.len())))
}

/// The grid axes of a `cells.csv`: its columns before the first of the fixed ones.
fn axes_of(cells: &Table) -> Vec<&str> {
    cells.headers().iter().map(String::as_str).take_while(|k| !["runs", "ok", "not_ok", "seeds"].contains(k)).collect()
}

/// Columns shown as they are (0 decimals) or as numbers: (header, column, decimals).
const COLS: [(&str, &str, usize); 4] =
    [("seeds", "seeds", 0), ("ACC %", "acc_pct", 1), ("ACC all %", "acc_all_pct", 1), ("golden %", "golden_acc_pct", 1)];
/// Shares, each with its percentage and Wilson interval: (header, column).
const SHARES: [(&str, &str); 8] = [
    ("N-EV", "nev"),
    ("EV injected", "ev_injected"),
    ("NaN", "nan"),
    ("RWC", "rwc"),
    ("RWC all replicas", "rwc_all"),
    ("replicas diverged", "diverged"),
    ("step counter altered", "step_altered"),
    ("load failed", "load_failed"),
];
/// The confounds' shares: shown where some cell has a nonzero count (the others where some
/// cell has a value at all).
const CONFOUNDS: [&str; 2] = ["step_altered", "load_failed"];
/// Columns after the shares: (header, column, decimals).
const EXTRA: [(&str, &str, usize); 4] = [
    ("hit replica ACC %", "hit_acc_pct", 1),
    ("worst replica ACC %", "replica_acc_min_pct", 1),
    ("sim. overhead %", "sim_overhead_pct", 2),
    ("steps recomputed", "steps_recomputed", 2),
];

/// The cells as a Markdown table: axes, runs, then each column some cell has a value in.
fn cells_table(cells: &Table) -> Result<String> {
    let axes = axes_of(cells);
    let has = |k: &str| cells.rows().any(|c| c.has(k));
    let has_share = |k: &str| {
        if CONFOUNDS.contains(&k) { cells.rows().any(|c| !matches!(c.get(k), None | Some("" | "0"))) } else { has(&format!("{k}_pct")) }
    };
    let cols: Vec<_> = COLS.iter().filter(|c| has(c.1)).collect();
    let shares: Vec<_> = SHARES.iter().filter(|s| has_share(s.1)).collect();
    let agree = has("nev_vs_ev");
    let extra: Vec<_> = EXTRA.iter().filter(|e| has(e.1)).collect();
    let mut header: Vec<&str> = axes.iter().map(|a| a.strip_prefix("inject.").unwrap_or(a)).collect();
    header.push("runs (ok)");
    header.extend(cols.iter().map(|c| c.0));
    header.extend(shares.iter().map(|s| s.0));
    if agree {
        header.push("N-EV vs EV injected (McNemar)");
    }
    header.extend(extra.iter().map(|e| e.0));
    let mut out = vec![format!("| {} |", header.join(" | ")), format!("|{}", "---|".repeat(header.len()))];
    for c in cells.rows() {
        let mut r: Vec<String> = axes.iter().map(|a| c.get(a).unwrap_or_default().to_string()).collect();
        r.push(format!("{} ({})", c.field("runs")?, c.field("ok")?));
        for &&(_, k, d) in &cols {
            r.push(if d > 0 { num(c.field(k)?, d) } else { c.field(k)?.to_string() });
        }
        for &&(_, k) in &shares {
            let (pct, lo, hi) = (format!("{k}_pct"), format!("{k}_lo"), format!("{k}_hi"));
            r.push(if c.has(&pct) {
                format!("{} ({} [{}, {}])", c.field(k)?, num(c.field(&pct)?, 1), num(c.field(&lo)?, 1), num(c.field(&hi)?, 1))
            } else {
                String::new()
            });
        }
        if agree {
            r.push(if c.has("nev_vs_ev") {
                format!("{} (p Holm {})", c.field("nev_vs_ev")?, fmt_g(c.float("nev_vs_ev_p_holm")?, 2))
            } else {
                String::new()
            });
        }
        for &&(_, k, d) in &extra {
            r.push(num(c.field(k)?, d));
        }
        out.push(format!("| {} |", r.join(" | ")));
    }
    Ok(out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compared(axis: &str, metric: &str, diff: f64, verdict: &str) -> Compared {
        Compared {
            axis: axis.to_string(),
            fixed: "model=vgg".to_string(),
            a: "model".to_string(),
            b: "optimizer".to_string(),
            metric: metric.to_string(),
            value_a: Some(10.0),
            value_b: Some(10.0 + diff),
            n_a: "30".to_string(),
            n_b: "30".to_string(),
            seeds: "3".to_string(),
            diff: Some(diff),
            ci_lo: Some(diff - 5.0),
            ci_hi: Some(diff + 5.0),
            p_holm: Some(if verdict == "shown" { 0.001 } else { 0.5 }),
            verdict: verdict.to_string(),
        }
    }

    const LOWER: Claim = Claim { text: "b is lower", axis: "x", a: "model", b: "optimizer", metric: "rwc_pct", sign: -1 };

    /// Only the comparisons of the claim's axis, options and metric count; a shown one counts
    /// for the claim when its difference has the claim's sign and against it otherwise.
    #[test]
    fn a_claim_counts_its_own_comparisons_by_sign() {
        let path = Path::new("comparisons.csv");
        let mut comps = vec![
            compared("x", "rwc_pct", -20.0, "shown"),
            compared("x", "rwc_pct", -3.0, "not shown"),
            compared("y", "rwc_pct", 20.0, "shown"),
            compared("x", "nev_pct", 20.0, "shown"),
        ];
        let (v, rows) = verdict(&comps, &LOWER, path).unwrap();
        assert_eq!((v.as_str(), rows.len()), ("partly (1 of 2)", 2));
        comps.push(compared("x", "rwc_pct", 8.0, "shown"));
        assert_eq!(verdict(&comps, &LOWER, path).unwrap().0, "contradicted (1 of 3)");
        assert_eq!(verdict(&comps[..1], &LOWER, path).unwrap().0, "shown");
        assert_eq!(verdict(&comps[2..4], &LOWER, path).unwrap().0, "no test");
    }

    #[test]
    fn a_comparison_is_listed_with_its_test() {
        let line = detail(&compared("x", "rwc_pct", -20.0, "shown"), Path::new("c.csv")).unwrap();
        assert_eq!(line, "model=vgg: 10.0 -> -10.0 (-20.0 [-25.0, -15.0], p Holm 0.001, n = 30/30, 3 seeds): shown");
    }
}
