//! The shapes the kernels run on, which their errors name.

/// The shape of one convolution: input `[batch, c_in, h, w]`, weight `[c_out, c_in, kh, kw]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Images.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride (rows, columns).
    pub stride: [usize; 2],
    /// Zero padding (rows, columns), each side.
    pub padding: [usize; 2],
    /// Dilation (rows, columns).
    pub dilation: [usize; 2],
}

/// The shape `[batch, channels, plane]` (`plane = H * W`) and the buffers of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Norm {
    /// Images.
    pub batch: usize,
    /// Channels.
    pub channels: usize,
    /// Values per image and channel (`H * W`).
    pub plane: usize,
}

/// The shape `[batch, channels, h, w]` of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2 {
    /// Images.
    pub batch: usize,
    /// Channels.
    pub channels: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
}
