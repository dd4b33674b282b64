"""Per-operation breakdown of a training step: resilab from `perf script`, merged with PyTorch's.

    breakdown.py perf MODEL THREADS STEP_JSON [--explain N] < perf-script-output
        classifies the samples of a `perf record -g --call-graph dwarf` profile of
        `resilab bench train` and prints one JSON line (the same shape breakdown_torch.py
        prints); STEP_JSON is the JSON line of an unprofiled run of the same command, whose
        median step time the shares are scaled to
    breakdown.py add CSV JSON_LINE...    append the lines' categories as CSV rows (header if new)
    breakdown.py table CSV               print a markdown table per model and thread count
    breakdown.py label ARCH:DEPTH:WIDTH:BN   the model label of the CSV (resnet20, alexnet-w0.5)

The perf side reads `perf script -F comm,pid,tid,time,event,ip,sym` (call stacks leaf first,
one frame per line, a blank line between samples). Which samples count: those of the process
that ran `resilab_runner::bench::median_step`, on any of its threads, from the first sample
whose stack holds that frame to the last (the timed steps; the warmup steps come before). If
no stack holds it, every sample under `resilab_train::trainer::Trainer::step` counts, warmup
included, and the JSON says so.

A sample goes to the category of the first frame, walking from the leaf towards the root,
that a rule of RESILAB_RULES matches, so a kernel nested in another is counted once, under
the innermost. A pool thread's sample in a rayon job whose frames name no kernel (rayon's
generic frames, the kernel's closure inlined) takes the category of the training thread's
sample nearest in time (the kernel that forked the job); a pool thread spinning for work (a
rayon wait frame reached before any job frame) is "idle"; anything else is "other". The
shares are of CPU samples over all threads, scaled to the median wall step time of the
unprofiled run.
"""

import bisect
import csv
import datetime
import json
import os
import re
import sys
from collections import Counter

# Categories in table order. "conv backward (data+weight)" is what PyTorch's CPU kernel
# reports as one op; the table sets resilab's two rows' sum beside it.
CATEGORIES = [
    "conv forward", "conv backward-data", "conv backward-weight", "conv backward (data+weight)",
    "bn forward", "bn backward", "relu forward", "relu backward", "pool forward", "pool backward",
    "linear forward", "linear backward", "loss", "optimizer", "data", "other", "idle",
]
CONV_BACKWARD_PARTS = ("conv backward-data", "conv backward-weight")

# (category, regex searched in one frame's symbol). For each frame, leaf first, the first
# rule that matches decides; a frame no rule matches passes the sample on to its caller.
# The kernels are resilab_kernels' entry points (their closures carry the function's path);
# the resilab_models frames after them are the layers' wrappers around the kernels (tensor
# wrapping, copies to the host, BatchNorm's running statistics), so that what a layer spends
# outside its kernel stays with the layer rather than in "other".
RESILAB_RULES = [
    # Kernels (crates/kernels/src).
    ("conv forward", r"^resilab_kernels::conv::forward(_new|_to)?(::|$)"),
    ("conv backward-data", r"^resilab_kernels::conv::input_grad(_new|_to)?(::|$)"),
    ("conv backward-weight",
     r"^resilab_kernels::conv::(weight_grad|chunk_weight_grad|bias_grad|channel_sums)(::|$)"),
    ("bn forward", r"^resilab_kernels::norm::forward(_new|_to)?(::|$)"),
    ("bn backward", r"^resilab_kernels::norm::backward(_new|_to)?(::|$)"),
    # The ReLU masks of the backward pass: after a conv or a linear layer (act::relu_grad_new)
    # and on the residual branch of a fused BatchNorm + add + ReLU (norm::residual_grad_new).
    # BatchNorm's own ReLU mask is inside norm::backward and stays there.
    ("relu backward", r"^resilab_kernels::act::|^resilab_kernels::norm::residual_grad(_new)?(::|$)"),
    ("pool forward", r"^resilab_kernels::pool::forward(_new|_to)?(::|$)"),
    ("pool backward", r"^resilab_kernels::pool::backward(_new|_to)?(::|$)"),
    ("linear forward", r"^resilab_kernels::linear::forward(_new)?(::|$)"),
    ("linear backward", r"^resilab_kernels::linear::(input_grad_new|weight_grad_new|bias_grad)(::|$)"),
    ("optimizer", r"^resilab_kernels::optim::"),
    # ResNet's global average pool is Burn's (flex kernel, autodiff backward step).
    ("pool backward", r"adaptive_avg_pool\dd_backward|AdaptiveAvgPool\dD as burn_autodiff"),
    ("pool forward", r"adaptive_avg_pool\dd"),
    # Layer wrappers (crates/models/src/kernels.rs, layers.rs).
    ("conv forward", r"^resilab_models::kernels::forward$|^resilab_models::layers::conv_forward_then$"),
    ("bn forward", r"^resilab_models::kernels::bn_forward$|^resilab_models::layers::BatchNorm2d::forward_train"),
    ("bn backward", r"^<resilab_models::kernels::autodiff_batch_norm::NormBackward as "),
    ("pool forward", r"^resilab_models::kernels::(pool_forward|max_pool2)$|^resilab_models::layers::pool2$"),
    ("pool backward", r"::resilab_max_pool2::PoolBackward as "),
    ("linear forward", r"^resilab_models::kernels::linear_forward$|^resilab_models::layers::Linear::forward"),
    ("linear backward", r"^<resilab_models::kernels::autodiff_linear::LinearBackward as "),
    # Loss: Burn's cross entropy (its forward pass; its backward steps are Burn's generic
    # autodiff ops, which cannot be told apart from the model's, and stay in "other").
    ("loss", r"^burn_nn::loss::cross_entropy::"),
    # Optimizer: the fused SGD pass and the walk over the parameters around it.
    ("optimizer", r"^resilab_train::fused::|as resilab_train::fused::OptimKernels>|^resilab_train::update::"
                  r"|^resilab_train::trainer::Trainer::update_worker$"),
    # Data: the batch gathered and normalised from the (synthetic) dataset every step.
    ("data", r"^resilab_data::"),
]
RESILAB_RULES = [(c, re.compile(p)) for c, p in RESILAB_RULES]
# A pool thread waiting for work: a wait frame before any frame that runs a job.
WAIT = re.compile(r"^rayon_core::registry::WorkerThread::wait_until_cold$|^rayon_core::sleep::")
RUNS_JOB = re.compile(r"as rayon_core::job::Job>::execute$")
TIMED = "resilab_runner::bench::median_step"
STEP = "resilab_train::trainer::Trainer::step"
NEAR = 0.002  # seconds
HEADER = re.compile(r"^(.*?)\s+(\d+)/(\d+)\s+(\d+\.\d+):")


