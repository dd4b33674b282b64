//! The guard on a tiny data-parallel trainer: detection in the step of the fault, and what each
//! strategy leaves behind.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use resilab_faults::{FaultInjector, Faults, schedule};
use resilab_recovery::detect::{replica_digests, weights_finite};
use resilab_recovery::{Decision, DetectConfig, Detection, Guard, Strategy};
use resilab_testkit::toy::Toy;
use resilab_train::{OptimizerConfig, ParallelConfig, StepOutcome, TrainConfig, TrainSpec, Trainer};

const STEPS: u64 = 6;

/// The toy ResNet-8 for [`STEPS`] steps of 32 images.
fn trainer(workers: usize) -> Trainer {
    let (net, data, device) = Toy::default().parts();
    let spec = TrainSpec {
        train: TrainConfig { steps: Some(STEPS), batch_size: 32, ..TrainConfig::default() },
        optimizer: OptimizerConfig::default(),
        parallel: ParallelConfig { workers, ..ParallelConfig::default() },
        seed: 5,
        ..TrainSpec::default()
    };
    Trainer::new(net, spec, data, device).unwrap()
}

/// A guard and the faults it meets, as a run holds them.
struct Guarded {
    guard: Guard,
    faults: FaultInjector,
}

impl std::ops::Deref for Guarded {
    type Target = Guard;
    fn deref(&self) -> &Guard {
        &self.guard
    }
}

fn guard(faults: &str, strategy: Strategy, detect: DetectConfig, world: usize) -> Guarded {
    let doc: toml::Table = toml::from_str(faults).unwrap();
    let tables: Vec<toml::Table> = doc["fault"].as_array().unwrap().iter().map(|v| v.as_table().unwrap().clone()).collect();
    let entries = Faults::parse(tables).unwrap().entries().to_vec();
    let events = schedule(&entries, STEPS, world, 1).unwrap();
    Guarded { guard: Guard::new(strategy, detect, world), faults: FaultInjector::new(entries, events, 1) }
}

/// Runs to the end; returns how the last step ended.
fn run(t: &mut Trainer, g: &mut Guarded) -> StepOutcome {
    loop {
        let out = t.step_with(&mut g.guard.supervise(&mut g.faults)).unwrap();
        if !matches!(out, StepOutcome::Done(_)) || t.done() {
            return out;
        }
    }
}

/// The exponent's top bit of 40 values in worker 1's first residual block: values below 1 in
/// magnitude become about 1e38 and the loss NaN.
const NAN_WEIGHTS: &str = "[[fault]]\ntarget = \"weights\"\nat_step = 3\nworker = 1\ninjection_tries = 40\nsampling = \"per_element\"\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"model/layer1\"]\n";

#[test]
fn rollback_of_a_transient_weight_fault_ends_bit_identical_to_the_golden_run() {
    let mut golden = trainer(2);
    while !golden.done() {
        golden.step().unwrap();
    }
    let mut t = trainer(2);
    let mut g = guard(NAN_WEIGHTS, Strategy::Rollback, DetectConfig::default(), 2);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Done(_)));
    let d = &g.detections[0];
    assert_eq!((d.step, d.rank, d.kind, d.latency_steps), (3, Some(1), Detection::NonFiniteLoss, Some(0)));
    assert_eq!(d.decision, Decision::RedoStep { without: vec![] });
    assert_eq!(g.detections.len(), 1);
    assert!(t.snapshot() == golden.snapshot(), "rollback must leave no trace of a transient fault");
}

#[test]
fn none_lets_a_critical_weight_flip_collapse_training() {
    let mut t = trainer(1);
    let mut g = guard(
        "[[fault]]\ntarget = \"weights\"\nat_step = 2\ninjection_tries = 40\nfirst_bit = 1\nlast_bit = 1\nsampling = \"per_element\"\nlocations_to_corrupt = [\"model/layer1\"]\n",
        Strategy::None,
        DetectConfig::default(),
        1,
    );
    run(&mut t, &mut g);
    assert!(!weights_finite(&t.model()));
    assert_eq!(g.detections[0].step, 2, "detected in the step of the fault");
    assert!(g.detections.iter().all(|d| d.decision == Decision::Continue));
}

#[test]
fn lossy_forward_ends_with_identical_replicas_after_a_crash_and_a_replica_flip() {
    let mut t = trainer(4);
    let faults = "[[fault]]\ntarget = \"crash\"\nat_step = 2\nworker = 1\n\n\
                  [[fault]]\ntarget = \"weights\"\nat_step = 4\nworker = 3\ninjection_tries = 3\nfirst_bit = 20\nlast_bit = 20\nlocations_to_corrupt = [\"model/layer2\"]\n";
    let detect = DetectConfig { divergence_every: Some(1), ..DetectConfig::default() };
    let mut g = guard(faults, Strategy::LossyForward, detect, 4);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Done(_)));
    let kinds: Vec<Detection> = g.detections.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, [Detection::Crash, Detection::ReplicaDivergence]);
    assert!(g.faults.crashed().is_empty() && g.down().is_empty(), "the crashed worker was respawned");
    let nets: Vec<_> = t.workers.iter().map(|w| &w.net).collect();
    assert!(replica_digests(&nets).1.is_empty(), "every replica identical at the end");
}

#[test]
fn checkpoint_restart_and_none_hand_the_run_back() {
    let mut t = trainer(2);
    let mut g = guard(NAN_WEIGHTS, Strategy::CheckpointRestart, DetectConfig::default(), 2);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Stopped { .. }));
    assert_eq!(g.pending, Some(Decision::RestartFromCheckpoint));
    assert_eq!(t.step, 2, "the failed step did not complete");

    let mut t = trainer(2);
    let mut g = guard("[[fault]]\ntarget = \"crash\"\nat_step = 2\nworker = 0\n", Strategy::None, DetectConfig::default(), 2);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Stopped { .. }));
    assert_eq!(g.pending, Some(Decision::Fail), "a crash ends an unprotected run");
}

