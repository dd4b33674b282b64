//! The pipeline step, as its phases: stages start (or are frozen) and may crash; the
//! micro-batches' inputs are read; each stage runs its schedule's forward and backward
//! operations in order, its messages passing through the hooks; each stage sums its gradients
//! over the micro-batches kept and applies one update; the makespan gives the step's time.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::prelude::*;
use resilab_models::Precision;

use super::{Flow, Phase, StepStats, Tally, Topology, Trainer, early, missing, sync};
use crate::allreduce::sum_grads;
use crate::hooks::{Control, Crash, Ctx, Hooks, LossInfo, Message, MessageKind, Point};
use crate::pipeline::{Op, PipeTimes, makespan};
use crate::timeline::Timeline;
use crate::{Error, Grads, Result, Worker, count_correct, forward_watched, named_grads};

/// Where in the step a hook is called from: the step, the number of stages and the attempt,
/// and the loss scale the gradients carry (fp16).
#[derive(Clone, Copy)]
struct At {
    step: u64,
    world: usize,
    attempt: u32,
    loss_scale: Option<f32>,
    precision: Precision,
}

impl At {
    fn ctx(self, rank: usize, micro_batch: Option<usize>, point: Point) -> Ctx {
        let (step, world, attempt, loss_scale, precision) = (self.step, self.world, self.attempt, self.loss_scale, self.precision);
        Ctx { step, rank, world, attempt, micro_batch, point, loss_scale, precision }
    }
}

/// Per stage `s` and micro-batch `m`, what the schedule's operations hand each other.
struct Schedule {
    /// The micro-batches' images and labels.
    inputs: Vec<(Tensor<4>, Tensor<1, Int>)>,
    /// `received[s][m]`: the activation stage `s` was sent.
    received: Vec<Vec<Option<Tensor<4>>>>,
    /// `leaves[s][m]`: that activation as a leaf of stage `s`'s graph, for its input gradient.
    leaves: Vec<Vec<Option<Tensor<4>>>>,
    /// `outputs[s][m]`: stage `s`'s output, kept for its backward pass.
    outputs: Vec<Vec<Option<Tensor<4>>>>,
    /// `grad_in[s][m]`: the gradient stage `s` was sent.
    grad_in: Vec<Vec<Option<Tensor<4>>>>,
    /// The last stage's loss of each micro-batch (divided by the number of micro-batches).
    losses: Vec<Option<Tensor<1>>>,
    /// `grads[s][m]`: stage `s`'s parameter gradients from micro-batch `m`.
    grads: Vec<Vec<Option<Grads>>>,
    /// Micro-batches a hook dropped: their remaining operations do nothing.
    dropped: Vec<bool>,
    times: PipeTimes,
    /// Losses and correct predictions of the micro-batches that reached the loss.
    tally: Tally,
    ce: CrossEntropyLoss,
}

impl Schedule {
    fn new(ns: usize, inputs: Vec<(Tensor<4>, Tensor<1, Int>)>, device: &Device) -> Self {
        let nm = inputs.len();
        let none4 = || vec![vec![None::<Tensor<4>>; nm]; ns];
        let zeros = || vec![vec![0.0f64; nm]; ns];
        Self {
            inputs,
            received: none4(),
            leaves: none4(),
            outputs: none4(),
            grad_in: none4(),
            losses: vec![None; nm],
            grads: vec![vec![None; nm]; ns],
            dropped: vec![false; nm],
            times: PipeTimes { forward: zeros(), backward: zeros(), act_bytes: vec![vec![0; nm]; ns], grad_bytes: vec![vec![0; nm]; ns] },
            tally: Tally::default(),
            ce: CrossEntropyLossConfig::new().init(device),
        }
    }

    /// Whether stage `s` of `ns` can run `op` now: its input has arrived (or is not needed).
    fn ready(&self, op: Op, s: usize, ns: usize) -> bool {
        match op {
            Op::Forward(m) => s == 0 || self.dropped[m] || self.received[s][m].is_some(),
            Op::Backward(m) => s + 1 == ns || self.dropped[m] || self.grad_in[s][m].is_some(),
        }
    }

    /// The micro-batches not dropped.
    fn kept(&self) -> Vec<usize> {
        (0..self.dropped.len()).filter(|&m| !self.dropped[m]).collect()
    }
}

