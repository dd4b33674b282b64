//! The data-parallel step, as its phases: workers start (or are out), forward and backward per
//! worker, the overlapped timeline, crashes inside it, the bucketed all-reduce, the updates.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use resilab_data::shard_range;

use super::plan::{DataPlan, modelled_bucket_updates};
use super::{Flow, Phase, StepStats, Tally, Topology, Trainer, broadcast_buffers, early, sync};
use crate::allreduce::{broadcast_s, ring_allreduce_s};
use crate::hooks::{Control, Crash, Ctx, Hooks, LossInfo, Point};
use crate::order::OrderDraw;
use crate::timeline::{StepCosts, Timeline};
use crate::{Error, Grads, Result, SyncKind};

/// One worker's forward and backward pass.
struct Pass {
    grads: Grads,
    loss: LossInfo,
    compute_s: f64,
    /// Images of the worker's shard.
    images: usize,
}

/// The rate at which a crash's place in the step is modelled when compute is measured.
const PLACEMENT_GFLOPS: f64 = 50.0;

/// Workers that crashed inside the step.
struct Crashed {
    ranks: Vec<usize>,
    at_s: f64,
    /// Buckets whose all-reduce had ended at the crash.
    completed: usize,
}

impl Trainer {
    pub(super) fn data_step(&mut self, hooks: &mut dyn Hooks, attempt: u32) -> Result<Flow> {
        let (cursor, global) = self.global_batch();
        let Topology::Data(layout) = &self.topology else {
            return Err(Error::State("data step on a pipeline".into()));
        };
        let layout = Arc::clone(layout);
        let (n, step, lr) = (self.workers.len(), self.step + 1, self.lr());
        let draw = self.order_draw(step);
        let scales: Vec<Option<f32>> = self.workers.iter().map(crate::Worker::loss_scale).collect();
        let loss_scale = scales.first().copied().flatten().map(f64::from);
        let precisions: Vec<_> = self.workers.iter().map(|w| w.net.precision).collect();
        let ctx = |rank, point| Ctx {
            step,
            rank,
            world: n,
            attempt,
            micro_batch: None,
            point,
            loss_scale: scales.get(rank).copied().flatten(),
            precision: precisions.get(rank).copied().unwrap_or_default(),
        };
        // DDP broadcasts at the start of the step, before any hook can alter a replica.
        let (broadcast, broadcast_bytes) = self.sync_buffers(&layout);
        let live = phase!(self.start_workers(hooks, &ctx));
        let mut passes = phase!(self.passes(hooks, &ctx, &global, &live));
        let mut costs = self.step_costs(&layout, broadcast, &passes, self.update_estimate_s);
        let timeline = Timeline::build(&costs);
        let place = match self.parallel.compute.gflops {
            Some(_) => timeline.clone(),
            None => Timeline::build(&self.placement_costs(&layout, &costs, &passes)),
        };
        let crashed = phase!(self.crashes(hooks, &ctx, &live, &place, timeline.end_s));
        // The gradients move to the all-reduce (a second holder would make it copy them).
        let grads = passes.iter_mut().map(|p| p.as_mut().map(|p| std::mem::take(&mut p.grads))).collect();
        let (reduced, reduce_bytes) = reduce(&layout, grads, crashed.as_ref(), draw);
        let next = self.next_cursor(cursor, global.len());
        let (update_s, overflows) = phase!(self.apply_updates(hooks, &ctx, &reduced, crashed.as_ref(), next));
        let survivors =
            passes.iter().enumerate().filter(|(r, p)| p.is_some() && crashed.as_ref().is_none_or(|c| !c.ranks.contains(r))).count();
        if let Some(c) = &crashed {
            let again: Vec<f64> = layout.bucket_bytes.iter().map(|&b| ring_allreduce_s(&self.parallel.network, b, survivors)).collect();
            costs = costs.after_crash(c.at_s, c.completed, &again);
        }
        costs.update_s = self.bucket_update_s(&layout, Some(update_s.clone()));
        let timeline = Timeline::build(&costs);
        self.step += 1;
        let mut tally = Tally::default();
        let kept = passes.iter().enumerate().filter(|(r, _)| crashed.as_ref().is_none_or(|c| !c.ranks.contains(r)));
        for p in kept.filter_map(|(_, p)| p.as_ref()) {
            tally.add(p.loss.loss, p.loss.correct, p.loss.count);
        }
        Ok(Flow::Done(StepStats {
            sim_s: timeline.end_s,
            comm_s: timeline.comm_s(),
            comm_bytes: broadcast_bytes + reduce_bytes,
            compute_s: passes.iter().flatten().map(|p| p.compute_s).sum(),
            update_s: update_s.iter().sum(),
            skipped: (n - tally.parts) as u32,
            loss_scale,
            overflows,
            ..self.step_stats(cursor.epoch, lr, &tally)
        }))
    }

