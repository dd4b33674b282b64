//! The campaign file: settings, the base run configuration, the injection keys and the grid,
//! and the runs it expands to. Run `i` is computed from `i` alone (mixed-radix decoding), so
//! every process agrees on what run `i` is without listing the grid.

use std::path::Path;

use resilab_inject::config::{toml_from_str, toml_from_table, toml_table};
use resilab_runner::RunConfig;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The published method: alter a copy of the base checkpoint, restart training from it for
    /// `steps` steps, evaluate. The base checkpoint and the fault-free continuation (the golden
    /// run) are trained once per base configuration and reused.
    Restart,
    /// Alter a copy of the base checkpoint and evaluate it, without training.
    Eval,
    /// A whole training run with its `[[fault]]` entries and recovery strategy, compared with
    /// its golden run (computed once per configuration).
    Train,
}

impl Kind {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Restart => "restart",
            Kind::Eval => "eval",
            Kind::Train => "train",
        }
    }
}

fn one() -> u64 {
    1
}
fn default_seeds() -> Vec<u64> {
    vec![42]
}
fn default_timeout() -> f64 {
    600.0
}
fn default_threshold() -> f64 {
    1e10
}
fn default_tolerance() -> f64 {
    0.5
}

/// The `[campaign]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Name (default: the file's stem).
    #[serde(default)]
    pub name: Option<String>,
    /// What a run does: `restart`, `eval` or `train`.
    pub kind: Kind,
    /// Training seeds: each is a separate base (and golden) run.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Runs per grid cell and seed, each with its own fault draw.
    #[serde(default = "one")]
    pub repetitions: u64,
    /// Mixed into every run's fault seed: change it to draw other faults over the same grid.
    #[serde(default = "one")]
    pub fault_seed: u64,
    /// `restart` and `eval`: steps trained before the base checkpoint is written.
    #[serde(default)]
    pub base_steps: Option<u64>,
    /// `restart`: steps trained after restarting from the altered checkpoint.
    #[serde(default)]
    pub steps: Option<u64>,
    /// Seconds a run may take before it is killed and recorded as `timeout`.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// Magnitude above which a parameter counts as an extreme value (N-EV).
    #[serde(default = "default_threshold")]
    pub extreme_threshold: f64,
    /// RWC: final accuracy within this many points of the golden run's.
    #[serde(default = "default_tolerance")]
    pub rwc_tolerance_points: f64,
    /// `restart`: stop a run at the first NaN/Inf loss or weight (nothing after it changes
    /// the metrics). `false` trains every run for all its `steps`, a fixed run length (the
    /// throughput benchmark's setting).
    #[serde(default = "yes")]
    pub stop_at_collapse: bool,
    /// Hypotheses fixed before running (`[[campaign.hypothesis]]`): each compares two options
    /// of one axis on one metric in every condition (every combination of the other axes).
    /// When given, the report tests these and only these, Holm-adjusted over all of them.
    #[serde(default, rename = "hypothesis", skip_serializing_if = "Vec::is_empty")]
    pub hypotheses: Vec<Hypothesis>,
    /// With hypotheses: the non-inferiority margin of the "which strategy when" table, in
    /// points: an option is admissible only when the one-sided 95% upper bound of its mean
    /// accuracy loss against the golden run lies below it.
    #[serde(default = "default_budget")]
    pub accuracy_budget_points: f64,
    /// With hypotheses: a run that loses more than this many points (or fails) is a
    /// catastrophe, counted in the catastrophe-rate rule of the "which strategy when" table.
    #[serde(default = "default_catastrophe_points")]
    pub catastrophe_points: f64,
    /// With hypotheses: the catastrophe-rate budget, % of runs: an option is admissible only
    /// when the one-sided 95% Clopper–Pearson upper bound of its catastrophe rate lies below
    /// it (with 30 runs, 0 catastrophes bound the rate at 9.5%, under the default 10%).
    #[serde(default = "default_catastrophe_budget")]
    pub catastrophe_budget_pct: f64,
    /// With hypotheses: a condition whose lowest golden accuracy lies below this (%) is
    /// undecided ("golden run at X%"): a reference that did not learn decides nothing.
    #[serde(default = "default_golden_min")]
    pub golden_min_pct: f64,
    /// With hypotheses: real jobs the "which strategy when" table is priced at as well
    /// (`[[campaign.job]]`): the accuracy side from the runs, the cost side re-priced at the
    /// runs' cost profile scaled to the job's step and scaled to the job's failure rate. They
    /// decide no run.
    #[serde(default, rename = "job", skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<resilab_recovery::job::Job>,
    /// Grid axes whose options meet the same faults (common random numbers): a run's fault
    /// seed leaves these axes out, so the runs that differ only in them form a paired group.
    /// Unset: the axes of the hypotheses. `[]`: every run draws its own faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired: Option<Vec<String>>,
}

impl Settings {
    /// The axes whose options share their faults: `paired`, or the hypotheses' axes.
    pub fn paired_axes(&self) -> Vec<String> {
        match &self.paired {
            Some(p) => p.clone(),
            None => {
                let mut axes: Vec<String> = Vec::new();
                for h in &self.hypotheses {
                    if !axes.contains(&h.axis) {
                        axes.push(h.axis.clone());
                    }
                }
                axes
            }
        }
    }
}

fn default_budget() -> f64 {
    0.5
}
fn default_catastrophe_points() -> f64 {
    10.0
}
fn default_catastrophe_budget() -> f64 {
    10.0
}
fn default_golden_min() -> f64 {
    80.0
}

