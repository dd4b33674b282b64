"""Summary of bench/campaign.sh: reads resilab's campaign directories and summary lines and the
Python baseline's JSON lines, writes the benchmark CSV (one row per backend) and a per-model CSV
beside it, and prints the figures.

    python3 bench/campaign_summary.py WORK OUT_CSV JOBS THREADS BACKEND...

WORK holds, per backend, resilab-BACKEND/ (the campaign directory) and resilab-BACKEND.out (the
campaign's summary line), and torch.jsonl (one line per model and flip count from
bench/campaign_torch.py).
"""

import csv
import datetime
import json
import os
import re
import sys
from collections import defaultdict

from collect import cpu_model

RUN = ("fixed length: load, 20 steps x batch 64, 1,000 test images; "
       "alexnet/resnet8/vgg11 width 0.25, 32x32; flips 1/10/100/1000")


def resilab_side(work, backend):
    """(seconds, bases, bases_s, rows) of the campaign run on `backend`."""
    summary = open(os.path.join(work, f"resilab-{backend}.out")).read()
    m = re.search(r"in this shard; ([0-9.]+) s \((\d+) base run\(s\) first: ([0-9.]+) s\)", summary)
    if not m:
        sys.exit(f"campaign_summary: no summary line in {work}/resilab-{backend}.out: {summary!r}")
    rows = [json.loads(line) for line in open(os.path.join(work, f"resilab-{backend}", "runs.jsonl"))]
    return float(m.group(1)), int(m.group(2)), float(m.group(3)), rows


def main():
    work, out, jobs, threads, *backends = sys.argv[1:]
    jobs = int(jobs)
    torch = [json.loads(line) for line in open(os.path.join(work, "torch.jsonl"))]
    t_runs = sum(t["runs"] for t in torch)
    t_seconds = sum(t["seconds"] for t in torch)
    theirs = 3600.0 * t_runs / t_seconds
    # Per model, the published way: seconds of one run in one process. The Python side is timed
    # from outside, `jobs` runs at a time, so a run's share is seconds x jobs / runs (process
    # start, imports and h5py pass included); compute is PyTorch's own 20 steps and evaluation.
    t_by_model = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for t in torch:
        t_by_model[t["arch"]][0] += t["runs"]
        t_by_model[t["arch"]][1] += t["seconds"]
        t_by_model[t["arch"]][2] += t["train_s"]
        t_by_model[t["arch"]][3] += t["eval_s"]

    table, per_model = [], []
    phase_sums = defaultdict(lambda: defaultdict(float))
    phases = []
    for backend in backends:
        seconds, bases, bases_s, rows = resilab_side(work, backend)
        runs = len(rows)
        ok = sum(r["status"] == "ok" for r in rows)
        # Runs per hour once the base checkpoints exist, as the Python side is timed (its base
        # model is trained before its clock starts); the bases count once in the 3,000-run figure.
        runs_s = seconds - bases_s
        ours = 3600.0 * runs / runs_s
        ours_incl = 3600.0 * runs / seconds
        ratio = ours / theirs
        grid_min = (bases_s + 3000 * runs_s / runs) / 60
        table.append({
            "date": datetime.date.today().isoformat(), "backend": backend, "jobs": jobs,
            "threads_per_job": threads,
            "resilab_runs": runs, "resilab_ok": ok, "resilab_seconds": round(seconds, 1),
            "resilab_bases": bases, "resilab_bases_seconds": round(bases_s, 1),
            "resilab_runs_per_hour": round(ours), "resilab_runs_per_hour_incl_bases": round(ours_incl),
            "published_way_runs": t_runs, "published_way_seconds": round(t_seconds, 1),
            "published_way_runs_per_hour": round(theirs), "ratio": round(ratio, 2),
            "projected_3000_runs_min": round(grid_min, 1), "run": RUN, "cpu": cpu_model(),
        })
        print(f"resilab on {backend:5} {runs} runs in {runs_s:.1f} s after {bases_s:.1f} s of {bases} base and "
              f"golden runs: {ours:.0f} runs/hour ({ours_incl:.0f} counting the bases); {ratio:.2f}x the "
              f"published way (goal >= 3x); 3,000 runs {grid_min:.1f} min projected (goal <= 60 min)")

        # resilab's worker times each run itself, phase by phase (runs.jsonl's phase_s).
        by_model = defaultdict(list)
        for r in rows:
            if r["status"] == "ok":
                by_model[r["coords"]["model"]].append(r["wall_s"])
                for item in (r.get("phase_s") or "").split(";"):
                    if item:
                        name, sec = item.split(":")
                        phase_sums[(backend, r["coords"]["model"])][name] += float(sec)
        for model in sorted(by_model):
            ws = by_model[model]
            ours_s = sum(ws) / len(ws)
            n, s, train, evals = t_by_model.get(model, [0, 0.0, 0.0, 0.0])
            theirs_s = s * jobs / n if n else float("nan")
            compute_s = (train + evals) / n if n else float("nan")
            per_model.append([model, backend, len(ws), round(ours_s, 2), n, round(theirs_s, 2), round(compute_s, 2),
                              round(theirs_s / 3, 2), round(theirs_s / ours_s, 2), cpu_model()])
            for name, total in phase_sums[(backend, model)].items():
                phases.append([model, f"resilab-{backend}", name, round(total / len(ws), 4)])
            if n and backend == backends[0]:
                train_s, eval_s = train / n, evals / n
                phases.extend([[model, "published-way", "process, imports, h5py injection, load", round(theirs_s - train_s - eval_s, 4)],
                               [model, "published-way", "steps", round(train_s, 4)],
                               [model, "published-way", "eval", round(eval_s, 4)]])
            print(f"  {model:8} one run: resilab {ours_s:.2f} s, published way {theirs_s:.2f} s "
                  f"({theirs_s / ours_s:.2f}x), of which PyTorch's steps and evaluation {compute_s:.2f} s; "
                  f"3x needs resilab <= {theirs_s / 3:.2f} s")

    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    models_csv = os.path.join(os.path.dirname(out), "campaign_models.csv")
    with open(models_csv, "w", newline="") as f:
        w = csv.writer(f)
        # published_way_compute_s: PyTorch's own 20 steps and evaluation inside the run process;
        # resilab_s_per_run_for_3x: what one resilab run may take for 3x the published way.
        w.writerow(["model", "backend", "resilab_runs", "resilab_s_per_run", "published_way_runs",
                    "published_way_s_per_run", "published_way_compute_s", "resilab_s_per_run_for_3x",
                    "ratio", "cpu"])
        w.writerows(per_model)
    # Where one run's time goes, per model: resilab's phases (runs.csv's phase_s, means over
    # its runs) and the published way's process share against PyTorch's own steps and evaluation.
    phases_csv = os.path.join(os.path.dirname(out), "campaign_phases.csv")
    with open(phases_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "side", "phase", "s_per_run"])
        w.writerows(phases)
    for model in sorted({p[0] for p in phases}):
        print(f"  {model:8} " + "; ".join(f"{side} {name} {sec:.3f} s" for m, side, name, sec in phases if m == model))
    print(f"published way   {t_runs} runs in {t_seconds:.1f} s: {theirs:.0f} runs/hour")
    print(f"-> {out}, {models_csv}, {phases_csv}")


if __name__ == "__main__":
    main()
