//! A run's `[[fault]]` entries, parsed once, when the configuration is read.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Result;
use crate::schedule::{FaultEntry, parse};

/// A run's `[[fault]]` entries: the tables as written, which a resolved configuration stores
/// again, and the [`FaultEntry`]s they parse into. Reading one (deserialising, or
/// [`Faults::parse`]) checks every entry, so whoever holds a `Faults` holds valid entries:
/// they are parsed in this one place and passed on as values. Deserialising fails with the
/// parse error, which names `fault[i].key`.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    tables: Vec<toml::Table>,
    entries: Vec<FaultEntry>,
}

impl Faults {
    /// Parses `tables`: `target`, one of `at_step` and `mtbf_steps`, optionally `worker` (or its
    /// alias `stage`), and the injector's keys verbatim (see `docs/faults.md`); errors name
    /// `fault[i].key`.
    pub fn parse(tables: Vec<toml::Table>) -> Result<Self> {
        let entries = parse(&tables)?;
        Ok(Self { tables, entries })
    }

    /// The entries, in the order written (`entries()[i].index == i`).
    pub fn entries(&self) -> &[FaultEntry] {
        &self.entries
    }

    /// The tables as written.
    pub fn tables(&self) -> &[toml::Table] {
        &self.tables
    }

    /// Whether the run has no faults.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// Two lists are equal when their tables are: the entries follow from them.
impl PartialEq for Faults {
    fn eq(&self, other: &Self) -> bool {
        self.tables == other.tables
    }
}

impl Serialize for Faults {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.tables.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Faults {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Self::parse(Vec::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct Run {
        #[serde(default, rename = "fault")]
        faults: Faults,
    }

    #[test]
    fn entries_are_parsed_when_read_and_written_back_as_given() {
        let text = "[[fault]]\ntarget = \"weights\"\nat_step = 3\n\n[[fault]]\ntarget = \"crash\"\nmtbf_steps = 50.0\n";
        let run: Run = toml::from_str(text).unwrap();
        let targets: Vec<_> = run.faults.entries().iter().map(|e| (e.index, e.target)).collect();
        assert_eq!(targets, [(0, crate::FaultTarget::Weights), (1, crate::FaultTarget::Crash)]);
        assert_eq!(run.faults.entries()[0].at_step, Some(3));
        let again: Run = toml::from_str(&toml::to_string(&run).unwrap()).unwrap();
        assert_eq!(again.faults, run.faults);
        assert!(toml::from_str::<Run>("").unwrap().faults.is_empty());
    }

    #[test]
    fn a_bad_entry_is_refused_when_read_with_its_key() {
        let e = toml::from_str::<Run>("[[fault]]\ntarget = \"weights\"\nat_step = 3\n\n[[fault]]\ntarget = \"cosmic\"\nat_step = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fault[1].target: ") && e.contains("\"cosmic\" is not one of weights"), "{e}");
    }
}
