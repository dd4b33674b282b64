//! How training went after its first fault: each run's outcome in the classes of He et al.,
//! "Understanding and Mitigating Hardware Failures in Deep Learning Training Systems" (ISCA
//! 2023, DOI 10.1145/3579371.3589105), read from the run's training curve against its golden
//! run's: masked, immediate INFs/NaNs, slow degradation, sharp then slow degradation, sharp
//! degradation, low test accuracy; and resilab's own two, a run without faults and a run whose
//! strategy gave up. The thresholds are resilab's (`[outcome]`, docs/metrics.md "Outcome
//! classes"); the shape is read from `metrics.csv`'s rows, so its resolution is
//! `train.log_every` steps.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A run's outcome class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// No fault struck the run.
    NoFault,
    /// Its strategy gave up (a crash under `none`, or no way to go on after a permanent loss):
    /// training did not finish.
    Failed,
    /// Final test accuracy within `outcome.masked_points` of the golden run's, no NaN/Inf left.
    Masked,
    /// A NaN/Inf training loss within `outcome.immediate_steps` of the first fault, never
    /// cleared (the run ended collapsed).
    ImmediateNan,
    /// Harmed without a sharp drop after the fault: training accuracy fell behind the golden
    /// run's gradually, ending at least `outcome.degrade_points` behind it or in a NaN/Inf.
    SlowDegrade,
    /// A sharp drop after the fault, then training fell further behind: its final gap is at
    /// least `outcome.degrade_points` wider than the drop's, or it ended in a NaN/Inf.
    SharpSlowDegrade,
    /// A sharp drop after the fault that training never made up: its final gap is at least
    /// `outcome.degrade_points` and less than `degrade_points` wider than the drop's.
    SharpDegrade,
    /// Training accuracy ended within `outcome.degrade_points` of the golden run's, but the
    /// final test accuracy is more than `outcome.masked_points` below it.
    LowTestAcc,
}

impl Outcome {
    /// Every class, in the order reports list them.
    pub const ALL: [Outcome; 8] = [
        Outcome::NoFault,
        Outcome::Masked,
        Outcome::ImmediateNan,
        Outcome::SlowDegrade,
        Outcome::SharpSlowDegrade,
        Outcome::SharpDegrade,
        Outcome::LowTestAcc,
        Outcome::Failed,
    ];

    /// Its name in `runs.csv` (`masked`, `immediate_nan`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::NoFault => "no_fault",
            Outcome::Failed => "failed",
            Outcome::Masked => "masked",
            Outcome::ImmediateNan => "immediate_nan",
            Outcome::SlowDegrade => "slow_degrade",
            Outcome::SharpSlowDegrade => "sharp_slow_degrade",
            Outcome::SharpDegrade => "sharp_degrade",
            Outcome::LowTestAcc => "low_test_acc",
        }
    }

    /// The class named `name` in `runs.csv`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }

    /// Whether the class is harm: neither masked nor without a fault.
    pub fn harmed(self) -> bool {
        !matches!(self, Outcome::NoFault | Outcome::Masked)
    }
}

/// The `[outcome]` section: the thresholds that read a run's curve into its class. They decide
/// nothing in training (a run's golden run is the same whatever they are).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeConfig {
    /// A run whose final test accuracy is at most this many points below the golden run's (the
    /// golden ensemble's mean, with one) and that holds no NaN/Inf is masked.
    #[serde(default = "default_masked_points")]
    pub masked_points: f64,
    /// Points of training accuracy behind the golden run's, at the same logged step, that
    /// count as degraded.
    #[serde(default = "default_degrade_points")]
    pub degrade_points: f64,
    /// Points of training accuracy behind the golden run's that count as a sharp drop, when
    /// reached within `sharp_steps` of the first fault.
    #[serde(default = "default_sharp_points")]
    pub sharp_points: f64,
    /// Steps after the first fault within which a drop is sharp; the first logged row at or
    /// after the fault always counts.
    #[serde(default = "default_sharp_steps")]
    pub sharp_steps: u64,
    /// Steps after the first fault within which a NaN/Inf training loss is immediate (0: the
    /// fault's own step only).
    #[serde(default = "default_immediate_steps")]
    pub immediate_steps: u64,
}

fn default_masked_points() -> f64 {
    1.0
}
fn default_degrade_points() -> f64 {
    5.0
}
fn default_sharp_points() -> f64 {
    20.0
}
fn default_sharp_steps() -> u64 {
    10
}
fn default_immediate_steps() -> u64 {
    1
}

impl Default for OutcomeConfig {
    fn default() -> Self {
        Self {
            masked_points: default_masked_points(),
            degrade_points: default_degrade_points(),
            sharp_points: default_sharp_points(),
            sharp_steps: default_sharp_steps(),
            immediate_steps: default_immediate_steps(),
        }
    }
}

