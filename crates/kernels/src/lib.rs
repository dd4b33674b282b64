//! resilab's CPU training kernels over raw f32 slices in NCHW (the layout Burn's tensors use):
//! convolution forward and both gradients as GEMMs, threaded over fixed chunks of images, and
//! training-mode BatchNorm (optionally with its ReLU) forward and backward in two passes each,
//! threaded over channels. Results do not depend on the thread count.
//!
//! The kernels know nothing of Burn; `resilab-models` plugs them into the CPU backend and
//! tests them against Burn's own operations.

mod gemm;

pub mod conv;
pub mod norm;

pub use conv::{Conv2d, ShapeError};
