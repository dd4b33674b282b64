//! Comparison of two HDF5 files dataset by dataset: what the published injector's comparator
//! reports (differing values, their share, Euclidean distance, relative change), plus the bit
//! positions that differ and NaN/Inf counts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use resilab_h5::{DatasetInfo, Reader};
use serde::Serialize;

use crate::Result;
use crate::model;

/// How one dataset differs between two files.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DatasetDiff {
    /// Dataset path.
    pub path: String,
    /// Element type.
    pub dtype: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements whose stored bits differ.
    pub differ: u64,
    /// `differ * 100 / elements`.
    pub share_percent: f64,
    /// Euclidean distance over the elements where both values are finite.
    pub euclidean: f64,
    /// Largest |b - a| over elements where both are finite.
    pub max_abs: f64,
    /// Largest |b - a| / |a| over elements where both are finite (infinite where a is zero
    /// and b is not; written `inf`).
    #[serde(serialize_with = "finite_or_text")]
    pub max_rel: f64,
    /// How often each stored bit differs, IEEE numbering (0 = least significant).
    pub bits_ieee: BTreeMap<u32, u64>,
    /// The same counts in reference numbering (0 = sign / leftmost bit of the stored word).
    pub bits_reference: BTreeMap<u32, u64>,
    /// NaN count in file A.
    pub nan_a: u64,
    /// NaN count in file B.
    pub nan_b: u64,
    /// ±Inf count in file A.
    pub inf_a: u64,
    /// ±Inf count in file B.
    pub inf_b: u64,
}

/// How two files differ.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileDiff {
    /// File A.
    pub a: String,
    /// File B.
    pub b: String,
    /// Number datasets present in both with the same shape and type, in path order.
    pub datasets: Vec<DatasetDiff>,
    /// Datasets only in A.
    pub only_in_a: Vec<String>,
    /// Datasets only in B.
    pub only_in_b: Vec<String>,
    /// Datasets in both whose shape or type differ, or that are not numbers, with the reason.
    pub not_compared: Vec<(String, String)>,
    /// Elements compared in all.
    pub elements: u64,
    /// Elements that differ in all.
    pub differ: u64,
    /// What the injection log beside B (`inject`'s default log of B) says, when it records
    /// corrupting A into B.
    pub log: Option<LogCheck>,
}

/// The injection log that wrote file B, set against the differences: flips that hit one element
/// twice can put its bits back, so fewer elements differ than values were corrupted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogCheck {
    /// The log read.
    pub log: String,
    /// Attempts that corrupted a value.
    pub corrupted: u64,
    /// Distinct elements those attempts hit.
    pub elements: u64,
    /// Elements hit that are equal to A again (their flips cancelled): `elements - differ`.
    pub restored: u64,
}

/// Reads `inject`'s default log of `b` when it records corrupting `a` into `b`.
fn log_check(a: &Path, b: &Path, differ: u64) -> Option<LogCheck> {
    let log = crate::default_log(b);
    let lines = crate::read_log(&log).ok()?;
    let header = crate::log_header(&lines)?;
    let (input, output) = (Path::new(&header.input), Path::new(&header.output));
    if !crate::same_file(input, a) || !crate::same_file(output, b) {
        return None;
    }
    let hits: Vec<(&str, usize)> = lines
        .iter()
        .filter_map(|l| match l {
            crate::LogLine::Attempt(r) if r.outcome == crate::Outcome::Corrupted => Some((r.dataset.as_str(), r.index)),
            _ => None,
        })
        .collect();
    let elements = hits.iter().collect::<std::collections::BTreeSet<_>>().len() as u64;
    Some(LogCheck { log: log.display().to_string(), corrupted: hits.len() as u64, elements, restored: elements.saturating_sub(differ) })
}

fn compare(ra: &Reader, rb: &Reader, d: &DatasetInfo) -> Result<DatasetDiff> {
    let a = ra.read_column(&d.path, d.dtype)?;
    let b = rb.read_column(&d.path, d.dtype)?;
    let width = d.dtype.bits();
    let mut out = DatasetDiff {
        path: d.path.clone(),
        dtype: d.dtype.to_string(),
        elements: a.len() as u64,
        differ: 0,
        share_percent: 0.0,
        euclidean: 0.0,
        max_abs: 0.0,
        max_rel: 0.0,
        bits_ieee: BTreeMap::new(),
        bits_reference: BTreeMap::new(),
        nan_a: 0,
        nan_b: 0,
        inf_a: 0,
        inf_b: 0,
    };
    let mut sq = 0.0;
    for (x, y) in a.iter().zip(b.iter()) {
        let (va, vb) = (model::value_of(d.dtype, x), model::value_of(d.dtype, y));
        out.nan_a += u64::from(va.is_nan());
        out.nan_b += u64::from(vb.is_nan());
        out.inf_a += u64::from(va.is_infinite());
        out.inf_b += u64::from(vb.is_infinite());
        if x == y {
            continue;
        }
        out.differ += 1;
        for bit in model::bit_list(x ^ y) {
            *out.bits_ieee.entry(bit).or_default() += 1;
            *out.bits_reference.entry(width - 1 - bit).or_default() += 1;
        }
        if va.is_finite() && vb.is_finite() {
            let delta = (vb - va).abs();
            sq += delta * delta;
            out.max_abs = out.max_abs.max(delta);
            let rel = if va != 0.0 { delta / va.abs() } else { f64::INFINITY };
            out.max_rel = out.max_rel.max(rel);
        }
    }
    out.euclidean = sq.sqrt();
    out.share_percent = if out.elements == 0 { 0.0 } else { out.differ as f64 * 100.0 / out.elements as f64 };
    Ok(out)
}

