//! The all-reduce of a data-parallel step, with its summation order modelled explicitly.
//!
//! Gradients are grouped into buckets in the order backward makes them ready
//! ([`resilab_models::gradient_ready_order`]). DDP's `Reducer` fills each bucket until it holds
//! at least its limit (`parallel.first_bucket_mb` for the first, `parallel.bucket_mb` after);
//! Horovod fuses tensors into buffers of at most `parallel.bucket_mb`. Each bucket is flattened
//! and reduced on its own. DDP divides every
//! contribution by the number of workers first and then sums; Horovod sums and then multiplies
//! by 1/N. The sum is either in rank order or as a ring all-reduce does it (see
//! [`AllReduceKind::Ring`]). Floating-point addition is not associative, so these choices change
//! the low bits of the result and decide whether a huge value in one worker's gradient overflows.
//! Under `train.reduction_order = "seeded"` the contributions are taken in a drawn order
//! ([`OrderDraw`]) per step, attempt and bucket; the fixed order is rank order.

use burn::backend::DispatchDevice;
use burn::prelude::*;
use burn::tensor::DType;
use resilab_kernels::Error as KernelError;
use resilab_kernels::reduce::{Order, average, sum};
use resilab_models::Kernels;

use crate::order::OrderDraw;
use crate::{AllReduceKind, Grads, NetworkConfig, ParallelConfig, SyncKind};

/// Revision of the buckets [`ReducePlan::new`] makes, bumped whenever the same configuration
/// gets other buckets: a ring all-reduce sums each bucket in its own chunks, so other buckets
/// give a multi-worker data-parallel run other bits. Part of such runs' golden cache key.
/// Revision 1: reverse parameter order, a bucket closed before it would exceed its cap, the first
/// at most 1 MiB. Revision 2: DDP's `Reducer` (gradient-ready order, a bucket closed once it
/// holds its cap or more, `parallel.first_bucket_mb`), Horovod's fusion in the ready order.
pub const REDUCE_PLAN_REVISION: u32 = 2;

/// How gradients are grouped and summed.
#[derive(Clone, Debug, PartialEq)]
pub struct ReducePlan {
    /// Buckets of `(parameter name, number of values)`, in reduction order.
    pub buckets: Vec<Vec<(String, usize)>>,
    /// Summation order.
    pub kind: AllReduceKind,
    /// Divide contributions by N before summing (DDP) rather than scale the sum by 1/N (Horovod).
    pub predivide: bool,
    /// [`Kernels::Resilab`]: each bucket's average is one pass over f32 slices (the same bits).
    pub kernels: Kernels,
}

impl ReducePlan {
    /// The plan for parameters `params` (`(name, values)` in the order their gradients become
    /// ready) under `cfg`, reduced through `kernels`.
    ///
    /// DDP (`compute_bucket_assignment_by_size` in PyTorch's `reducer.cpp`, as its `Reducer`
    /// rebuilds the buckets after the first iteration): a tensor joins the open bucket, and the
    /// bucket closes once it holds at least its limit, the first's `first_bucket_bytes` and
    /// every later one's `bucket_bytes`. Horovod's fusion (`FuseResponses`): a tensor joins the
    /// open buffer only if the buffer stays within `bucket_bytes`. A tensor larger than any limit
    /// goes alone.
    pub fn new(params: &[(String, usize)], cfg: &ParallelConfig, kernels: Kernels) -> Self {
        let mut buckets: Vec<Vec<(String, usize)>> = Vec::new();
        let mut current: Vec<(String, usize)> = Vec::new();
        let mut bytes = 0u64;
        for (name, n) in params {
            let limit = if buckets.is_empty() { cfg.first_bucket_bytes() } else { cfg.bucket_bytes() };
            let b = 4 * *n as u64;
            if cfg.sync == SyncKind::Horovod && !current.is_empty() && bytes + b > limit {
                buckets.push(std::mem::take(&mut current));
                bytes = 0;
            }
            current.push((name.clone(), *n));
            bytes += b;
            if cfg.sync == SyncKind::Ddp && bytes >= limit {
                buckets.push(std::mem::take(&mut current));
                bytes = 0;
            }
        }
        if !current.is_empty() {
            buckets.push(current);
        }
        Self { buckets, kind: cfg.allreduce, predivide: cfg.sync == SyncKind::Ddp, kernels }
    }

