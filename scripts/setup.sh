#!/usr/bin/env bash
# Installs what building resilab needs beyond Rust: the HDF5 C library and its tools
# (Debian/Ubuntu packages libhdf5-dev, hdf5-tools, pkg-config). Does nothing when they are there.
#
#   bash scripts/setup.sh          HDF5 only
#   bash scripts/setup.sh --wgpu   also a Vulkan loader and, when no Vulkan driver is installed,
#                                  Mesa's software Vulkan (lavapipe), for the wgpu backend
set -euo pipefail

need=()
if [ "${1:-}" = "--wgpu" ]; then
    { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null || need+=(libvulkan1)
    # A GPU's own driver registers an ICD file; without any, use lavapipe.
    if ! compgen -G '/usr/share/vulkan/icd.d/*.json' >/dev/null && ! compgen -G '/etc/vulkan/icd.d/*.json' >/dev/null; then
        need+=(mesa-vulkan-drivers)
    fi
elif [ -n "${1:-}" ]; then
    echo "setup: unknown option $1 (expected --wgpu)" >&2
    exit 2
fi
pkg-config --exists hdf5 2>/dev/null || [ -e /usr/include/hdf5/serial/hdf5.h ] || need+=(libhdf5-dev)
command -v h5dump >/dev/null || need+=(hdf5-tools)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup: please install: ${need[*]} (the HDF5 C library 1.10 or newer and its tools; for --wgpu, a Vulkan loader and driver)" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
