//! resilab's CPU training kernels: convolution forward and both gradients as GEMMs over raw
//! f32 slices (NCHW, the layout Burn's tensors use), threaded over fixed chunks of images so
//! that results do not depend on the thread count.
//!
//! The kernels know nothing of Burn; `resilab-models` plugs them into the CPU backend and
//! tests them against Burn's own operations.

mod gemm;

pub mod conv;

pub use conv::{Conv2d, ShapeError};
