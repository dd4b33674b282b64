//! What each part of the README gives: its text and its row of the summary table, and how
//! a claim's comparisons came out.

/// One section of the README and its row of the summary table.
pub(super) struct Section {
    pub(super) text: String,
    pub(super) summary: Summary,
}

/// A row of the summary table.
pub(super) struct Summary {
    /// The preset (or `<preset> (pooled)`, `<a> vs <b>`): its first word names the folder.
    pub(super) name: String,
    pub(super) published: String,
    pub(super) runs: String,
    /// (claim, verdict) pairs.
    pub(super) verdicts: Vec<(String, String)>,
}

/// How the comparisons behind a claim came out: `shown` in the expected direction and
/// `against` it, of `of`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) shown: usize,
    pub(super) against: usize,
    pub(super) of: usize,
}

impl Tally {
    /// The claim's verdict: "contradicted (k of n)" when one comparison is shown in the
    /// opposite direction, otherwise "shown" when all of them are shown ("shown (n of n)" for
    /// more than one), "partly (k of n)" when some are, "not shown (0 of n)" when none is.
    pub(super) fn verdict(self) -> String {
        if self.of == 1 && self.shown == 1 && self.against == 0 { "shown".to_string() } else { self.counted() }
    }

    /// [`Tally::verdict`] with the counts always written ("shown (1 of 1)").
    pub(super) fn counted(self) -> String {
        let Self { shown, against, of } = self;
        if against > 0 {
            format!("contradicted ({against} of {of})")
        } else if shown == of {
            format!("shown ({shown} of {of})")
        } else if shown > 0 {
            format!("partly ({shown} of {of})")
        } else {
            format!("not shown (0 of {of})")
        }
    }
}
