//! Mixed precision in the style of PyTorch's autocast: the arithmetic format a network's
//! layers compute in ([`Precision`]), emulated on float32 kernels by rounding at the tensor
//! boundaries where autocast keeps a half-precision tensor.
//!
//! With `bf16` or `fp16`, a layer rounds what autocast casts (a convolution's or linear
//! layer's input, weight and bias) and every output autocast stores in the half format (the
//! outputs of convolutions, linear layers, BatchNorm, the residual addition and average
//! pooling); ReLU and max pooling change no value, so their outputs need no rounding. The
//! parameters (master weights), BatchNorm's statistics, the loss and the optimizer stay fp32.
//! Each rounding is what a float cast to the half format and back gives (one pass of resilab's
//! kernel on the flex device, the cast itself elsewhere), and under autodiff its backward step
//! rounds the gradient the same way (as Burn's cast backward casts the gradient to the input's
//! format): gradients of activations and weights are half values, as autocast's are,
//! and an fp16 value above 65,504 becomes infinite in either direction.
//!
//! What this does not reproduce of a GPU's arithmetic: a tensor core multiplies half values
//! exactly and accumulates in fp32 as the kernels here do, but in another order, and a fused
//! GPU kernel may skip a rounding between two ops that autocast's op-by-op execution makes.

use burn::prelude::*;
use burn::tensor::FloatDType;
use resilab_kernels::round::Half;
use serde::{Deserialize, Serialize};

use crate::kernels::Kernels;

/// The format a network's layers compute in (`train.precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in float32 (the bits of a run without this setting).
    #[default]
    Fp32,
    /// bfloat16 activations, weight copies and gradients (8 exponent bits, 7 mantissa bits).
    Bf16,
    /// IEEE half precision (5 exponent bits, 10 mantissa bits, largest value 65,504), with
    /// dynamic loss scaling in training.
    Fp16,
}

impl Precision {
    /// Every format, in the order reports list them.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Bf16, Precision::Fp16];

    /// The name configurations and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }

    /// The half format values are rounded to (`None` for fp32).
    pub fn half(self) -> Option<FloatDType> {
        match self {
            Precision::Fp32 => None,
            Precision::Bf16 => Some(FloatDType::BF16),
            Precision::Fp16 => Some(FloatDType::F16),
        }
    }

    /// Whether training needs a loss scale (fp16's narrow exponent range).
    pub fn scales_loss(self) -> bool {
        self == Precision::Fp16
    }

    /// `x` rounded to the format (round to nearest, ties to even; fp16 overflows to infinity),
    /// kept as a float32 tensor; under autodiff the gradient is rounded the same way on its way
    /// back. The identity for fp32.
    pub fn round<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Precision::Fp32 => x,
            Precision::Bf16 => crate::kernels::round_half(x, Half::Bf16),
            Precision::Fp16 => crate::kernels::round_half(x, Half::F16),
        }
    }

    /// The value `x` has in the format, as f32 (the scalar form of [`Precision::round`]).
    pub fn round_f32(self, x: f32) -> f32 {
        match self {
            Precision::Fp32 => x,
            Precision::Bf16 => resilab_kernels::round::bf16(x),
            Precision::Fp16 => resilab_kernels::round::f16(x),
        }
    }
}

/// How a network's layers run: through which operations ([`Kernels`]) and in which format
/// ([`Precision`]). The network carries it ([`crate::Net::exec`]) and passes it to every layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exec {
    /// The operations.
    pub kernels: Kernels,
    /// The format they compute in.
    pub precision: Precision,
}

impl Exec {
    /// Whether resilab's kernels are chosen.
    pub fn resilab(self) -> bool {
        self.kernels.resilab()
    }

    /// `x` rounded to the format ([`Precision::round`]).
    pub fn round<const D: usize>(self, x: Tensor<D>) -> Tensor<D> {
        self.precision.round(x)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_the_half_formats_round_to_nearest_even() {
        let device = Device::flex();
        // 1 + 2^-8 is halfway between two bf16 values: it rounds to the even one, 1.
        let xs = [1.0f32, 1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), 65504.0, 65520.0, -1e-8, 3.0e38];
        let t = Tensor::<1>::from_floats(xs, &device);
        let bf: Vec<f32> = Precision::Bf16.round(t.clone()).into_data().try_to_vec().unwrap();
        let fp: Vec<f32> = Precision::Fp16.round(t.clone()).into_data().try_to_vec().unwrap();
        let same: Vec<f32> = Precision::Fp32.round(t).into_data().try_to_vec().unwrap();
        assert_eq!(bf[1], 1.0);
        assert_eq!(bf[2], 1.0 + 4.0 * 2f32.powi(-8), "halfway, up to the even neighbour");
        assert_eq!(fp[3], 65504.0);
        assert_eq!(fp[4], f32::INFINITY, "fp16 overflows at 65,520");
        assert!(bf[6].is_finite() && fp[6].is_infinite(), "bf16 keeps fp32's range");
        assert_eq!(same, xs);
        for (i, &x) in xs.iter().enumerate() {
            assert_eq!(bf[i].to_bits(), Precision::Bf16.round_f32(x).to_bits());
            assert_eq!(fp[i].to_bits(), Precision::Fp16.round_f32(x).to_bits());
        }
    }

    #[test]
    fn the_gradient_is_rounded_on_its_way_back() {
        let device = Device::flex().autodiff();
        let x = Tensor::<1>::from_floats([2.0f32, 3.0], &device).require_grad();
        // d/dx (round(x) * c) = c, rounded to the format: 1 + 2^-10 rounds to 1 in bf16 and is
        // exact in fp16; 70,000 is 70,144 in bf16 and beyond fp16's range.
        let c = Tensor::<1>::from_floats([1.0 + 2f32.powi(-10), 70000.0], &device);
        for (p, want) in [(Precision::Bf16, [1.0, 70144.0]), (Precision::Fp16, [1.0 + 2f32.powi(-10), f32::INFINITY])] {
            let y = (p.round(x.clone()) * c.clone()).sum();
            let g = y.backward();
            let got: Vec<f32> = x.grad(&g).unwrap().into_data().try_to_vec().unwrap();
            assert_eq!(got, want, "{p}");
        }
    }
}