impl OutcomeConfig {
    /// Whether every threshold is its default (the section is then left out of the resolved
    /// configuration).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Each threshold in points is above 0 and at most 100; errors name the key.
    pub fn validate(&self) -> Result<()> {
        for (key, v) in
            [("masked_points", self.masked_points), ("degrade_points", self.degrade_points), ("sharp_points", self.sharp_points)]
        {
            if !(v > 0.0 && v <= 100.0) {
                return Err(Error::Config(format!("outcome.{key} = {v}: must be above 0 and at most 100 (accuracy points)")));
            }
        }
        Ok(())
    }
}

/// A run's curve from its `metrics.csv`: per logged step, the training accuracy of the window
/// ending there (fractions; a window whose loss was NaN/Inf is marked), and per evaluated step,
/// the test accuracy. A step logged twice (a restart went back over it) keeps its last row,
/// the one of the run's final timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// Training accuracy per logged step, `None` where the window's loss was not finite.
    pub train_acc: BTreeMap<u64, Option<f64>>,
    /// Test accuracy per evaluated step.
    pub test_acc: BTreeMap<u64, f64>,
}

impl Curve {
    /// Reads `metrics.csv` at `path` (its `step`, `loss`, `train_acc` and `test_acc` columns).
    pub fn read(path: &Path) -> Result<Self> {
        let csv_err = |source| Error::Csv { path: path.to_path_buf(), source };
        let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
        let headers = reader.headers().map_err(csv_err)?.clone();
        if headers.is_empty() {
            // A run that stopped before its first row wrote no header either: no curve.
            return Ok(Curve::default());
        }
        let col = |name: &str| headers.iter().position(|h| h == name);
        let (Some(step), Some(loss), Some(train), Some(test)) = (col("step"), col("loss"), col("train_acc"), col("test_acc")) else {
            return Err(Error::Golden(format!("{}: no step, loss, train_acc or test_acc column", path.display())));
        };
        let mut curve = Curve::default();
        for row in reader.records() {
            let row = row.map_err(csv_err)?;
            let num = |i: usize| row.get(i).and_then(|s| s.parse::<f64>().ok());
            let Some(s) = row.get(step).and_then(|s| s.parse::<u64>().ok()) else { continue };
            if let (Some(l), Some(a)) = (num(loss), num(train)) {
                curve.train_acc.insert(s, l.is_finite().then_some(a));
            }
            if let Some(a) = num(test) {
                curve.test_acc.insert(s, a);
            }
        }
        Ok(curve)
    }
}

/// What the classifier needs of a run beyond its curve.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunFacts {
    /// The step of the run's first fault (`None`: none struck).
    pub first_fault_step: Option<u64>,
    /// Its strategy gave up.
    pub failed: bool,
    /// It ended with a NaN/Inf training loss or state.
    pub collapsed: bool,
    /// The first step of the run's final timeline whose training loss was not finite.
    pub first_non_finite_step: Option<u64>,
    /// The steps it completed (a run that failed stopped in the next).
    pub last_step: u64,
    /// Golden final test accuracy minus the run's, points.
    pub acc_loss_points: f64,
}

/// A run's class and the step its harm began, from which it lasted to the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Classified {
    /// The class.
    pub outcome: Outcome,
    /// Harmed classes: the first step from which the run stayed harmed to its end (the step a
    /// failed run stopped in, the NaN's step, the sharp drop's row, the first row from which training accuracy stayed
    /// `degrade_points` behind, or the first evaluation from which test accuracy stayed
    /// `masked_points` behind); `None` otherwise.
    pub onset_step: Option<u64>,
}

/// Classifies a run from its facts and its curve against its golden run's.
pub fn classify(facts: &RunFacts, run: &Curve, golden: &Curve, t: &OutcomeConfig) -> Classified {
    let done = |outcome, onset_step| Classified { outcome, onset_step };
    let Some(fault) = facts.first_fault_step else { return done(Outcome::NoFault, None) };
    if facts.failed {
        return done(Outcome::Failed, Some(facts.last_step + 1));
    }
    let gaps = train_gaps(fault, run, golden);
    let sharp =
        gaps.iter().enumerate().find(|&(i, &(s, g))| (i == 0 || s <= fault + t.sharp_steps) && g >= t.sharp_points).map(|(_, &p)| p);
    if facts.collapsed {
        let nan = facts.first_non_finite_step.unwrap_or(facts.last_step);
        if nan <= fault + t.immediate_steps {
            return done(Outcome::ImmediateNan, Some(nan));
        }
        let onset = stays_from(&gaps, t.degrade_points).unwrap_or(nan).min(nan);
        return match sharp {
            Some((s, _)) => done(Outcome::SharpSlowDegrade, Some(s.min(onset))),
            None => done(Outcome::SlowDegrade, Some(onset)),
        };
    }
    if facts.acc_loss_points <= t.masked_points {
        return done(Outcome::Masked, None);
    }
    let end = gaps.last().map_or(0.0, |&(_, g)| g);
    let low_test = || done(Outcome::LowTestAcc, Some(test_onset(fault, run, golden, t.masked_points).unwrap_or(facts.last_step)));
    match sharp {
        _ if end < t.degrade_points => low_test(),
        Some((s, g)) if end >= g + t.degrade_points => done(Outcome::SharpSlowDegrade, Some(s)),
        Some((s, _)) => done(Outcome::SharpDegrade, Some(s)),
        None => done(Outcome::SlowDegrade, Some(stays_from(&gaps, t.degrade_points).unwrap_or(facts.last_step))),
    }
}

