//! Attempts: where they land, what they do, and the record each leaves.
//!
//! Drawing is split from applying. [`draw`] picks, for every attempt, a tensor, an element and
//! whether the attempt corrupts (probability `p`) from one ChaCha8 stream of the seed, without
//! looking at any value; [`apply_attempts`] then corrupts the selected values in attempt order
//! (two attempts on one element compose), drawing bits from a ChaCha8 stream of its own per
//! attempt. So a seed fixes the locations whatever the values, and the same seed on the same
//! values gives the same bits.

use rustc_hash::FxHashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use resilab_h5::Dtype;
use serde::{Deserialize, Serialize};

use crate::model::{self, FaultModel, Flip};

/// Current stored bits of drawn elements, by `(target, flat index)`.
pub type Values = FxHashMap<(usize, usize), u64>;

/// How an attempt picks its element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// A tensor uniformly, then an element of it uniformly (the reference; favours small tensors).
    #[default]
    PerTensor,
    /// An element uniformly among all elements of all candidate tensors.
    PerElement,
}

impl Sampling {
    /// The config and log name: `per_tensor` or `per_element`.
    pub fn name(self) -> &'static str {
        match self {
            Sampling::PerTensor => "per_tensor",
            Sampling::PerElement => "per_element",
        }
    }
}

/// A tensor that attempts may hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its path (`/model/fc/weight`) or name.
    pub path: String,
    /// Element type.
    pub dtype: Dtype,
    /// Number of elements (more than zero).
    pub len: usize,
}

/// Everything that decides a run of attempts, given a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// How a selected value is corrupted.
    pub model: FaultModel,
    /// Probability that an attempt corrupts its value.
    pub probability: f64,
    /// Number of attempts.
    pub attempts: u64,
    /// How attempts pick elements.
    pub sampling: Sampling,
}

/// Where one attempt landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    /// Attempt number, from 0.
    pub attempt: u64,
    /// Index into the targets.
    pub target: usize,
    /// Flat (row-major) element index.
    pub index: usize,
    /// Whether the probability draw selected it for corruption.
    pub selected: bool,
}

/// The fate of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The value was corrupted.
    Corrupted,
    /// The probability draw passed it over (the reference's "did not corrupt").
    NotSelected,
    /// Every draw gave NaN/Inf (with `allow_NaN_values = false`) or a value the type cannot hold.
    Rejected,
}

/// A float that JSON can carry: finite values as numbers, others as `"nan"`, `"inf"`, `"-inf"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num(pub f64);

impl Serialize for Num {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            x if x.is_nan() => s.serialize_str("nan"),
            x if x.is_infinite() => s.serialize_str(if x > 0.0 { "inf" } else { "-inf" }),
            x => s.serialize_f64(x),
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        Ok(Num(match Raw::deserialize(d)? {
            Raw::N(x) => x,
            Raw::S(s) => match s.as_str() {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                _ => f64::NAN,
            },
        }))
    }
}

/// Hex form of a raw bit pattern, as in the logs (`0x3f800000`).
pub fn hex(raw: u64, dtype: Dtype) -> String {
    format!("0x{raw:0width$x}", width = (dtype.bits() as usize).div_ceil(4).max(1))
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// One attempt, as logged (one JSON line each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Attempt number, from 0.
    pub attempt: u64,
    /// Dataset path or tensor name.
    pub dataset: String,
    /// Flat row-major element index.
    pub index: usize,
    /// Stored element type (`f32`, `i64`, ...).
    pub dtype: String,
    /// What happened.
    pub outcome: Outcome,
    /// Width of the word the bits refer to: the fault model's precision for floats, the length
    /// of `|v|`'s binary form for integers; `null` for scaling or when not selected.
    pub precision: Option<u32>,
    /// Flipped bits, reference numbering (0 = sign / leftmost).
    pub bits_reference: Vec<u32>,
    /// The same bits, IEEE numbering (0 = least significant) of the `precision`-bit word.
    pub bits_ieee: Vec<u32>,
    /// Scaling factor, scaling mode only.
    pub scale: Option<f64>,
    /// Bits that differ between the old and new stored words, IEEE numbering of the stored type.
    pub stored_bits_changed: Vec<u32>,
    /// Value before.
    pub old: Num,
    /// Value after (equal to `old` unless corrupted).
    pub new: Num,
    /// Stored bits before, hex.
    pub old_bits: String,
    /// Stored bits after, hex.
    pub new_bits: String,
    /// Whether the new value is NaN.
    pub nan: bool,
    /// Whether the new value is ±Inf.
    pub inf: bool,
    /// Whether the new value is finite with a magnitude above the extreme threshold.
    pub extreme: bool,
    /// Draws thrown away because they gave NaN/Inf.
    pub redraws: u32,
}