    /// Bytes of every bucket.
    pub fn bucket_bytes(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.iter().map(|(_, n)| 4 * *n as u64).sum()).collect()
    }

    /// Averages `contributions` (one per participating worker, in rank order) in the fixed
    /// order. Parameters missing from a contribution are left out of the result.
    pub fn reduce(&self, contributions: Vec<Grads>) -> Grads {
        self.reduce_buckets(contributions, 0..self.buckets.len(), OrderDraw::Fixed)
    }

    /// [`ReducePlan::reduce`] of the buckets `range` only, each summed in the order `draw`
    /// gives it (by its index in the plan): their parameters' averages.
    pub fn reduce_buckets(&self, contributions: Vec<Grads>, range: std::ops::Range<usize>, draw: OrderDraw) -> Grads {
        let k = contributions.len();
        let mut out = Grads::new();
        let buckets = self.buckets.get(range.clone()).unwrap_or_default();
        if k == 0 || buckets.is_empty() {
            return out;
        }
        let mut contributions = contributions;
        if k == 1 {
            // One contribution: the sum is itself and the average divides by one.
            let mut only = contributions.pop().unwrap_or_default();
            if range.len() == self.buckets.len() {
                return only;
            }
            return buckets.iter().flatten().filter_map(|(name, _)| only.remove_entry(name)).collect();
        }
        for (i, bucket) in buckets.iter().enumerate() {
            let present: Vec<&(String, usize)> =
                bucket.iter().filter(|(name, _)| contributions.iter().all(|g| g.contains_key(name))).collect();
            if present.is_empty() {
                continue;
            }
            let averaged = match draw.permutation(k, range.start + i) {
                None => self.reduce_bucket(&mut contributions, &present),
                Some(order) => {
                    // The contributions in the drawn order, put back by rank afterwards.
                    let mut ordered: Vec<Grads> = order.iter().map(|&r| std::mem::take(&mut contributions[r])).collect();
                    let averaged = self.reduce_bucket(&mut ordered, &present);
                    for (g, &r) in ordered.into_iter().zip(&order) {
                        contributions[r] = g;
                    }
                    averaged
                }
            };
            out.extend(averaged);
        }
        out
    }

    /// The average of the `present` parameters of one bucket over `contributions` (at least
    /// two), summed in their order: the fused pass where it applies, else tensor operations
    /// (the same bits). Takes those parameters out of the contributions.
    fn reduce_bucket(&self, contributions: &mut [Grads], present: &[&(String, usize)]) -> Vec<(String, Tensor<1>)> {
        let k = contributions.len();
        if let Some(averaged) = fused_average(contributions, present, self) {
            return averaged;
        }
        let flats: Vec<Tensor<1>> = contributions
            .iter_mut()
            .map(|g| {
                let parts: Vec<Tensor<1>> = present.iter().filter_map(|(name, _)| g.remove(name)).collect();
                let flat = concat(parts);
                if self.predivide { flat.div_scalar(k as f64) } else { flat }
            })
            .collect();
        let mut sum = match self.kind {
            AllReduceKind::RankOrder => sum_in_order(&flats, 0, None),
            AllReduceKind::Ring => ring_sum(&flats),
        };
        if !self.predivide {
            sum = sum.mul_scalar(1.0 / k as f64);
        }
        let mut offset = 0;
        let mut out = Vec::with_capacity(present.len());
        for (name, n) in present {
            out.push((name.clone(), sum.clone().slice(offset..offset + n)));
            offset += n;
        }
        out
    }
}

/// One bucket's average as one pass (resilab-kernels' `reduce`, the same bits as the tensor
/// formulation below) with [`Kernels::Resilab`] and every contribution is an f32 vector of
/// the planned length on the flex device; `None` (nothing taken) otherwise. The gradients'
/// buffers are read where they are (copied only when something else holds them).
fn fused_average(contributions: &mut [Grads], present: &[&(String, usize)], plan: &ReducePlan) -> Option<Vec<(String, Tensor<1>)>> {
    let order = match plan.kind {
        AllReduceKind::RankOrder => Order::Ranks,
        AllReduceKind::Ring => Order::Ring,
    };
    fused(contributions, present, plan.kernels, |views| average(views, order, plan.predivide))
}

