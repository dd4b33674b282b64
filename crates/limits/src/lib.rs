//! How much memory one resilab command may ask for, checked before anything is allocated.
//!
//! Every size that comes from outside the program (a configuration value, a dataset's declared
//! shape, a model's parameter count) is turned into bytes with checked arithmetic and compared
//! with the [`Budget`] before the allocation: an absurd or hostile size is then one error line
//! that names its key or dataset, the bytes it would need and the budget, instead of an
//! aborted allocation or a machine that swaps.
//!
//! The budget is one for the whole process: [`Budget::admits`] holds a new allocation *plus the
//! heap the process already holds* ([`live_bytes`], counted by the [`Counted`] allocator the
//! binary installs) to it, and memory a command frees is back in the budget at once.
//!
//! The budget is `RESILAB_MAX_MEMORY` (bytes, or a number with a `K`, `M`, `G` or `T` suffix,
//! binary units) when set, else half of the memory this process can have: the machine's
//! `MemTotal`, or its cgroup's `memory.max` when lower, or the address-space limit
//! (`ulimit -v`) when lower still.
//!
//! ```
//! use resilab_limits::{Budget, check_within};
//!
//! let budget = Budget { bytes: 1 << 30, source: "RESILAB_MAX_MEMORY".into() };
//! assert!(check_within("data.train_size", &1000, Some(1 << 20), "its images", &budget).is_ok());
//! let e = check_within("data.train_size", &10_000_000, Some(30 << 30), "its images", &budget).unwrap_err();
//! assert!(matches!(&e, resilab_limits::Error::Budget(r) if r.bytes == Some(30 << 30)));
//! assert!(e.to_string().contains("30.00 GiB") && e.to_string().contains("1.00 GiB"));
//! ```

use std::fmt::Display;

mod alloc;
mod budget;
mod depth;
mod error;
mod file;

pub use alloc::{Counted, live_bytes};
pub use budget::{Budget, ENV, human_bytes, needed};
pub use depth::{DepthError, MAX_DEPTH, check_toml_depth, check_yaml_depth};
pub use error::{Error, Refusal, Result};
pub use file::{CONFIG_MAX_BYTES, FileError, RegularFile, read_config, read_regular};

/// What the budget assumes where the machine's memory cannot be read (not Linux, or a
/// restricted `/proc`): 1 TiB, generous enough never to refuse what a real machine could hold,
/// small enough to refuse the absurd.
pub const FALLBACK_BYTES: u64 = 1 << 40;

/// The budget of this process: [`ENV`] when set, else half of the memory it can have.
/// An [`ENV`] value that is not a size is an error naming it.
pub fn memory_budget() -> Result<Budget> {
    match std::env::var(ENV) {
        Ok(text) => {
            let bytes = parse_size(&text).ok_or_else(|| Error::NotASize { text: text.clone() })?;
            Ok(Budget { bytes, source: format!("{ENV} = {}", text.trim()) })
        }
        Err(_) => Ok(default_budget()),
    }
}

/// Half of the memory this process can have (see the crate's documentation).
pub fn default_budget() -> Budget {
    let total = read("/proc/meminfo").as_deref().and_then(|t| meminfo_field(t, "MemTotal:"));
    let cgroup = cgroup_limit();
    let address_space = read("/proc/self/limits").as_deref().and_then(address_space_limit);
    let mut best: Option<(u64, &str)> = total.map(|b| (b, "MemTotal"));
    for (limit, name) in [(cgroup, "the cgroup's memory.max"), (address_space, "the address-space limit (ulimit -v)")] {
        if let Some(l) = limit
            && best.is_none_or(|(b, _)| l < b)
        {
            best = Some((l, name));
        }
    }
    match best {
        Some((bytes, name)) => Budget {
            bytes: bytes / 2,
            source: format!("half of this process's {} of memory ({name}); set {ENV} to change it", human_bytes(bytes)),
        },
        None => Budget { bytes: FALLBACK_BYTES, source: format!("assumed: the machine's memory cannot be read; set {ENV}") },
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A `Name:  123456 kB` line of `/proc/meminfo`, in bytes.
fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix(field))?;
    let mut words = line.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        None => 1,
        Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
        Some(_) => return None,
    };
    n.checked_mul(unit)
}