/// What a hypothesis compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HypothesisMetric {
    /// Simulated overhead against the golden run, % (runs that completed); paired t test
    /// where the axis is paired, else Welch's.
    SimOverhead,
    /// Accuracy loss against the golden run, points (runs that completed: a run whose strategy
    /// gave up counts only in `failed`); paired t test where the axis is paired, else Welch's.
    AccLoss,
    /// Share of runs that failed, %; exact McNemar where the axis is paired, else the
    /// two-proportion test with Newcombe's interval.
    Failed,
    /// Simulated time to the golden run's final accuracy, % of the golden run's simulated
    /// time (runs that reached it); paired t test where the axis is paired, else Welch's.
    TimeToAcc,
    /// Share of runs that reached the golden run's final accuracy, %; exact McNemar where the
    /// axis is paired, else the two-proportion test with Newcombe's interval.
    Reached,
}

impl HypothesisMetric {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            HypothesisMetric::SimOverhead => "sim_overhead",
            HypothesisMetric::AccLoss => "acc_loss",
            HypothesisMetric::Failed => "failed",
            HypothesisMetric::TimeToAcc => "time_to_acc",
            HypothesisMetric::Reached => "reached",
        }
    }

    /// The name its values carry in `comparisons.csv`, with their unit: `sim_overhead_pct`,
    /// `acc_loss_pts`, `failed_pct`, `time_to_acc_pct` or `reached_pct`.
    pub fn column(self) -> &'static str {
        match self {
            HypothesisMetric::SimOverhead => "sim_overhead_pct",
            HypothesisMetric::AccLoss => "acc_loss_pts",
            HypothesisMetric::Failed => "failed_pct",
            HypothesisMetric::TimeToAcc => "time_to_acc_pct",
            HypothesisMetric::Reached => "reached_pct",
        }
    }
}

/// One hypothesis: `b` against `a` on `metric`, options of the grid axis `axis`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hypothesis {
    /// What it claims, in words.
    pub name: String,
    /// The metric.
    pub metric: HypothesisMetric,
    /// The grid axis whose options are compared (default `recovery.strategy`).
    #[serde(default = "strategy_axis")]
    pub axis: String,
    /// The option compared against.
    pub a: String,
    /// The option compared.
    pub b: String,
}

fn strategy_axis() -> String {
    "recovery.strategy".to_string()
}

fn yes() -> bool {
    true
}

/// A run's deliberate misbehaviour, for testing the campaign machinery and a site's timeout
/// settings (grid key `self_test`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SelfTest {
    /// Behave.
    None,
    /// Panic inside the run.
    Panic,
    /// Never finish.
    Hang,
    /// Abort the worker process.
    Abort,
}

/// One grid axis: a key and its options, each with a label for tables and file names.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The key: a run-configuration key (`model`, `recovery.strategy`, `fault.0.target`), an
    /// injection key (`inject.injection_tries`), `inject` (tables of injection keys set
    /// together), `workers_hit` or `self_test`.
    pub key: String,
    /// `(label, value)` per option.
    pub options: Vec<(String, toml::Value)>,
}

/// The most runs a campaign's grid may have. The grid is counted from its axes, seeds and
/// repetitions before anything is expanded, and a larger one is refused: every process lists
/// (a shard of) the grid, and its record, census and report hold up to one entry per run. A
/// listed run takes about 2.7 KB (a 1,000,000-run `--dry-run` took 76 s and 2.7 GB on the
/// 2-core machine), so the bound keeps the listing within the memory of any machine that could
/// run such a campaign (at a second per run, 1,000,000 runs are 12 days on one core).
pub const MAX_RUNS: u64 = 1_000_000;

/// A parsed, checked campaign file.
#[derive(Clone, Debug)]
pub struct Campaign {
    /// `[campaign]`.
    pub settings: Settings,
    /// `[base]`: the run configuration every run starts from.
    pub base: toml::Table,
    /// `[inject]`: the injector's keys for `restart` and `eval` runs.
    pub inject: toml::Table,
    /// `[grid]`, in key order.
    pub axes: Vec<Axis>,
    /// The file's text with `--set` overrides applied, as written to the campaign directory.
    pub text: String,
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Position in the grid (0-based).
    pub index: u64,
    /// Stable id: a hash of the coordinates, the seed and the repetition.
    pub id: String,
    /// `(axis key, option label)` per axis.
    pub coords: Vec<(String, String)>,
    /// Training seed.
    pub seed: u64,
    /// Repetition (0-based).
    pub rep: u64,
    /// Seed of this run's fault draws.
    pub fault_seed: u64,
    /// The resolved run configuration.
    pub config: RunConfig,
    /// The injection keys (`restart`, `eval`).
    pub inject: toml::Table,
    /// The same keys, validated (`restart`, `eval`; `None` for `train`).
    pub injector: Option<resilab_inject::Spec>,
    /// Workers (data-parallel replicas or stages) whose checkpoint files are altered.
    pub workers_hit: usize,
    /// Deliberate misbehaviour (tests).
    pub self_test: SelfTest,
    /// Key of the base run this run starts from (`restart`, `eval`) or of its golden run (`train`).
    pub base_key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    campaign: Settings,
    base: toml::Table,
    #[serde(default)]
    inject: toml::Table,
    #[serde(default)]
    grid: toml::Table,
}

fn label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => other.to_string(),
    }
}

fn hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// A run's coordinates, seed and repetition as one string: its id is hashed from it.
fn canonical(coords: &[(String, String)], seed: u64, rep: u64) -> String {
    format!("{}|seed={seed}|rep={rep}", coords.iter().map(|(k, l)| format!("{k}={l}")).collect::<Vec<_>>().join("|"))
}

