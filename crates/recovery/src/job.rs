//! A real job a study's verdict is priced at (`[[campaign.job]]`): how many GPUs, how many share
//! a node (a node's failure ends all of them), the fault-free step, and how often a node fails,
//! as Meta and Llama 3 publish it (failures per 1,000 node-days). The job's failures then come
//! every `1,000 x 86,400 / (rate x nodes)` seconds.

use serde::{Deserialize, Serialize};

/// Seconds in a day.
const DAY_S: f64 = 86_400.0;

/// One job: its scale, its step and its nodes' failure rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// How the report names it.
    pub name: String,
    /// Data-parallel workers (GPUs).
    pub gpus: u64,
    /// GPUs per node.
    #[serde(default = "eight")]
    pub gpus_per_node: u64,
    /// The job's fault-free step, seconds.
    pub step_s: f64,
    /// Node failures per 1,000 node-days (Llama 3: 3.8).
    pub failures_per_1000_node_days: f64,
    /// Where the failure rate comes from (stated beside the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn eight() -> u64 {
    8
}

impl Job {
    /// The nodes its GPUs occupy.
    pub fn nodes(&self) -> u64 {
        self.gpus.div_ceil(self.gpus_per_node.max(1))
    }

    /// The job's mean time between failures, seconds.
    pub fn mtbf_s(&self) -> f64 {
        1_000.0 * DAY_S / (self.failures_per_1000_node_days * self.nodes() as f64)
    }

    /// The same in the job's steps.
    pub fn mtbf_steps(&self) -> f64 {
        self.mtbf_s() / self.step_s
    }

    /// Failures per step of the job.
    pub fn failures_per_step(&self) -> f64 {
        1.0 / self.mtbf_steps()
    }

    /// Checks every key; the error names the key (under `at`, e.g. `campaign.job[0]`).
    pub fn validate(&self, at: &str) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err(format!("{at}.name: give the job a name"));
        }
        if self.gpus == 0 {
            return Err(format!("{at}.gpus: at least 1"));
        }
        if self.gpus_per_node == 0 {
            return Err(format!("{at}.gpus_per_node: at least 1"));
        }
        for (key, v) in [("step_s", self.step_s), ("failures_per_1000_node_days", self.failures_per_1000_node_days)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{at}.{key}: a finite number above 0, not {v}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama(gpus: u64) -> Job {
        Job { name: "j".into(), gpus, gpus_per_node: 8, step_s: 1.0, failures_per_1000_node_days: 3.8, source: None }
    }

    #[test]
    fn llama_3s_rate_gives_its_published_job_mtbf() {
        // 16,384 GPUs on 2,048 nodes at 3.8 per 1,000 node-days: 3.1 h (COSTS.md, Llama 3).
        let j = llama(16_384);
        assert_eq!(j.nodes(), 2_048);
        assert!((j.mtbf_s() / 3_600.0 - 3.084).abs() < 0.001, "{}", j.mtbf_s() / 3_600.0);
        let small = llama(1_024);
        assert!((small.mtbf_s() / j.mtbf_s() - 16.0).abs() < 1e-12, "16x fewer nodes fail 16x less often");
        let slow = Job { step_s: 4.0, ..llama(16_384) };
        assert!((slow.mtbf_steps() * 4.0 - j.mtbf_steps()).abs() < 1e-9);
        assert_eq!(Job { gpus: 9, ..llama(1) }.nodes(), 2, "a partial node is a node");
    }

    #[test]
    fn every_bad_key_is_named() {
        assert!(llama(8).validate("campaign.job[0]").is_ok());
        for (bad, key) in [
            (Job { gpus: 0, ..llama(8) }, "campaign.job[0].gpus"),
            (Job { gpus_per_node: 0, ..llama(8) }, "campaign.job[0].gpus_per_node"),
            (Job { step_s: 0.0, ..llama(8) }, "campaign.job[0].step_s"),
            (Job { failures_per_1000_node_days: f64::NAN, ..llama(8) }, "campaign.job[0].failures_per_1000_node_days"),
            (Job { name: " ".into(), ..llama(8) }, "campaign.job[0].name"),
        ] {
            let e = bad.validate("campaign.job[0]").unwrap_err();
            assert!(e.starts_with(key), "{e}");
        }
    }
}
