//! The presets under `results/paper/` (one `configs/paper/` campaign each), the published
//! table each reproduces, and the published trends its report is asked about.

/// A published trend, stated as one tested difference of a report's `comparisons.csv`: along
/// `axis`, option `b` against option `a`, on `metric`, in the direction of `sign`.
pub(super) struct Claim {
    /// The trend in words.
    pub(super) text: &'static str,
    /// The grid axis the two options are on (`inject.injection_tries`).
    pub(super) axis: &'static str,
    /// The first option.
    pub(super) a: &'static str,
    /// The second option.
    pub(super) b: &'static str,
    /// The metric's column (`nev_pct`).
    pub(super) metric: &'static str,
    /// The expected sign of `b - a`: 1 or -1.
    pub(super) sign: i8,
}

const fn claim(text: &'static str, axis: &'static str, a: &'static str, b: &'static str, metric: &'static str, sign: i8) -> Claim {
    Claim { text, axis, a, b, metric, sign }
}

/// A preset folder and what it reproduces.
pub(super) struct Preset {
    /// The folder under `results/paper/` (and the name of its `configs/paper/` file).
    pub(super) folder: &'static str,
    /// The published table or finding.
    pub(super) published: &'static str,
    /// What the campaign runs.
    pub(super) what: &'static str,
    /// The trends its report is asked about. A study states its own hypotheses in its
    /// campaign file, and a preset without claims lists the differences it shows.
    pub(super) claims: &'static [Claim],
}

/// Published N-EV ranges, percent: (flips, low, high).
pub(super) const PUBLISHED_NEV: [(&str, f64, f64); 2] = [("10", 2.8, 8.8), ("100", 12.8, 66.8)];

/// Table 1's trend with the number of flips.
const FLIPS: &[Claim] = &[
    claim("N-EV grows from 1 to 10 flips", "inject.injection_tries", "1", "10", "nev_pct", 1),
    claim("N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", 1),
    claim("N-EV grows from 100 to 1000 flips", "inject.injection_tries", "100", "1000", "nev_pct", 1),
];

/// The N-EV factor study's claims, at either continuation length.
const FACTOR_CLAIMS: &[Claim] = &[
    claim("the 64-bit view gives less N-EV than the 32-bit word", "inject", "32-bit word", "64-bit view", "nev_pct", -1),
    claim("allow_NaN_values = false gives less N-EV", "inject.allow_NaN_values", "true", "false", "nev_pct", -1),
    claim(
        "drawing over the whole file gives less N-EV than over model and optimizer state",
        "inject.use_random_locations",
        "false",
        "true",
        "nev_pct",
        -1,
    ),
];

/// Table 4's trends.
const ONE_FLIP: &[Claim] = &[
    claim(
        "RWC is lower after an optimizer-state flip than after a model flip",
        "inject.locations_to_corrupt",
        "model",
        "optimizer",
        "rwc_pct",
        -1,
    ),
    claim(
        "RWC on every replica is lower after an optimizer-state flip than after a model flip",
        "inject.locations_to_corrupt",
        "model",
        "optimizer",
        "rwc_all_pct",
        -1,
    ),
    claim(
        "an optimizer-state flip leaves the replicas diverged more often than a model flip",
        "inject.locations_to_corrupt",
        "model",
        "optimizer",
        "diverged_pct",
        1,
    ),
    claim(
        "Horovod's restart (parameters and optimizer state broadcast) leaves fewer diverged replicas than DDP's",
        "parallel.sync",
        "ddp",
        "horovod",
        "diverged_pct",
        -1,
    ),
];

const fn preset(folder: &'static str, published: &'static str, what: &'static str, claims: &'static [Claim]) -> Preset {
    Preset { folder, published, what, claims }
}

/// The presets, in the README's order.
pub(super) const PRESETS: &[Preset] = &[
    preset("nev", "table 1: N-EV vs flips x model", "N-EV after 1-1000 flips in a checkpoint, per model", FLIPS),
    preset("nev-paper", "table 1 at its published size", "Table 1 at 250 runs per cell", FLIPS),
    preset(
        "nev-factors",
        "table 1: which setting its N-EV came from",
        "precision x locations x allow_NaN_values x flips x model, 20-step continuation",
        FACTOR_CLAIMS,
    ),
    preset(
        "nev-factors-5ep",
        "table 1: which setting its N-EV came from",
        "the same factors, 400-step continuation (5 epochs)",
        FACTOR_CLAIMS,
    ),
    preset("bits", "table 1's finding: the critical bit", "one flip per evaluation, every bit position", &[]),
    preset(
        "precision",
        "table 2: 16- vs 32-bit",
        "N-EV at 16 and 32 bits per flip count and model",
        &[claim("32-bit flips give more N-EV than 16-bit ones", "inject", "f16", "f32", "nev_pct", 1)],
    ),
    preset(
        "masks",
        "table 3: multi-bit masks",
        "accuracy and N-EV after multi-bit masks",
        &[claim(
            "masks with more bits set cost more accuracy (the published runs do not show it)",
            "inject.bit_mask",
            "3:10001010",
            "6:11101101",
            "acc_all_pct",
            -1,
        )],
    ),
    preset("dp-one-flip", "table 4: one flip in 1 of 8 workers", "RWC after one flip in one replica's model or optimizer state", ONE_FLIP),
    preset("dp-one-flip-paper", "table 4 at its published size", "Table 4 at 180 runs per row (campaign.repetitions=60)", ONE_FLIP),
    preset(
        "dp-many-flips",
        "table 5: many flips in k of 8 workers",
        "N-EV and accuracy after 1-100 flips in 1-8 replicas",
        &[
            claim("N-EV grows from 1 to 10 flips", "inject.injection_tries", "1", "10", "nev_pct", 1),
            claim("N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", 1),
            claim("N-EV grows from 1 to 8 workers hit", "workers_hit", "1", "8", "nev_pct", 1),
            claim(
                "model flips cost more accuracy than optimizer-state flips",
                "inject.locations_to_corrupt",
                "model",
                "optimizer",
                "acc_loss_all_pts",
                -1,
            ),
        ],
    ),
    // Studies: their hypotheses are stated in their campaign files and tested by the report.
    preset(
        "recovery",
        "section 6: recovery strategies (CCGrid'22)",
        "which strategy when: strategy x job MTBF x workers x checkpoint interval",
        &[],
    ),
    preset(
        "permanent-loss",
        "MaTEx-Caffe / ULFM (\"What does fault tolerant Deep Learning need from MPI?\"): shrink vs Reinit",
        "which policy after permanent loss: 0, 1, 2, 4 of 16 workers x respawn, reinit, shrink (two batch rules)",
        &[],
    ),
    preset("pipeline", "none (resilab's own)", "faults in each stage's weights, optimizer state, activations and gradient messages", &[]),
    preset(
        "precision-training",
        "none (resilab's own): what fp16's loss scaling masks",
        "one flip in float32, bf16 and fp16 training: gradients, weight copy, activations x sign, exponent, mantissa",
        &[],
    ),
    preset(
        "detectors",
        "He et al. (ISCA 2023): outcome classes; detectors scored by recall, false alarms, latency, cost",
        "one flip in weights, gradients, optimizer state or activations x sign, exponent top, other exponent, mantissa bits; every detector swept from recorded signals",
        &[],
    ),
];

/// The N-EV factor study at the short continuation and at the long one, compared by the
/// pooled and the paired sections.
pub(super) const FACTORS_SHORT: &str = "nev-factors";
/// See [`FACTORS_SHORT`].
pub(super) const FACTORS_LONG: &str = "nev-factors-5ep";
