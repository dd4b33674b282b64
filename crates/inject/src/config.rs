//! Injection configs: the published injector's YAML keys, in YAML or TOML, plus resilab's own.
//!
//! Parsing is two-stage: the file into [`RawConfig`] (unknown keys are errors), then
//! [`RawConfig::validate`] into a [`Spec`] whose every field is ready to use. Errors name the key.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::{FaultModel, Mode, Precision};
use crate::run::Sampling;
use crate::{Error, Result};

/// A number or a string, for keys YAML may type either way (`float_precision: 64` / `"auto"`,
/// `bit_mask: 10110` / `"10110"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum NumOrStr {
    /// A whole number.
    Int(u64),
    /// Text.
    Str(String),
}

impl NumOrStr {
    fn text(&self) -> String {
        match self {
            NumOrStr::Int(n) => n.to_string(),
            NumOrStr::Str(s) => s.trim().to_string(),
        }
    }
}

/// How `injection_tries` is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InjectionType {
    /// `injection_tries` attempts.
    #[default]
    Count,
    /// `injection_tries` percent of the file's elements (bytes in byte mode), in (0, 100].
    Percentage,
}

/// What the attempts corrupt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// Dataset values through the HDF5 API (the reference's behaviour).
    #[default]
    Values,
    /// Single bits of the file's bytes, metadata included, bypassing HDF5.
    Bytes,
}

/// Which bytes byte mode may hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    /// Every byte of the file.
    #[default]
    File,
    /// Bytes of contiguous dataset storage (element data).
    Data,
    /// Every other byte: superblock, object headers, B-trees, heaps, attributes.
    Metadata,
}

/// An injection config as written (YAML or TOML). Keys are those of the published injector;
/// `seed`, `sampling`, `max_redraws`, `extreme_threshold`, `target` and `byte_region` are resilab's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The file to corrupt (overridden by `--file`).
    pub hdf5_file: Option<PathBuf>,
    /// Probability in [0, 1] that an attempt corrupts its value (default 1).
    pub injection_probability: Option<f64>,
    /// `count` or `percentage` (default count).
    pub injection_type: Option<InjectionType>,
    /// Attempts (count) or percent of the file's elements (percentage).
    pub injection_tries: Option<f64>,
    /// Accepted for compatibility; resilab writes its log where `--log` says.
    pub log_file_path: Option<String>,
    /// 16, 32, 64 or auto (default auto).
    pub float_precision: Option<NumOrStr>,
    /// First bit of the range, reference numbering (0 = sign).
    pub first_bit: Option<u32>,
    /// Last bit of the range, reference numbering.
    pub last_bit: Option<u32>,
    /// Distinct bits flipped per value in bit-range mode (default 1).
    pub burst: Option<u32>,
    /// Scaling mode: multiply values by this.
    pub scaling_factor: Option<f64>,
    /// Bit-mask mode: a pattern of 0s and 1s.
    pub bit_mask: Option<NumOrStr>,
    /// Whether the sign bit may flip (default true).
    pub allow_sign_change: Option<bool>,
    /// Whether NaN/Inf results are allowed. Default: false in a YAML file (the reference
    /// injector's global default, so its configs run as they did there), true in resilab's TOML
    /// (run configs, campaigns, `[[fault]]` entries); a config that names the key keeps its value.
    #[serde(rename = "allow_NaN_values")]
    pub allow_nan_values: Option<bool>,
    /// Accepted for compatibility; resilab always logs every attempt.
    pub save_injection_sequence: Option<bool>,
    /// Replays a resilab log (JSON lines) instead of drawing.
    pub injection_sequence_path: Option<PathBuf>,
    /// Pick among all datasets, ignoring `locations_to_corrupt`.
    pub use_random_locations: Option<bool>,
    /// Groups or datasets whose datasets may be hit, matched by whole path components.
    pub locations_to_corrupt: Option<Vec<String>>,
    /// Seed of every draw (overridden by `--seed`).
    pub seed: Option<u64>,
    /// `per_tensor` (reference, default) or `per_element`.
    pub sampling: Option<Sampling>,
    /// Redraws allowed per value when NaN/Inf is refused (default 100).
    pub max_redraws: Option<u32>,
    /// Magnitude above which a finite value counts as extreme (default 1e10).
    pub extreme_threshold: Option<f64>,
    /// `values` (default) or `bytes`.
    pub target: Option<TargetKind>,
    /// Byte mode: `file` (default), `data` or `metadata`.
    pub byte_region: Option<Region>,
}

