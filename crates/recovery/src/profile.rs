//! Cost profiles: what one real system pays when a worker fails, each figure with its source.
//!
//! A profile gives the three constants every recovering strategy is charged with, taken from
//! one system at one scale wherever a source gives them together: the failure detection `D`,
//! a communicator rebuild `B` (the job goes on in the same processes) and a relaunch `R` (a new
//! job). A relaunch starts new processes, so it contains the new job's communicator
//! initialisation at the same scale: no profile's relaunch is cheaper than its rebuild (a unit
//! test holds every profile to it). Where a source's relaunch figure already contains the
//! checkpoint read and the recomputation of the steps lost since it ("back to the progress
//! before the crash"), the profile says so, and checkpoint-restart is then charged `D + R`
//! alone. The figures and their kinds are those of `shared/reference/COSTS.md`; docs/recovery.md
//! tabulates them.

use serde::Serialize;

/// How a figure was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// In the paper's text.
    Paper,
    /// In the system's source or official documentation.
    Src,
    /// Arithmetic on figures of the same profile, shown in the note.
    Derived,
}

/// One constant of a profile: its value and where it comes from.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Figure {
    /// Seconds.
    pub seconds: f64,
    /// The source, precise enough to find the figure.
    pub source: &'static str,
    /// How the figure was read.
    pub kind: Kind,
}

/// The costs of one system at one scale.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Profile {
    /// The name `--profile` takes.
    pub name: &'static str,
    /// The system and scale the figures describe.
    pub system: &'static str,
    /// `recovery.detect_timeout_s`: from a crash until the survivors learn of it.
    pub detect: Figure,
    /// `recovery.rebuild_s`: a communicator with a changed membership, same processes.
    pub rebuild: Figure,
    /// `recovery.relaunch_s`: a new job, its communicator initialisation included.
    pub relaunch: Figure,
    /// The relaunch figure already contains the checkpoint read and the recomputation of the
    /// steps lost since the checkpoint.
    pub relaunch_covers_redo: bool,
}

/// Every profile, in the order `--help` and docs/recovery.md list them.
pub const PROFILES: [Profile; 2] = [
    Profile {
        name: "megascale-optimised",
        system: "MegaScale (ByteDance) after its fixes, more than 10,000 GPUs",
        detect: Figure {
            seconds: 600.0,
            source: "MegaScale, NSDI'24, sections 4.1 and 6.3: detection and diagnostic tests under 10 min on average",
            kind: Kind::Paper,
        },
        rebuild: Figure {
            seconds: 30.0,
            source: "MegaScale, NSDI'24, section 3.5: optimised initialisation under 30 s beyond 10,000 GPUs",
            kind: Kind::Paper,
        },
        relaunch: Figure {
            seconds: 900.0,
            source: "MegaScale, NSDI'24, section 6.3: back to the progress before the crash within 15 min of the latest checkpoint",
            kind: Kind::Paper,
        },
        relaunch_covers_redo: true,
    },
    Profile {
        name: "megascale-unoptimised",
        system: "MegaScale's Megatron-LM before its fixes, 2,048 GPUs",
        detect: Figure {
            seconds: 600.0,
            source: "MegaScale, NSDI'24, sections 4.1 and 6.3: detection and diagnostic tests under 10 min on average",
            kind: Kind::Paper,
        },
        rebuild: Figure {
            seconds: 1047.0,
            source: "MegaScale, NSDI'24, section 3.5: 1,047 s to initialise Megatron-LM's communicators on 2,048 GPUs before the fixes",
            kind: Kind::Paper,
        },
        relaunch: Figure {
            seconds: 1917.0,
            source: "the optimised 900 s with its 30 s initialisation replaced by the unoptimised 1,047 s (900 - 30 + 1,047)",
            kind: Kind::Derived,
        },
        relaunch_covers_redo: true,
    },
];

/// The profile called `name`.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// The profiles' names, comma-separated (for error messages).
pub fn names() -> String {
    PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

impl Profile {
    /// Detection, rebuild and relaunch in seconds, each times `scale` (simulated seconds per
    /// second of the profile): the constants a run or a re-pricing is charged at.
    pub fn scaled(&self, scale: f64) -> [f64; 3] {
        [self.detect.seconds * scale, self.rebuild.seconds * scale, self.relaunch.seconds * scale]
    }

    /// The profile in lines: its system, then each constant with its value, kind and source.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!("cost profile {}: {}", self.name, self.system)];
        for (key, f) in [("detect_timeout_s", self.detect), ("rebuild_s", self.rebuild), ("relaunch_s", self.relaunch)] {
            out.push(format!("  recovery.{key} = {} s ({}: {})", f.seconds, kind_name(f.kind), f.source));
        }
        if self.relaunch_covers_redo {
            out.push("  the relaunch includes the checkpoint read and the recomputation since the checkpoint: checkpoint-restart pays D + R per failure".into());
        }
        out
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Paper => "paper",
        Kind::Src => "src",
        Kind::Derived => "derived",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_profile_relaunches_cheaper_than_it_rebuilds() {
        for p in PROFILES {
            assert!(p.relaunch.seconds >= p.rebuild.seconds, "{}: relaunch {} < rebuild {}", p.name, p.relaunch.seconds, p.rebuild.seconds);
            for f in [p.detect, p.rebuild, p.relaunch] {
                assert!(f.seconds.is_finite() && f.seconds > 0.0 && !f.source.is_empty(), "{}", p.name);
            }
        }
    }

    #[test]
    fn profiles_are_found_by_name_and_described_with_their_sources() {
        let p = profile("megascale-optimised").unwrap_or_else(|| panic!("{}", names()));
        let text = p.describe().join("\n");
        assert!(text.contains("recovery.rebuild_s = 30 s (paper: MegaScale, NSDI'24, section 3.5"), "{text}");
        assert!(profile("megascale").is_none());
        let u = profile("megascale-unoptimised").unwrap_or_else(|| panic!("{}", names()));
        let (o, u) = (p.relaunch.seconds, u.relaunch.seconds);
        assert_eq!(u, o - 30.0 + 1047.0);
    }
}
