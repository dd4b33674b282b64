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
    /// `recovery.profile` with its `profile_scale`, per distinct pair.
    profiles: Vec<(String, Option<f64>)>,
    /// `train.golden_ensemble`.
    ensembles: Values,
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
        s.ensembles.add(c.train.golden_ensemble.to_string());
        s.gflops.add(c.parallel.compute.gflops.map_or("measured".into(), |g| fmt_g(g, 3)));
        let r = &c.recovery;
        for (v, x) in s.costs.iter_mut().zip([r.detect_timeout_s, r.rebuild_s, r.relaunch_s]) {
            v.add(format!("{} s", fmt_g(x, 3)));
        }
        if let Some(p) = r.profile.clone().map(|p| (p, r.profile_scale))
            && !s.profiles.contains(&p)
        {
            s.profiles.push(p);
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

/// One per golden run: its final accuracy (%), its fault-free step time (ms) and, with a
/// golden ensemble, the ensemble's standard deviation of final accuracies (points).
struct Goldens {
    accs: Vec<f64>,
    step_ms: Vec<f64>,
    sds: Vec<f64>,
}

fn golden(dir: &Path, steps: f64) -> Result<Goldens> {
    let runs = Table::read(&dir.join("runs.csv"))?;
    let mut by_key: BTreeMap<String, (f64, Option<f64>, Option<f64>)> = BTreeMap::new();
    let optional = |r: &super::read::Rec, column: &str| if r.has(column) { r.float(column).map(Some) } else { Ok(None) };
    for r in runs.rows().filter(|r| r.has("golden_key") && r.has("golden_acc_frac")) {
        let (sim, sd) = (optional(&r, "golden_sim_s")?, optional(&r, "golden_ensemble_sd_frac")?);
        by_key.insert(r.field("golden_key")?.to_string(), (100.0 * r.float("golden_acc_frac")?, sim, sd.map(|sd| 100.0 * sd)));
    }
    Ok(Goldens {
        accs: by_key.values().map(|v| v.0).collect(),
        step_ms: by_key.values().filter_map(|v| v.1).map(|s| 1e3 * s / steps).collect(),
        sds: by_key.values().filter_map(|v| v.2).collect(),
    })
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
    let Goldens { mut accs, mut step_ms, mut sds } = golden(dir, steps)?;
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
    if let Some((lo, _, hi)) = spread(&mut sds) {
        // An ensemble whose members all ended at the same accuracy has a deviation of 0, which
        // its floating-point computation leaves at about 1e-14 points.
        let (lo, hi) = (if lo < 1e-9 { 0.0 } else { lo }, if hi < 1e-9 { 0.0 } else { hi });
        text += &format!(
            " Each is the first of a golden ensemble of {} fault-free runs that differ only in the order of their all-reduce sums (`train.reduction_order = \"seeded\"`, as a GPU leaves it free), whose final accuracies have a standard deviation of {} points; accuracy losses are measured against each ensemble's mean.",
            s.ensembles.or(),
            range(lo, hi, 2)
        );
    }
    if let Some((lo, _, hi)) = spread(&mut step_ms) {
        text += &format!(" A fault-free step takes {} ms of simulated time.", range(lo, hi, 3));
    }
    text += &costs(&s, name);
    text += &groups_and_detectable(dir)?;
    Ok(text)
}

/// What a crash costs: the cost profile the runs name, with each figure's source, or else
/// each constant with the published figure it stands for.
fn costs(s: &Setup, name: &str) -> String {
    let profile = match s.profiles.as_slice() {
        [(p, scale)] => resilab_recovery::profile::profile(p).map(|p| (p, scale.unwrap_or(1.0))),
        _ => None,
    };
    let Some((p, scale)) = profile else {
        let costs: Vec<String> = SOURCES.iter().zip(&s.costs).map(|((what, src), v)| format!("{what} {} ({src})", v.or())).collect();
        return format!(
            " What a crash costs beyond its step, in those seconds, with the published figure of a real job that `configs/paper/{name}.toml` scales to its step: {}.",
            costs.join("; ")
        );
    };
    let figures = [("detection", p.detect), ("communicator rebuild", p.rebuild), ("relaunch", p.relaunch)];
    let costs: Vec<String> =
        figures.iter().zip(&s.costs).map(|((what, f), v)| format!("{what} {} ({} s: {})", v.or(), fmt_g(f.seconds, 4), f.source)).collect();
    let covers =
        if p.relaunch_covers_redo { "; the relaunch's figure covers the checkpoint read and the steps recomputed after it" } else { "" };
    format!(
        " What a crash costs beyond its step, in those seconds: the cost profile `{}` ({}), each figure times {} simulated seconds per second (`recovery.profile_scale`): {}{covers}.",
        p.name,
        p.system,
        fmt_g(scale, 3),
        costs.join("; ")
    )
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
