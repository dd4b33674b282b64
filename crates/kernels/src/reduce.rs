//! The average of the data-parallel workers' gradients as one pass per bucket, in the summation
//! order of an all-reduce.
//!
//! A bucket is a run of parameters that the all-reduce flattens into one vector. Element `j`
//! of that vector is summed over the `k` workers starting at worker 0 ([`Order::Ranks`]), or,
//! in a ring all-reduce, starting at worker `c + 1 (mod k)` where `c` is the ring chunk that
//! holds `j` (chunk `c` covers `c * len / k .. (c + 1) * len / k`). Each term is divided by
//! `k` first (DDP), or the sum is multiplied by `1 / k` (Horovod). These are the f32
//! operations of the tensor formulation (`resilab_train::ReducePlan`), in its order, so the
//! bits are the same; the segments are never concatenated.

use crate::error::Error;
use crate::runs::{RUN, for_runs};
use crate::simd::vectorized;
use rayon::prelude::*;

/// The order in which each element is summed over the workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Worker 0, 1, ..., k - 1.
    Ranks,
    /// A ring all-reduce's: each chunk from the worker after its own index.
    Ring,
}

/// The averaged segments of one bucket: `parts[r][s]` is segment `s` (one parameter's
/// gradient) of worker `r`'s bucket, in bucket order; every worker's segments must have worker
/// 0's lengths. `predivide`: divide every term by `k` before summing (DDP) rather than scale
/// the sum by `1 / k` (Horovod). One new vector per segment.
pub fn average(parts: &[Vec<&[f32]>], order: Order, predivide: bool) -> Result<Vec<Vec<f32>>, Error> {
    let kf = parts.len() as f32;
    let scale = (1.0 / parts.len() as f64) as f32;
    combine(parts, order, predivide.then_some(kf), (!predivide).then_some(scale))
}

/// The sums `parts[0][s] + parts[1][s] + ...` of every segment `s`, in that order (the
/// accumulation of a pipeline stage's gradients over its micro-batches); the segments must line
/// up as in [`average`].
pub fn sum(parts: &[Vec<&[f32]>]) -> Result<Vec<Vec<f32>>, Error> {
    combine(parts, Order::Ranks, None, None)
}

/// Each segment summed over the parts in `order`, every term divided by `divide` and the sum
/// multiplied by `scale` where given.
fn combine(parts: &[Vec<&[f32]>], order: Order, divide: Option<f32>, scale: Option<f32>) -> Result<Vec<Vec<f32>>, Error> {
    let Some(first) = parts.first() else { return Ok(Vec::new()) };
    for (worker, p) in parts.iter().enumerate() {
        if p.len() != first.len() {
            return Err(Error::Segment { worker, segment: first.len(), got: p.len(), want: first.len() });
        }
        for (segment, (a, b)) in p.iter().zip(first).enumerate() {
            if a.len() != b.len() {
                return Err(Error::Segment { worker, segment, got: a.len(), want: b.len() });
            }
        }
    }
    let k = parts.len();
    let len: usize = first.iter().map(|s| s.len()).sum();
    let mut offset = 0;
    let mut out = Vec::with_capacity(first.len());
    for (s, seg) in first.iter().enumerate() {
        let mut v = vec![0.0f32; seg.len()];
        // The ring chunks that meet this segment, each with the worker its sum starts at.
        let mut at = 0;
        while at < seg.len() {
            let (end, start) = match order {
                Order::Ranks => (seg.len(), 0),
                Order::Ring => {
                    let c = ring_chunk(len, k, offset + at);
                    (((c + 1) * len / k - offset).min(seg.len()), (c + 1) % k)
                }
            };
            let terms: Vec<&[f32]> = (0..k).map(|t| &parts[(start + t) % k][s][at..end]).collect();
            sum_range(&mut v[at..end], &terms, divide, scale);
            at = end;
        }
        offset += seg.len();
        out.push(v);
    }
    Ok(out)
}

/// The ring chunk of `k` over `len` values that holds value `j`.
fn ring_chunk(len: usize, k: usize, j: usize) -> usize {
    // Chunk c starts at c * len / k; the largest c whose start is <= j.
    let mut c = (j * k / len).min(k - 1);
    while c + 1 < k && (c + 1) * len / k <= j {
        c += 1;
    }
    while c > 0 && c * len / k > j {
        c -= 1;
    }
    c
}

