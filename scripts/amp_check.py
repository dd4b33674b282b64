#!/usr/bin/env python3
"""resilab's mixed precision (train.precision) against PyTorch's autocast, step by step.

Each check trains the ddp check's ResNet-8 (width 1/4, BatchNorm, SGD with momentum, one
worker) from weights made here, in resilab with `train.precision = "bf16"` or `"fp16"`
(checkpoint every step), and then, before each step, loads resilab's state of the step before
into PyTorch and takes the same step on the same recorded batch under
`torch.autocast("cpu", dtype=...)`, with `torch.amp.GradScaler("cpu")` for fp16 (its scale and
growth count taken from resilab's checkpoint). Weights, BatchNorm buffers and momentum are
compared with resilab's state after the step; for fp16 also the scale after the step, the
growth count, and whether the step was skipped (resilab's metrics.csv `overflow_steps` against
whether GradScaler called `optimizer.step`). `amp-fp16-overflow` starts at a scale of 2^24 and
grows every 2 clean steps, so that steps overflow, are skipped and the scale backs off.

Two PyTorch references per check:

- `autocast`: autocast as it is, except that a convolution's backward pass accumulates in
  float32 and rounds once (a custom autograd function around the same forward kernel). PyTorch
  2.9's CPU convolution without oneDNN's bf16/fp16 kernels (any CPU without AVX-512-BF16/FP16 or
  AMX) runs the backward per sample and accumulates the weight gradient in the half format,
  rounding after each sample (checked here bit for bit), and sums its input gradient's columns in
  the half format too; a GPU's cuDNN, oneDNN's kernels, and docs/precision.md ("products
  accumulate in float32") round once. This is the reference the check holds resilab to.
- `autocast-cpu`: autocast exactly as PyTorch runs it on this CPU, held to the same bounds (the
  BatchNorm means come from the forward pass, which the two references share); its gradients
  differ more (reported: bf16 6.7e-3 against 8.4e-4).

The comparison. Both sides start each step from the same state. A half-format value that rounds
the same way on both sides is bit-identical up to float32 reassociation (about 2^-23
relative); one whose float32 value lies within that noise of a rounding boundary rounds to the
neighbour on one side (one unit, 2u: 2^-7 relative for bf16, whose unit roundoff u is 2^-8;
2^-10 for fp16, u = 2^-11), and everything downstream of it moves: a flipped logit changes
the loss gradient of its image, and with it every gradient of that image by about a unit. fp16,
with 8 times finer units, flips 8 times as often. So the largest difference of a tensor (the
ddp check's measure) is honestly several units wherever a flip occurs, as large as the
difference an op rounded in the wrong format makes (measured: bf16 momentum 9e-2 honest against
2.6e-1 to 3.6e-1 mutated; fp16 8.5e-2 against 1.5e-1): it is bounded only as a sanity check
(MAX_REL). What tells them apart is the forward pass's BatchNorm batch means (each recovered from
the running mean before and after the step): a flip moves one element of a channel's mean, and
a wrong rounding moves every element of every channel it reaches by up to u, so its effect on
the means is coherent and larger. The check bounds the median over a check's steps of their
relative L2 difference by u/20 (2.0e-4 for bf16, 2.4e-5 for fp16; measured, docs/precision.md:
honest at most u/32, the mutations at least u/11). The gradients' relative L2 difference is
reported too (honest bf16 8e-4 against 8e-2 mutated; fp16 1e-2 against 2.5e-2), not bounded.
fp16's scale, growth count and skipped steps must agree exactly.

A mutation (`--mutate NAME`) changes the PyTorch side by one rounding: `bn-fp32` keeps
BatchNorm's output in float32 (as if it were on autocast's float32 list, so the residual
addition is float32 too); `conv-fp32` runs layer1.0.conv1 in float32 (input, weight and output
unrounded). Without `--mutate` the check also runs every mutation against the same resilab
runs and fails if one of them passes (the self-test CI runs). Run it through
scripts/amp-check.sh, which provides PyTorch, h5py and safetensors.
"""

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddp_check as ddp  # noqa: E402  (its imports report a missing module as the ddp check does)
from ddp_check import LR, MOMENTUM, WEIGHT_DECAY, Check, config_text, load_state, make_model, read_worker, rel_diff, torch_state, write_cifar  # noqa: E402

import h5py  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BN_MOMENTUM = 0.1  # PyTorch's and resilab's BatchNorm momentum (the new batch statistic's weight)

# Unit roundoff u of each half format (half the distance from 1 to the next value).
FORMATS = {"bf16": (torch.bfloat16, 2.0 ** -8), "fp16": (torch.float16, 2.0 ** -11)}
# The bounds (see the docstring). BN_MEAN_UNITS: the median over a check's steps of the BatchNorm
# batch means' relative difference (L2 over every channel of every BatchNorm) is at most
# u / BN_MEAN_UNITS. MAX_REL: no tensor differs by more than this (relative to its largest value).
BN_MEAN_UNITS = 20
MAX_REL = 0.25
MUTATIONS = ("bn-fp32", "conv-fp32")