/// Per logged step at or after `fault` (the row whose window holds the fault, then later ones),
/// the points of training accuracy the run is behind the golden run (infinite where the run's
/// loss was not finite); steps the golden run did not log are left out.
fn train_gaps(fault: u64, run: &Curve, golden: &Curve) -> Vec<(u64, f64)> {
    run.train_acc
        .range(fault..)
        .filter_map(|(&s, &a)| {
            let g = golden.train_acc.get(&s).copied().flatten()?;
            Some((s, a.map_or(f64::INFINITY, |a| (g - a) * 100.0)))
        })
        .collect()
}

/// The first step of the last stretch of `gaps` at or above `points` that reaches the end.
fn stays_from(gaps: &[(u64, f64)], points: f64) -> Option<u64> {
    last_stretch(gaps, |g| g >= points)
}

/// The first evaluation at or after `fault` from which the run's test accuracy stayed more than
/// `points` below the golden run's at the same step, to the last evaluation.
fn test_onset(fault: u64, run: &Curve, golden: &Curve, points: f64) -> Option<u64> {
    let gaps: Vec<(u64, f64)> =
        run.test_acc.range(fault..).filter_map(|(&s, &a)| golden.test_acc.get(&s).map(|g| (s, (g - a) * 100.0))).collect();
    last_stretch(&gaps, |g| g > points)
}

