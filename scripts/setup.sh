#!/usr/bin/env bash
# Installs what building resilab needs beyond Rust: cmake >= 3.26, with which the build compiles
# the bundled HDF5 C library (the default `hdf5-static` feature; from PyPI into a virtual
# environment, $RESILAB_CMAKE_VENV or ~/.cache/resilab/cmake-venv, linked as /usr/local/bin/cmake),
# and Debian's HDF5 library and tools (libhdf5-dev for builds with --no-default-features,
# hdf5-tools for h5dump, pkg-config). Does nothing when they are there.
#
#   bash scripts/setup.sh          HDF5 only
#   bash scripts/setup.sh --wgpu   also a Vulkan loader and, when no Vulkan driver is installed,
#                                  Mesa's software Vulkan (lavapipe), for the wgpu backend
#   bash scripts/setup.sh --tch    also PyTorch 2.9.0 (the libtorch that the tch crate 0.22 builds
#                                  against) in a virtual environment, $RESILAB_TCH_VENV or
#                                  ~/.cache/resilab/tch-venv (about 7 GB with its CUDA libraries),
#                                  for the tch backend; scripts/with-tch.sh builds with it
set -euo pipefail

TCH_TORCH_VERSION=2.9.0
need=()
tch=0
if [ "${1:-}" = "--tch" ]; then
    tch=1
    python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
elif [ "${1:-}" = "--wgpu" ]; then
    { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null || need+=(libvulkan1)
    # A GPU's own driver registers an ICD file; without any, use lavapipe.
    if ! compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null && ! compgen -G '/etc/vulkan/icd.d/*.json' >/dev/null; then
        need+=(mesa-vulkan-drivers)
    fi
elif [ -n "${1:-}" ]; then
    echo "setup: unknown option $1 (expected --wgpu or --tch)" >&2
    exit 2
fi
# cmake >= 3.26 builds the bundled HDF5; Debian 12's own cmake (3.25) is too old.
cmake_ok() {
    local v major minor
    v=$(cmake --version 2>/dev/null | head -n 1 | awk '{print $3}')
    [ -n "$v" ] || return 1
    major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
    [ "$major" -gt 3 ] 2>/dev/null || { [ "$major" -eq 3 ] && [ "$minor" -ge 26 ]; } 2>/dev/null
}
cmake_needed=0
if ! cmake_ok; then
    cmake_needed=1
    python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
fi
pkg-config --exists hdf5 2>/dev/null || [ -e /usr/include/hdf5/serial/hdf5.h ] || need+=(libhdf5-dev)
command -v h5dump >/dev/null || need+=(hdf5-tools)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
        echo "setup: please install: ${need[*]} (the HDF5 C library 1.10 or newer and its tools; for --wgpu, a Vulkan loader and driver; for --tch, Python 3 with venv)" >&2
        exit 1
    fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    echo "setup: installing ${need[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ "$cmake_needed" = 1 ]; then
    cvenv="${RESILAB_CMAKE_VENV:-$HOME/.cache/resilab/cmake-venv}"
    if ! "$cvenv/bin/cmake" --version >/dev/null 2>&1; then
        echo "setup: installing cmake (>= 3.26, to build the bundled HDF5) into $cvenv" >&2
        [ -x "$cvenv/bin/python" ] || python3 -m venv "$cvenv"
        "$cvenv/bin/pip" install -q "cmake>=3.26"
    fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    if ! $sudo ln -sf "$cvenv/bin/cmake" /usr/local/bin/cmake; then
        echo "setup: could not link /usr/local/bin/cmake; put $cvenv/bin on PATH before building" >&2
    fi
fi
if [ "$tch" = 1 ]; then
    venv="${RESILAB_TCH_VENV:-$HOME/.cache/resilab/tch-venv}"
    if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TCH_TORCH_VERSION')" 2>/dev/null; then
        echo "setup: installing PyTorch $TCH_TORCH_VERSION into $venv (for libtorch; a few minutes)" >&2
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        "$venv/bin/pip" install -q "torch==$TCH_TORCH_VERSION"
    fi
fi
