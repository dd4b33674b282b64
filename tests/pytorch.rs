//! PyTorch weights in and out (`resilab import`, `resilab export`) on the fixtures that
//! scripts/pytorch_fixtures.py made with PyTorch: the imported model computes PyTorch's logits,
//! an export imports back bit for bit, a training checkpoint brings its momentum, and every
//! wrong file is one clear error line.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use burn::prelude::*;
use common::{assert_clean_error, run, write};
use resilab_models::{Compute, InputShape, Kernels, map_params};
use resilab_runner::RunConfig;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch").join(name)
}

/// A ResNet-8 run on 32x32 RGB synthetic images, 10 classes (the fixtures' shape).
const RESNET8: &str = r#"
seed = 3
[data]
train_size = 16
test_size = 16
normalize = "dataset"
[model]
arch = "resnet"
depth = 8
[train]
steps = 2
batch_size = 8
[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9
"#;

const VGG11: &str = r#"
[data]
train_size = 16
test_size = 16
normalize = "dataset"
[model]
arch = "vgg"
depth = 11
width = 0.125
[train]
batch_size = 8
"#;

const UNPREFIX: &str = "\n[[import.rename]]\nfrom = \"^module\\\\.\"\nto = \"\"\n";

/// Runs `resilab import` of `weights` for the configuration `text` into `dir/<out>`.
fn import(dir: &Path, weights: &Path, text: &str, out: &str, extra: &[&str]) -> std::process::Output {
    let cfg = write(dir, &format!("{out}.toml"), text);
    let out = dir.join(out);
    let mut args = vec!["import", weights.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn values(target: &Path) -> resilab_checkpoint::Values {
    resilab_checkpoint::read_values(target, &resilab_checkpoint::no_probe).unwrap()
}

fn tensors(path: &Path) -> BTreeMap<String, resilab_interop::source::Host> {
    resilab_interop::source::read(path).unwrap().model
}

/// The model of the checkpoint `dir` on `kernels`, its eval-mode logits on `input`.
fn logits(dir: &Path, text: &str, input: &resilab_interop::source::Host, kernels: Kernels) -> Vec<f32> {
    let cfg = RunConfig::from_toml(text, &[], "test").unwrap();
    let compute = Compute { kernels, ..Compute::native() };
    let net = cfg.model.build(InputShape { channels: 3, size: 32 }, 10, &compute.device).unwrap();
    let held = values(dir).params;
    let net = map_params(net, |info, _| {
        held.get(&info.name).map(|t| Tensor::from_data(TensorData::new(t.values.clone(), [t.values.len()]), &compute.device))
    })
    .with_kernels(kernels);
    let x = Tensor::<4>::from_data(TensorData::new(input.values.clone(), [4, 3, 32, 32]), &compute.device);
    net.infer(x).into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

#[test]
fn imported_models_compute_pytorchs_logits() {
    let dir = tempfile::tempdir().unwrap();
    let expected = tensors(&fixture("logits.safetensors"));
    for (weights, text, key) in [("resnet8.pt", RESNET8, "resnet8"), ("vgg11-w0.125.safetensors", VGG11, "vgg11-w0.125")] {
        let text_out = ok(&import(dir.path(), &fixture(weights), text, key, &[]));
        assert!(text_out.contains("imported") && text_out.contains("num_batches_tracked"), "{text_out}");
        let want = &expected[key].values;
        for kernels in [Kernels::Burn, Kernels::Resilab] {
            let got = logits(&dir.path().join(key), text, &expected["input"], kernels);
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            eprintln!("{key} on {kernels:?}: largest logit difference from PyTorch {worst:.3e} (largest logit {scale:.3})");
            assert!(worst <= 1e-4 * scale, "{key} on {kernels:?}: logits differ from PyTorch's by {worst} (scale {scale})");
        }
    }
}

/// RESNET8 normalised as the probes were made: CIFAR-10's statistics.
fn cifar_normalised() -> String {
    RESNET8.replace("normalize = \"dataset\"", "normalize = { mean = [0.4914, 0.4822, 0.4465], std = [0.2470, 0.2435, 0.2616] }")
}

/// Writes a probe holding `images` ([n, 3, 32, 32]) and `logits` ([n, 10]).
fn probe(dir: &Path, name: &str, images: &[f32], logits: &[f32]) -> PathBuf {
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (i, l) = (bytes(images), bytes(logits));
    let n = images.len() / 3072;
    let views = [
        ("images", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![n, 3, 32, 32], &i).unwrap()),
        ("logits", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![n, logits.len() / n], &l).unwrap()),
    ];
    let path = dir.join(name);
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    path
}

#[test]
fn a_probe_verifies_the_forward_pass_and_the_normalisation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The same weights, forward pass and normalisation: verified, with the difference printed.
    let good = fixture("resnet8-probe.safetensors");
    let good = ["--probe", good.to_str().unwrap()];
    let text = ok(&import(d, &fixture("resnet8.pt"), &cifar_normalised(), "a", &good));
    assert!(text.contains("forward pass verified: on the probe's 8 images"), "{text}");
    // Without a probe the import goes through and says the forward pass is unverified.
    let text = ok(&import(d, &fixture("resnet8-stride.pt"), &cifar_normalised(), "b", &[]));
    assert!(text.contains("forward pass unverified") && text.contains("resilab_probe.py"), "{text}");
    // The stride on the other convolution: same names and shapes, other logits: refused, and
    // nothing is written.
    let strided = fixture("resnet8-stride-probe.safetensors");
    let o = import(d, &fixture("resnet8-stride.pt"), &cifar_normalised(), "c", &["--probe", strided.to_str().unwrap()]);
    assert_clean_error(&o, &["logits differ from the probe's", "stride", "no max-pool", "refused"]);
    assert!(!d.join("c").exists());
    // The training set's statistics instead of the probe's: the error names both.
    let o = import(d, &fixture("resnet8.pt"), RESNET8, "e", &good);
    assert_clean_error(&o, &["the probe was made with mean [0.4914, 0.4822, 0.4465]", "set data.normalize to the probe's"]);
    // Bad probes: another image shape, NaN logits, images before scaling, not a probe.
    let half = RESNET8.replace("[data]", "[data]\nimage_size = 16");
    let o = import(d, &fixture("resnet8.pt"), &half, "f", &good);
    assert_clean_error(&o, &["the probe's images are 3x32x32 with 10 classes", "takes 3x16x16"]);
    let nan = probe(d, "nan.safetensors", &[0.5; 3072], &[f32::NAN; 10]);
    assert_clean_error(&import(d, &fixture("resnet8.pt"), RESNET8, "g", &["--probe", nan.to_str().unwrap()]), &["holds a logit of NaN"]);
    let raw = probe(d, "raw.safetensors", &[128.0; 3072], &[0.0; 10]);
    assert_clean_error(&import(d, &fixture("resnet8.pt"), RESNET8, "h", &["--probe", raw.to_str().unwrap()]), &["outside [0, 1]"]);
    let logits = fixture("logits.safetensors");
    let o = import(d, &fixture("resnet8.pt"), RESNET8, "i", &["--probe", logits.to_str().unwrap()]);
    assert_clean_error(&o, &["holds no \"images\" tensor"]);
}

#[test]
fn an_import_without_data_normalize_names_both_choices() {
    let dir = tempfile::tempdir().unwrap();
    let o = import(dir.path(), &fixture("resnet8.pt"), &RESNET8.replace("normalize = \"dataset\"\n", ""), "a", &[]);
    assert_clean_error(&o, &["data.normalize is not set", "mean = [...], std = [...]", "normalize = \"dataset\""]);
    assert!(!dir.path().join("a").exists());
    let bad = RESNET8.replace("normalize = \"dataset\"", "normalize = \"imagenet\"");
    assert_clean_error(&import(dir.path(), &fixture("resnet8.pt"), &bad, "b", &[]), &["data.normalize", "expected \"dataset\""]);
}

#[test]
fn optimizer_state_follows_the_files_own_parameter_order() {
    // The fixture's first block registers conv2 and bn2 before conv1 and bn1, with the same
    // shapes: numbered by resilab's module order, their momentum would land swapped, silently.
    let dir = tempfile::tempdir().unwrap();
    let text = ok(&import(dir.path(), &fixture("resnet8-reordered-train.pt"), RESNET8, "ckpt", &[]));
    assert!(text.contains("momentum_buffer for 29 parameters, numbered in the file's state_dict order"), "{text}");
    let held = values(&dir.path().join("ckpt"));
    let truth = tensors(&fixture("resnet8-reordered-momentum.safetensors"));
    assert_eq!(truth.len(), 29);
    for (name, want) in &truth {
        assert_eq!(held.optim[name].buffers["momentum_buffer"].values, want.values, "{name}");
    }
    assert_ne!(truth["layer1.0.conv1.weight"].values, truth["layer1.0.conv2.weight"].values);
}

#[test]
fn a_training_checkpoint_brings_its_momentum_and_training_resumes_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{RESNET8}{UNPREFIX}");
    let report = ok(&import(dir.path(), &fixture("resnet8-train.pt"), &text, "ckpt", &[]));
    assert!(report.contains("optimizer state: momentum_buffer for"), "{report}");
    let source = resilab_interop::source::read(&fixture("resnet8-train.pt")).unwrap();
    let held = values(&dir.path().join("ckpt"));
    // State 0 belongs to the first parameter in parameters() order: the stem's convolution.
    let first = &source.optimizer[&0]["momentum_buffer"];
    assert_eq!(held.optim["stem.conv.weight"].buffers["momentum_buffer"].values, first.values);
    let last = &source.optimizer[&(source.optimizer.len() - 1)]["momentum_buffer"];
    assert_eq!(held.optim["classifier.fc.bias"].buffers["momentum_buffer"].values, last.values);
    assert_eq!(held.params["layer1.0.bn1.running_var"].values, source.model["module.layer1.0.bn1.running_var"].values);
    // The published experiment on it: alter the imported checkpoint, compare, evaluate, and
    // restart training from the altered file.
    let clean = dir.path().join("ckpt/step-00000000/worker-0.h5");
    let altered = dir.path().join("ckpt/step-00000000/altered.h5");
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/inject/bit-range.yaml");
    let (clean_s, altered_s) = (clean.to_str().unwrap(), altered.to_str().unwrap());
    ok(&run(&["inject", "--config", spec.to_str().unwrap(), "--file", clean_s, "--seed", "1", "--output", altered_s]));
    let diff = ok(&run(&["diff", clean_s, altered_s]));
    assert!(diff.contains("differ"), "{diff}");
    let eval: serde_json::Value = serde_json::from_str(&ok(&run(&["eval", altered_s, "--json"]))).unwrap();
    assert!(eval["clean"]["file"].as_str().unwrap().ends_with("worker-0.h5"), "{eval}");
    let cfg = dir.path().join("ckpt.toml");
    let out = dir.path().join("resumed");
    let train = ["train", "--config", cfg.to_str().unwrap(), "--resume", altered_s, "--out", out.to_str().unwrap(), "--quiet"];
    ok(&run(&[&train[..], &["--set", "checkpoint.on_mismatch=\"load\""]].concat()));
    assert!(out.join("summary.json").is_file());
}