/// How many attempts, before the file is known.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Tries {
    /// Exactly this many.
    Count(u64),
    /// This percent of the file's elements (bytes in byte mode), at least one.
    Percent(f64),
}

impl Tries {
    /// Attempts for a file of `total` elements (or bytes).
    pub fn attempts(self, total: u64) -> u64 {
        match self {
            Tries::Count(n) => n,
            Tries::Percent(p) => ((p * total as f64 / 100.0).floor() as u64).max(1),
        }
    }
}

/// A validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The file named by the config, if any.
    pub file: Option<PathBuf>,
    /// The fault model (value mode).
    pub model: FaultModel,
    /// Probability that an attempt corrupts.
    pub probability: f64,
    /// Number of attempts.
    pub tries: Tries,
    /// `None`: every number dataset; otherwise these locations.
    pub locations: Option<Vec<String>>,
    /// How attempts pick elements.
    pub sampling: Sampling,
    /// Seed from the config.
    pub seed: Option<u64>,
    /// Values or bytes.
    pub target: TargetKind,
    /// Byte mode's region.
    pub region: Region,
    /// A log to replay instead of drawing.
    pub replay: Option<PathBuf>,
    /// Keys accepted for compatibility that resilab does not act on.
    pub ignored: Vec<String>,
}

fn bad(key: &str, message: impl Into<String>) -> Error {
    Error::Config { key: key.to_string(), message: message.into() }
}

impl RawConfig {
    /// Reads a `.yaml`/`.yml` or `.toml` file. A YAML file is in the reference injector's
    /// format and gets its defaults: `allow_NaN_values` is false unless the file names it.
    pub fn load(path: &Path) -> Result<Self> {
        let text = resilab_limits::read_config("--config", path)?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        let parsed = match ext.as_str() {
            "yaml" | "yml" => Self::from_reference_yaml(&text),
            "toml" => toml_from_str(&text).map_err(|e| e.to_string()),
            _ => {
                return Err(Error::Path {
                    path: path.to_path_buf(),
                    message: "an injection config must end in .yaml, .yml or .toml".into(),
                });
            }
        };
        parsed.map_err(|message| Error::Parse { path: path.to_path_buf(), message: message.trim().to_string() })
    }

    /// Parses the reference injector's YAML, with its defaults for keys the text leaves out.
    /// The text may nest at most [`resilab_limits::MAX_DEPTH`] levels (checked before parsing).
    pub fn from_reference_yaml(text: &str) -> std::result::Result<Self, String> {
        resilab_limits::check_yaml_depth(text, resilab_limits::MAX_DEPTH).map_err(|e| e.to_string())?;
        let mut raw: Self = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
        raw.allow_nan_values.get_or_insert(false);
        Ok(raw)
    }

