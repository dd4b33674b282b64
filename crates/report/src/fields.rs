//! Single flips by word, target and bit field, for `train` campaigns whose runs each flipped one
//! bit: per word (`f32`, or a half-precision run's `bf16`/`f16` values), fault target and bit
//! field (the sign, the exponent's top bit, the rest of the exponent, the mantissa), the share
//! of runs whose faulty step the loss scaler skipped, N-EV, NaN and the accuracy loss, each with
//! its 95% interval (`fields.csv` and a section of `report.md`); the share of exponent flips
//! loss scaling masked; and one plot per word of these outcomes by bit position.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use resilab_campaign::{Row, Status};

use crate::figures::Figure;
use crate::files::{Written, write};
use crate::format::{f, share_point, single};
use crate::metrics::{self, Share};
use crate::plots::{Interval, LineChart, LineFacets, Series, save};
use crate::rows::FieldRow;
use crate::{Result, stats};

/// A bit field of a float word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Field {
    Sign,
    ExponentTop,
    ExponentRest,
    Mantissa,
}

impl Field {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Sign => "sign",
            Field::ExponentTop => "exponent-top",
            Field::ExponentRest => "exponent-rest",
            Field::Mantissa => "mantissa",
        }
    }

    fn exponent(self) -> bool {
        matches!(self, Field::ExponentTop | Field::ExponentRest)
    }
}

/// Exponent bits and word width of a word's name (`f32`, `bf16`, `f16`, `f64`).
fn layout(word: &str) -> Option<(u64, u64)> {
    match word {
        "f32" => Some((8, 32)),
        "bf16" => Some((8, 16)),
        "f16" => Some((5, 16)),
        "f64" => Some((11, 64)),
        _ => None,
    }
}

/// The field of reference bit `bit` (0 = sign, then the exponent from its top bit) of `word`.
pub(crate) fn field(word: &str, bit: u64) -> Option<Field> {
    let (exponent, width) = layout(word)?;
    Some(match bit {
        0 => Field::Sign,
        1 => Field::ExponentTop,
        b if b <= exponent => Field::ExponentRest,
        b if b < width => Field::Mantissa,
        _ => return None,
    })
}

/// The reference bits of a field of `word`, as `a-b` (or `a`).
fn bits_of(word: &str, fld: Field) -> String {
    let Some((exponent, width)) = layout(word) else { return String::new() };
    let (a, b) = match fld {
        Field::Sign => (0, 0),
        Field::ExponentTop => (1, 1),
        Field::ExponentRest => (2, exponent),
        Field::Mantissa => (exponent + 1, width - 1),
    };
    if a == b { a.to_string() } else { format!("{a}-{b}") }
}

/// What the runs of one group gave.
#[derive(Default)]
struct Tally {
    runs: u64,
    /// Runs with a loss scaler (fp16), and of those, runs whose faulty step it skipped.
    scaled: u64,
    skipped: u64,
    /// Skipped and ended without N-EV or NaN.
    masked: u64,
    nev: u64,
    nan: u64,
    /// Accuracy losses (points) of the runs that did not collapse.
    losses: Vec<f64>,
}

impl Tally {
    fn add(&mut self, r: &Row) {
        let (nev, nan) = (metrics::nev(r), metrics::collapsed(r));
        self.runs += 1;
        self.nev += u64::from(nev);
        self.nan += u64::from(nan);
        if let Some(k) = r.metrics.scaler_skipped_faults {
            self.scaled += 1;
            self.skipped += u64::from(k > 0);
            self.masked += u64::from(k > 0 && !nev && !nan);
        }
        if let Some(l) = r.metrics.acc_loss.filter(|l| l.is_finite() && !nan) {
            self.losses.push(100.0 * l);
        }
    }

    fn share(&self, k: u64) -> Share {
        Share::of(k, self.runs)
    }

    fn scaler_share(&self, k: u64) -> Option<Share> {
        (self.scaled > 0).then(|| Share::of(k, self.scaled))
    }
}