@dataclass
class AmpCheck:
    name: str
    fmt: str
    steps: int
    scale: dict = None  # [train.loss_scale] (fp16)

    def config(self, data_dir):
        base = config_text(Check(self.name, 1, self.steps), data_dir)
        if "[train]\n" not in base:
            die("ddp_check.config_text has no [train] table any more: update amp_check.py")
        text = base.replace("[train]\n", f'[train]\nprecision = "{self.fmt}"\nlog_every = 1\n')
        if self.scale:
            text += "[train.loss_scale]\n" + "".join(f"{k} = {v}\n" for k, v in self.scale.items())
        return text


CHECKS = [
    AmpCheck("amp-bf16", "bf16", 8),
    AmpCheck("amp-fp16", "fp16", 8),
    AmpCheck("amp-fp16-overflow", "fp16", 10, {"init": float(2 ** 24), "growth_interval": 2}),
]


def die(message, code=2):
    print(f"amp-check: {message}", file=sys.stderr)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# The PyTorch side


class Conv32(torch.autograd.Function):
    """PyTorch's half-precision convolution forward; a backward that accumulates in float32
    and rounds the input and weight gradients once (cuDNN's and oneDNN's arithmetic)."""

    @staticmethod
    def forward(ctx, x, w, stride, padding):
        ctx.save_for_backward(x, w)
        ctx.conv = (stride, padding)
        return F.conv2d(x, w, None, stride, padding)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        stride, padding = ctx.conv
        g, xf, wf = gy.float(), x.float(), w.float()
        gx = torch.nn.grad.conv2d_input(xf.shape, wf, g, stride, padding).to(x.dtype)
        gw = torch.nn.grad.conv2d_weight(xf, wf.shape, g, stride, padding).to(w.dtype)
        return gx, gw, None, None


def patch(model, dtype, reference, mutate):
    """The model's convolutions and BatchNorms as the reference and the mutation want them."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d) and m.bias is None:
            if mutate == "conv-fp32" and name == "layer1.0.conv1":
                def fp32(x, m=m):
                    with torch.autocast("cpu", enabled=False):
                        return F.conv2d(x.float(), m.weight, None, m.stride, m.padding)
                m.forward = fp32
            elif reference == "autocast":
                # autocast's casts, then the float32-accumulating backward.
                m.forward = lambda x, m=m: Conv32.apply(x.to(dtype), m.weight.to(dtype), m.stride, m.padding)
        elif isinstance(m, torch.nn.BatchNorm2d) and mutate == "bn-fp32":
            m.forward = lambda x, m=m: F.batch_norm(x.float(), m.running_mean, m.running_var, m.weight, m.bias, True, m.momentum, m.eps)


def checkpoint(run, step):
    """resilab's worker file holding the state after `step` (0: the imported weights)."""
    return (run.parent / "init" / "step-00000000" if step == 0 else run / "checkpoints" / f"step-{step:08d}") / "worker-0.h5"


def scaler_state(path, check):
    """(scale, growth count) of resilab's loss scaler in a worker file; the configured start
    for the imported weights, which carry none."""
    with h5py.File(path, "r") as f:
        if "train_state/loss_scale" in f:
            return float(f["train_state/loss_scale"][0]), int(f["train_state/growth_tracker"][()])
    return float((check.scale or {}).get("init", 2.0 ** 16)), 0


def torch_step(check, run, step, batch, reference, mutate):
    """PyTorch's step from resilab's state before `step`: (state after, loss, scaler after,
    whether the optimizer stepped)."""
    dtype = FORMATS[check.fmt][0]
    model = make_model().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    load_state(model, opt, checkpoint(run, step - 1))
    patch(model, dtype, reference, mutate)
    x, y = batch
    with torch.autocast("cpu", dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    stepped = []
    inner = opt.step
    opt.step = lambda *a, **k: (stepped.append(True), inner(*a, **k))[1]
    if check.fmt == "fp16":
        scale, tracker = scaler_state(checkpoint(run, step - 1), check)
        cfg = check.scale or {}
        scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=int(cfg.get("growth_interval", 2000)))
        scaler.load_state_dict({**scaler.state_dict(), "scale": scale, "_growth_tracker": tracker})
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        after = (float(scaler.get_scale()), int(scaler.state_dict()["_growth_tracker"]))
    else:
        loss.backward()
        opt.step()
        after = None
    return torch_state(model, opt), loss.item(), after, bool(stepped)


# ---------------------------------------------------------------------------------------------
# The comparison