    /// Checks every key and builds the spec.
    pub fn validate(&self) -> Result<Spec> {
        let model = self.fault_model()?;
        let probability = self.injection_probability.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&probability) {
            return Err(bad("injection_probability", format!("must be in [0, 1], got {probability}")));
        }
        let tries = self.tries()?;
        let locations = self.locations()?;
        let target = self.target.unwrap_or_default();
        self.check_target(target)?;
        let mut ignored = Vec::new();
        if self.log_file_path.is_some() {
            ignored.push("log_file_path (the log goes where --log says)".to_string());
        }
        if self.save_injection_sequence.is_some() {
            ignored.push("save_injection_sequence (every attempt is always logged)".to_string());
        }
        Ok(Spec {
            file: self.hdf5_file.clone(),
            model,
            probability,
            tries,
            locations: if target == TargetKind::Bytes { None } else { locations },
            sampling: self.sampling.unwrap_or_default(),
            seed: self.seed,
            target,
            region: self.byte_region.unwrap_or_default(),
            replay: self.injection_sequence_path.clone(),
            ignored,
        })
    }

    /// `float_precision`.
    fn precision(&self) -> Result<Precision> {
        match self.float_precision.as_ref().map(NumOrStr::text).as_deref() {
            None | Some("auto") => Ok(Precision::Auto),
            Some("16") => Ok(Precision::P16),
            Some("32") => Ok(Precision::P32),
            Some("64") => Ok(Precision::P64),
            Some(other) => Err(bad("float_precision", format!("must be 16, 32, 64 or auto, got {other:?}"))),
        }
    }

    /// The fault model: the precision, one mode, and the limits on what a flip may give.
    fn fault_model(&self) -> Result<FaultModel> {
        let precision = self.precision()?;
        let model = FaultModel {
            mode: self.mode()?,
            precision,
            allow_sign_change: self.allow_sign_change.unwrap_or(true),
            allow_nan: self.allow_nan_values.unwrap_or(true),
            max_redraws: self.max_redraws.unwrap_or(100),
            extreme_threshold: self.extreme_threshold.unwrap_or(1e10),
        };
        // Auto: the range must at least fit a 64-bit word; narrower datasets are checked
        // against their own width once the file is known.
        model.check_width(precision.fixed().unwrap_or(64)).map_err(|m| bad(key_of(&model.mode), m))?;
        if model.extreme_threshold.is_nan() || model.extreme_threshold <= 0.0 {
            return Err(bad("extreme_threshold", "must be a positive number"));
        }
        Ok(model)
    }

    /// The one mode set: a bit range (the default), a bit mask, or a scaling factor.
    fn mode(&self) -> Result<Mode> {
        let range_set = self.first_bit.is_some() || self.last_bit.is_some() || self.burst.is_some_and(|b| b > 1);
        let modes: Vec<(&str, &str)> = [
            (range_set, ("first_bit", "bit range (first_bit/last_bit/burst)")),
            (self.bit_mask.is_some(), ("bit_mask", "bit_mask")),
            (self.scaling_factor.is_some(), ("scaling_factor", "scaling_factor")),
        ]
        .into_iter()
        .filter_map(|(set, m)| set.then_some(m))
        .collect();
        if modes.len() > 1 {
            let names: Vec<&str> = modes.iter().map(|m| m.1).collect();
            return Err(bad(modes[1].0, format!("only one mode may be set, found {}", names.join(" and "))));
        }
        if let Some(mask) = &self.bit_mask {
            let text = mask.text();
            if text.is_empty() || !text.chars().all(|c| c == '0' || c == '1') {
                return Err(bad("bit_mask", format!("must be a pattern of 0s and 1s, got {text:?}")));
            }
            if !text.contains('1') {
                return Err(bad("bit_mask", "has no 1: it would flip nothing"));
            }
            if text.len() > 64 {
                return Err(bad("bit_mask", format!("has {} bits, longer than any float (64 bits at most)", text.len())));
            }
            return Ok(Mode::BitMask { pattern: text.chars().map(|c| c == '1').collect() });
        }
        if let Some(factor) = self.scaling_factor {
            if !factor.is_finite() {
                return Err(bad("scaling_factor", format!("must be finite, got {factor}")));
            }
            return Ok(Mode::Scaling { factor });
        }
        let burst = self.burst.unwrap_or(1);
        if burst == 0 {
            return Err(bad("burst", "must be at least 1"));
        }
        if let (Some(f), Some(l)) = (self.first_bit, self.last_bit)
            && f > l
        {
            return Err(bad("first_bit", format!("first_bit ({f}) is greater than last_bit ({l})")));
        }
        Ok(Mode::BitRange { first: self.first_bit, last: self.last_bit, burst })
    }

    /// `injection_tries` under `injection_type` (a count checked against memory, or a
    /// percentage); not needed when a sequence is replayed.
    fn tries(&self) -> Result<Tries> {
        match (self.injection_type.unwrap_or_default(), self.injection_tries) {
            (_, None) if self.injection_sequence_path.is_none() => {
                Err(bad("injection_tries", "is required (the number of attempts, or a percentage)"))
            }
            (_, None) => Ok(Tries::Count(0)),
            (InjectionType::Count, Some(n)) => {
                if !(n >= 1.0 && n.fract() == 0.0) {
                    return Err(bad(
                        "injection_tries",
                        format!("must be a whole number of attempts >= 1 for injection_type = count, got {n}"),
                    ));
                }
                // `as` saturates: a count past u64::MAX reads as u64::MAX, which no memory holds.
                let n = n as u64;
                let bytes = n.checked_mul(ATTEMPT_BYTES);
                resilab_data::check_memory("injection_tries", &n, bytes, "one record per attempt")?;
                Ok(Tries::Count(n))
            }
            (InjectionType::Percentage, Some(p)) if !(p > 0.0 && p <= 100.0) => {
                Err(bad("injection_tries", format!("must be a percentage in (0, 100] for injection_type = percentage, got {p}")))
            }
            (InjectionType::Percentage, Some(p)) => Ok(Tries::Percent(p)),
        }
    }

    /// The datasets to corrupt (`None`: random locations over the whole file).
    fn locations(&self) -> Result<Option<Vec<String>>> {
        if self.use_random_locations.unwrap_or(false) {
            return Ok(None);
        }
        let l = self.locations_to_corrupt.clone().unwrap_or_default();
        if l.is_empty() {
            return Err(bad("locations_to_corrupt", "is empty and use_random_locations is false: nothing to corrupt"));
        }
        if let Some(b) = l.iter().find(|s| s.trim_matches('/').is_empty()) {
            return Err(bad("locations_to_corrupt", format!("{b:?} is not a path (use use_random_locations = true for the whole file)")));
        }
        Ok(Some(l))
    }

    /// Keys of value corruption with `target = "bytes"`, or `byte_region` without it, are errors.
    fn check_target(&self, target: TargetKind) -> Result<()> {
        if target != TargetKind::Bytes {
            return if self.byte_region.is_some() { Err(bad("byte_region", "only applies to target = \"bytes\"")) } else { Ok(()) };
        }
        let random = self.use_random_locations.unwrap_or(false);
        let value_keys = [
            ("first_bit", self.first_bit.is_some()),
            ("last_bit", self.last_bit.is_some()),
            ("burst", self.burst.is_some_and(|b| b > 1)),
            ("bit_mask", self.bit_mask.is_some()),
            ("scaling_factor", self.scaling_factor.is_some()),
            ("float_precision", self.float_precision.is_some()),
            ("locations_to_corrupt", self.locations_to_corrupt.as_ref().is_some_and(|l| !l.is_empty()) && !random),
        ];
        match value_keys.iter().find(|(_, set)| *set) {
            Some((k, _)) => Err(bad(k, "does not apply to target = \"bytes\" (one random bit of a random byte per attempt)")),
            None => Ok(()),
        }
    }
}

