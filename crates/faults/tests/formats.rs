//! Faults in the training formats (`train.precision = "bf16"` or `"fp16"`) on the toy trainer:
//! flips into half values flip bits of the half value, and a fault in the weights'
//! half-precision copy reaches the step's gradients only, never the float32 master weights.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeMap;

use burn::prelude::*;
use resilab_faults::{FaultInjector, Faults, schedule};
use resilab_models::{Precision, for_each_param};
use resilab_testkit::toy::Toy;
use resilab_train::{
    Control, Ctx, Grads, Hooks, OptimizerConfig, ParallelConfig, ParallelMode, TrainConfig, TrainSpec, Trainer, Worker, WorkerState,
};

fn trainer(precision: Precision, parallel: ParallelConfig) -> Trainer {
    let (net, data, device) = Toy::default().parts();
    let spec = TrainSpec {
        train: TrainConfig { steps: Some(20), batch_size: 32, precision, ..TrainConfig::default() },
        optimizer: OptimizerConfig::default(),
        parallel,
        seed: 5,
        ..TrainSpec::default()
    };
    Trainer::new(net, spec, data, device).unwrap()
}

fn injector(text: &str, world: usize) -> FaultInjector {
    let doc: toml::Table = toml::from_str(text).unwrap();
    let tables: Vec<toml::Table> = doc["fault"].as_array().unwrap().iter().map(|v| v.as_table().unwrap().clone()).collect();
    let entries = Faults::parse(tables).unwrap().entries().to_vec();
    let events = schedule(&entries, 20, world, 77).unwrap();
    FaultInjector::new(entries, events, 77)
}

fn host(t: &Tensor<1>) -> Vec<f32> {
    t.clone().into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn host_grads(g: &Grads) -> BTreeMap<String, Vec<f32>> {
    g.iter().map(|(k, t)| (k.clone(), host(t))).collect()
}

/// Every parameter and buffer, by name.
fn params(w: &Worker) -> BTreeMap<String, Vec<f32>> {
    WorkerState::capture(w).params.into_iter().map(|(k, v)| (k, v.values)).collect()
}

/// The trainable parameters' bits (BatchNorm's running statistics follow the forward pass,
/// which a fault in the weights' copy does change, as it would on a GPU).
fn master_bits(w: &Worker) -> Vec<u32> {
    let mut out = Vec::new();
    for_each_param(&w.net, |info, t| {
        if info.trainable {
            out.extend(host(&t).iter().map(|v| v.to_bits()));
        }
    });
    out
}

fn optimizer_bits(w: &Worker) -> Vec<u32> {
    WorkerState::capture(w).optim.values().flat_map(|s| s.buffers.values().flat_map(|b| b.values.iter().map(|v| v.to_bits()))).collect()
}

fn half_word(p: Precision, x: f32) -> u16 {
    match p {
        Precision::Bf16 => burn::tensor::bf16::from_f32(x).to_bits(),
        _ => burn::tensor::f16::from_f32(x).to_bits(),
    }
}

fn half_value(p: Precision, w: u16) -> f32 {
    match p {
        Precision::Bf16 => burn::tensor::bf16::from_bits(w).to_f32(),
        _ => burn::tensor::f16::from_bits(w).to_f32(),
    }
}

/// The word a run in format `p` computes with for `x`, its value and its hex as the log writes
/// it: float32's own in a float32 run, the half word in the others.
fn word(p: Precision, x: f32) -> u32 {
    if p == Precision::Fp32 { x.to_bits() } else { u32::from(half_word(p, x)) }
}

fn word_value(p: Precision, w: u32) -> f32 {
    if p == Precision::Fp32 { f32::from_bits(w) } else { half_value(p, w as u16) }
}

fn word_hex(p: Precision, w: u32) -> String {
    if p == Precision::Fp32 { format!("0x{w:08x}") } else { format!("0x{w:04x}") }
}

/// The injector, with what a step showed: the weights its passes used (rank 0), and the
/// gradients before and after the injector's after-backward hook.
struct Tap<'a> {
    inj: &'a mut FaultInjector,
    seen: Vec<BTreeMap<String, Vec<f32>>>,
    grads_in: Vec<Grads>,
    grads_out: Vec<Grads>,
}

