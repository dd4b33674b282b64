//! Simulated data-parallel and pipeline-parallel training: equivalence with one worker,
//! divergence after faults, DDP vs Horovod buffers, and what hooks can do.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeMap;
use std::sync::Arc;

use burn::prelude::*;
use resilab_data::Split;
use resilab_models::{ModelConfig, Net, map_params};
use resilab_testkit::toy::{RESNET8, Toy, VGG11};
use resilab_train::{
    AllReduceKind, Control, Ctx, Grads, Hooks, HostTensor, Message, MessageKind, OptimizerConfig, ParallelConfig, ParallelMode,
    PipeSchedule, StepOutcome, SyncKind, TrainConfig, TrainSpec, Trainer, Worker, WorkerState,
};

const BATCH: usize = 32;

/// The toy's images: 128 + 32 of 16x16.
fn data() -> Arc<Split> {
    Toy::default().data()
}

/// VGG-11 without BatchNorm (every replica computes exactly what one worker would on its shard).
fn plain() -> ModelConfig {
    VGG11
}

fn with_bn() -> ModelConfig {
    RESNET8
}

fn trainer(model: &ModelConfig, parallel: ParallelConfig, data: Arc<Split>) -> Trainer {
    let (net, data, device) = Toy { model: model.clone(), ..Toy::default() }.parts_on(data);
    let train = TrainConfig { steps: Some(100), batch_size: BATCH, ..TrainConfig::default() };
    let optimizer = OptimizerConfig { lr: 0.05, momentum: 0.9, ..OptimizerConfig::default() };
    Trainer::new(net, TrainSpec { train, optimizer, parallel, seed: 5, ..TrainSpec::default() }, data, device).unwrap()
}

fn data_parallel(workers: usize, sync: SyncKind, allreduce: AllReduceKind) -> ParallelConfig {
    ParallelConfig { workers, sync, allreduce, ..ParallelConfig::default() }
}

fn pipeline(stages: usize, micro_batches: usize, schedule: PipeSchedule) -> ParallelConfig {
    ParallelConfig { mode: ParallelMode::Pipeline, stages, micro_batches, schedule, ..ParallelConfig::default() }
}

fn params(net: &Net) -> BTreeMap<String, HostTensor> {
    WorkerState::capture(&Worker::new(0, net.clone(), 0)).params
}

/// Largest absolute difference over all values, relative to the largest magnitude.
fn max_rel_diff(a: &BTreeMap<String, HostTensor>, b: &BTreeMap<String, HostTensor>) -> f32 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let (mut diff, mut scale) = (0.0f32, 0.0f32);
    for (name, t) in a {
        for (x, y) in t.values.iter().zip(&b[name].values) {
            diff = diff.max((x - y).abs());
            scale = scale.max(x.abs());
        }
    }
    diff / scale
}

fn run(t: &mut Trainer, steps: usize) {
    for _ in 0..steps {
        t.step().unwrap();
    }
}

#[test]
fn data_parallel_matches_one_worker_on_the_same_global_batch() {
    let data = data();
    let mut single = trainer(&plain(), ParallelConfig::default(), data.clone());
    run(&mut single, 3);
    let reference = params(&single.model());
    for (n, sync, kind) in [
        (2, SyncKind::Ddp, AllReduceKind::Ring),
        (4, SyncKind::Ddp, AllReduceKind::Ring),
        (4, SyncKind::Horovod, AllReduceKind::Ring),
        (8, SyncKind::Ddp, AllReduceKind::RankOrder),
    ] {
        let mut t = trainer(&plain(), data_parallel(n, sync, kind), data.clone());
        run(&mut t, 3);
        // Tolerance 1e-6 of the largest parameter after 3 SGD steps (measured: 3e-8 to 7e-8):
        // float32 sums taken in another order.
        let d = max_rel_diff(&reference, &params(&t.model()));
        eprintln!("{n} workers {sync:?} {kind:?}: max relative parameter difference {d:e}");
        assert!(d < 1e-6, "{n} workers {sync:?} {kind:?}: relative difference {d}");
        // Every replica applied the same update.
        for w in &t.workers[1..] {
            assert!(WorkerState::capture(w).params == WorkerState::capture(&t.workers[0]).params);
        }
    }
}

#[test]
fn data_parallel_runs_are_bit_identical() {
    let data = data();
    let states: Vec<_> = (0..2)
        .map(|_| {
            let mut t = trainer(&with_bn(), data_parallel(4, SyncKind::Ddp, AllReduceKind::Ring), data.clone());
            run(&mut t, 3);
            t.snapshot()
        })
        .collect();
    assert!(states[0] == states[1]);
}

