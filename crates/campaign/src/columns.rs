//! The metric columns of `runs.csv`, and the kinds of campaign whose runs fill each.

use crate::spec::Kind;

/// Campaign kinds as bits, for the columns each fills.
const R: u8 = 1;
const E: u8 = 2;
const T: u8 = 4;
const ALL: u8 = R | E | T;

/// Metric columns of `runs.csv`, in order, with the kinds whose runs fill them: a `train` run
/// its faults, detections, recovery and workers; a `restart` run what its continued training
/// did; `restart` and `eval` runs their altered files and replicas.
const METRIC_COLUMNS: &[(&str, u8)] = &[
    ("strategy", T),
    ("failed", T),
    ("steps", R),
    ("final_acc_frac", ALL),
    ("final_loss", ALL),
    ("final_train_loss", R),
    ("golden_acc_frac", ALL),
    ("acc_loss_frac", ALL),
    ("hit_acc_frac", R | E),
    ("hit_loss", R | E),
    ("replica_acc_min_frac", R | E),
    ("replica_acc_mean_frac", R | E),
    ("replica_acc_max_frac", R | E),
    ("replica_accs_frac", R | E),
    ("golden_replica_accs_frac", R | E),
    ("replica_divergence", R | E),
    ("replicas_diverged", R | E),
    ("nev", ALL),
    ("ev_injected", ALL),
    ("param_max_abs", R | E),
    ("buffer_max_abs", R | E),
    ("optim_max_abs", R | E),
    ("param_non_finite", R | E),
    ("buffer_non_finite", R | E),
    ("optim_non_finite", R | E),
    ("peak_abs", R),
    ("extreme_threshold", R | E),
    ("base_step", R | E),
    ("restart_step", R | E),
    ("collapse_step", R),
    ("collapsed", ALL),
    ("values_corrupted", ALL),
    ("non_finite_or_extreme_injected", ALL),
    ("ranks_hit", R | E),
    ("layers", R | E),
    ("bits", R | E),
    ("faults", T),
    ("crashes", T),
    ("flips", T),
    ("first_crash_step", T),
    ("first_crash_fraction", T),
    ("first_crash_phase", T),
    ("first_crash_buckets", T),
    ("crashes_after_bucket", T),
    ("detections", T),
    ("detection_latency", T),
    ("steps_lost", T),
    ("steps_recomputed", T),
    ("shortcut_prefix_steps", T),
    ("shortcut_remainder_steps", T),
    ("wall_s", ALL),
    ("phase_s", R | E),
    ("golden_wall_s", R | T),
    ("time_overhead_frac", R | T),
    ("sim_overhead_frac", T),
    ("sim_s", T),
    ("golden_sim_s", T),
    ("time_to_golden_acc_s", T),
    ("workers_end", T),
    ("permanent_losses", T),
    ("spares_used", T),
    ("spare_fallbacks", T),
    ("steps_at_workers", T),
    ("batch_rule", T),
    ("lr_scale", T),
    ("digest", ALL),
    ("golden_key", ALL),
];

/// The columns measured on the wall clock: two records of one run (a rerun, a shard of an array
/// job, a resumed campaign) may differ in these and in nothing else. `scripts/slurm_check.py`
/// keeps the same list (a unit test below compares them).
pub const WALL_CLOCK_COLUMNS: &[&str] = &["wall_s", "phase_s", "golden_wall_s", "time_overhead_frac"];

/// The metric columns of a campaign of `kind`'s `runs.csv`, in order: those its runs fill
/// (`runs.jsonl` keeps every field).
pub fn metric_columns(kind: Kind) -> Vec<&'static str> {
    let bit = match kind {
        Kind::Restart => R,
        Kind::Eval => E,
        Kind::Train => T,
    };
    METRIC_COLUMNS.iter().filter(|(_, kinds)| kinds & bit != 0).map(|(c, _)| *c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_columns_are_metric_columns() {
        for c in WALL_CLOCK_COLUMNS {
            assert!(METRIC_COLUMNS.iter().any(|(m, _)| m == c), "{c} is not a runs.csv column");
        }
    }

    /// The Slurm check compares merged shards with a single-process campaign on every column
    /// but these; a wall-clock column it does not know fails CI on timing noise.
    #[test]
    fn slurm_check_skips_the_same_columns() {
        let script = include_str!("../../../scripts/slurm_check.py");
        let line = script.lines().find(|l| l.starts_with("TIMING = {")).expect("TIMING in slurm_check.py");
        let inner = line.trim_start_matches("TIMING = {").trim_end_matches('}');
        let mut listed: Vec<&str> = inner.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let mut ours = WALL_CLOCK_COLUMNS.to_vec();
        listed.sort_unstable();
        ours.sort_unstable();
        assert_eq!(listed, ours, "scripts/slurm_check.py's TIMING");
    }
}
