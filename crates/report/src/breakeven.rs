//! `break_even.csv`: in a `train` study, the value of each recovery constant at which two
//! options' mean overheads in simulated time would be equal, the other constants held, read
//! from the runs' own events. A run's simulated seconds are a line in each constant (its count
//! of that event times the constant, [`crate::price`]), so its overhead is one too, and so is an
//! option's mean over its runs that completed: two such lines cross once, where they are not
//! parallel. This is the break-even of the runs themselves, to set beside the one `resilab
//! project` reads from its cost model; `report --set KEY=VALUE` at it gives the two options the
//! same mean overhead.

use std::collections::BTreeMap;

use resilab_campaign::Row;

use crate::measures::overhead_pct;
use crate::price::{KEYS, Prices};
use crate::rows::BreakEven;
use crate::study::Groups;

/// An option's mean overhead (%) at the priced constant and its change per second of the
/// constant `key` (an index of [`KEYS`]), over its runs that completed and hold the count; `None`
/// without such runs.
fn line(rows: &[&Row], key: usize) -> Option<(f64, f64)> {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            let m = &r.metrics;
            let count = [m.detect_charges, m.rebuilds, m.relaunches][key]? as f64;
            let golden = m.golden_sim_s.filter(|g| *g > 0.0)?;
            Some((overhead_pct(r)?, 100.0 * count / golden))
        })
        .collect();
    let n = points.len() as f64;
    (n > 0.0).then(|| (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n))
}

/// Where `a`'s and `b`'s lines cross, priced at `x0`: `(break-even, cheaper below, cheaper
/// above)`.
fn crossing(x0: f64, (oa, sa): (f64, f64), (ob, sb): (f64, f64), a: &str, b: &str) -> (Option<f64>, String, String) {
    let lower_now = if oa <= ob { a } else { b };
    if sa == sb {
        return (None, lower_now.into(), lower_now.into());
    }
    let x = x0 + (ob - oa) / (sa - sb);
    // Below the crossing the steeper line is the lower one.
    let (steep, flat) = if sa > sb { (a, b) } else { (b, a) };
    if x.is_finite() && x >= 0.0 { (Some(x), steep.into(), flat.into()) } else { (None, flat.into(), flat.into()) }
}

/// The rows of `break_even.csv` for the study's `groups`, each run priced as `prices` says (by
/// grid index); a condition whose runs are priced differently is left out.
pub(crate) fn rows(groups: &Groups<'_>, prices: &BTreeMap<u64, Prices>) -> Vec<BreakEven> {
    let mut out = Vec::new();
    for (condition, options) in groups {
        let priced: Vec<Prices> = options.iter().flat_map(|(_, rs)| rs.iter().filter_map(|r| prices.get(&r.index).copied())).collect();
        let Some(first) = priced.first().copied() else { continue };
        if priced.iter().any(|p| *p != first) {
            continue;
        }
        let x0 = [first.detect_timeout_s, first.rebuild_s, first.relaunch_s];
        for (key, name) in KEYS.iter().enumerate() {
            let lines: Vec<(&String, (f64, f64))> = options.iter().filter_map(|(o, rs)| Some((o, line(rs, key)?))).collect();
            for (i, (a, la)) in lines.iter().enumerate() {
                for (b, lb) in &lines[i + 1..] {
                    let (break_even_s, cheaper_below, cheaper_above) = crossing(x0[key], *la, *lb, a, b);
                    out.push(BreakEven {
                        condition: condition.clone(),
                        key: (*name).into(),
                        a: (*a).clone(),
                        b: (*b).clone(),
                        priced_s: Some(x0[key]),
                        break_even_s,
                        cheaper_below,
                        cheaper_above,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cross_where_the_steeper_one_stops_being_cheaper() {
        // a: 100% + 10%/s, b: 40% + 30%/s, priced at 2 s: equal at 2 + 60/20 = 5 s.
        assert_eq!(crossing(2.0, (100.0, 10.0), (40.0, 30.0), "a", "b"), (Some(5.0), "b".into(), "a".into()));
        // Crossing below 0: the flatter one is cheaper everywhere from 0.
        assert_eq!(crossing(2.0, (40.0, 10.0), (100.0, 30.0), "a", "b"), (None, "a".into(), "a".into()));
        // Parallel: the constant moves both alike.
        assert_eq!(crossing(2.0, (40.0, 10.0), (100.0, 10.0), "a", "b"), (None, "a".into(), "a".into()));
    }
}