impl Trainer {
    pub(super) fn pipeline_step(&mut self, hooks: &mut dyn Hooks, attempt: u32) -> Result<Flow> {
        let (cursor, global) = self.global_batch();
        let Topology::Pipeline { ops, .. } = &self.topology else {
            return Err(Error::State("pipeline step on data-parallel workers".into()));
        };
        let ops = Arc::clone(ops);
        let (ns, nm) = (self.workers.len(), self.parallel.micro_batches);
        let (mb, lr) = (self.config.batch_size / nm, self.lr());
        let loss_scale = self.workers.last().and_then(Worker::loss_scale);
        let precision = self.workers.first().map(|w| w.net.precision).unwrap_or_default();
        let at = At { step: self.step + 1, world: ns, attempt, loss_scale, precision };
        let mut frozen = phase!(self.start_stages(hooks, at));
        let inputs = self.micro_inputs(&global, nm, mb);
        let mut run = Schedule::new(ns, inputs, &self.device);
        phase!(self.run_schedule(&ops, &mut run, hooks, at));
        let kept = run.kept();
        let next = self.next_cursor(cursor, global.len());
        let grads = phase!(self.stage_grads(&mut run, &kept, &mut frozen, hooks, at));
        let loss_scale = self.workers.last().and_then(Worker::loss_scale).map(f64::from);
        let (grads, overflow) = self.unscale_stages(grads);
        let mut opt = vec![0.0f64; ns];
        for (s, g) in grads.into_iter().enumerate() {
            opt[s] = self.update_worker(s, &g, !frozen[s] && !overflow && !kept.is_empty(), lr)?;
            self.workers[s].cursor = next;
            hook!(
                hooks.after_optimizer_step(&at.ctx(s, None, Point::AfterOptimizerStep), &mut self.workers[s]),
                Point::AfterOptimizerStep,
                s
            );
        }
        self.model_stage_times(&mut run.times, mb);
        let (span, comm_s) = makespan(&ops, &run.times, &self.parallel.network);
        self.step += 1;
        Ok(Flow::Done(StepStats {
            sim_s: span + opt.iter().copied().fold(0.0, f64::max),
            comm_s,
            comm_bytes: run.times.act_bytes.iter().chain(&run.times.grad_bytes).flatten().sum(),
            compute_s: run.times.forward.iter().chain(&run.times.backward).flatten().sum(),
            update_s: opt.iter().sum(),
            skipped: (nm - kept.len()) as u32,
            loss_scale,
            overflows: if overflow { ns as u32 } else { 0 },
            // Every micro-batch kept counts in the mean, over the losses the last stage reported.
            ..self.step_stats(cursor.epoch, lr, &Tally { parts: kept.len(), images: kept.len() * mb, ..run.tally })
        }))
    }

    /// fp16: every stage's gradients unscaled by its scaler. An overflow in any stage skips
    /// every stage's update, and every scaler updates alike (the stages agree on the flag, as
    /// Megatron-LM's all-reduce of it across the pipeline makes them). Returns whether one
    /// overflowed.
    fn unscale_stages(&mut self, grads: Vec<Grads>) -> (Vec<Grads>, bool) {
        let mut found = false;
        let mut out = Vec::with_capacity(grads.len());
        for (w, g) in self.workers.iter().zip(grads) {
            out.push(match &w.scaler {
                Some(sc) => {
                    let (u, f) = crate::unscale(&g, sc.state.scale);
                    found |= f;
                    u
                }
                None => g,
            });
        }
        for sc in self.workers.iter_mut().filter_map(|w| w.scaler.as_mut()) {
            sc.update(found);
        }
        (out, found)
    }

    /// [`Hooks::before_step`] for every stage, then its crash (a pipeline step has no bucket
    /// timeline: a stage crashes before its work). Returns which stages are frozen (apply no
    /// update).
    fn start_stages(&mut self, hooks: &mut dyn Hooks, at: At) -> Phase<Vec<bool>> {
        let ns = self.workers.len();
        let mut frozen = Vec::with_capacity(ns);
        for s in 0..ns {
            frozen.push(hook_phase!(hooks.before_step(&at.ctx(s, None, Point::BeforeStep), &mut self.workers[s]), Point::BeforeStep, s));
        }
        for (s, f) in frozen.iter_mut().enumerate() {
            if hooks.crash_time(&at.ctx(s, None, Point::Crash), &Timeline::default()).is_some() {
                let crash = Crash { at_s: 0.0, step_s: 0.0, completed_buckets: 0, buckets: 0, phase: crate::Phase::Forward };
                hook_phase!(hooks.on_crash(&at.ctx(s, None, Point::Crash), &crash), Point::Crash, s);
                *f = true;
            }
        }
        Ok(ControlFlow::Continue(frozen))
    }

