//! The binary's edge: the one place that picks a backend (device and kernels), sizes the
//! thread pools, records provenance, and guards reads of HDF5 files with a child process.

use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use resilab_models::Compute;
use resilab_runner::{BackendKind, Provenance};

use crate::cli::{BenchCommand, Command, ComputeArgs};

/// Picks the device and kernels for a backend, always explicitly (with the wgpu feature on, Burn's
/// `Device::default()` would prefer wgpu): the only place that knows which backends exist.
pub(crate) fn device_for(kind: BackendKind, compute: &ComputeArgs) -> Result<(Compute, String)> {
    let (device, name) = match kind {
        BackendKind::Flex => (Device::flex(), "cpu (flex)".to_string()),
        BackendKind::Native => {
            return Ok((Compute::native(), format!("cpu (flex + resilab kernels r{})", resilab_models::kernels::NUMERICS)));
        }
        BackendKind::Ndarray => ndarray_device()?,
        BackendKind::Wgpu => wgpu_device(&compute.wgpu_device)?,
        BackendKind::Tch => tch_device()?,
    };
    Ok((Compute::burn(device), name))
}

/// Burn's ndarray CPU device: burn-ndarray is deprecated by Burn 0.22 in favour of flex; the
/// product keeps it selectable (the `ndarray` feature, off by default).
#[cfg(feature = "ndarray")]
#[allow(deprecated)]
pub(crate) fn ndarray_device() -> Result<(Device, String)> {
    Ok((Device::ndarray(), "cpu (ndarray)".to_string()))
}

#[cfg(not(feature = "ndarray"))]
pub(crate) fn ndarray_device() -> Result<(Device, String)> {
    bail!(
        "this resilab binary was built without the ndarray backend (Burn 0.22 deprecates it); rebuild it \
         with `cargo build --release --features ndarray`, or use --backend native or flex"
    )
}

/// LibTorch's CPU device (burn-tch is deprecated by Burn 0.22, like ndarray).
#[cfg(feature = "tch")]
#[allow(deprecated)]
pub(crate) fn tch_device() -> Result<(Device, String)> {
    Ok((Device::libtorch(), "cpu (libtorch)".to_string()))
}

#[cfg(not(feature = "tch"))]
pub(crate) fn tch_device() -> Result<(Device, String)> {
    bail!(
        "this resilab binary was built without the tch (LibTorch) backend; rebuild it with \
         `bash scripts/with-tch.sh cargo build --release --features tch` (installs PyTorch 2.9.0's \
         libtorch into a virtual environment first; see the README's Backends section)"
    )
}

/// Brings up the wgpu adapter `selector` names, failing with an error (not a panic) when
/// there is none; the name says which adapter and graphics API it is.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_device(selector: &str) -> Result<(Device, String)> {
    use burn::tensor::DeviceKind;
    let (kind_name, index) = match selector.split_once(':') {
        Some((k, n)) => (
            k,
            Some(n.parse::<usize>().map_err(|_| anyhow::anyhow!("--wgpu-device {selector}: the adapter index must be a whole number"))?),
        ),
        None => (selector, None),
    };
    let kind = match (kind_name, index) {
        ("default", None) => DeviceKind::DefaultDevice,
        ("cpu", None) => DeviceKind::Cpu,
        ("discrete", n) => DeviceKind::DiscreteGpu(n.unwrap_or(0)),
        ("integrated", n) => DeviceKind::IntegratedGpu(n.unwrap_or(0)),
        ("virtual", n) => DeviceKind::VirtualGpu(n.unwrap_or(0)),
        _ => bail!("--wgpu-device {selector}: expected default, discrete[:N], integrated[:N], virtual[:N] or cpu"),
    };
    let (device, setup) = Device::wgpu_options().device_kind(kind).init_with_setup().map_err(|e| {
        anyhow::anyhow!(
            "no usable wgpu adapter for --wgpu-device {selector}: {e}. A GPU needs its Vulkan (or Metal, \
             DX12) driver; without a GPU, Debian's software Vulkan works: \
             `apt-get install mesa-vulkan-drivers libvulkan1`. Or use --backend flex."
        )
    })?;
    let info = setup.adapter.get_info();
    Ok((device, format!("wgpu: {} ({:?}, {:?})", info.name, info.backend, info.device_type)))
}

#[cfg(not(feature = "wgpu"))]
pub(crate) fn wgpu_device(_selector: &str) -> Result<(Device, String)> {
    bail!(
        "this resilab binary was built without the wgpu backend; rebuild it with \
         `cargo build --release --features wgpu` (or run `cargo run --release --features wgpu -- ...`)"
    )
}

/// The `--threads` a command asks for (`None`: all cores, or a command that does not compute).
pub(crate) fn requested_threads(command: &Command) -> Option<usize> {
    match command {
        Command::Train(a) => a.compute.threads,
        Command::Compare(a) => a.train.compute.threads,
        Command::Eval(a) => a.compute.threads,
        // A campaign's own process only starts worker processes (each sized by --threads), but
        // --dry-run times training steps itself.
        Command::Campaign(a) if a.dry_run => Some(a.threads),
        Command::CampaignWorker(a) => a.compute.threads,
        Command::Bench(BenchCommand::Train(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Checkpoint(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Parallel(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Detect(a)) => a.compute.threads,
        Command::Bench(BenchCommand::Precision(a)) => a.compute.threads,
        _ => None,
    }
}

/// Sizes the global CPU thread pool (before anything uses it) and libtorch's.
pub(crate) fn set_threads(threads: Option<usize>) -> Result<()> {
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new().num_threads(n).build_global().context("could not configure the CPU thread pool")?;
    }
    // libtorch keeps its own (OpenMP) thread pool: give it the same count.
    #[cfg(feature = "tch")]
    tch::set_num_threads(i32::try_from(rayon::current_num_threads()).context("--threads is too large")?);
    Ok(())
}

pub(crate) fn provenance(backend: BackendKind, device: &str, threads: usize, seed: u64) -> Provenance {
    Provenance {
        resilab_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: env!("RESILAB_GIT_REVISION").to_string(),
        backend: backend.name().to_string(),
        device: device.to_string(),
        cpu: resilab_runner::platform::cpu_model(),
        isa: resilab_runner::platform::isa_level(),
        threads,
        seed,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    }
}

/// Reads `file` completely in a child process first (see `resilab_checkpoint::probe`): a crash
/// or hang of the HDF5 library on a corrupt file becomes an error naming the file.
pub(crate) fn probe_in_child(file: &Path) -> resilab_checkpoint::Result<()> {
    resilab_checkpoint::probe::ChildProbe::current()?.check(file)
}

/// Writes to stdout; a closed pipe (`resilab inspect ... | head`) is not an error.
pub(crate) fn print_all(text: &str) -> Result<()> {
    use std::io::Write as _;
    // Names read from a file (datasets, attributes) are printed, never obeyed by the terminal.
    let text = resilab_text::terminal_lines(text);
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
