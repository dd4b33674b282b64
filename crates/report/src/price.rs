//! Re-pricing a `train` campaign's runs at other recovery constants (`resilab report DIR
//! --set recovery.relaunch_s=V`), from the events each run paid for.
//!
//! A run's simulated seconds charge `recovery.detect_timeout_s` `detect_charges` times,
//! `recovery.rebuild_s` `rebuilds` times and `recovery.relaunch_s` `relaunches` times beyond its
//! step timelines, and the checkpoint reads and recomputed steps after its relaunches
//! (`relaunch_redo_s`) unless the relaunch's figure covers them (`recovery.relaunch_covers_redo`).
//! `--price PROFILE` puts in a cost profile's constants and its covering, scaled by
//! `--price-scale` (or each run's own `recovery.profile_scale`); `--set` then overrides one
//! constant at a time. None of the three decides an event: faults arrive by step, checkpoints are
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
use resilab_recovery::profile::{self, Profile};

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
    /// `recovery.relaunch_covers_redo`: the relaunch's figure covers the checkpoint read and
    /// the recomputed steps after it.
    pub covers_redo: bool,
}

impl Prices {
    /// The constants of a run's configuration.
    pub fn of(r: &resilab_runner::RecoveryConfig) -> Self {
        Self { detect_timeout_s: r.detect_timeout_s, rebuild_s: r.rebuild_s, relaunch_s: r.relaunch_s, covers_redo: r.relaunch_covers_redo }
    }

    /// A profile's constants, each times `scale`.
    fn of_profile(p: &Profile, scale: f64) -> Self {
        let [detect_timeout_s, rebuild_s, relaunch_s] = p.scaled(scale);
        Self { detect_timeout_s, rebuild_s, relaunch_s, covers_redo: p.relaunch_covers_redo }
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
    /// Simulated seconds of the reads and recomputed steps after relaunches (`relaunch_redo_s`).
    pub relaunch_redo_s: f64,
}

/// The constants `--price` and `--set` change; the others stay each run's own.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// Per key of [`KEYS`], its new value.
    values: [Option<f64>; 3],
    /// `--price`: the profile, and `--price-scale` (else each run's `recovery.profile_scale`).
    profile: Option<(&'static Profile, Option<f64>)>,
    /// `--at-jobs`: the jobs a study's table is priced at, instead of its `[[campaign.job]]`.
    jobs: Option<Vec<resilab_recovery::job::Job>>,
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
        Ok(Self { values, profile: None, jobs: None })
    }

    /// With `--price NAME` (a cost profile, docs/recovery.md) and `--price-scale S` (simulated
    /// seconds per second of the profile; without it, each run's `recovery.profile_scale`).
    pub fn with_profile(mut self, name: &str, scale: Option<f64>) -> Result<Self> {
        let p = profile::profile(name)
            .ok_or_else(|| Error::Price(format!("--price {name}: not a cost profile; the profiles are {}", profile::names())))?;
        if let Some(s) = scale.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::Price(format!(
                "--price-scale {s}: expected a finite number above 0 (simulated seconds per second of the profile)"
            )));
        }
        self.profile = Some((p, scale));
        Ok(self)
    }

    /// With `--at-jobs`: the jobs to price a study's table at.
    pub fn with_jobs(mut self, jobs: Vec<resilab_recovery::job::Job>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// `--at-jobs`' jobs, if given.
    pub fn jobs(&self) -> Option<&[resilab_recovery::job::Job]> {
        self.jobs.as_deref()
    }

    /// `--price`'s profile, if given.
    pub fn profile(&self) -> Option<&'static Profile> {
        self.profile.map(|(p, _)| p)
    }

    /// Whether no constant is changed.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none) && self.profile.is_none()
    }

    /// `recorded` (a run whose profile scale is `run_scale`) with the profile's constants put
    /// in, then the `--set` ones. A profile needs a scale: `--price-scale` or the run's own.
    pub fn apply(&self, recorded: Prices, run_scale: Option<f64>) -> Result<Prices> {
        let base = match self.profile {
            None => recorded,
            Some((p, scale)) => {
                let scale = scale.or(run_scale).ok_or_else(|| {
                    Error::Price(format!(
                        "--price {}: the runs name no recovery.profile_scale, so give --price-scale (simulated seconds per second of the profile: the modelled step over the real job's)",
                        p.name
                    ))
                })?;
                Prices::of_profile(p, scale)
            }
        };
        let [d, b, l] = base.values();
        let pick = |i: usize, old: f64| self.values[i].unwrap_or(old);
        Ok(Prices { detect_timeout_s: pick(0, d), rebuild_s: pick(1, b), relaunch_s: pick(2, l), covers_redo: base.covers_redo })
    }

    /// The profile, then `key = value s` for each changed constant, joined by `, `.
    pub fn describe(&self) -> String {
        let profile = self.profile.map(|(p, s)| match s {
            Some(s) => format!("cost profile `{}` ({}) scaled by {s}", p.name, p.system),
            None => format!("cost profile `{}` ({}) scaled by each run's recovery.profile_scale", p.name, p.system),
        });
        let set = KEYS.iter().zip(&self.values).filter_map(|(k, v)| v.map(|v| format!("`{k}` = {v} s")));
        profile.into_iter().chain(set).collect::<Vec<_>>().join(", ")
    }
}

