//! Scheduled faults through the training hooks on a tiny data-parallel trainer.

use std::collections::BTreeMap;
use std::sync::Arc;

use burn::prelude::*;
use resilab_data::{Split, synthetic::Synthetic};
use resilab_faults::detect::{replica_digests, weights_finite};
use resilab_faults::{FaultInjector, parse, schedule};
use resilab_models::{Arch, InputShape, ModelConfig, init_parameters};
use resilab_train::{OptimizerConfig, ParallelConfig, StepOutcome, SyncKind, TrainConfig, TrainSpec, Trainer, WorkerState};

fn trainer(workers: usize) -> Trainer {
    trainer_with(ParallelConfig { workers, ..ParallelConfig::default() })
}

fn trainer_with(parallel: ParallelConfig) -> Trainer {
    let g = Synthetic { seed: 3, classes: 4, channels: 3, size: 16, difficulty: 0.3 };
    let data = Arc::new(Split::new(g.generate(0, 128).unwrap(), g.generate(1, 32).unwrap()));
    let device = Device::flex().autodiff();
    let model = ModelConfig { arch: Arch::Resnet, depth: Some(8), width: 0.25, batch_norm: None };
    let net = init_parameters(model.build(InputShape { channels: 3, size: 16 }, 4, &device).unwrap(), 11, &device);
    let spec = TrainSpec {
        train: TrainConfig { steps: Some(20), batch_size: 32, ..TrainConfig::default() },
        optimizer: OptimizerConfig::default(),
        parallel,
        seed: 5,
        ..TrainSpec::default()
    };
    Trainer::new(net, spec, data, device).unwrap()
}

fn injector(text: &str, steps: u64, world: usize) -> FaultInjector {
    let doc: toml::Table = toml::from_str(text).unwrap();
    let tables: Vec<toml::Table> = doc["fault"].as_array().unwrap().iter().map(|v| v.as_table().unwrap().clone()).collect();
    let entries = parse(&tables).unwrap();
    let events = schedule(&entries, steps, world, 77).unwrap();
    FaultInjector::new(entries, events, 77)
}

fn params(t: &Trainer, rank: usize) -> BTreeMap<String, Vec<f32>> {
    WorkerState::capture(&t.workers[rank]).params.into_iter().map(|(k, v)| (k, v.values)).collect()
}

#[test]
fn a_weight_flip_changes_exactly_the_logged_bit_of_one_replica() {
    // Horovod-like: no buffer broadcast between the two captures below.
    let mut t = trainer_with(ParallelConfig { workers: 4, sync: SyncKind::Horovod, ..ParallelConfig::default() });
    t.step().unwrap();
    let before = params(&t, 2);
    let mut inj = injector(
        "[[fault]]\ntarget = \"weights\"\nat_step = 2\nworker = 2\ninjection_tries = 1\nfirst_bit = 20\nlast_bit = 20\nlocations_to_corrupt = [\"model/layer1/0/conv1\"]\n",
        20,
        4,
    );
    // Capture the replica right after the injection, before its forward pass changes anything.
    struct Peek<'a>(&'a mut FaultInjector, Option<BTreeMap<String, Vec<f32>>>);
    impl resilab_train::Hooks for Peek<'_> {
        fn before_step(&mut self, ctx: &resilab_train::Ctx, w: &mut resilab_train::Worker) -> resilab_train::Control {
            let c = self.0.before_step(ctx, w);
            if ctx.rank == 2 {
                self.1 = Some(WorkerState::capture(w).params.into_iter().map(|(k, v)| (k, v.values)).collect());
            }
            c
        }
    }
    let mut peek = Peek(&mut inj, None);
    t.step_with(&mut peek).unwrap();
    let after = peek.1.unwrap();
    assert_eq!(inj.log.len(), 1);
    let rec = &inj.log[0].records[0];
    assert!(rec.dataset.starts_with("model/layer1/0/conv1/"), "{}", rec.dataset);
    assert_eq!(rec.bits_reference, [20]);
    assert_eq!(rec.bits_ieee, [11]);
    let name = rec.dataset["model/".len()..].replace('/', ".");
    let mut differing = Vec::new();
    for (k, v) in &before {
        for (i, (a, b)) in v.iter().zip(&after[k]).enumerate() {
            if a.to_bits() != b.to_bits() {
                differing.push((k.clone(), i, a.to_bits() ^ b.to_bits()));
            }
        }
    }
    assert_eq!(differing, [(name, rec.index, 1u32 << 11)]);
    // After the step the flipped replica is the odd one out (a mantissa bit: the replica stays
    // finite, its own update differs from the others').
    let nets: Vec<_> = t.workers.iter().map(|w| &w.net).collect();
    assert_eq!(replica_digests(&nets).1, [2]);
}

#[test]
fn a_critical_gradient_flip_reaches_every_replica_and_a_crash_drops_a_worker() {
    let mut t = trainer(2);
    let mut inj = injector(
        "[[fault]]\ntarget = \"gradients\"\nat_step = 1\nworker = 1\ninjection_tries = 20\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\n\n[[fault]]\ntarget = \"crash\"\nat_step = 2\nworker = 0\n",
        20,
        2,
    );
    t.step_with(&mut inj).unwrap();
    assert!(inj.log[0].corrupted > 0);
    let nets: Vec<_> = t.workers.iter().map(|w| &w.net).collect();
    assert!(replica_digests(&nets).1.is_empty(), "replicas applied the same corrupted average");
    let StepOutcome::Done(s) = t.step_with(&mut inj).unwrap() else { panic!("step did not complete") };
    assert_eq!(s.skipped, 1);
    assert!(inj.crashed().contains(&0));
    let StepOutcome::Done(s) = t.step_with(&mut inj).unwrap() else { panic!("step did not complete") };
    assert_eq!(s.skipped, 1, "a crashed worker stays out until respawned");
    inj.respawn(0);
    let StepOutcome::Done(s) = t.step_with(&mut inj).unwrap() else { panic!("step did not complete") };
    assert_eq!(s.skipped, 0);
}