impl Record {
    /// The flip this record applied, if it corrupted its value.
    pub fn flip(&self) -> Option<Flip> {
        if self.outcome != Outcome::Corrupted {
            return None;
        }
        if let Some(factor) = self.scale {
            return Some(Flip::Scale { factor });
        }
        let dtype = parse_dtype(&self.dtype)?;
        let precision = self.precision?;
        if dtype.is_float() {
            Some(Flip::Xor { precision, mask: self.bits_ieee.iter().fold(0u64, |m, b| m | 1u64.checked_shl(*b).unwrap_or(0)) })
        } else {
            self.bits_ieee.first().map(|&bit| Flip::IntBit { bit })
        }
    }
    /// Stored bits before and after, parsed.
    pub fn raw(&self) -> Option<(u64, u64)> {
        Some((parse_hex(&self.old_bits)?, parse_hex(&self.new_bits)?))
    }
}

/// Parses a dtype name as written in logs (`f16`, `bf16`, `f32`, `f64`, `i8`..`i64`,
/// `u8`..`u64`).
pub fn parse_dtype(s: &str) -> Option<Dtype> {
    Some(match s {
        "f16" => Dtype::F16,
        "bf16" => Dtype::Bf16,
        "f32" => Dtype::F32,
        "f64" => Dtype::F64,
        _ => {
            let bits: usize = s.get(1..)?.parse().ok()?;
            if ![8, 16, 32, 64].contains(&bits) {
                return None;
            }
            match s.as_bytes()[0] {
                b'i' => Dtype::Int(bits / 8),
                b'u' => Dtype::Uint(bits / 8),
                _ => return None,
            }
        }
    })
}

/// Totals of a run of attempts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Attempts made.
    pub attempts: u64,
    /// Values corrupted.
    pub corrupted: u64,
    /// Attempts the probability draw passed over.
    pub not_selected: u64,
    /// Attempts whose every draw was refused.
    pub rejected: u64,
    /// Corruptions whose stored value did not change (a flip lost in the cast back).
    pub unchanged_after_cast: u64,
    /// Corruptions leaving NaN.
    pub nan: u64,
    /// Corruptions leaving ±Inf.
    pub inf: u64,
    /// Corruptions leaving an extreme finite value.
    pub extreme: u64,
    /// Distinct elements corrupted.
    pub distinct_elements: u64,
    /// Distinct datasets with at least one corruption.
    pub datasets_hit: u64,
    /// Elements in the file (all number datasets), the base of the share.
    pub total_elements: u64,
    /// `corrupted * 100 / total_elements`, as the reference reports it.
    pub share_of_file_percent: f64,
}

impl Summary {
    /// Totals of `records` over a file of `total_elements` elements.
    pub fn of(records: &[Record], total_elements: u64) -> Self {
        let mut s = Summary { attempts: records.len() as u64, total_elements, ..Default::default() };
        let mut elements = std::collections::HashSet::new();
        let mut datasets = std::collections::HashSet::new();
        for r in records {
            match r.outcome {
                Outcome::Corrupted => {
                    s.corrupted += 1;
                    s.unchanged_after_cast += u64::from(r.old_bits == r.new_bits);
                    s.nan += u64::from(r.nan);
                    s.inf += u64::from(r.inf);
                    s.extreme += u64::from(r.extreme);
                    elements.insert((r.dataset.as_str(), r.index));
                    datasets.insert(r.dataset.as_str());
                }
                Outcome::NotSelected => s.not_selected += 1,
                Outcome::Rejected => s.rejected += 1,
            }
        }
        s.distinct_elements = elements.len() as u64;
        s.datasets_hit = datasets.len() as u64;
        s.share_of_file_percent = if total_elements == 0 { 0.0 } else { s.corrupted as f64 * 100.0 / total_elements as f64 };
        s
    }
}

