//! Whether the memory a configuration value asks for is there, checked before anything is
//! allocated: an absurd size (`train_size = 1000000000000`) is then an error that names its key
//! instead of an aborted allocation. Every crate that sizes a buffer from a configuration value
//! asks [`check_memory`].

use std::fmt::Display;

/// What [`available_memory`] assumes where `/proc/meminfo` cannot be read (not Linux, or a
/// restricted `/proc`): 1 TiB, generous enough never to refuse a size a real machine could hold,
/// small enough to refuse the absurd ones.
pub const FALLBACK_AVAILABLE_BYTES: u64 = 1 << 40;

/// Memory the machine can give to new allocations, and where the figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// Where `bytes` comes from, for error messages.
    pub source: &'static str,
}

/// The machine's available memory: `MemAvailable` of `/proc/meminfo` (what Linux can give
/// without swapping), or [`FALLBACK_AVAILABLE_BYTES`] where that cannot be read.
pub fn available_memory() -> Available {
    match std::fs::read_to_string("/proc/meminfo").ok().as_deref().and_then(mem_available) {
        Some(bytes) => Available { bytes, source: "MemAvailable in /proc/meminfo" },
        None => Available { bytes: FALLBACK_AVAILABLE_BYTES, source: "assumed: /proc/meminfo is unreadable" },
    }
}

/// The `MemAvailable:  123456 kB` line of `/proc/meminfo`, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let mut words = line.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        None => 1,
        Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
        Some(_) => return None,
    };
    n.checked_mul(unit)
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

/// Checks that `bytes` (`None`: more than a 64-bit count holds, an overflow while computing
/// it) fit in [`available_memory`]. The error is one line naming `key = value`, the bytes it
/// would need and what is available.
pub fn check_memory(key: &str, value: &dyn Display, bytes: Option<u64>, what: &str) -> Result<(), String> {
    check_memory_within(key, value, bytes, what, available_memory())
}

/// [`check_memory`] against a given amount of memory.
pub fn check_memory_within(key: &str, value: &dyn Display, bytes: Option<u64>, what: &str, available: Available) -> Result<(), String> {
    let needed = match bytes {
        Some(b) if b <= available.bytes => return Ok(()),
        Some(b) => format!("{b} bytes ({})", human_bytes(b)),
        None => "more than 2^64 bytes".to_string(),
    };
    Err(format!(
        "{key} = {value} needs {needed} of memory for {what}, more than the {} bytes ({}) available ({})",
        available.bytes,
        human_bytes(available.bytes),
        available.source
    ))
}

/// `a * b * ...` without overflow (`None` if it overflows).
pub fn checked_product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available() {
        let text = "MemTotal:       16318412 kB\nMemFree:         1234 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(mem_available(text), Some(12_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
        let a = available_memory();
        assert!(a.bytes > 0, "{a:?}");
    }

    #[test]
    fn check_names_key_value_bytes_and_available() {
        let avail = Available { bytes: 1 << 30, source: "test" };
        assert!(check_memory_within("k", &3, Some(1 << 30), "x", avail).is_ok());
        let e = check_memory_within("data.train_size", &1_000_000_000_000u64, Some(3_072_000_000_000), "its images", avail).unwrap_err();
        assert_eq!(
            e,
            "data.train_size = 1000000000000 needs 3072000000000 bytes (2.79 TiB) of memory for its images, more than the 1073741824 bytes (1.00 GiB) available (test)"
        );
        let e = check_memory_within("k", &u64::MAX, None, "x", avail).unwrap_err();
        assert!(e.contains("more than 2^64 bytes"), "{e}");
        assert_eq!(checked_product(&[u64::MAX, 2]), None);
        assert_eq!(checked_product(&[3, 4, 5]), Some(60));
        assert_eq!(human_bytes(512), "512 B");
    }
}