/// Simulated seconds of a run that paid `charges` at `recorded` and took `sim_s`, had it paid
/// them at `new`: `sim_s` plus each constant's change times its count, less the redo after
/// relaunches where the new relaunch covers it and the recorded one did not (plus it the other
/// way round).
pub fn repriced_s(sim_s: f64, charges: Charges, recorded: Prices, new: Prices) -> f64 {
    let counts = [charges.detect, charges.rebuilds, charges.relaunches];
    let delta: f64 = counts.iter().zip(new.values().iter().zip(recorded.values())).map(|(&n, (&b, a))| n as f64 * (b - a)).sum();
    let redo = match (recorded.covers_redo, new.covers_redo) {
        (false, true) => -charges.relaunch_redo_s,
        (true, false) => charges.relaunch_redo_s,
        _ => 0.0,
    };
    sim_s + delta + redo
}

/// The overhead in simulated time (a fraction) of a run recorded at `recorded` over `sim_s`
/// seconds, re-priced to `new_s`, against its golden run's `golden_s` (which pays none of the
/// constants): the recorded overhead plus the change over `golden_s`, and at unchanged prices
/// the recorded overhead to the bit.
pub fn repriced_overhead(recorded: f64, sim_s: f64, new_s: f64, golden_s: f64) -> f64 {
    if new_s == sim_s { recorded } else { recorded + (new_s - sim_s) / golden_s }
}

/// The count `column` of a run, `needed` when its constant changed (or, for relaunches, the
/// covering of the redo): an error naming the column when the run was recorded before it.
fn count(r: &Row, column: &str, value: Option<u64>, needed: bool) -> Result<u64> {
    match value {
        Some(v) => Ok(v),
        None if !needed => Ok(0),
        None => Err(missing(r, column)),
    }
}

fn missing(r: &Row, column: &str) -> Error {
    Error::Price(format!(
        "run {}: its record has no `{column}` (recorded before the counts of priced events): it cannot be re-priced at a changed constant; rerun the campaign",
        r.id
    ))
}