/// `combine` over the `present` parameters of every contribution as plain f32 slices, when
/// `kernels` is [`Kernels::Resilab`] and every contribution holds each as an f32 vector of the
/// given length on the flex device; `None` (nothing taken) otherwise.
fn fused(
    contributions: &mut [Grads],
    present: &[&(String, usize)],
    kernels: Kernels,
    combine: impl FnOnce(&[Vec<&[f32]>]) -> Result<Vec<Vec<f32>>, KernelError>,
) -> Option<Vec<(String, Tensor<1>)>> {
    let device = contributions.first()?.get(&present.first()?.0)?.device();
    let fits = |t: &Tensor<1>| t.dtype() == DType::F32 && matches!(t.device().as_dispatch(), DispatchDevice::Flex(_));
    let all_fit = contributions.iter().all(|g| present.iter().all(|(name, n)| g.get(name).is_some_and(|t| fits(t) && t.dims() == [*n])));
    if !kernels.resilab() || !all_fit {
        return None;
    }
    let data: Vec<Vec<TensorData>> =
        contributions.iter_mut().map(|g| present.iter().filter_map(|(name, _)| g.remove(name)).map(Tensor::into_data).collect()).collect();
    // Checked above: every tensor is f32, so each view exists, and the lengths line up.
    let views: Vec<Vec<&[f32]>> = data.iter().map(|d| d.iter().map(f32_values).collect()).collect();
    let combined = combine(&views).unwrap_or_else(|e| panic!("{e}"));
    let tensor = |v: Vec<f32>| {
        let n = v.len();
        Tensor::from_data(TensorData::new(v, [n]), &device)
    };
    Some(present.iter().zip(combined).map(|((name, _), v)| (name.clone(), tensor(v))).collect())
}

/// The values of data known to be f32.
fn f32_values(d: &TensorData) -> &[f32] {
    d.as_slice::<f32>().unwrap_or_else(|e| panic!("an f32 gradient without f32 values: {e:?}"))
}

/// `flats[start] + flats[start + 1] + ...` (indices mod k), restricted to `range` if given.
fn sum_in_order(flats: &[Tensor<1>], start: usize, range: Option<std::ops::Range<usize>>) -> Tensor<1> {
    let k = flats.len();
    let pick = |i: usize| {
        let t = flats[(start + i) % k].clone();
        match &range {
            Some(r) => t.slice(r.clone()),
            None => t,
        }
    };
    (1..k).fold(pick(0), |acc, i| acc + pick(i))
}

/// The ring order: chunk `c` of `k` is accumulated starting at worker `c + 1` and ending at
/// worker `c`.
fn ring_sum(flats: &[Tensor<1>]) -> Tensor<1> {
    let k = flats.len();
    let len = flats[0].dims()[0];
    if k == 1 {
        return flats[0].clone();
    }
    let parts: Vec<Tensor<1>> = (0..k)
        .filter_map(|c| {
            let r = chunk(len, k, c);
            (!r.is_empty()).then(|| sum_in_order(flats, (c + 1) % k, Some(r)))
        })
        .collect();
    concat(parts)
}

/// One flat tensor from several (no copy for one).
fn concat(mut parts: Vec<Tensor<1>>) -> Tensor<1> {
    if parts.len() == 1 { parts.remove(0) } else { Tensor::cat(parts, 0) }
}

/// Chunk `c` of `k` near-equal chunks of `len` values.
pub fn chunk(len: usize, k: usize, c: usize) -> std::ops::Range<usize> {
    (c * len / k)..((c + 1) * len / k)
}

/// Simulated seconds of a ring all-reduce of `bytes` over `k` workers: `2 (k - 1)` steps, each
/// moving `bytes / k` (reduce-scatter then all-gather): `2 (k-1) alpha + 2 (k-1)/k bytes beta`.
pub fn ring_allreduce_s(net: &NetworkConfig, bytes: u64, k: usize) -> f64 {
    if k <= 1 {
        return 0.0;
    }
    let steps = 2 * (k - 1);
    steps as f64 * net.send_s(bytes.div_ceil(k as u64))
}

