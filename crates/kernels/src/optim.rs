//! The optimizer updates of SGD (momentum, dampening, Nesterov, L2 weight decay) and Adam as one
//! pass over each parameter with its state, threaded over fixed runs of values.
//!
//! Each value goes through exactly the f32 operations of the tensor formulation
//! (`resilab_train::update`, PyTorch's `SGD` and `Adam`), in the same order, with no fused
//! multiply-add, so the bits equal those of the unfused update on Burn's CPU backend: the
//! hyper-parameters arrive as the f32 constants that formulation multiplies by (see
//! [`Sgd`] and [`Adam`]). Runs are independent, so the thread count changes nothing.

use rayon::prelude::*;

use crate::error::{Error, Kernel, check_len};
use crate::runs::{RUN, for_runs};
use crate::simd::vectorized;

/// SGD's constants, each the f32 that the tensor formulation's scalar operation uses (an f64
/// hyper-parameter cast to f32, or `1 - dampening` computed in f64 and then cast).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f32,
    /// Momentum; `None` when the configured momentum is 0 (no buffer).
    pub momentum: Option<f32>,
    /// `1 - dampening`; `None` when dampening is 0 (the gradient is added unscaled).
    pub keep: Option<f32>,
    /// L2 weight decay; `None` when the configured decay is 0 (not even `p * 0` is added).
    pub weight_decay: Option<f32>,
    /// Nesterov momentum.
    pub nesterov: bool,
}

/// Adam's constants for one step, as f32 (see [`Sgd`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// `beta1`.
    pub beta1: f32,
    /// `1 - beta1`.
    pub one_minus_beta1: f32,
    /// `beta2`.
    pub beta2: f32,
    /// `1 - beta2`.
    pub one_minus_beta2: f32,
    /// `1 - beta2^t`, the second moment's bias correction.
    pub correction2: f32,
    /// `lr / (1 - beta1^t)`, the step size with the first moment's bias correction.
    pub step_size: f32,
    /// Epsilon, added to the square root.
    pub eps: f32,
    /// L2 weight decay; `None` when the configured decay is 0.
    pub weight_decay: Option<f32>,
}

/// Whether a state buffer holds the previous step's value or is written for the first time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The buffers hold the previous step's values.
    Continue,
    /// The buffers are new: their contents are ignored and overwritten (the first update).
    First,
}

fn check(name: &'static str, got: usize, want: usize) -> Result<(), Error> {
    check_len(|| Kernel::Optimizer, name, got, want)
}

/// The constants of one SGD run, with every choice a const parameter so that the loop has no
/// branch and vectorises: `WD` adds weight decay, `MOM` keeps a momentum buffer, `FIRST`
/// writes it afresh, `KEEP` scales the gradient by `1 - dampening`, `NEST` is Nesterov.
#[derive(Clone, Copy)]
struct SgdRun {
    lr: f32,
    momentum: f32,
    keep: f32,
    decay: f32,
}

impl SgdRun {
    #[inline(always)]
    fn step<const WD: bool, const FIRST: bool, const KEEP: bool, const NEST: bool>(self, p: f32, g: f32, b: f32) -> (f32, f32) {
        let g = if WD { g + p * self.decay } else { g };
        let b = match (FIRST, KEEP) {
            (true, _) => g,
            (false, false) => b * self.momentum + g,
            (false, true) => b * self.momentum + g * self.keep,
        };
        let d = if NEST { g + b * self.momentum } else { b };
        (p - d * self.lr, b)
    }

    fn apply<const WD: bool, const FIRST: bool, const KEEP: bool, const NEST: bool>(self, p: &mut [f32], g: &[f32], b: &mut [f32]) {
        vectorized(
            #[inline(always)]
            || {
                for ((p, &g), b) in p.iter_mut().zip(g).zip(b.iter_mut()) {
                    (*p, *b) = self.step::<WD, FIRST, KEEP, NEST>(*p, g, *b);
                }
            },
        );
    }

    fn plain<const WD: bool>(self, p: &mut [f32], g: &[f32]) {
        vectorized(
            #[inline(always)]
            || {
                for (p, &g) in p.iter_mut().zip(g) {
                    let g = if WD { g + *p * self.decay } else { g };
                    *p -= g * self.lr;
                }
            },
        );
    }
}

