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