def rel_l2(ours, theirs, before, pick, derive):
    """The relative L2 difference, over every tensor `pick` selects, of `derive(after, before)`."""
    num = den = 0.0
    for key in sorted(k for k in ours if pick(k)):
        a = derive(ours[key], before.get(key, 0.0))
        b = derive(theirs[key].reshape(ours[key].shape), before.get(key, 0.0))
        num += float(np.sum((a.astype(np.float64) - b) ** 2))
        den += float(np.sum(b.astype(np.float64) ** 2))
    return (num / den) ** 0.5 if den > 0 else (0.0 if num == 0 else float("inf"))


def batch_means(after, before):
    """A BatchNorm's batch mean from its running mean before and after the step."""
    return (after - (1 - BN_MOMENTUM) * before) / BN_MOMENTUM


def gradients(after, before):
    """The step's gradient plus weight decay, from the momentum buffer before and after it."""
    return after - MOMENTUM * before


def compare(check, run, samples, losses, overflows, data, reference, mutate):
    """Every step of one check against one PyTorch reference: rows (measure: (value, step,
    tensor)) and the failures."""
    u = FORMATS[check.fmt][1]
    worst, failures, bn_means, grads = {}, [], [], []
    images, labels = data
    for step in range(1, check.steps + 1):
        idx = torch.tensor(samples[step][0])
        theirs, loss, scaler, stepped = torch_step(check, run, step, (images[idx], labels[idx]), reference, mutate)
        ours, before = read_worker(checkpoint(run, step)), read_worker(checkpoint(run, step - 1))
        where = f"{check.name} ({reference}{', mutation ' + mutate if mutate else ''}) step {step}"
        if set(ours) != set(theirs):
            failures.append(f"{where}: tensors differ: resilab only {sorted(set(ours) - set(theirs))[:3]}, PyTorch only {sorted(set(theirs) - set(ours))[:3]}")
            continue
        for key in ours:
            d, same = rel_diff(ours[key], theirs[key].reshape(ours[key].shape))
            kind = ddp.kind_of(key)
            worst[kind] = max(worst.get(kind, (0.0, 0, "")), (d, step, key.split(":", 1)[1]))
            if not same:
                failures.append(f"{where}: {key}: NaN or Inf at other places than PyTorch's")
            elif d > MAX_REL:
                failures.append(f"{where}: {key} differs by {d:.2e} (relative), above {MAX_REL}")
        bn_means.append(rel_l2(ours, theirs, before, lambda k: k.endswith("running_mean"), batch_means))
        if stepped and not overflows[step]:
            grads.append(rel_l2(ours, theirs, before, lambda k: k.startswith("momentum:"), gradients))
        worst["loss"] = max(worst.get("loss", (0.0, 0, "")), (abs(loss - losses[step]), step, "loss"))
        if check.fmt == "fp16":
            ours_scaler = scaler_state(checkpoint(run, step), check)
            if ours_scaler != scaler or overflows[step] != (not stepped):
                failures.append(f"{where}: loss scaler: resilab scale {ours_scaler[0]:g}, growth count {ours_scaler[1]}, "
                                f"skipped {overflows[step]}; GradScaler {scaler[0]:g}, {scaler[1]}, skipped {not stepped}")
    worst["bn_mean"] = (float(np.median(bn_means)), "median", "all BatchNorm means")
    if grads:
        worst["grad"] = (float(np.median(grads)), "median", "all gradients")
    if worst["bn_mean"][0] > u / BN_MEAN_UNITS:
        failures.append(f"{check.name} ({reference}{', mutation ' + mutate if mutate else ''}): the BatchNorm batch means differ by "
                        f"{worst['bn_mean'][0]:.2e} (relative L2, median over the steps), above u/{BN_MEAN_UNITS} = {u / BN_MEAN_UNITS:.1e}")
    return worst, failures


def resilab_run(binary, check, work, init):
    """Trains the check in resilab: (run directory, samples by step, loss by step, skipped by step)."""
    check_dir = work / check.name
    check_dir.mkdir(parents=True)
    (check_dir / "run.toml").write_text(check.config(work / "cifar"))
    ddp.resilab(binary, "import", init, "--config", check_dir / "run.toml", "--out", check_dir / "init")
    ddp.resilab(binary, "train", "--config", check_dir / "run.toml", "--resume", check_dir / "init", "--out", check_dir / "run",
                "--quiet", "--record-samples", "--golden-dir", work / "golden")
    run = check_dir / "run"
    samples = {}
    for line in (run / "samples.csv").read_text().splitlines()[1:]:
        step, worker, _, sample = map(int, line.split(","))
        samples.setdefault(step, {}).setdefault(worker, []).append(sample)
    rows = [line.split(",") for line in (run / "metrics.csv").read_text().splitlines()]
    col = {name: i for i, name in enumerate(rows[0])}
    losses = {int(r[col["step"]]): float(r[col["loss"]]) for r in rows[1:]}
    overflows = {int(r[col["step"]]): r[col["overflow_steps"]] not in ("", "0") for r in rows[1:]}
    if sorted(losses) != list(range(1, check.steps + 1)):
        die(f"{check.name}: metrics.csv has rows for steps {sorted(losses)}, expected one per step (log_every = 1)")
    return run, samples, losses, overflows


