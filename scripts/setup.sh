#!/usr/bin/env bash
# Installs what building resilab needs beyond Rust: the HDF5 C library and its tools
# (Debian/Ubuntu packages libhdf5-dev, hdf5-tools, pkg-config). Does nothing when they are there.
set -euo pipefail

need=()
pkg-config --exists hdf5 2>/dev/null || [ -e /usr/include/hdf5/serial/hdf5.h ] || need+=(libhdf5-dev)
command -v h5dump >/dev/null || need+=(hdf5-tools)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "setup: please install the HDF5 C library (1.10 or newer) and its tools: ${need[*]}" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
