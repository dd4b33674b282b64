//! Every data-parallel replica evaluated: under DDP each as its next forward pass sees it, with
//! rank 0's buffers (PyTorch's `broadcast_buffers`), so fault-free replicas evaluate
//! identically; under Horovod each with its own BatchNorm statistics, which differ.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use resilab_models::for_each_param;
use resilab_testkit::toy::Toy;
use resilab_train::{OptimizerConfig, ParallelConfig, SyncKind, TrainConfig, TrainSpec, Trainer};

fn trained(sync: SyncKind) -> Trainer {
    // The toy ResNet-8 on 256 + 64 images of 8x8.
    let (net, data, device) = Toy { size: 8, train_images: 256, test_images: 64, ..Toy::default() }.parts();
    let train = TrainConfig { steps: Some(4), batch_size: 32, ..TrainConfig::default() };
    let optimizer = OptimizerConfig { lr: 0.05, momentum: 0.9, ..OptimizerConfig::default() };
    let parallel = ParallelConfig { workers: 4, sync, ..ParallelConfig::default() };
    let mut t = Trainer::new(net, TrainSpec { train, optimizer, parallel, seed: 5, ..TrainSpec::default() }, data, device).unwrap();
    while !t.done() {
        t.step().unwrap();
    }
    t
}

/// Every replica's BatchNorm statistics, in rank order.
fn buffers(t: &Trainer) -> Vec<Vec<f32>> {
    t.workers
        .iter()
        .map(|w| {
            let mut v = Vec::new();
            for_each_param(&w.net, |info, x| {
                if !info.trainable {
                    v.extend(x.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
                }
            });
            v
        })
        .collect()
}

#[test]
fn fault_free_ddp_replicas_evaluate_identically_and_horovods_by_their_own_statistics() {
    let ddp = trained(SyncKind::Ddp);
    // After the last step each replica has updated its statistics from its own shard: the
    // equality below comes from evaluating with rank 0's, not from identical replicas.
    let b = buffers(&ddp);
    assert!(b[1..].iter().any(|x| *x != b[0]), "the replicas' own statistics differ after the last step");
    let evals = ddp.evaluate_replicas(true);
    assert_eq!(evals.len(), 4);
    assert!(evals.iter().all(|e| *e == evals[0]), "DDP replicas evaluate as rank 0 does: {evals:?}");
    assert_eq!(evals[0], ddp.evaluate(), "rank 0's evaluation is the model's");
    let own = ddp.evaluate_replicas(false);
    assert!(own.iter().any(|e| e.loss != own[0].loss), "as they are, with their own statistics, they differ: {own:?}");

    let horovod = trained(SyncKind::Horovod);
    let evals = horovod.evaluate_replicas(true);
    assert_eq!(evals, horovod.evaluate_replicas(false), "Horovod broadcasts no buffers");
    assert!(evals.iter().any(|e| e.loss != evals[0].loss), "Horovod's replicas keep their own statistics: {evals:?}");
}