# ---------------------------------------------------------------------------------------------
# The driver


MEASURES = {"weights": "weights_max_rel", "buffers": "buffers_max_rel", "momentum": "momentum_max_rel",
            "bn_mean": "bn_mean_rel_l2_median", "grad": "grad_rel_l2_median", "loss": "loss_abs_diff"}


def bound_of(check, reference, measure):
    """The bound a measure is held to (NaN: reported only)."""
    if measure == "bn_mean":
        return FORMATS[check.fmt][1] / BN_MEAN_UNITS
    return MAX_REL if measure in ("weights", "buffers", "momentum") else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resilab", type=Path, default=ddp.ROOT / "target" / "release" / "resilab", help="the resilab binary")
    ap.add_argument("--work", type=Path, required=True, help="an empty scratch directory")
    ap.add_argument("--out", type=Path, help="write the measured differences here (CSV)")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this text (amp-bf16, amp-fp16, amp-fp16-overflow)")
    ap.add_argument("--mutate", choices=MUTATIONS, help="change the PyTorch side by one rounding: the check must fail")
    args = ap.parse_args()
    if not args.resilab.is_file():
        die(f"{args.resilab} is not a file: build resilab first (cargo build --release) or pass --resilab")
    if args.work.exists() and any(args.work.iterdir()):
        die(f"{args.work} is not empty: pass a new or empty scratch directory")
    checks = [c for c in CHECKS if args.only in c.name]
    if not checks:
        die(f"--only {args.only!r} names no check: they are {', '.join(c.name for c in CHECKS)}")
    torch.set_num_threads(1)
    t0 = time.time()
    work = args.work.resolve()
    data = write_cifar(work / "cifar", train=640, test=64)
    torch.manual_seed(0)
    init = {k: v for k, v in make_model().state_dict().items() if not k.endswith("num_batches_tracked")}
    safetensors.torch.save_file(init, work / "init.safetensors")
    rows, failures, uncaught = [], [], []
    for check in checks:
        run, samples, losses, overflows = resilab_run(args.resilab, check, work, work / "init.safetensors")
        skipped = sum(overflows.values())
        for reference in ("autocast", "autocast-cpu"):
            worst, f = compare(check, run, samples, losses, overflows, data, reference, args.mutate)
            failures += f
            rows += [(check.name, reference, args.mutate or "", MEASURES[k], *w, bound_of(check, reference, k)) for k, w in sorted(worst.items())]
        if args.mutate is None:
            for mutation in MUTATIONS:
                worst, f = compare(check, run, samples, losses, overflows, data, "autocast", mutation)
                rows += [(check.name, "autocast", mutation, MEASURES[k], *w, bound_of(check, "autocast", k)) for k, w in sorted(worst.items())]
                if not f:
                    uncaught.append(f"{check.name}: mutation {mutation} passes the check")
        print(f"amp-check: {check.name}: compared, {skipped} of {check.steps} steps skipped by the loss scaler ({time.time() - t0:.0f} s)", file=sys.stderr)
    report(rows, args.out)
    for f in failures[:20]:
        print(f"amp-check: MISMATCH {f}", file=sys.stderr)
    for u in uncaught:
        print(f"amp-check: UNCAUGHT {u}", file=sys.stderr)
    if failures:
        die(f"{len(failures)} difference(s) from PyTorch's autocast beyond the bounds" + (f" (mutation {args.mutate})" if args.mutate else ""), 1)
    if uncaught:
        die(f"{len(uncaught)} mutation(s) not caught: the comparison is too loose", 1)
    print(f"amp-check: resilab's bf16 and fp16 agree with torch.autocast {torch.__version__}, and every mutation is caught ({time.time() - t0:.0f} s)")


def report(rows, out):
    header = ("check", "reference", "mutation", "measure", "max_value", "step", "tensor", "bound")
    print(f"{'check':<18} {'reference':<12} {'mutation':<9} {'measure':<17} {'max':>9} {'bound':>9}  step  tensor")
    for check, ref, mut, measure, v, step, tensor, bound in rows:
        print(f"{check:<18} {ref:<12} {mut or '-':<9} {measure:<17} {v:9.2e} {bound:9.2e}  {step:>6}  {tensor}")
    if out:
        ddp.write_rows(out, header, rows, (torch.__version__, ddp.revision()))


if __name__ == "__main__":
    main()
