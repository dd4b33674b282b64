//! resilab's CPU training kernels over raw f32 slices in NCHW (the layout Burn's tensors use):
//! convolution forward and both gradients as GEMMs, threaded over fixed chunks of images, and
//! training-mode BatchNorm (optionally with a residual block's addition and its ReLU) forward
//! and backward in two passes each, threaded over channels, and 2x2 max pooling at stride 2
//! forward and backward, and fully connected layers (with their ReLU) forward and both
//! gradients as GEMMs threaded over blocks of features. Results do not depend on the thread
//! count.
//!
//! The kernels know nothing of Burn; `resilab-models` plugs them into the CPU backend and
//! tests them against Burn's own operations.

mod raw;
mod runs;
mod simd;

pub mod act;
pub mod conv;
pub mod linear;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod reduce;

pub use conv::Conv2d;

/// The kernel an [`Error`] comes from, with its shape where it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A convolution.
    Conv(Box<Conv2d>),
    /// Training-mode batch normalisation.
    Norm(norm::Norm),
    /// 2x2 max pooling.
    Pool(pool::Pool2),
    /// A fully connected layer.
    Linear,
    /// An optimizer update.
    Optimizer,
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kernel::Conv(s) => write!(f, "convolution {s:?}"),
            Kernel::Norm(s) => write!(f, "batch norm {s:?}"),
            Kernel::Pool(s) => write!(f, "max pool {s:?}"),
            Kernel::Linear => write!(f, "fully connected layer"),
            Kernel::Optimizer => write!(f, "optimizer update"),
        }
    }
}

/// What the kernels refuse: a shape they cannot run, buffers that do not fit it, or workers'
/// gradients that do not line up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A stride or dilation of 0, an empty kernel, or a kernel larger than the padded input.
    #[error("convolution {0:?}: {1}")]
    Shape(Box<Conv2d>, &'static str),
    /// A buffer whose length is not the one the shape (or the parameter) gives.
    #[error("{kernel}: the {name} holds {got} values, {want} expected")]
    Length {
        /// The kernel, and its shape.
        kernel: Kernel,
        /// Which buffer.
        name: &'static str,
        /// Its length.
        got: usize,
        /// The length expected.
        want: usize,
    },
    /// A gradient average whose workers' segments do not line up.
    #[error("gradient average: worker {worker} has {got} in segment {segment}, worker 0 {want}")]
    Segment {
        /// The worker.
        worker: usize,
        /// The segment (parameter) index, or the segment count when the counts differ.
        segment: usize,
        /// What it has.
        got: usize,
        /// What worker 0 has.
        want: usize,
    },
}

impl Error {
    /// The buffer whose length is wrong, for a [`Error::Length`].
    pub fn buffer(&self) -> Option<&'static str> {
        match self {
            Error::Length { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// `Ok` when buffer `name` of `kernel` holds `want` values.
fn check_len(kernel: impl FnOnce() -> Kernel, name: &'static str, got: usize, want: usize) -> Result<(), Error> {
    if got == want { Ok(()) } else { Err(Error::Length { kernel: kernel(), name, got, want }) }
}

/// Revision of the kernels' arithmetic, bumped whenever a change makes them compute other bits
/// for the same inputs (a summation order, a GEMM grouping, a fused step). It is part of the
/// `native` backend's device name, and so of the platform key golden runs are cached under,
/// so that no run is compared with a golden run the kernels of another revision computed.
/// Revision 1, the kernels of 2026-11-24, had no number in the device name. Revision 3: the
/// fused ReLU passes NaN (and maps -0 to +0) as Burn's and PyTorch's do, where revision 2's
/// `max(0, v)` made a NaN 0; a convolution's bias gradient is summed by the kernels.
/// Revision 4: fully connected layers run through the kernels ([`linear`]), with their own
/// GEMM grouping, where revision 3 used Burn's matmul.
pub const NUMERICS: u32 = 4;

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