/// Who a grid index's run is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridRun {
    /// Its id (`runs.csv`'s `id`).
    pub id: String,
    /// Its coordinates: axis key and option label, in axis order.
    pub coords: Vec<(String, String)>,
    /// Its training seed.
    pub seed: u64,
    /// Its repetition.
    pub rep: u64,
}

/// A run's stable id: the first 12 hex digits of its canonical string's hash.
/// The hypotheses name grid axes and their options, and `paired` names grid axes.
/// The "which strategy when" table's budgets: a catastrophe threshold of at least 0 points, a
/// catastrophe-rate budget in (0, 100] % and a golden floor in [0, 100] %.
fn check_budgets(s: &Settings) -> std::result::Result<(), String> {
    if !(s.catastrophe_points.is_finite() && s.catastrophe_points >= 0.0) {
        return Err(format!("campaign.catastrophe_points: must be a number of points >= 0, not {}", s.catastrophe_points));
    }
    if !(s.catastrophe_budget_pct > 0.0 && s.catastrophe_budget_pct <= 100.0) {
        return Err(format!("campaign.catastrophe_budget_pct: must lie in (0, 100], not {}", s.catastrophe_budget_pct));
    }
    if !(0.0..=100.0).contains(&s.golden_min_pct) {
        return Err(format!("campaign.golden_min_pct: must lie in [0, 100], not {}", s.golden_min_pct));
    }
    for (i, j) in s.jobs.iter().enumerate() {
        j.validate(&format!("campaign.job[{i}]"))?;
    }
    if !s.jobs.is_empty() && s.hypotheses.is_empty() {
        return Err("campaign.job: a job prices the \"which strategy when\" table, which needs [[campaign.hypothesis]]".into());
    }
    Ok(())
}

fn check_comparisons(s: &Settings, axes: &[Axis]) -> std::result::Result<(), String> {
    for (i, h) in s.hypotheses.iter().enumerate() {
        let Some(axis) = axes.iter().find(|a| a.key == h.axis) else {
            return Err(format!("campaign.hypothesis[{i}].axis: {:?} is not a grid axis", h.axis));
        };
        for (key, o) in [("a", &h.a), ("b", &h.b)] {
            if !axis.options.iter().any(|(l, _)| l == o) {
                let all: Vec<&str> = axis.options.iter().map(|(l, _)| l.as_str()).collect();
                return Err(format!("campaign.hypothesis[{i}].{key}: {o:?} is not an option of {} ({})", h.axis, all.join(", ")));
            }
        }
    }
    for (i, p) in s.paired.iter().flatten().enumerate() {
        if !axes.iter().any(|a| &a.key == p) {
            let all: Vec<&str> = axes.iter().map(|a| a.key.as_str()).collect();
            return Err(format!("campaign.paired[{i}]: {p:?} is not a grid axis ({})", all.join(", ")));
        }
    }
    Ok(())
}

/// A run's fault seed: the campaign's, hashed with the run's coordinates except those of the
/// paired axes, its training seed and its repetition. Runs that differ only in paired axes
/// draw the same faults.
fn group_fault_seed(s: &Settings, coords: &[(String, String)], seed: u64, rep: u64) -> u64 {
    let paired = s.paired_axes();
    let kept: Vec<(String, String)> = coords.iter().filter(|(k, _)| !paired.contains(k)).cloned().collect();
    xxhash_rust::xxh3::xxh3_64(format!("{}|{}", s.fault_seed, canonical(&kept, seed, rep)).as_bytes())
}

fn run_id(coords: &[(String, String)], seed: u64, rep: u64) -> String {
    hash(&canonical(coords, seed, rep))[..12].to_string()
}

