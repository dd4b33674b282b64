//! Runtime instruction-set dispatch for the kernels' own loops (im2col, col2im, BatchNorm).
//!
//! The crate is compiled for the baseline x86-64 (SSE2); [`vectorized`] runs a closure compiled
//! again for the widest instruction set the CPU has (AVX-512, or AVX2 with FMA), through pulp's
//! dispatch, so the loops inlined into it use that width. Rust never contracts `a * b + c` into
//! a fused multiply-add and the reductions below add in a fixed order, so every instruction set
//! gives the same bits.

/// Lanes of the fixed-order f64 sums (one 512-bit register of f64).
pub(crate) const LANES: usize = 8;

/// Runs `f` compiled for the best instruction set this CPU supports.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// `K` fixed-order f64 sums: value `i` of every slice added goes to lane `i % LANES`, and the
/// lanes are added in order at the end, so each total depends only on the values and the
/// slices' lengths, never on the instruction set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sums<const K: usize>([[f64; LANES]; K]);

impl<const K: usize> Default for Sums<K> {
    fn default() -> Self {
        Self([[0.0; LANES]; K])
    }
}

impl<const K: usize> Sums<K> {
    /// Adds the `K` terms `f(a)` gives for each run of [`LANES`] values of `a` (the last run
    /// padded with zeros, whose terms are dropped).
    #[inline(always)]
    pub(crate) fn add(&mut self, a: &[f32], f: impl Fn([f32; LANES]) -> [[f64; LANES]; K]) {
        self.add3(a, a, a, |a, _, _| f(a));
    }

    /// As [`Self::add`], over three slices of one length read side by side.
    ///
    /// # Panics
    /// When the slices' lengths differ.
    #[inline(always)]
    pub(crate) fn add3(
        &mut self,
        a: &[f32],
        b: &[f32],
        c: &[f32],
        f: impl Fn([f32; LANES], [f32; LANES], [f32; LANES]) -> [[f64; LANES]; K],
    ) {
        assert!(a.len() == b.len() && a.len() == c.len(), "slices of different lengths");
        let ((ca, ra), (cb, rb), (cc, rc)) = (a.as_chunks::<LANES>(), b.as_chunks::<LANES>(), c.as_chunks::<LANES>());
        for ((a, b), c) in ca.iter().zip(cb).zip(cc) {
            self.lanes(f(*a, *b, *c), LANES);
        }
        let pad = |r: &[f32]| std::array::from_fn(|l| r.get(l).copied().unwrap_or(0.0));
        self.lanes(f(pad(ra), pad(rb), pad(rc)), ra.len());
    }

    /// Adds the first `n` lanes of each term.
    #[inline(always)]
    fn lanes(&mut self, terms: [[f64; LANES]; K], n: usize) {
        for (acc, t) in self.0.iter_mut().zip(terms) {
            for (a, v) in acc.iter_mut().zip(t).take(n) {
                *a += v;
            }
        }
    }

    /// The totals, each added in lane order.
    #[inline(always)]
    pub(crate) fn totals(&self) -> [f64; K] {
        self.0.map(|lanes| lanes.iter().fold(0.0, |a, &b| a + b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_goes_to_its_lane_and_the_lanes_add_in_order() {
        // Lane 0's small values vanish next to 1e17; a running sum cancels the two first.
        let v: Vec<f32> = (0..37u8).map(|i| [1e17, -1e17].get(usize::from(i)).copied().unwrap_or(0.1 * f32::from(i))).collect();
        let u: Vec<f32> = (1..10u8).map(|i| 0.1 * f32::from(i)).collect();
        let run = || {
            let mut s = Sums::<2>::default();
            s.add(&v, |x| [x.map(f64::from), [1.0; LANES]]);
            s.add3(&u[..3], &u[3..6], &u[6..9], |a, b, c| [std::array::from_fn(|l| f64::from(a[l] * b[l])), c.map(f64::from)]);
            s.totals()
        };
        let mut lanes = [[0f64; LANES]; 2];
        for (i, &x) in v.iter().enumerate() {
            lanes[0][i % LANES] += f64::from(x);
            lanes[1][i % LANES] += 1.0;
        }
        for i in 0..3 {
            lanes[0][i] += f64::from(u[i] * u[3 + i]);
            lanes[1][i] += f64::from(u[6 + i]);
        }
        let want = lanes.map(|l| l.iter().fold(0.0, |a, &b| a + b).to_bits());
        assert_eq!(run().map(f64::to_bits), want);
        assert_eq!(vectorized(run).map(f64::to_bits), want);
        // A plain running sum of the same terms gives other bits, so the test can tell.
        let plain = v.iter().map(|&x| f64::from(x)).chain((0..3).map(|i| f64::from(u[i] * u[3 + i]))).fold(0.0, |a, b| a + b);
        assert_ne!(plain.to_bits(), want[0]);
    }
}