/// Compares every dataset of two files.
pub fn diff(a: &Path, b: &Path) -> Result<FileDiff> {
    let (ra, rb) = (Reader::open(a)?, Reader::open(b)?);
    let da: BTreeMap<String, DatasetInfo> = ra.datasets()?.into_iter().map(|d| (d.path.clone(), d)).collect();
    let db: BTreeMap<String, DatasetInfo> = rb.datasets()?.into_iter().map(|d| (d.path.clone(), d)).collect();
    let mut out = FileDiff {
        a: a.display().to_string(),
        b: b.display().to_string(),
        datasets: Vec::new(),
        only_in_a: da.keys().filter(|k| !db.contains_key(*k)).cloned().collect(),
        only_in_b: db.keys().filter(|k| !da.contains_key(*k)).cloned().collect(),
        not_compared: Vec::new(),
        elements: 0,
        differ: 0,
        log: None,
    };
    for (path, x) in &da {
        let Some(y) = db.get(path) else { continue };
        if x.shape != y.shape || x.dtype != y.dtype {
            out.not_compared.push((path.clone(), format!("{} {:?} vs {} {:?}", x.dtype, x.shape, y.dtype, y.shape)));
            continue;
        }
        if !x.dtype.is_numeric() {
            out.not_compared.push((path.clone(), format!("type {} is not a number type", x.dtype)));
            continue;
        }
        let d = compare(&ra, &rb, x)?;
        out.elements += d.elements;
        out.differ += d.differ;
        out.datasets.push(d);
    }
    out.log = log_check(a, b, out.differ);
    Ok(out)
}

fn bits_text(bits: &BTreeMap<u32, u64>) -> String {
    let mut v: Vec<(u32, u64)> = bits.iter().map(|(b, n)| (*b, *n)).collect();
    v.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let mut s = v.iter().take(6).map(|(b, n)| format!("{b}x{n}")).collect::<Vec<_>>().join(" ");
    if v.len() > 6 {
        let _ = write!(s, " +{} more", v.len() - 6);
    }
    s
}

/// JSON has no infinity: an infinite relative change is written as the string `"inf"`.
fn finite_or_text<S: serde::Serializer>(x: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
    if x.is_finite() { s.serialize_f64(*x) } else { s.serialize_str(&rel_text(*x)) }
}

/// A relative change as printed: `inf` where A was zero.
fn rel_text(rel: f64) -> String {
    if rel.is_infinite() { "inf".to_string() } else { format!("{rel:.4e}") }
}

impl FileDiff {
    /// A plain-text table of the datasets that differ (all of them with `all`).
    pub fn table(&self, all: bool) -> String {
        let rows: Vec<&DatasetDiff> =
            self.datasets.iter().filter(|d| all || d.differ > 0 || d.nan_a != d.nan_b || d.inf_a != d.inf_b).collect();
        let w = rows.iter().map(|d| d.path.len()).max().unwrap_or(7).max(7);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<w$}  {:>5}  {:>10}  {:>8}  {:>8}  {:>11}  {:>11}  {:>9}  bits (reference numbering, 0 = sign: bit x count)",
            "dataset", "dtype", "elements", "differ", "share %", "max |abs|", "max rel", "nan/inf"
        );
        for d in &rows {
            let _ = writeln!(
                s,
                "{:<w$}  {:>5}  {:>10}  {:>8}  {:>8.4}  {:>11.4e}  {:>11}  {:>4}/{:<4}  {}",
                resilab_text::terminal(&d.path),
                d.dtype,
                d.elements,
                d.differ,
                d.share_percent,
                d.max_abs,
                rel_text(d.max_rel),
                d.nan_b,
                d.inf_b,
                bits_text(&d.bits_reference)
            );
        }
        let _ = writeln!(
            s,
            "{} of {} elements differ in {} of {} datasets",
            self.differ,
            self.elements,
            self.datasets.iter().filter(|d| d.differ > 0).count(),
            self.datasets.len()
        );
        if rows.iter().any(|d| d.max_rel > 1e30) {
            let _ = writeln!(s, "max rel is |b - a| / |a|: a flip of a float's top exponent bit multiplies it by up to 2^128 (3.4e38)");
        }
        if let Some(l) = &self.log {
            let _ = writeln!(
                s,
                "{}: {} value(s) corrupted at {} distinct element(s); {} of those are equal to A again (flips of the same bits cancelled)",
                l.log, l.corrupted, l.elements, l.restored
            );
        }
        for p in &self.only_in_a {
            let _ = writeln!(s, "only in {}: {}", self.a, resilab_text::terminal(p));
        }
        for p in &self.only_in_b {
            let _ = writeln!(s, "only in {}: {}", self.b, resilab_text::terminal(p));
        }
        for (p, why) in &self.not_compared {
            let _ = writeln!(s, "not compared: {} ({why})", resilab_text::terminal(p));
        }
        s
    }
}