/// `row` re-priced from `recorded` to `new`: its `sim_s` and its `sim_overhead` (kept empty
/// where it was: a failed run's). Rows without simulated time (an error) are returned as they
/// are.
pub fn reprice_row(row: &Row, recorded: Prices, new: Prices) -> Result<Row> {
    let mut out = row.clone();
    let Some(sim_s) = row.metrics.sim_s else { return Ok(out) };
    let m = &row.metrics;
    let [dd, db, dl] = [0, 1, 2].map(|i| new.values()[i] - recorded.values()[i]);
    let covering_changed = recorded.covers_redo != new.covers_redo;
    let relaunches = count(row, "relaunches", m.relaunches, dl != 0.0 || covering_changed)?;
    let relaunch_redo_s = match m.relaunch_redo_s {
        Some(s) => s,
        None if !covering_changed || relaunches == 0 => 0.0,
        None => return Err(missing(row, "relaunch_redo_s")),
    };
    let charges = Charges {
        detect: count(row, "detect_charges", m.detect_charges, dd != 0.0)?,
        rebuilds: count(row, "rebuilds", m.rebuilds, db != 0.0)?,
        relaunches,
        relaunch_redo_s,
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

/// A campaign's runs re-priced: the rows, the distinct pairs of constants, and each run's new
/// constants by grid index.
pub type Repriced = (Vec<Row>, Vec<PricePair>, std::collections::BTreeMap<u64, Prices>);

/// The runs of a campaign re-priced at `set`: each run's recorded constants from its own
/// configuration (the base's, or its grid point's), the changed ones from `set`. Refused for a
/// campaign that is not `train`, and where the new pair puts a relaunch below a rebuild without
/// the run's `recovery.relaunch_below_rebuild`.
pub fn reprice(campaign: &Campaign, rows: &[Row], set: &Overrides) -> Result<Repriced> {
    if campaign.settings.kind != Kind::Train {
        return Err(Error::Price(format!(
            "--set re-prices the recovery constants of `train` campaigns; this campaign is `{}`",
            campaign.settings.kind.name()
        )));
    }
    let mut pairs: Vec<PricePair> = Vec::new();
    let mut in_use = std::collections::BTreeMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let cfg = campaign.run(r.index)?.config;
        let recorded = Prices::of(&cfg.recovery);
        let new = set.apply(recorded, cfg.recovery.profile_scale)?;
        if new.relaunch_s < new.rebuild_s && !cfg.recovery.relaunch_below_rebuild {
            return Err(Error::Price(format!(
                "run {}: recovery.relaunch_s = {} s would be below recovery.rebuild_s = {} s: a relaunch contains the new job's communicator initialisation; set both, or re-price a campaign whose configuration says recovery.relaunch_below_rebuild = true",
                r.id, new.relaunch_s, new.rebuild_s
            )));
        }
        if !pairs.contains(&(recorded, new)) {
            pairs.push((recorded, new));
        }
        in_use.insert(r.index, new);
        out.push(reprice_row(r, recorded, new)?);
    }
    Ok((out, pairs, in_use))
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
        "\n## Re-priced\n\nEvery run's simulated time is re-priced from its recorded events at {} (`resilab report --set`): `sim_s` plus, per constant, its change times the times the run paid it (`detect_charges`, `rebuilds`, `relaunches` in `runs.csv`), less (or plus) the checkpoint reads and recomputed steps after relaunches (`relaunch_redo_s`) where the new relaunch covers them and the recorded one did not (or the other way round); no run was trained again. Exact: these constants decide no event (faults and checkpoints come by step). The overheads in simulated time, and every choice made from them, follow the new prices; `runs.csv` keeps the recorded ones; `priced.csv` gives each run's simulated seconds and overhead as recorded and re-priced. The time to the golden run's accuracy and the accuracy-against-time plots stay at the recorded constants.\n\n",
        set.describe()
    );
    let _ = writeln!(
        md,
        "| recorded: detect_timeout_s | rebuild_s | relaunch_s | relaunch covers redo | used: detect_timeout_s | rebuild_s | relaunch_s | relaunch covers redo |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    let yes = |b: bool| if b { "yes" } else { "no" };
    for (a, b) in pairs {
        let [x, y] = [a.values(), b.values()];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            x[0],
            x[1],
            x[2],
            yes(a.covers_redo),
            y[0],
            y[1],
            y[2],
            yes(b.covers_redo)
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Prices = Prices { detect_timeout_s: 10.0, rebuild_s: 30.0, relaunch_s: 300.0, covers_redo: false };

    #[test]
    fn a_run_repriced_pays_each_changed_constant_per_event() {
        let c = Charges { detect: 3, rebuilds: 5, relaunches: 2, relaunch_redo_s: 40.0 };
        let new = Prices { detect_timeout_s: 1.0, rebuild_s: 60.0, relaunch_s: 1_000.0, covers_redo: false };
        // 3 x -9 + 5 x 30 + 2 x 700.
        assert_eq!(repriced_s(1_000.0, c, AT, new), 1_000.0 - 27.0 + 150.0 + 1_400.0);
        assert_eq!(repriced_s(1_000.0, c, AT, AT), 1_000.0, "the same prices change nothing");
        let covering = Prices { covers_redo: true, ..AT };
        assert_eq!(repriced_s(1_000.0, c, AT, covering), 960.0, "a relaunch that covers the redo takes it off");
        assert_eq!(repriced_s(960.0, c, covering, AT), 1_000.0, "and back");
        assert_eq!(repriced_overhead(0.5, 1_500.0, 1_600.0, 1_000.0), 0.6);
        assert_eq!(repriced_overhead(0.1 + 0.2, 1_500.0, 1_500.0, 1_000.0), 0.1 + 0.2, "unchanged to the bit");
    }

    #[test]
    fn only_the_three_recovery_constants_are_accepted() {
        let set = Overrides::parse(&["recovery.relaunch_s=900".into(), "recovery.detect_timeout_s = 2".into()]).unwrap();
        assert_eq!(set.apply(AT, None).unwrap(), Prices { detect_timeout_s: 2.0, rebuild_s: 30.0, relaunch_s: 900.0, covers_redo: false });
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
        // A relaunch 1 s cheaper that now covers the redo still needs the relaunches counted.
        let mut uncounted = row.clone();
        uncounted.metrics.relaunches = None;
        let covering = Prices { relaunch_s: 299.0, covers_redo: true, ..AT };
        let e = reprice_row(&uncounted, AT, covering).unwrap_err().to_string();
        assert!(e.contains("`relaunches`"), "{e}");
        // A failed run has no overhead, re-priced or not.
        row.metrics.sim_overhead = None;
        assert_eq!(reprice_row(&row, AT, relaunch).unwrap().metrics.sim_overhead, None);
    }

    #[test]
    fn a_profile_prices_every_constant_then_set_overrides_one() {
        let set = Overrides::parse(&["recovery.rebuild_s=2".into()]).unwrap().with_profile("megascale-unoptimised", Some(0.001)).unwrap();
        let p = set.apply(AT, None).unwrap();
        assert!((p.detect_timeout_s - 0.6).abs() < 1e-12 && (p.relaunch_s - 1.917).abs() < 1e-12, "{p:?}");
        assert_eq!((p.rebuild_s, p.covers_redo), (2.0, true));
        assert!(set.describe().starts_with("cost profile `megascale-unoptimised`"), "{}", set.describe());
        let unscaled = Overrides::default().with_profile("megascale-optimised", None).unwrap();
        let e = unscaled.apply(AT, None).unwrap_err().to_string();
        assert!(e.contains("--price-scale"), "{e}");
        assert_eq!(unscaled.apply(AT, Some(1.0)).unwrap().rebuild_s, 30.0, "the run's own scale");
        assert!(Overrides::default().with_profile("megascale", None).unwrap_err().to_string().contains("megascale-optimised"));
        assert!(Overrides::default().with_profile("megascale-optimised", Some(0.0)).is_err());
    }
}
