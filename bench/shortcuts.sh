#!/usr/bin/env bash
# Campaign throughput with and without the shortcuts (docs/campaigns.md, "Shortcuts"): one train
# campaign run twice in the same invocation, with the same processes and threads, once as
# `resilab campaign` runs it (runs take the steps before their first fault, and the steps after
# their state is the golden run's again with no fault left, from the golden run's step cache)
# and once with `--no-shortcuts` (every step trained). The runs' results are
# the same bits either way (tests/shortcuts.rs); only the time differs. Runs per hour are timed
# once the golden runs exist: each campaign reports how long its golden runs took first (with
# the shortcut they also record the step cache), and that time is given too.
# Writes results/bench/shortcuts.csv (one row per mode).
# Knobs: CONFIG (default results/paper/recovery/campaign.toml, the committed recovery study's
# configuration: 4 strategies x 4, 8, 16 workers x 3 fault rates, golden ensembles of 5, 128
# steps a run), SET (extra `--set` arguments, default: 2 training
# seeds, 1 repetition, 72 runs), JOBS (default 2), THREADS (per process, default 1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG="${CONFIG:-$ROOT/results/paper/recovery/campaign.toml}"
JOBS="${JOBS:-2}"
THREADS="${THREADS:-1}"
DEFAULT_SET='--set campaign.repetitions=1 --set campaign.seeds=[1,2]'
read -r -a SET <<< "${SET:-$DEFAULT_SET}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/shortcuts.csv}"
WORK="$ROOT/target/bench-shortcuts"
BIN="$ROOT/target/release/resilab"

cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin resilab
rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$OUT_CSV")"
echo "mode,runs,wall_s,golden_s,runs_per_hour,prefix_steps,remainder_steps,steps,config,set,jobs,threads" > "$OUT_CSV"
for mode in shortcuts no-shortcuts; do
    flag=()
    [ "$mode" = no-shortcuts ] && flag=(--no-shortcuts)
    line="$("$BIN" campaign --config "$CONFIG" "${SET[@]}" --out "$WORK/$mode" --jobs "$JOBS" --threads "$THREADS" --quiet "${flag[@]}")"
    echo "$mode: $line"
    # "<n> runs recorded now (...), ...; <wall> s (<k> base run(s) first: <golden> s) -> ..."
    runs="$(sed -E 's/^([0-9]+) runs recorded now.*/\1/' <<< "$line")"
    wall="$(sed -E 's/.*; ([0-9.]+) s \(.*/\1/' <<< "$line")"
    golden="$(sed -E 's/.*first: ([0-9.]+) s\).*/\1/' <<< "$line")"
    taken() { python3 -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); print(sum(int(x[sys.argv[2]] or 0) for x in r))' "$WORK/$mode/runs.csv" "$1"; }
    prefix="$(taken shortcut_prefix_steps)"
    remainder="$(taken shortcut_remainder_steps)"
    steps="$(python3 -c 'import json,sys,glob; print(sum(json.load(open(f))["steps"] for f in glob.glob(sys.argv[1] + "/runs/*/summary.json")))' "$WORK/$mode")"
    rate="$(python3 -c "print(round($runs / max($wall - $golden, 1e-9) * 3600, 1))")"
    echo "$mode,$runs,$wall,$golden,$rate,$prefix,$remainder,$steps,${CONFIG#"$ROOT"/},\"${SET[*]}\",$JOBS,$THREADS" >> "$OUT_CSV"
done
cat "$OUT_CSV"