/// The `memory.max` of this process's cgroup (v2), if it sets one.
fn cgroup_limit() -> Option<u64> {
    let own = read("/proc/self/cgroup").and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)));
    let dirs = own.into_iter().map(|p| format!("/sys/fs/cgroup{}", p.trim_end_matches('/'))).chain(["/sys/fs/cgroup".to_string()]);
    dirs.filter_map(|d| read(&format!("{d}/memory.max"))).find_map(|t| t.trim().parse().ok())
}

/// The soft `Max address space` of `/proc/self/limits`, in bytes (`None` when unlimited).
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max address space"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// A size: bytes, or a number (decimals allowed) with a `K`, `M`, `G`, `T` suffix (binary units;
/// `KiB`, `GB` and the like are read the same), e.g. `8G`, `1.5GiB`, `512M`, `1073741824`.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit.trim_end_matches('B').trim_end_matches('I');
    let scale: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    let bytes = value * scale as f64;
    (value.is_finite() && value > 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// Checks that `bytes` (`None`: an overflow while computing it) fit in [`memory_budget`]. The
/// error is one line naming `key = value`, the bytes it would need and the budget.
pub fn check(key: &str, value: &dyn Display, bytes: Option<u64>, what: &str) -> Result<()> {
    check_within(key, value, bytes, what, &memory_budget()?)
}

/// [`check`] against a given budget.
pub fn check_within(key: &str, value: &dyn Display, bytes: Option<u64>, what: &str, budget: &Budget) -> Result<()> {
    if budget.admits(bytes) {
        return Ok(());
    }
    Err(Error::Budget(Box::new(Refusal {
        key: key.to_string(),
        value: value.to_string(),
        bytes,
        what: what.to_string(),
        budget: budget.clone(),
        held: live_bytes(),
    })))
}

/// `a * b * ...` without overflow (`None` if it overflows).
pub fn checked_product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size(" 512 MiB "), Some(512 << 20));
        assert_eq!(parse_size("1.5gb"), Some(3 << 29));
        assert_eq!(parse_size("2T"), Some(2 << 40));
        for bad in ["", "G", "-1G", "0", "lots", "1Q", "1e400", "nan"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn proc_files_are_read() {
        let meminfo = "MemTotal:       16318412 kB\nMemFree:         1234 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(meminfo_field(meminfo, "MemTotal:"), Some(16_318_412 * 1024));
        assert_eq!(meminfo_field("MemTotal: lots\n", "MemTotal:"), None);
        assert_eq!(meminfo_field("MemTotal: 5 MB\n", "MemTotal:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         6442450944           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(6 << 30));
        assert_eq!(address_space_limit("Max address space  unlimited  unlimited  bytes\n"), None);
        let b = default_budget();
        assert!(b.bytes > 0 && b.source.contains(ENV), "{b:?}");
    }

    #[test]
    fn the_error_names_key_value_bytes_and_budget() {
        let budget = Budget { bytes: 1 << 30, source: "test".into() };
        assert!(check_within("k", &3, Some(1 << 30), "x", &budget).is_ok());
        let e = check_within("data.train_size", &1_000_000_000_000u64, Some(3_072_000_000_000), "its images", &budget).unwrap_err();
        assert!(
            matches!(&e, Error::Budget(r) if r.key == "data.train_size" && r.bytes == Some(3_072_000_000_000) && r.budget == budget),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "data.train_size = 1000000000000 needs 3072000000000 bytes (2.79 TiB) of memory for its images, more than the budget of 1.00 GiB (test)"
        );
        let e = check_within("k", &1, None, "x", &budget).unwrap_err();
        assert!(matches!(&e, Error::Budget(r) if r.bytes.is_none()) && e.to_string().contains("more than 2^64 bytes"), "{e}");
        assert_eq!(checked_product(&[1 << 40, 1 << 30]), None);
    }
}