#[test]
fn an_export_imports_back_bit_for_bit_with_its_optimizer_state() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{RESNET8}{UNPREFIX}");
    ok(&import(dir.path(), &fixture("resnet8-train.pt"), &text, "a", &[]));
    let file = dir.path().join("a.safetensors");
    let report = ok(&run(&["export", dir.path().join("a").to_str().unwrap(), "--out", file.to_str().unwrap(), "--optimizer"]));
    assert!(report.contains("optimizer tensors"), "{report}");
    // The same checkpoint exports to the same bytes.
    let again = dir.path().join("again.safetensors");
    ok(&run(&["export", dir.path().join("a").to_str().unwrap(), "--out", again.to_str().unwrap(), "--optimizer"]));
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&again).unwrap());
    ok(&import(dir.path(), &file, RESNET8, "b", &[]));
    let (a, b) = (values(&dir.path().join("a")), values(&dir.path().join("b")));
    assert_eq!(a.params.len(), b.params.len());
    for (name, t) in &a.params {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t.values), bits(&b.params[name].values), "{name}");
    }
    assert_eq!(a.optim.len(), b.optim.len());
    for (name, s) in &a.optim {
        assert_eq!(s.buffers, b.optim[name].buffers, "{name}");
    }
    // Adam's moments and step count, from a run resilab trained.
    let adam = RESNET8.replace("kind = \"sgd\"", "kind = \"adam\"").replace("lr = 0.05", "lr = 0.001");
    let cfg = write(dir.path(), "adam.toml", &adam);
    let run_dir = dir.path().join("adam");
    ok(&run(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        run_dir.to_str().unwrap(),
        "--quiet",
        "--set",
        "checkpoint.every_steps=1",
    ]));
    let ckpt = run_dir.join("checkpoints/step-00000001");
    let file = dir.path().join("adam.safetensors");
    ok(&run(&["export", ckpt.to_str().unwrap(), "--out", file.to_str().unwrap(), "--optimizer"]));
    ok(&import(dir.path(), &file, &adam, "adam-back", &[]));
    let (a, b) = (values(&ckpt), values(&dir.path().join("adam-back")));
    assert_eq!(a.params, b.params);
    assert!(!a.optim.is_empty());
    for (name, s) in &a.optim {
        assert_eq!(s.buffers, b.optim[name].buffers, "{name}");
        assert_eq!((s.step, b.optim[name].step), (1, 1), "{name}");
    }
}

