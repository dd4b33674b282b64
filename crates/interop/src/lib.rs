//! PyTorch weights in and out.
//!
//! [`import()`] reads a PyTorch `state_dict` (`.pt`/`.pth`, parsed by Burn's `burn-store`
//! reader without running the pickle) or a `.safetensors` file for an architecture resilab
//! builds, and writes a complete resilab checkpoint (step 0 of the configured run) that `eval`,
//! `inject`, `diff` and `train --resume` take. resilab's parameters already carry PyTorch's
//! names and layouts (a Linear weight is `[out, in]`, BatchNorm keeps `running_mean` and
//! `running_var`), so a model defined as in `docs/pytorch.md` imports without renames; other
//! names are mapped by `[[import.rename]]` rules. A training checkpoint also brings the
//! optimizer's state (SGD's `momentum_buffer`, Adam's `exp_avg`, `exp_avg_sq` and `step`).
//!
//! [`export()`] writes a checkpoint's model (and with `optimizer` its optimizer state) as
//! safetensors under those names, so `model.load_state_dict(load_file(path), strict=True)`
//! loads it into the equivalent `torch.nn` model.

mod export;
pub mod fit;
mod import;
pub mod pickle;
pub mod probe;
mod reverse;
pub mod source;

use std::path::{Path, PathBuf};

pub use export::{ExportRequest, Exported, export};
pub use import::{ImportRequest, Imported, import};

/// Errors of importing and exporting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file that cannot be read as what it should be; the message says what it is instead.
    #[error("{}: {message}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file's tensors do not fit the model: every missing, unexpected and wrongly shaped
    /// tensor, on one line.
    #[error("{} does not fit {model}: {problems}; {hint}", .path.display())]
    Fit {
        /// The file.
        path: PathBuf,
        /// The model's label.
        model: String,
        /// The problems, grouped.
        problems: String,
        /// What to do about them.
        hint: String,
    },
    /// A configuration value is wrong; the message names the key.
    #[error("{0}")]
    Config(String),
    /// Loading the run's configuration, data or model failed.
    #[error(transparent)]
    Runner(#[from] resilab_runner::Error),
    /// Reading or writing a checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] resilab_checkpoint::Error),
}

impl Error {
    pub(crate) fn file(path: &Path, message: impl Into<String>) -> Self {
        Error::File { path: path.to_path_buf(), message: message.into() }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The parameters and buffers of `net`, in module order.
pub fn slots(net: &resilab_models::Net) -> Vec<fit::Slot> {
    resilab_models::named_params(net).into_iter().map(|p| fit::Slot { name: p.name, shape: p.shape, trainable: p.trainable }).collect()
}