/// Captures the gradients every worker or stage is about to contribute.
#[derive(Default)]
struct GradTap(BTreeMap<String, Vec<f32>>);

impl Hooks for GradTap {
    fn after_backward(&mut self, _: &Ctx, grads: &mut Grads) -> Control {
        for (name, g) in grads.iter() {
            self.0.insert(name.clone(), g.clone().into_data().try_to_vec::<f32>().unwrap());
        }
        Control::Continue
    }
}

#[test]
fn pipeline_gradients_match_no_pipeline() {
    let data = data();
    let mut single = trainer(&plain(), ParallelConfig::default(), data.clone());
    let mut reference = GradTap::default();
    single.step_with(&mut reference).unwrap();
    for (s, m, sched) in [(4, 8, PipeSchedule::Gpipe), (3, 4, PipeSchedule::OneFOneB), (2, 1, PipeSchedule::Gpipe)] {
        let mut t = trainer(&plain(), pipeline(s, m, sched), data.clone());
        assert_eq!(t.workers.len(), s);
        let mut tap = GradTap::default();
        let out = t.step_with(&mut tap).unwrap();
        assert!(matches!(out, StepOutcome::Done(_)));
        assert_eq!(tap.0.keys().collect::<Vec<_>>(), reference.0.keys().collect::<Vec<_>>());
        // Tolerance 1e-6 of the largest gradient (measured: 1e-7): micro-batch means summed in
        // float32 against one mean over the batch.
        let scale = reference.0.values().flatten().fold(0.0f32, |a, v| a.max(v.abs()));
        for (name, g) in &tap.0 {
            let d = g.iter().zip(&reference.0[name]).fold(0.0f32, |a, (x, y)| a.max((x - y).abs()));
            eprintln!("{s}x{m} {sched:?} {name}: max gradient difference {:e} of scale", d / scale);
            assert!(d <= 1e-6 * scale, "{s}x{m} {sched:?} {name}: max difference {d} (scale {scale})");
        }
    }
}

#[test]
fn pipeline_stages_hold_disjoint_blocks_and_evaluate_as_one_model() {
    let data = data();
    let t = trainer(&plain(), pipeline(3, 2, PipeSchedule::Gpipe), data.clone());
    let single = trainer(&plain(), ParallelConfig::default(), data);
    let ranges = t.stage_ranges().unwrap().to_vec();
    assert_eq!(ranges.len(), 3);
    assert_eq!(ranges.last().unwrap().end, single.model().blocks.len());
    let mut names: Vec<String> = t.workers.iter().flat_map(|w| params(&w.net).into_keys()).collect();
    names.sort();
    assert_eq!(names, params(&single.model()).into_keys().collect::<Vec<_>>());
    assert_eq!(t.evaluate(), single.evaluate());
}

fn flip_first_value(net: Net, name: &str, bit: u32) -> Net {
    map_params(net, |info, t| {
        (info.name == name).then(|| {
            let mut v = t.into_data().try_to_vec::<f32>().unwrap();
            v[0] = f32::from_bits(v[0].to_bits() ^ (1 << bit));
            let n = v.len();
            Tensor::from_data(TensorData::new(v, [n]), &Device::flex().autodiff())
        })
    })
}

/// Flips one bit of one worker's weight (or of its gradient, before the all-reduce) at one step.
struct Flip {
    step: u64,
    rank: usize,
    name: &'static str,
    in_gradient: bool,
}

impl Hooks for Flip {
    fn before_step(&mut self, ctx: &Ctx, w: &mut Worker) -> Control {
        if !self.in_gradient && ctx.step == self.step && ctx.rank == self.rank {
            w.net = flip_first_value(w.net.clone(), self.name, 20);
        }
        Control::Continue
    }
    fn after_backward(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        if self.in_gradient && ctx.step == self.step && ctx.rank == self.rank {
            let g = grads.get_mut(self.name).unwrap();
            let mut v = g.clone().into_data().try_to_vec::<f32>().unwrap();
            v[0] = f32::from_bits(v[0].to_bits() ^ (1 << 29));
            *g = Tensor::from_data(TensorData::new(v.clone(), [v.len()]), &g.device());
        }
        Control::Continue
    }
}

fn replica_params(t: &Trainer) -> Vec<BTreeMap<String, HostTensor>> {
    t.workers.iter().map(|w| WorkerState::capture(w).params).collect()
}

