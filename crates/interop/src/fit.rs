//! Fitting a file's tensors to a model: the configured renames, then every name and shape
//! checked against the model's, with every problem named in one error.

use std::collections::BTreeMap;

use regex::Regex;
use resilab_runner::Rename;
use resilab_train::{HostParamState, HostTensor};

use crate::source::{Host, Source, Tensor};
use crate::{Error, Result};

/// One parameter or buffer of the model: its name and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// PyTorch-style name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Whether the optimizer updates it (its index in `parameters()` order counts).
    pub trainable: bool,
}

/// The file's tensors placed in the model.
#[derive(Clone, Debug, Default)]
pub struct Fitted {
    /// Values by model name.
    pub params: BTreeMap<String, HostTensor>,
    /// Optimizer state by model name.
    pub optim: BTreeMap<String, HostParamState>,
    /// Problems passed over under `--allow-partial` (empty otherwise).
    pub skipped: Vec<String>,
    /// BatchNorm `num_batches_tracked` counts by the BatchNorm's model name (`layer1.0.bn1`),
    /// for the BatchNorms the model has: the checkpoint keeps them and `export` writes them back.
    pub batch_counts: BTreeMap<String, u64>,
    /// Which order numbered the optimizer's state (`None`: the file holds none).
    pub optimizer_order: Option<String>,
}

/// The compiled `[[import.rename]]` rules.
pub fn compile(rules: &[Rename]) -> Result<Vec<(Regex, String)>> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Regex::new(&r.from).map(|re| (re, r.to.clone())).map_err(|e| {
                Error::Config(format!("import.rename[{i}].from = {:?} is not a regular expression: {}", r.from, one_line_regex(&e)))
            })
        })
        .collect()
}

