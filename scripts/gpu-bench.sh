#!/usr/bin/env bash
# Training throughput on a GPU: resilab on Burn's wgpu backend against PyTorch on the same
# GPU (CUDA when PyTorch sees one, else Apple's MPS, else the CPU), same models and batch,
# back to back per model. Writes the CSV the CPU benchmark writes (bench/train_throughput.sh),
# with the backend and device of each side, to results/bench/train_throughput_gpu.csv.
#
#   bash scripts/gpu-bench.sh
#   MODELS="resnet:20:1:1" BATCH=256 RESILAB_WGPU_DEVICE=discrete:0 bash scripts/gpu-bench.sh
#
# Needs a Vulkan (or Metal, DX12) driver: scripts/setup.sh --wgpu installs the Vulkan loader,
# and Mesa's software Vulkan only where no driver is registered (figures on it are a CPU's).
# The first build with the wgpu feature takes about 20 minutes on 2 cores; the first step of
# each model compiles its shaders (cached afterwards).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --wgpu

export BACKEND=wgpu
export FEATURES=wgpu
export TORCH_DEVICE="${TORCH_DEVICE:-auto}"
export BATCH="${BATCH:-128}"
export WARMUP="${WARMUP:-5}"
export OUT_CSV="${OUT_CSV:-$ROOT/results/bench/train_throughput_gpu.csv}"
export RESILAB_WGPU_DEVICE="${RESILAB_WGPU_DEVICE:-default}"
exec bash "$ROOT/bench/train_throughput.sh"