/// The first step of the stretch at the end of `gaps` whose every gap meets `harmed`.
fn last_stretch(gaps: &[(u64, f64)], harmed: impl Fn(f64) -> bool) -> Option<u64> {
    let kept = gaps.iter().rev().take_while(|&&(_, g)| harmed(g)).count();
    (kept > 0).then(|| gaps[gaps.len() - kept].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A curve logged every 10 steps to step 100: training accuracy `train(step)` (None: the
    /// window's loss was not finite), test accuracy `test(step)` at every 20th.
    fn curve(train: impl Fn(u64) -> Option<f64>, test: impl Fn(u64) -> f64) -> Curve {
        let steps = (1..=10).map(|i| i * 10);
        Curve {
            train_acc: steps.clone().map(|s| (s, train(s))).collect(),
            test_acc: steps.filter(|s| s % 20 == 0).map(|s| (s, test(s))).collect(),
        }
    }

    fn golden() -> Curve {
        curve(|s| Some(0.5 + 0.004 * s as f64), |s| 0.5 + 0.004 * s as f64)
    }

    fn facts(fault: u64, acc_loss_points: f64) -> RunFacts {
        RunFacts { first_fault_step: Some(fault), last_step: 100, acc_loss_points, ..RunFacts::default() }
    }

    fn class(f: &RunFacts, run: &Curve) -> Classified {
        classify(f, run, &golden(), &OutcomeConfig::default())
    }

    #[test]
    fn one_curve_per_class_is_read_as_that_class_with_its_onset() {
        let g = golden();
        let same = |s: u64| g.train_acc[&s];
        let test = |s: u64| g.test_acc.get(&s).copied().unwrap_or(0.0);
        let shifted = |d: f64| move |s: u64| if s >= 40 { Some(0.5 + 0.004 * s as f64 - d) } else { Some(0.5 + 0.004 * s as f64) };

        let none = RunFacts { first_fault_step: None, ..facts(0, 30.0) };
        assert_eq!(class(&none, &g), Classified { outcome: Outcome::NoFault, onset_step: None });

        let failed = RunFacts { failed: true, last_step: 57, ..facts(35, 0.0) };
        assert_eq!(class(&failed, &g), Classified { outcome: Outcome::Failed, onset_step: Some(58) });

        // A dip that training made up: masked.
        let dip = curve(|s| if s == 40 { Some(0.2) } else { same(s) }, test);
        assert_eq!(class(&facts(35, 0.3), &dip).outcome, Outcome::Masked);

        let nan = RunFacts { collapsed: true, first_non_finite_step: Some(36), ..facts(35, 80.0) };
        let dead = curve(|s| if s >= 40 { None } else { same(s) }, test);
        assert_eq!(class(&nan, &dead), Classified { outcome: Outcome::ImmediateNan, onset_step: Some(36) });

        // Falling behind by 2 more points every 10 steps from step 40, ending 14 points behind.
        let slow = curve(|s| if s >= 40 { Some(same(s).unwrap_or(0.0) - 0.002 * (s - 30) as f64) } else { same(s) }, test);
        assert_eq!(class(&facts(35, 12.0), &slow), Classified { outcome: Outcome::SlowDegrade, onset_step: Some(60) });

        // A NaN long after the fault, with no sharp drop before it: slow degradation to NaN.
        let late = RunFacts { collapsed: true, first_non_finite_step: Some(75), ..facts(35, 80.0) };
        let to_nan = curve(|s| if s >= 80 { None } else { same(s) }, test);
        assert_eq!(class(&late, &to_nan), Classified { outcome: Outcome::SlowDegrade, onset_step: Some(75) });

        let sharp = curve(shifted(0.3), test);
        assert_eq!(class(&facts(35, 30.0), &sharp), Classified { outcome: Outcome::SharpDegrade, onset_step: Some(40) });

        // 30 points down at once, then 9 more by the end.
        let sharp_slow = curve(|s| if s >= 40 { Some(0.5 + 0.004 * s as f64 - 0.3 - 0.0015 * (s - 40) as f64) } else { same(s) }, test);
        assert_eq!(class(&facts(35, 40.0), &sharp_slow), Classified { outcome: Outcome::SharpSlowDegrade, onset_step: Some(40) });

        // Training as the golden run's, test accuracy 3 points lower from step 60 on.
        let low = curve(same, |s| test(s) - if s >= 60 { 0.03 } else { 0.0 });
        assert_eq!(class(&facts(35, 3.0), &low), Classified { outcome: Outcome::LowTestAcc, onset_step: Some(60) });
    }

    #[test]
    fn a_drop_is_sharp_only_within_sharp_steps_of_the_fault_or_at_the_first_row() {
        let g = golden();
        let g = &g;
        let drop_at = |at: u64| {
            curve(move |s| g.train_acc[&s].map(|a| if s >= at { a - 0.3 } else { a }), |s| g.test_acc.get(&s).copied().unwrap_or(0.0))
        };
        // The first row at or after the fault (step 40 for a fault at 31) always counts.
        assert_eq!(class(&facts(31, 30.0), &drop_at(40)).outcome, Outcome::SharpDegrade);
        // 10 steps after the fault (sharp_steps) still counts; 20 does not.
        assert_eq!(class(&facts(30, 30.0), &drop_at(40)).outcome, Outcome::SharpDegrade);
        assert_eq!(class(&facts(30, 30.0), &drop_at(50)).outcome, Outcome::SlowDegrade);
        let wide = OutcomeConfig { sharp_steps: 20, ..OutcomeConfig::default() };
        assert_eq!(classify(&facts(30, 30.0), &drop_at(50), &golden(), &wide).outcome, Outcome::SharpDegrade);
    }

    #[test]
    fn a_curve_reads_back_from_metrics_csv_with_its_last_row_per_step_nan_windows_marked_and_none_from_an_empty_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("metrics.csv");
        let text = "step,epoch,loss,train_acc,test_acc,test_loss,lr\n10,0,1.0,0.5,,,0.1\n20,0,1.0,0.6,0.55,1.0,0.1\n20,0,NaN,0.1,0.2,9.0,0.1\n30,0,inf,0.1,,,0.1\n";
        std::fs::write(&p, text).unwrap();
        let c = Curve::read(&p).unwrap();
        assert_eq!(c.train_acc, BTreeMap::from([(10, Some(0.5)), (20, None), (30, None)]));
        assert_eq!(c.test_acc, BTreeMap::from([(20, 0.2)]));
        // A run that stopped before its first row left an empty file.
        std::fs::write(&p, "").unwrap();
        assert_eq!(Curve::read(&p).unwrap(), Curve::default());
        std::fs::write(&p, "step,loss\n1,2.0\n").unwrap();
        assert!(Curve::read(&p).unwrap_err().to_string().contains("no step, loss, train_acc or test_acc column"));
    }

    #[test]
    fn thresholds_outside_0_to_100_points_are_refused_naming_the_key() {
        let bad = OutcomeConfig { sharp_points: 0.0, ..OutcomeConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("outcome.sharp_points"));
        assert!(OutcomeConfig { masked_points: f64::NAN, ..OutcomeConfig::default() }.validate().is_err());
        OutcomeConfig::default().validate().unwrap();
    }

    #[test]
    fn every_class_parses_back_from_its_name() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.name()), Some(o));
        }
        assert_eq!(Outcome::parse("benign"), None);
    }
}