#[test]
fn a_flipped_replica_diverges_and_a_flipped_gradient_reaches_every_replica() {
    let data = data();
    let weight = "features.0.conv.weight";
    let mut clean = trainer(&plain(), data_parallel(4, SyncKind::Ddp, AllReduceKind::Ring), data.clone());
    run(&mut clean, 2);
    let clean = replica_params(&clean);

    let mut t = trainer(&plain(), data_parallel(4, SyncKind::Ddp, AllReduceKind::Ring), data.clone());
    let mut hook = Flip { step: 2, rank: 2, name: weight, in_gradient: false };
    t.step_with(&mut hook).unwrap();
    t.step_with(&mut hook).unwrap();
    let p = replica_params(&t);
    assert!(p[2][weight] != p[0][weight], "the flipped replica must differ after the step");
    assert!(p[0] == p[1] && p[1] == p[3], "the other replicas stay identical");
    // Its gradient went into the average: the healthy replicas are not the clean run's either.
    assert!(p[0] != clean[0]);

    let mut t = trainer(&plain(), data_parallel(4, SyncKind::Ddp, AllReduceKind::Ring), data);
    let mut hook = Flip { step: 2, rank: 1, name: weight, in_gradient: true };
    t.step_with(&mut hook).unwrap();
    t.step_with(&mut hook).unwrap();
    let p = replica_params(&t);
    assert!(p.iter().all(|r| *r == p[0]), "a gradient flip before the all-reduce reaches every replica alike");
    assert!(p[0][weight] != clean[0][weight]);
}

/// Adds 1000 to the first running mean of one rank after its optimizer step.
struct CorruptRunningMean {
    step: u64,
    rank: usize,
}

const RUNNING_MEAN: &str = "layer1.0.bn1.running_mean";

impl Hooks for CorruptRunningMean {
    fn after_optimizer_step(&mut self, ctx: &Ctx, w: &mut Worker) -> Control {
        if ctx.step == self.step && ctx.rank == self.rank {
            w.net = map_params(w.net.clone(), |info, t| (info.name == RUNNING_MEAN).then(|| t.add_scalar(1000.0)));
        }
        Control::Continue
    }
}

fn running_mean_after(sync: SyncKind, rank: usize) -> Vec<f32> {
    let mut t = trainer(&with_bn(), data_parallel(4, sync, AllReduceKind::Ring), data());
    let mut hook = CorruptRunningMean { step: 1, rank };
    t.step_with(&mut hook).unwrap();
    t.step_with(&mut hook).unwrap();
    replica_params(&t).iter().map(|p| p[RUNNING_MEAN].values[0]).collect()
}

#[test]
fn ddp_spreads_rank_zero_buffers_and_erases_others_horovod_keeps_them_local() {
    // After the corruption at step 1, step 2's forward decides where it ends up.
    let big = |v: &[f32]| v.iter().map(|x| x.abs() > 100.0).collect::<Vec<_>>();
    assert_eq!(big(&running_mean_after(SyncKind::Ddp, 0)), [true; 4], "DDP broadcasts rank 0's running stats");
    assert_eq!(big(&running_mean_after(SyncKind::Ddp, 2)), [false; 4], "DDP overwrites rank 2's running stats");
    assert_eq!(big(&running_mean_after(SyncKind::Horovod, 0)), [true, false, false, false], "Horovod keeps buffers local");
    assert_eq!(big(&running_mean_after(SyncKind::Horovod, 2)), [false, false, true, false]);
}

/// Corrupts worker 1's gradient on the first attempt of step 2 and asks for a redo.
struct CorruptThenRedo;

impl Hooks for CorruptThenRedo {
    fn undo(&self) -> bool {
        true
    }
    fn after_backward(&mut self, ctx: &Ctx, grads: &mut Grads) -> Control {
        if ctx.step == 2 && ctx.rank == 1 && ctx.attempt == 0 {
            for g in grads.values_mut() {
                *g = g.clone().mul_scalar(f32::NAN);
            }
        }
        Control::Continue
    }
    fn after_optimizer_step(&mut self, ctx: &Ctx, _: &mut Worker) -> Control {
        if ctx.step == 2 && ctx.attempt == 0 && ctx.rank == ctx.world - 1 { Control::Redo } else { Control::Continue }
    }
}