/// Simulated seconds of broadcasting `bytes` from one worker to `k - 1` others along a binary
/// tree: `ceil(log2 k)` rounds of one message each.
pub fn broadcast_s(net: &NetworkConfig, bytes: u64, k: usize) -> f64 {
    if k <= 1 {
        return 0.0;
    }
    let rounds = usize::BITS - (k - 1).leading_zeros();
    f64::from(rounds) * net.send_s(bytes)
}

/// Sums named gradients in the order given (accumulation over micro-batches): one pass per
/// parameter with resilab's kernels when every part holds the same parameters, else pairwise
/// tensor additions (the same bits).
pub fn sum_grads(mut parts: Vec<Grads>, kernels: Kernels) -> Grads {
    if parts.len() > 1 {
        let sizes: Vec<(String, usize)> = parts[0].iter().map(|(name, t)| (name.clone(), t.dims()[0])).collect();
        let present: Vec<&(String, usize)> = sizes.iter().collect();
        if parts.iter().all(|g| g.len() == sizes.len())
            && let Some(summed) = fused(&mut parts, &present, kernels, sum)
        {
            return summed.into_iter().collect();
        }
    }
    let mut it = parts.into_iter();
    let Some(mut acc) = it.next() else { return Grads::new() };
    for g in it {
        for (name, t) in g {
            match acc.remove(&name) {
                Some(a) => acc.insert(name, a + t),
                None => acc.insert(name, t),
            };
        }
    }
    acc
}