/// One SGD update of `param` with gradient `grad`, and of its momentum buffer `buf` when
/// `s.momentum` is set (then `buf` must be given, of the parameter's length).
pub fn sgd(s: &Sgd, param: &mut [f32], grad: &[f32], buf: Option<&mut [f32]>, state: State) -> Result<(), Error> {
    let n = param.len();
    check("gradient", grad.len(), n)?;
    let run = SgdRun { lr: s.lr, momentum: s.momentum.unwrap_or(0.0), keep: s.keep.unwrap_or(1.0), decay: s.weight_decay.unwrap_or(0.0) };
    let wd = s.weight_decay.is_some();
    if s.momentum.is_none() {
        let f = if wd { SgdRun::plain::<true> } else { SgdRun::plain::<false> };
        for_runs(n, param.par_chunks_mut(RUN).zip(grad.par_chunks(RUN)), |(p, g)| f(run, p, g));
        return Ok(());
    }
    let Some(buf) = buf else {
        return Err(Error::Length { kernel: Kernel::Optimizer, name: "momentum buffer", got: 0, want: n });
    };
    check("momentum buffer", buf.len(), n)?;
    type Run = fn(SgdRun, &mut [f32], &[f32], &mut [f32]);
    macro_rules! pick {
        ($($wd:literal $first:literal $keep:literal $nest:literal),*) => {
            match (wd, state == State::First, s.keep.is_some(), s.nesterov) {
                $(($wd, $first, $keep, $nest) => SgdRun::apply::<$wd, $first, $keep, $nest> as Run,)*
            }
        };
    }
    let f = pick!(
        false false false false, false false false true, false false true false, false false true true,
        false true false false, false true false true, false true true false, false true true true,
        true false false false, true false false true, true false true false, true false true true,
        true true false false, true true false true, true true true false, true true true true
    );
    for_runs(n, param.par_chunks_mut(RUN).zip(grad.par_chunks(RUN)).zip(buf.par_chunks_mut(RUN)), |((p, g), b)| f(run, p, g, b));
    Ok(())
}

/// Adam's loop with its choices as const parameters (see [`SgdRun`]).
fn adam_run<const WD: bool, const FIRST: bool>(a: Adam, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let decay = a.weight_decay.unwrap_or(0.0);
    vectorized(
        #[inline(always)]
        || {
            for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                let g = if WD { g + *p * decay } else { g };
                let (gm, gv) = (g * a.one_minus_beta1, (g * g) * a.one_minus_beta2);
                (*m, *v) = if FIRST { (gm, gv) } else { (*m * a.beta1 + gm, *v * a.beta2 + gv) };
                let denom = (*v / a.correction2).sqrt() + a.eps;
                *p -= (*m / denom) * a.step_size;
            }
        },
    );
}