/// `resnet8.pt`'s tensors with `edit` applied, as a safetensors file.
fn edited(dir: &Path, name: &str, edit: impl FnOnce(&mut BTreeMap<String, (Vec<usize>, Vec<f32>)>)) -> PathBuf {
    let mut t: BTreeMap<String, (Vec<usize>, Vec<f32>)> =
        tensors(&fixture("resnet8.pt")).into_iter().filter(|(_, h)| !h.integer).map(|(k, h)| (k, (h.shape, h.values))).collect();
    edit(&mut t);
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> =
        t.into_iter().map(|(k, (s, v))| (k, s, v.iter().flat_map(|x| x.to_le_bytes()).collect())).collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = bytes
        .iter()
        .map(|(k, s, b)| (k.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap()))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, safetensors::tensor::serialize(views, None).unwrap()).unwrap();
    path
}

#[test]
fn every_wrong_file_is_one_error_line_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = edited(d, "missing.safetensors", |t| {
        t.remove("layer2.0.bn1.running_var");
    });
    assert_clean_error(&import(d, &missing, RESNET8, "m", &[]), &["missing (1): layer2.0.bn1.running_var", "--allow-partial"]);
    let extra = edited(d, "extra.safetensors", |t| {
        t.insert("head.weight".into(), (vec![2], vec![0.0; 2]));
    });
    assert_clean_error(&import(d, &extra, RESNET8, "e", &[]), &["unexpected (1): head.weight"]);
    let shape = edited(d, "shape.safetensors", |t| {
        let w = t.get_mut("classifier.fc.weight").unwrap();
        w.0 = vec![w.0[1], w.0[0]];
    });
    let o = import(d, &shape, RESNET8, "s", &[]);
    assert_clean_error(&o, &["classifier.fc.weight is [64, 10] in the file, [10, 64] in the model", "transposed", "[out, in]"]);
    // An ImageNet stem (7x7): another architecture, which the error says and no rename is offered for.
    let stem = edited(d, "stem.safetensors", |t| {
        t.insert("stem.conv.weight".into(), (vec![16, 3, 7, 7], vec![0.0; 16 * 3 * 49]));
    });
    let o = import(d, &stem, RESNET8, "stem", &[]);
    assert_clean_error(&o, &["stem.conv.weight is [16, 3, 7, 7]", "CIFAR stem", "no max-pool", "no rename fixes"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("[[import.rename]]"), "{}", String::from_utf8_lossy(&o.stderr));
    let text = write(d, "notes.pt", "not a checkpoint\n");
    assert_clean_error(&import(d, &text, RESNET8, "t", &[]), &["notes.pt", "not a readable PyTorch file"]);
    let code = import(d, &fixture("code.pt"), RESNET8, "c", &[]);
    assert_clean_error(&code, &["code.pt", "posix.system", "nothing was run"]);
    assert!(!Path::new("/tmp/resilab-fixture-ran-code").exists(), "the pickle's code ran");
    // BatchNorm's batch counts are dropped, never listed as unexpected (47 = 56 - 9 counts).
    let prefixed = import(d, &fixture("resnet8-train.pt"), RESNET8, "p", &[]);
    assert_clean_error(&prefixed, &["unexpected (47): module.classifier.fc.bias", "(39 more)", "^module"]);
    assert!(!String::from_utf8_lossy(&prefixed.stderr).contains("num_batches_tracked"));
    let vgg = import(d, &fixture("vgg11-w0.125.safetensors"), RESNET8, "v", &[]);
    assert_clean_error(&vgg, &["does not fit resnet8", "features.0.conv.weight", "is [model] the architecture"]);
    // Nothing was written by a failed import.
    for out in ["m", "e", "s", "stem", "t", "c", "p", "v"] {
        assert!(!d.join(out).join("step-00000000").exists(), "{out}");
    }
}