impl Hooks for Tap<'_> {
    fn before_step(&mut self, ctx: &Ctx, w: &mut Worker) -> Control {
        let c = self.inj.before_step(ctx, w);
        self.seen.push(params(w));
        c
    }
    fn after_pass(&mut self, ctx: &Ctx, w: &mut Worker) {
        self.inj.after_pass(ctx, w);
    }
    fn after_backward(&mut self, ctx: &Ctx, g: &mut Grads) -> Control {
        self.grads_in.push(g.clone());
        let c = self.inj.after_backward(ctx, g);
        self.grads_out.push(g.clone());
        c
    }
    fn on_message(&mut self, ctx: &Ctx, msg: &mut resilab_train::Message) -> Control {
        self.inj.on_message(ctx, msg)
    }
}

fn tap(inj: &mut FaultInjector) -> Tap<'_> {
    Tap { inj, seen: Vec::new(), grads_in: Vec::new(), grads_out: Vec::new() }
}

#[test]
fn a_gradient_flip_in_a_half_run_flips_a_bit_of_the_half_gradient() {
    for (p, dtype) in [(Precision::Bf16, "bf16"), (Precision::Fp16, "f16")] {
        let mut t = trainer(p, ParallelConfig::default());
        let mut inj = injector(
            "[[fault]]\ntarget = \"gradients\"\nat_step = 1\ninjection_tries = 4\nlocations_to_corrupt = [\"gradients/layer1/0/conv1/weight\"]\n",
            1,
        );
        let mut tap = tap(&mut inj);
        t.step_with(&mut tap).unwrap();
        let (before, after) = (host_grads(&tap.grads_in[0]), host_grads(&tap.grads_out[0]));
        let log = &inj.log[0];
        assert_eq!(log.corrupted, 4, "{p}");
        let mut want = before.clone();
        let g = want.get_mut("layer1.0.conv1.weight").unwrap();
        for r in &log.records {
            assert_eq!((r.dataset.as_str(), r.dtype.as_str(), r.precision), ("gradients/layer1/0/conv1/weight", dtype, Some(16)), "{p}");
            assert!(r.bits_ieee.len() == 1 && r.bits_ieee[0] < 16, "{p}: {:?}", r.bits_ieee);
            // The gradient is a half value (fp16's carries the loss scale): its word is exact.
            let old = half_word(p, g[r.index]);
            assert!(half_value(p, old).to_bits() == g[r.index].to_bits() || g[r.index].is_nan(), "{p}: {} is a half value", g[r.index]);
            assert_eq!(r.old_bits, format!("0x{old:04x}"), "{p}");
            let new = old ^ (1 << r.bits_ieee[0]);
            assert_eq!(r.new_bits, format!("0x{new:04x}"), "{p}");
            g[r.index] = half_value(p, new);
        }
        for (k, v) in &after {
            let w = &want[k];
            assert!(v.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())), "{p}: {k}");
        }
    }
}