def classify(frames):
    """The category of one sample, its frames leaf first: the first rule a frame matches;
    failing that "stolen" (a job a pool thread took from the training thread, whose category
    the caller takes from what the training thread ran at that time), "idle" (a thread
    waiting for work) or "other"."""
    first = None  # the first job or wait frame, leaf side
    for f in frames:
        for cat, rx in RESILAB_RULES:
            if rx.search(f):
                return cat
        if first is None and RUNS_JOB.search(f):
            first = "stolen"
        elif first is None and WAIT.search(f):
            first = "idle"
    return first or "other"


def samples(lines):
    """(pid, tid, time, frames) of each sample of `perf script` output."""
    head, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head:
                yield (*head, frames)
            head, frames = None, []
            continue
        if head is None:
            m = HEADER.match(line)
            if m:
                head = (int(m.group(2)), int(m.group(3)), float(m.group(4)))
            continue
        parts = line.strip().split(None, 1)
        frames.append(parts[1] if len(parts) == 2 else "[unknown]")
    if head:
        yield (*head, frames)


def perf(model, threads, step_json, explain=0):
    step = json.loads(step_json)
    all_samples = list(samples(sys.stdin))
    marker = TIMED if any(TIMED in fr for _, _, _, fr in all_samples) else STEP
    timed = [(pid, t) for pid, _, t, fr in all_samples if marker in fr]
    if not timed:
        sys.exit(f"error: {model}: no samples under {STEP} in the profile")
    pid = Counter(p for p, _ in timed).most_common(1)[0][0]
    t0, t1 = min(t for p, t in timed if p == pid), max(t for p, t in timed if p == pid)
    chosen = [(tid, t, fr) for p, tid, t, fr in all_samples if p == pid and t0 <= t <= t1]
    if marker == TIMED:
        scope = f"all threads, from the first to the last sample under {TIMED} (the timed steps)"
    else:
        scope = f"all threads, from the first to the last sample under {STEP} (warmup steps included: no {TIMED} frame)"
        print(f"warning: {model}: {scope}", file=sys.stderr)
    if not chosen:
        sys.exit(f"error: {model}: no samples of the training step in the profile")
    # A pool thread's share of a kernel runs in a rayon job whose frames (generic rayon and
    # the kernel's inlined closure) do not name the kernel: it gets the category of the
    # training thread's sample nearest in time (within NEAR seconds), the kernel that
    # forked the job.
    main_tid = Counter(tid for tid, _, fr in chosen if TIMED in fr or STEP in fr).most_common(1)[0][0]
    cats = [(t, tid, fr, classify(fr)) for tid, t, fr in chosen]
    main = sorted((t, c) for t, tid, _, c in cats if tid == main_tid)
    main_t = [t for t, _ in main]
    counts, unknown, stolen = Counter(), Counter(), Counter()
    for t, tid, fr, cat in cats:
        if cat == "stolen" and tid == main_tid:
            cat = "other"  # the training thread itself runs inside a rayon job
        if cat == "stolen":
            i = bisect.bisect_left(main_t, t)
            near = [j for j in (i - 1, i) if 0 <= j < len(main) and abs(main_t[j] - t) <= NEAR]
            j = min(near, key=lambda j: abs(main_t[j] - t), default=None)
            cat = main[j][1] if j is not None and main[j][1] not in ("other", "idle", "stolen") else "other"
            stolen[cat] += 1
        counts[cat] += 1
        if cat == "other" and explain:
            named = next((f for f in fr if f.startswith(("resilab", "<resilab", "burn", "<burn"))), "")
            unknown[" <- ".join(f[:70] for f in fr[:4]) + " ... " + named[:110]] += 1
    if explain:
        print(f"--- {model}: the {explain} commonest stacks (leaf first) counted as other:", file=sys.stderr)
        for stack, n in unknown.most_common(explain):
            print(f"{n:6d}  {stack}", file=sys.stderr)
    n = sum(counts.values())
    step_ms = step["step_ms_median"]
    print(json.dumps({
        "impl": "resilab", "model": model, "threads": int(threads), "step_ms": step_ms,
        "categories": {c: step_ms * counts[c] / n for c in CATEGORIES if counts[c]},
        "shares": {c: counts[c] / n for c in CATEGORIES if counts[c]},
        "samples": n, "samples_from_pool_jobs": sum(stolen.values()),
        "pool_jobs_unresolved": stolen["other"], "threads_sampled": len({tid for tid, _, _ in chosen}), "scope": scope,
    }))