/// The `fields.csv` row of one word, target and field.
fn row_of((word, target, fld): &(String, String, Field), t: &Tally) -> FieldRow {
    let (s, m) = (t.scaler_share(t.skipped), t.scaler_share(t.masked));
    let (nev, nan) = (t.share(t.nev), t.share(t.nan));
    let loss = stats::mean_interval(&t.losses);
    FieldRow {
        word: word.clone(),
        target: target.clone(),
        field: fld.name().into(),
        bits: bits_of(word, *fld),
        runs: t.runs,
        skipped: s.as_ref().map(|s| s.count),
        skipped_pct: s.as_ref().map(|s| s.pct),
        skipped_lo: s.as_ref().map(|s| s.lo_pct),
        skipped_hi: s.as_ref().map(|s| s.hi_pct),
        masked: m.as_ref().map(|s| s.count),
        masked_pct: m.as_ref().map(|s| s.pct),
        masked_lo: m.as_ref().map(|s| s.lo_pct),
        masked_hi: m.as_ref().map(|s| s.hi_pct),
        nev: nev.count,
        nev_pct: Some(nev.pct),
        nev_lo: Some(nev.lo_pct),
        nev_hi: Some(nev.hi_pct),
        nan: nan.count,
        nan_pct: Some(nan.pct),
        nan_lo: Some(nan.lo_pct),
        nan_hi: Some(nan.hi_pct),
        acc_loss_pts: (!t.losses.is_empty()).then(|| crate::measures::mean(&t.losses)),
        acc_loss_lo: loss.map(|l| l.1.0),
        acc_loss_hi: loss.map(|l| l.1.1),
    }
}

/// A single-flip `train` run's word, target and bit, when it altered exactly one value.
fn single_flip(r: &Row) -> Option<(String, String, u64)> {
    let one = |s: &Option<String>| single(s.as_deref()).map(str::to_string);
    if r.status != Status::Ok || r.metrics.values_corrupted != Some(1) {
        return None;
    }
    let bit = one(&r.metrics.bits)?.parse().ok()?;
    Some((one(&r.metrics.words)?, one(&r.metrics.fault_targets)?, bit))
}

/// The section, `fields.csv` and the plots, when at least two bit fields of some word were hit
/// by single-flip `train` runs; `None` otherwise.
pub(crate) fn section(rows: &[Row], name: &str, plots: &Path, out: &Path, written: &mut Written) -> Result<Option<(String, Vec<Figure>)>> {
    let mut by_field: BTreeMap<(String, String, Field), Tally> = BTreeMap::new();
    let mut by_bit: BTreeMap<(String, String, u64), Tally> = BTreeMap::new();
    for r in rows {
        let Some((word, target, bit)) = single_flip(r) else { continue };
        let Some(fld) = field(&word, bit) else { continue };
        by_field.entry((word.clone(), target.clone(), fld)).or_default().add(r);
        by_bit.entry((word, target, bit)).or_default().add(r);
    }
    let fields: BTreeSet<(&String, Field)> = by_field.keys().map(|k| (&k.0, k.2)).collect();
    if fields.len() < 2 {
        return Ok(None);
    }
    let table: Vec<FieldRow> = by_field.iter().map(|(k, t)| row_of(k, t)).collect();
    written.files.push(write(&out.join("fields.csv"), &crate::rows::table::<FieldRow, _>(&[], table.iter().map(|r| (Vec::new(), r)))?)?);
    let mut md = intro(&by_field, rows.len());
    md_rows(&mut md, &table);
    masked_md(&mut md, &by_field);
    let mut figures = Vec::new();
    let words: BTreeSet<&String> = by_bit.keys().map(|k| &k.0).collect();
    for word in words {
        figures.push(word_figure(name, word, &by_bit, plots)?);
    }
    Ok(Some((md, figures)))
}

