"""The published way of running a checkpoint-alteration campaign, as the baseline of
bench/campaign.sh: one PyTorch process per run, with the checkpoint altered through h5py.

Per run, as the studies did it:
  1. copy the base checkpoint (HDF5, written once by ``--make-base``) and flip ``--flips`` random
     bits of [first_bit, last_bit] in it with h5py, one element at a time (the published
     injector's attempt loop, bench/inject_h5py.py);
  2. start a fresh Python process that imports PyTorch, builds the model, loads the altered
     checkpoint through h5py, trains ``--steps`` steps of batch ``--batch`` (SGD, momentum 0.9)
     and evaluates ``--test-images`` images; NaN/Inf/extreme values are checked after the load
     and after every step, and a run whose weights became NaN/Inf stops there (as resilab's
     runs do), unless ``--full-length`` asks for every step of every run (a fixed run length).
``--jobs`` runs go at once (each process with ``--threads`` threads), like resilab's worker
processes. Prints one JSON line: runs, seconds, runs per hour, and the seconds the run processes
spent in training steps and in evaluation (the rest is process start, imports and h5py).

    python bench/campaign_torch.py --arch resnet --depth 8 --width 0.5 --runs 24 --jobs 2
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def model_args(a):
    return ["--arch", a.arch, "--depth", str(a.depth), "--width", str(a.width),
            "--image-size", str(a.image_size), "--threads", str(a.threads)]


def build_model(a):
    import torch
    sys.path.insert(0, HERE)
    from torch_models import build
    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    return build(a.arch, a.depth, a.width, True, in_channels=3, image_size=a.image_size, num_classes=10)


def save_h5(model, path):
    import h5py
    with h5py.File(path, "w") as f:
        for name, t in model.state_dict().items():
            if t.dtype.is_floating_point:
                f.create_dataset("/model/" + name.replace(".", "/"), data=t.numpy())


def load_h5(model, path):
    import h5py
    import torch
    state = model.state_dict()
    with h5py.File(path, "r") as f:
        for name in state:
            key = "/model/" + name.replace(".", "/")
            if key in f:
                state[name] = torch.from_numpy(f[key][()])
    model.load_state_dict(state)


def make_base(a):
    """Trains the base model a few steps and writes it as HDF5 (once per campaign)."""
    import torch
    import torch.nn.functional as F
    model = build_model(a)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for _ in range(a.base_steps):
        x = torch.randn(a.batch, 3, a.image_size, a.image_size, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    save_h5(model, a.base)


def one_run(a):
    """A single run's training process (started once per run)."""
    import torch
    import torch.nn.functional as F
    model = build_model(a)
    load_h5(model, a.checkpoint)

    def bad():
        for p in model.state_dict().values():
            if p.dtype.is_floating_point and (not torch.isfinite(p).all() or p.abs().max() > 1e10):
                return True
        return False

    nev = bad()
    collapsed = False
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(a.seed)
    model.train()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        if collapsed and not a.full_length:
            break
        x = torch.randn(a.batch, 3, a.image_size, a.image_size, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if not torch.isfinite(loss) or bad():
            nev = True
            collapsed = not torch.isfinite(loss) or any(
                not torch.isfinite(p).all() for p in model.state_dict().values() if p.dtype.is_floating_point)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, a.test_images, 250):
            n = min(250, a.test_images - i)
            x = torch.randn(n, 3, a.image_size, a.image_size, generator=g)
            y = torch.randint(0, 10, (n,), generator=g)
            correct += (model(x).argmax(1) == y).sum().item()
    eval_s = time.perf_counter() - t0
    print(json.dumps({"nev": nev, "acc": correct / a.test_images, "train_s": train_s, "eval_s": eval_s}))


def campaign(a):
    work = tempfile.mkdtemp(prefix="resilab-torch-campaign-")
    base = os.path.join(work, "base.h5")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--make-base", "--base", base, "--base-steps", str(a.base_steps),
                    "--batch", str(a.batch)] + model_args(a), check=True)
    base_s = time.perf_counter() - t0

    def run(i):
        ckpt = os.path.join(work, f"run-{i}.h5")
        subprocess.run([sys.executable, os.path.join(HERE, "inject_h5py.py"), base, ckpt, "--flips", str(a.flips),
                        "--seed", str(1000 + i), "--first-bit", "0", "--last-bit", "31",
                        "--log", ckpt + ".jsonl"], check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([sys.executable, __file__, "--one-run", "--checkpoint", ckpt, "--seed", str(i),
                              "--steps", str(a.steps), "--batch", str(a.batch), "--test-images", str(a.test_images)]
                             + (["--full-length"] if a.full_length else []) + model_args(a), check=True, capture_output=True, text=True)
        os.remove(ckpt)
        return json.loads(out.stdout.strip().splitlines()[-1])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run, range(a.runs)))
    seconds = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "impl": "pytorch+h5py, one process per run", "arch": a.arch, "depth": a.depth, "width": a.width,
        "image_size": a.image_size, "flips": a.flips, "runs": a.runs, "jobs": a.jobs, "threads": a.threads,
        "steps": a.steps, "full_length": a.full_length, "batch": a.batch, "test_images": a.test_images, "seconds": seconds, "base_s": base_s,
        "runs_per_hour": 3600.0 * a.runs / seconds, "nev": sum(r["nev"] for r in results),
        # Inside the run processes, summed over runs: the training steps and the evaluation
        # (the rest of a run's share is process start, imports, h5py load and injection).
        "train_s": sum(r["train_s"] for r in results), "eval_s": sum(r["eval_s"] for r in results),
    }))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="resnet", choices=["resnet", "vgg", "alexnet"])
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--width", type=float, default=0.5)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--runs", type=int, default=24)
    p.add_argument("--flips", type=int, default=10)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--base-steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--test-images", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--full-length", action="store_true", help="train every step of every run, even after NaN")
    p.add_argument("--make-base", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--base", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    a = p.parse_args()
    random.seed(a.seed)
    if a.make_base:
        make_base(a)
    elif a.one_run:
        one_run(a)
    else:
        campaign(a)


if __name__ == "__main__":
    main()
