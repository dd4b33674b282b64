//! What only an imported checkpoint holds: whether resilab's forward pass was checked against
//! the framework the weights came from (the root attribute [`FORWARD_PASS_ATTR`]), and the
//! BatchNorm `num_batches_tracked` counts the file carried (a u64 attribute
//! [`BATCH_COUNT_ATTR`] on each BatchNorm's `/model/<path>` group). Both are sealed by their
//! group's `attrs_xxh3` like every other attribute, so neither can be removed or edited unseen.
//!
//! A checkpoint resilab trained holds neither: its forward pass is resilab's own, and its
//! BatchNorm count is its step.

use std::collections::BTreeMap;
use std::path::Path;

use resilab_h5::{Reader, Writer};
use resilab_models::DatasetPath;
use resilab_train::WorkerState;

use crate::error::Result;

/// The root attribute recording whether an imported model's forward pass was verified:
/// `unverified: <how it was imported>` or `verified: <what verified it>`.
pub const FORWARD_PASS_ATTR: &str = "forward_pass";

/// The attribute of a BatchNorm's `/model/<path>` group holding the `num_batches_tracked` count
/// the imported file carried.
pub const BATCH_COUNT_ATTR: &str = "num_batches_tracked";

/// Whether resilab's forward pass was checked against the framework an import came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "lowercase")]
pub enum ForwardPass {
    /// Imported without a probe: the weights fit, but nothing showed that resilab's forward
    /// pass computes what the source module computed. The text says how it was imported.
    Unverified(String),
    /// A probe verified it; the text says which and how closely.
    Verified(String),
}

impl ForwardPass {
    /// The attribute's text.
    fn text(&self) -> String {
        match self {
            ForwardPass::Unverified(d) => format!("unverified: {d}"),
            ForwardPass::Verified(d) => format!("verified: {d}"),
        }
    }

    /// Reads the attribute's text back; anything but `verified: ...` counts as unverified.
    fn parse(text: &str) -> Self {
        match text.strip_prefix("verified: ") {
            Some(d) => ForwardPass::Verified(d.to_string()),
            None => ForwardPass::Unverified(text.strip_prefix("unverified: ").unwrap_or(text).to_string()),
        }
    }

    /// Whether no probe verified it.
    pub fn is_unverified(&self) -> bool {
        matches!(self, ForwardPass::Unverified(_))
    }

    /// The one line the commands that use such a checkpoint print (`None` once verified).
    pub fn warning(&self, file: &Path) -> Option<String> {
        match self {
            ForwardPass::Verified(_) => None,
            ForwardPass::Unverified(d) => Some(format!(
                "warning: forward pass unverified: {} holds an import ({d}) whose logits no probe compared with the source model's, so accuracies computed from it may not be that model's; verify it with resilab import --probe (docs/pytorch.md)",
                file.display()
            )),
        }
    }
}

/// What an import writes beside the training state.
#[derive(Clone, Debug, Default)]
pub struct ImportNotes {
    /// Whether the forward pass was verified (`None`: the checkpoint is not an import).
    pub forward_pass: Option<ForwardPass>,
    /// BatchNorm `num_batches_tracked` counts by the BatchNorm's name (`layer1.0.bn1`).
    pub batch_counts: BTreeMap<String, u64>,
}

/// Writes `notes` into the worker file being written: the root attribute, and a count on each
/// BatchNorm group the worker holds (a pipeline stage holds its own).
pub(crate) fn write_notes(f: &Writer, w: &WorkerState, notes: &ImportNotes) -> Result<()> {
    if let Some(fp) = &notes.forward_pass {
        f.attr_str("/", FORWARD_PASS_ATTR, &fp.text())?;
    }
    for (bn, count) in &notes.batch_counts {
        if w.params.contains_key(&format!("{bn}.running_var")) {
            f.attr_u64(&DatasetPath::Model(bn.clone()).absolute(), BATCH_COUNT_ATTR, *count)?;
        }
    }
    Ok(())
}

/// What the root attributes of `r` record of the forward pass: `None` for a checkpoint that is
/// no import. A `verified` record whose root attributes fail their digest counts as unverified.
pub(crate) fn read_forward_pass(r: &Reader) -> Result<Option<ForwardPass>> {
    if !r.attr_names("/")?.iter().any(|a| a == FORWARD_PASS_ATTR) {
        return Ok(None);
    }
    let text = r.attr_str("/", FORWARD_PASS_ATTR)?;
    Ok(Some(recorded(&text, r.verify_attrs("/")? == Some(true))))
}

/// The record `text` of a file whose root attributes pass their digest (`sealed`) or not: a
/// `verified` record that fails it counts as unverified.
pub(crate) fn recorded(text: &str, sealed: bool) -> ForwardPass {
    match ForwardPass::parse(text) {
        ForwardPass::Verified(_) if !sealed => {
            ForwardPass::Unverified("its record of a verification fails the root attributes' digest".into())
        }
        fp => fp,
    }
}

/// The `num_batches_tracked` count stored on the BatchNorm group `group` (`/model/<path>`), if
/// any, and whether the group's attributes pass their digest.
pub(crate) fn batch_count(r: &Reader, group: &str) -> Result<Option<(u64, bool)>> {
    if !r.attr_names(group)?.iter().any(|a| a == BATCH_COUNT_ATTR) {
        return Ok(None);
    }
    Ok(Some((r.attr_u64(group, BATCH_COUNT_ATTR)?, r.verify_attrs(group)? == Some(true))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_anything_but_verified_is_unverified() {
        for fp in [ForwardPass::Unverified("from w.pt".into()), ForwardPass::Verified("probe p (8 images)".into())] {
            assert_eq!(ForwardPass::parse(&fp.text()), fp);
        }
        assert!(ForwardPass::parse("something else").is_unverified());
        assert!(recorded("verified: probe p", false).is_unverified());
        assert!(!recorded("verified: probe p", true).is_unverified());
        let line = ForwardPass::Unverified("from w.pt".into()).warning(Path::new("c/worker-0.h5")).unwrap();
        assert!(line.starts_with("warning: forward pass unverified: c/worker-0.h5 holds an import (from w.pt)"), "{line}");
        assert!(!line.contains('\n'));
        assert_eq!(ForwardPass::Verified("p".into()).warning(Path::new("x")), None);
    }
}