COLUMNS = ["model", "threads", "impl", "category", "ms_per_step", "share", "step_ms", "date"]


def add(path, lines):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        for line in lines:
            r = json.loads(line)
            total = sum(r["categories"].values())
            for cat in CATEGORIES:
                if cat not in r["categories"]:
                    continue
                ms = r["categories"][cat]
                w.writerow({"model": r["model"], "threads": r["threads"], "impl": r["impl"],
                            "category": cat, "ms_per_step": f"{ms:.3f}", "share": f"{ms / total:.4f}",
                            "step_ms": f"{r['step_ms']:.3f}", "date": date})


def table(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    groups = {}
    for r in rows:
        g = groups.setdefault((r["model"], int(r["threads"])), {"resilab": {}, "pytorch": {}, "step": {}})
        g[r["impl"]][r["category"]] = float(r["ms_per_step"])
        g["step"][r["impl"]] = float(r["step_ms"])
    fmt = lambda v: "–" if v is None else f"{v:.2f}"
    for (model, threads), g in groups.items():
        rl, pt = g["resilab"], g["pytorch"]
        # A PyTorch row for the two conv backward halves together, and resilab's sum beside it.
        if "conv backward (data+weight)" in pt and any(c in rl for c in CONV_BACKWARD_PARTS):
            rl = dict(rl, **{"conv backward (data+weight)": sum(rl.get(c, 0.0) for c in CONV_BACKWARD_PARTS)})
        print(f"\n### {model}, {threads} thread{'s' if threads != 1 else ''}\n")
        print("| category | resilab ms | PyTorch ms | resilab/PyTorch |")
        print("|---|---:|---:|---:|")
        for cat in CATEGORIES:
            r, p = rl.get(cat), pt.get(cat)
            if r is None and p is None:
                continue
            ratio = f"{r / p:.2f}" if r is not None and p else "–"
            name = f"{cat} (in the sum below)" if cat in CONV_BACKWARD_PARTS and "conv backward (data+weight)" in rl else cat
            print(f"| {name} | {fmt(r)} | {fmt(p)} | {ratio} |")
        r, p = g["step"].get("resilab"), g["step"].get("pytorch")
        ratio = f"{r / p:.2f}" if r and p else "–"
        print(f"| **step** | **{fmt(r)}** | **{fmt(p)}** | **{ratio}** |")


def label(spec):
    arch, depth, width, bn = spec.split(":")
    name = arch if arch == "alexnet" else f"{arch}{depth}"
    if float(width) != 1.0:
        name += f"-w{float(width):g}"
    if arch == "vgg" and bn == "0":
        name += "-nobn"
    return name


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    cmd, rest = args[0], args[1:]
    if cmd == "perf" and len(rest) >= 3:
        explain = 0
        if "--explain" in rest:
            i = rest.index("--explain")
            explain = int(rest[i + 1])
            rest = rest[:i] + rest[i + 2:]
        perf(*rest[:3], explain=explain)
    elif cmd == "add" and len(rest) >= 2:
        add(rest[0], rest[1:])
    elif cmd == "table" and len(rest) == 1:
        table(rest[0])
    elif cmd == "label" and len(rest) == 1:
        print(label(rest[0]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
