//! Snapshot and restore of the whole training state: resuming is bit-exact.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::sync::Arc;

use resilab_data::Split;
use resilab_testkit::toy::{RESNET8, Toy};
use resilab_train::{
    OptimizerConfig, OptimizerKind, ParallelConfig, ParallelMode, ScheduleConfig, ScheduleKind, TrainConfig, TrainSpec, Trainer,
};

/// The toy ResNet-8 on 96 + 32 images from seed 1, initialised from seed 9.
const TOY: Toy = Toy { model: RESNET8, size: 16, data_seed: 1, train_images: 96, test_images: 32, init_seed: 9 };

fn data() -> Arc<Split> {
    TOY.data()
}

fn trainer(kind: OptimizerKind, parallel: ParallelConfig, data: Arc<Split>) -> Trainer {
    let (net, data, device) = TOY.parts_on(data);
    let train = TrainConfig { steps: Some(10), batch_size: 32, augment: true, ..TrainConfig::default() };
    let optimizer =
        OptimizerConfig { kind, lr: if kind == OptimizerKind::Adam { 1e-3 } else { 0.05 }, weight_decay: 1e-4, ..Default::default() };
    let schedule = ScheduleConfig { kind: ScheduleKind::Cosine, ..Default::default() };
    Trainer::new(net, TrainSpec { train, optimizer, schedule, parallel, seed: 5 }, data, device).unwrap()
}

fn resume_is_exact(kind: OptimizerKind, parallel: ParallelConfig) {
    let data = data();
    let mut straight = trainer(kind, parallel.clone(), data.clone());
    for _ in 0..10 {
        straight.step().unwrap();
    }
    let mut first = trainer(kind, parallel.clone(), data.clone());
    for _ in 0..5 {
        first.step().unwrap();
    }
    let saved = first.snapshot();
    drop(first);
    let mut resumed = trainer(kind, parallel, data);
    resumed.restore(&saved).unwrap();
    for _ in 0..5 {
        resumed.step().unwrap();
    }
    let (a, b) = (straight.snapshot(), resumed.snapshot());
    assert_eq!(a.step, 10);
    // 3 steps per epoch: the runs crossed epoch boundaries, and augmentation drew from the RNG.
    assert_eq!(a.workers[0].cursor.epoch, 3);
    assert!(a.workers[0].rng.word_pos > 0);
    assert!(a == b, "resumed state differs from the straight run");
}

#[test]
fn sgd_resume_is_bit_exact() {
    resume_is_exact(OptimizerKind::Sgd, ParallelConfig::default());
}

#[test]
fn adam_resume_is_bit_exact() {
    resume_is_exact(OptimizerKind::Adam, ParallelConfig::default());
}

#[test]
fn two_worker_resume_is_bit_exact() {
    resume_is_exact(OptimizerKind::Sgd, ParallelConfig { workers: 2, ..ParallelConfig::default() });
}

#[test]
fn pipeline_resume_is_bit_exact() {
    resume_is_exact(
        OptimizerKind::Adam,
        ParallelConfig { mode: ParallelMode::Pipeline, stages: 3, micro_batches: 4, ..ParallelConfig::default() },
    );
}

#[test]
fn a_state_that_does_not_fit_is_refused_and_nothing_changes() {
    let data = data();
    let mut t = trainer(OptimizerKind::Sgd, ParallelConfig::default(), data);
    t.step().unwrap();
    let before = t.snapshot();
    let mut bad = before.clone();
    bad.workers[0].params.get_mut("layer1.0.conv1.weight").unwrap().values.pop();
    bad.workers[0].params.remove("classifier.fc.bias");
    let err = t.restore(&bad).unwrap_err().to_string();
    assert!(err.contains("layer1.0.conv1.weight") && err.contains("missing classifier.fc.bias"), "{err}");
    assert!(t.snapshot() == before);
}

/// The state after two steps on two workers, with replica 1's first weight moved by 1.
fn replica_1_apart(parallel: ParallelConfig, data: &Arc<Split>) -> resilab_train::TrainState {
    let mut t = trainer(OptimizerKind::Sgd, parallel, data.clone());
    for _ in 0..2 {
        t.step().unwrap();
    }
    let mut state = t.snapshot();
    let w = &mut state.workers[1];
    let name = w.params.keys().find(|k| k.ends_with("weight")).unwrap().clone();
    w.params.get_mut(&name).unwrap().values[0] += 1.0;
    state
}

#[test]
fn a_restart_broadcasts_what_the_configuration_says_from_rank_0() {
    use resilab_train::{Broadcast, SyncKind};
    let data = data();
    let two = |sync, b| ParallelConfig { workers: 2, sync, broadcast_on_restart: b, ..ParallelConfig::default() };
    assert_eq!(two(SyncKind::Ddp, None).broadcast(), Broadcast::Parameters, "DDP broadcasts rank 0's parameters");
    assert_eq!(two(SyncKind::Horovod, None).broadcast(), Broadcast::ParametersAndOptimizer, "Horovod scripts broadcast both");
    // A state whose replica 1 differs from replica 0 in a weight and in its momentum.
    let mut state = replica_1_apart(two(SyncKind::Ddp, Some(Broadcast::Nothing)), &data);
    let st = state.workers[1].optim.values_mut().next().unwrap();
    st.buffers.values_mut().next().unwrap().values[0] += 1.0;
    let (p0, o0) = (state.workers[0].params.clone(), state.workers[0].optim.clone());
    let restored = |b: Option<Broadcast>| {
        let mut t = trainer(OptimizerKind::Sgd, two(SyncKind::Ddp, b), data.clone());
        t.restore(&state).unwrap();
        t.snapshot().workers[1].clone()
    };
    let nothing = restored(Some(Broadcast::Nothing));
    assert!(nothing.params != p0 && nothing.optim != o0, "each replica keeps its own file");
    let params = restored(None);
    assert!(params.params == p0, "parameters from rank 0 (the DDP default)");
    assert!(params.optim != o0, "the optimizer state stays replica 1's");
    let both = restored(Some(Broadcast::ParametersAndOptimizer));
    assert!(both.params == p0 && both.optim == o0);
}

#[test]
fn an_exact_restore_keeps_every_replica_as_it_was() {
    let data = data();
    let two = ParallelConfig { workers: 2, ..ParallelConfig::default() };
    let state = replica_1_apart(two.clone(), &data);
    let mut exact = trainer(OptimizerKind::Sgd, two.clone(), data.clone());
    exact.restore_exact(&state).unwrap();
    assert!(exact.snapshot() == state, "no broadcast: replica 1 keeps its own weight");
    let mut restarted = trainer(OptimizerKind::Sgd, two, data);
    restarted.restore(&state).unwrap();
    assert!(restarted.snapshot().workers[1].params == state.workers[0].params, "a restart broadcasts rank 0's parameters");
}
