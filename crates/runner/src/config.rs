//! The run configuration: TOML into plain serde structs (unknown keys rejected), with
//! `--set key=value` overrides applied before deserialisation.

use std::path::{Path, PathBuf};

use resilab_checkpoint::CheckpointConfig;
use resilab_data::DataConfig;
use resilab_models::ModelConfig;
use resilab_recovery::{DetectConfig, Strategy};
use resilab_train::{OptimizerConfig, ParallelConfig, ScheduleConfig, TrainConfig};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Compute backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Burn's flex CPU backend (the fastest CPU backend measured; the default).
    Flex,
    /// Burn's ndarray CPU backend (deprecated by Burn 0.22; kept selectable).
    Ndarray,
    /// Burn's wgpu GPU backend (needs the `wgpu` cargo feature).
    Wgpu,
    /// Burn's LibTorch backend on the CPU (needs the `tch` cargo feature and PyTorch's libtorch).
    Tch,
}

impl BackendKind {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Tch => "tch",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "flex" => Ok(Self::Flex),
            "ndarray" => Ok(Self::Ndarray),
            "wgpu" => Ok(Self::Wgpu),
            "tch" => Ok(Self::Tch),
            other => Err(format!("unknown backend \"{other}\" (allowed: flex, ndarray, wgpu, tch)")),
        }
    }
}

fn default_seed() -> u64 {
    42
}

/// A whole run configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// A name for the run (default: the config file's stem); used in output paths.
    #[serde(default)]
    pub name: Option<String>,
    /// Seed of parameter initialisation, data order and augmentation.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Backend (`flex` by default); `--backend` overrides it.
    #[serde(default)]
    pub backend: Option<BackendKind>,
    /// Data source.
    #[serde(default)]
    pub data: DataConfig,
    /// Network.
    pub model: ModelConfig,
    /// Training loop.
    #[serde(default)]
    pub train: TrainConfig,
    /// Optimizer.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// Learning-rate schedule.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// Simulated data-parallel workers or pipeline stages (one worker unless configured).
    #[serde(default)]
    pub parallel: ParallelConfig,
    /// Checkpoint policy (none unless configured).
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Seed of the fault schedule's random arrivals and bit draws, separate from `seed` so
    /// repetitions vary the faults over one golden run.
    #[serde(default = "default_fault_seed")]
    pub fault_seed: u64,
    /// Mid-run faults (`[[fault]]` entries); none unless configured.
    #[serde(default, rename = "fault", skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<toml::Table>,
    /// Which detectors run.
    #[serde(default)]
    pub detect: DetectConfig,
    /// What to do about a detected fault or a crash.
    #[serde(default)]
    pub recovery: RecoveryConfig,
}

/// The fault seed when the configuration gives none.
pub fn default_fault_seed() -> u64 {
    1
}

/// The `[recovery]` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    /// `none` (default), `checkpoint_restart`, `rollback` or `lossy_forward`.
    #[serde(default)]
    pub strategy: Strategy,
}

/// Parses `key=value` and sets it in `table`; `key` may be dotted (`train.epochs`) and may
/// index arrays of tables (`fault.0.injection_tries`). The value is read as a TOML value (`3`,
/// `0.1`, `true`, `"text"`, `[1, 2]`) and otherwise as a string.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<()> {
    let (key, value) = assignment
        .split_once('=')
        .ok_or_else(|| Error::Config(format!("--set {assignment}: expected key=value")))?;
    let value = value.trim();
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    set_value(table, key.trim(), parsed).map_err(|e| Error::Config(format!("--set {assignment}: {e}")))
}

/// The components of a dotted key, read as TOML reads one, so a component may be quoted:
/// `grid."inject.injection_tries"` has two.
fn key_parts(key: &str) -> std::result::Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let doc: toml::Table = toml::from_str(&format!("{key} = 0")).map_err(|_| format!("`{key}` is not a valid key"))?;
    let mut t = &doc;
    loop {
        let Some((k, v)) = t.iter().next() else { return Err(format!("`{key}` is not a valid key")) };
        parts.push(k.clone());
        match v {
            toml::Value::Table(inner) => t = inner,
            _ => return Ok(parts),
        }
    }
}

/// Sets the dotted `key` in `table` to `value`. A numeric component indexes an array
/// (`fault.0.target`); missing tables are created. A table `value` set where a table already
/// is merges key by key (so `model = {width = 0.5}` keeps the model's other keys).
pub fn set_value(table: &mut toml::Table, key: &str, value: toml::Value) -> std::result::Result<(), String> {
    let parts = key_parts(key)?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    fn descend<'a>(v: &'a mut toml::Value, part: &str, path: &str) -> std::result::Result<&'a mut toml::Value, String> {
        match v {
            toml::Value::Table(t) => Ok(t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()))),
            toml::Value::Array(a) => {
                let i: usize = part.parse().map_err(|_| format!("`{path}` is an array: index it with a number"))?;
                let n = a.len();
                a.get_mut(i).ok_or_else(|| format!("`{path}` has {n} entries, no entry {i}"))
            }
            _ => Err(format!("`{path}` is not a table")),
        }
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    let result = (|| {
        let mut v = &mut root;
        for (i, p) in parts.iter().enumerate() {
            v = descend(v, p, &parts[..i].join("."))?;
        }
        match (v, value) {
            (toml::Value::Table(old), toml::Value::Table(new)) => {
                for (k, x) in new {
                    old.insert(k, x);
                }
            }
            (slot, value) => *slot = value,
        }
        Ok(())
    })();
    if let toml::Value::Table(t) = root {
        *table = t;
    }
    result
}

