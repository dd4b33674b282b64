# Sourced by the benchmark scripts: the Python venv of the reference baselines (PyTorch, h5py),
# outside the repo (PyPI's default torch wheel is several GB).
#
#   source "$ROOT/bench/venv.sh"; bench_venv torch numpy   # sets VENV and PY
VENV="${RESILAB_BENCH_VENV:-$HOME/.cache/resilab/bench-venv}"
PY="$VENV/bin/python"

# Makes sure the venv imports every package named (installing what is missing from PyPI).
bench_venv() {
    local imports
    imports="$(IFS=,; echo "$*")"
    if ! "$PY" -c "import $imports" 2>/dev/null; then
        echo "==> installing $* into $VENV" >&2
        [ -x "$PY" ] || python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q "$@"
    fi
}