/// Memory one attempt takes while a run is drawn and applied: its draw, its record, and a
/// lower estimate of the record's text and bit lists (dataset name, type, hex words).
pub const ATTEMPT_BYTES: u64 = (std::mem::size_of::<crate::run::Draw>() + std::mem::size_of::<crate::run::Record>() + 64) as u64;

/// A TOML file that did not parse or deserialise: the dotted key it is about, the message, and
/// the position in the text where that is known. Displayed on one line,
/// `train.batch_size: invalid type: string "big", expected usize (line 3, column 14)`, so that
/// `"{file}: {error}"` names the file, the key and the place on an error's first line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TomlError {
    /// Dotted key path (`fault[0].at_step`); empty for a syntax error or a missing top-level key.
    pub key: String,
    /// What is wrong, on one line (unknown fields list the allowed ones).
    pub message: String,
    /// Line and column (from 1, columns in characters) where the text is known.
    pub position: Option<(usize, usize)>,
}

impl std::fmt::Display for TomlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if let Some((line, column)) = self.position {
            write!(f, " (line {line}, column {column})")?;
        }
        Ok(())
    }
}

impl std::error::Error for TomlError {}

impl TomlError {
    fn new(key: String, e: &toml::de::Error, text: Option<&str>) -> Self {
        let message = e.message().trim().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
        let position = text.zip(e.span()).map(|(text, span)| line_column(text, span.start));
        let (key, message) = adopt_key(key, message);
        Self { key, message, position }
    }
}