#[test]
fn an_exponent_flip_in_every_weight_tensor_collapses_training_to_nan() {
    let mut t = trainer(1);
    let mut inj = injector(
        "[[fault]]\ntarget = \"weights\"\nat_step = 2\ninjection_tries = 50\nfirst_bit = 1\nlast_bit = 1\nsampling = \"per_element\"\n",
        20,
        1,
    );
    let mut losses = Vec::new();
    for _ in 0..6 {
        if let StepOutcome::Done(s) = t.step_with(&mut inj).unwrap() {
            losses.push(s.loss);
        }
    }
    assert!(losses[0].is_finite());
    assert!(!losses[5].is_finite() || !weights_finite(&t.model()), "losses {losses:?}");
    assert!(inj.log[0].extreme + inj.log[0].inf + inj.log[0].nan > 0);
}

#[test]
fn optimizer_faults_change_only_optimizer_state() {
    let mut t = trainer(1);
    t.step().unwrap();
    let weights = params(&t, 0);
    let momentum = WorkerState::capture(&t.workers[0]).optim;
    let mut inj = injector("[[fault]]\ntarget = \"optimizer\"\nat_step = 2\ninjection_tries = 5\nscaling_factor = 1000.0\n", 20, 1);
    struct Before<'a>(&'a mut FaultInjector);
    impl resilab_train::Hooks for Before<'_> {
        fn before_step(&mut self, ctx: &resilab_train::Ctx, w: &mut resilab_train::Worker) -> resilab_train::Control {
            self.0.before_step(ctx, w);
            resilab_train::Control::Stop
        }
    }
    t.step_with(&mut Before(&mut inj)).unwrap();
    assert_eq!(params(&t, 0), weights);
    let after = WorkerState::capture(&t.workers[0]).optim;
    let changed: usize = momentum
        .iter()
        .map(|(k, s)| s.buffers["momentum_buffer"].values.iter().zip(&after[k].buffers["momentum_buffer"].values).filter(|(a, b)| a != b).count())
        .sum();
    assert_eq!(changed, inj.log[0].corrupted);
    assert!(inj.log[0].records.iter().all(|r| r.dataset.starts_with("optimizer/") && r.dataset.ends_with("/momentum_buffer")));
}

#[test]
fn pipeline_message_faults_hit_the_first_micro_batch_of_their_step() {
    use resilab_train::ParallelMode;
    let pipe = ParallelConfig { mode: ParallelMode::Pipeline, stages: 2, micro_batches: 4, ..ParallelConfig::default() };
    let mut clean = trainer_with(pipe.clone());
    clean.step().unwrap();
    let mut t = trainer_with(pipe);
    let mut inj = injector(
        "[[fault]]\ntarget = \"activations\"\nat_step = 1\nstage = 1\ninjection_tries = 4\nscaling_factor = 1e6\n\n[[fault]]\ntarget = \"message_gradients\"\nat_step = 1\nstage = 0\ninjection_tries = 1\nfirst_bit = 1\nlast_bit = 1\n",
        20,
        2,
    );
    t.step_with(&mut inj).unwrap();
    assert_eq!(inj.log.len(), 2);
    assert!(inj.log.iter().all(|l| l.micro_batch == Some(0)));
    let names: Vec<&str> = inj.log.iter().map(|l| l.records[0].dataset.as_str()).collect();
    assert_eq!(names, ["activations/stage0", "message_gradients/stage1"]);
    assert!(params(&t, 0) != params(&clean, 0) && params(&t, 1) != params(&clean, 1));
}

#[test]
fn a_stuck_at_fault_holds_its_value_for_its_steps() {
    let mut t = trainer(1);
    let mut inj = injector(
        "[[fault]]\ntarget = \"weights\"\nat_step = 2\nstuck_steps = 3\ninjection_tries = 1\nscaling_factor = 0.0\nlocations_to_corrupt = [\"model/layer1/0/conv1/weight\"]\n",
        20,
        1,
    );
    // The value the forward pass sees at each step, right after the injector ran.
    struct Seen<'a>(&'a mut FaultInjector, Vec<f32>);
    impl resilab_train::Hooks for Seen<'_> {
        fn before_step(&mut self, ctx: &resilab_train::Ctx, w: &mut resilab_train::Worker) -> resilab_train::Control {
            let c = self.0.before_step(ctx, w);
            if let Some(r) = self.0.log.first().and_then(|l| l.records.first()) {
                self.1.push(WorkerState::capture(w).params["layer1.0.conv1.weight"].values[r.index]);
            }
            c
        }
    }
    let mut seen = Seen(&mut inj, Vec::new());
    for _ in 0..6 {
        t.step_with(&mut seen).unwrap();
    }
    let v = seen.1;
    assert_eq!(v.len(), 5, "steps 2 to 6");
    assert_eq!(&v[..3], &[0.0, 0.0, 0.0], "held at the stuck value for steps 2, 3, 4");
    assert!(v[3] != 0.0 && v[4] != 0.0, "released after step 4: {v:?}");
    assert_eq!(inj.log.len(), 1, "one fault, logged once");
}