/// Names and sizes of the trainable parameters, in the order backward makes their gradients
/// ready (the order of every all-reduce plan).
pub fn gradient_ready_sizes(net: &resilab_models::Net) -> Vec<(String, usize)> {
    resilab_models::gradient_ready_order(net).into_iter().map(|p| (p.name.clone(), p.numel())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParallelConfig;

    fn grads(values: &[f32]) -> Grads {
        let t = Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), &Device::flex());
        Grads::from([("w".to_string(), t)])
    }

    fn reduce(cfg: &ParallelConfig, per_worker: &[&[f32]]) -> Vec<f32> {
        let plan = ReducePlan::new(&[("w".to_string(), per_worker[0].len())], cfg, Kernels::Burn);
        let out = plan.reduce(per_worker.iter().map(|v| grads(v)).collect());
        out["w"].clone().into_data().try_to_vec::<f32>().unwrap_or_default()
    }

    #[test]
    fn ring_sums_each_chunk_in_its_own_order() {
        // Worker values 1e8, 1, -1e8 in every element; one element per chunk. Chunk 0 sums
        // (1 + -1e8) + 1e8 = 0, chunk 1 (-1e8 + 1e8) + 1 = 1, chunk 2 (1e8 + 1) + -1e8 = 0.
        let w: [&[f32]; 3] = [&[1e8; 3], &[1.0; 3], &[-1e8; 3]];
        let horovod = ParallelConfig { workers: 3, sync: SyncKind::Horovod, ..ParallelConfig::default() };
        assert_eq!(reduce(&horovod, &w), [0.0, 1.0 / 3.0, 0.0]);
        let rank_order = ParallelConfig { allreduce: AllReduceKind::RankOrder, ..horovod };
        assert_eq!(reduce(&rank_order, &w), [0.0, 0.0, 0.0]);
    }

    #[test]
    fn ddp_divides_first_and_horovod_overflows() {
        let w: [&[f32]; 2] = [&[3e38], &[3e38]];
        let ddp = ParallelConfig { workers: 2, ..ParallelConfig::default() };
        assert_eq!(reduce(&ddp, &w), [3e38]);
        let horovod = ParallelConfig { sync: SyncKind::Horovod, ..ddp };
        assert_eq!(reduce(&horovod, &w), [f32::INFINITY]);
    }

    #[test]
    fn buckets_close_as_ddps_reducer_and_horovods_fusion_close_them() {
        let mib = 1024 * 1024 / 4;
        let params: Vec<(String, usize)> =
            [("d", 3 * mib / 4), ("c", mib / 2), ("b", 70 * mib), ("a", mib / 2)].iter().map(|(n, k)| (n.to_string(), *k)).collect();
        let names =
            |p: &ReducePlan| p.buckets.iter().map(|b| b.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join("")).collect::<Vec<_>>();
        // DDP without bucket_cap_mb: the first bucket closes at 1 MiB or more (d and c), then
        // 25 MiB buckets (b, larger, closes its own); a is what is left.
        let ddp = ParallelConfig { bucket_mb: Some(25.0), first_bucket_mb: Some(1.0), ..ParallelConfig::default() };
        assert_eq!(names(&ReducePlan::new(&params, &ddp, Kernels::Burn)), ["dc", "b", "a"]);
        // With bucket_cap_mb only, the first bucket has the same cap: d, c and b in one.
        let ddp = ParallelConfig { first_bucket_mb: None, ..ddp };
        assert_eq!(names(&ReducePlan::new(&params, &ddp, Kernels::Burn)), ["dcb", "a"]);
        // A 1 MiB cap: d alone is under it, d and c reach it.
        let ddp = ParallelConfig { bucket_mb: Some(1.0), ..ddp };
        assert_eq!(names(&ReducePlan::new(&params, &ddp, Kernels::Burn)), ["dc", "b", "a"]);
        // Horovod fuses only what fits: d and c (1.25 MiB) fit 64 MiB, b does not, then b and a.
        let horovod = ParallelConfig { sync: SyncKind::Horovod, bucket_mb: Some(64.0), ..ParallelConfig::default() };
        assert_eq!(names(&ReducePlan::new(&params, &horovod, Kernels::Burn)), ["dc", "b", "a"]);
        let horovod = ParallelConfig { bucket_mb: Some(1.0), ..horovod };
        assert_eq!(names(&ReducePlan::new(&params, &horovod, Kernels::Burn)), ["d", "c", "b", "a"]);
    }

    #[test]
    fn a_range_of_buckets_reduces_only_its_parameters() {
        let t = |v: f32| Tensor::<1>::from_data(TensorData::new(vec![v; 2], [2]), &Device::flex());
        let g = |v: f32| Grads::from([("a".to_string(), t(v)), ("b".to_string(), t(10.0 * v))]);
        let cfg = ParallelConfig { workers: 2, bucket_mb: Some(8.0 / (1024.0 * 1024.0)), ..ParallelConfig::default() };
        let plan = ReducePlan::new(&[("b".to_string(), 2), ("a".to_string(), 2)], &cfg, Kernels::Burn);
        assert_eq!(plan.buckets.len(), 2, "b first, then a");
        let first = plan.reduce_buckets(vec![g(1.0), g(3.0)], 0..1, OrderDraw::Fixed);
        assert_eq!(first.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(first["b"].clone().into_data().try_to_vec::<f32>().unwrap(), [20.0, 20.0]);
        let alone = plan.reduce_buckets(vec![g(5.0)], 1..2, OrderDraw::Fixed);
        assert_eq!(alone.keys().collect::<Vec<_>>(), ["a"]);
        assert!(plan.reduce_buckets(vec![g(5.0)], 2..2, OrderDraw::Fixed).is_empty());
    }

    /// Three workers' contributions of three elements: in element `e`, worker `e` holds 1 and
    /// the others 1e8 and -1e8, so the element's sum is 1 when worker `e` is added last and 0
    /// when the 1 meets 1e8 first (lost to rounding). The sums show which worker came last.
    const LAST_SHOWS: [&[f32]; 3] = [&[1.0, 1e8, -1e8], &[1e8, 1.0, 1e8], &[-1e8, -1e8, 1.0]];

    fn reduce_drawn(cfg: &ParallelConfig, kernels: Kernels, per_worker: &[&[f32]], draw: OrderDraw) -> Vec<f32> {
        let plan = ReducePlan::new(&[("w".to_string(), per_worker[0].len())], cfg, kernels);
        let out = plan.reduce_buckets(per_worker.iter().map(|v| grads(v)).collect(), 0..1, draw);
        out["w"].clone().into_data().try_to_vec::<f32>().unwrap_or_default()
    }

    #[test]
    fn a_seeded_order_repeats_for_the_same_draw_and_varies_with_the_attempt() {
        let horovod =
            ParallelConfig { workers: 3, sync: SyncKind::Horovod, allreduce: AllReduceKind::RankOrder, ..ParallelConfig::default() };
        let ring = ParallelConfig { allreduce: AllReduceKind::Ring, ..horovod.clone() };
        let ddp = ParallelConfig { sync: SyncKind::Ddp, ..horovod.clone() };
        for cfg in [&horovod, &ring, &ddp] {
            let at = |attempt| reduce_drawn(cfg, Kernels::Burn, &LAST_SHOWS, OrderDraw::Seeded { seed: 11, step: 4, attempt });
            let sums: Vec<Vec<f32>> = (0..8).map(at).collect();
            // The same (seed, step, attempt): the same bits.
            for (attempt, s) in sums.iter().enumerate() {
                assert_eq!(at(attempt as u32), *s);
            }
            // Attempts of one step sum in different orders and round differently.
            let distinct: std::collections::BTreeSet<Vec<u32>> = sums.iter().map(|s| s.iter().map(|x| x.to_bits()).collect()).collect();
            assert!(distinct.len() > 1, "{sums:?}");
            assert!(sums[1..].iter().any(|s| *s != sums[0]), "a redo rounds otherwise than the first execution: {sums:?}");
        }
        // The fixed order is rank order: worker 2 last, so only element 2 keeps its 1.
        assert_eq!(reduce_drawn(&horovod, Kernels::Burn, &LAST_SHOWS, OrderDraw::Fixed), [0.0, 0.0, 1.0 / 3.0]);
    }

    #[test]
    fn two_contributions_sum_to_the_same_bits_in_either_order() {
        // a + b == b + a in IEEE arithmetic: with two workers a seeded order changes nothing.
        let w: [&[f32]; 2] = [&[0.1, 1e8, -3.7e-5], &[0.2, 1.0, 7.1e3]];
        let cfg = ParallelConfig { workers: 2, allreduce: AllReduceKind::RankOrder, ..ParallelConfig::default() };
        let fixed = reduce_drawn(&cfg, Kernels::Burn, &w, OrderDraw::Fixed);
        for attempt in 0..4 {
            assert_eq!(reduce_drawn(&cfg, Kernels::Burn, &w, OrderDraw::Seeded { seed: 3, step: 1, attempt }), fixed);
        }
    }

    #[test]
    fn the_fused_pass_sums_in_the_drawn_order_too() {
        for allreduce in [AllReduceKind::Ring, AllReduceKind::RankOrder] {
            for sync in [SyncKind::Ddp, SyncKind::Horovod] {
                let cfg = ParallelConfig { workers: 3, sync, allreduce, ..ParallelConfig::default() };
                for attempt in 0..6 {
                    let draw = OrderDraw::Seeded { seed: 2, step: 9, attempt };
                    let tensor = reduce_drawn(&cfg, Kernels::Burn, &LAST_SHOWS, draw);
                    let fused = reduce_drawn(&cfg, Kernels::Resilab, &LAST_SHOWS, draw);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&tensor), bits(&fused), "{allreduce:?} {sync:?} attempt {attempt}");
                }
            }
        }
    }

    #[test]
    fn ring_cost_is_the_alpha_beta_formula() {
        let net = NetworkConfig { latency_us: 1.0, bandwidth_gbps: 8.0 };
        // 4 workers, 4 MB: 6 steps of 1 MB each: 6 * (1e-6 + 1e-3).
        assert!((ring_allreduce_s(&net, 4_000_000, 4) - 6.0 * (1e-6 + 1e-3)).abs() < 1e-12);
        assert_eq!(ring_allreduce_s(&net, 4_000_000, 1), 0.0);
        // 5 workers: 3 tree rounds.
        assert!((broadcast_s(&net, 1000, 5) - 3.0 * (1e-6 + 1e-6)).abs() < 1e-12);
    }
}