/// Picks every attempt's tensor, element and selection from `seed` (stream 0).
pub fn draw(plan: &Plan, targets: &[Target], seed: u64) -> Vec<Draw> {
    if targets.is_empty() {
        return Vec::new();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let prefix: Vec<u64> = targets
        .iter()
        .scan(0u64, |acc, t| {
            *acc += t.len as u64;
            Some(*acc)
        })
        .collect();
    let total = prefix.last().copied().unwrap_or(0);
    (0..plan.attempts)
        .map(|attempt| {
            let (target, index) = match plan.sampling {
                Sampling::PerTensor => {
                    let t = rng.random_range(0..targets.len());
                    (t, rng.random_range(0..targets[t].len))
                }
                Sampling::PerElement => {
                    let u = rng.random_range(0..total);
                    let t = prefix.partition_point(|&end| end <= u);
                    let start = if t == 0 { 0 } else { prefix[t - 1] };
                    (t, (u - start) as usize)
                }
            };
            let selected = plan.probability >= 1.0 || rng.random::<f64>() < plan.probability;
            Draw { attempt, target, index, selected }
        })
        .collect()
}

/// The RNG of one attempt's bit draws.
fn attempt_rng(seed: u64, attempt: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(attempt.wrapping_add(1));
    rng
}

/// Corrupts the selected draws in order. `values` maps `(target, index)` to the current stored
/// bits and must hold every drawn element; it is updated in place.
pub fn apply_attempts(plan: &Plan, targets: &[Target], draws: &[Draw], values: &mut Values, seed: u64) -> Vec<Record> {
    draws
        .iter()
        .map(|d| {
            let t = &targets[d.target];
            let old = values.get(&(d.target, d.index)).copied().unwrap_or_default();
            let mut rec = Record {
                attempt: d.attempt,
                dataset: t.path.clone(),
                index: d.index,
                dtype: t.dtype.to_string(),
                outcome: Outcome::NotSelected,
                precision: None,
                bits_reference: Vec::new(),
                bits_ieee: Vec::new(),
                scale: None,
                stored_bits_changed: Vec::new(),
                old: Num(model::value_of(t.dtype, old)),
                new: Num(model::value_of(t.dtype, old)),
                old_bits: hex(old, t.dtype),
                new_bits: hex(old, t.dtype),
                nan: model::is_nan(t.dtype, old),
                inf: model::is_inf(t.dtype, old),
                extreme: false,
                redraws: 0,
            };
            if !d.selected {
                return rec;
            }
            let c = plan.model.corrupt(t.dtype, old, &mut attempt_rng(seed, d.attempt));
            rec.redraws = c.redraws;
            let Some(new) = c.new_raw else {
                rec.outcome = Outcome::Rejected;
                return rec;
            };
            values.insert((d.target, d.index), new);
            describe(&mut rec, t.dtype, old, new, &c.flip, plan.model.extreme_threshold);
            rec
        })
        .collect()
}

/// Fills the corruption fields of a record.
pub(crate) fn describe(rec: &mut Record, dtype: Dtype, old: u64, new: u64, flip: &Flip, extreme_threshold: f64) {
    let (bits, width) = flip.bits_ieee(old, dtype);
    rec.outcome = Outcome::Corrupted;
    if let Flip::Scale { factor } = flip {
        rec.scale = Some(*factor);
    } else {
        rec.precision = Some(width);
        rec.bits_reference = model::to_reference(&bits, width);
        rec.bits_ieee = bits;
    }
    rec.stored_bits_changed = model::bit_list(old ^ new);
    let v = model::value_of(dtype, new);
    rec.new = Num(v);
    rec.new_bits = hex(new, dtype);
    rec.nan = v.is_nan();
    rec.inf = v.is_infinite();
    rec.extreme = v.is_finite() && v.abs() > extreme_threshold;
}

/// Distinct elements of each target among `(target, index)` pairs, sorted: what must be read
/// before applying.
pub fn touched(elements: impl IntoIterator<Item = (usize, usize)>, n_targets: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n_targets];
    for (t, i) in elements {
        out[t].push(i);
    }
    for v in &mut out {
        v.sort_unstable();
        v.dedup();
    }
    out
}

/// Runs a plan over in-memory f32 tensors (weights, gradients, optimizer state, activations):
/// the same draws and bits as on a file holding the same tensors as f32 datasets in this order.
pub fn inject_f32(plan: &Plan, tensors: &mut [(&str, &mut [f32])], seed: u64) -> Vec<Record> {
    inject_f32_as(plan, tensors, seed, Dtype::F32)
}

