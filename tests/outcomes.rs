//! Outcome classes through the CLI (docs/metrics.md, "Outcome classes"): a `train` campaign's
//! runs each get a class in `runs.csv`, its cells count them in `cells.csv`, and
//! `outcomes.csv` gives each class's share with its exact interval; on a tiny run without
//! faults, with a crash its strategy gives up on, and with weights blown up by a factor of 1e30.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::csv_records as read;
use common::finished_campaign;

const CAMPAIGN: &str = r#"
[campaign]
kind = "train"
seeds = [3]
repetitions = 2
timeout_s = 300

[base]
data = { source = "synthetic", train_size = 128, test_size = 64, image_size = 8, classes = 4, difficulty = 0.3 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { steps = 16, batch_size = 32, log_every = 2, eval_every = 4 }

[grid.fault]
"none" = []
"crash" = [{ target = "crash", at_step = 6 }]
"blow-up" = [{ target = "weights", at_step = 6, scaling_factor = 1e30, injection_tries = 50 }]
"#;

const HARMED: [&str; 5] = ["immediate_nan", "slow_degrade", "sharp_slow_degrade", "sharp_degrade", "low_test_acc"];

#[test]
fn each_run_has_its_class_and_each_cell_counts_them_with_exact_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let out = finished_campaign(dir.path(), "outcomes", CAMPAIGN, &[]);
    let report = dir.path().join("report");
    let o = common::run(&["report", out.to_str().unwrap(), "--out", report.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let runs = read(&out.join("runs.csv"));
    assert_eq!(runs.len(), 6);
    for r in &runs {
        let (class, onset) = (r["outcome"].as_str(), r["outcome_onset_step"].as_str());
        match r["fault"].as_str() {
            "none" => assert_eq!((class, onset), ("no_fault", ""), "{r:?}"),
            // Strategy `none` gives up at the crash: the run stops at step 6.
            "crash" => assert_eq!((class, onset, r["failed"].as_str()), ("failed", "6", "true"), "{r:?}"),
            _ => {
                assert!(HARMED.contains(&class), "{r:?}");
                assert!(onset.parse::<u64>().unwrap() >= 6, "{r:?}");
                if r["collapsed"] == "true" {
                    assert!(["immediate_nan", "slow_degrade", "sharp_slow_degrade"].contains(&class), "{r:?}");
                }
            }
        }
    }

    let cells = read(&report.join("cells.csv"));
    let of = |fault: &str| cells.iter().find(|c| c["fault"] == fault).unwrap()["outcomes"].clone();
    assert_eq!(of("none"), "no_fault:2");
    assert_eq!(of("crash"), "failed:2");
    let blown: u64 = of("blow-up").split(';').map(|p| p.split(':').nth(1).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(blown, 2);

    let lines = read(&report.join("outcomes.csv"));
    let line = |fault: &str, class: &str| lines.iter().find(|l| l["fault"] == fault && l["outcome"] == class).unwrap().clone();
    // 2 of 2: the exact interval's lower end is 0.025^(1/2) = 15.81%.
    let crash = line("crash", "failed");
    assert_eq!(
        [&crash["runs"], &crash["count"], &crash["count_pct"], &crash["lo_pct"], &crash["hi_pct"]],
        ["2", "2", "100.00", "15.81", "100.00"]
    );
    // A class absent from a cell is a 0 with its upper bound: 1 - 0.025^(1/2).
    let none = line("none", "failed");
    assert_eq!([&none["count"], &none["lo_pct"], &none["hi_pct"]], ["0", "0.00", "84.19"]);

    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("**Outcomes**") && md.contains("| no fault 2 |"), "{md}");
}
