#!/usr/bin/env bash
# Long fuzz of every resilab command that reads a user's checkpoint or config (crates/fuzz).
#
#   bash scripts/fuzz.sh                       # 10,000 cases per command, 6 commands
#   CASES=300 bash scripts/fuzz.sh             # a shorter run
#   CASES=1000 COMMANDS=inspect,resume SEED=7 JOBS=4 bash scripts/fuzz.sh
#
# Builds the release binaries (resilab and resilab-fuzz), trains a tiny checkpoint, then for each
# case mutates a copy (bit flips, truncation, zeroed blocks, overwritten bytes, weighted toward
# the HDF5 metadata; cyclic group links; or a TOML config mutation) and runs one of
# `inspect`, `eval`, `diff`, `inject`, `train --resume` (commands `resume`) or
# `train --config` (command `config`) on it. Prints a table of outcomes per command and appends
# one row per command to results/bench/fuzz.csv (date, revision, HDF5 version, command, cases,
# ok, clean_error, messy_error, panic, signal, hang, input_modified, seconds).
#
# COMMANDS=writers,full-disk CSV=results/bench/fuzz_collisions.csv fuzzes the machine around a
# run instead: two `train` processes on one --out, and `train` on a small tmpfs that fills
# (root only; see crates/fuzz/src/collide.rs).
#
# Environment: CASES (per command, default 10000), COMMANDS (default all six), SEED (default 1),
# JOBS (cases run at once, default 2), TIMEOUT (seconds per command, default 90), SCRATCH
# (default target/fuzz), CSV (default results/bench/fuzz.csv).
# The first 3 failing inputs of each command and class are kept in $SCRATCH/failures/<case>/
# with command.sh (the command line that reproduces it), stderr.txt and mutation.txt.
# Exit status: 0 if every case ended with exit 0 or one clean `error:` line, 1 if any case
# panicked, was killed by a signal, hung, failed messily or modified its input, 2 on a harness
# error. A case takes about 1 s on one core (train cases about 2 s, HDF5 hangs up to 60 s), so
# the default run takes many hours on 2 cores: use CASES to size it.
#
# HDF5_COMPARE=1 bash scripts/fuzz.sh runs, instead, the HDF5 comparison: `resilab __probe` (the
# library reading each file completely, with no child-process guard, so its own crashes and hangs
# count) on the same CASES mutated files, once built against the system's HDF5
# (--no-default-features) and once against the bundled one (the default), appending one row each
# to results/bench/fuzz_hdf5.csv (or $CSV). Both read files mutated from one base checkpoint,
# written by the system-HDF5 build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${HDF5_COMPARE:-0}" = 1 ]; then
    scratch="${SCRATCH:-target/fuzz-hdf5}"
    csv="${CSV:-results/bench/fuzz_hdf5.csv}"
    cargo build --release -p resilab --no-default-features
    cp target/release/resilab target/resilab-system-hdf5
    cargo build --release -p resilab -p resilab-fuzz
    cp target/release/resilab target/resilab-bundled-hdf5
    run() {
        target/release/resilab-fuzz --cases "${CASES:-10000}" --commands probe --seed "${SEED:-1}" \
            --jobs "${JOBS:-2}" --timeout "${TIMEOUT:-90}" --scratch "$scratch" --csv "$csv" "$@" || true
    }
    run --resilab target/resilab-system-hdf5
    cp "$scratch/base/run/checkpoints/step-00000004/worker-0.h5" target/fuzz-hdf5-base.h5
    run --resilab target/resilab-bundled-hdf5 --base target/fuzz-hdf5-base.h5
    exit 0
fi

cargo build --release -p resilab -p resilab-fuzz
exec target/release/resilab-fuzz \
    --resilab target/release/resilab \
    --cases "${CASES:-10000}" \
    --commands "${COMMANDS:-inspect,eval,diff,inject,resume,config}" \
    --seed "${SEED:-1}" \
    --jobs "${JOBS:-2}" \
    --timeout "${TIMEOUT:-90}" \
    --scratch "${SCRATCH:-target/fuzz}" \
    --csv "${CSV:-results/bench/fuzz.csv}"