/// A value that checks itself as a whole (the `[[fault]]` list) names the key below its own
/// in its message (`fault[1].target: ...`): that key is the error's (`fault[1].target`), so the
/// key is not written twice.
fn adopt_key(key: String, message: String) -> (String, String) {
    let below = message
        .strip_prefix(key.as_str())
        .filter(|rest| !key.is_empty() && rest.starts_with(['[', '.']))
        .and_then(|rest| rest.split_once(": "))
        .filter(|(sub, _)| !sub.contains(' '));
    match below {
        Some((sub, rest)) => (format!("{key}{sub}"), rest.to_string()),
        None => (key, message),
    }
}

/// Line and column, from 1, of byte `offset` of `text` (columns count characters).
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

fn key_path(path: &serde_path_to_error::Path) -> String {
    if path.iter().next().is_none() { String::new() } else { path.to_string() }
}

/// Parses TOML text into a table; a syntax error names its line and column.
pub fn toml_table(text: &str) -> std::result::Result<toml::Table, TomlError> {
    toml_from_str(text)
}

/// Deserialises TOML text into `T`. The error names the dotted key (through
/// `serde_path_to_error`), the message and the line and column; a syntax error names the line
/// and column. A text that nests deeper than [`resilab_limits::MAX_DEPTH`] is refused before
/// it is parsed.
pub fn toml_from_str<T: DeserializeOwned>(text: &str) -> std::result::Result<T, TomlError> {
    resilab_limits::check_toml_depth(text, resilab_limits::MAX_DEPTH).map_err(|e| TomlError {
        key: String::new(),
        message: format!("nests deeper than {} levels (resilab's configurations nest a handful)", e.max),
        position: Some((e.line, e.column)),
    })?;
    let de = toml::Deserializer::parse(text).map_err(|e| TomlError::new(String::new(), &e, Some(text)))?;
    serde_path_to_error::deserialize(de).map_err(|e| TomlError::new(key_path(e.path()), e.inner(), Some(text)))
}

/// Deserialises an already parsed table (after `--set` overrides, say) into `T`: the error names
/// the dotted key and the message (no position: the table has no text).
pub fn toml_from_table<T: DeserializeOwned>(table: toml::Table) -> std::result::Result<T, TomlError> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| TomlError::new(key_path(e.path()), e.inner(), None))
}

fn key_of(mode: &Mode) -> &'static str {
    match mode {
        Mode::BitRange { .. } => "last_bit",
        Mode::BitMask { .. } => "bit_mask",
        Mode::Scaling { .. } => "scaling_factor",
    }
}

