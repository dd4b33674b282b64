//! What the commands print for a person: the lines after a run and after an evaluation.

use std::path::Path;

use crate::{EvalReport, Summary};

impl Summary {
    /// The lines `resilab train` ends with: accuracy and speed; faults, detections, restarts
    /// and the golden run when there was anything to recover from; the simulated parallel time
    /// when the run had `world` > 1 workers or stages. `out` is the run's directory.
    pub fn text(&self, out: &Path, world: usize) -> String {
        let s = self;
        let mut lines = vec![format!(
            "final test accuracy {:.4} after {} steps ({:.2} epochs) in {:.1} s, {:.0} images/s; results in {}",
            s.final_test_acc,
            s.steps,
            s.epochs,
            s.wall_s,
            s.images_per_s,
            out.display()
        )];
        if s.faults.faults_injected > 0 || !s.detections.is_empty() || s.status != crate::RunStatus::Completed {
            lines.push(format!(
                "{} fault(s) injected ({} values corrupted), {}, {} restart(s), {} step(s) lost, {} recomputed; strategy {}; run {}",
                s.faults.faults_injected,
                s.faults.values_corrupted,
                resilab_recovery::detections_text(&s.detections),
                s.restarts.len(),
                s.steps_lost,
                s.steps_recomputed,
                s.strategy,
                s.status
            ));
            if let (Some(g), Some(loss)) = (&s.golden, s.acc_loss_vs_golden) {
                // With an ensemble the loss is against its mean: name it, its spread and member 0.
                let reference = match (&s.golden_ensemble_accs_frac, s.golden_ensemble_mean_acc_frac, s.golden_ensemble_sd_frac) {
                    (Some(accs), Some(mean), Some(sd)) => format!(
                        "golden ensemble of {}: mean test accuracy {mean:.4}, SD {sd:.4}, member 0 {:.4}",
                        accs.len(),
                        g.final_test_acc
                    ),
                    _ => format!("golden run: test accuracy {:.4}", g.final_test_acc),
                };
                lines.push(format!(
                    "{reference} ({:+.4} here), wall {:.1} s ({} here); {}",
                    -loss,
                    g.wall_s,
                    s.time_overhead_vs_golden.map_or_else(|| "n/a".to_string(), |t| format!("{:+.1}%", 100.0 * t)),
                    g.dir.display()
                ));
            }
        }
        if world > 1 {
            lines.push(format!(
                "simulated parallel time {:.1} s ({:.2} s of it communication, {:.1} MB moved) for {}",
                s.time.simulated_s,
                s.time.simulated_comm_s,
                s.comm_bytes as f64 / 1e6,
                s.parallel
            ));
        }
        lines.join("\n")
    }
}

impl EvalReport {
    /// `resilab eval`'s report: the checkpoint, the test accuracy (and the clean file's), the
    /// non-finite and extreme values, and the datasets whose digest no longer matches.
    pub fn text(&self) -> String {
        let r = self;
        let mut lines = vec![
            format!("checkpoint   {} (step {}, {}, worker {})", r.checkpoint.display(), r.step, r.model, r.worker),
            format!("test         accuracy {:.4}, loss {:.4} on {} images", r.test_acc, r.test_loss, r.test_images),
        ];
        if let Some(c) = &r.clean {
            lines.push(format!(
                "clean        accuracy {:.4}, loss {:.4}: {}, the file it was altered from",
                c.test_acc,
                c.test_loss,
                c.file.display()
            ));
        }
        lines.push(format!(
            "values       {} : {} NaN, {} Inf, {} extreme (|v| > {:e})",
            r.values, r.nan, r.inf, r.extreme, r.extreme_threshold
        ));
        if !r.digest_mismatches.is_empty() {
            lines.push(format!("altered      {} dataset(s) no longer match their digest:", r.digest_mismatches.len()));
            lines.extend(r.digest_mismatches.iter().map(|d| format!("             {d}")));
        }
        lines.join("\n")
    }
}

/// An error's message and its causes on one line, as `{:#}` of an `anyhow` error prints them
/// (`outer: cause: cause`), leaving out a cause whose text the line already holds (a transparent
/// wrapper's), newlines made spaces: for an error kept as text (a run's recorded message) or
/// put inside another message.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text.replace('\n', " ")
}
