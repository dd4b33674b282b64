//! What the kernels refuse, and the kernel it comes from.

use crate::shape::{Conv2d, Norm, Pool2};

/// The kernel an [`Error`] comes from, with its shape where it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A convolution.
    Conv(Box<Conv2d>),
    /// Training-mode batch normalisation.
    Norm(Norm),
    /// 2x2 max pooling.
    Pool(Pool2),
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
pub(crate) fn check_len(kernel: impl FnOnce() -> Kernel, name: &'static str, got: usize, want: usize) -> Result<(), Error> {
    if got == want { Ok(()) } else { Err(Error::Length { kernel: kernel(), name, got, want }) }
}
