//! Re-pricing a `train` campaign's runs at other recovery constants (`resilab report DIR
//! --set recovery.relaunch_s=V`), from the events each run paid for.
//!
//! A run's simulated seconds charge `recovery.detect_timeout_s` `detect_charges` times,
//! `recovery.rebuild_s` `rebuilds` times and `recovery.relaunch_s` `relaunches` times beyond its
//! step timelines. None of the three decides an event: faults arrive by step, checkpoints are
//! written by step (Daly's interval, `checkpoint.daly_factor`, uses the checkpoint's write cost
//! and the MTBF, never these constants), and no strategy chooses by them. So a run rerun at other
//! constants meets the same events, and its simulated seconds are the recorded ones plus each
//! constant's change times its count: exact, not an estimate. The golden run pays none of them,
//! so its simulated seconds, and so the overhead's denominator, stay. What is not re-priced: the
//! simulated time at which a run first reached the golden run's accuracy (the charges before
//! that evaluation are not counted apart) and the accuracy-against-time curves drawn from each
//! run's `metrics.csv`: both stay at the recorded constants.

use std::fmt::Write as _;

use resilab_campaign::{Campaign, Kind, Row};

use crate::error::{Error, Result};

/// The keys `--set` accepts, in the order of [`Prices`]'s fields.
pub const KEYS: [&str; 3] = ["recovery.detect_timeout_s", "recovery.rebuild_s", "recovery.relaunch_s"];

/// The recovery constants a run's events are charged at, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prices {
    /// `recovery.detect_timeout_s`.
    pub detect_timeout_s: f64,
    /// `recovery.rebuild_s`.
    pub rebuild_s: f64,
    /// `recovery.relaunch_s`.
    pub relaunch_s: f64,
}

impl Prices {
    /// The constants of a run's configuration.
    pub fn of(r: &resilab_runner::RecoveryConfig) -> Self {
        Self { detect_timeout_s: r.detect_timeout_s, rebuild_s: r.rebuild_s, relaunch_s: r.relaunch_s }
    }

    fn values(&self) -> [f64; 3] {
        [self.detect_timeout_s, self.rebuild_s, self.relaunch_s]
    }
}

/// How many times a run paid each constant (`runs.csv`'s `detect_charges`, `rebuilds`,
/// `relaunches`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Charges {
    /// Times `recovery.detect_timeout_s` was charged.
    pub detect: u64,
    /// Times `recovery.rebuild_s` was charged.
    pub rebuilds: u64,
    /// Times `recovery.relaunch_s` was charged.
    pub relaunches: u64,
}

/// The constants `--set` changes; the others stay each run's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Per key of [`KEYS`], its new value.
    values: [Option<f64>; 3],
}

impl Overrides {
    /// Parses `--set` arguments (`recovery.relaunch_s=300`): only the keys of [`KEYS`], each a
    /// finite number of seconds not below 0.
    pub fn parse(sets: &[String]) -> Result<Self> {
        let mut values = [None; 3];
        for s in sets {
            let (key, value) = s.split_once('=').ok_or_else(|| Error::Price(format!("--set {s}: expected KEY=VALUE")))?;
            let (key, value) = (key.trim(), value.trim());
            let i = KEYS.iter().position(|k| *k == key).ok_or_else(|| {
                Error::Price(format!(
                    "--set {key}: a report re-prices only the recovery constants a run pays per event ({}); any other key changes what the runs did, so rerun the campaign",
                    KEYS.join(", ")
                ))
            })?;
            let v: f64 = value.parse().map_err(|_| Error::Price(format!("--set {key}={value}: expected seconds")))?;
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Price(format!("--set {key}={value}: expected a finite number of seconds, not below 0")));
            }
            values[i] = Some(v);
        }
        Ok(Self { values })
    }

    /// Whether no constant is changed.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }

    /// `recorded` with the changed constants put in.
    pub fn apply(&self, recorded: Prices) -> Prices {
        let [d, b, l] = recorded.values();
        let pick = |i: usize, old: f64| self.values[i].unwrap_or(old);
        Prices { detect_timeout_s: pick(0, d), rebuild_s: pick(1, b), relaunch_s: pick(2, l) }
    }

    /// `key = value s` for each changed constant, joined by `, `.
    pub fn describe(&self) -> String {
        let set = KEYS.iter().zip(&self.values).filter_map(|(k, v)| v.map(|v| format!("`{k}` = {v} s")));
        set.collect::<Vec<_>>().join(", ")
    }
}