fn one_line_regex(e: &regex::Error) -> String {
    e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// `name` after every rule, in order.
pub fn rename(name: &str, rules: &[(Regex, String)]) -> String {
    rules.iter().fold(name.to_string(), |n, (re, to)| re.replace_all(&n, to.as_str()).into_owned())
}

/// Names shown per kind of problem; the rest are counted.
const SHOWN: usize = 8;

/// The problems found fitting a file to a model.
#[derive(Default)]
struct Problems {
    missing: Vec<String>,
    unexpected: Vec<String>,
    shapes: Vec<String>,
}

impl Problems {
    fn count(&self) -> usize {
        self.missing.len() + self.unexpected.len() + self.shapes.len()
    }

    fn list(&self) -> Vec<String> {
        let mut parts = Vec::new();
        for (what, items) in [("missing", &self.missing), ("unexpected", &self.unexpected), ("wrong shape", &self.shapes)] {
            if !items.is_empty() {
                let shown = items.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
                let more = if items.len() > SHOWN { format!(", ... ({} more)", items.len() - SHOWN) } else { String::new() };
                parts.push(format!("{what} ({}): {shown}{more}", items.len()));
            }
        }
        parts
    }
}

fn shape_problem(name: &str, file: &[usize], model: &[usize]) -> String {
    let mut text = format!("{name} is {file:?} in the file, {model:?} in the model");
    if file.len() == 2 && model.len() == 2 && file[0] == model[1] && file[1] == model[0] {
        text.push_str(" (transposed: a Linear weight is [out, in], as PyTorch stores it)");
    }
    text
}

/// Places the file's model tensors (renamed) in `slots`, the model's parameters and buffers in
/// module order. Every missing, unexpected or wrongly shaped tensor is named in one error unless
/// `allow_partial`, which keeps what fits and lists the rest in [`Fitted::skipped`].
///
/// Names and shapes come from the file's headers: no tensor is read ([`Tensor::load`]) until
/// every one has been matched, and then only those the model takes, so a tensor the model does
/// not have is reported (with its type and shape) without its values ever being read.
pub fn fit<T: Tensor>(source: &Source<T>, slots: &[Slot], rules: &[(Regex, String)], model: &str, allow_partial: bool) -> Result<Fitted> {
    let by_name: BTreeMap<&str, &Slot> = slots.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut problems = Problems::default();
    let mut fitted = Fitted::default();
    // Each model name, and the file's name that took it first.
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    let mut accepted = Vec::new();
    let mut counts = Vec::new();
    for (file_name, host) in &source.model {
        let name = rename(file_name, rules);
        let shown = if name == *file_name { name.clone() } else { format!("{file_name} (renamed {name})") };
        // BatchNorm's batch count is kept for a BatchNorm the model has, and passed over
        // otherwise: under a name the model lacks, the BatchNorm's other tensors already say
        // what does not fit.
        if let Some(bn) = name.strip_suffix(".num_batches_tracked").filter(|_| host.shape().iter().product::<usize>() == 1) {
            if by_name.contains_key(format!("{bn}.running_var").as_str()) {
                counts.push((bn.to_string(), shown, host));
            }
            continue;
        }
        let first = !sources.contains_key(&name);
        let other = sources.entry(name.clone()).or_insert_with(|| file_name.clone()).clone();
        match by_name.get(name.as_str()) {
            _ if !first => problems.unexpected.push(format!("{shown}: the rules map {other} to the same name, two tensors to one")),
            None => problems.unexpected.push(format!("{shown} ({})", host.header())),
            Some(slot) if slot.shape != host.shape() => problems.shapes.push(shape_problem(&shown, host.shape(), &slot.shape)),
            Some(_) => accepted.push((name, host)),
        }
    }
    problems.missing = slots.iter().filter(|s| !sources.contains_key(&s.name)).map(|s| s.name.clone()).collect();
    if problems.count() > 0 {
        if !allow_partial {
            return Err(Error::Fit {
                path: source.path.clone(),
                model: model.to_string(),
                problems: problems.list().join("; "),
                hint: hint(source, rules, &problems, accepted.len() * 2 < slots.len()),
            });
        }
        fitted.skipped = problems.list();
    }
    for (name, tensor) in accepted {
        let host = tensor.load()?;
        fitted.params.insert(name, HostTensor { shape: host.shape, values: host.values });
    }
    for (bn, shown, tensor) in counts {
        let count = step_count(&tensor.load()?)
            .ok_or_else(|| Error::file(&source.path, format!("{shown} is not a count (a whole number, at least 0)")))?;
        fitted.batch_counts.insert(bn, count);
    }
    Ok(fitted)
}

fn hint<T>(source: &Source<T>, rules: &[(Regex, String)], problems: &Problems, most_missing: bool) -> String {
    if !problems.shapes.is_empty() && problems.shapes.iter().all(|p| p.contains("(transposed")) {
        return "store each Linear weight as [out, in], as torch.nn.Linear keeps it".into();
    }
    if !problems.shapes.is_empty() {
        // No rename changes a shape: the file holds another architecture.
        return String::from(
            "a tensor of another shape is another architecture, which no rename fixes: is [model] the one the file was saved from (depth, width, batch_norm)? resilab builds the forward passes of docs/pytorch/resilab_models.py: ResNets with a CIFAR stem (one 3x3 stride-1 convolution, no max-pool; torchvision's ImageNet ResNets have a 7x7 stem and a max-pool), VGG and AlexNet for small images",
        );
    }
    let mut h = "map the names with [[import.rename]] in the configuration, or pass --allow-partial to import what fits".to_string();
    if most_missing {
        h = format!(
            "most of the model is not in the file: is [model] the architecture (depth, width, batch_norm) the file was saved from? Else {h}"
        );
    }
    if source.model.keys().all(|k| rename(k, rules).starts_with("module.")) {
        h = format!(
            "the names start with \"module.\" (a model saved from DataParallel): add [[import.rename]] from = \"^module\\\\.\", to = \"\"; or {h}"
        );
    }
    h
}

/// The trainable slots in the order the file's optimizer numbers them. PyTorch numbers an
/// optimizer's state by `parameters()` order, the module's registration order, which is the
/// order of the file's `state_dict` (its parameters, without buffers). When the file keeps no
/// order (safetensors) or its order does not name every trainable slot, resilab's own module
/// order, which `resilab export` writes.
fn optimizer_order<'a, T>(source: &Source<T>, slots: &'a [Slot], rules: &[(Regex, String)]) -> (Vec<&'a Slot>, &'static str) {
    let trainable: Vec<&Slot> = slots.iter().filter(|s| s.trainable).collect();
    let by_name: BTreeMap<&str, &Slot> = trainable.iter().map(|s| (s.name.as_str(), *s)).collect();
    let mut seen = std::collections::BTreeSet::new();
    let file: Vec<&Slot> = source
        .order
        .iter()
        .filter_map(|n| by_name.get(rename(n, rules).as_str()).copied())
        .filter(|s| seen.insert(s.name.as_str()))
        .collect();
    match (file.len() == trainable.len(), source.order.is_empty()) {
        (true, _) => (file, "the file's state_dict order"),
        (false, true) => (trainable, "resilab's module order (the file keeps no order)"),
        (false, false) => (trainable, "resilab's module order (the file's state_dict does not name every trainable tensor)"),
    }
}

