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

mod error;
mod export;
pub mod fit;
mod import;
pub mod pickle;
pub mod probe;
mod reverse;
pub mod source;
mod zipcheck;

pub use error::{Error, Result};
pub use export::{ExportRequest, Exported, export};
pub use fit::slots;
pub use import::{ImportRequest, Imported, import};
