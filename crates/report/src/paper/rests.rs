//! "What this rests on": the paragraph beside a study's tables that says what its runs were
//! (model, images, steps, workers simulated, the cost constants with the published figures they
//! stand for) and how small a difference its tests could see. Everything is read from the
//! study's folder: the runs' configurations from `campaign.toml`, the golden runs from
//! `runs.csv`, the groups from `which_strategy.csv` and the detectable differences from
//! `comparisons.csv`.

use std::collections::BTreeMap;
use std::path::Path;

use resilab_campaign::Campaign;

use super::fmt::{fixed, fmt_g};
use super::read::{Table, bad};
use crate::Result;

/// The published figures each crash cost stands for (docs/recovery.md, "What a crash costs a
/// real job").
const SOURCES: [(&str, &str); 3] = [
    ("detection", "ULFM's failure detector in Open MPI 5 waits 10 s"),
    (
        "communicator rebuild",
        "MegaScale, NSDI'24 section 3.5: Megatron-LM's communicators on 2,048 GPUs set up in under 5 s, in 1,047 s before its fixes",
    ),
    ("relaunch", "DLRover's fault-tolerant recovery from a hardware fault takes about 300 s"),
];

/// Each metric of `comparisons.csv` in words, with its unit.
const METRICS: [(&str, &str); 5] = [
    ("acc_loss_pts", "accuracy loss, points"),
    ("sim_overhead_pct", "simulated overhead, % of the golden run"),
    ("failed_pct", "failed runs, percentage points"),
    ("reached_pct", "runs reaching the golden accuracy, percentage points"),
    ("time_to_acc_pct", "time to the golden accuracy, % of the golden run's"),
];

/// The distinct values of something over the study's runs, in order.
#[derive(Default)]
struct Values(Vec<String>);

impl Values {
    fn add(&mut self, v: String) {
        if !self.0.contains(&v) {
            self.0.push(v);
        }
    }

