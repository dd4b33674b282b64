//! `recovery.profile`: a run's recovery constants from one real system's cost profile
//! ([`resilab_recovery::profile`]), each scaled by `recovery.profile_scale`, with any of the
//! `[recovery]` keys the configuration gives overriding its constant alone.
//!
//! The profile is filled in before the configuration is deserialised, so the run's stored
//! configuration holds the constants it was charged at beside the profile's name.

use resilab_recovery::profile::{self, Profile};

use crate::{Error, Result};

/// The keys a profile fills when the configuration gives none, with the profile's value.
fn filled(p: &Profile, scale: f64) -> [(&'static str, toml::Value); 4] {
    let [detect, rebuild, relaunch] = p.scaled(scale);
    [
        ("detect_timeout_s", toml::Value::Float(detect)),
        ("rebuild_s", toml::Value::Float(rebuild)),
        ("relaunch_s", toml::Value::Float(relaunch)),
        ("relaunch_covers_redo", toml::Value::Boolean(p.relaunch_covers_redo)),
    ]
}

/// The profile called `name`; an error naming `recovery.profile` and the known profiles where
/// there is none (for a table before deserialisation and a configuration after it alike).
pub(crate) fn lookup(name: &str) -> Result<&'static Profile> {
    profile::profile(name)
        .ok_or_else(|| Error::Config(format!("recovery.profile = {name:?} is not a cost profile; the profiles are {}", profile::names())))
}

/// Fills `[recovery]`'s constants from `recovery.profile` where the table gives none. Returns
/// whether a profile was named. Errors name the key: an unknown profile (with the known ones),
/// a scale that is not a finite number above 0, or a scale without a profile.
pub(crate) fn fill(table: &mut toml::Table) -> Result<bool> {
    let Some(toml::Value::Table(recovery)) = table.get_mut("recovery") else { return Ok(false) };
    let scale = match recovery.get("profile_scale") {
        None => 1.0,
        Some(toml::Value::Float(f)) => *f,
        Some(toml::Value::Integer(i)) => *i as f64,
        Some(other) => return Err(Error::Config(format!("recovery.profile_scale = {other}: expected a number"))),
    };
    let name = match recovery.get("profile") {
        None if recovery.contains_key("profile_scale") => {
            return Err(Error::Config("recovery.profile_scale is set without recovery.profile: name the cost profile it scales".into()));
        }
        None => return Ok(false),
        Some(toml::Value::String(s)) => s.clone(),
        Some(other) => return Err(Error::Config(format!("recovery.profile = {other}: expected a profile's name ({})", profile::names()))),
    };
    let p = lookup(&name)?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(Error::Config(format!(
            "recovery.profile_scale = {scale} must be a finite number above 0 (simulated seconds per second of the profile)"
        )));
    }
    for (key, value) in filled(p, scale) {
        recovery.entry(key).or_insert(value);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_profile_fills_only_the_constants_not_given() {
        let mut t = table("[recovery]\nprofile = \"megascale-unoptimised\"\nprofile_scale = 0.5\nrebuild_s = 2.0\n");
        assert!(fill(&mut t).unwrap_or_else(|e| panic!("{e}")));
        let r = t["recovery"].as_table().unwrap_or_else(|| panic!("no [recovery]"));
        assert_eq!(r["detect_timeout_s"].as_float(), Some(300.0));
        assert_eq!(r["rebuild_s"].as_float(), Some(2.0));
        assert_eq!(r["relaunch_s"].as_float(), Some(1917.0 * 0.5));
        assert_eq!(r["relaunch_covers_redo"].as_bool(), Some(true));
    }

    #[test]
    fn without_a_profile_nothing_is_filled() {
        let mut t = table("[recovery]\nrebuild_s = 2.0\n");
        assert!(!fill(&mut t).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(t, table("[recovery]\nrebuild_s = 2.0\n"));
    }

    #[test]
    fn bad_profiles_and_scales_name_their_key() {
        for (text, want) in [
            ("profile = \"megascale\"", "recovery.profile = \"megascale\" is not a cost profile; the profiles are megascale-optimised"),
            ("profile = 3", "recovery.profile = 3: expected a profile's name"),
            ("profile = \"megascale-optimised\"\nprofile_scale = 0", "recovery.profile_scale = 0 must be a finite number above 0"),
            ("profile = \"megascale-optimised\"\nprofile_scale = -1e-3", "recovery.profile_scale = -0.001 must be"),
            ("profile = \"megascale-optimised\"\nprofile_scale = \"x\"", "recovery.profile_scale = \"x\": expected a number"),
            ("profile_scale = 1e-3", "recovery.profile_scale is set without recovery.profile"),
        ] {
            let e = fill(&mut table(&format!("[recovery]\n{text}\n"))).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