    /// The `nm` micro-batches of `mb` images of `global`, in order (augmented with stage 0's
    /// random stream when augmentation is on).
    fn micro_inputs(&mut self, global: &[usize], nm: usize, mb: usize) -> Vec<(Tensor<4>, Tensor<1, Int>)> {
        let (data, norm, device) = (&self.data.train, &self.data.norm, &self.device);
        (0..nm)
            .map(|m| {
                let idx = &global[m * mb..(m + 1) * mb];
                if self.config.augment {
                    data.batch_augmented(idx, norm, &mut self.workers[0].rng, device)
                } else {
                    data.batch(idx, norm, device)
                }
            })
            .collect()
    }

    /// Runs every stage's operations in its order, each as soon as its input has arrived.
    fn run_schedule(&mut self, ops: &[Vec<Op>], run: &mut Schedule, hooks: &mut dyn Hooks, at: At) -> Phase<()> {
        let ns = ops.len();
        let mut next = vec![0usize; ns];
        let (total, mut done) = (ops.iter().map(Vec::len).sum::<usize>(), 0);
        while done < total {
            let mut progressed = false;
            for s in 0..ns {
                while let Some(&op) = ops[s].get(next[s]) {
                    if !run.ready(op, s, ns) {
                        break;
                    }
                    (next[s], done, progressed) = (next[s] + 1, done + 1, true);
                    match op {
                        Op::Forward(m) if !run.dropped[m] => sub_phase!(self.stage_forward(run, s, m, hooks, at)),
                        Op::Backward(m) if !run.dropped[m] => sub_phase!(self.stage_backward(run, s, m, hooks, at)),
                        // A dropped micro-batch: nothing to compute.
                        _ => {}
                    }
                }
            }
            if !progressed {
                return Err(Error::State("pipeline schedule cannot make progress".into()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Stage `s`'s forward pass of micro-batch `m`, then its activation message to the next
    /// stage or, on the last stage, the loss.
    fn stage_forward(&mut self, run: &mut Schedule, s: usize, m: usize, hooks: &mut dyn Hooks, at: At) -> Phase<()> {
        let ns = self.workers.len();
        let t = Instant::now();
        let input = if s == 0 {
            run.inputs[m].0.clone()
        } else {
            let x = run.received[s][m].take().ok_or_else(|| missing("input", s, m))?.autodiff().require_grad();
            run.leaves[s][m] = Some(x.clone());
            x
        };
        let net = &mut self.workers[s].net;
        let blocks = net.blocks.len();
        let (y, c) = forward_watched(net, 0..blocks, input, hooks, &at.ctx(s, Some(m), Point::Forward));
        sync(&self.device)?;
        let dropped = hook_phase!(c, Point::Forward, s);
        run.times.forward[s][m] = t.elapsed().as_secs_f64();
        if dropped {
            run.dropped[m] = true;
        } else if s + 1 < ns {
            let mut msg = Message { kind: MessageKind::Activation, from: s, to: s + 1, tensor: y.clone().without_autodiff() };
            run.times.act_bytes[s][m] = 4 * msg.tensor.shape().num_elements() as u64;
            run.outputs[s][m] = Some(y);
            if hook_phase!(hooks.on_message(&at.ctx(s + 1, Some(m), Point::Message), &mut msg), Point::Message, s + 1) {
                run.dropped[m] = true;
            } else {
                run.received[s + 1][m] = Some(msg.tensor);
            }
        } else {
            sub_phase!(self.stage_loss(run, y, s, m, hooks, at));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The last stage's loss of micro-batch `m` from its output `y`, through
    /// [`Hooks::after_loss`].
    fn stage_loss(&mut self, run: &mut Schedule, y: Tensor<4>, s: usize, m: usize, hooks: &mut dyn Hooks, at: At) -> Phase<()> {
        let t = Instant::now();
        let [b, k, _, _] = y.dims();
        let logits = y.reshape([b, k]);
        let labels = run.inputs[m].1.clone();
        let correct = count_correct(logits.clone(), labels.clone());
        let l = run.ce.forward(logits, labels);
        let mut info = LossInfo { loss: f64::from(l.clone().into_scalar::<f32>()), correct, count: b };
        run.times.forward[s][m] += t.elapsed().as_secs_f64();
        if hook_phase!(hooks.after_loss(&at.ctx(s, Some(m), Point::AfterLoss), &mut info), Point::AfterLoss, s) {
            run.dropped[m] = true;
        } else {
            run.tally.add(info.loss, info.correct, b);
            let l = l.div_scalar(run.inputs.len() as f64);
            // fp16: the loss times the last stage's scale, so that every gradient comes back scaled.
            run.losses[m] = Some(match self.workers[s].loss_scale() {
                Some(scale) => l.mul_scalar(scale),
                None => l,
            });
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Stage `s`'s backward pass of micro-batch `m` (from the loss, or from the gradient the
    /// next stage sent), then its input gradient's message to the previous stage.
    fn stage_backward(&mut self, run: &mut Schedule, s: usize, m: usize, hooks: &mut dyn Hooks, at: At) -> Phase<()> {
        let t = Instant::now();
        let mut g = if s + 1 == self.workers.len() {
            run.losses[m].take().ok_or_else(|| missing("loss", s, m))?.backward()
        } else {
            let upstream = run.grad_in[s][m].take().ok_or_else(|| missing("gradient message", s, m))?;
            let y = run.outputs[s][m].take().ok_or_else(|| missing("output", s, m))?;
            resilab_models::kernels::backward_from(y, upstream, self.workers[s].net.kernels)
        };
        let gx = match run.leaves[s][m].take() {
            Some(x) => Some(x.grad_remove(&mut g).ok_or_else(|| missing("input gradient", s, m))?),
            None => None,
        };
        run.grads[s][m] = Some(named_grads(&self.workers[s].net, g));
        sync(&self.device)?;
        run.times.backward[s][m] = t.elapsed().as_secs_f64();
        if let Some(gx) = gx {
            let mut msg = Message { kind: MessageKind::Gradient, from: s, to: s - 1, tensor: gx };
            run.times.grad_bytes[s][m] = 4 * msg.tensor.shape().num_elements() as u64;
            if hook_phase!(hooks.on_message(&at.ctx(s - 1, Some(m), Point::Message), &mut msg), Point::Message, s - 1) {
                run.dropped[m] = true;
            } else {
                run.grad_in[s - 1][m] = Some(msg.tensor);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Each stage's gradients summed over the micro-batches `kept` (scaled up when some were
    /// dropped), through [`Hooks::after_backward`]; a stage whose hook skips is `frozen`.
    fn stage_grads(&mut self, run: &mut Schedule, kept: &[usize], frozen: &mut [bool], hooks: &mut dyn Hooks, at: At) -> Phase<Vec<Grads>> {
        let nm = run.dropped.len();
        let mut out = Vec::with_capacity(frozen.len());
        // Every stage's passes are done: the hooks see each stage before any of them can end the step.
        for (s, w) in self.workers.iter_mut().enumerate() {
            hooks.after_pass(&at.ctx(s, None, Point::AfterBackward), w);
        }
        for (s, f) in frozen.iter_mut().enumerate() {
            let parts = kept.iter().filter_map(|&m| run.grads[s][m].take()).collect();
            let mut g = sum_grads(parts, self.workers[s].net.kernels);
            if !kept.is_empty() && kept.len() < nm {
                let scale = nm as f64 / kept.len() as f64;
                g = g.into_iter().map(|(k, t)| (k, t.mul_scalar(scale))).collect();
            }
            if hook_phase!(hooks.after_backward(&at.ctx(s, None, Point::AfterBackward), &mut g), Point::AfterBackward, s) {
                *f = true;
            }
            out.push(g);
        }
        Ok(ControlFlow::Continue(out))
    }

    /// With modelled compute, every forward and backward that ran takes its modelled time
    /// (backward twice the forward) for micro-batches of `mb` images.
    fn model_stage_times(&self, times: &mut PipeTimes, mb: usize) {
        let Some(per_image) = self.parallel.compute.gflops.map(|g| 1.0 / (g * 1e9)) else { return };
        for (s, (fwd, bwd)) in times.forward.iter_mut().zip(&mut times.backward).enumerate() {
            let f = self.fwd_flops[s] as f64 * mb as f64 * per_image;
            for (tf, tb) in fwd.iter_mut().zip(bwd.iter_mut()) {
                *tf = if *tf > 0.0 { f } else { 0.0 };
                *tb = if *tb > 0.0 { 2.0 * f } else { 0.0 };
            }
        }
    }
}