    /// `a`, `a or b`, `a, b or c`.
    fn or(&self) -> String {
        match self.0.split_last() {
            None => "?".into(),
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }
}

/// What the runs' configurations say.
#[derive(Default)]
struct Setup {
    models: Values,
    data: Values,
    steps: Values,
    workers: Values,
    gflops: Values,
    costs: [Values; 3],
    test_images: Option<usize>,
}

fn setup(campaign: &Campaign) -> Result<Setup> {
    let mut s = Setup::default();
    let mut workers: Vec<usize> = Vec::new();
    for i in 0..campaign.len() {
        let c = campaign.run(i)?.config;
        let d = &c.data;
        let size = |n: Option<usize>| n.map_or("?".into(), |n| n.to_string());
        s.models.add(c.model.label());
        s.data.add(format!(
            "{} {}x{} images of {} classes ({} training, {} test)",
            format!("{:?}", d.source).to_lowercase(),
            d.image_size,
            d.image_size,
            d.classes,
            size(d.train_size),
            size(d.test_size)
        ));
        s.test_images = s.test_images.max(d.test_size);
        let steps = c.train.steps.map_or_else(|| "its epochs".to_string(), |n| format!("{n} steps"));
        s.steps.add(format!("{steps} at a global batch of {}", c.train.batch_size));
        workers.push(c.parallel.workers);
        s.gflops.add(c.parallel.compute.gflops.map_or("measured".into(), |g| fmt_g(g, 3)));
        let r = &c.recovery;
        for (v, x) in s.costs.iter_mut().zip([r.detect_timeout_s, r.rebuild_s, r.relaunch_s]) {
            v.add(format!("{} s", fmt_g(x, 3)));
        }
    }
    workers.sort_unstable();
    workers.dedup();
    s.workers.0 = workers.iter().map(usize::to_string).collect();
    Ok(s)
}

/// The smallest, median and largest of `v` (sorted in place); `None` when empty.
fn spread(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => return None,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    Some((v[0], median, v[n - 1]))
}

/// The golden runs' final accuracies (%) and fault-free step times (ms), one per golden run.
fn golden(dir: &Path, steps: f64) -> Result<(Vec<f64>, Vec<f64>)> {
    let runs = Table::read(&dir.join("runs.csv"))?;
    let mut by_key: BTreeMap<String, (f64, Option<f64>)> = BTreeMap::new();
    for r in runs.rows().filter(|r| r.has("golden_key") && r.has("golden_acc_frac")) {
        let sim = if r.has("golden_sim_s") { Some(r.float("golden_sim_s")?) } else { None };
        by_key.insert(r.field("golden_key")?.to_string(), (100.0 * r.float("golden_acc_frac")?, sim));
    }
    let accs = by_key.values().map(|v| v.0).collect();
    let step_ms = by_key.values().filter_map(|v| v.1).map(|s| 1e3 * s / steps).collect();
    Ok((accs, step_ms))
}

/// Per metric, the detectable differences of its tests (finite and above zero: a test whose
/// runs never differ detects any difference).
fn detectable(dir: &Path) -> Result<BTreeMap<String, Vec<f64>>> {
    let comps = Table::read(&dir.join("comparisons.csv"))?;
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in comps.rows().filter(|r| r.has("detectable")) {
        let d = r.float("detectable")?;
        if d.is_finite() && d > 0.0 {
            out.entry(r.field("metric")?.to_string()).or_default().push(d);
        }
    }
    Ok(out)
}

/// `lo-hi`, or one value where they agree, with `digits` significant digits.
fn range(lo: f64, hi: f64, digits: usize) -> String {
    joined(fmt_g(lo, digits), fmt_g(hi, digits))
}

/// Two significant digits, or a whole number from 100 on.
fn short(x: f64) -> String {
    if x.abs() >= 100.0 { fixed(x, 0) } else { fmt_g(x, 2) }
}

fn joined(a: String, b: String) -> String {
    if a == b { a } else { format!("{a}-{b}") }
}

/// The paragraph for the study in `dir` (`name`: its preset).
pub(super) fn paragraph(dir: &Path, name: &str) -> Result<String> {
    let campaign = Campaign::stored(dir)?;
    let s = setup(&campaign)?;
    let steps = campaign.run(0)?.config.train.steps.map_or(f64::NAN, |n| n as f64);
    let (mut accs, mut step_ms) = golden(dir, steps)?;
    step_ms.retain(|v| v.is_finite());
    let mut text = format!(
        "**What this rests on.** Each run trains {} for {} on {}, on {} simulated data-parallel workers at a modelled {} GFLOP/s each",
        s.models.or(),
        s.steps.or(),
        s.data.or(),
        s.workers.or(),
        s.gflops.or()
    );
    if let Some(n) = s.test_images.filter(|&n| n > 0) {
        text += &format!(" (one test image is {} points)", fmt_g(100.0 / n as f64, 2));
    }
    text += ".";
    if let Some((lo, _, hi)) = spread(&mut accs) {
        text += &format!(" Its {} golden runs end at {}% test accuracy.", accs.len(), joined(fixed(lo, 1), fixed(hi, 1)));
    }
    if let Some((lo, _, hi)) = spread(&mut step_ms) {
        text += &format!(" A fault-free step takes {} ms of simulated time.", range(lo, hi, 3));
    }
    let costs: Vec<String> = SOURCES.iter().zip(&s.costs).map(|((what, src), v)| format!("{what} {} ({src})", v.or())).collect();
    text += &format!(
        " What a crash costs beyond its step, in those seconds, with the published figure of a real job that `configs/paper/{name}.toml` scales to its step: {}.",
        costs.join("; ")
    );
    text += &groups_and_detectable(dir)?;
    Ok(text)
}

/// The groups per condition and, per metric, the detectable differences.
fn groups_and_detectable(dir: &Path) -> Result<String> {
    let choices = Table::read(&dir.join("which_strategy.csv"))?;
    let mut groups: Vec<f64> = Vec::new();
    for r in choices.rows().filter(|r| r.has("groups")) {
        groups.push(r.count("groups")? as f64);
    }
    let mut text = String::new();
    if let Some((lo, _, hi)) = spread(&mut groups) {
        text += &format!(" {} paired groups (training seed x fault draw) per condition.", range(lo, hi, 6));
    }
    let mut parts = Vec::new();
    for (metric, mut v) in detectable(dir)? {
        let words = METRICS
            .iter()
            .find(|m| m.0 == metric)
            .map(|m| m.1)
            .ok_or_else(|| bad(&dir.join("comparisons.csv"), format!("unknown metric {metric}")))?;
        if let Some((lo, median, hi)) = spread(&mut v) {
            parts.push(format!("{words}: {} (median; {}-{} over the conditions)", short(median), short(lo), short(hi)));
        }
    }
    if !parts.is_empty() {
        text += &format!(" The smallest differences the tests detect at 80% power, at Holm's strictest level: {}.", parts.join("; "));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_alternatives_and_spreads_as_ranges() {
        let mut v = Values::default();
        assert_eq!(v.or(), "?");
        for x in ["4", "8", "4", "16"] {
            v.add(x.into());
        }
        assert_eq!(v.or(), "4, 8 or 16");
        assert_eq!(spread(&mut [3.0, 1.0, 2.0, 10.0]), Some((1.0, 2.5, 10.0)));
        assert_eq!(spread(&mut []), None);
        assert_eq!(range(0.1234, 0.1234, 2), "0.12");
        assert_eq!(range(1.03, 34.77, 3), "1.03-34.8");
        assert_eq!((short(0.4321), short(261.5), short(55.2)), ("0.43".into(), "262".into(), "55".into()));
        assert_eq!(joined(fixed(85.85, 1), fixed(91.05, 1)), "85.8-91.0");
    }
}
