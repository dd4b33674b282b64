//! ResNet-, VGG- and AlexNet-style convolutional networks for small images, built as ordered
//! lists of named blocks whose parameters carry PyTorch-style names.
//!
//! ```no_run
//! use burn::prelude::*;
//! use resilab_models::{Arch, InputShape, ModelConfig, Mode, init_parameters};
//!
//! let device = Device::flex();
//! let config = ModelConfig { arch: Arch::Resnet, depth: Some(8), width: 1.0, batch_norm: None };
//! let net = config.build(InputShape { channels: 3, size: 32 }, 10, &device).unwrap();
//! let mut net = init_parameters(net, 42, &device);
//! let logits = net.forward(Tensor::zeros([2, 3, 32, 32], &device), Mode::Eval);
//! assert_eq!(logits.dims(), [2, 10]);
//! ```

mod blocks;
mod init;
pub mod kernels;
mod layers;
mod naming;
mod net;
mod precision;

pub use blocks::{BasicBlock, Block, ConvUnit, Downsample, MlpHead, Mode, PoolHead};
pub use init::{init_parameters, stream_seed};
pub use kernels::{Compute, Kernels};
pub use layers::{BN_EPSILON, BN_MOMENTUM, BatchNorm2d, Linear};
pub use naming::{
    BadDatasetPath, DatasetKind, DatasetPath, LayerKind, NAME_TABLE, OPTIMIZER_STATE_NAMES, ParamInfo, burn_path_to_name, for_each_param,
    gradient_ready_order, is_trainable, map_params, named_params, update_params,
};
pub use net::{Arch, BlockCost, Footprint, InputShape, ModelConfig, Net};
pub use precision::{Exec, Precision};

/// Errors from building a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model configuration is invalid; the message names the key and the allowed values.
    #[error("{0}")]
    Config(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
