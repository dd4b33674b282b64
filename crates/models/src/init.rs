//! Deterministic, backend-independent parameter initialisation.
//!
//! Every parameter draws from its own ChaCha8 stream seeded by the run seed and the parameter's
//! name, on the host, so the same seed gives the same initial weights on every backend, and
//! adding a layer leaves the others' initial values unchanged. Rules (PyTorch-like, He for
//! ReLU convolutions):
//! - convolution weight: uniform in ±sqrt(6 / fan_in); convolution bias: 0
//! - linear weight and bias: uniform in ±1/sqrt(fan_in) (PyTorch's `nn.Linear` default)
//! - BatchNorm: weight 1, bias 0, running mean 0, running variance 1

use burn::prelude::*;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::naming::{LayerKind, map_params};
use crate::net::Net;

/// A 64-bit FNV-1a hash of a name, mixed with a seed (SplitMix64 finaliser): stable across
/// platforms and releases, unlike `std`'s hasher.
pub fn stream_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, bound: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = (rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32);
            (2.0 * u - 1.0) * bound
        })
        .collect()
}

/// Initialises every parameter of `net` from `seed`.
pub fn init_parameters(net: Net, seed: u64, device: &Device) -> Net {
    // A Linear bias has shape [out]; its fan-in is that of the weight visited just before it.
    let mut linear_fan_in = 1usize;
    map_params(net, |info, _| {
        let fan_in: usize = info.shape.iter().skip(1).product::<usize>().max(1);
        let leaf = info.name.rsplit('.').next().unwrap_or_default();
        let mut rng = ChaCha8Rng::seed_from_u64(stream_seed(seed, &info.name));
        let values = match (info.kind, leaf) {
            (LayerKind::Conv, "weight") => uniform(&mut rng, info.numel(), (6.0 / fan_in as f32).sqrt()),
            (LayerKind::Conv, _) => vec![0.0; info.numel()],
            (LayerKind::Linear, leaf) => {
                if leaf == "weight" {
                    linear_fan_in = fan_in;
                }
                uniform(&mut rng, info.numel(), 1.0 / (linear_fan_in as f32).sqrt())
            }
            (LayerKind::BatchNorm, _) => return None,
        };
        Some(Tensor::from_data(TensorData::new(values, [info.numel()]), device))
    })
}