/// Runs `scripts/hostile_pickles.py` (python3's standard library only), which writes four
/// hostile `.pt` files into `dir` and prints their paths; `None` where python3 is missing,
/// except under `CI=true`.
fn hostile_pickles(dir: &Path) -> Option<Vec<PathBuf>> {
    let stdout = python_script("scripts/hostile_pickles.py", dir)?;
    Some(stdout.lines().map(PathBuf::from).collect())
}

/// Runs the Python script `script` (a path from the repository root, standard library only)
/// with `dir` as its argument and returns what it printed; `None` where python3 is missing,
/// except under `CI=true`.
fn python_script(script: &str, dir: &Path) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    match Command::new("python3").arg(&script).arg(dir).output() {
        Ok(o) => {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            Some(String::from_utf8(o.stdout).unwrap())
        }
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("python3 is required in CI (see .ci/run): {e}");
            }
            eprintln!("skipping: python3 is not installed ({e})");
            None
        }
    }
}

/// A valid state_dict whose pickle also calls code is refused by name, whether the call's
/// result is popped (no trace in the parsed value), kept under a key, named by protocol 4's
/// STACK_GLOBAL, or under a module a prefix list lets through (`builtins.`, `numpy.`).
#[test]
fn a_pickle_that_would_call_code_anywhere_is_refused_by_name_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(files) = hostile_pickles(&d.join("hostile")) else { return };
    let cases = [
        ("system.pt", "GLOBAL posix.system at byte "),
        ("eval.pt", "GLOBAL builtins.eval at byte "),
        ("stack-global.pt", "STACK_GLOBAL builtins.eval at byte "),
        ("runstring.pt", "GLOBAL numpy.testing._private.utils.runstring at byte "),
    ];
    assert_eq!(files.len(), cases.len(), "{files:?}");
    for (name, callable) in cases {
        let file = d.join("hostile").join(name);
        assert!(files.contains(&file), "{files:?}");
        let out = name.trim_end_matches(".pt");
        let o = import(d, &file, RESNET8, out, &[]);
        assert_clean_error(&o, &[name, callable, "of archive/data.pkl", "nothing was run"]);
        assert!(!d.join(out).exists(), "{name}: the failed import wrote {}", d.join(out).display());
    }
}