#[test]
fn hooks_can_redo_skip_stop_and_restore() {
    let data = data();
    let parallel = data_parallel(2, SyncKind::Ddp, AllReduceKind::Ring);
    let mut clean = trainer(&with_bn(), parallel.clone(), data.clone());
    run(&mut clean, 3);

    // Redo: the corrupted first attempt leaves no trace.
    let mut t = trainer(&with_bn(), parallel.clone(), data.clone());
    let mut redos = 0;
    for _ in 0..3 {
        if let StepOutcome::Done(s) = t.step_with(&mut CorruptThenRedo).unwrap() {
            redos += s.redos;
        }
    }
    assert_eq!(redos, 1);
    assert!(t.snapshot() == clean.snapshot());

    // Skip: worker 1's contribution is left out; both replicas still apply the same update.
    struct SkipOne;
    impl Hooks for SkipOne {
        fn after_backward(&mut self, ctx: &Ctx, _: &mut Grads) -> Control {
            if ctx.rank == 1 { Control::Skip } else { Control::Continue }
        }
    }
    let mut t = trainer(&plain(), parallel.clone(), data.clone());
    let StepOutcome::Done(s) = t.step_with(&mut SkipOne).unwrap() else { panic!("step did not complete") };
    assert_eq!(s.skipped, 1);
    let p = replica_params(&t);
    assert!(p[0] == p[1]);

    // Stop: the step does not complete.
    struct StopAtLoss;
    impl Hooks for StopAtLoss {
        fn after_loss(&mut self, _: &Ctx, _: &mut resilab_train::LossInfo) -> Control {
            Control::Stop
        }
    }
    let mut t = trainer(&plain(), parallel.clone(), data.clone());
    let before = t.snapshot();
    assert!(matches!(t.step_with(&mut StopAtLoss).unwrap(), StepOutcome::Stopped { rank: 0, .. }));
    assert_eq!(t.step, 0);
    assert!(t.snapshot() == before);

    // Restore: a snapshot taken earlier replaces the state.
    struct RestoreTo(resilab_train::TrainState);
    impl Hooks for RestoreTo {
        fn after_optimizer_step(&mut self, _: &Ctx, _: &mut Worker) -> Control {
            Control::Restore(Box::new(self.0.clone()))
        }
    }
    let mut t = trainer(&plain(), parallel, data);
    run(&mut t, 1);
    let saved = t.snapshot();
    assert!(matches!(t.step_with(&mut RestoreTo(saved.clone())).unwrap(), StepOutcome::Restored { .. }));
    assert!(t.snapshot() == saved);
}

/// Scales one activation message, or drops one micro-batch.
struct OnMessage {
    scale: Option<f32>,
    drop: bool,
}

impl Hooks for OnMessage {
    fn on_message(&mut self, ctx: &Ctx, msg: &mut Message) -> Control {
        if msg.kind == MessageKind::Activation && msg.from == 0 && ctx.micro_batch == Some(1) {
            if let Some(s) = self.scale {
                msg.tensor = msg.tensor.clone().mul_scalar(s);
            }
            if self.drop {
                return Control::Skip;
            }
        }
        Control::Continue
    }
}

#[test]
fn pipeline_messages_can_be_corrupted_or_dropped() {
    let data = data();
    let mut clean = trainer(&plain(), pipeline(2, 4, PipeSchedule::Gpipe), data.clone());
    run(&mut clean, 1);
    let clean = replica_params(&clean);

    let mut t = trainer(&plain(), pipeline(2, 4, PipeSchedule::Gpipe), data.clone());
    t.step_with(&mut OnMessage { scale: Some(64.0), drop: false }).unwrap();
    let p = replica_params(&t);
    // The corrupted activation changes the receiving stage's update and, through the
    // gradient it sends back, the sender's.
    assert!(p[1] != clean[1] && p[0] != clean[0]);

    let mut t = trainer(&plain(), pipeline(2, 4, PipeSchedule::Gpipe), data);
    let StepOutcome::Done(s) = t.step_with(&mut OnMessage { scale: None, drop: true }).unwrap() else { panic!("step did not complete") };
    assert_eq!(s.skipped, 1);
    assert!(replica_params(&t)[0] != clean[0]);
}

#[test]
fn simulated_time_counts_compute_and_communication() {
    let data = data();
    let mut t = trainer(&plain(), data_parallel(4, SyncKind::Ddp, AllReduceKind::Ring), data.clone());
    let s = t.step().unwrap();
    let bytes: u64 = 4 * t.model().num_trainable() as u64;
    assert_eq!(s.comm_bytes, 2 * 3 * bytes, "ring all-reduce moves 2 (N-1) times the gradient");
    assert!(s.comm_s > 0.0 && s.sim_s > s.comm_s);
    let mut p = trainer(&plain(), pipeline(2, 4, PipeSchedule::Gpipe), data);
    let s = p.step().unwrap();
    assert!(s.comm_bytes > 0 && s.sim_s > 0.0);
}
