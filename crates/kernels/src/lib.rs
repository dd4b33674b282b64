//! resilab's CPU training kernels over raw f32 slices in NCHW (the layout Burn's tensors use):
//! convolution forward and both gradients (direct register-blocked kernels for stride-1 "same"
//! shapes with enough channels, GEMMs otherwise), threaded over fixed chunks of images, and
//! training-mode BatchNorm (optionally with a residual block's addition and its ReLU) forward
//! and backward in two passes each, threaded over channels, and 2x2 max pooling at stride 2
//! forward and backward, and fully connected layers (with their ReLU) forward and both
//! gradients as GEMMs threaded over blocks of features. Results do not depend on the thread
//! count.
//!
//! The kernels know nothing of Burn; `resilab-models` plugs them into the CPU backend and
//! tests them against Burn's own operations.

mod error;
mod raw;
mod runs;
mod shape;
mod simd;

pub mod act;
pub mod conv;
pub mod linear;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod reduce;
pub mod round;

pub use conv::Conv2d;
pub use error::{Error, Kernel};

/// Revision of the kernels' arithmetic, bumped whenever a change makes them compute other bits
/// for the same inputs (a summation order, a GEMM grouping, a fused step). It is part of the
/// `native` backend's device name, and so of the platform key golden runs are cached under,
/// so that no run is compared with a golden run the kernels of another revision computed.
/// Revision 1, the kernels of 2026-11-24, had no number in the device name. Revision 3: the
/// fused ReLU passes NaN (and maps -0 to +0) as Burn's and PyTorch's do, where revision 2's
/// `max(0, v)` made a NaN 0; a convolution's bias gradient is summed by the kernels.
/// Revision 4: fully connected layers run through the kernels ([`linear`]), with their own
/// GEMM grouping, where revision 3 used Burn's matmul. Revision 5: stride-1 "same"
/// convolutions with at least 16 input and 32 output channels run direct kernels, forward and
/// both gradients: each value one fused chain over the terms that read inside the input (per
/// chunk of images, for the weight gradient), where im2col's GEMMs summed in the `gemm`
/// crate's blocked order and multiplied padding (an infinite weight or output gradient made
/// NaN at the border). Revision 6: the weight gradient of such convolutions with fewer input
/// channels (a first layer with at least 32 output channels, as AlexNet's at width 0.5) is the
/// direct kernel's too. Revision 7: stride-1 "same" convolutions on rows of at least 16
/// columns with at least 8 output channels (any number of input channels) run their forward
/// pass and input gradient through a direct kernel with output positions in the SIMD lanes:
/// the same chains as revision 6's direct kernel where that applied, new bits where im2col ran
/// (the input gradient of layers of 8 to 31 output channels, as ResNet's 16-channel stage;
/// first layers' forward passes gave the same bits as im2col's in the shapes measured).
pub const NUMERICS: u32 = 7;

/// Whether the GEMMs (these kernels' and, through the same `gemm` crate, Burn's flex's) run
/// AVX-512 micro-kernels: a build with the `avx512` feature on a CPU with AVX-512F.
pub fn gemm_uses_avx512() -> bool {
    #[cfg(all(feature = "avx512", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(all(feature = "avx512", target_arch = "x86_64")))]
    {
        false
    }
}