/// Places the file's optimizer state: entry `i` belongs to the `i`-th trainable parameter in
/// the file's own order ([`optimizer_order`]). Each buffer must have its parameter's shape, and
/// the buffers must be those `kept` (the configured optimizer's). `step` (Adam) becomes the
/// parameter's update count.
pub fn fit_optimizer<T: Tensor>(
    source: &Source<T>,
    slots: &[Slot],
    rules: &[(Regex, String)],
    kept: &[&str],
    fitted: &mut Fitted,
) -> Result<()> {
    if source.optimizer.is_empty() {
        return Ok(());
    }
    let (trainable, order) = optimizer_order(source, slots, rules);
    fitted.optimizer_order = Some(order.to_string());
    let path = &source.path;
    let held: std::collections::BTreeSet<&str> =
        source.optimizer.values().flat_map(|b| b.keys().map(String::as_str)).filter(|b| *b != "step").collect();
    let wanted: std::collections::BTreeSet<&str> = kept.iter().copied().collect();
    if held != wanted {
        let list = |s: &std::collections::BTreeSet<&str>| {
            if s.is_empty() { "no buffers".to_string() } else { s.iter().copied().collect::<Vec<_>>().join(", ") }
        };
        return Err(Error::file(
            path,
            format!(
                "the optimizer state holds {}, but the configured optimizer keeps {}: set [optimizer] to the optimizer the file was saved with",
                list(&held),
                list(&wanted)
            ),
        ));
    }
    for (&index, buffers) in &source.optimizer {
        let slot = trainable.get(index).ok_or_else(|| {
            Error::file(path, format!("optimizer state {index} has no parameter: the model has {} trainable tensors", trainable.len()))
        })?;
        let mut state = HostParamState::default();
        for (buffer, host) in buffers {
            if buffer == "step" {
                let count = (host.shape().iter().product::<usize>() == 1).then(|| host.load()).transpose()?;
                state.step = count
                    .as_ref()
                    .and_then(step_count)
                    .ok_or_else(|| Error::file(path, format!("optimizer state {index}: step is not a count")))?;
                continue;
            }
            if host.shape() != slot.shape {
                return Err(Error::file(
                    path,
                    format!(
                        "optimizer state {index}.{buffer} is {:?}, but parameter {index} ({}) is {:?}: the optimizer was saved for another model",
                        host.shape(),
                        slot.name,
                        slot.shape
                    ),
                ));
            }
            let host = host.load()?;
            state.buffers.insert(buffer.clone(), HostTensor { shape: host.shape, values: host.values });
        }
        fitted.optim.insert(slot.name.clone(), state);
    }
    Ok(())
}

fn step_count(host: &Host) -> Option<u64> {
    let [v] = host.values.as_slice() else { return None };
    (v.is_finite() && *v >= 0.0 && v.fract() == 0.0).then_some(*v as u64)
}