#[test]
fn a_weight_copy_flip_changes_the_steps_gradients_and_leaves_the_master_weights_alone() {
    for (p, dtype, width) in [(Precision::Bf16, "bf16", 16), (Precision::Fp16, "f16", 16), (Precision::Fp32, "f32", 32)] {
        // Two runs from one initial state: one with a flip of the top mantissa bit of three
        // values of the weights' half copy (float32 run: of the weights as the passes read
        // them), one fault-free run that applies the first's gradients.
        let (mut faulty, mut clean) = (trainer(p, ParallelConfig::default()), trainer(p, ParallelConfig::default()));
        let (master, initial) = (params(&faulty.workers[0]), master_bits(&faulty.workers[0]));
        // The top mantissa bit: reference 9 (IEEE 6) in bf16, reference 6 (IEEE 9) in fp16,
        // reference 9 (IEEE 22) in float32.
        let (reference, top) = match p {
            Precision::Bf16 => (9, 6),
            Precision::Fp16 => (6, 9),
            Precision::Fp32 => (9, 22),
        };
        let mut inj = injector(
            &format!(
                "[[fault]]\ntarget = \"weight_copy\"\nat_step = 1\ninjection_tries = 3\nfirst_bit = {reference}\nlast_bit = {reference}\nallow_sign_change = false\nlocations_to_corrupt = [\"model/layer1/0/conv1/weight\"]\n"
            ),
            1,
        );
        let mut tap = tap(&mut inj);
        faulty.step_with(&mut tap).unwrap();
        let (seen, grads) = (tap.seen.remove(0), tap.grads_out.remove(0));
        // (b) The log holds the half format's bits.
        let log = &inj.log[0];
        assert_eq!(log.corrupted, 3);
        let w0 = &master["layer1.0.conv1.weight"];
        let mut want_seen = w0.clone();
        for r in &log.records {
            assert_eq!((r.dataset.as_str(), r.dtype.as_str(), r.precision), ("model/layer1/0/conv1/weight", dtype, Some(width)), "{p}");
            assert_eq!((r.bits_ieee.as_slice(), r.bits_reference.as_slice()), ([top].as_slice(), [reference].as_slice()), "{p}");
            let old = word(p, w0[r.index]);
            assert_eq!(r.old_bits, word_hex(p, old), "{p}: the master weight's word in the run's format");
            assert_eq!(r.new_bits, word_hex(p, old ^ (1 << top)), "{p}");
            want_seen[r.index] = word_value(p, old ^ (1 << top));
        }
        // The passes computed with the corrupted half values, in that tensor only.
        for (k, v) in &seen {
            let want = if k == "layer1.0.conv1.weight" { &want_seen } else { &master[k] };
            assert_eq!(v, want, "{p}: {k} as the passes saw it");
        }
        // (a) The master weights after the step are those of a fault-free step that applied the
        // faulty step's gradients: the fault reached the gradients and nothing else.
        struct Apply(Grads, Vec<Grads>);
        impl Hooks for Apply {
            fn after_backward(&mut self, _: &Ctx, g: &mut Grads) -> Control {
                self.1.push(std::mem::replace(g, self.0.clone()));
                Control::Continue
            }
        }
        let mut apply = Apply(grads.clone(), Vec::new());
        clean.step_with(&mut apply).unwrap();
        assert_ne!(master_bits(&faulty.workers[0]), initial, "{p}: the step updated the weights");
        assert_eq!(master_bits(&faulty.workers[0]), master_bits(&clean.workers[0]), "{p}: master weights");
        assert_eq!(optimizer_bits(&faulty.workers[0]), optimizer_bits(&clean.workers[0]), "{p}: optimizer state");
        assert_ne!(host_grads(&grads), host_grads(&apply.1[0]), "{p}: the fault changed the step's gradients");
        assert!(inj.quiescent(1), "{p}: no master value is left to put back");
    }
}

#[test]
fn a_weight_copy_flip_in_a_pipeline_stage_is_undone_after_its_micro_batches() {
    let pipe = ParallelConfig { mode: ParallelMode::Pipeline, stages: 2, micro_batches: 4, ..ParallelConfig::default() };
    let mut t = trainer(Precision::Bf16, pipe);
    let master: Vec<BTreeMap<String, Vec<f32>>> = t.workers.iter().map(params).collect();
    let master_trainable: Vec<Vec<u32>> = t.workers.iter().map(master_bits).collect();
    let mut inj =
        injector("[[fault]]\ntarget = \"weight_copy\"\nat_step = 1\nstage = 1\ninjection_tries = 5\nfirst_bit = 1\nlast_bit = 8\n", 2);
    // Stop once the gradients are known: no update, so the master weights must be as before.
    struct StopAfter<'a>(Tap<'a>);
    impl Hooks for StopAfter<'_> {
        fn before_step(&mut self, ctx: &Ctx, w: &mut Worker) -> Control {
            self.0.before_step(ctx, w)
        }
        fn after_pass(&mut self, ctx: &Ctx, w: &mut Worker) {
            self.0.after_pass(ctx, w);
        }
        fn after_backward(&mut self, _: &Ctx, _: &mut Grads) -> Control {
            Control::Stop
        }
    }
    let mut stop = StopAfter(tap(&mut inj));
    t.step_with(&mut stop).unwrap();
    let seen = std::mem::take(&mut stop.0.seen);
    assert_ne!(seen[1], master[1], "stage 1's passes used the corrupted copy");
    assert_eq!(seen[0], master[0]);
    for (s, want) in master_trainable.iter().enumerate() {
        assert_eq!(&master_bits(&t.workers[s]), want, "stage {s}'s master weights are as they were");
    }
    assert!(inj.log[0].records.iter().all(|r| r.dtype == "bf16" && r.dataset.starts_with("model/")));
}