/// Whether dataset `path` lies at or under `location`, compared by whole path components
/// (`/model/conv1` matches `/model/conv1/weight`, not `/model/conv10/weight`).
pub fn location_matches(location: &str, path: &str) -> bool {
    let mut l = location.split('/').filter(|s| !s.is_empty());
    let mut p = path.split('/').filter(|s| !s.is_empty());
    loop {
        match (l.next(), p.next()) {
            (None, _) => return true,
            (Some(a), Some(b)) if a == b => continue,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Result<Spec> {
        let raw = RawConfig::from_reference_yaml(s).map_err(|message| Error::Parse { path: "t.yaml".into(), message })?;
        raw.validate()
    }

    #[test]
    fn attempts_over_the_budget_are_a_budget_error() {
        let e = yaml(
            "injection_probability: 1\ninjection_type: \"count\"\ninjection_tries: 1000000000000000\nfloat_precision: 32\nfirst_bit: 0\n\
             last_bit: 31\nburst: 1\nallow_sign_change: True\nallow_NaN_values: True\nuse_random_locations: true\n",
        )
        .unwrap_err();
        assert!(matches!(&e, Error::Budget(resilab_limits::Error::Budget(r)) if r.key == "injection_tries"), "{e:?}");
    }

    #[test]
    fn reference_pytorch_config_parses() {
        let s = yaml(
            "hdf5_file: \"/x.h5\"\ninjection_probability: 1 # 1e-8\ninjection_type: \"count\"\ninjection_tries: 5\nlog_file_path: \"/nowhere/\"\n\
             float_precision: 64\nfirst_bit: 0\nlast_bit: 63\nburst: 1\n#scaling_factor: 1\nallow_sign_change: True\nallow_NaN_values: True\n\
             save_injection_sequence: False\nuse_random_locations: true\nlocations_to_corrupt:\n  - \"/model/fc.weight\"\n",
        )
        .unwrap();
        assert_eq!(s.model.precision, Precision::P64);
        assert_eq!(s.tries, Tries::Count(5));
        assert_eq!(s.locations, None);
        assert_eq!(s.ignored.len(), 2);
        assert!(s.model.allow_nan, "a config that names the key keeps its value");
    }

    #[test]
    fn reference_yaml_gets_the_reference_default_and_toml_keeps_resilabs() {
        assert!(!yaml("injection_tries: 1\nuse_random_locations: true\n").unwrap().model.allow_nan, "the reference's global default");
        assert!(!yaml("injection_tries: 1\nuse_random_locations: true\nallow_NaN_values: False\n").unwrap().model.allow_nan);
        let toml: RawConfig = toml_from_str("injection_tries = 1\nuse_random_locations = true\n").unwrap();
        assert!(toml.validate().unwrap().model.allow_nan);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("injection_tries: 1\nuse_random_locations: true\nbogus: 1\n", "bogus"),
            ("injection_tries: 1\nuse_random_locations: true\nbit_mask: \"101\"\nscaling_factor: 2\n", "only one mode"),
            ("injection_tries: 1\nuse_random_locations: true\nfirst_bit: 5\nlast_bit: 3\n", "first_bit (5) is greater than last_bit (3)"),
            (
                "injection_tries: 1\nuse_random_locations: true\nfloat_precision: 16\nbit_mask: \"10000000000000001\"\n",
                "bit_mask has 17 bits",
            ),
            ("injection_tries: 1\nuse_random_locations: true\ninjection_probability: 1.5\n", "injection_probability"),
            ("injection_tries: 1\nuse_random_locations: false\n", "locations_to_corrupt"),
            ("injection_tries: 0\nuse_random_locations: true\n", "injection_tries"),
            ("injection_type: percentage\ninjection_tries: 150\nuse_random_locations: true\n", "(0, 100]"),
            ("injection_tries: 1\nuse_random_locations: true\nfloat_precision: 8\n", "float_precision"),
            ("injection_tries: 1\nuse_random_locations: true\nfloat_precision: 32\nlast_bit: 40\n", "last_bit 40"),
            ("injection_tries: 1\nuse_random_locations: true\nfirst_bit: 3\nlast_bit: 4\nburst: 3\nallow_sign_change: false\n", "burst 3"),
        ];
        for (cfg, want) in cases {
            let err = yaml(cfg).expect_err(cfg).to_string();
            assert!(err.contains(want), "{cfg:?}: {err}");
        }
    }

    #[test]
    fn injection_tries_beyond_memory_is_an_error() {
        // Before the check a count of 10^14 aborted on a failed allocation of its records.
        for n in ["100000000000000", "1e15", "1e30"] {
            let e = yaml(&format!("injection_tries: {n}\nuse_random_locations: true\n")).unwrap_err();
            assert!(matches!(&e, Error::Budget(resilab_limits::Error::Budget(r)) if r.key == "injection_tries"), "{e:?}");
            let e = e.to_string();
            assert!(e.starts_with("injection_tries = "), "{e}");
            assert!(e.contains("bytes") && e.contains("more than the budget of"), "{e}");
        }
        assert_eq!(yaml("injection_tries: 1000\nuse_random_locations: true\n").unwrap().tries, Tries::Count(1000));
    }

    #[test]
    fn toml_errors_name_the_key_and_position_on_one_line() {
        let text = "injection_tries = 3\nfirst_bit = \"one\"\n";
        let e = toml_from_str::<RawConfig>(text).unwrap_err();
        assert_eq!(e.to_string(), "first_bit: invalid type: string \"one\", expected u32 (line 2, column 13)");
        let e = toml_from_str::<RawConfig>("injection_tries = 3\nfirts_bit = 1\n").unwrap_err().to_string();
        assert!(e.starts_with("firts_bit: unknown field `firts_bit`, expected one of") && e.contains("`first_bit`"), "{e}");
        assert!(e.ends_with("(line 2, column 1)"), "{e}");
        let e = toml_from_str::<RawConfig>("injection_tries = = 3\n").unwrap_err().to_string();
        assert!(!e.contains('\n') && e.ends_with("(line 1, column 19)"), "{e}");
        let e = toml_from_table::<RawConfig>(toml::from_str("burst = -1").unwrap()).unwrap_err().to_string();
        assert!(e.starts_with("burst: invalid value: integer `-1`, expected u32"), "{e}");
        assert_eq!([7, 6, 8, 99].map(|o| line_column("ab\ncdé\nx", o)), [(2, 4), (2, 3), (3, 1), (3, 2)]);
        // A key below the error's own, named by the message, becomes the error's key.
        let adopted = |k: &str, m: &str| adopt_key(k.into(), m.into());
        assert_eq!(adopted("fault", "fault[1].target: no such target"), ("fault[1].target".into(), "no such target".into()));
        assert_eq!(adopted("fault", "faulty: x"), ("fault".into(), "faulty: x".into()));
        assert_eq!(adopted("fault", "fault[1] is wrong: x"), ("fault".into(), "fault[1] is wrong: x".into()));
        assert_eq!(adopted("", "[1]: x"), ("".into(), "[1]: x".into()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "injection_tries = 3\nburst = \"two\"\n").unwrap();
        let e = RawConfig::load(&path).unwrap_err().to_string();
        let first = e.lines().next().unwrap();
        assert!(first.contains("c.toml: burst: invalid type: string \"two\"") && first.ends_with("(line 2, column 9)"), "{e}");
    }

    #[test]
    fn percentage_accepts_any_value_in_range() {
        for p in [0.001, 0.5, 1.0, 37.5, 100.0] {
            let s = yaml(&format!("injection_type: percentage\ninjection_tries: {p}\nuse_random_locations: true\n")).unwrap();
            assert_eq!(s.tries, Tries::Percent(p));
        }
        assert_eq!(Tries::Percent(0.001).attempts(1000), 1);
        assert_eq!(Tries::Percent(37.5).attempts(1000), 375);
    }

    #[test]
    fn unquoted_mask_is_a_pattern() {
        let s = yaml("injection_tries: 1\nuse_random_locations: true\nbit_mask: 10110\n").unwrap();
        assert_eq!(s.model.mode, Mode::BitMask { pattern: vec![true, false, true, true, false] });
    }

    #[test]
    fn whole_component_matching() {
        assert!(location_matches("/model/conv1", "/model/conv1/weight"));
        assert!(location_matches("/model/conv1/", "/model/conv1/weight"));
        assert!(location_matches("/model/conv1/weight", "/model/conv1/weight"));
        assert!(!location_matches("/model/conv1", "/model/conv10/weight"));
        assert!(!location_matches("/model/layer1.0.bn1", "/model/layer1.0.bn1.weight"));
    }

    #[test]
    fn shipped_configs_load_and_deep_ones_are_refused_before_parsing() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inject");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            RawConfig::load(&path).and_then(|r| r.validate()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
        assert!(seen >= 4, "{seen} configs in {}", dir.display());
        let n = 100_000;
        let t = std::time::Instant::now();
        let e = RawConfig::from_reference_yaml(&format!("injection_tries: {}1{}\n", "[".repeat(n), "]".repeat(n))).unwrap_err();
        assert_eq!(e, "nests deeper than 64 levels at line 1, column 81 (resilab's configurations nest a handful)");
        let e = toml_from_str::<RawConfig>(&format!("injection_tries = {}1{}\n", "{a = ".repeat(n), "}".repeat(n))).unwrap_err();
        assert_eq!(e.to_string(), "nests deeper than 64 levels (resilab's configurations nest a handful) (line 1, column 339)");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
    }
}
