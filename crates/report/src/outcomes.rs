//! The outcome classes of a `train` campaign's runs per cell (docs/metrics.md, "Outcome
//! classes"): each class's count with its exact (Clopper–Pearson) 95% interval in
//! `outcomes.csv`, one line per cell and class, and the counts in `cells.csv`'s `outcomes`.

use std::collections::BTreeMap;

use crate::Cell;
use crate::error::Result;
use crate::rows::{OutcomeRow, ordered_outcomes};

/// `report.md`'s rule of the `outcomes` column.
pub(crate) const RULE: &str = "**Outcomes**: each run's class, from its training curve against its golden run's after the first fault (the classes of He et al., ISCA 2023, with resilab's thresholds, `[outcome]`; docs/metrics.md, \"Outcome classes\"): `no fault`; `masked` (final accuracy within `outcome.masked_points` of the golden run's, no NaN/Inf); `immediate nan` (a NaN/Inf loss within `outcome.immediate_steps` of the fault, never cleared); `sharp degrade` / `sharp slow degrade` (training accuracy `outcome.sharp_points` behind at once, then held there / falling further or to a NaN); `slow degrade` (falling behind gradually, or a NaN later); `low test acc` (training back on course, test accuracy low); `failed` (the strategy gave up). `outcomes.csv` gives each class's share of a cell with its exact (Clopper–Pearson) 95% interval.\n\n";

/// `outcomes.csv`: for every cell, a line per class any run of the campaign has (a class
/// absent from a cell is a 0 with its upper bound); `None` when no run has a class.
pub(crate) fn csv(axes: &[String], cells: &[Cell]) -> Result<Option<String>> {
    let mut seen = BTreeMap::new();
    for c in cells {
        seen.extend(c.outcomes.keys().map(|k| (k.clone(), 0u64)));
    }
    if seen.is_empty() {
        return Ok(None);
    }
    let classes: Vec<&str> = ordered_outcomes(&seen).map(|(name, _)| name).collect();
    let mut lines = Vec::new();
    for c in cells {
        let values: Vec<String> = axes.iter().map(|a| c.coords.get(a).cloned().unwrap_or_default()).collect();
        let runs: u64 = c.outcomes.values().sum();
        for name in &classes {
            let count = c.outcomes.get(*name).copied().unwrap_or(0);
            let ci = crate::stats::clopper_pearson(count, runs);
            let pct = (runs > 0).then(|| 100.0 * count as f64 / runs as f64);
            let row = OutcomeRow {
                outcome: name.to_string(),
                runs,
                count,
                count_pct: pct,
                lo_pct: ci.map(|c| 100.0 * c.0),
                hi_pct: ci.map(|c| 100.0 * c.1),
            };
            lines.push((values.clone(), row));
        }
    }
    crate::rows::table::<OutcomeRow, _>(axes, lines).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{outcome_summary, outcomes_md};

    #[test]
    fn counts_read_in_the_classes_order_and_each_share_has_its_exact_interval() {
        let counts = BTreeMap::from([("sharp_degrade".to_string(), 2), ("masked".to_string(), 28), ("new_class".to_string(), 1)]);
        assert_eq!(outcome_summary(&counts), "masked:28;sharp_degrade:2;new_class:1");
        assert_eq!(outcomes_md("masked:28;sharp_degrade:2"), "masked 28, sharp degrade 2");
        let cell = Cell { coords: [("fault".to_string(), "a".to_string())].into(), outcomes: counts, ..Cell::default() };
        let empty = Cell { coords: [("fault".to_string(), "b".to_string())].into(), ..Cell::default() };
        let text = csv(&["fault".to_string()], &[cell, empty]).unwrap().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "fault,outcome,runs,count,count_pct,lo_pct,hi_pct");
        // 28 of 31: Clopper–Pearson [74.25, 97.96].
        assert_eq!(lines[1], "a,masked,31,28,90.32,74.25,97.96");
        assert_eq!(lines[2], "a,sharp_degrade,31,2,6.45,0.79,21.42");
        // A cell without classes has every line, with no share.
        assert_eq!(lines[4], "b,masked,0,0,,,");
        assert_eq!(lines.len(), 7);
        assert!(csv(&[], &[Cell::default()]).unwrap().is_none());
    }
}