    /// [`Hooks::before_step`] for every worker: which of them go on.
    fn start_workers(&mut self, hooks: &mut dyn Hooks, ctx: &dyn Fn(usize, Point) -> Ctx) -> Phase<Vec<bool>> {
        let mut live = vec![true; self.workers.len()];
        for (r, l) in live.iter_mut().enumerate() {
            *l = !hook_phase!(hooks.before_step(&ctx(r, Point::BeforeStep), &mut self.workers[r]), Point::BeforeStep, r);
        }
        Ok(ControlFlow::Continue(live))
    }

    /// DDP's broadcast of rank 0's buffers before the forward passes: its seconds and bytes.
    fn sync_buffers(&mut self, layout: &DataPlan) -> (f64, u64) {
        let n = self.workers.len();
        if self.parallel.sync != SyncKind::Ddp || n < 2 || layout.buffer_bytes == 0 {
            return (0.0, 0);
        }
        broadcast_buffers(&mut self.workers);
        (broadcast_s(&self.parallel.network, layout.buffer_bytes, n), layout.buffer_bytes * (n as u64 - 1))
    }

    /// Forward and backward of every worker that goes on, on its shard of `global`: with
    /// [`Hooks::rebalance`], the global batch is spread over the workers that go on.
    fn passes(
        &mut self,
        hooks: &mut dyn Hooks,
        ctx: &dyn Fn(usize, Point) -> Ctx,
        global: &[usize],
        live: &[bool],
    ) -> Phase<Vec<Option<Pass>>> {
        let shards = shards(global.len(), live, hooks.rebalance());
        let mut out = Vec::with_capacity(shards.len());
        for (r, range) in shards.into_iter().enumerate() {
            let Some(range) = range else {
                out.push(None);
                continue;
            };
            let shard = &global[range];
            let t = Instant::now();
            let (pass, c) = self.workers[r].forward_backward_with(
                &self.data.train,
                &self.data.norm,
                shard,
                self.config.augment,
                &self.device,
                hooks,
                &ctx(r, Point::Forward),
            );
            sync(&self.device)?;
            hooks.after_pass(&ctx(r, Point::AfterBackward), &mut self.workers[r]);
            let flops = 3.0 * self.fwd_flops[r] as f64 * shard.len() as f64;
            let compute_s = self.parallel.compute.flops_s(flops).unwrap_or_else(|| t.elapsed().as_secs_f64());
            let mut loss = LossInfo { loss: pass.loss, correct: pass.correct, count: pass.count };
            let mut grads = pass.grads;
            let left_out = hook_phase!(c, Point::Forward, r)
                || hook_phase!(hooks.after_loss(&ctx(r, Point::AfterLoss), &mut loss), Point::AfterLoss, r)
                || hook_phase!(hooks.after_backward(&ctx(r, Point::AfterBackward), &mut grads), Point::AfterBackward, r);
            out.push((!left_out).then_some(Pass { grads, loss, compute_s, images: shard.len() }));
        }
        Ok(ControlFlow::Continue(out))
    }

    /// The seconds of every piece of the step's work, for its timeline.
    fn step_costs(&self, layout: &DataPlan, start_s: f64, passes: &[Option<Pass>], update_estimate: Option<f64>) -> StepCosts {
        let k = passes.iter().flatten().count();
        let bytes = &layout.bucket_bytes;
        StepCosts {
            start_s,
            // Backward costs twice the forward pass (the modelled rate charges 3x the forward FLOPs).
            forward_s: passes.iter().map(|p| p.as_ref().map(|p| p.compute_s / 3.0)).collect(),
            backward_s: passes.iter().map(|p| p.as_ref().map_or(0.0, |p| 2.0 * p.compute_s / 3.0)).collect(),
            ready_frac: layout.ready_frac.clone(),
            reduce_s: bytes.iter().map(|&b| ring_allreduce_s(&self.parallel.network, b, k)).collect(),
            update_s: self.bucket_update_s(layout, update_estimate.map(|s| vec![s])),
            not_before_s: vec![0.0; bytes.len()],
        }
    }

