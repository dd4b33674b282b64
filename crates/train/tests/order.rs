//! The seeded summation order through the trainer: a step recomputed after a restore rounds
//! differently from its first execution, and a step first computed after a restore does not.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use resilab_testkit::toy::{RESNET8, Toy};
use resilab_train::{ParallelConfig, ReductionOrder, TrainConfig, TrainSpec, TrainState, Trainer};

/// The toy ResNet-8 on 96 + 32 images from seed 1, initialised from seed 9.
const TOY: Toy = Toy { model: RESNET8, size: 16, data_seed: 1, train_images: 96, test_images: 32, init_seed: 9 };

/// Four data-parallel workers (three or more, so that the order of a sum can change its bits).
fn trainer(order: ReductionOrder) -> Trainer {
    let (net, data, device) = TOY.parts_on(TOY.data());
    let train = TrainConfig { steps: Some(4), batch_size: 32, reduction_order: order, ..TrainConfig::default() };
    let parallel = ParallelConfig { workers: 4, ..ParallelConfig::default() };
    Trainer::new(net, TrainSpec { train, parallel, seed: 5, ..TrainSpec::default() }, data, device).unwrap()
}

fn steps(t: &mut Trainer, n: usize) -> TrainState {
    for _ in 0..n {
        t.step().unwrap();
    }
    t.snapshot()
}

/// Steps 1-4, and the state after step 2.
fn straight(order: ReductionOrder) -> (TrainState, TrainState) {
    let mut t = trainer(order);
    let at2 = steps(&mut t, 2);
    (at2, steps(&mut t, 2))
}

#[test]
fn a_recomputed_step_rounds_differently_and_a_first_one_does_not() {
    let (at2, at4) = straight(ReductionOrder::Seeded);
    // Steps 3 and 4 recomputed after a restart to step 2: second executions.
    let mut restarted = trainer(ReductionOrder::Seeded);
    steps(&mut restarted, 4);
    restarted.restore(&at2).unwrap();
    let recomputed = steps(&mut restarted, 2);
    assert_eq!(restarted.executions(3), 2);
    assert!(recomputed != at4, "a recomputed step rounds differently");
    // A run resumed at step 2 computes steps 3 and 4 for the first time.
    let mut resumed = trainer(ReductionOrder::Seeded);
    resumed.restore(&at2).unwrap();
    assert_eq!((resumed.executions(2), resumed.executions(3)), (1, 0));
    assert!(steps(&mut resumed, 2) == at4, "a resumed run's first executions are the straight run's");
    // A run put at step 4 from elsewhere (the golden run's cached steps), then restarted to
    // step 2: steps 3 and 4 were executed before, as in the run that computed them itself.
    let mut cached = trainer(ReductionOrder::Seeded);
    cached.restore_exact(&at4).unwrap();
    cached.restore(&at2).unwrap();
    assert!(steps(&mut cached, 2) == recomputed);
}

#[test]
fn in_the_fixed_order_a_recomputed_step_is_its_first_execution_bit_for_bit() {
    let (at2, at4) = straight(ReductionOrder::Fixed);
    let mut restarted = trainer(ReductionOrder::Fixed);
    steps(&mut restarted, 4);
    restarted.restore(&at2).unwrap();
    assert!(steps(&mut restarted, 2) == at4);
}
