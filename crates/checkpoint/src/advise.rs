//! How often to checkpoint: the Young (1974) and Daly (2006) optimal intervals for a
//! checkpoint cost `C` and a mean time between failures `M`, and the expected waste of an
//! interval under Daly's model of exponentially distributed failures.

use serde::Serialize;

/// Young's first-order optimum: `sqrt(2 C M)` seconds of work between checkpoints.
pub fn young(checkpoint_s: f64, mtbf_s: f64) -> f64 {
    (2.0 * checkpoint_s * mtbf_s).sqrt()
}

/// Daly's higher-order optimum: `sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C` for
/// `C < 2M`, and `M` otherwise.
pub fn daly(checkpoint_s: f64, mtbf_s: f64) -> f64 {
    let (c, m) = (checkpoint_s, mtbf_s);
    if c >= 2.0 * m {
        return m;
    }
    let r = c / (2.0 * m);
    (2.0 * c * m).sqrt() * (1.0 + r.sqrt() / 3.0 + r / 9.0) - c
}

/// Expected share of wall time that is not useful work, checkpointing every `interval_s`
/// seconds of work at `checkpoint_s` each, restarting at `restart_s`, failures arriving with
/// mean `mtbf_s` (Daly 2006, eq. 11: wall time `M e^(R/M) (e^((τ+C)/M) - 1)` per `τ` of work).
pub fn waste(interval_s: f64, checkpoint_s: f64, restart_s: f64, mtbf_s: f64) -> f64 {
    let (t, c, r, m) = (interval_s, checkpoint_s, restart_s, mtbf_s);
    let wall_per_work = m * (r / m).exp() * ((t + c) / m).exp_m1() / t;
    1.0 - 1.0 / wall_per_work
}

/// What `resilab advise` prints.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Advice {
    /// Checkpoint cost in seconds.
    pub checkpoint_s: f64,
    /// Restart cost in seconds.
    pub restart_s: f64,
    /// Mean time between failures in seconds.
    pub mtbf_s: f64,
    /// Young's interval in seconds of work.
    pub young_s: f64,
    /// Daly's interval in seconds of work.
    pub daly_s: f64,
    /// Expected waste at Young's interval (share of wall time).
    pub young_waste: f64,
    /// Expected waste at Daly's interval.
    pub daly_waste: f64,
    /// Seconds one training step takes, when known (a run's measured step time).
    pub step_s: Option<f64>,
    /// Young's interval in whole steps (at least 1), when the step time is known.
    pub young_steps: Option<u64>,
    /// Daly's interval in whole steps (at least 1): the `checkpoint.every_steps` to use.
    pub daly_steps: Option<u64>,
}

impl Advice {
    /// The intervals in steps of `step_s` seconds each, rounded to the nearest whole step.
    pub fn with_step_s(mut self, step_s: f64) -> Self {
        let steps = |s: f64| (s / step_s).round().max(1.0) as u64;
        self.step_s = Some(step_s);
        self.young_steps = Some(steps(self.young_s));
        self.daly_steps = Some(steps(self.daly_s));
        self
    }
}

/// [`advise`] for values given on a command line: the costs and MTBF must be finite, the
/// checkpoint cost and MTBF above zero, the restart cost not below; the error names the flag.
pub fn checked(checkpoint_s: f64, restart_s: f64, mtbf_s: f64) -> crate::Result<Advice> {
    for (name, v) in [("--checkpoint-cost", checkpoint_s), ("--mtbf", mtbf_s)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(crate::Error::Usage(format!("{name} must be a number of seconds > 0, got {v}")));
        }
    }
    if !(restart_s.is_finite() && restart_s >= 0.0) {
        return Err(crate::Error::Usage(format!("--restart-cost must be a number of seconds >= 0, got {restart_s}")));
    }
    Ok(advise(checkpoint_s, restart_s, mtbf_s))
}

