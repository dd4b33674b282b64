//! A worker's forward and backward pass, with the hooks' view of its forward pass (each
//! block's output, which a hook may replace).

use burn::nn::loss::CrossEntropyLossConfig;
use burn::prelude::*;
use resilab_data::{Dataset, Normalization};
use resilab_models::{Mode, Net};

use crate::grads::named_grads;
use crate::hooks::{Activation, Control, Ctx, Hooks, NoHooks, Point};
use crate::worker::{LocalPass, Worker, count_correct};

impl Worker {
    /// Forward and backward pass on the images `indices` of `data`.
    pub fn forward_backward(
        &mut self,
        data: &Dataset,
        norm: &Normalization,
        indices: &[usize],
        augment: bool,
        device: &Device,
    ) -> LocalPass {
        let (rank, loss_scale, precision) = (self.rank, self.loss_scale(), self.net.precision);
        let ctx = Ctx { step: 0, rank, world: 1, attempt: 0, micro_batch: None, point: Point::Forward, loss_scale, precision };
        self.forward_backward_with(data, norm, indices, augment, device, &mut NoHooks, &ctx).0
    }

    /// [`Worker::forward_backward`] with the forward pass watched by `hooks` (see
    /// [`forward_watched`]); also returns the first control other than `Continue` that
    /// [`Hooks::on_activation`] gave.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward_with(
        &mut self,
        data: &Dataset,
        norm: &Normalization,
        indices: &[usize],
        augment: bool,
        device: &Device,
        hooks: &mut dyn Hooks,
        ctx: &Ctx,
    ) -> (LocalPass, Control) {
        let (x, y) = if augment { data.batch_augmented(indices, norm, &mut self.rng, device) } else { data.batch(indices, norm, device) };
        let blocks = self.net.blocks.len();
        let (out, control) = forward_watched(&mut self.net, 0..blocks, x, hooks, ctx);
        let [b, k, _, _] = out.dims();
        let logits = out.reshape([b, k]);
        let correct = count_correct(logits.clone(), y.clone());
        let loss = CrossEntropyLossConfig::new().init(device).forward(logits, y);
        let loss_value = f64::from(loss.clone().into_scalar::<f32>());
        // fp16: the loss times the scale, so that the gradients come back scaled.
        let scaled = match self.loss_scale() {
            Some(scale) => loss.mul_scalar(scale),
            None => loss,
        };
        let grads = named_grads(&self.net, scaled.backward());
        (LocalPass { loss: loss_value, correct, count: indices.len(), grads }, control)
    }
}

/// Runs blocks `range` of `net` in training mode. When `hooks.watch_forward(ctx)` is true,
/// calls [`Hooks::on_activation`] on each block's output and feeds the next block the
/// replacement it sets: elements that differ become constants (their gradient stops there,
/// as after an in-place write), the rest keep theirs. Returns the output and the first control
/// other than `Continue` (a `Skip` lets the pass finish; anything else ends it early).
pub fn forward_watched(
    net: &mut Net,
    range: std::ops::Range<usize>,
    x: Tensor<4>,
    hooks: &mut dyn Hooks,
    ctx: &Ctx,
) -> (Tensor<4>, Control) {
    let ctx = Ctx { point: Point::Forward, ..*ctx };
    if !hooks.watch_forward(&ctx) {
        return (net.forward_blocks(range, x, Mode::Train), Control::Continue);
    }
    let (mut y, exec) = (x, net.exec());
    let mut control = Control::Continue;
    for i in range {
        y = net.blocks[i].forward(y, Mode::Train, exec);
        let mut act = Activation { block: i, name: net.block_names[i].clone(), values: y.clone().without_autodiff(), replacement: None };
        let c = hooks.on_activation(&ctx, &mut act);
        if let Some(r) = act.replacement {
            let changed = r.clone().not_equal(act.values);
            y = y.mask_where(changed, r);
        }
        match c {
            Control::Continue => {}
            Control::Skip => control = Control::Skip,
            other => return (y, other),
        }
    }
    (y, control)
}
