use std::collections::BTreeMap;

use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::Gradients;
use resilab_models::{Net, named_params};

/// Gradients by parameter name, flattened (shape as in [`resilab_models::ParamInfo`]).
pub type Grads = BTreeMap<String, Tensor<1>>;

/// Takes the gradient of every trainable parameter of `net` out of `grads`, by name.
pub fn named_grads(net: &Net, grads: Gradients) -> Grads {
    let mut by_id = GradientsParams::from_grads(grads, net);
    let mut out = Grads::new();
    for info in named_params(net).into_iter().filter(|p| p.trainable) {
        let n = info.numel();
        let g = match info.shape.len() {
            1 => by_id.remove::<1>(info.id),
            2 => by_id.remove::<2>(info.id).map(|t| t.reshape([n])),
            3 => by_id.remove::<3>(info.id).map(|t| t.reshape([n])),
            4 => by_id.remove::<4>(info.id).map(|t| t.reshape([n])),
            _ => None,
        };
        if let Some(g) = g {
            out.insert(info.name, g);
        }
    }
    out
}

/// Averages the gradients of several workers, in rank order (a deterministic reduction).
pub fn average(grads: Vec<Grads>) -> Grads {
    let n = grads.len();
    let mut it = grads.into_iter();
    let Some(mut acc) = it.next() else { return Grads::new() };
    if n == 1 {
        return acc;
    }
    for g in it {
        for (name, t) in g {
            if let Some(a) = acc.remove(&name) {
                acc.insert(name, a + t);
            }
        }
    }
    acc.into_iter().map(|(k, v)| (k, v.div_scalar(n as f64))).collect()
}