/// `out = ((t0 / d + t1 / d) + t2 / d) ...`, then `* scale`, over runs of values.
fn sum_range(out: &mut [f32], terms: &[&[f32]], divide: Option<f32>, scale: Option<f32>) {
    let n = out.len();
    for_runs(n, out.par_chunks_mut(RUN).enumerate(), |(i, o)| {
        let at = i * RUN;
        vectorized(
            #[inline(always)]
            || {
                let first = &terms[0][at..at + o.len()];
                match divide {
                    Some(d) => o.iter_mut().zip(first).for_each(|(o, &x)| *o = x / d),
                    None => o.copy_from_slice(first),
                }
                for t in &terms[1..] {
                    let t = &t[at..at + o.len()];
                    match divide {
                        Some(d) => o.iter_mut().zip(t).for_each(|(o, &x)| *o += x / d),
                        None => o.iter_mut().zip(t).for_each(|(o, &x)| *o += x),
                    }
                }
                if let Some(s) = scale {
                    o.iter_mut().for_each(|o| *o *= s);
                }
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, element by element over the flattened bucket.
    fn reference(parts: &[Vec<Vec<f32>>], order: Order, predivide: bool) -> Vec<f32> {
        let k = parts.len();
        let flat: Vec<Vec<f32>> = parts.iter().map(|p| p.concat()).collect();
        let len = flat[0].len();
        (0..len)
            .map(|j| {
                let start = match order {
                    Order::Ranks => 0,
                    Order::Ring => ((0..k).rfind(|c| c * len / k <= j).unwrap_or(0) + 1) % k,
                };
                let term = |t: usize| {
                    let x = flat[(start + t) % k][j];
                    if predivide { x / k as f32 } else { x }
                };
                let sum = (1..k).fold(term(0), |acc, t| acc + term(t));
                if predivide { sum } else { sum * (1.0 / k as f64) as f32 }
            })
            .collect()
    }

    #[test]
    fn every_element_is_summed_in_its_chunks_order() {
        // Segment lengths that cut the ring chunks at odd places, one long enough to be
        // threaded, and values whose sum depends on the order.
        let lens = [3usize, 1, 70_001, 5, 300_000, 2];
        for k in [2usize, 3, 8] {
            let parts: Vec<Vec<Vec<f32>>> = (0..k)
                .map(|r| {
                    lens.iter().enumerate().map(|(s, &n)| (0..n).map(|i| [1e8, 1.0, -1e8, 0.1, 3e38][(i + r + s) % 5]).collect()).collect()
                })
                .collect();
            let views: Vec<Vec<&[f32]>> = parts.iter().map(|p| p.iter().map(|v| &v[..]).collect()).collect();
            for order in [Order::Ranks, Order::Ring] {
                for predivide in [true, false] {
                    let got = average(&views, order, predivide).unwrap().concat();
                    let want = reference(&parts, order, predivide);
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "k {k} {order:?} {predivide}");
                }
            }
        }
    }

    #[test]
    fn sums_add_the_parts_in_order() {
        // 1e8 + 1 - 1e8 is 0 in f32 when added left to right, 1 in another order.
        let lens = [2usize, 300_001];
        let parts: Vec<Vec<Vec<f32>>> = [1e8f32, 1.0, -1e8, 0.1]
            .iter()
            .enumerate()
            .map(|(r, &x)| lens.iter().map(|&n| (0..n).map(|i| if i % 3 == 0 { x } else { x * (r + i) as f32 }).collect()).collect())
            .collect();
        let views: Vec<Vec<&[f32]>> = parts.iter().map(|p| p.iter().map(|v| &v[..]).collect()).collect();
        let got = sum(&views).unwrap();
        for (s, seg) in got.iter().enumerate() {
            for (i, v) in seg.iter().enumerate() {
                let want = parts.iter().skip(1).fold(parts[0][s][i], |acc, p| acc + p[s][i]);
                assert_eq!(v.to_bits(), want.to_bits(), "segment {s} value {i}");
            }
        }
        assert_eq!(got[0][0], 0.1, "left to right");
        assert!(sum(&[vec![&[1.0f32][..]], vec![&[1.0f32, 2.0][..]]]).is_err());
    }

    #[test]
    fn ring_chunks_cover_the_bucket_in_order() {
        for (len, k) in [(10, 3), (7, 8), (1000, 7), (5, 5)] {
            for j in 0..len {
                let c = ring_chunk(len, k, j);
                assert!(c * len / k <= j && j < (c + 1) * len / k, "len {len} k {k} j {j} c {c}");
            }
        }
    }

    #[test]
    fn segments_that_do_not_line_up_are_refused() {
        let (a, b) = ([1.0f32; 3], [1.0f32; 2]);
        assert!(average(&[vec![&a[..]], vec![&b[..]]], Order::Ranks, true).is_err());
        assert!(average(&[vec![&a[..]], vec![&a[..], &b[..]]], Order::Ring, true).is_err());
    }
}