fn intro(by_field: &BTreeMap<(String, String, Field), Tally>, ok: usize) -> String {
    let n: u64 = by_field.values().map(|t| t.runs).sum();
    format!(
        "\n## Single flips by word, target and bit field\n\n{n} of the {ok} runs altered exactly one value (`values_corrupted` = 1), grouped by the word flipped (`words`: `f32`, or a bf16/fp16 run's half values `bf16`/`f16`), the fault's target (`fault_targets`) and the bit's field (`bits`, reference numbering: the sign is 0, the exponent's top bit 1, then the rest of the exponent, then the mantissa; `fields.csv`). **Skipped**: runs with a loss scaler (fp16) whose step the fault struck was one whose update the scaler skipped, its gradients holding an Inf or NaN (`scaler_skipped_faults`); **masked**: skipped, and the run ended without N-EV or NaN (BatchNorm's running statistics, updated in the skipped step's forward pass, are not undone by the skip). Shares of the group's runs (skipped and masked: of its runs with a loss scaler) with Wilson 95% intervals; accuracy loss: mean over the runs that did not collapse, points, with its t 95% interval.\n\n"
    )
}

fn md_rows(md: &mut String, table: &[FieldRow]) {
    let share = |k: Option<u64>, p: Option<f64>, lo: Option<f64>, hi: Option<f64>| match (k, p, lo, hi) {
        (Some(k), Some(p), Some(lo), Some(hi)) => format!("{k} ({p:.1} [{lo:.1}, {hi:.1}])"),
        _ => String::new(),
    };
    let _ = writeln!(
        md,
        "| word | target | bit field | bits | runs | skipped by the loss scaler | masked | N-EV | NaN | acc loss (pts) [95% CI] |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for r in table {
        let loss = match (r.acc_loss_pts, r.acc_loss_lo, r.acc_loss_hi) {
            (Some(m), Some(lo), Some(hi)) => format!("{m:.2} [{lo:.2}, {hi:.2}]"),
            (m, _, _) => f(m, 2),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {loss} |",
            resilab_text::markdown(&r.word),
            resilab_text::markdown(&r.target),
            r.field,
            r.bits,
            r.runs,
            share(r.skipped, r.skipped_pct, r.skipped_lo, r.skipped_hi),
            share(r.masked, r.masked_pct, r.masked_lo, r.masked_hi),
            share(Some(r.nev), r.nev_pct, r.nev_lo, r.nev_hi),
            share(Some(r.nan), r.nan_pct, r.nan_lo, r.nan_hi),
        );
    }
}

/// Per word, its exponent flips pooled over the targets: how many loss scaling skipped and
/// masked, and how many ended with N-EV.
fn masked_md(md: &mut String, by_field: &BTreeMap<(String, String, Field), Tally>) {
    let mut pooled: BTreeMap<&String, Tally> = BTreeMap::new();
    for ((word, _, _), t) in by_field.iter().filter(|(k, _)| k.2.exponent()) {
        let p = pooled.entry(word).or_default();
        p.runs += t.runs;
        p.scaled += t.scaled;
        p.skipped += t.skipped;
        p.masked += t.masked;
        p.nev += t.nev;
        p.nan += t.nan;
    }
    let pct = |s: &Share| format!("{} of {} ({:.1}% [{:.1}, {:.1}])", s.count, s.of, s.pct, s.lo_pct, s.hi_pct);
    let _ = writeln!(md, "\n**Exponent flips (top bit and the rest, every target pooled)**:\n");
    for (word, t) in &pooled {
        let mut line = format!("- `{}`: N-EV in {}", resilab_text::markdown(word), pct(&t.share(t.nev)));
        if let (Some(s), Some(m)) = (t.scaler_share(t.skipped), t.scaler_share(t.masked)) {
            let _ = write!(line, "; skipped by the loss scaler in {}; **masked by loss scaling in {}**", pct(&s), pct(&m));
        }
        let _ = writeln!(md, "{line}.");
    }
}

