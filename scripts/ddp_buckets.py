"""DDP's own all-reduce buckets against resilab's: the "buckets" check of scripts/ddp_check.py.

For each model family at two bucket sizes, and at DDP's defaults (25 MiB buckets after a 1 MiB
first one), a one-process DDP job on gloo records, through a communication hook that only
observes (it then runs DDP's default all-reduce hook), which parameters each bucket holds. The
first iteration reduces every gradient in one bucket; the `Reducer` then rebuilds its buckets
in the order the gradients became ready, and that plan is compared, bucket for bucket and
parameter for parameter, with `buckets` in the summary.json of a one-step resilab run of the
same configuration.
"""

import json

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import resilab_models as rm

SIZE = 32  # image size of both sides (AlexNet's first linear layer depends on it)

# (name, resilab's [model] keys, the PyTorch model, [(bucket_mb, first_bucket_mb or None)]).
# DDP takes bucket_mb as bucket_cap_mb, whose first bucket is as large; (25, 1) is DDP without
# bucket_cap_mb. The sizes give each model several buckets.
CASES = [
    ("resnet-8", 'arch = "resnet"\ndepth = 8\nwidth = 0.25', lambda: rm.resnet(8, 0.25), [(0.004, None), (0.008, None)]),
    ("resnet-20", 'arch = "resnet"\ndepth = 20\nwidth = 1.0', lambda: rm.resnet(20, 1.0), [(0.1, None), (25, 1)]),
    ("vgg-11-bn", 'arch = "vgg"\ndepth = 11\nwidth = 0.25\nbatch_norm = true', lambda: rm.vgg(11, 0.25, True, size=SIZE),
     [(0.01, None), (0.1, None)]),
    ("alexnet", 'arch = "alexnet"\nwidth = 0.25\nbatch_norm = false', lambda: rm.alexnet(0.25, False, size=SIZE),
     [(0.01, None), (0.1, None)]),
]


def case_name(name, bucket_mb, first_mb):
    return f"buckets-{name}-{bucket_mb}" + (f"-first{first_mb}" if first_mb is not None else "")


def resilab_plan(run, work, name, model_keys, bucket_mb, first_mb):
    """`buckets` of a one-step, two-worker resilab run of the configuration."""
    d = work / name
    d.mkdir(parents=True)
    first = f"first_bucket_mb = {first_mb}\n" if first_mb is not None else ""
    (d / "run.toml").write_text(
        f'seed = 1\n[data]\nsource = "synthetic"\ntrain_size = 32\ntest_size = 16\nimage_size = {SIZE}\n'
        f"[model]\n{model_keys}\n[train]\nsteps = 1\nbatch_size = 8\n[optimizer]\nlr = 0.05\n"
        f"[parallel]\nworkers = 2\nbucket_mb = {bucket_mb}\n{first}")
    run("train", "--config", d / "run.toml", "--out", d / "run", "--quiet")
    return json.loads((d / "run" / "summary.json").read_text())["buckets"]


def ddp_plans(make_model, bucket_mb, first_mb):
    """DDP's buckets (lists of parameter names, by bucket index) in its first two iterations, in
    a process that is already in a one-rank gloo group."""
    torch.manual_seed(0)
    model = make_model()
    names = {p: n for n, p in model.named_parameters()}
    default_first = dist._DEFAULT_FIRST_BUCKET_BYTES
    if first_mb is None:
        net = DDP(model, bucket_cap_mb=bucket_mb)
    elif bucket_mb == 25:
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(first_mb * 1024 * 1024)
        net = DDP(model)
        dist._DEFAULT_FIRST_BUCKET_BYTES = default_first
    else:
        raise ValueError("DDP takes a first bucket of its own only without bucket_cap_mb (25 MiB)")
    seen = {}

    def observe(state, bucket):
        seen[bucket.index()] = [names[p] for p in bucket.parameters()]
        return allreduce_hook(state, bucket)

    net.register_comm_hook(None, observe)
    plans = []
    for _ in range(2):
        seen.clear()
        net(torch.randn(4, 3, SIZE, SIZE)).sum().backward()
        plans.append([seen[i] for i in sorted(seen)])
    return plans


def first_difference(ours, theirs):
    if len(ours) != len(theirs):
        return f"resilab makes {len(ours)} buckets of {[len(b) for b in ours]} parameters, DDP {len(theirs)} of {[len(b) for b in theirs]}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"bucket {i}: resilab's holds {a}, DDP's {b}"
    return None


def check(run, work, port, only=""):
    """Every case whose name contains `only`: (name, buckets, failure or None) for each."""
    cases = [(c, mb, first) for c in CASES for mb, first in c[3] if only in case_name(c[0], mb, first)]
    if not cases:
        return []
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    results = []
    try:
        for (name, keys, make, _), mb, first in cases:
            label = case_name(name, mb, first)
            ours = resilab_plan(run, work, label, keys, mb, first)
            initial, rebuilt = ddp_plans(make, mb, first)
            failure = None
            if len(initial) != 1 or sorted(initial[0]) != sorted(n for b in rebuilt for n in b):
                failure = f"DDP's first iteration was expected to reduce every gradient in one bucket, not {len(initial)}"
            failure = failure or first_difference(ours, rebuilt)
            results.append((label, [len(b) for b in rebuilt], failure))
    finally:
        dist.destroy_process_group()
    return results


if __name__ == "__main__":
    raise SystemExit("run scripts/ddp-check.sh --only buckets")