impl RunConfig {
    /// Reads `path`, applies `overrides` (`key=value`), and deserialises. Errors name the file
    /// and the offending key.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Self::from_toml(&text, overrides, &path.display().to_string()).map(|mut c| {
            if c.name.is_none() {
                c.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            }
            c
        })
    }

    /// Parses configuration text; `origin` names it in errors.
    pub fn from_toml(text: &str, overrides: &[String], origin: &str) -> Result<Self> {
        let bad = |e: toml::de::Error| Error::Config(format!("{origin}: {}", e.to_string().trim_end()));
        if overrides.is_empty() {
            return toml::from_str(text).map_err(bad);
        }
        let mut table: toml::Table = toml::from_str(text).map_err(bad)?;
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        let merged = toml::to_string(&table).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        toml::from_str(&merged).map_err(|e| Error::Config(format!("{origin} (with --set overrides): {}", e.to_string().trim_end())))
    }

    /// The resolved configuration as TOML (every default written out).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# could not serialise the configuration: {e}\n"))
    }

    /// The run's name.
    pub fn run_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| "run".to_string())
    }
}

/// `results/runs/<name>-<UTC timestamp>` under the current directory.
pub fn default_out_dir(name: &str) -> PathBuf {
    PathBuf::from("results").join("runs").join(format!("{name}-{}", utc_stamp()))
}

/// The current UTC time as `YYYYMMDD-HHMMSS`.
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[model]\narch = \"resnet\"\ndepth = 8\n";

    #[test]
    fn defaults_and_overrides() {
        let c = RunConfig::from_toml(MIN, &[], "t").unwrap();
        assert_eq!(c.seed, 42);
        assert_eq!(c.train.batch_size, 64);
        let c = RunConfig::from_toml(MIN, &["train.epochs=3".into(), "optimizer.kind=adam".into(), "seed=7".into()], "t").unwrap();
        assert_eq!(c.train.epochs, 3);
        assert_eq!(c.optimizer.kind, resilab_train::OptimizerKind::Adam);
        assert_eq!(c.seed, 7);
    }

    #[test]
    fn unknown_key_and_wrong_type_are_named() {
        let e = RunConfig::from_toml(&format!("{MIN}dept = 3\n"), &[], "f.toml").unwrap_err().to_string();
        assert!(e.contains("f.toml") && e.contains("dept"), "{e}");
        let e = RunConfig::from_toml(MIN, &["train.epochs=\"many\"".into()], "f.toml").unwrap_err().to_string();
        assert!(e.contains("epochs") || e.contains("invalid type"), "{e}");
        let e = RunConfig::from_toml("[model]\narch = \"lenet\"\n", &[], "f.toml").unwrap_err().to_string();
        assert!(e.contains("lenet") && e.contains("resnet"), "{e}");
    }

    #[test]
    fn overrides_index_arrays_and_merge_tables() {
        let text = format!("{MIN}[[fault]]\ntarget = \"weights\"\nat_step = 2\n");
        let c = RunConfig::from_toml(&text, &["fault.0.at_step=5".into()], "t").unwrap();
        assert_eq!(c.faults[0]["at_step"].as_integer(), Some(5));
        let e = RunConfig::from_toml(&text, &["fault.3.at_step=5".into()], "t").unwrap_err().to_string();
        assert!(e.contains("no entry 3"), "{e}");
        let mut t: toml::Table = toml::from_str(MIN).unwrap();
        set_value(&mut t, "model", toml::Value::Table(toml::from_str("width = 0.5").unwrap())).unwrap();
        assert_eq!(t["model"]["depth"].as_integer(), Some(8));
        assert_eq!(t["model"]["width"].as_float(), Some(0.5));
        set_value(&mut t, "grid.\"inject.first_bit\"", toml::Value::Integer(3)).unwrap();
        assert_eq!(t["grid"]["inject.first_bit"].as_integer(), Some(3));
        assert!(set_value(&mut t, "a..b", toml::Value::Integer(3)).unwrap_err().contains("a..b"));
    }

    #[test]
    fn resolved_config_round_trips() {
        let c = RunConfig::from_toml(MIN, &[], "t").unwrap();
        let again = RunConfig::from_toml(&c.to_toml(), &[], "t").unwrap();
        assert_eq!(c, again);
    }

    #[test]
    fn every_shipped_configuration_loads_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let c = RunConfig::load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                c.parallel.validate(c.train.batch_size).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                c.optimizer.validate().unwrap();
                seen += 1;
            }
        }
        assert!(seen >= 3, "found {seen} configurations in {}", dir.display());
    }

    #[test]
    fn stamp_has_the_expected_form() {
        let s = utc_stamp();
        assert_eq!(s.len(), 15);
        assert!(s.starts_with("20"));
    }
}