#[test]
fn rollback_of_a_neuron_fault_ends_bit_identical_to_the_golden_run() {
    let mut golden = trainer(2);
    while !golden.done() {
        golden.step().unwrap();
    }
    // The exponent's top bit of 200 values of one output of worker 0's first residual stage:
    // nonzero values become about 1e38, and the next batch norm turns them into NaN.
    let faults = "[[fault]]\ntarget = \"neurons\"\nat_step = 4\nworker = 0\ninjection_tries = 200\nsampling = \"per_element\"\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"neurons/layer1\"]\n";
    let mut none = trainer(2);
    let mut g = guard(faults, Strategy::None, DetectConfig::default(), 2);
    run(&mut none, &mut g);
    assert!(!g.detections.is_empty() && g.detections[0].step == 4, "the corrupted forward is seen in its step");
    let mut t = trainer(2);
    let mut g = guard(faults, Strategy::Rollback, DetectConfig::default(), 2);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Done(_)));
    let d = &g.detections[0];
    assert_eq!((d.step, d.rank, d.latency_steps), (4, Some(0), Some(0)));
    assert_eq!(g.detections.len(), 1);
    assert!(t.snapshot() == golden.snapshot(), "a neuron fault is transient: the redone step is clean");
}

fn golden(workers: usize) -> Trainer {
    let mut t = trainer(workers);
    while !t.done() {
        t.step().unwrap();
    }
    t
}

const CRASH: &str = "[[fault]]\ntarget = \"crash\"\nat_step = 2\nworker = 1\n";

/// A crash in the forward pass: no bucket was reduced before it.
const CRASH_IN_FORWARD: &str = "[[fault]]\ntarget = \"crash\"\nat_step = 2\nworker = 1\nphase = \"forward\"\n";

#[test]
fn rollback_after_a_crash_redoes_the_step_over_the_survivors() {
    let mut t = trainer(4);
    let mut g = guard(CRASH_IN_FORWARD, Strategy::Rollback, DetectConfig::default(), 4);
    assert!(matches!(run(&mut t, &mut g), StepOutcome::Done(_)));
    assert_eq!(g.detections.len(), 1, "{:?}", g.detections);
    assert_eq!(g.detections[0].kind, Detection::Crash);
    assert!(matches!(&g.detections[0].decision, Decision::Both { steps } if steps[0] == Decision::RedoStep { without: vec![1] }));
    assert!(g.down().is_empty(), "the crashed worker rejoined");
    let nets: Vec<_> = t.workers.iter().map(|w| &w.net).collect();
    assert!(replica_digests(&nets).1.is_empty(), "it rejoined as a copy of a survivor");
    // Redoing the step with the crashed worker's shard (as a checkpoint restart recomputes
    // it) would end on the golden run's weights; the survivors' average does not.
    assert!(t.snapshot() != golden(4).snapshot(), "step 2 must average the three survivors only");
    // Lossy forward also applies the survivors' average at the crash step (no bucket was
    // reduced before the crash in the forward pass); rollback pays a redo for the same update.
    let mut lossy = trainer(4);
    let mut gl = guard(CRASH_IN_FORWARD, Strategy::LossyForward, DetectConfig::default(), 4);
    run(&mut lossy, &mut gl);
    assert!(t.snapshot() == lossy.snapshot());
}

/// A detection's step, rank, kind and decision (without its latency, which is measurement).
type Seen = (u64, Option<usize>, Detection, Decision);

/// Decisions and final states of `faults` under `strategy`, with the fault log kept or withheld.
fn decisions(faults: &str, strategy: Strategy, withhold: bool) -> (Vec<Seen>, resilab_train::TrainState, usize) {
    let mut t = trainer(4);
    let detect = DetectConfig { divergence_every: Some(1), ..DetectConfig::default() };
    let mut g = guard(faults, strategy, detect, 4);
    if withhold {
        g.faults.withhold_log();
    }
    run(&mut t, &mut g);
    let d = g.detections.iter().map(|d| (d.step, d.rank, d.kind, d.decision.clone())).collect();
    (d, t.snapshot(), g.faults.log.len())
}

#[test]
fn decisions_do_not_read_the_fault_log() {
    // A crash, a NaN-making weight flip, a silent flip found by the replica digests, and an
    // optimizer-state flip.
    let faults = format!(
        "{CRASH}\n{}\n[[fault]]\ntarget = \"weights\"\nat_step = 4\nworker = 3\ninjection_tries = 3\nfirst_bit = 20\nlast_bit = 20\nlocations_to_corrupt = [\"model/layer2\"]\n\n\
         [[fault]]\ntarget = \"optimizer\"\nat_step = 5\nworker = 2\ninjection_tries = 5\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\n",
        NAN_WEIGHTS
    );
    for strategy in [Strategy::Rollback, Strategy::LossyForward, Strategy::CheckpointRestart, Strategy::None] {
        let (seen, state, logged) = decisions(&faults, strategy, false);
        let (blind, blind_state, withheld) = decisions(&faults, strategy, true);
        assert!(logged > 0 && withheld == 0, "{strategy:?}: the log was withheld");
        assert!(!seen.is_empty(), "{strategy:?}");
        assert_eq!(seen, blind, "{strategy:?}: decisions changed without the fault log");
        assert!(state == blind_state, "{strategy:?}");
    }
}
