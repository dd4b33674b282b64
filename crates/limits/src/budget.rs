//! The budget itself: how many bytes, where the figure comes from, and how sizes are written.

use crate::live_bytes;

/// The environment variable that sets the budget.
pub const ENV: &str = "RESILAB_MAX_MEMORY";

/// The bytes one command may allocate for what a file or configuration declares, and where
/// that figure comes from (for error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Bytes.
    pub bytes: u64,
    /// Where `bytes` comes from, in words.
    pub source: String,
}

impl Budget {
    /// Whether `bytes` more (`None`: more than 2^64, an overflow while computing it) fit
    /// beside what the process already holds ([`live_bytes`]; nothing where no counting
    /// allocator is installed).
    pub fn admits(&self, bytes: Option<u64>) -> bool {
        let held = live_bytes().unwrap_or(0);
        bytes.and_then(|b| b.checked_add(held)).is_some_and(|b| b <= self.bytes)
    }

    /// `"1.00 GiB (RESILAB_MAX_MEMORY)"`, with what the process already holds when it is
    /// counted and more than a mebibyte (so that a refusal of a size below the budget explains
    /// itself).
    pub fn describe(&self) -> String {
        self.describe_held(live_bytes())
    }

    /// [`Budget::describe`] with `held` bytes already held (as counted at a refusal).
    pub fn describe_held(&self, held: Option<u64>) -> String {
        match held {
            Some(held) if held >= 1 << 20 => {
                format!("{} ({}), of which this process already holds {}", human_bytes(self.bytes), self.source, human_bytes(held))
            }
            _ => format!("{} ({})", human_bytes(self.bytes), self.source),
        }
    }
}

/// Bytes in binary units (`2.79 TiB`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} B") } else { format!("{v:.2} {}", UNITS[u]) }
}

/// `"3072000000000 bytes (2.79 TiB)"`, or `"more than 2^64 bytes"`.
pub fn needed(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("{b} bytes ({})", human_bytes(b)),
        None => "more than 2^64 bytes".to_string(),
    }
}
