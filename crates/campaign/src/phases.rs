//! Where a run's wall time goes: its phases in order, recorded in `runs.csv`'s `phase_s`
//! column as `name:seconds` items joined by `;` (`bench/campaign_summary.py` sums them by
//! phase). Timing only: no result depends on it.

use std::time::Instant;

/// The phases of one run timed so far.
pub(crate) struct Phases {
    last: Instant,
    done: Vec<(&'static str, f64)>,
}

impl Phases {
    /// Starts the clock of the first phase.
    pub(crate) fn start() -> Self {
        Self { last: Instant::now(), done: Vec::new() }
    }

    /// Ends the phase `name` now (the time since the previous mark) and starts the next.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push((name, now.duration_since(self.last).as_secs_f64()));
        self.last = now;
    }

    /// The column's text: `copy:0.0012;inject:0.0301;...`, in microseconds' precision.
    pub(crate) fn text(&self) -> String {
        self.done.iter().map(|(n, s)| format!("{n}:{s:.6}")).collect::<Vec<_>>().join(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_listed_in_order_and_add_up_to_the_elapsed_time() {
        let t0 = Instant::now();
        let mut p = Phases::start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        p.mark("first");
        p.mark("second");
        let total = t0.elapsed().as_secs_f64();
        let text = p.text();
        let items: Vec<(&str, f64)> = text.split(';').map(|i| i.split_once(':').map(|(n, s)| (n, s.parse().unwrap())).unwrap()).collect();
        assert_eq!(items.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["first", "second"]);
        assert!(items[0].1 >= 0.02 && items[0].1 > items[1].1, "{text}");
        assert!(items.iter().map(|(_, s)| s).sum::<f64>() <= total + 1e-6, "{text}");
    }
}
