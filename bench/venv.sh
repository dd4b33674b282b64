# Sourced by the benchmark scripts: the Python venv of the reference baselines (PyTorch, h5py),
# outside the repo (PyPI's default torch wheel is several GB).
#
#   source "$ROOT/bench/venv.sh"; bench_venv torch numpy   # sets VENV and PY
#
# PyTorch is pinned to the version the performance targets name and the tch backend builds
# against (scripts/setup.sh's TCH_TORCH_VERSION), so a baseline does not move between runs
# because PyPI published a newer torch; RESILAB_BENCH_TORCH picks another version.
VENV="${RESILAB_BENCH_VENV:-$HOME/.cache/resilab/bench-venv}"
PY="$VENV/bin/python"
BENCH_TORCH_VERSION="${RESILAB_BENCH_TORCH:-2.9.0}"

# Makes sure the venv imports every package named, torch at BENCH_TORCH_VERSION (installing
# what is missing or, for torch, another version, from PyPI).
bench_venv() {
    local imports check pkgs=() p
    imports="$(IFS=,; echo "$*")"
    check="import $imports"
    for p in "$@"; do
        if [ "$p" = torch ]; then
            p="torch==$BENCH_TORCH_VERSION"
            check="$check; assert torch.__version__.split('+')[0] == '$BENCH_TORCH_VERSION'"
        fi
        pkgs+=("$p")
    done
    if ! "$PY" -c "$check" 2>/dev/null; then
        echo "==> installing ${pkgs[*]} into $VENV" >&2
        [ -x "$PY" ] || python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q "${pkgs[@]}"
    fi
}
