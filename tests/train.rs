//! `resilab train` end to end on tiny configurations.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use common::{Args, TINY, run, run_args, write};

#[test]
fn train_writes_metrics_summary_and_resolved_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tiny.toml", TINY);
    let out = dir.path().join("run");
    let o = run_args(Args::train(&cfg, &out).args(["--threads", "1"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let mut rdr = csv::Reader::from_path(out.join("metrics.csv")).unwrap();
    let headers: Vec<String> = rdr.headers().unwrap().iter().map(str::to_string).collect();
    assert_eq!(
        headers,
        ["step", "epoch", "loss", "train_acc", "test_acc", "test_loss", "lr", "wall_s", "sim_s", "loss_scale", "overflow_steps"]
    );
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    let steps: Vec<u64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(steps, [2, 4, 6, 8]);
    // Evaluation every 4 steps: test columns filled at 4 and 8 only.
    let evaluated: Vec<bool> = rows.iter().map(|r| !r[4].is_empty()).collect();
    assert_eq!(evaluated, [false, true, false, true]);
    for r in &rows {
        let loss: f64 = r[2].parse().unwrap();
        assert!(loss.is_finite() && loss > 0.0);
        let wall: f64 = r[7].parse().unwrap();
        assert!(wall > 0.0);
    }

    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["steps"], 8);
    assert_eq!(s["model"], "resnet8-w0.25");
    assert_eq!(s["provenance"]["backend"], "native", "the default backend");
    assert_eq!(s["provenance"]["threads"], 1);
    assert_eq!(s["provenance"]["seed"], 7);
    assert!(s["provenance"]["git_revision"].is_string());
    let acc = s["final_test_acc"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc));
    assert!(s["images_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(s["final_test_acc"], rows[3][4].parse::<f64>().unwrap());

    let resolved = std::fs::read_to_string(out.join("config.resolved.toml")).unwrap();
    assert!(resolved.contains("batch_size = 32") && resolved.contains("momentum = 0.9"), "{resolved}");
    // The resolved configuration is itself a valid configuration.
    let again = run_args(Args::train(&write(dir.path(), "again.toml", &resolved), &dir.path().join("again")).set("train.steps=1"));
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
}

fn digest_of(dir: &std::path::Path, name: &str, extra: &[&str]) -> String {
    let cfg = write(dir, "tiny.toml", TINY);
    let out = dir.join(name);
    let o = run_args(Args::train(&cfg, &out).args(extra));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    s["final_params_digest"].as_str().unwrap().to_string()
}

#[test]
fn same_seed_gives_identical_final_weights() {
    let dir = tempfile::tempdir().unwrap();
    let a = digest_of(dir.path(), "a", &["--threads", "1"]);
    let b = digest_of(dir.path(), "b", &["--threads", "2"]);
    assert_eq!(a, b, "two runs with one seed (1 and 2 threads) must end with the same weights");
    let c = digest_of(dir.path(), "c", &["--set", "seed=8"]);
    assert_ne!(a, c, "another seed must give other weights");
}

/// The `native` backend (flex with resilab's convolution kernels): bit-identical weights at 1
/// and 3 threads, other bits than flex (its own kernels run), and the same learning as flex.
#[test]
fn the_native_backend_repeats_exactly_at_any_thread_count_and_learns_as_flex_does() {
    let dir = tempfile::tempdir().unwrap();
    let a = digest_of(dir.path(), "a", &["--threads", "1", "--backend", "native"]);
    let b = digest_of(dir.path(), "b", &["--threads", "3", "--backend", "native"]);
    assert_eq!(a, b, "native at 1 and 3 threads");
    assert_ne!(a, digest_of(dir.path(), "flex", &["--threads", "1", "--backend", "flex"]), "native runs its own kernels");
    let learn = |backend: &str| {
        let out = dir.path().join(format!("learn-{backend}"));
        let cfg = dir.path().join("tiny.toml");
        let o = run_args(
            Args::train(&cfg, &out)
                .args(["--backend", backend])
                .set("train.steps=60")
                .set("data.train_size=512")
                .set("data.difficulty=0.2"),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        (s["final_test_acc"].as_f64().unwrap(), s["provenance"]["device"].as_str().unwrap_or_default().to_string())
    };
    let ((native, device), (flex, _)) = (learn("native"), learn("flex"));
    assert!(native > 0.5 && (native - flex).abs() <= 0.05, "native {native} vs flex {flex}");
    assert!(device.contains("resilab kernels"), "{device}");
}

#[test]
fn training_lowers_the_loss_and_raises_the_test_accuracy_between_evaluations() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "tiny.toml", TINY);
    let out = dir.path().join("learn");
    let o = run_args(
        Args::train(&cfg, &out).set("train.steps=60").set("train.eval_every=20").set("data.train_size=512").set("data.difficulty=0.2"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // metrics.csv: the mean training loss of the last logged window is below the first's, and
    // the test accuracy at the last evaluation (step 60) above the first (step 20).
    let mut r = csv::Reader::from_path(out.join("metrics.csv")).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    let loss: Vec<f64> = rows.iter().map(|x| x[col("loss")].parse().unwrap()).collect();
    let acc: Vec<(u64, f64)> = rows
        .iter()
        .filter(|x| !x[col("test_acc")].is_empty())
        .map(|x| (x[col("step")].parse().unwrap(), x[col("test_acc")].parse().unwrap()))
        .collect();
    assert!(loss.last().unwrap() < loss.first().unwrap(), "{loss:?}");
    assert_eq!(acc.iter().map(|a| a.0).collect::<Vec<_>>(), [20, 40, 60]);
    assert!(acc[2].1 > acc[0].1, "{acc:?}");
}

#[test]
fn every_flag_of_every_command_is_explained_in_its_help() {
    let top = String::from_utf8(run(&["--help"]).stdout).unwrap();
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 12 && commands.contains(&"train") && commands.contains(&"import"), "{commands:?}");
    for command in commands {
        let text = String::from_utf8(run(&[command, "--help"]).stdout).unwrap();
        // Each option line (`  -c, --config <FILE>  Explanation`, or the explanation on the next
        // line when the flag is long) has words after it.
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.trim_start().starts_with('-')) {
            let flag = l.split_whitespace().find(|w| w.starts_with("--")).unwrap_or(l.trim());
            let rest = l.trim_start().split_once("  ").map(|x| x.1.trim()).unwrap_or_default();
            let next = lines.get(i + 1).map(|n| n.trim()).unwrap_or_default();
            let explained = rest.split_whitespace().count() >= 2 || (!next.starts_with('-') && next.split_whitespace().count() >= 2);
            assert!(explained, "resilab {command} --help: {flag} is not explained:\n{text}");
        }
    }
}
