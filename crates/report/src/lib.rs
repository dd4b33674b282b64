//! Reports of campaigns: per grid cell, the metrics of the soft-error studies (ACC, STD, CV,
//! NaN, N-EV, RWC, AccR, TF, accuracy loss, time overhead, lost and recomputed steps,
//! detection latency) with the Wilson 95% interval of each share, as `cells.csv` and
//! `report.md`; every pairwise difference with its own test in `comparisons.csv`; and plots in
//! PNG and SVG under `plots/`.

mod breakeven;
mod campaign;
mod choice;
pub mod compare;
mod curves;
mod detector_report;
pub mod detectors;
mod error;
mod fields;
mod figures;
mod files;
mod format;
pub mod job;
mod jobs;
mod md;
mod measures;
pub mod metrics;
mod outcomes;
mod paper;
pub mod plots;
mod power;
pub mod price;
mod rows;
pub mod stats;
pub mod study;

pub use campaign::{report, report_priced, report_with};
pub use compare::{Comparison, MIN_SEEDS, comparisons};
pub use detectors::DetectorOptions;
pub use error::{Error, Result};
pub use files::Written;
pub use jobs::read_jobs;
pub use metrics::{ACC_EPS, Cell, Class, Share, cells, classify, margin};
pub use paper::{paper_readme, write_paper_readme};
pub use plots::{Bars, Facets, Interval, LineChart, Pareto, ParetoPoint, Plot, Scatter, Series, save};
pub use power::power;
pub use rows::csv_columns;
