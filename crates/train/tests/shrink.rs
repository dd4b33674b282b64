//! A data-parallel job that loses workers for good and goes on with the others: the data of
//! the epoch is spread over the workers left, every image once, the same way on every run, and
//! the batch and learning rate follow the rule asked for.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use resilab_testkit::toy::{Toy, VGG11};
use resilab_train::{BatchRule, OptimizerConfig, ParallelConfig, TrainConfig, TrainSpec, Trainer};

const BATCH: usize = 32;
/// 15 global batches of 32: after 3 steps, 384 images are left, which 12 batches of 32 or 16
/// of 24 (three workers keeping 8 each) cover exactly.
const TRAIN: usize = 480;

fn trainer(workers: usize) -> Trainer {
    // The toy VGG-11 on TRAIN + 16 images of 8x8.
    let (net, data, device) = Toy { model: VGG11, size: 8, train_images: TRAIN, test_images: 16, ..Toy::default() }.parts();
    let train = TrainConfig { steps: Some(100), batch_size: BATCH, ..TrainConfig::default() };
    let optimizer = OptimizerConfig { lr: 0.05, momentum: 0.9, ..OptimizerConfig::default() };
    let parallel = ParallelConfig { workers, ..ParallelConfig::default() };
    Trainer::new(net, TrainSpec { train, optimizer, parallel, seed: 5, ..TrainSpec::default() }, data, device).unwrap()
}

/// Trains the first epoch, removing worker 1 after 3 steps; returns every step's shards.
fn first_epoch(rule: BatchRule) -> Vec<Vec<Vec<usize>>> {
    let mut t = trainer(4);
    let mut steps = Vec::new();
    while t.workers[0].cursor.epoch == 0 {
        if t.step == 3 {
            t.remove_worker(1, rule).unwrap();
        }
        steps.push(t.next_shards());
        t.step().unwrap();
    }
    steps
}

#[test]
fn a_shrunk_job_reads_every_image_of_the_epoch_once_the_same_way_every_run() {
    for (rule, steps_after, per_worker) in [(BatchRule::KeepGlobal, 12, vec![11, 11, 10]), (BatchRule::KeepPerWorker, 16, vec![8, 8, 8])] {
        let epoch = first_epoch(rule);
        assert_eq!(epoch.len(), 3 + steps_after, "{rule:?}: steps in the epoch");
        assert!(epoch[..3].iter().all(|s| s.iter().map(Vec::len).collect::<Vec<_>>() == [8, 8, 8, 8]));
        assert!(epoch[3..].iter().all(|s| s.iter().map(Vec::len).collect::<Vec<_>>() == per_worker), "{rule:?}: shards after the loss");
        let mut seen: Vec<usize> = epoch.iter().flatten().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..TRAIN).collect::<Vec<_>>(), "{rule:?}: every image of the epoch exactly once");
        assert_eq!(first_epoch(rule), epoch, "{rule:?}: the same shards on every run");
    }
}

#[test]
fn keeping_the_per_worker_batch_scales_the_learning_rate_linearly() {
    let (mut kept, mut shrunk) = (trainer(4), trainer(4));
    kept.remove_worker(3, BatchRule::KeepGlobal).unwrap();
    shrunk.remove_worker(3, BatchRule::KeepPerWorker).unwrap();
    let full = trainer(4);
    assert_eq!((kept.global_batch_size(), kept.lr_scale(), kept.lr()), (BATCH, 1.0, full.lr()));
    assert_eq!((shrunk.global_batch_size(), shrunk.lr_scale()), (24, 0.75));
    assert!((shrunk.lr() - 0.75 * full.lr()).abs() < 1e-15, "{} vs {}", shrunk.lr(), full.lr());
    shrunk.remove_worker(0, BatchRule::KeepPerWorker).unwrap();
    assert_eq!((shrunk.global_batch_size(), shrunk.lr_scale(), shrunk.workers.len()), (16, 0.5, 2));
    let s = shrunk.step().unwrap();
    assert!((s.lr - 0.5 * 0.05).abs() < 1e-12, "the step used the scaled rate: {}", s.lr);
}

#[test]
fn the_last_worker_goes_on_alone_and_cannot_be_removed() {
    let mut t = trainer(2);
    t.step().unwrap();
    t.remove_worker(0, BatchRule::KeepGlobal).unwrap();
    assert_eq!((t.workers.len(), t.workers[0].rank), (1, 0));
    assert_eq!(t.next_shards().iter().map(Vec::len).collect::<Vec<_>>(), [BATCH]);
    let s = t.step().unwrap();
    assert!(s.loss.is_finite() && s.step == 2);
    let e = t.remove_worker(0, BatchRule::KeepGlobal).unwrap_err().to_string();
    assert!(e.contains("last worker"), "{e}");
    let e = trainer(4).remove_worker(4, BatchRule::KeepGlobal).unwrap_err().to_string();
    assert!(e.contains("cannot remove worker 4"), "{e}");
}