impl Advice {
    /// `resilab advise`'s report: both intervals (in steps too, when the step time is known),
    /// their expected waste, and the `[checkpoint]` line to paste.
    pub fn text(&self) -> String {
        // Simulated costs are often milliseconds: small values in scientific notation.
        let s = |x: f64| if x != 0.0 && x.abs() < 0.1 { format!("{x:.3e} s") } else { format!("{x:.1} s") };
        let steps = |n: Option<u64>| n.map(|n| format!(" ({n} steps)")).unwrap_or_default();
        let mut lines = vec![
            format!("checkpoint cost {}, restart cost {}, MTBF {}", s(self.checkpoint_s), s(self.restart_s), s(self.mtbf_s)),
            format!(
                "Young: checkpoint every {}{} of work; expected time lost {:.2}%",
                s(self.young_s),
                steps(self.young_steps),
                100.0 * self.young_waste
            ),
            format!(
                "Daly:  checkpoint every {}{} of work; expected time lost {:.2}%",
                s(self.daly_s),
                steps(self.daly_steps),
                100.0 * self.daly_waste
            ),
            "(lost: checkpoint writes, work redone after failures and restarts; Daly's model, exponential failures)".to_string(),
        ];
        if let (Some(n), Some(step)) = (self.daly_steps, self.step_s) {
            lines.push(format!("in the run's configuration ({} per step measured): [checkpoint] every_steps = {n}", s(step)));
        }
        lines.join("\n")
    }
}

/// Both intervals and their expected waste.
pub fn advise(checkpoint_s: f64, restart_s: f64, mtbf_s: f64) -> Advice {
    let (y, d) = (young(checkpoint_s, mtbf_s), daly(checkpoint_s, mtbf_s));
    Advice {
        checkpoint_s,
        restart_s,
        mtbf_s,
        young_s: y,
        daly_s: d,
        young_waste: waste(y, checkpoint_s, restart_s, mtbf_s),
        daly_waste: waste(d, checkpoint_s, restart_s, mtbf_s),
        step_s: None,
        young_steps: None,
        daly_steps: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_in_steps_round_to_whole_steps_and_never_below_one() {
        let a = advise(60.0, 0.0, 86_400.0).with_step_s(10.0);
        assert_eq!((a.young_steps, a.daly_steps), (Some(322), Some(318)));
        let tiny = advise(1e-6, 0.0, 1e-3).with_step_s(1.0);
        assert_eq!((tiny.young_steps, tiny.daly_steps), (Some(1), Some(1)));
    }

    #[test]
    fn young_and_daly_match_hand_computed_values() {
        // C = 60 s, M = 1 day: sqrt(2 * 60 * 86400) = 3219.94 s.
        assert!((young(60.0, 86_400.0) - 3219.937887).abs() < 1e-3);
        // r = 60 / 172800; 3219.937887 * (1 + sqrt(r)/3 + r/9) - 60 = 3180.062.
        let r: f64 = 60.0 / 172_800.0;
        let expected = 3219.937887 * (1.0 + r.sqrt() / 3.0 + r / 9.0) - 60.0;
        assert!((daly(60.0, 86_400.0) - expected).abs() < 1e-6);
        assert!((daly(60.0, 86_400.0) - 3180.062114).abs() < 1e-3, "{}", daly(60.0, 86_400.0));
        // A checkpoint costing more than two MTBFs: checkpoint once per MTBF.
        assert_eq!(daly(300.0, 100.0), 100.0);
    }

    #[test]
    fn daly_interval_is_close_to_the_waste_minimum() {
        for (c, m) in [(10.0, 3_600.0), (60.0, 86_400.0), (5.0, 600.0), (120.0, 7_200.0)] {
            let best = (1..20_000).map(|i| i as f64 * m / 10_000.0).map(|t| waste(t, c, 0.0, m)).fold(f64::INFINITY, f64::min);
            let at_daly = waste(daly(c, m), c, 0.0, m);
            assert!(at_daly <= best * 1.001 + 1e-12, "C {c} M {m}: waste at Daly {at_daly}, minimum {best}");
            assert!(waste(young(c, m), c, 0.0, m) >= at_daly - 1e-12);
        }
    }

    #[test]
    fn waste_grows_with_restart_cost_and_vanishes_without_failures() {
        assert!(waste(600.0, 10.0, 60.0, 3_600.0) > waste(600.0, 10.0, 0.0, 3_600.0));
        // No failures (huge MTBF): waste is the checkpoint share C / (τ + C).
        assert!((waste(90.0, 10.0, 0.0, 1e12) - 0.1).abs() < 1e-6);
    }
}