/// One Adam update of `param` with gradient `grad` and moments `m` (`exp_avg`) and `v`
/// (`exp_avg_sq`), all of the parameter's length.
pub fn adam(a: &Adam, param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32], state: State) -> Result<(), Error> {
    let n = param.len();
    check("gradient", grad.len(), n)?;
    check("exp_avg", m.len(), n)?;
    check("exp_avg_sq", v.len(), n)?;
    let f = match (a.weight_decay.is_some(), state == State::First) {
        (false, false) => adam_run::<false, false>,
        (false, true) => adam_run::<false, true>,
        (true, false) => adam_run::<true, false>,
        (true, true) => adam_run::<true, true>,
    };
    let moments = m.par_chunks_mut(RUN).zip(v.par_chunks_mut(RUN));
    for_runs(n, param.par_chunks_mut(RUN).zip(grad.par_chunks(RUN)).zip(moments), |((p, g), (m, v))| f(*a, p, g, m, v));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::THREADED_FROM;

    fn sgd_ref(s: &Sgd, p: &mut [f32], g: &[f32], b: &mut [f32], first: bool) {
        for i in 0..p.len() {
            let gi = s.weight_decay.map_or(g[i], |wd| g[i] + p[i] * wd);
            let Some(mom) = s.momentum else {
                p[i] -= gi * s.lr;
                continue;
            };
            b[i] = if first { gi } else { b[i] * mom + gi * s.keep.unwrap_or(1.0) };
            let d = if s.nesterov { gi + b[i] * mom } else { b[i] };
            p[i] -= d * s.lr;
        }
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    #[test]
    fn sgd_matches_the_scalar_definition_across_runs() {
        // Long enough to be threaded over several runs, with a short last run.
        let n = THREADED_FROM + 2 * RUN + 17;
        for s in [
            Sgd { lr: 0.1, momentum: None, keep: None, weight_decay: None, nesterov: false },
            Sgd { lr: 0.05, momentum: Some(0.9), keep: None, weight_decay: Some(5e-4), nesterov: false },
            Sgd { lr: 0.05, momentum: Some(0.9), keep: Some(0.75), weight_decay: None, nesterov: false },
            Sgd { lr: 0.05, momentum: Some(0.9), keep: None, weight_decay: Some(1e-3), nesterov: true },
        ] {
            let (mut p, g) = (values(n, 1), values(n, 2));
            let mut b = vec![0.0; n];
            let (mut p_ref, mut b_ref) = (p.clone(), vec![0.0; n]);
            for (step, first) in [(0, true), (1, false), (2, false)] {
                let g: Vec<f32> = g.iter().map(|v| v * (step + 1) as f32).collect();
                let buf = s.momentum.map(|_| &mut b[..]);
                sgd(&s, &mut p, &g, buf, if first { State::First } else { State::Continue }).unwrap();
                sgd_ref(&s, &mut p_ref, &g, &mut b_ref, first);
            }
            assert!(p.iter().zip(&p_ref).all(|(a, b)| a.to_bits() == b.to_bits()), "{s:?}");
            assert!(b.iter().zip(&b_ref).all(|(a, b)| a.to_bits() == b.to_bits()), "{s:?}");
        }
    }

    #[test]
    fn adam_matches_the_scalar_definition_and_passes_nan() {
        for n in [RUN + 5, THREADED_FROM + 5] {
            adam_case(n);
        }
    }

    fn adam_case(n: usize) {
        let (mut p, mut g) = (values(n, 3), values(n, 4));
        g[7] = f32::NAN;
        let (mut m, mut v) = (vec![9.0; n], vec![9.0; n]);
        let (b1, b2, lr, eps, wd) = (0.9f64, 0.999f64, 1e-3f64, 1e-8f64, 1e-4f64);
        let (mut pr, mut mr, mut vr) = (p.clone(), vec![0.0f32; n], vec![0.0f32; n]);
        for t in 1..=3 {
            let a = Adam {
                beta1: b1 as f32,
                one_minus_beta1: (1.0 - b1) as f32,
                beta2: b2 as f32,
                one_minus_beta2: (1.0 - b2) as f32,
                correction2: (1.0 - b2.powi(t)) as f32,
                step_size: (lr / (1.0 - b1.powi(t))) as f32,
                eps: eps as f32,
                weight_decay: Some(wd as f32),
            };
            let state = if t == 1 { State::First } else { State::Continue };
            adam(&a, &mut p, &g, &mut m, &mut v, state).unwrap();
            for i in 0..n {
                let gi = g[i] + pr[i] * (wd as f32);
                let (gm, gv) = (gi * a.one_minus_beta1, gi * gi * a.one_minus_beta2);
                mr[i] = if t == 1 { gm } else { mr[i] * a.beta1 + gm };
                vr[i] = if t == 1 { gv } else { vr[i] * a.beta2 + gv };
                pr[i] -= mr[i] / ((vr[i] / a.correction2).sqrt() + a.eps) * a.step_size;
            }
        }
        assert!(p[7].is_nan() && m[7].is_nan() && v[7].is_nan());
        assert!(p.iter().zip(&pr).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(m.iter().zip(&mr).chain(v.iter().zip(&vr)).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    #[test]
    fn buffers_of_the_wrong_length_are_refused() {
        let s = Sgd { lr: 0.1, momentum: Some(0.9), keep: None, weight_decay: None, nesterov: false };
        let mut p = vec![0.0; 4];
        assert!(sgd(&s, &mut p, &[0.0; 3], Some(&mut [0.0; 4]), State::First).is_err());
        assert!(sgd(&s, &mut p, &[0.0; 4], Some(&mut [0.0; 5]), State::First).is_err());
        assert!(sgd(&s, &mut p, &[0.0; 4], None, State::First).is_err());
        let a = Adam {
            beta1: 0.9,
            one_minus_beta1: 0.1,
            beta2: 0.99,
            one_minus_beta2: 0.01,
            correction2: 1.0,
            step_size: 1.0,
            eps: 1e-8,
            weight_decay: None,
        };
        assert!(adam(&a, &mut p, &[0.0; 4], &mut [0.0; 4], &mut [0.0; 3], State::First).is_err());
    }
}