/// [`inject_f32`] for f32 tensors that hold values of the float type `format`: the half
/// values of a mixed-precision training run ([`Dtype::Bf16`], or IEEE half [`Dtype::F16`]).
/// Each value drawn is seen as its `format` word (rounded to nearest even, which leaves a
/// value of that format as it is), the fault model corrupts that word as it would a stored
/// one of that type, and the result goes back as f32 (exactly); the records are that type's
/// (`dtype`, the bits and the old and new values). Values no attempt changed keep their f32
/// bits. With [`Dtype::F32`] this is [`inject_f32`]; a type that is not a float also is.
pub fn inject_f32_as(plan: &Plan, tensors: &mut [(&str, &mut [f32])], seed: u64, format: Dtype) -> Vec<Record> {
    let format = if format.is_float() { format } else { Dtype::F32 };
    let targets: Vec<Target> =
        tensors.iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| Target { path: n.to_string(), dtype: format, len: v.len() }).collect();
    let mut slots: Vec<&mut [f32]> = tensors.iter_mut().filter(|(_, v)| !v.is_empty()).map(|(_, v)| &mut **v).collect();
    let draws = draw(plan, &targets, seed);
    let word = |x: f32| match format {
        Dtype::F32 => x.to_bits() as u64,
        Dtype::F16 => half::f16::from_f32(x).to_bits() as u64,
        Dtype::Bf16 => half::bf16::from_f32(x).to_bits() as u64,
        _ => model::encode_float(f64::from(x), format),
    };
    let before: Values = draws.iter().map(|d| ((d.target, d.index), word(slots[d.target][d.index]))).collect();
    let mut values = before.clone();
    let records = apply_attempts(plan, &targets, &draws, &mut values, seed);
    let value = |raw: u64| match format {
        Dtype::F16 => half::f16::from_bits(raw as u16).to_f32(),
        Dtype::Bf16 => half::bf16::from_bits(raw as u16).to_f32(),
        Dtype::F32 => f32::from_bits(raw as u32),
        _ => model::value_of(format, raw) as f32,
    };
    for ((t, i), raw) in values {
        if before.get(&(t, i)) != Some(&raw) {
            slots[t][i] = value(raw);
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mode;

    fn plan(attempts: u64, p: f64, sampling: Sampling) -> Plan {
        Plan { model: FaultModel::default(), probability: p, attempts, sampling }
    }

    #[test]
    fn in_memory_injection_changes_exactly_the_logged_elements() {
        let mut a = vec![1.0f32; 100];
        let mut b = vec![-2.0f32; 10];
        let mut t: Vec<(&str, &mut [f32])> = vec![("a", &mut a), ("b", &mut b)];
        let p = Plan {
            model: FaultModel {
                mode: Mode::BitRange { first: Some(9), last: Some(31), burst: 2 },
                allow_sign_change: false,
                ..Default::default()
            },
            ..plan(20, 1.0, Sampling::PerTensor)
        };
        let recs = inject_f32(&p, &mut t, 7);
        assert_eq!(recs.len(), 20);
        let changed: std::collections::HashSet<(String, usize)> = recs.iter().map(|r| (r.dataset.clone(), r.index)).collect();
        for (i, v) in a.iter().enumerate() {
            assert_eq!(
                *v != 1.0,
                changed.contains(&("a".to_string(), i))
                    && recs.iter().rev().find(|r| r.dataset == "a" && r.index == i).is_some_and(|r| r.new_bits != "0x3f800000")
            );
        }
        assert!(recs.iter().all(|r| r.bits_ieee.len() == 2 && r.bits_reference.iter().all(|&b| b >= 9)));
    }

    #[test]
    fn records_round_trip_through_json() {
        let mut a = vec![3.0f32; 4];
        let mut t: Vec<(&str, &mut [f32])> = vec![("a", &mut a)];
        let recs = inject_f32(&plan(3, 1.0, Sampling::PerElement), &mut t, 1);
        for r in recs {
            let back: Record = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
            assert_eq!(back.flip(), r.flip());
            assert_eq!(back.raw(), r.raw());
        }
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in [Dtype::F16, Dtype::F32, Dtype::F64, Dtype::Int(1), Dtype::Int(8), Dtype::Uint(2), Dtype::Uint(4)] {
            assert_eq!(parse_dtype(&d.to_string()), Some(d));
        }
        assert_eq!(parse_dtype("i7"), None);
    }
}