impl Campaign {
    /// Reads a campaign file, applies `overrides` (`key=value`, e.g. `campaign.repetitions=250`
    /// or `grid.inject.injection_tries=[1, 10]`) and checks every run of the grid.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = resilab_limits::read_config("--config", path)?;
        let mut c = Self::parse(&text, overrides, &path.display().to_string())?;
        if c.settings.name.is_none() {
            c.settings.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            c.text = toml::to_string(&c.to_table())?;
        }
        Ok(c)
    }

    /// The campaign of a campaign directory, as run (its `campaign.toml`). A campaign with
    /// hypotheses whose file does not say which axes were paired predates paired faults: each of
    /// its runs drew its own faults, so it reads as `paired = []`.
    pub fn stored(dir: &Path) -> Result<Self> {
        let path = dir.join(crate::CAMPAIGN_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
        let origin = path.display().to_string();
        let mut table = toml_table(&text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        if let Some(toml::Value::Table(s)) = table.get_mut("campaign")
            && !s.contains_key("paired")
        {
            s.insert("paired".into(), toml::Value::Array(Vec::new()));
        }
        let mut c = Self::parse(&toml::to_string(&table).map_err(|e| Error::Config(format!("{origin}: {e}")))?, &[], &origin)?;
        c.text = text;
        Ok(c)
    }

    /// Parses campaign text; `origin` names it in errors.
    pub fn parse(text: &str, overrides: &[String], origin: &str) -> Result<Self> {
        let bad = |m: String| Error::Config(format!("{origin}: {m}"));
        let mut table = toml_table(text).map_err(|e| bad(e.to_string()))?;
        for o in overrides {
            resilab_runner::apply_override(&mut table, o).map_err(|e| bad(e.to_string()))?;
        }
        let file: File = toml_from_table(table).map_err(|e| match toml_from_str::<File>(text) {
            // The same error in the file alone: it has a line there.
            Err(f) if f.key == e.key && f.message == e.message => bad(f.to_string()),
            _ if overrides.is_empty() => bad(e.to_string()),
            _ => Error::Config(format!("{origin} (with --set overrides): {e}")),
        })?;
        let mut axes = Vec::new();
        for (key, v) in &file.grid {
            let options: Vec<(String, toml::Value)> = match v {
                toml::Value::Array(a) => a.iter().map(|x| (label(x), x.clone())).collect(),
                toml::Value::Table(t) => t.iter().map(|(k, x)| (k.clone(), x.clone())).collect(),
                _ => return Err(bad(format!("grid.{key}: expected a list of values or a table of named options"))),
            };
            if options.is_empty() {
                return Err(bad(format!("grid.{key}: no options")));
            }
            axes.push(Axis { key: key.clone(), options });
        }
        let s = &file.campaign;
        check_comparisons(s, &axes).map_err(bad)?;
        check_budgets(s).map_err(bad)?;
        if s.seeds.is_empty() {
            return Err(bad("campaign.seeds: give at least one seed".into()));
        }
        if s.repetitions == 0 {
            return Err(bad("campaign.repetitions: must be at least 1".into()));
        }
        if s.timeout_s.is_nan() || s.timeout_s <= 0.0 {
            return Err(bad("campaign.timeout_s: must be positive".into()));
        }
        match s.kind {
            Kind::Restart | Kind::Eval => {
                if s.base_steps.is_none_or(|n| n == 0) {
                    return Err(bad(format!(
                        "campaign.base_steps: a `{}` campaign needs the steps trained before the checkpoint (at least 1)",
                        s.kind.name()
                    )));
                }
                if s.kind == Kind::Restart && s.steps.is_none_or(|n| n == 0) {
                    return Err(bad("campaign.steps: a `restart` campaign needs the steps trained after the restart (at least 1)".into()));
                }
                if file.inject.is_empty() && !axes.iter().any(|a| a.key.starts_with("inject")) {
                    return Err(bad(format!(
                        "[inject]: a `{}` campaign needs the injector's keys (injection_tries, first_bit, ...)",
                        s.kind.name()
                    )));
                }
            }
            Kind::Train => {
                if let Some(a) = axes.iter().find(|a| a.key.starts_with("inject.") || a.key == "inject" || a.key == "workers_hit") {
                    return Err(bad(format!(
                        "grid.{}: only `restart` and `eval` campaigns alter checkpoints; a `train` campaign's faults are its [[fault]] entries",
                        a.key
                    )));
                }
            }
        }
        let mut c = Campaign { settings: file.campaign, base: file.base, inject: file.inject, axes, text: String::new() };
        // Written out, so that the campaign as run says which axes shared their faults.
        if c.settings.paired.is_none() && !c.settings.hypotheses.is_empty() {
            c.settings.paired = Some(c.settings.paired_axes());
        }
        c.size().map_err(bad)?;
        c.check(origin)?;
        c.text = toml::to_string(&c.to_table()).map_err(|e| bad(e.to_string()))?;
        Ok(c)
    }

    fn to_table(&self) -> toml::Table {
        let mut t = toml::Table::new();
        if let Ok(toml::Value::Table(s)) = toml::Value::try_from(&self.settings) {
            t.insert("campaign".into(), toml::Value::Table(s));
        }
        t.insert("base".into(), toml::Value::Table(self.base.clone()));
        t.insert("inject".into(), toml::Value::Table(self.inject.clone()));
        let mut grid = toml::Table::new();
        for a in &self.axes {
            let named = a.options.iter().any(|(l, v)| *l != label(v));
            let v = if named {
                toml::Value::Table(a.options.iter().cloned().collect())
            } else {
                toml::Value::Array(a.options.iter().map(|(_, v)| v.clone()).collect())
            };
            grid.insert(a.key.clone(), v);
        }
        t.insert("grid".into(), toml::Value::Table(grid));
        t
    }

    /// Resolves every distinct option once, so a bad key or value is reported before any run.
    fn check(&self, origin: &str) -> Result<()> {
        // Each option of each axis with the others at their first option.
        let mut probes = vec![vec![0usize; self.axes.len()]];
        for (i, a) in self.axes.iter().enumerate() {
            for j in 1..a.options.len() {
                let mut p = vec![0usize; self.axes.len()];
                p[i] = j;
                probes.push(p);
            }
        }
        for p in probes {
            self.resolve(&p, self.settings.seeds[0], 0).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        }
        Ok(())
    }

    /// The campaign's name.
    pub fn name(&self) -> String {
        self.settings.name.clone().unwrap_or_else(|| "campaign".into())
    }

    /// Runs in the whole grid: the product of the axes' lengths, the seeds and the repetitions,
    /// at most [`MAX_RUNS`] for a campaign that [`Campaign::parse`] accepted (saturating, never
    /// wrapping, for one changed since).
    pub fn len(&self) -> u64 {
        self.factors().iter().fold(1u64, |n, (_, k)| n.saturating_mul(*k))
    }

    /// Each factor of the grid's size with its length: the seeds, the repetitions, then each
    /// axis (its key quoted).
    fn factors(&self) -> Vec<(String, u64)> {
        let mut f = vec![("seeds".to_string(), self.settings.seeds.len() as u64), ("repetitions".to_string(), self.settings.repetitions)];
        f.extend(self.axes.iter().map(|a| (format!("{:?}", a.key), a.options.len() as u64)));
        f
    }

    /// The grid's size, counted from its factors with checked arithmetic before anything is
    /// expanded: an error naming each factor when it passes [`MAX_RUNS`].
    pub fn size(&self) -> std::result::Result<u64, String> {
        let factors = self.factors();
        let product = factors.iter().try_fold(1u128, |n, (_, k)| n.checked_mul(u128::from(*k)));
        match product.and_then(|p| u64::try_from(p).ok()).filter(|&p| p <= MAX_RUNS) {
            Some(p) => Ok(p),
            None => {
                let what = product.map_or_else(|| format!("more than {}", u128::MAX), |p| p.to_string());
                let parts: Vec<String> = factors.iter().map(|(name, k)| format!("{name} {k}")).collect();
                Err(format!(
                    "the grid has {what} runs ({}), more than {MAX_RUNS}: a campaign is at most {MAX_RUNS} runs; lower campaign.repetitions or an axis, or split the grid into several campaigns",
                    parts.join(" x ")
                ))
            }
        }
    }

    /// Whether the grid is empty (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The grid's column names: the axes' keys.
    pub fn axis_keys(&self) -> Vec<String> {
        self.axes.iter().map(|a| a.key.clone()).collect()
    }

    /// Run `index`. Repetitions vary slowest, then seeds, then the axes in key order (the last
    /// fastest), so a partly finished campaign has every cell with similar counts.
    pub fn run(&self, index: u64) -> Result<RunSpec> {
        let (choice, seed, rep) = self.decode(index)?;
        let mut spec = self.resolve(&choice, seed, rep).map_err(Error::Config)?;
        spec.index = index;
        Ok(spec)
    }

    /// Run `index`'s option of each axis, its seed and its repetition (mixed-radix decoding).
    fn decode(&self, index: u64) -> Result<(Vec<usize>, u64, u64)> {
        if index >= self.len() {
            return Err(Error::Config(format!("run {index} is beyond the grid's {} runs", self.len())));
        }
        let mut rest = index;
        let mut choice = vec![0usize; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            let n = a.options.len() as u64;
            choice[i] = (rest % n) as usize;
            rest /= n;
        }
        let seeds = self.settings.seeds.len() as u64;
        Ok((choice, self.settings.seeds[(rest % seeds) as usize], rest / seeds))
    }

    /// The run at grid index `index`; an error says when the index is outside the grid.
    pub fn run_at(&self, index: u64) -> std::result::Result<GridRun, String> {
        if index >= self.len() {
            return Err(format!(
                "grid index {index} is outside the grid, which has {} runs (0 to {})",
                self.len(),
                self.len().saturating_sub(1)
            ));
        }
        let (choice, seed, rep) = self.decode(index).map_err(|e| e.to_string())?;
        let coords: Vec<(String, String)> = self.axes.iter().zip(&choice).map(|(a, &j)| (a.key.clone(), a.options[j].0.clone())).collect();
        Ok(GridRun { id: run_id(&coords, seed, rep), coords, seed, rep })
    }

    fn resolve(&self, choice: &[usize], seed: u64, rep: u64) -> std::result::Result<RunSpec, String> {
        let mut point = GridPoint {
            table: self.base.clone(),
            inject: self.inject.clone(),
            workers_hit: 1,
            self_test: SelfTest::None,
            coords: Vec::new(),
        };
        for (a, &j) in self.axes.iter().zip(choice) {
            point.apply(a, j)?;
        }
        let GridPoint { mut table, inject, workers_hit, self_test, coords } = point;
        table.insert("seed".into(), toml::Value::Integer(i64::try_from(seed).map_err(|_| format!("campaign.seeds: {seed} is too large"))?));
        let s = &self.settings;
        if s.kind != Kind::Train {
            let total = s.base_steps.unwrap_or(0) + s.steps.unwrap_or(0);
            resilab_runner::set_value(&mut table, "train.steps", toml::Value::Integer(total as i64))?;
        }
        let where_ = match coords.is_empty() {
            true => "[base]".to_string(),
            false => format!("[base] with {}", coords.iter().map(|(k, l)| format!("{k} = {l}")).collect::<Vec<_>>().join(", ")),
        };
        let mut config = RunConfig::from_table(table, &where_).map_err(|e| e.to_string())?;
        config.name = Some(self.name());
        config.parallel.validate(config.train.batch_size).map_err(|e| format!("{where_}: {e}"))?;
        config.optimizer.validate().map_err(|e| format!("{where_}: {e}"))?;
        let (channels, size, classes) = config.data.shape();
        config.model.validate(resilab_models::InputShape { channels, size }, classes).map_err(|e| format!("{where_}: {e}"))?;
        let injector = self.check_faults(&config, &inject, workers_hit, &where_)?;
        let id = run_id(&coords, seed, rep);
        let fault_seed = group_fault_seed(s, &coords, seed, rep);
        config.fault_seed = if s.kind == Kind::Train { fault_seed } else { config.fault_seed };
        let base_key = match s.kind {
            Kind::Train => hash(&resilab_runner::golden::golden_config(&config).to_toml()),
            _ => hash(&format!("{}\n# base_steps = {:?}\n", config.to_toml(), s.base_steps)),
        };
        Ok(RunSpec { index: 0, id, coords, seed, rep, fault_seed, config, inject, injector, workers_hit, self_test, base_key })
    }

    /// The faults a run of `config` gets are valid: for a checkpoint-alteration campaign, the
    /// injector (returned) and the workers it hits; for a train campaign, the `[[fault]]`
    /// entries and their pipeline messages. `where_` names the grid point in errors.
    fn check_faults(
        &self,
        config: &RunConfig,
        inject: &toml::Table,
        workers_hit: usize,
        where_: &str,
    ) -> std::result::Result<Option<resilab_inject::Spec>, String> {
        if self.settings.kind == Kind::Train {
            let stages = (config.parallel.mode == resilab_train::ParallelMode::Pipeline).then_some(config.parallel.stages);
            resilab_faults::check_messages(config.faults.entries(), stages).map_err(|e| format!("{where_}: {e}"))?;
            resilab_faults::check_precision(config.faults.entries(), config.train.precision).map_err(|e| format!("{where_}: {e}"))?;
            return Ok(None);
        }
        let world = config.parallel.workers.max(config.parallel.stages).max(1);
        if workers_hit > world {
            return Err(format!("{where_}: workers_hit = {workers_hit} but the run has {world} worker(s)"));
        }
        let raw: resilab_inject::RawConfig = toml_from_table(inject.clone()).map_err(|mut e| {
            e.key = if e.key.is_empty() { "inject".into() } else { format!("inject.{}", e.key) };
            e.to_string()
        })?;
        Ok(Some(raw.validate().map_err(|e| format!("[inject] ({where_}): {e}"))?))
    }
}

/// One grid point as its axes' options set it: the run configuration's table, the injector's
/// keys, the workers hit, the self-test, and the `(axis, option)` coordinates.
struct GridPoint {
    table: toml::Table,
    inject: toml::Table,
    workers_hit: usize,
    self_test: SelfTest,
    coords: Vec<(String, String)>,
}

impl GridPoint {
    /// Applies option `j` of axis `a`.
    fn apply(&mut self, a: &Axis, j: usize) -> std::result::Result<(), String> {
        let (lab, v) = &a.options[j];
        self.coords.push((a.key.clone(), lab.clone()));
        let bad = |m: String| format!("grid.{} = {lab}: {m}", a.key);
        if a.key == "workers_hit" {
            self.workers_hit = v
                .as_integer()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad("expected a whole number of workers, at least 1".into()))?;
        } else if a.key == "self_test" {
            self.self_test = v.clone().try_into().map_err(|_| bad("expected none, panic, hang or abort".into()))?;
        } else if a.key == "inject" {
            let toml::Value::Table(t) = v else { return Err(bad("expected a table of injector keys".into())) };
            self.inject.extend(t.clone());
        } else if let Some(k) = a.key.strip_prefix("inject.") {
            resilab_runner::set_value(&mut self.inject, k, v.clone()).map_err(bad)?;
        } else if a.key == "seed" || a.key == "fault_seed" {
            return Err(bad("seeds are set by campaign.seeds and campaign.fault_seed".into()));
        } else {
            // An option table may carry `with`: other run-config keys this option sets
            // (a model's own learning rate, say), applied after the axis's own value.
            let mut v = v.clone();
            let with = match &mut v {
                toml::Value::Table(t) => t.remove("with"),
                _ => None,
            };
            resilab_runner::set_value(&mut self.table, &a.key, v).map_err(bad)?;
            if let Some(with) = with {
                let toml::Value::Table(w) = with else { return Err(bad("`with` must be a table of run-configuration keys".into())) };
                for (k, x) in w {
                    resilab_runner::set_value(&mut self.table, &k, x).map_err(|m| bad(format!("with.{k}: {m}")))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const SMALL: &str = r#"
[campaign]
kind = "restart"
seeds = [1, 2]
repetitions = 3
base_steps = 2
steps = 2

[base]
data = { source = "synthetic", train_size = 64, test_size = 32, image_size = 8 }
model = { arch = "resnet", depth = 8, width = 0.25 }
train = { batch_size = 16 }

[inject]
injection_tries = 1
float_precision = 32
locations_to_corrupt = ["model"]

[grid]
"inject.injection_tries" = [1, 10]
model = { resnet = { arch = "resnet" }, vgg = { arch = "vgg", depth = 11 } }
"#;

    #[test]
    fn grid_expands_with_stable_distinct_ids() {
        let c = Campaign::parse(SMALL, &[], "t").unwrap();
        assert_eq!(c.len(), 2 * 2 * 2 * 3);
        let runs: Vec<RunSpec> = (0..c.len()).map(|i| c.run(i).unwrap()).collect();
        let ids: std::collections::HashSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids.len(), runs.len());
        // Repetitions vary slowest, the last axis fastest.
        assert_eq!(runs[0].coords, vec![("inject.injection_tries".into(), "1".into()), ("model".into(), "resnet".into())]);
        assert_eq!(runs[1].coords[1].1, "vgg");
        assert_eq!(runs[1].config.model.label(), c.run(1).unwrap().config.model.label());
        assert!(runs[1].config.model.label().starts_with("vgg"));
        assert_eq!((runs[4].seed, runs[4].rep), (2, 0));
        assert_eq!((runs[8].seed, runs[8].rep), (1, 1));
        assert_eq!(runs[0].inject["injection_tries"].as_integer(), Some(1));
        assert_eq!(runs[2].inject["injection_tries"].as_integer(), Some(10));
        assert_eq!(runs[0].config.train.steps, Some(4));
        // Same base for both flip counts and every repetition; another for another seed or model.
        assert_eq!(runs[0].base_key, runs[2].base_key);
        assert_eq!(runs[0].base_key, runs[8].base_key);
        assert_ne!(runs[0].base_key, runs[4].base_key);
        assert_ne!(runs[0].base_key, runs[1].base_key);
        // Ids do not depend on the grid's other axes or on the order of the file.
        let more = SMALL.replace("[1, 10]", "[1, 10, 100]");
        let c2 = Campaign::parse(&more, &[], "t").unwrap();
        let ids2: std::collections::HashSet<String> = (0..c2.len()).map(|i| c2.run(i).unwrap().id).collect();
        assert!(ids.iter().all(|i| ids2.contains(*i)));
    }

    #[test]
    fn runs_that_differ_only_in_a_paired_axis_share_their_faults() {
        type Drawn = (Vec<(String, String)>, u64, u64, u64);
        let seeds = |text: &str| -> Vec<Drawn> {
            let c = Campaign::parse(text, &[], "t").unwrap();
            (0..c.len()).map(|i| c.run(i).unwrap()).map(|r| (r.coords, r.seed, r.rep, r.fault_seed)).collect()
        };
        let group = |coords: &[(String, String)]| coords.iter().filter(|(k, _)| k != "model").cloned().collect::<Vec<_>>();
        let paired = seeds(&SMALL.replace("steps = 2\n\n[base]", "steps = 2\npaired = [\"model\"]\n\n[base]"));
        for a in &paired {
            for b in &paired {
                let same_group = group(&a.0) == group(&b.0) && a.1 == b.1 && a.2 == b.2;
                assert_eq!(a.3 == b.3, same_group, "{a:?} against {b:?}");
            }
        }
        // Unpaired (the default without hypotheses): every run its own draw, as before pairing.
        let own = seeds(SMALL);
        let distinct: std::collections::HashSet<u64> = own.iter().map(|r| r.3).collect();
        assert_eq!(distinct.len(), own.len());
        // A hypothesis pairs its axis, and the campaign as run says so.
        let h = "steps = 2\n\n[[campaign.hypothesis]]\nname = \"x\"\nmetric = \"acc_loss\"\naxis = \"model\"\na = \"resnet\"\nb = \"vgg\"\n\n[base]";
        let with = Campaign::parse(&SMALL.replace("steps = 2\n\n[base]", h), &[], "t").unwrap();
        assert_eq!(with.settings.paired_axes(), ["model"]);
        assert!(with.text.contains("paired = [\"model\"]"), "{}", with.text);
        let e = Campaign::parse(&SMALL.replace("steps = 2\n\n[base]", "steps = 2\npaired = [\"modle\"]\n\n[base]"), &[], "c.toml");
        let e = e.unwrap_err().to_string();
        assert!(e.contains("campaign.paired[0]") && e.contains("modle") && e.contains("model"), "{e}");
    }

    #[test]
    fn an_option_sets_other_run_keys_with_with() {
        let c = Campaign::parse(
            &SMALL.replace(
                "vgg = { arch = \"vgg\", depth = 11 }",
                "vgg = { arch = \"vgg\", depth = 11, with = { \"optimizer.lr\" = 0.5, \"data.difficulty\" = 0.7 } }",
            ),
            &[],
            "t",
        )
        .unwrap();
        let (resnet, vgg) = (c.run(0).unwrap(), c.run(1).unwrap());
        assert_eq!(vgg.coords[1].1, "vgg");
        assert!(vgg.config.model.label().starts_with("vgg"));
        assert_eq!(vgg.config.optimizer.lr, 0.5);
        assert_ne!(resnet.config.optimizer.lr, 0.5, "only the option's own runs");
        let e = Campaign::parse(&SMALL.replace("depth = 11 }", "depth = 11, with = { \"optimizer.lrr\" = 0.5 } }"), &[], "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("model = vgg") && e.contains("lrr"), "{e}");
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let e = Campaign::parse(&SMALL.replace("arch = \"vgg\"", "arch = \"lenet\""), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("model = vgg") && e.contains("lenet"), "{e}");
        let e = Campaign::parse(&SMALL.replace("float_precision = 32", "float_precision = 12"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("[inject]") && e.contains("float_precision"), "{e}");
        let e = Campaign::parse(&SMALL.replace("steps = 2\n\n[base]", "\n[base]"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("campaign.steps"), "{e}");
        let e = Campaign::parse(&format!("{SMALL}workers_hit = [2]\n"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("workers_hit = 2") && e.contains("1 worker"), "{e}");
        let e = Campaign::parse(&SMALL.replace("repetitions = 3", "repetitons = 3"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("repetitons"), "{e}");
        let e = Campaign::parse(SMALL, &["grid.model.vgg.depth=12".into()], "c.toml").unwrap_err().to_string();
        assert!(e.contains("model = vgg"), "{e}");
    }

    #[test]
    fn the_tail_risk_settings_default_and_refuse_what_no_rate_can_be() {
        let c = Campaign::parse(SMALL, &[], "t").unwrap();
        let s = &c.settings;
        assert_eq!((s.catastrophe_points, s.catastrophe_budget_pct, s.golden_min_pct), (10.0, 10.0, 80.0));
        for (key, bad) in
            [("catastrophe_budget_pct", "0"), ("catastrophe_budget_pct", "101"), ("catastrophe_points", "-1"), ("golden_min_pct", "120")]
        {
            let e = Campaign::parse(SMALL, &[format!("campaign.{key}={bad}")], "c.toml").unwrap_err().to_string();
            assert!(e.contains(&format!("campaign.{key}: must")), "{key}={bad}: {e}");
        }
    }

    #[test]
    fn a_job_needs_hypotheses_and_names_its_bad_key() {
        let job = "\n[[campaign.job]]\nname = \"big\"\ngpus = 1024\nstep_s = 1.0\nfailures_per_1000_node_days = 3.8\n";
        let e = Campaign::parse(&format!("{SMALL}{job}"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("campaign.job") && e.contains("campaign.hypothesis"), "{e}");
        let e = Campaign::parse(&format!("{SMALL}{}", job.replace("gpus = 1024", "gpus = 0")), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("campaign.job[0].gpus"), "{e}");
        let e = Campaign::parse(&format!("{SMALL}{job}gpu_count = 3\n"), &[], "c.toml").unwrap_err().to_string();
        assert!(e.contains("gpu_count"), "{e}");
    }

    #[test]
    fn toml_errors_name_file_and_key_on_the_first_line() {
        let first = |e: Error| e.to_string().lines().next().unwrap_or_default().to_string();
        let e = first(Campaign::parse(&SMALL.replace("repetitions = 3", "repetitions = \"many\""), &[], "c.toml").unwrap_err());
        assert_eq!(e, "c.toml: campaign.repetitions: invalid type: string \"many\", expected u64 (line 5, column 15)");
        let e = first(Campaign::parse(&SMALL.replace("base_steps = 2", "base_steps = = 2"), &[], "c.toml").unwrap_err());
        assert!(e.starts_with("c.toml: ") && e.ends_with("(line 6, column 14)"), "{e}");
        let e = first(Campaign::parse(SMALL, &["campaign.repetitions=\"x\"".into()], "c.toml").unwrap_err());
        assert_eq!(e, "c.toml (with --set overrides): campaign.repetitions: invalid type: string \"x\", expected u64");
        let e = first(
            Campaign::parse(&SMALL.replace("train = { batch_size = 16 }", "train = { batch_size = \"big\" }"), &[], "c.toml").unwrap_err(),
        );
        assert!(e.starts_with("c.toml: [base]") && e.contains(": train.batch_size: invalid type: string \"big\""), "{e}");
        let e = first(
            Campaign::parse(&SMALL.replace("float_precision = 32", "float_precision = 32\nfirst_bit = \"one\""), &[], "c.toml")
                .unwrap_err(),
        );
        assert!(e.starts_with("c.toml: inject.first_bit: invalid type: string \"one\""), "{e}");
        // A campaign sets its runs' steps: a base that gives epochs trains those steps instead.
        let c = Campaign::parse(&SMALL.replace("train = { batch_size = 16 }", "train = { batch_size = 16, epochs = 3 }"), &[], "c.toml")
            .unwrap();
        let run = c.run(0).unwrap();
        assert_eq!((run.config.train.steps, run.config.train.epochs), (Some(4), None));
    }

    #[test]
    fn overrides_resize_the_grid() {
        let c =
            Campaign::parse(SMALL, &["campaign.repetitions=250".into(), "grid.\"inject.injection_tries\"=[1, 10, 100, 1000]".into()], "t")
                .unwrap();
        assert_eq!(c.len(), 4 * 2 * 2 * 250);
        // The written text parses to the same campaign.
        let again = Campaign::parse(&c.text, &[], "t").unwrap();
        assert_eq!(again.text, c.text);
        assert_eq!(again.run(77).unwrap().id, c.run(77).unwrap().id);
    }

    #[test]
    fn a_grid_is_counted_before_it_is_expanded_and_refused_above_the_bound() {
        let first = |over: &[&str]| {
            let over: Vec<String> = over.iter().map(|o| o.to_string()).collect();
            Campaign::parse(SMALL, &over, "c.toml").unwrap_err().to_string()
        };
        let e = first(&["campaign.repetitions=1000000000"]);
        assert_eq!(
            e.lines().next().unwrap(),
            "c.toml: the grid has 8000000000 runs (seeds 2 x repetitions 1000000000 x \"inject.injection_tries\" 2 x \"model\" 2), more than 1000000: a campaign is at most 1000000 runs; lower campaign.repetitions or an axis, or split the grid into several campaigns"
        );
        // Past what 64 bits hold: counted all the same, never wrapped.
        let e = first(&["campaign.repetitions=9223372036854775807"]);
        assert!(e.contains("the grid has 73786976294838206456 runs (seeds 2 x repetitions 9223372036854775807 x"), "{e}");
        // 2 seeds x 50 repetitions x 5000 x 2 options: 1,000,000, the most a grid may have.
        let long: Vec<String> = (1..=5000).map(|i| i.to_string()).collect();
        let axis = format!("grid.\"inject.injection_tries\"=[{}]", long.join(", "));
        let c = Campaign::parse(SMALL, &[axis.clone(), "campaign.repetitions=50".into()], "c.toml").unwrap();
        assert_eq!((c.len(), c.size()), (MAX_RUNS, Ok(MAX_RUNS)));
        let e = first(&[&axis, "campaign.repetitions=51"]);
        assert!(e.contains("the grid has 1020000 runs (seeds 2 x repetitions 51 x \"inject.injection_tries\" 5000 x \"model\" 2)"), "{e}");
        // A campaign changed after parsing never wraps its count.
        let mut c = Campaign::parse(SMALL, &[], "t").unwrap();
        c.settings.repetitions = u64::MAX;
        assert_eq!(c.len(), u64::MAX);
        assert!(c.run(u64::MAX - 1).is_ok() && c.size().is_err());
    }

    #[test]
    fn every_shipped_preset_parses_at_default_and_paper_size() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let dir = root.join("paper");
        let mut n = 0;
        let entries = std::fs::read_dir(&dir).unwrap().chain(std::fs::read_dir(root.join("campaign")).unwrap());
        for e in entries {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let c = Campaign::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
                assert!(!c.is_empty());
                for i in [0, c.len() - 1] {
                    c.run(i).unwrap_or_else(|e| panic!("{}: run {i}: {e}", path.display()));
                }
                n += 1;
            }
        }
        assert!(n >= 4, "only {n} presets in {}", dir.display());
    }

    #[test]
    fn a_campaign_file_that_cannot_be_read_is_a_file_error_naming_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        match Campaign::load(dir.path(), &[]) {
            Err(e @ Error::File(_)) => assert!(e.to_string().contains(&dir.path().display().to_string()), "{e}"),
            other => panic!("not a file error: {:?}", other.map(|_| ())),
        }
    }
}