/// One plot of a word: per target, the shares by bit position (top row) and the mean accuracy
/// loss (bottom row).
fn word_figure(name: &str, word: &str, by_bit: &BTreeMap<(String, String, u64), Tally>, plots: &Path) -> Result<Figure> {
    let mine: Vec<(&String, u64, &Tally)> = by_bit.iter().filter(|(k, _)| k.0 == word).map(|(k, t)| (&k.1, k.2, t)).collect();
    let categories: Vec<u64> = mine.iter().map(|m| m.1).collect::<BTreeSet<u64>>().into_iter().collect();
    let targets: Vec<&String> = mine.iter().map(|m| m.0).collect::<BTreeSet<_>>().into_iter().collect();
    let x = |b: u64| categories.iter().position(|&c| c == b).unwrap_or(0) as f64;
    let chart = |title: String, y_label: &str, y_range: Option<(f64, f64)>, series: Vec<Series>| LineChart {
        title,
        x_label: "bit flipped (reference: 0 = sign, then exponent MSB first)".into(),
        y_label: y_label.into(),
        log_x: false,
        y_range,
        x_range: None,
        categories: categories.iter().map(u64::to_string).collect(),
        series,
    };
    let (mut shares, mut losses) = (Vec::new(), Vec::new());
    for target in &targets {
        let at: Vec<(u64, &Tally)> = mine.iter().filter(|m| m.0 == *target).map(|m| (m.1, m.2)).collect();
        let line = |label: &str, color: usize, v: &dyn Fn(&Tally) -> Option<(f64, Interval)>| Series {
            label: label.into(),
            points: at.iter().filter_map(|(b, t)| v(t).map(|(y, i)| (x(*b), y, i))).collect(),
            reference: false,
            color: Some(color),
        };
        let mut series =
            vec![line("N-EV", 0, &|t| Some(share_point(&t.share(t.nev)))), line("NaN/Inf", 1, &|t| Some(share_point(&t.share(t.nan))))];
        if at.iter().any(|(_, t)| t.scaled > 0) {
            series.push(line("scaler skip", 2, &|t| t.scaler_share(t.skipped).map(|s| share_point(&s))));
        }
        shares.push(chart(format!("{target}: outcome shares"), "runs (%)", Some((-2.0, 102.0)), series));
        let loss = line("accuracy loss", 3, &|t| {
            (!t.losses.is_empty()).then(|| (crate::measures::mean(&t.losses), stats::mean_interval(&t.losses).map(|(_, ci)| ci)))
        });
        losses.push(chart(format!("{target}: accuracy loss"), "mean loss, runs without NaN (points)", None, vec![loss]));
    }
    let columns = targets.len().max(1);
    shares.extend(losses);
    let title = format!("One flip in a {word} value, by bit position ({name})");
    let facets = LineFacets { title, panels: shares, columns };
    let caption = format!(
        "One flip in a `{word}` value, by bit position: per target, the shares of runs with N-EV, with NaN/Inf{} (Wilson 95% intervals, top) and the mean accuracy loss of the runs without NaN (t 95% intervals, bottom)",
        if word == "f16" { " and whose step the loss scaler skipped (scaler skip)" } else { "" }
    );
    Ok((caption, save(&facets, &plots.join(format!("fields_{word}")))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use resilab_campaign::Metrics;

    /// A single-flip fp16 run: its word, target and bit, whether the scaler skipped its step,
    /// N-EV and its accuracy loss.
    fn run(word: &str, target: &str, bit: u64, skipped: Option<u64>, nev: bool, loss: f64) -> Row {
        Row {
            id: format!("{word}-{target}-{bit}-{loss}"),
            index: 0,
            coords: BTreeMap::new(),
            seed: 1,
            rep: 0,
            status: Status::Ok,
            message: None,
            metrics: Metrics {
                values_corrupted: Some(1),
                words: Some(word.into()),
                fault_targets: Some(target.into()),
                bits: Some(bit.to_string()),
                scaler_skipped_faults: skipped,
                nev: Some(nev),
                collapsed: Some(nev),
                final_acc: Some(0.8 - loss),
                golden_acc: Some(0.8),
                acc_loss: Some(loss),
                ..Metrics::default()
            },
        }
    }

    #[test]
    fn the_section_counts_skipped_masked_and_harmful_flips_per_field() {
        let rows = vec![
            // fp16 exponent: two skipped (one masked, one N-EV anyway), one not skipped.
            run("f16", "gradients", 1, Some(1), false, 0.0),
            run("f16", "gradients", 3, Some(1), true, 0.7),
            run("f16", "gradients", 2, Some(0), false, 0.02),
            run("f16", "gradients", 9, Some(0), false, 0.01),
            // bf16: no scaler.
            run("bf16", "gradients", 1, None, true, 0.7),
            run("bf16", "gradients", 12, None, false, 0.0),
            // Two values altered: left out.
            Row {
                metrics: Metrics { values_corrupted: Some(2), ..run("f16", "gradients", 1, Some(1), false, 0.0).metrics },
                ..run("x", "y", 0, None, false, 0.0)
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut written = Written::default();
        let (md, figures) = section(&rows, "t", dir.path(), dir.path(), &mut written).unwrap().unwrap();
        let csv = std::fs::read_to_string(dir.path().join("fields.csv")).unwrap();
        let line = |w: &str, fld: &str| csv.lines().find(|l| l.starts_with(&format!("{w},gradients,{fld},"))).unwrap().to_string();
        // f16 exponent-rest: bits 2-5, two runs, one skipped, none masked (the skipped one had N-EV).
        assert!(line("f16", "exponent-rest").starts_with("f16,gradients,exponent-rest,2-5,2,1,50.00,9.45,90.55,0,0.00,"), "{csv}");
        assert!(line("f16", "exponent-top").starts_with("f16,gradients,exponent-top,1,1,1,100.00,"), "{csv}");
        assert!(line("bf16", "mantissa").starts_with("bf16,gradients,mantissa,9-15,1,,,,,,,,,0,0.00,0.00,79.35,0,"), "{csv}");
        // The accuracy loss of the runs without NaN: the f16 exponent-rest N-EV run is left out.
        assert!(line("f16", "exponent-rest").ends_with(",2.00,,"), "{csv}");
        // Pooled exponent flips of f16: 3, 2 skipped, 1 masked.
        assert!(
            md.contains("- `f16`: N-EV in 1 of 3")
                && md.contains("skipped by the loss scaler in 2 of 3")
                && md.contains("masked by loss scaling in 1 of 3"),
            "{md}"
        );
        assert!(
            md.contains("- `bf16`: N-EV in 1 of 1 (100.0%") && !md.contains("- `bf16`: N-EV in 1 of 1 (100.0% [20.7, 100.0]); skipped"),
            "{md}"
        );
        assert_eq!(figures.len(), 2, "one plot per word");
        assert!(dir.path().join("fields_f16.png").is_file() && dir.path().join("fields_bf16.png").is_file());
    }

    #[test]
    fn each_words_bits_fall_in_their_fields() {
        let names = |w: &str, width: u64| (0..width).map(|b| field(w, b).map(Field::name).unwrap_or("-")).collect::<Vec<_>>();
        let f16 = names("f16", 16);
        assert_eq!(f16[..7], ["sign", "exponent-top", "exponent-rest", "exponent-rest", "exponent-rest", "exponent-rest", "mantissa"]);
        assert!(f16[6..].iter().all(|n| *n == "mantissa"));
        let bf16 = names("bf16", 16);
        assert_eq!((bf16[8], bf16[9], bf16[15]), ("exponent-rest", "mantissa", "mantissa"));
        let f32 = names("f32", 32);
        assert_eq!((f32[8], f32[9], f32[31]), ("exponent-rest", "mantissa", "mantissa"));
        assert_eq!((field("f16", 16), field("f32", 32), field("i8", 0)), (None, None, None));
        assert_eq!(
            [Field::Sign, Field::ExponentTop, Field::ExponentRest, Field::Mantissa].map(|f| bits_of("f16", f)),
            ["0", "1", "2-5", "6-15"]
        );
        assert_eq!(bits_of("bf16", Field::Mantissa), "9-15");
        assert_eq!(bits_of("f32", Field::ExponentRest), "2-8");
    }
}