#[test]
fn allow_partial_imports_what_fits_and_names_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let missing = edited(dir.path(), "missing.safetensors", |t| {
        t.remove("stem.bn.weight");
    });
    let report = ok(&import(dir.path(), &missing, RESNET8, "m", &["--allow-partial"]));
    assert!(report.contains("not imported (--allow-partial): missing (1): stem.bn.weight"), "{report}");
    let held = values(&dir.path().join("m"));
    assert_eq!(held.params["stem.bn.weight"].values, vec![1.0; 16], "the configured initialisation is kept");
    assert_eq!(held.params["stem.conv.weight"].values, tensors(&fixture("resnet8.pt"))["stem.conv.weight"].values);
}

#[test]
fn an_export_with_the_import_renames_undone_carries_the_files_own_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = format!("{RESNET8}{UNPREFIX}");
    ok(&import(d, &fixture("resnet8-train.pt"), &text, "a", &[]));
    let cfg = write(d, "renames.toml", &text);
    let file = d.join("back.safetensors");
    ok(&run(&["export", d.join("a").to_str().unwrap(), "--out", file.to_str().unwrap(), "--renames-from", cfg.to_str().unwrap()]));
    // The names are the DDP module's ("module." first), every one of the file's model tensors,
    // and the values are the file's.
    let module = tensors(&fixture("resnet8-train.pt"));
    let exported = tensors(&file);
    assert_eq!(exported.keys().collect::<Vec<_>>(), module.keys().collect::<Vec<_>>());
    assert_eq!(exported["module.layer1.0.conv1.weight"].values, module["module.layer1.0.conv1.weight"].values);
    // Rules that cannot be undone: one line naming the rule, and no file.
    let grouped = write(d, "grouped.toml", &format!("{RESNET8}[[import.rename]]\nfrom = \"^m(\\\\w)(\\\\w)\"\nto = \"$1\"\n"));
    let no = d.join("no.safetensors");
    let o = run(&["export", d.join("a").to_str().unwrap(), "--out", no.to_str().unwrap(), "--renames-from", grouped.to_str().unwrap()]);
    assert_clean_error(&o, &["import.rename[0]: group 2 of from = \"^m(\\\\w)(\\\\w)\" is used 0 times in to = \"$1\""]);
    assert!(!no.exists());
    // An import whose rules map two of the file's names to one says so.
    let twice = format!("{RESNET8}[[import.rename]]\nfrom = \"^module\\\\.(layer1\\\\.0\\\\.conv)[12]\"\nto = \"$1\"\n{UNPREFIX}");
    let o = import(d, &fixture("resnet8-train.pt"), &twice, "t", &[]);
    assert_clean_error(&o, &["the rules map module.layer1.0.conv1.weight to the same name, two tensors to one"]);
}