/// Simulated seconds of a run that paid `charges` at `recorded` and took `sim_s`, had it paid
/// them at `new`: `sim_s` plus each constant's change times its count.
pub fn repriced_s(sim_s: f64, charges: Charges, recorded: Prices, new: Prices) -> f64 {
    let counts = [charges.detect, charges.rebuilds, charges.relaunches];
    let delta: f64 = counts.iter().zip(new.values().iter().zip(recorded.values())).map(|(&n, (&b, a))| n as f64 * (b - a)).sum();
    sim_s + delta
}

/// The overhead in simulated time (a fraction) of a run recorded at `recorded` over `sim_s`
/// seconds, re-priced to `new_s`, against its golden run's `golden_s` (which pays none of the
/// constants): the recorded overhead plus the change over `golden_s`, and at unchanged prices
/// the recorded overhead to the bit.
pub fn repriced_overhead(recorded: f64, sim_s: f64, new_s: f64, golden_s: f64) -> f64 {
    if new_s == sim_s { recorded } else { recorded + (new_s - sim_s) / golden_s }
}

/// The count `column` of a run, needed when its constant changed (`delta` not 0): an error
/// naming the column when the run was recorded before it.
fn count(r: &Row, column: &str, value: Option<u64>, delta: f64) -> Result<u64> {
    match value {
        Some(v) => Ok(v),
        None if delta == 0.0 => Ok(0),
        None => Err(Error::Price(format!(
            "run {}: its record has no `{column}` (recorded before the counts of priced events): it cannot be re-priced at a changed constant; rerun the campaign",
            r.id
        ))),
    }
}

/// `row` re-priced from `recorded` to `new`: its `sim_s` and its `sim_overhead` (kept empty
/// where it was: a failed run's). Rows without simulated time (an error) are returned as they
/// are.
pub fn reprice_row(row: &Row, recorded: Prices, new: Prices) -> Result<Row> {
    let mut out = row.clone();
    let Some(sim_s) = row.metrics.sim_s else { return Ok(out) };
    let m = &row.metrics;
    let [dd, db, dl] = [0, 1, 2].map(|i| new.values()[i] - recorded.values()[i]);
    let charges = Charges {
        detect: count(row, "detect_charges", m.detect_charges, dd)?,
        rebuilds: count(row, "rebuilds", m.rebuilds, db)?,
        relaunches: count(row, "relaunches", m.relaunches, dl)?,
    };
    let s = repriced_s(sim_s, charges, recorded, new);
    out.metrics.sim_s = Some(s);
    if let (Some(o), Some(g)) = (m.sim_overhead, m.golden_sim_s.filter(|g| *g > 0.0)) {
        out.metrics.sim_overhead = Some(repriced_overhead(o, sim_s, s, g));
    }
    Ok(out)
}

/// The constants a run was recorded at, and those it is re-priced at.
pub type PricePair = (Prices, Prices);

/// The runs of a campaign re-priced at `set`: each run's recorded constants from its own
/// configuration (the base's, or its grid point's), the changed ones from `set`. Refused for a
/// campaign that is not `train`, and where the new pair puts a relaunch below a rebuild without
/// the run's `recovery.relaunch_below_rebuild`.
pub fn reprice(campaign: &Campaign, rows: &[Row], set: &Overrides) -> Result<(Vec<Row>, Vec<PricePair>)> {
    if campaign.settings.kind != Kind::Train {
        return Err(Error::Price(format!(
            "--set re-prices the recovery constants of `train` campaigns; this campaign is `{}`",
            campaign.settings.kind.name()
        )));
    }
    let mut pairs: Vec<PricePair> = Vec::new();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let cfg = campaign.run(r.index)?.config;
        let recorded = Prices::of(&cfg.recovery);
        let new = set.apply(recorded);
        if new.relaunch_s < new.rebuild_s && !cfg.recovery.relaunch_below_rebuild {
            return Err(Error::Price(format!(
                "run {}: recovery.relaunch_s = {} s would be below recovery.rebuild_s = {} s: a relaunch contains the new job's communicator initialisation; set both, or re-price a campaign whose configuration says recovery.relaunch_below_rebuild = true",
                r.id, new.relaunch_s, new.rebuild_s
            )));
        }
        if !pairs.contains(&(recorded, new)) {
            pairs.push((recorded, new));
        }
        out.push(reprice_row(r, recorded, new)?);
    }
    Ok((out, pairs))
}

/// `priced.csv`: each run of `recorded` beside itself in `priced` (the same order).
pub(crate) fn priced_csv(recorded: &[Row], priced: &[Row]) -> Result<String> {
    let lines = recorded.iter().zip(priced).map(|(a, b)| {
        let row = crate::rows::PricedRow {
            id: a.id.clone(),
            recorded_sim_s: a.metrics.sim_s,
            sim_s: b.metrics.sim_s,
            recorded_sim_overhead_frac: a.metrics.sim_overhead,
            sim_overhead_frac: b.metrics.sim_overhead,
        };
        (Vec::new(), row)
    });
    crate::rows::table::<crate::rows::PricedRow, _>(&[], lines)
}