/// The parameters and buffers of `net`, in module order.
pub fn slots(net: &resilab_models::Net) -> Vec<Slot> {
    resilab_models::named_params(net).into_iter().map(|p| Slot { name: p.name, shape: p.shape, trainable: p.trainable }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(shape: &[usize]) -> Host {
        Host { shape: shape.to_vec(), values: vec![0.5; shape.iter().product()], integer: false }
    }

    fn slot(name: &str, shape: &[usize]) -> Slot {
        Slot { name: name.into(), shape: shape.to_vec(), trainable: !name.ends_with("running_var") }
    }

    #[test]
    fn renames_apply_in_order_and_a_bad_pattern_names_its_key() {
        let rules = compile(&[
            Rename { from: "^module\\.".into(), to: String::new() },
            Rename { from: "downsample\\.0\\.".into(), to: "downsample.conv.".into() },
        ])
        .unwrap();
        assert_eq!(rename("module.layer2.0.downsample.0.weight", &rules), "layer2.0.downsample.conv.weight");
        let e = compile(&[Rename { from: "ok".into(), to: String::new() }, Rename { from: "(".into(), to: String::new() }]).unwrap_err();
        assert!(e.to_string().starts_with("import.rename[1].from = \"(\" is not a regular expression"), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }

    #[test]
    fn every_problem_is_named_and_a_transposed_linear_is_called_so() {
        let slots = [slot("fc.weight", &[10, 4]), slot("fc.bias", &[10]), slot("bn.running_mean", &[4]), slot("bn.running_var", &[4])];
        let mut source = Source { path: "w.pt".into(), ..Source::default() };
        source.model.insert("fc.weight".into(), host(&[4, 10]));
        source.model.insert("bn.running_mean".into(), host(&[4]));
        source.model.insert("bn.num_batches_tracked".into(), Host { integer: true, values: vec![168.0], ..host(&[]) });
        source.model.insert("head.bias".into(), host(&[2]));
        let e = fit(&source, &slots, &[], "m", false).unwrap_err().to_string();
        assert!(e.contains("missing (2): fc.bias, bn.running_var"), "{e}");
        assert!(e.contains("unexpected (1): head.bias"), "{e}");
        assert!(e.contains("wrong shape (1): fc.weight is [4, 10] in the file, [10, 4] in the model (transposed"), "{e}");
        let partial = fit(&source, &slots, &[], "m", true).unwrap();
        assert_eq!(partial.params.keys().collect::<Vec<_>>(), ["bn.running_mean"]);
        assert_eq!((partial.batch_counts.into_iter().collect::<Vec<_>>(), partial.skipped.len()), (vec![("bn".to_string(), 168)], 3));
    }

    #[test]
    fn optimizer_state_goes_to_the_trainable_parameters_in_order() {
        let slots = [slot("a.weight", &[3]), slot("bn.running_var", &[3]), slot("b.weight", &[2])];
        let mut source = Source { path: "w.pt".into(), ..Source::default() };
        source.optimizer.entry(0).or_default().insert("momentum_buffer".into(), host(&[3]));
        source.optimizer.entry(1).or_default().insert("momentum_buffer".into(), host(&[2]));
        let mut fitted = Fitted::default();
        fit_optimizer(&source, &slots, &[], &["momentum_buffer"], &mut fitted).unwrap();
        assert_eq!(fitted.optim.keys().collect::<Vec<_>>(), ["a.weight", "b.weight"]);
        let e = fit_optimizer(&source, &slots, &[], &["exp_avg", "exp_avg_sq"], &mut Fitted::default()).unwrap_err().to_string();
        assert!(e.contains("holds momentum_buffer, but the configured optimizer keeps exp_avg, exp_avg_sq"), "{e}");
        source.optimizer.entry(1).or_default().insert("momentum_buffer".into(), host(&[3]));
        let e = fit_optimizer(&source, &slots, &[], &["momentum_buffer"], &mut Fitted::default()).unwrap_err().to_string();
        assert!(e.contains("optimizer state 1.momentum_buffer is [3], but parameter 1 (b.weight) is [2]"), "{e}");
    }

    #[test]
    fn optimizer_state_follows_the_files_own_parameter_order() {
        // The file's module registered b before a (same shapes): state 0 is b's.
        let slots = [slot("a.weight", &[3]), slot("b.weight", &[3])];
        let mut source = Source { path: "w.pt".into(), ..Source::default() };
        let buffer = |v: f32| [("momentum_buffer".to_string(), Host { values: vec![v; 3], ..host(&[3]) })].into_iter().collect();
        source.optimizer.insert(0, buffer(1.0));
        source.optimizer.insert(1, buffer(2.0));
        let momentum = |f: &Fitted, n: &str| f.optim[n].buffers["momentum_buffer"].values[0];
        let mut fitted = Fitted::default();
        fit_optimizer(&source, &slots, &[], &["momentum_buffer"], &mut fitted).unwrap();
        assert_eq!((momentum(&fitted, "a.weight"), momentum(&fitted, "b.weight")), (1.0, 2.0), "no order: the model's");
        source.order = vec!["m.b.weight".into(), "m.bn.running_var".into(), "m.a.weight".into()];
        let rules = compile(&[Rename { from: "^m\\.".into(), to: String::new() }]).unwrap();
        let mut fitted = Fitted::default();
        fit_optimizer(&source, &slots, &rules, &["momentum_buffer"], &mut fitted).unwrap();
        assert_eq!((momentum(&fitted, "a.weight"), momentum(&fitted, "b.weight")), (2.0, 1.0), "the file's order, renamed");
        assert_eq!(fitted.optimizer_order.as_deref(), Some("the file's state_dict order"));
    }
}