    /// Seconds of each bucket's update: modelled (its state read and written, its gradients
    /// read, at the memory bandwidth) when compute is modelled; otherwise the slowest worker's
    /// measured update (`measured`), shared over the buckets by their size.
    fn bucket_update_s(&self, layout: &DataPlan, measured: Option<Vec<f64>>) -> Vec<f64> {
        let bytes = &layout.bucket_bytes;
        match measured.filter(|_| self.parallel.compute.gflops.is_none()) {
            Some(m) => {
                let total: u64 = bytes.iter().sum::<u64>().max(1);
                let slowest = m.iter().copied().fold(0.0, f64::max);
                bytes.iter().map(|&b| slowest * b as f64 / total as f64).collect()
            }
            None => modelled_bucket_updates(&self.parallel, &self.optimizer, bytes),
        }
    }

    /// The costs a crash is placed by when compute is measured: the cost model's, from the
    /// layers' FLOPs at [`PLACEMENT_GFLOPS`] (communication and updates as modelled), so that
    /// what a crash leaves behind depends on the configuration and seed, never on measured times.
    fn placement_costs(&self, layout: &DataPlan, costs: &StepCosts, passes: &[Option<Pass>]) -> StepCosts {
        let compute: Vec<Option<f64>> = passes
            .iter()
            .enumerate()
            .map(|(r, p)| p.as_ref().map(|p| 3.0 * self.fwd_flops[r] as f64 * p.images as f64 / (PLACEMENT_GFLOPS * 1e9)))
            .collect();
        StepCosts {
            forward_s: compute.iter().map(|c| c.map(|c| c / 3.0)).collect(),
            backward_s: compute.iter().map(|c| c.map_or(0.0, |c| 2.0 * c / 3.0)).collect(),
            update_s: modelled_bucket_updates(&self.parallel, &self.optimizer, &layout.bucket_bytes),
            ..costs.clone()
        }
    }

    /// [`Hooks::crash_time`] for every worker that started the step, on the timeline `place`,
    /// then [`Hooks::on_crash`] for each that crashes: a second crash in the step is taken to
    /// strike with the first. The crash's share of `place` is charged as that share of the
    /// step's own `step_s`.
    fn crashes(
        &mut self,
        hooks: &mut dyn Hooks,
        ctx: &dyn Fn(usize, Point) -> Ctx,
        live: &[bool],
        place: &Timeline,
        step_s: f64,
    ) -> Phase<Option<Crashed>> {
        let mut hit = Vec::new();
        for r in (0..live.len()).filter(|&r| live[r]) {
            if let Some(t) = hooks.crash_time(&ctx(r, Point::Crash), place) {
                hit.push((r, t.clamp(0.0, place.end_s)));
            }
        }
        let Some(&(first_rank, first)) = hit.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else { return Ok(ControlFlow::Continue(None)) };
        let completed = place.completed_buckets(first);
        let phase = place.phase_at(first_rank, first);
        // On the step's own timeline (modelled compute) the time is the step's as it stands.
        let at_s = match place.end_s {
            e if e == step_s => first,
            e if e > 0.0 => first / e * step_s,
            _ => 0.0,
        };
        let crash = Crash { at_s, step_s, completed_buckets: completed, buckets: place.buckets.len(), phase };
        for &(r, _) in &hit {
            match hooks.on_crash(&ctx(r, Point::Crash), &crash) {
                Control::Continue | Control::Skip => {}
                Control::Redo => return Ok(ControlFlow::Break(Flow::Redo(Some(at_s)))),
                Control::Stop => return Ok(ControlFlow::Break(Flow::Stop(Point::Crash, r, at_s))),
                Control::Restore(s) => return Ok(ControlFlow::Break(Flow::Restore(s, Point::Crash, r))),
            }
        }
        Ok(ControlFlow::Continue(Some(Crashed { ranks: hit.into_iter().map(|h| h.0).collect(), at_s, completed })))
    }

