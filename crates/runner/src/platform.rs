//! What determines the bits a run computes, beyond its configuration: the backend, the device
//! and, on the CPU, the processor model and the instruction-set level its kernels dispatch on
//! (`gemm` and the SIMD paths pick AVX-512, AVX2+FMA or SSE code at run time, and each sums in
//! a different order). Thread count does not enter: kernels are thread-independent. Golden runs
//! are cached under this key, and provenance records it, so that a run is only ever compared
//! with a golden run that computes the same bits.

/// The processor's model name (`/proc/cpuinfo`), or the architecture where that is unknown.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model") || l.starts_with("cpu model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The instruction-set level the CPU kernels can use: `x86-64-v4` (AVX-512), `x86-64-v3`
/// (AVX2, FMA), `x86-64-v2` (SSE4.2) or `x86-64`; on other architectures the architecture and
/// its SIMD extension (`aarch64+neon`). On an AVX-512 CPU whose GEMMs run AVX-512
/// micro-kernels (a build with the `avx512` feature, the default) it reads `x86-64-v4, AVX-512
/// GEMM`: those GEMMs sum in another order than the AVX2 ones, which builds without the
/// feature run, as did every build before 2026-11-25 (keyed `x86-64-v4`).
pub fn isa_level() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v2 = has!("sse4.2") && has!("popcnt") && has!("ssse3");
        let v3 = v2 && has!("avx2") && has!("fma") && has!("bmi1") && has!("bmi2") && has!("f16c") && has!("lzcnt") && has!("movbe");
        let v4 = v3 && has!("avx512f") && has!("avx512bw") && has!("avx512cd") && has!("avx512dq") && has!("avx512vl");
        match (v4, v3, v2) {
            (true, _, _) if resilab_models::kernels::gemm_uses_avx512() => "x86-64-v4, AVX-512 GEMM".into(),
            (true, _, _) => "x86-64-v4".into(),
            (_, true, _) => "x86-64-v3".into(),
            (_, _, true) => "x86-64-v2".into(),
            _ => "x86-64".into(),
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") { "aarch64+neon".into() } else { "aarch64".into() }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// The CPU's nominal f32 peak in GFLOP/s on `cores` cores: the clock `/proc/cpuinfo` lists
/// times the f32 FLOPs one core can retire per cycle with two FMA units (64 with AVX-512, 32
/// with AVX2 and FMA, 8 otherwise). Turbo and AVX-512 frequency limits move the real figure
/// either way. `None` where the clock is not listed.
pub fn peak_gflops(cores: usize) -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info.lines().find(|l| l.starts_with("cpu MHz"))?.split_once(':')?.1.trim().parse().ok()?;
    let level = isa_level();
    let per_cycle = if level.starts_with("x86-64-v4") {
        64.0
    } else if level == "x86-64-v3" {
        32.0
    } else {
        8.0
    };
    Some(cores as f64 * mhz / 1e3 * per_cycle)
}

/// The key of the bits a run on `backend` and `device` computes: `backend / device`, and on
/// a CPU backend (every backend but `wgpu`) also `/ cpu model / isa level`.
pub fn bits_key(backend: &str, device: &str) -> String {
    if backend == "wgpu" { format!("{backend} / {device}") } else { format!("{backend} / {device} / {} / {}", cpu_model(), isa_level()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_backends_are_keyed_by_processor_and_isa_and_gpus_by_device() {
        let k = bits_key("flex", "cpu");
        assert!(k.starts_with("flex / cpu / ") && k.ends_with(&isa_level()), "{k}");
        assert!(k.contains(&cpu_model()));
        assert_eq!(bits_key("wgpu", "NVIDIA H100 (Vulkan)"), "wgpu / NVIDIA H100 (Vulkan)");
        assert!(!cpu_model().is_empty() && !isa_level().is_empty());
        assert_eq!(bits_key("flex", "cpu"), k, "stable within a process");
    }
}
