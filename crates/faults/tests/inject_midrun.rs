//! Scheduled faults through the training hooks on a tiny data-parallel trainer.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeMap;

use burn::prelude::*;
use resilab_faults::{FaultInjector, Faults, schedule};
use resilab_models::{Net, for_each_param};
use resilab_testkit::toy::Toy;
use resilab_train::{OptimizerConfig, ParallelConfig, StepOutcome, SyncKind, TrainConfig, TrainSpec, Trainer, WorkerState};

/// The bits of every parameter (`trainable`) or of every parameter and buffer, in order.
fn bits(net: &Net, trainable: bool) -> Vec<u32> {
    let mut out = Vec::new();
    for_each_param(net, |info, t| {
        if info.trainable || !trainable {
            out.extend(t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()));
        }
    });
    out
}

/// The replicas whose trainable parameters differ from replica 0's (BatchNorm's running
/// statistics are each replica's own).
fn odd_replicas(nets: &[&Net]) -> Vec<usize> {
    let first = bits(nets[0], true);
    (1..nets.len()).filter(|&r| bits(nets[r], true) != first).collect()
}

fn weights_finite(net: &Net) -> bool {
    bits(net, false).iter().all(|b| f32::from_bits(*b).is_finite())
}

fn trainer(workers: usize) -> Trainer {
    trainer_with(ParallelConfig { workers, ..ParallelConfig::default() })
}

/// The toy ResNet-8 for 20 steps of 32 images.
fn trainer_with(parallel: ParallelConfig) -> Trainer {
    let (net, data, device) = Toy::default().parts();
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
    let entries = Faults::parse(tables).unwrap().entries().to_vec();
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
    assert_eq!(odd_replicas(&nets), [2]);
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
    assert!(odd_replicas(&nets).is_empty(), "replicas applied the same corrupted average");
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
        .map(|(k, s)| {
            s.buffers["momentum_buffer"].values.iter().zip(&after[k].buffers["momentum_buffer"].values).filter(|(a, b)| a != b).count()
        })
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

/// What one watched block output was: `(rank, step, block, values, replacement)`.
type Seen = (usize, u64, String, Vec<f32>, Option<Vec<f32>>);

/// Records what the forward pass of each worker saw.
struct Watch<'a>(&'a mut FaultInjector, Vec<Seen>);
impl resilab_train::Hooks for Watch<'_> {
    fn before_step(&mut self, ctx: &resilab_train::Ctx, w: &mut resilab_train::Worker) -> resilab_train::Control {
        self.0.before_step(ctx, w)
    }
    fn watch_forward(&self, ctx: &resilab_train::Ctx) -> bool {
        self.0.watch_forward(ctx)
    }
    fn on_activation(&mut self, ctx: &resilab_train::Ctx, act: &mut resilab_train::Activation) -> resilab_train::Control {
        let c = self.0.on_activation(ctx, act);
        let host = |t: Tensor<4>| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        self.1.push((ctx.rank, ctx.step, act.name.clone(), host(act.values.clone()), act.replacement.clone().map(host)));
        c
    }
}

#[test]
fn a_neuron_fault_alters_exactly_the_logged_output_value_for_one_forward_pass() {
    let mut clean = trainer(4);
    let mut t = trainer(4);
    let mut inj = injector(
        "[[fault]]\ntarget = \"neurons\"\nat_step = 2\nworker = 2\ninjection_tries = 1\nfirst_bit = 1\nlast_bit = 1\nallow_sign_change = false\nlocations_to_corrupt = [\"neurons/layer2\"]\n",
        20,
        4,
    );
    let mut watch = Watch(&mut inj, Vec::new());
    for _ in 0..4 {
        t.step_with(&mut watch).unwrap();
        clean.step().unwrap();
        if t.step == 1 {
            assert!(params(&t, 2) == params(&clean, 2), "nothing is injected before the fault's step");
        }
    }
    let seen = std::mem::take(&mut watch.1);
    // Only worker 2's forward of step 2 was watched, block by block up to the one hit.
    assert!(!seen.is_empty() && seen.iter().all(|s| s.0 == 2 && s.1 == 2), "{:?}", seen.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>());
    let hit: Vec<_> = seen.iter().filter(|s| s.4.is_some()).collect();
    assert_eq!(hit.len(), 1);
    let (_, _, block, before, after) = hit[0];
    assert!(block.starts_with("layer2."), "{block}");
    assert_eq!(inj.log.len(), 1);
    let rec = &inj.log[0].records[0];
    assert_eq!(rec.dataset, format!("neurons/{}", block.replace('.', "/")));
    assert_eq!((rec.bits_reference.as_slice(), rec.bits_ieee.as_slice()), ([1u32].as_slice(), [30u32].as_slice()));
    let after = after.as_ref().unwrap();
    let differing: Vec<(usize, u32)> = before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, (a, b))| (i, a.to_bits() ^ b.to_bits()))
        .collect();
    assert_eq!(differing, [(rec.index, 1 << 30)]);
    // The altered value (the exponent's top bit: 0 becomes 2, anything else huge) fed the rest of
    // the forward pass: the update differs on every replica, through the all-reduce.
    for r in 0..4 {
        assert!(params(&t, r) != params(&clean, r), "replica {r}");
    }
}

#[test]
fn a_neuron_fault_in_a_pipeline_hits_its_stage_first_micro_batch() {
    use resilab_train::ParallelMode;
    let pipe = ParallelConfig { mode: ParallelMode::Pipeline, stages: 2, micro_batches: 4, ..ParallelConfig::default() };
    let mut t = trainer_with(pipe);
    let mut inj = injector("[[fault]]\ntarget = \"neurons\"\nat_step = 1\nstage = 1\ninjection_tries = 3\nscaling_factor = 1e6\n", 20, 2);
    let blocks = t.workers[1].net.block_names.clone();
    let mut watch = Watch(&mut inj, Vec::new());
    t.step_with(&mut watch).unwrap();
    let seen = std::mem::take(&mut watch.1);
    assert!(seen.iter().all(|s| s.0 == 1 && blocks.contains(&s.2)));
    // One watched forward (micro-batch 0), stopping at nothing: every block of the stage seen once.
    assert_eq!(seen.len(), blocks.len());
    assert_eq!(inj.log.len(), 1);
    assert_eq!(inj.log[0].records.len(), 3);
    assert!(inj.log[0].records.iter().all(|r| r.dataset.starts_with("neurons/")));
}

#[test]
fn neuron_locations_must_name_a_block() {
    let doc: toml::Table =
        toml::from_str("[[fault]]\ntarget = \"neurons\"\nat_step = 1\nlocations_to_corrupt = [\"neurons/layer9\"]\n").unwrap();
    let tables: Vec<toml::Table> = doc["fault"].as_array().unwrap().iter().map(|v| v.as_table().unwrap().clone()).collect();
    let entries = Faults::parse(tables).unwrap().entries().to_vec();
    let t = trainer(1);
    let err = resilab_faults::check_neuron_locations(&entries, &t.workers[0].net.block_names).unwrap_err().to_string();
    assert!(err.contains("fault[0].locations_to_corrupt") && err.contains("neurons/layer1/0"), "{err}");
    let ok: Vec<toml::Table> =
        vec![toml::from_str("target = \"neurons\"\nat_step = 1\nlocations_to_corrupt = [\"neurons/layer1\"]\n").unwrap()];
    resilab_faults::check_neuron_locations(Faults::parse(ok).unwrap().entries(), &t.workers[0].net.block_names).unwrap();
}
