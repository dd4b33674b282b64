#!/usr/bin/env bash
# Recovery benchmark. Writes results/bench/recovery.csv (measure, setting, value, goal):
#  1. detection overhead: mean step time with every detector on (NaN/Inf in loss, gradients and
#     weights, loss spike, replica divergence every 10 steps) against none, interleaved in one
#     process (`resilab bench detect`); goal under 2% of a step;
#  2. rollback cost: steps recomputed per fault under `rollback`, for random NaN-producing
#     weight faults (mean 1 per 40 steps per worker); goal at most 1;
#  3. checkpoint-restart lost work: completed steps lost per restart under random crashes
#     (mean 1 per 60 steps per worker) for checkpoint intervals 10, 20, 40, against (I - 1) / 2,
#     what a fault arriving uniformly within an interval loses on average.
# Knobs: THREADS (default 2), DETECT_STEPS (default 30).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-2}"
DETECT_STEPS="${DETECT_STEPS:-30}"
OUT_CSV="${OUT_CSV:-$ROOT/results/bench/recovery.csv}"
BIN="$ROOT/target/release/resilab"
WORK="$ROOT/target/bench-recovery"
CFG="$ROOT/bench/recovery.toml"

(cd "$ROOT" && bash scripts/setup.sh && cargo build --release)
rm -rf "$WORK" && mkdir -p "$WORK" "$(dirname "$OUT_CSV")"
echo "measure,setting,value,goal" > "$OUT_CSV"

echo "==> detection overhead (ResNet-20, 4 workers, batch 128)" >&2
"$BIN" bench detect --arch resnet --depth 20 --workers 4 --batch 128 --warmup 3 --steps "$DETECT_STEPS" \
    --threads "$THREADS" | tail -n 1 > "$WORK/detect.json"
python3 - "$WORK/detect.json" "$OUT_CSV" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
with open(sys.argv[2], "a") as f:
    f.write(f"detection_overhead_share,{d['model']} x{d['workers']} batch {d['batch']} ({d['step_ms_off']:.1f} ms/step),{d['overhead_share']:.4f},< 0.02\n")
print(f"detection overhead {100 * d['overhead_share']:.2f}% of a {d['step_ms_off']:.1f} ms step", file=sys.stderr)
PY

nan_fault='fault=[{target="weights",mtbf_steps=40,injection_tries=4,first_bit=1,last_bit=1,allow_sign_change=false,locations_to_corrupt=["model/stem/bn/weight"]}]'
echo "==> rollback cost" >&2
"$BIN" train --config "$CFG" --quiet --out "$WORK/rollback" --golden-dir "$WORK/golden" \
    --set "$nan_fault" --set 'recovery.strategy="rollback"' --threads "$THREADS" >/dev/null
crash_fault='fault=[{target="crash",mtbf_steps=60}]'
for interval in 10 20 40; do
    echo "==> checkpoint-restart, interval $interval" >&2
    "$BIN" train --config "$CFG" --quiet --out "$WORK/restart-$interval" --golden-dir "$WORK/golden" \
        --set "$crash_fault" --set 'recovery.strategy="checkpoint_restart"' \
        --set "checkpoint.every_steps=$interval" --set checkpoint.keep_last=2 --threads "$THREADS" >/dev/null
done
python3 - "$WORK" "$OUT_CSV" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
rows = []
s = json.load(open(f"{work}/rollback/summary.json"))
redone = sum(1 for d in s["detections"] if d["decision"]["action"] == "redo_step")
faults = s["faults_injected"]
rows.append(("rollback_steps_per_fault", f"{faults} faults, {redone} redos, {s['steps_recomputed']} steps recomputed", s["steps_recomputed"] / max(faults, 1), "<= 1"))
rows.append(("rollback_acc_loss_vs_golden", f"{faults} faults", s["acc_loss_vs_golden"], "0"))
for interval in (10, 20, 40):
    s = json.load(open(f"{work}/restart-{interval}/summary.json"))
    n = len(s["restarts"])
    lost = [r["at_step"] - 1 - r["to_step"] for r in s["restarts"]]
    mean = sum(lost) / max(n, 1)
    rows.append(("restart_lost_steps_per_restart", f"interval {interval}, {n} restarts", round(mean, 3), (interval - 1) / 2))
with open(out, "a") as f:
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
for r in rows:
    print(*r, sep="  ", file=sys.stderr)
PY
echo "wrote $OUT_CSV" >&2