/// `report.md`'s paragraph on the prices: what `--set` changed, the recorded constants and
/// the ones used, and what stays at the recorded ones.
pub fn markdown(set: &Overrides, pairs: &[PricePair]) -> String {
    let mut md = format!(
        "\n## Re-priced\n\nEvery run's simulated time is re-priced from its recorded events at {} (`resilab report --set`): `sim_s` plus, per constant, its change times the times the run paid it (`detect_charges`, `rebuilds`, `relaunches` in `runs.csv`); no run was trained again. Exact: these constants decide no event (faults and checkpoints come by step). The overheads in simulated time, and every choice made from them, follow the new prices; `runs.csv` keeps the recorded ones; `priced.csv` gives each run's simulated seconds and overhead as recorded and re-priced. The time to the golden run's accuracy and the accuracy-against-time plots stay at the recorded constants.\n\n",
        set.describe()
    );
    let _ = writeln!(md, "| recorded: detect_timeout_s | rebuild_s | relaunch_s | used: detect_timeout_s | rebuild_s | relaunch_s |");
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (a, b) in pairs {
        let [a, b] = [a.values(), b.values()];
        let _ = writeln!(md, "| {} | {} | {} | {} | {} | {} |", a[0], a[1], a[2], b[0], b[1], b[2]);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Prices = Prices { detect_timeout_s: 10.0, rebuild_s: 30.0, relaunch_s: 300.0 };

    #[test]
    fn a_run_repriced_pays_each_changed_constant_per_event() {
        let c = Charges { detect: 3, rebuilds: 5, relaunches: 2 };
        let new = Prices { detect_timeout_s: 1.0, rebuild_s: 60.0, relaunch_s: 1_000.0 };
        // 3 x -9 + 5 x 30 + 2 x 700.
        assert_eq!(repriced_s(1_000.0, c, AT, new), 1_000.0 - 27.0 + 150.0 + 1_400.0);
        assert_eq!(repriced_s(1_000.0, c, AT, AT), 1_000.0, "the same prices change nothing");
        assert_eq!(repriced_overhead(0.5, 1_500.0, 1_600.0, 1_000.0), 0.6);
        assert_eq!(repriced_overhead(0.1 + 0.2, 1_500.0, 1_500.0, 1_000.0), 0.1 + 0.2, "unchanged to the bit");
    }

    #[test]
    fn only_the_three_recovery_constants_are_accepted() {
        let set = Overrides::parse(&["recovery.relaunch_s=900".into(), "recovery.detect_timeout_s = 2".into()]).unwrap();
        assert_eq!(set.apply(AT), Prices { detect_timeout_s: 2.0, rebuild_s: 30.0, relaunch_s: 900.0 });
        let e = Overrides::parse(&["checkpoint.every_steps=4".into()]).unwrap_err().to_string();
        assert!(e.contains("--set checkpoint.every_steps") && e.contains("recovery.relaunch_s"), "{e}");
        for bad in ["recovery.rebuild_s=-1", "recovery.rebuild_s=inf", "recovery.rebuild_s=x", "recovery.rebuild_s"] {
            assert!(Overrides::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_row_without_a_count_is_repriced_only_where_that_constant_stays() {
        let status = resilab_campaign::Status::Ok;
        let mut row = Row {
            id: "r1".into(),
            index: 0,
            coords: Default::default(),
            seed: 0,
            rep: 0,
            status,
            message: None,
            metrics: Default::default(),
        };
        row.metrics.sim_s = Some(100.0);
        row.metrics.golden_sim_s = Some(80.0);
        row.metrics.sim_overhead = Some(0.25);
        row.metrics.relaunches = Some(1);
        let relaunch = Prices { relaunch_s: 340.0, ..AT };
        let e = reprice_row(&row, AT, Prices { rebuild_s: 31.0, ..AT }).unwrap_err().to_string();
        assert!(e.contains("run r1") && e.contains("`rebuilds`"), "{e}");
        let priced = reprice_row(&row, AT, relaunch).unwrap();
        assert_eq!((priced.metrics.sim_s, priced.metrics.sim_overhead), (Some(140.0), Some(0.75)));
        // A failed run has no overhead, re-priced or not.
        row.metrics.sim_overhead = None;
        assert_eq!(reprice_row(&row, AT, relaunch).unwrap().metrics.sim_overhead, None);
    }
}