#[test]
fn neither_command_replaces_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    ok(&import(dir.path(), &fixture("resnet8.pt"), RESNET8, "a", &[]));
    let again = import(dir.path(), &fixture("resnet8.pt"), RESNET8, "a", &[]);
    assert_clean_error(&again, &["already holds checkpoints"]);
    // A directory another import is writing (claimed, and its lock held: here by this process)
    // is refused at once.
    let busy = dir.path().join("busy");
    resilab_checkpoint::claim(&busy, false).unwrap();
    let held = resilab_runner::files::lock_dir(&busy, "--out").unwrap();
    assert_clean_error(&import(dir.path(), &fixture("resnet8.pt"), RESNET8, "busy", &[]), &["is in use by process"]);
    drop(held);
    ok(&import(dir.path(), &fixture("resnet8.pt"), RESNET8, "busy", &[]));
    let file = write(dir.path(), "taken.safetensors", "keep me");
    let o = run(&["export", dir.path().join("a").to_str().unwrap(), "--out", file.to_str().unwrap()]);
    assert_clean_error(&o, &["taken.safetensors", "exists"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

/// Runs `scripts/hostile_archives.py`, which writes hostile ZIP archives and tensor views into
/// `dir`; `None` where python3 is missing, except under `CI=true`.
fn hostile_archives(dir: &Path) -> Option<()> {
    python_script("scripts/hostile_archives.py", dir).map(drop)
}

/// Archives that two readers could read differently (Python's zipfile writes and reads each of
/// them): a name twice (torch.load takes the first `data.pkl`, which calls posix.system; the zip
/// crate the last, a clean state_dict), a local header that disagrees with the central
/// directory, bytes no entry claims. Each is one error naming the file and the entry, and
/// nothing is written; a well-formed archive of the same entries gets past the ZIP check.
#[test]
fn zip_archives_that_readers_could_read_differently_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(()) = hostile_archives(&d.join("hostile")) else { return };
    let disagrees = "its local header disagrees with its central directory entry on its";
    let cases = [
        ("dup-name.pt", "entry good/data.pkl appears twice (entries 1 and 2 of its central directory)".to_string()),
        ("local-name.pt", format!("entry good/data/0: {disagrees} name (local name good/data/1)")),
        ("local-size.pt", format!("entry good/data/0: {disagrees} sizes (17 and 17 bytes, 16 and 16)")),
        ("local-method.pt", format!("entry good/data/0: {disagrees} compression method (8, 0)")),
        ("local-crc.pt", format!("entry good/data/0: {disagrees} CRC (12345678, ")),
        ("gap.pt", "after entry good/byteorder, before entry good/data/0, belong to no entry".to_string()),
        ("before-central.pt", "after entry good/version, before its central directory, belong to no entry".to_string()),
        ("trailing.pt", "bytes follow its end-of-central-directory record that no record claims".to_string()),
    ];
    for (name, want) in &cases {
        let out = name.trim_end_matches(".pt");
        let o = import(d, &d.join("hostile").join(name), RESNET8, out, &[]);
        assert_clean_error(&o, &[name, "is not a readable PyTorch file: its ZIP archive: ", want]);
        assert!(!d.join(out).exists(), "{name}: the failed import wrote {}", d.join(out).display());
    }
    let clean = import(d, &d.join("hostile/clean.pt"), RESNET8, "clean", &[]);
    assert_clean_error(&clean, &["clean.pt does not fit resnet8", "unexpected (1): fc.weight (float32 [2, 2])"]);
}

/// `torch.zeros(1).expand(2_400_000_000)` under a name the model lacks is reported from its
/// header (name, type, shape) before anything is read, within a 1 GiB budget (9.6 GB if it were
/// materialised; the address space is capped at 6 GiB so that a regression fails fast instead
/// of filling the machine). A view the model asks for that reaches past its storage is refused
/// naming it.
#[test]
fn a_view_is_never_expanded_past_its_storage_and_an_unexpected_one_is_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(()) = hostile_archives(&d.join("hostile")) else { return };
    let cfg = write(d, "run.toml", RESNET8);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {}; exec \"$@\"", 6 << 20))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_resilab"))
        .args(["import", d.join("hostile/expanded-view.pt").to_str().unwrap(), "--config", cfg.to_str().unwrap()])
        .args(["--out", d.join("view").to_str().unwrap()])
        .env("RUST_BACKTRACE", "0")
        .env("RESILAB_MAX_MEMORY", "1G");
    let (o, rss) = common::output_and_peak_rss(&mut cmd);
    eprintln!("expanded view: exit {:?}, peak RSS {} MiB", o.status.code(), rss >> 20);
    assert_clean_error(&o, &["expanded-view.pt does not fit resnet8", "unexpected (1): huge (float32 [2400000000])"]);
    assert!(rss < 1228 << 20, "peak RSS {} MiB", rss >> 20);
    assert!(!d.join("view").join("step-00000000").exists());
    let o = import(d, &d.join("hostile/overrun-view.pt"), RESNET8, "overrun", &[]);
    assert_clean_error(
        &o,
        &[
            "overrun-view.pt: tensor classifier.fc.bias: its view (shape [10], stride [1], offset 0) reaches storage element 10, past the 1 elements its storage '0' holds",
        ],
    );
}
