//! Pipeline parallelism: cutting the model into stages, the order each stage runs its
//! micro-batches in, and the simulated time of a schedule.

use std::ops::Range;

use resilab_models::BlockCost;

use crate::{Balance, Error, ParallelConfig, PipeSchedule, Result};

/// One unit of pipeline work on a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Forward pass of micro-batch `m`.
    Forward(usize),
    /// Backward pass of micro-batch `m`.
    Backward(usize),
}

/// The block ranges of the stages: explicit (`split_at`) or balanced.
pub fn stage_ranges(costs: &[BlockCost], cfg: &ParallelConfig) -> Result<Vec<Range<usize>>> {
    let n = costs.len();
    let s = cfg.stages;
    if s > n {
        return Err(Error::Config(format!("parallel.stages = {s} but the model has only {n} blocks to cut at")));
    }
    let cuts: Vec<usize> = match &cfg.split_at {
        Some(cuts) => {
            let mut prev = 0;
            for &c in cuts {
                if c <= prev || c >= n {
                    return Err(Error::Config(format!(
                        "parallel.split_at = {cuts:?}: entries must increase strictly within 1..{n} (the model's blocks: {})",
                        costs.iter().enumerate().map(|(i, c)| format!("{i} {}", c.name)).collect::<Vec<_>>().join(", ")
                    )));
                }
                prev = c;
            }
            cuts.clone()
        }
        None => {
            let weights: Vec<u64> = costs
                .iter()
                .map(|c| match cfg.balance {
                    Balance::Flops => c.flops,
                    Balance::Params => c.params as u64,
                })
                .collect();
            balanced_cuts(&weights, s)
        }
    };
    let mut bounds = vec![0];
    bounds.extend(cuts);
    bounds.push(n);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}

/// Cuts `weights` into `parts` contiguous non-empty runs minimising the largest run's sum
/// (ties: the earliest cuts). Returns the start index of runs 1.. .
pub fn balanced_cuts(weights: &[u64], parts: usize) -> Vec<usize> {
    let n = weights.len();
    let prefix: Vec<u64> = std::iter::once(0)
        .chain(weights.iter().scan(0u64, |s, w| {
            *s += w;
            Some(*s)
        }))
        .collect();
    let sum = |a: usize, b: usize| prefix[b] - prefix[a];
    // best[p][i]: smallest max-run sum of the first i weights in p runs; from[p][i]: last cut.
    let mut best = vec![vec![u64::MAX; n + 1]; parts + 1];
    let mut from = vec![vec![0usize; n + 1]; parts + 1];
    best[0][0] = 0;
    for p in 1..=parts {
        for i in p..=n {
            for j in (p - 1)..i {
                if best[p - 1][j] == u64::MAX {
                    continue;
                }
                let v = best[p - 1][j].max(sum(j, i));
                if v < best[p][i] {
                    best[p][i] = v;
                    from[p][i] = j;
                }
            }
        }
    }
    let mut cuts = Vec::with_capacity(parts.saturating_sub(1));
    let mut i = n;
    for p in (2..=parts).rev() {
        i = from[p][i];
        cuts.push(i);
    }
    cuts.reverse();
    cuts
}

/// The operations of stage `s` of `stages`, in the order it runs them, for `m` micro-batches.
pub fn stage_ops(schedule: PipeSchedule, s: usize, stages: usize, m: usize) -> Vec<Op> {
    match schedule {
        PipeSchedule::Gpipe => (0..m).map(Op::Forward).chain((0..m).map(Op::Backward)).collect(),
        PipeSchedule::OneFOneB => {
            let warmup = (stages - s - 1).min(m);
            let mut ops: Vec<Op> = (0..warmup).map(Op::Forward).collect();
            let (mut f, mut b) = (warmup, 0);
            while f < m {
                ops.push(Op::Forward(f));
                f += 1;
                ops.push(Op::Backward(b));
                b += 1;
            }
            ops.extend((b..m).map(Op::Backward));
            ops
        }
    }
}

/// Most micro-batches whose activations a stage holds at once under its op order.
pub fn peak_in_flight(ops: &[Op]) -> usize {
    let (mut live, mut peak) = (0usize, 0usize);
    for op in ops {
        match op {
            Op::Forward(_) => {
                live += 1;
                peak = peak.max(live);
            }
            Op::Backward(_) => live = live.saturating_sub(1),
        }
    }
    peak
}

/// Measured durations of one pipeline step, for the cost model.
#[derive(Clone, Debug, Default)]
pub struct PipeTimes {
    /// `forward[s][m]`: seconds of stage `s`'s forward of micro-batch `m`.
    pub forward: Vec<Vec<f64>>,
    /// `backward[s][m]`.
    pub backward: Vec<Vec<f64>>,
    /// `act_bytes[s][m]`: bytes stage `s` sends forward for micro-batch `m` (0 on the last).
    pub act_bytes: Vec<Vec<u64>>,
    /// `grad_bytes[s][m]`: bytes stage `s` sends backward (0 on the first).
    pub grad_bytes: Vec<Vec<u64>>,
}

