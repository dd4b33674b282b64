//! What determines the bits a run computes, beyond its configuration: the backend, the device
//! and, on the CPU, the processor model and the instruction-set level its kernels dispatch on
//! (`gemm` and the SIMD paths pick AVX-512, AVX2+FMA or SSE code at run time, and each sums in
//! a different order). Thread count does not enter: kernels are thread-independent. Golden runs
//! are cached under this key, and provenance records it, so that a run is only ever compared
//! with a golden run that computes the same bits.

/// The processor's model name (`/proc/cpuinfo`), or the architecture where that is unknown.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| model_in(&t)).unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The processor's model name in the text of `/proc/cpuinfo` (x86's `model name`, Arm's
/// `Model` or `cpu model`), its spaces collapsed.
fn model_in(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name") || l.starts_with("Model") || l.starts_with("cpu model"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
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
    key_of(backend, device, &cpu_model, &isa_level)
}

/// [`bits_key`] with the processor's model and ISA level asked of `model` and `isa` (only for a
/// CPU backend).
fn key_of(backend: &str, device: &str, model: &dyn Fn() -> String, isa: &dyn Fn() -> String) -> String {
    if backend == "wgpu" { format!("{backend} / {device}") } else { format!("{backend} / {device} / {} / {}", model(), isa()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_backends_are_keyed_by_processor_and_isa_and_gpus_by_device() {
        let (model, isa) = (|| "AMD EPYC 9B14 96-Core Processor".to_string(), || "x86-64-v3".to_string());
        assert_eq!(key_of("flex", "cpu", &model, &isa), "flex / cpu / AMD EPYC 9B14 96-Core Processor / x86-64-v3");
        assert_eq!(key_of("tch", "cpu", &model, &isa), "tch / cpu / AMD EPYC 9B14 96-Core Processor / x86-64-v3");
        let never = || -> String { panic!("a GPU key asks nothing of the CPU") };
        assert_eq!(key_of("wgpu", "NVIDIA H100 (Vulkan)", &never, &never), "wgpu / NVIDIA H100 (Vulkan)");
        assert_eq!(bits_key("flex", "cpu"), key_of("flex", "cpu", &cpu_model, &isa_level));
    }

    #[test]
    fn the_model_name_is_read_from_cpuinfo_on_x86_and_arm() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 17\nmodel name\t: AMD EPYC   9B14 96-Core Processor\n";
        assert_eq!(model_in(x86).as_deref(), Some("AMD EPYC 9B14 96-Core Processor"));
        assert_eq!(
            model_in("processor\t: 0\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n").as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert_eq!(model_in("processor\t: 0\nmodel name\t:   \n"), None);
        assert_eq!(model_in(""), None);
    }
}
