//! Numbers, labels and points as the report's files and plots show them.

use std::collections::BTreeMap;

use crate::metrics::Share;
use crate::plots::Interval;

/// `v` with `digits` decimals; empty when absent or not finite.
pub(crate) fn f(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite()).map_or(String::new(), |v| format!("{v:.digits$}"))
}

pub(crate) fn label(coords: &BTreeMap<String, String>, skip: &[&str]) -> String {
    let parts: Vec<String> = coords.iter().filter(|(k, _)| !skip.contains(&k.as_str())).map(|(k, v)| format!("{}={v}", short(k))).collect();
    if parts.is_empty() { "all".into() } else { parts.join(", ") }
}

/// An axis key as a plot label shows it: its last component (`recovery.strategy` ->
/// `strategy`), or the whole key where that is a number (`fault.0`).
pub(crate) fn short(key: &str) -> &str {
    match key.rsplit_once('.') {
        Some((_, tail)) if tail.parse::<u64>().is_err() => tail,
        _ => key,
    }
}

/// The one entry of a `;`-separated list column (`bits`, `words`, `layers`); `None` when it is
/// empty or lists several.
pub(crate) fn single(list: Option<&str>) -> Option<&str> {
    list.filter(|l| !l.is_empty() && !l.contains(';'))
}

/// A share's point and interval for a plot: `(y, Some((low, high)))`, percent.
pub(crate) fn share_point(s: &Share) -> (f64, Interval) {
    (s.pct, Some((s.lo_pct, s.hi_pct)))
}

/// Parses a cell value as a number for an x axis.
pub(crate) fn num(s: &str) -> Option<f64> {
    s.parse().ok()
}