/// Simulated makespan of the schedule: every stage runs its ops in order on its own device; an
/// op starts when its stage is free and its input has arrived (the sender's finish plus the
/// message's alpha-beta time). Returns (seconds, seconds spent in messages on the critical path
/// counted once per message).
pub fn makespan(ops: &[Vec<Op>], t: &PipeTimes, net: &crate::NetworkConfig) -> (f64, f64) {
    let stages = ops.len();
    let m = t.forward.first().map_or(0, Vec::len);
    let mut fwd_done = vec![vec![f64::NAN; m]; stages];
    let mut bwd_done = vec![vec![f64::NAN; m]; stages];
    let mut clock = vec![0.0f64; stages];
    let mut next = vec![0usize; stages];
    let mut comm = 0.0;
    let total: usize = ops.iter().map(Vec::len).sum();
    let mut done = 0;
    while done < total {
        let mut progressed = false;
        for s in 0..stages {
            while let Some(&op) = ops[s].get(next[s]) {
                let ready = match op {
                    Op::Forward(i) if s > 0 => {
                        let d = fwd_done[s - 1][i];
                        (!d.is_nan()).then(|| d + net.send_s(t.act_bytes[s - 1][i]))
                    }
                    Op::Forward(_) => Some(0.0),
                    Op::Backward(i) if s + 1 < stages => {
                        let d = bwd_done[s + 1][i];
                        (!d.is_nan()).then(|| d + net.send_s(t.grad_bytes[s + 1][i]))
                    }
                    Op::Backward(_) => Some(0.0),
                };
                let Some(arrival) = ready else { break };
                let start = clock[s].max(arrival);
                match op {
                    Op::Forward(i) => {
                        if s > 0 {
                            comm += net.send_s(t.act_bytes[s - 1][i]);
                        }
                        clock[s] = start + t.forward[s][i];
                        fwd_done[s][i] = clock[s];
                    }
                    Op::Backward(i) => {
                        if s + 1 < stages {
                            comm += net.send_s(t.grad_bytes[s + 1][i]);
                        }
                        clock[s] = start + t.backward[s][i];
                        bwd_done[s][i] = clock[s];
                    }
                }
                next[s] += 1;
                done += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    (clock.iter().copied().fold(0.0, f64::max), comm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NetworkConfig;

    #[test]
    fn balanced_cuts_minimise_the_largest_part() {
        assert_eq!(balanced_cuts(&[1, 1, 1, 1], 2), vec![2]);
        assert_eq!(balanced_cuts(&[5, 1, 1, 1, 1, 1], 2), vec![1]);
        assert_eq!(balanced_cuts(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 3), vec![5, 7]);
        assert_eq!(balanced_cuts(&[3, 3, 3], 3), vec![1, 2]);
        assert!(balanced_cuts(&[3, 3, 3], 1).is_empty());
    }

    #[test]
    fn schedules_cover_every_micro_batch_once() {
        for sched in [PipeSchedule::Gpipe, PipeSchedule::OneFOneB] {
            for s in 0..4 {
                let ops = stage_ops(sched, s, 4, 8);
                assert_eq!(ops.len(), 16);
                for i in 0..8 {
                    let f = ops.iter().position(|&o| o == Op::Forward(i)).unwrap();
                    let b = ops.iter().position(|&o| o == Op::Backward(i)).unwrap();
                    assert!(f < b);
                }
            }
        }
        assert_eq!(peak_in_flight(&stage_ops(PipeSchedule::Gpipe, 0, 4, 8)), 8);
        assert_eq!(peak_in_flight(&stage_ops(PipeSchedule::OneFOneB, 0, 4, 8)), 4);
        assert_eq!(peak_in_flight(&stage_ops(PipeSchedule::OneFOneB, 3, 4, 8)), 1);
    }

    #[test]
    fn gpipe_makespan_matches_the_closed_form() {
        // Equal op times f and b, free messages: (M + S - 1) (f + b).
        let (s, m, f, b) = (4, 8, 1.0, 2.0);
        let t = PipeTimes {
            forward: vec![vec![f; m]; s],
            backward: vec![vec![b; m]; s],
            act_bytes: vec![vec![0; m]; s],
            grad_bytes: vec![vec![0; m]; s],
        };
        let net = NetworkConfig { latency_us: 0.0, bandwidth_gbps: 1.0 };
        for sched in [PipeSchedule::Gpipe, PipeSchedule::OneFOneB] {
            let ops: Vec<Vec<Op>> = (0..s).map(|i| stage_ops(sched, i, s, m)).collect();
            let (span, _) = makespan(&ops, &t, &net);
            assert!((span - (m + s - 1) as f64 * (f + b)).abs() < 1e-9, "{sched:?}: {span}");
        }
    }
}
