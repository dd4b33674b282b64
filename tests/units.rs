//! One unit per column name (docs/metrics.md, "Units: one per column name"), held for every
//! committed CSV under `results/`; tests/campaign.rs and tests/recovery.rs hold it for the
//! campaign reports, `compare` tables and summaries they generate.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::path::Path;

use common::units::{check_csv, check_dir, check_name, covered, table};

#[test]
fn every_committed_csv_names_its_accuracy_and_overhead_units() {
    let t = table();
    let n = check_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("results"), &t);
    assert!(n > 60, "{n} files");
}

#[test]
fn the_rule_catches_a_name_in_two_units_a_fraction_in_a_percent_column_and_an_undocumented_column() {
    let t = table();
    assert!(covered("acc_loss") && covered("time_overhead_vs_golden") && !covered("accr") && !covered("accr_all_pct"));
    let fails = |f: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    // The old names: `acc_loss` was a fraction in runs.csv and points in cells.csv.
    assert!(fails(&|| check_name("x.csv", "acc_loss", &t)));
    assert!(fails(&|| check_name("x.csv", "golden_acc", &t)));
    check_name("x.csv", "acc_loss_pts", &t);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    check_csv(&write("ok.csv", "model,acc_pct,final_acc_frac\nr,81.5,0.815\n"), &t);
    assert!(fails(&|| check_csv(&write("frac.csv", "model,final_acc_frac\nr,81.5\n"), &t)));
    assert!(fails(&|| check_csv(&write("pct.csv", "model,acc_pct\nr,181.5\n"), &t)));
    assert!(fails(&|| check_csv(&write("cmp.csv", "axis,metric,diff\nmodel,acc,1.0\n"), &t)));
    check_csv(&write("cmp2.csv", "axis,metric,diff\nmodel,acc_loss_pts,1.0\n"), &t);
}
