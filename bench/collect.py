"""Merge resilab/PyTorch benchmark JSON lines into a CSV and print a table.

    collect.py add CSV SPEC RESILAB_JSON TORCH_JSON   append one row (header if new)
    collect.py show CSV                               print the ratio table
    collect.py median < JSON_LINES                    the run with the median images/s

SPEC is ``arch:depth:width:bn``; each JSON argument is the last stdout line of
``resilab bench train`` or ``torch_step.py`` respectively.
"""

import csv
import datetime
import json
import os
import sys

COLUMNS = ["arch", "depth", "width", "batch_norm", "params", "batch", "threads",
           "backend", "device", "resilab_images_per_s", "pytorch_images_per_s",
           "ratio", "resilab_step_ms", "pytorch_step_ms", "torch_version", "date",
           "pytorch_device", "train_gflop_per_image", "resilab_gflops",
           "pytorch_gflops", "peak_gflops", "cpu"]


def cpu_model():
    """The processor's model name (/proc/cpuinfo), as resilab's platform::cpu_model reads it:
    both sides ran on it, and figures from different processors do not compare."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return ""


def add(path, spec, resilab_line, torch_line):
    arch, depth, width, bn = spec.split(":")
    r, t = json.loads(resilab_line), json.loads(torch_line)
    if r.get("params") != t.get("params"):
        # Architectures are meant to be identical; flag drift but keep the row.
        print(f"warning: {spec}: params differ (resilab {r.get('params')}, "
              f"pytorch {t.get('params')})", file=sys.stderr)
    row = {
        "arch": arch, "depth": depth, "width": width, "batch_norm": bn,
        "params": r.get("params"), "batch": r.get("batch"),
        "threads": r.get("threads"), "backend": r.get("backend", ""),
        "device": r.get("device", ""),
        "resilab_images_per_s": f"{r['images_per_s']:.2f}",
        "pytorch_images_per_s": f"{t['images_per_s']:.2f}",
        "ratio": f"{r['images_per_s'] / t['images_per_s']:.4f}",
        "resilab_step_ms": f"{r['step_ms_median']:.3f}",
        "pytorch_step_ms": f"{t['step_ms_median']:.3f}",
        "torch_version": t.get("torch_version", ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pytorch_device": t.get("device", "cpu"),
        "cpu": cpu_model(),
    }
    # Same model, same FLOPs per image: resilab counts them (3x the forward pass).
    flop = r.get("train_gflop_per_image")
    if flop is not None:
        row["train_gflop_per_image"] = f"{flop:.5f}"
        row["resilab_gflops"] = f"{flop * r['images_per_s']:.1f}"
        row["pytorch_gflops"] = f"{flop * t['images_per_s']:.1f}"
    if r.get("peak_gflops") is not None:
        row["peak_gflops"] = f"{r['peak_gflops']:.1f}"
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)


def show(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    head = ["model", "params", "threads", "backend", "device", "resilab img/s",
            "pytorch device", "pytorch img/s", "resilab/pytorch",
            "GFLOP/s resilab / pytorch / peak"]
    body = [[f"{r['arch']}{'' if r['arch'] == 'alexnet' else r['depth']}"
             f" w{r['width']}{' bn' if r['batch_norm'] == '1' else ''}",
             r["params"], r["threads"], r["backend"], r["device"],
             f"{float(r['resilab_images_per_s']):.1f}",
             r.get("pytorch_device") or "cpu",
             f"{float(r['pytorch_images_per_s']):.1f}",
             f"{float(r['ratio']):.2f}x",
             " / ".join(r.get(k) or "-" for k in
                        ("resilab_gflops", "pytorch_gflops", "peak_gflops"))]
            for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    for line in [head, ["-" * n for n in widths], *body]:
        print("  ".join(str(c).rjust(n) if i else str(c).ljust(n)
                        for i, (c, n) in enumerate(zip(line, widths))))


def median():
    runs = [json.loads(line) for line in sys.stdin if line.strip()]
    if not runs:
        sys.exit("collect.py median: no runs on standard input")
    runs.sort(key=lambda r: r["images_per_s"])
    print(json.dumps(runs[(len(runs) - 1) // 2]))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "add":
        add(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "show":
        show(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "median":
        median()
    else:
        sys.exit(__doc__)
