#!/usr/bin/env bash
# Reruns the configs/paper/ presets and regenerates results/paper/: for each preset, the
# campaign (into results/campaigns/<preset>, which must not exist yet), its report into
# results/paper/<preset>/ with the campaign's campaign.toml, campaign.json, runs.csv and (train
# campaigns) faults.csv, and
# finally results/paper/README.md from the reports (`resilab report --paper results/paper`).
#
#   bash scripts/paper.sh                      # every preset at its default size
#   PRESETS="nev bits" bash scripts/paper.sh   # some of them
#   SET="campaign.repetitions=84" SUFFIX=-paper PRESETS=nev bash scripts/paper.sh
#
# Runs only on a committed tree, so that every folder's campaign.json names the revision it ran
# on (PAPER_ALLOW_DIRTY=1 overrides). JOBS (default 2) worker processes of THREADS (default 1) threads each. BIN runs a resilab
# binary built earlier (copy target/release/resilab elsewhere first to keep rebuilding while
# the presets run); without it the script builds the release binary and runs that.
set -euo pipefail
cd "$(dirname "$0")/.."
# A published table names the code revision it ran on: refuse uncommitted changes to anything
# but the results, which would make that revision `-dirty` (PAPER_ALLOW_DIRTY=1 to try a change).
if [ "${PAPER_ALLOW_DIRTY:-0}" != 1 ] && git rev-parse --git-dir >/dev/null 2>&1 \
    && [ -n "$(git status --porcelain --untracked-files=no -- . ':!results')" ]; then
    echo "paper.sh: the working tree has uncommitted changes (git status); commit them first, or set PAPER_ALLOW_DIRTY=1" >&2
    exit 1
fi
PRESETS=${PRESETS:-"nev bits precision masks dp-one-flip dp-many-flips recovery permanent-loss pipeline nev-factors precision-training detectors"}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
SUFFIX=${SUFFIX:-}
if [ -n "${BIN:-}" ]; then
    if [ ! -x "$BIN" ]; then
        echo "paper.sh: BIN=$BIN is not an executable file" >&2
        exit 2
    fi
    # Its runs record the revision it was built from: it must be a commit with the code of
    # this tree's HEAD, or every campaign.json would name another one.
    rev=$("$BIN" --version | sed -n 's/^resilab [^ ]* (\([^,]*\),.*/\1/p')
    if [ "${PAPER_ALLOW_DIRTY:-0}" != 1 ]; then
        case "$rev" in
            *-dirty | unknown | "")
                echo "paper.sh: BIN=$BIN was built from an uncommitted tree (${rev:-no revision}); rebuild it from a commit" >&2
                exit 1
                ;;
        esac
        if ! git diff --quiet "$rev" HEAD -- src crates Cargo.toml Cargo.lock build.rs 2>/dev/null; then
            echo "paper.sh: BIN=$BIN was built from $rev, whose code is not HEAD's; rebuild it" >&2
            exit 1
        fi
    fi
    bin=$BIN
else
    cargo build --release --quiet
    bin=target/release/resilab
fi
for p in $PRESETS; do
    name="$p$SUFFIX"
    camp="results/campaigns/$name"
    out="results/paper/$name"
    if [ -e "$camp" ]; then
        echo "paper.sh: $camp exists; move it away first (this script starts every campaign afresh)" >&2
        exit 1
    fi
    args=(campaign --config "configs/paper/$p.toml" --out "$camp" --jobs "$JOBS" --threads "$THREADS" --quiet)
    if [ -n "${SET:-}" ]; then
        for s in $SET; do args+=(--set "$s"); done
    fi
    start=$(date +%s)
    "$bin" "${args[@]}"
    echo "paper.sh: $name took $(( $(date +%s) - start )) s"
    # The preset's folder holds only what this script writes into it.
    rm -rf "$out"
    # The detectors study is reported with its detectors scored from the runs' signals.
    report_args=()
    if [ "$p" = detectors ]; then report_args=(--detectors); fi
    "$bin" report "$camp" --out "$out" "${report_args[@]}"
    # The recovery study is also priced at MegaScale's costs before its fixes: the same runs
    # re-priced exactly (docs/recovery.md, "Priced at real jobs").
    if [ "$p" = recovery ]; then
        "$bin" report "$camp" --price megascale-unoptimised --out "$out/unoptimised"
    fi
    cp "$camp/campaign.toml" "$camp/campaign.json" "$camp/runs.csv" "$out/"
    if [ -f "$camp/faults.csv" ]; then cp "$camp/faults.csv" "$out/"; fi
    echo "$(( $(date +%s) - start ))" > "$out/wall_s.txt"
done
"$bin" report --paper results/paper
echo "paper.sh: results/paper/README.md regenerated"