    /// Every surviving worker applies the reduced gradients (after its
    /// [`Hooks::after_allreduce`]); crashed workers apply nothing. Every cursor moves on.
    /// Returns each worker's update seconds (measured, or modelled) and how many workers' loss
    /// scalers skipped their update.
    fn apply_updates(
        &mut self,
        hooks: &mut dyn Hooks,
        ctx: &dyn Fn(usize, Point) -> Ctx,
        reduced: &Grads,
        crashed: Option<&Crashed>,
        next: crate::Cursor,
    ) -> Phase<(Vec<f64>, u32)> {
        let lr = self.lr();
        let mut opt = vec![0.0; self.workers.len()];
        let mut overflows = 0;
        for (r, o) in opt.iter_mut().enumerate() {
            if crashed.is_some_and(|c| c.ranks.contains(&r)) {
                self.workers[r].cursor = next;
                continue;
            }
            let mut g = reduced.clone();
            let apply = !hook_phase!(hooks.after_allreduce(&ctx(r, Point::AfterAllReduce), &mut g), Point::AfterAllReduce, r);
            // fp16: the scaler unscales the average and skips the update when it overflowed.
            let (g, overflow) = self.workers[r].unscale(g);
            overflows += u32::from(overflow);
            *o = self.update_worker(r, &g, apply && !overflow && !reduced.is_empty(), lr)?;
            self.workers[r].cursor = next;
            hook_phase!(hooks.after_optimizer_step(&ctx(r, Point::AfterOptimizerStep), &mut self.workers[r]), Point::AfterOptimizerStep, r);
        }
        if self.parallel.compute.gflops.is_none() {
            self.update_estimate_s = Some(opt.iter().copied().fold(0.0, f64::max));
        }
        Ok(ControlFlow::Continue((opt, overflows)))
    }
}

/// The part of a global batch of `len` images each worker computes (`None`: the worker is out
/// of the step): contiguous shards in rank order, over every worker, or, with `rebalance` when
/// some are out, over those that go on.
fn shards(len: usize, live: &[bool], rebalance: bool) -> Vec<Option<std::ops::Range<usize>>> {
    let n = live.len();
    let rebalance = rebalance && live.iter().any(|l| !l);
    let live_n = live.iter().filter(|l| **l).count();
    let mut i = 0;
    live.iter()
        .enumerate()
        .map(|(r, &l)| {
            let range = match (l, rebalance) {
                (false, _) => None,
                (true, true) => Some(shard_range(len, i, live_n)),
                (true, false) => Some(shard_range(len, r, n)),
            };
            i += usize::from(l);
            range
        })
        .collect()
}

impl Trainer {
    /// The images (indices into the training set) each worker reads in the next step when all
    /// of them go on, in rank order: the data that the next step's global batch spreads over
    /// the workers the job has now. In a pipeline, stage 0 reads the whole global batch (then
    /// cut into micro-batches in order) and the other stages read none.
    pub fn next_shards(&mut self) -> Vec<Vec<usize>> {
        let (_, global) = self.global_batch();
        if self.stage_ranges().is_some() {
            return std::iter::once(global).chain(std::iter::repeat_n(Vec::new(), self.workers.len() - 1)).collect();
        }
        shards(global.len(), &vec![true; self.workers.len()], false).into_iter().flatten().map(|r| global[r].to_vec()).collect()
    }
}

/// The all-reduce of the contributions (`None`: the worker did not contribute): every bucket
/// over every contributor, or, after a crash, the buckets completed before it over every
/// contributor (the crashed workers' gradients are in them) and the rest over the survivors,
/// each bucket summed in the order `draw` gives it. Returns the averages and the bytes sent.
fn reduce(layout: &DataPlan, contributions: Vec<Option<Grads>>, crashed: Option<&Crashed>, draw: OrderDraw) -> (Grads, u64) {
    let (plan, bytes) = (&layout.plan, &layout.bucket_bytes);
    let sent = |range: std::ops::Range<usize>, k: usize| -> u64 { bytes[range].iter().map(|b| 2 * (k as u64).saturating_sub(1) * b).sum() };
    let nb = plan.buckets.len();
    let Some(c) = crashed else {
        let all: Vec<Grads> = contributions.into_iter().flatten().collect();
        let k = all.len();
        return (plan.reduce_buckets(all, 0..nb, draw), sent(0..nb, k));
    };
    let survivors: Vec<Grads> =
        contributions.iter().enumerate().filter(|(r, _)| !c.ranks.contains(r)).filter_map(|(_, g)| g.clone()).collect();
    let all: Vec<Grads> = contributions.into_iter().flatten().collect();
    let (k_all, k_surv) = (all.len(), survivors.len());
    let mut out = plan.reduce_buckets(all, 0..c.completed, draw);
    out.extend(plan.reduce_buckets(survivors, c.completed..nb, draw));
    (out, sent(0..c.completed, k_all) + sent(c.completed..nb, k_surv))
}
