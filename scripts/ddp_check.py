#!/usr/bin/env python3
"""resilab's simulated workers against real torch.distributed training, step for step.

Every check trains the same ResNet-8 (width 1/4, BatchNorm) from the same weights on the same
images twice: once in resilab's simulation, once as real PyTorch processes talking over gloo.
Before each step every PyTorch rank loads what resilab's rank held after the step before (its
checkpoint), takes the step, and every parameter, BatchNorm buffer and momentum buffer of every
rank is compared with resilab's: each difference is that one step's float32 arithmetic.

- ddp / horovod: fault-free data parallelism (DistributedDataParallel with broadcast_buffers;
  Horovod's semantics with torch.distributed collectives: fused buckets summed, then scaled by
  1/N, no buffer broadcast, each replica keeping its own BatchNorm statistics), Horovod at 4 and
  at 3 ranks, where dividing by N is inexact and one step's average is held to Horovod's
  sum-then-scale bit for bit (scripts/horovod_probe.py), and with a gradient flip;
- ddp-free-4: DDP for 10 steps from resilab's first state without reloading it: the drift of two
  free-running trajectories, reported, not bounded;
- flip: one bit of one element of rank 1's gradient at step 10 (a finite change, and one that
  overflows the next step), flipped in PyTorch by a DDP communication hook before the average;
- buckets: DDP's own bucket plan, as its Reducer rebuilds it after the first iteration, against
  resilab's for every model family at two bucket sizes and at DDP's defaults
  (scripts/ddp_buckets.py);
- crash-*: rank 1 dies inside step 10, killed after its part in k of DDP's all-reduce buckets
  (DDP's own, of bucket_cap_mb, which must be resilab's), for k = 0, 1 and all but one, at 4
  and 8 ranks: the survivors' next all-reduce fails, they rebuild their gloo group and finish
  the step under lossy forward, rollback or checkpoint-restart, and a new rank 1 joins
  (scripts/rank_death.py); a negative control, resilab's lossy forward keeping one bucket too
  many, must fail;
- gpipe-*, 1f1b-4: resilab's GPipe over 2 and 4 stages and its 1F1B over 4 against
  torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B on the same split and
  micro-batches;
- pipe-crash-4-*: stage 1 of a 4-stage GPipe killed in step 10's forward passes: the survivors'
  pipeline messages fail, they rebuild the group with a new process for the dead stage, and
  every stage reloads the checkpoint and redoes the step, which is what resilab does under
  each strategy (a stage has no replica); a negative control, survivors that keep the dead
  step's BatchNorm updates, must fail (scripts/stage_death.py).

Both sides start from weights made here and imported with `resilab import`, and read the
per-rank batches resilab recorded (`train --record-samples`). Run it through
scripts/ddp-check.sh, which provides PyTorch, h5py and safetensors.
"""

import argparse
import copy
import csv
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def die(message):
    print(f"ddp-check: {message}", file=sys.stderr)
    sys.exit(2)


try:
    import h5py
    import numpy as np
    import safetensors.torch
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    die(f"the Python module {e.name} is missing: run `bash scripts/ddp-check.sh`, which installs what the check needs into PyTorch's virtual environment")

sys.path.insert(0, str(ROOT / "docs" / "pytorch"))
sys.path.insert(0, str(ROOT / "scripts"))
import ddp_buckets  # noqa: E402
import horovod_probe  # noqa: E402
import rank_death  # noqa: E402
import resilab_models  # noqa: E402

# The checkpoint layout this script reads (docs/checkpoint-format.md).
FORMAT_VERSION = 3
PER_RANK = 8  # images per rank and step
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4
MEAN, STD = 0.5, 0.25
# Four all-reduce buckets for this model (DDP's bucket_cap_mb; each closes once it holds 4 KiB
# or more), so that a crash can fall between them.
BUCKET_MB = 0.004
BUCKETS = 4
CRASH_STEP, CRASH_STEPS = 10, 12
PROBE_STEP = 5  # the step whose gradients horovod-3 logs
# The bounds, from float32 reassociation (see docs/parallel.md, "Checked against PyTorch"): an
# average of N gradients summed in another order differs by a few ulps (1e-7 relative) of its
# largest terms; the differences grow through the steps that follow.
BOUND = 1e-5
# Memory one PyTorch rank takes (measured: about 330 MB resident), for the host check.
RANK_BYTES = 400 << 20


@dataclass
class Check:
    """One comparison: a resilab run and the PyTorch job that should compute the same."""

    name: str
    world: int
    steps: int
    sync: str = "ddp"
    mode: str = "data"
    fault: str = ""
    strategy: str = "none"
    crash_k: int = -1  # buckets complete at the crash (-1: no crash)
    stages: int = 1
    first: int = 1  # the first step compared (the steps before a fault are the fault-free check's)
    split_at: list = field(default_factory=list)
    micro_batches: int = 1
    schedule: str = "gpipe"
    probe: bool = False  # log one step's gradients before and after the all-reduce (horovod_probe.py)
    free: bool = False  # PyTorch runs free from the first step: the drift is reported, not bounded

    @property
    def batch(self):
        return PER_RANK * (self.world if self.mode == "data" else 4)


# ---------------------------------------------------------------------------------------------
# The data and the resilab side


def write_cifar(directory, train, test, seed=0):
    """A CIFAR-10-format dataset (five training files and a test file) with a learnable pattern."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)

    def records(n):
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        for c in range(10):
            band = slice(c * 300, c * 300 + 300)
            pixels[labels == c, band] = pixels[labels == c, band] // 4 + 180
        return np.concatenate([labels[:, None], pixels], 1)

    per_file = train // 5
    for i in range(1, 6):
        records(per_file).tofile(directory / f"data_batch_{i}.bin")
    records(test).tofile(directory / "test_batch.bin")
    raw = b"".join((directory / f"data_batch_{i}.bin").read_bytes() for i in range(1, 6))
    data = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3073)
    images = torch.from_numpy(data[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32))
    # resilab's normalisation in float32: (p / 255 - mean) * (1 / std).
    images = (images / 255.0 - MEAN) * (1.0 / STD)
    return images, torch.from_numpy(data[:, 0].astype(np.int64))


def config_text(check, data_dir):
    lines = [
        f'name = "{check.name}"',
        "seed = 1",
        "[data]",
        'source = "cifar10"',
        f'path = "{data_dir}"',
        f"normalize = {{ mean = [{MEAN}, {MEAN}, {MEAN}], std = [{STD}, {STD}, {STD}] }}",
        "[model]",
        'arch = "resnet"',
        "depth = 8",
        "width = 0.25",
        "[train]",
        f"steps = {check.steps}",
        f"batch_size = {check.batch}",
        "[optimizer]",
        f"lr = {LR}",
        f"momentum = {MOMENTUM}",
        f"weight_decay = {WEIGHT_DECAY}",
        "[recovery]",
        f'strategy = "{check.strategy}"',
        "[parallel]",
    ]
    if check.mode == "data":
        lines += [f"workers = {check.world}", f'sync = "{check.sync}"', f"bucket_mb = {BUCKET_MB}"]
    else:
        lines += ['mode = "pipeline"', f"stages = {check.stages}", f"micro_batches = {check.micro_batches}",
                  f'schedule = "{check.schedule}"', f"split_at = {check.split_at}"]
    lines += ["[checkpoint]", "every_steps = 1", "keep_last = 0", check.fault]
    if check.probe:
        lines.append(horovod_probe.probe_faults(check.world, PROBE_STEP))
    return "\n".join(lines) + "\n"


def resilab(binary, *args):
    result = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        die(f"`resilab {' '.join(map(str, args))}` failed: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.returncode}")
    return result


def run_resilab(binary, check, work, data_dir, init):
    """Imports the initial weights into the check's configuration and trains from them."""
    d = work / check.name
    d.mkdir(parents=True)
    cfg = d / "run.toml"
    cfg.write_text(config_text(check, data_dir))
    resilab(binary, "import", init, "--config", cfg, "--out", d / "init")
    resilab(binary, "train", "--config", cfg, "--resume", d / "init", "--out", d / "run", "--quiet",
            "--record-samples", "--golden-dir", work / "golden")
    summary = json.loads((d / "run" / "summary.json").read_text())
    samples = {}
    for line in (d / "run" / "samples.csv").read_text().splitlines()[1:]:
        step, worker, _, sample = map(int, line.split(","))
        samples.setdefault(step, {}).setdefault(worker, []).append(sample)
    # A run writes faults.jsonl only when a fault struck (docs/faults.md, "The fault log").
    log = d / "run" / "faults.jsonl"
    faults = [json.loads(l) for l in log.read_text().splitlines() if l.strip()] if log.exists() else []
    return d / "run", summary, samples, faults


def read_worker(path):
    """Every tensor of a resilab worker file by PyTorch name: weights, buffers and momentum."""
    with h5py.File(path, "r") as f:
        version = int(f.attrs.get("format_version", 0))
        if version != FORMAT_VERSION:
            die(f"{path} has checkpoint format {version}, and this script reads format {FORMAT_VERSION} only: use the scripts/ddp_check.py of the same resilab revision as the binary")
        out = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.startswith(("model/", "optimizer/")):
                out[name] = np.asarray(obj[()], dtype=np.float32)

        f.visititems(visit)
    named = {}
    for path_, value in out.items():
        if path_.startswith("model/"):
            named["param:" + path_[len("model/"):].replace("/", ".")] = value
        elif path_.endswith("/momentum_buffer"):
            named["momentum:" + path_[len("optimizer/"):-len("/momentum_buffer")].replace("/", ".")] = value
    return named


# ---------------------------------------------------------------------------------------------
# The PyTorch side: one process per rank


def make_model():
    return resilab_models.resnet(depth=8, width=0.25, channels=3, classes=10)


def torch_state(model, opt, names=None):
    """Parameters, buffers and momentum by the names `read_worker` gives."""
    state = {}
    for name, t in model.state_dict().items():
        if not name.endswith("num_batches_tracked"):
            state["param:" + name] = t.detach().clone().numpy()
    by_param = {p: n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            buf = opt.state.get(p, {}).get("momentum_buffer")
            if buf is not None:
                state["momentum:" + by_param[p]] = buf.detach().clone().numpy()
    if names is not None:
        state = {k: v for k, v in state.items() if k.split(":", 1)[1] in names}
    return state


def respawn(model, opt, rank, src, dst):
    """Rank `dst` becomes a copy of rank `src` (parameters, buffers and momentum), as a worker
    respawned from a healthy replica: sent with a broadcast, kept by `dst` only."""
    tensors = list(model.state_dict().values()) + [opt.state[p]["momentum_buffer"] for g in opt.param_groups for p in g["params"]]
    for t in tensors:
        received = t.clone()
        dist.broadcast(received, src)
        if rank == dst:
            t.copy_(received)


class Hook:
    """A DDP communication hook that applies what resilab's check does to the average: DDP's
    division by N before the sum and a bit flip in one rank's gradient. It records which
    parameters each of DDP's buckets holds."""

    def __init__(self, rank, world, names):
        self.rank, self.world, self.names = rank, world, names
        self.flip = None  # (param name, index, xor mask), applied once
        self.seen = {}  # DDP's bucket index: its parameters' names

    def on_bucket(self, bucket):
        buffer = bucket.buffer()
        lo, hi = buffer.data_ptr(), buffer.data_ptr() + buffer.numel() * 4
        self.seen[bucket.index()] = [self.names[p] for p in bucket.parameters()]
        for p, g in zip(bucket.parameters(), bucket.gradients()):
            assert lo <= g.data_ptr() < hi, "a DDP gradient view outside its bucket"
            name = self.names[p]
            if self.flip and self.flip[0] == name:
                flip_bits(g, self.flip[1], self.flip[2])
                self.flip = None
            g.div_(self.world)
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda f: f.value()[0])


def comm_hook(hook, bucket):
    return hook.on_bucket(bucket)


def flip_bits(tensor, index, mask):
    """XORs `mask` into the float32 bits of `tensor`'s element `index` (flat), in place."""
    tensor.view(-1).view(torch.int32)[index] ^= mask


def bucket_all_reduce(sources, targets, divide_by=None, scale_by=None):
    """One fused all-reduce over the current group: `sources` flattened, divided by `divide_by`
    first (DDP), summed, then times `scale_by` (Horovod), and written into `targets` in order."""
    flat = torch.cat([t.reshape(-1) for t in sources])
    if divide_by is not None:
        flat.div_(divide_by)
    dist.all_reduce(flat)
    if scale_by is not None:
        flat.mul_(scale_by)
    offset = 0
    for t in targets:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def horovod_allreduce(model, buckets, world):
    """Horovod's averaging: each fusion buffer (resilab's buckets) summed, then scaled by 1/N."""
    params = dict(model.named_parameters())
    for bucket in buckets:
        grads = [params[n].grad for n in bucket]
        bucket_all_reduce(grads, grads, scale_by=1.0 / world)


def dp_rank(rank, world, plan, port):
    """Runs every data-parallel check of one world size on this rank."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    images, labels = torch.load(plan["data"])
    for c in plan["checks"]:
        model = make_model()
        model.train()
        names = {p: n for n, p in model.named_parameters()}
        hook = Hook(rank, world, names)
        net = model
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        if c["sync"] == "ddp":
            net = DDP(model, broadcast_buffers=True, bucket_cap_mb=BUCKET_MB)
            if c["hooked"]:
                net.register_comm_hook(hook, comm_hook)
            # DDP's first iteration reduces in one bucket; the Reducer then rebuilds its buckets
            # in the order the gradients became ready. One iteration first, so that every
            # compared step runs on the rebuilt plan (each step reloads resilab's state).
            attempt(c, c["first"], rank, net, images, labels)
            opt.zero_grad(set_to_none=True)
        train_dp(rank, world, c, net, model, opt, hook, images, labels)
    dist.destroy_process_group()


def batch_of(c, step, rank, images, labels):
    idx = torch.tensor(c["samples"][str(step)][str(rank)])
    return images[idx], labels[idx]


def attempt(c, step, rank, net, images, labels):
    x, y = batch_of(c, step, rank, images, labels)
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()


def snapshot(model, opt):
    """A copy of the model's and the optimizer's state (a rollback's copy)."""
    return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())


def state_dir(c, step):
    """The resilab checkpoint holding the state after `step` (0: the imported weights)."""
    return Path(c["imported"] if step == 0 else c["checkpoints"]) / f"step-{step:08d}"


def load_state(model, opt, path):
    """resilab's state in a worker file into the PyTorch model and optimizer, in place: each
    PyTorch step starts from the state resilab had before it (teacher forcing). A pipeline
    stage's file holds its own blocks only."""
    state = read_worker(path)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if "param:" + name in state:
                t.copy_(torch.from_numpy(state["param:" + name]).view_as(t))
    for name, p in model.named_parameters():
        if "momentum:" + name in state:
            opt.state[p]["momentum_buffer"] = torch.from_numpy(state["momentum:" + name]).view_as(p).clone()


def train_dp(rank, world, c, net, model, opt, hook, images, labels):
    out = Path(c["out"])
    for step in range(c["first"], c["steps"] + 1):
        if step == c["first"] or not c["free"]:
            load_state(model, opt, state_dir(c, step - 1) / f"worker-{rank}.h5")
        if c.get("flip") and step == c["flip"]["step"] and rank == c["flip"]["worker"]:
            hook.flip = tuple(c["flip"]["what"])
        if c["sync"] == "horovod":
            attempt(c, step, rank, model, images, labels)
            if hook.flip:  # Horovod has no hook: the flip goes into the gradient before the sum
                name, index, mask = hook.flip
                flip_bits(dict(model.named_parameters())[name].grad, index, mask)
                hook.flip = None
            horovod_allreduce(model, c["buckets"], world)
        else:
            hook.seen.clear()
            attempt(c, step, rank, net, images, labels)
            if c["hooked"]:
                seen = [hook.seen[i] for i in sorted(hook.seen)]
                assert seen == c["buckets"], f"{c['name']}, step {step}: DDP's buckets hold {seen}, resilab's {c['buckets']}"
        opt.step()
        opt.zero_grad(set_to_none=True)
        (out / f"step-{step}").mkdir(parents=True, exist_ok=True)
        np.savez(out / f"step-{step}" / f"rank-{rank}.npz", **torch_state(model, opt))


def pipe_rank(rank, world, plan, port):
    """One pipeline stage of a GPipe or 1F1B check."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    images, labels = torch.load(plan["data"])
    c = plan["checks"][0]
    model = make_model()
    module = Blocks(model, c["stages"][rank])
    opt = torch.optim.SGD(module.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    schedule = pipeline_schedule(c, rank, world, model, module)
    for step in range(1, c["steps"] + 1):
        load_state(model, opt, state_dir(c, step - 1) / f"worker-{rank}.h5")
        pipe_step(c, step, rank, world, schedule, images, labels)
        opt.step()
        opt.zero_grad(set_to_none=True)
        save_stage(c, step, rank, model, opt)
    dist.destroy_process_group()


def pipeline_schedule(c, rank, world, model, module):
    """Stage `rank` of check `c`'s pipeline over the current process group: PyTorch's
    `PipelineStage` for `module` (the stage's blocks, in training mode) in a GPipe or 1F1B
    schedule."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    micro = c["batch"] // c["micro_batches"]
    shapes = stage_shapes(model, c["stages"], micro)
    stage = PipelineStage(module, rank, world, torch.device("cpu"),
                          input_args=torch.zeros(shapes[rank]), output_args=torch.zeros(shapes[rank + 1]))
    # PyTorch 2.9's first-step handshake sends an int64 into a float32 receive, which gloo
    # refuses (it only warms up NCCL's communicators): skipped, the schedule's own messages
    # carry everything.
    stage._get_init_p2p_neighbors_ops = lambda: []
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[c["schedule"]]
    module.train()
    return kind(stage, c["micro_batches"], loss_fn=torch.nn.functional.cross_entropy, scale_grads=True)


def pipe_step(c, step, rank, world, schedule, images, labels):
    """One step's passes of one stage: the batch resilab's pipeline read, split into
    micro-batches by the schedule; the first stage feeds the images, the last the labels."""
    idx = torch.tensor(c["samples"][str(step)]["0"])
    x, y = images[idx], labels[idx]
    if rank == 0:
        schedule.step(x)
    elif rank == world - 1:
        schedule.step(target=y)
    else:
        schedule.step()


def save_stage(c, step, rank, model, opt):
    """Stage `rank`'s blocks, their BatchNorm statistics and momentum after `step`."""
    names = set(n for b in c["stages"][rank] for n in Blocks.names(model, b))
    out = Path(c["out"]) / f"step-{step}"
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"rank-{rank}.npz", **torch_state(model, opt, names))


class Blocks(torch.nn.Module):
    """A run of the model's blocks (`stem`, `layer1.0`, ..., `classifier`), applied in order."""

    def __init__(self, model, blocks):
        super().__init__()
        self.blocks = torch.nn.ModuleList(model.get_submodule(b) for b in blocks)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x

    @staticmethod
    def names(model, block):
        sub = model.get_submodule(block)
        return [f"{block}.{n}" for n, t in sub.state_dict().items() if not n.endswith("num_batches_tracked")]


def stage_shapes(model, stages, micro):
    """The activation shape entering each stage, and the logits' shape, for a micro-batch."""
    probe = copy.deepcopy(model).eval()
    x = torch.zeros(micro, 3, 32, 32)
    shapes = [tuple(x.shape)]
    with torch.no_grad():
        for blocks in stages:
            for b in blocks:
                x = probe.get_submodule(b)(x)
            shapes.append(tuple(x.shape))
    return shapes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(fn, world, plan):
    """Runs `fn(rank, world, plan, port)` in `world` processes started from the fork server
    that has imported PyTorch (rank_death.fork_context)."""
    rank_death.fork_context()
    try:
        mp.start_processes(fn, args=(world, plan, free_port()), nprocs=world, join=True, start_method="forkserver")
    except ProcessException as e:
        die(f"a PyTorch rank of the {world}-rank job failed ({str(e).strip().splitlines()[-1]}); its error is printed above")


# ---------------------------------------------------------------------------------------------
# The comparison


def rel_diff(a, b):
    """The largest difference over the largest magnitude (finite values), and whether NaN and
    Inf sit at the same places."""
    same_nonfinite = all(np.array_equal(f(a), f(b)) for f in (np.isnan, np.isposinf, np.isneginf))
    fin = np.isfinite(a) & np.isfinite(b)
    if not fin.any():
        return 0.0, same_nonfinite
    scale = max(np.abs(b[fin]).max(), np.abs(a[fin]).max(), 1e-30)
    return float(np.abs(a[fin] - b[fin]).max() / scale), same_nonfinite


def kind_of(key):
    if key.startswith("momentum:"):
        return "momentum"
    return "buffers" if key.endswith(("running_mean", "running_var")) else "weights"


@dataclass
class Over:
    """A tensor beyond its bound in one step: for the ReLU allowance to judge."""

    key: str
    rank: int
    diff: float  # the largest difference over the largest magnitude
    bound: float
    ours: np.ndarray
    theirs: np.ndarray


@dataclass
class Results:
    """What comparisons found: the table's rows, notes, failures and the comparisons the ReLU
    allowance excused (EXCUSED_HEADER's columns)."""

    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    excused: list = field(default_factory=list)
    deaths: list = field(default_factory=list)  # DEATHS_HEADER's columns, one per crash check

    def __iadd__(self, other):
        for name in ("rows", "notes", "failures", "excused", "deaths"):
            getattr(self, name).extend(getattr(other, name))
        return self


EXCUSED_HEADER = ("check", "step", "tensor", "kind", "rank", "rel_diff", "bound", "elements_beyond", "closest_diff", "closest_torch_move")
DEATHS_HEADER = ("check", "ranks", "killed", "survivor_error", "detect_s", "rebuild_s", "replacement_start_s", "rejoin_s")


@dataclass
class Worst:
    """One check's largest difference of one tensor kind, with the comparisons the ReLU
    allowance excused: how many, and the largest of them."""

    diff: float = -1.0
    step: int = 0
    tensor: str = ""
    rank: int = 0
    bound: float = BOUND
    excused: int = 0
    excused_diff: float = 0.0

    def add(self, diff, step, key, rank, bound):
        if diff > self.diff:
            self.diff, self.step, self.tensor, self.rank, self.bound = diff, step, key.split(":", 1)[1], rank, bound


def compare(check, run_dir, torch_dir, ranks, plan, data):
    """Every step of every rank: the largest relative difference per tensor kind (rows), the
    notes, every failure, and each comparison PyTorch's own float32 sensitivity explains."""
    worst, explained, failures, excused = {}, [], [], []
    scale = flip_scale(plan, data)
    if scale > 1.0:
        flip = plan["flip"]
        explained.append(f"{check.name} step {flip['step']}: {flip['what'][0]}, hit by the flip, held to {BOUND * scale:.1e} "
                         f"(its element was 1/{scale:.0f} of the tensor's largest gradient; the flip keeps its relative difference)")
    drift = []
    for step in range(check.first, check.steps + 1):
        over = []
        drift.append(0.0)
        for rank in range(ranks):
            if check.mode == "data" and rank == 1 and step == CRASH_STEP and check.strategy in ("rollback", "lossy_forward"):
                continue  # the crashed process: what it held is gone, and it rejoins at the next step
            ours = read_worker(run_dir / "checkpoints" / f"step-{step:08d}" / f"worker-{rank}.h5")
            theirs = dict(np.load(torch_dir / f"step-{step}" / f"rank-{rank}.npz"))
            if set(ours) != set(theirs):
                failures.append(f"{check.name}: rank {rank}, step {step}: tensors differ: resilab only {sorted(set(ours) - set(theirs))[:3]}, PyTorch only {sorted(set(theirs) - set(ours))[:3]}")
                continue
            for key in ours:
                a, b = ours[key], theirs[key].reshape(ours[key].shape)
                d, same = rel_diff(a, b)
                bound = float("inf") if check.free else BOUND * (scale if hit(plan, step, key) else 1.0)
                drift[-1] = max(drift[-1], d)
                if not same:
                    failures.append(f"{check.name}: {key} on rank {rank} after step {step}: NaN or Inf at other places than PyTorch's")
                elif d > bound:
                    over.append(Over(key, rank, d, bound, a, b))
                    continue
                worst.setdefault(kind_of(key), Worst()).add(d, step, key, rank, bound)
        step_excused = []
        for o, why in zip(over, kink(check, plan, step, over, data)):
            w = worst.setdefault(kind_of(o.key), Worst())
            if why:
                step_excused.append((check.name, step, o.key.split(":", 1)[1], kind_of(o.key), o.rank, o.diff, o.bound, *why))
                w.excused += 1
                w.excused_diff = max(w.excused_diff, o.diff)
            else:
                w.add(o.diff, step, o.key, o.rank, o.bound)
                failures.append(f"{check.name}: {o.key} on rank {o.rank} after step {step} differs from PyTorch's by {o.diff:.2e} (relative), above the bound {o.bound:.1e}")
        if step_excused:
            top = max(step_excused, key=lambda e: e[5])
            explained.append(f"{check.name} step {step}: {len(step_excused)} tensors beyond the bound are within PyTorch's own float32 sensitivity "
                             f"at every element beyond it (the largest: {top[2]} on rank {top[4]}, {top[5]:.1e})")
            excused += step_excused
    if check.free:
        explained.append(f"{check.name}: free-running from resilab's state before step {check.first}, the largest difference after each step: "
                         + ", ".join(f"{d:.1e}" for d in drift) + " (reported, not bounded)")
    rows = [(check.name, kind, w.diff, w.step, w.tensor, w.rank, w.bound, w.excused, w.excused_diff) for kind, w in sorted(worst.items())]
    return Results(rows, explained, failures, excused)


def hit(plan, step, key):
    """Whether `key` is the tensor a gradient flip hit in `step` (its momentum and weight)."""
    flip = plan.get("flip")
    return bool(flip) and step == flip["step"] and key.split(":", 1)[1] == flip["what"][0]


def flip_scale(plan, data):
    """How much a gradient flip scales the relative rounding difference of the tensor it hits,
    in its step. The flip keeps the element's own relative difference, and after the flip the
    element is the tensor's largest; before it, the difference was relative to the tensor's
    largest gradient. So the bound grows by max|gradient| / |element|, both from rank's own
    gradient computed here from resilab's state before the step."""
    flip = plan.get("flip")
    if not flip:
        return 1.0
    images, labels = data
    model = model_at(plan, flip["step"], [state_dir(plan, flip["step"] - 1) / f"worker-{flip['worker']}.h5"], None)
    idx = torch.tensor(plan["samples"][str(flip["step"])][str(flip["worker"])])
    torch.nn.functional.cross_entropy(model(images[idx]), labels[idx]).backward()
    grad = dict(model.named_parameters())[flip["what"][0]].grad
    return max(1.0, float(grad.abs().max()) / max(abs(flip["old"]), 1e-30))


def kink(check, plan, step, over, data, trials=16):
    """For each tensor in `over`: (its elements beyond the bound, and at the one closest to its
    excuse, the difference in gradient units and PyTorch's own move there) when its difference
    is PyTorch's own float32 sensitivity, or None. PyTorch recomputes the step's gradient from resilab's state before it, `trials` more
    times with every parameter moved by -1, 0 or +1 ulp; where a ReLU input lies within
    rounding of zero, float32 cannot decide its gate, and the gradient jumps. A tensor is
    excused when at every element beyond its bound, PyTorch's own gradient moves by at least
    half of resilab's difference there. BatchNorm statistics come from the forward pass, which
    has no such jump: never excused."""
    verdicts = [None] * len(over)
    if all(kind_of(o.key) == "buffers" for o in over):
        return verdicts
    images, labels = data
    generator = torch.Generator().manual_seed(step)
    ref, spread = None, {}
    for trial in range(trials + 1):
        grads = step_gradients(check, plan, step, images, labels, generator if trial else None)
        if ref is None:
            ref = grads
            continue
        for name, g in grads.items():
            moved = (g - ref[name]).abs()
            spread[name] = torch.maximum(spread[name], moved) if name in spread else moved
    for i, o in enumerate(over):
        name = o.key.split(":", 1)[1]
        if kind_of(o.key) == "buffers" or name not in spread:
            continue
        fin = np.isfinite(o.ours) & np.isfinite(o.theirs)
        diff = np.where(fin, np.abs(o.ours - o.theirs), 0.0)
        beyond = diff > o.bound * max(np.abs(o.ours[fin]).max(), np.abs(o.theirs[fin]).max(), 1e-30)
        # A weight moves by lr times its momentum's change, and the momentum by the gradient's.
        moved = diff[beyond] / (LR if kind_of(o.key) == "weights" else 1.0)
        own = spread[name].numpy().reshape(diff.shape)[beyond]
        if (moved <= 2 * own).all():
            closest = int(np.argmax(moved / np.maximum(own, 1e-30)))
            verdicts[i] = (int(beyond.sum()), float(moved[closest]), float(own[closest]))
    return verdicts


def model_at(plan, step, files, generator):
    """A model in training mode with resilab's state from `files`, each parameter changed by -1,
    0 or +1 ulp at random when `generator` is given."""
    m = make_model()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for f in files:
        load_state(m, opt, f)
    if generator is not None:
        with torch.no_grad():
            for p in m.parameters():
                p.view(torch.int32).add_(torch.randint(-1, 2, p.shape, generator=generator, dtype=torch.int32))
    return m.train()


def step_gradients(check, plan, step, images, labels, generator):
    """The step's averaged gradient, computed in one process from resilab's state before it
    (each parameter changed by -1, 0 or +1 ulp at random with `generator`)."""
    before = state_dir(plan, step - 1)
    total = {}
    if check.mode == "pipeline":
        m = model_at(plan, step, [before / f"worker-{s}.h5" for s in range(check.stages)], generator)
        idx = torch.tensor(plan["samples"][str(step)]["0"])
        for x, y in zip(images[idx].chunk(check.micro_batches), labels[idx].chunk(check.micro_batches)):
            (torch.nn.functional.cross_entropy(m(x), y) / check.micro_batches).backward()
        return {n: p.grad.clone() for n, p in m.named_parameters()}
    # The step's average as the check's hook takes it: at a crash, buckets complete before it
    # over every rank, the others over the survivors (rank 1 left out).
    crash = check.crash_k >= 0 and step == CRASH_STEP and check.strategy != "checkpoint_restart"
    early = set(n for b in plan["buckets"][:check.crash_k if check.strategy == "lossy_forward" else 0] for n in b) if crash else None
    for rank in range(check.world):
        m = model_at(plan, step, [before / f"worker-{rank}.h5"], generator)
        idx = torch.tensor(plan["samples"][str(step)][str(rank)])
        torch.nn.functional.cross_entropy(m(images[idx]), labels[idx]).backward()
        for n, p in m.named_parameters():
            if early is None or n in early:
                total[n] = total.get(n, 0) + p.grad / check.world
            elif rank != 1:
                total[n] = total.get(n, 0) + p.grad / (check.world - 1)
    return total


# ---------------------------------------------------------------------------------------------
# The checks


def flip(bit):
    """A `[[fault]]` flipping bit `bit` of one element of rank 1's gradient in the crash step."""
    return (f'[[fault]]\ntarget = "gradients"\nat_step = {CRASH_STEP}\nworker = 1\nfirst_bit = {bit}\nlast_bit = {bit}\n'
            'locations_to_corrupt = ["gradients/layer2/0/conv1/weight"]')


def data_checks(world, buckets):
    checks = []
    if world == 4:
        # Bit 5 (reference numbering, 0 = sign) multiplies the element by 2^8 or 2^-8: training
        # goes on, finite. Bit 1, the exponent's top bit, multiplies a gradient below 2 by 2^128:
        # the next forward pass overflows, and NaN and Inf must appear at the same places.
        checks += [Check("ddp-4", 4, 20), Check("ddp-free-4", 4, 10, free=True), Check("horovod-4", 4, 20, sync="horovod"),
                   Check("flip-4", 4, 20, fault=flip(5), first=CRASH_STEP),
                   Check("flip-nan-4", 4, CRASH_STEPS, fault=flip(1), first=CRASH_STEP)]
    for k in (0, 1, buckets - 1):
        where = 'phase = "forward"' if k == 0 else f'phase = "allreduce"\nbucket = {k}'
        crash = f'[[fault]]\ntarget = "crash"\nat_step = {CRASH_STEP}\nworker = 1\n{where}'
        for strategy in ("lossy_forward", "rollback", "checkpoint_restart"):
            checks.append(Check(f"crash-{world}-k{k}-{strategy}", world, CRASH_STEPS, fault=crash, strategy=strategy, crash_k=k,
                                first=CRASH_STEP))
    return checks


def stage_crash_checks():
    """Stage 1 of 4 killed in the crash step's forward passes (stage_death.py), under each
    strategy: each restarts from the checkpoint (a stage has no replica), so all three are
    compared with one PyTorch job."""
    crash = f'[[fault]]\ntarget = "crash"\nat_step = {CRASH_STEP}\nworker = {rank_death.VICTIM}\nphase = "forward"'
    return [Check(f"pipe-crash-4-{s}", 1, CRASH_STEPS, mode="pipeline", stages=4, split_at=[1, 2, 4], micro_batches=4,
                  fault=crash, strategy=s, first=CRASH_STEP) for s in ("checkpoint_restart", "rollback", "lossy_forward")]


def check_host(world):
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return
    if world * RANK_BYTES > avail:
        die(f"{world} PyTorch ranks need about {world * RANK_BYTES >> 20} MiB and this machine has {avail >> 20} MiB available: pass --workers with fewer ranks, or --only to run fewer checks")


def plan_for(check, run_dir, samples, summary, faults, out):
    plan = {"name": check.name, "steps": check.steps, "first": check.first, "sync": check.sync, "strategy": check.strategy, "crash_k": check.crash_k,
            "samples": {str(s): {str(w): v for w, v in ws.items()} for s, ws in samples.items()},
            "buckets": summary["buckets"], "stages": summary["stages"], "batch": check.batch,
            "micro_batches": check.micro_batches, "out": str(out), "hooked": bool(check.fault) and check.sync == "ddp",
            "schedule": check.schedule, "free": check.free,
            "imported": str(run_dir.parent / "init"), "checkpoints": str(run_dir / "checkpoints")}
    flips = [(r, f["event"]) for f in faults if f["event"]["target"] == "gradients" for r in f["records"]
             if r["outcome"] == "corrupted" and r["old_bits"] != r["new_bits"]]
    if flips:
        r, event = flips[0]
        mask = int(r["old_bits"], 16) ^ int(r["new_bits"], 16)
        mask = mask - (1 << 32) if mask >= 1 << 31 else mask
        name = r["dataset"][len("gradients/"):].replace("/", ".")
        plan["flip"] = {"step": event["step"], "worker": event["rank"], "what": [name, r["index"], mask], "old": r["old"]}
    return plan


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resilab", type=Path, default=ROOT / "target" / "release" / "resilab", help="the resilab binary")
    ap.add_argument("--work", type=Path, required=True, help="an empty scratch directory")
    ap.add_argument("--workers", default="4,8", help="data-parallel world sizes (default 4,8)")
    ap.add_argument("--out", type=Path, help="write the measured differences here (CSV), and beside it FILE_excused.csv (each comparison the ReLU allowance excused) and FILE_deaths.csv (what each crash check's survivors saw)")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this text (e.g. gpipe, crash-8)")
    args = ap.parse_args()
    if not args.resilab.is_file():
        die(f"{args.resilab} is not a file: build resilab first (cargo build --release) or pass --resilab")
    try:
        worlds = [int(w) for w in args.workers.split(",")]
    except ValueError:
        die(f"--workers {args.workers}: expected world sizes separated by commas, e.g. 4,8")
    if any(w < 2 for w in worlds):
        die(f"--workers {args.workers}: a crash needs rank 1 and a survivor, so every world size is at least 2")
    if args.work.exists() and any(args.work.iterdir()):
        die(f"{args.work} is not empty: pass a new or empty scratch directory")
    t0 = time.time()
    work = args.work.resolve()
    images, labels = write_cifar(work / "cifar", train=640, test=64)
    torch.save((images, labels), work / "data.pt")
    torch.manual_seed(0)
    init_model = make_model()
    init = {k: v for k, v in init_model.state_dict().items() if not k.endswith("num_batches_tracked")}
    safetensors.torch.save_file(init, work / "init.safetensors")
    results = Results()
    # Per world size, its hooked and plain checks in one job, its crash checks in another.
    by_world = [(w, data_checks(w, BUCKETS)) for w in worlds]
    jobs = [(w, [c for c in cs if c.crash_k < 0]) for w, cs in by_world]
    jobs += [(w, [c for c in cs if c.crash_k >= 0]) for w, cs in by_world]
    # At 3 ranks dividing by N is inexact: Horovod's sum-then-scale is told apart (horovod_probe.py).
    jobs += [(3, [Check("horovod-3", 3, 20, sync="horovod", probe=True),
                  Check("horovod-flip-3", 3, 20, sync="horovod", fault=flip(5), first=CRASH_STEP)])]
    jobs += [(2, [Check("gpipe-2", 1, 10, mode="pipeline", stages=2, split_at=[2], micro_batches=4)]),
             (4, [Check("gpipe-4", 1, 10, mode="pipeline", stages=4, split_at=[1, 2, 4], micro_batches=4)]),
             (4, [Check("1f1b-4", 1, 10, mode="pipeline", stages=4, split_at=[1, 2, 4], micro_batches=4, schedule="1f1b")]),
             (4, stage_crash_checks())]
    jobs = [(w, [c for c in cs if args.only in c.name]) for w, cs in jobs]
    jobs = [j for j in jobs if j[1]]
    bucket_failures = buckets_check(args.resilab, work, args.only, t0)
    if not jobs and bucket_failures is None:
        die(f"--only {args.only!r} names no check: they are buckets-<model>-<MiB>, ddp-4, ddp-free-4, horovod-4, horovod-3, horovod-flip-3, flip-4, flip-nan-4, crash-<ranks>-k<k>-<strategy>, gpipe-2, gpipe-4, 1f1b-4, pipe-crash-4-<strategy>")
    results.failures += bucket_failures or []
    for world in sorted({w for w, _ in jobs}):
        check_host(world)
    for world, checks in jobs:
        results += run_job(args.resilab, work, world, checks, (images, labels))
        print(f"ddp-check: {', '.join(c.name for c in checks)}: compared ({time.time() - t0:.0f} s)", file=sys.stderr)
    provenance = (torch.__version__, revision())
    report(results.rows, args.out, provenance)
    if args.out:
        write_rows(args.out.with_name(args.out.stem + "_excused.csv"), EXCUSED_HEADER, results.excused, provenance)
        write_rows(args.out.with_name(args.out.stem + "_deaths.csv"), DEATHS_HEADER, results.deaths, provenance)
    for e in results.notes:
        print(f"ddp-check: note: {e}", file=sys.stderr)
    if results.failures:
        for f in results.failures[:20]:
            print(f"ddp-check: MISMATCH {f}", file=sys.stderr)
        die(f"{len(results.failures)} comparison(s) failed: tensors beyond the bound, or bucket plans that differ")
    print(f"ddp-check: every check agrees with torch.distributed {torch.__version__} ({time.time() - t0:.0f} s)")


def run_job(binary, work, world, checks, data):
    """The checks of one PyTorch job: resilab's runs, the job (the crash checks' with real
    deaths, scripts/rank_death.py and scripts/stage_death.py), and the comparisons' Results."""
    plans, runs, probes = [], [], []
    for check in checks:
        run_dir, summary, samples, faults = run_resilab(binary, check, work, work / "cifar", work / "init.safetensors")
        if check.probe:
            probes += probe(binary, work, check, faults)
        if check.mode == "data" and check.sync == "ddp" and len(summary["buckets"]) != BUCKETS:
            die(f"{check.name}: resilab made {len(summary['buckets'])} buckets where this check expects {BUCKETS}: update BUCKET_MB or BUCKETS")
        plans.append(plan_for(check, run_dir, samples, summary, faults, work / check.name / "torch"))
        runs.append((check, run_dir))
    # The layout is checked here, before the ranks read it, so an unknown one is one line.
    read_worker(Path(plans[0]["imported"]) / "step-00000000" / "worker-0.h5")
    results = Results()
    if checks[0].crash_k >= 0:
        results.deaths = crash_job(world, plans, str(work / "data.pt"))
    elif checks[0].mode == "pipeline" and checks[0].strategy != "none":
        results.deaths, kept = stage_crash_job(world, plans, str(work / "data.pt"))
        results.failures += stage_control(*runs[0], plans[0], kept, data)
    else:
        launch(dp_rank if checks[0].mode == "data" else pipe_rank, world, {"data": str(work / "data.pt"), "checks": plans})
    for (check, run_dir), p in zip(runs, plans):
        results += compare(check, run_dir, Path(p["out"]), world, p, data)
    control = next((c for c in checks if c.name == CONTROL[0]), None)
    if control:
        results.failures += negative_control(binary, work, control, data)
    results.failures += probes
    return results


def probe(binary, work, check, faults):
    """Horovod's sum-then-scale, bit for bit, in the step `check` probed (horovod_probe.py), and
    a DDP run of the same probe, which divides first, failing it: the failures."""
    compared, telling, failure = horovod_probe.check(faults, check.world)
    if failure:
        return [f"{check.name}: {failure}"]
    print(f"ddp-check: {check.name}: step {PROBE_STEP}'s average is Horovod's sum-then-scale at all {compared} probed elements, "
          f"{telling} of which scale-then-sum would give other bits", file=sys.stderr)
    ddp = Check(f"{check.name}-probe-as-ddp", check.world, PROBE_STEP, sync="ddp", probe=True)
    _, _, _, ddp_faults = run_resilab(binary, ddp, work, work / "cifar", work / "init.safetensors")
    _, _, failure = horovod_probe.check(ddp_faults, check.world)
    if not failure or failure.startswith("undecided"):
        return [f"{ddp.name}: a DDP run (divide, then sum) passes the Horovod probe: it cannot tell the two apart"]
    print(f"ddp-check: {ddp.name}: fails the probe, as it must ({failure})", file=sys.stderr)
    return []


# The negative control: resilab's lossy forward keeping one bucket more than the PyTorch job's
# (whose rank 1 died after 1 bucket) must be caught.
CONTROL = ("crash-4-k1-lossy_forward", 2)


def negative_control(binary, work, check, data):
    """Compares `check`'s PyTorch job with a resilab run whose crash came one bucket later:
    the failures, which is one (the control passing) or none."""
    fault = check.fault.replace(f"bucket = {check.crash_k}", f"bucket = {CONTROL[1]}")
    wrong = Check(f"control-{check.name}-keeps-{CONTROL[1]}", check.world, check.steps, fault=fault,
                  strategy=check.strategy, crash_k=check.crash_k, first=check.first)
    run_dir, summary, samples, faults = run_resilab(binary, wrong, work, work / "cifar", work / "init.safetensors")
    plan = plan_for(wrong, run_dir, samples, summary, faults, work / check.name / "torch")
    failed = compare(wrong, run_dir, work / check.name / "torch", check.world, plan, data).failures
    if not failed:
        return [f"{wrong.name}: resilab's lossy forward keeping {CONTROL[1]} buckets agrees with a job whose rank 1 died after {check.crash_k}: the crash checks cannot see the crash point"]
    print(f"ddp-check: {wrong.name}: caught, as it must be ({len(failed)} tensors beyond the bound, e.g. {failed[0]})", file=sys.stderr)
    return []


def crash_job(world, plans, data):
    """The crash checks of one world size with real deaths: DDP's own bucket plan, which must
    be resilab's, then the job; what its survivors saw (DEATHS_HEADER's columns)."""
    ddp = ddp_plan()
    for p in plans:
        differ = ddp_buckets.first_difference(p["buckets"], ddp)
        if differ:
            die(f"{p['name']}: resilab's buckets are not DDP's at bucket_cap_mb = {BUCKET_MB}: {differ}")
    deaths = []
    for p, (error, detect, rebuild, started, rejoin) in zip(plans, rank_death.run(world, plans, data)):
        joined = f", joined {rejoin:.2f} s" if rejoin is not None else ""
        print(f"ddp-check: {p['name']}: rank 1 killed after {p['crash_k']} of {len(ddp)} buckets; the survivors' all-reduce "
              f"failed {detect:.2f} s later ({error}); rebuilt in {rebuild:.2f} s; the new rank 1 started "
              f"{started:.2f} s after the death{joined}", file=sys.stderr)
        deaths.append((p["name"], world, f"rank 1 after {p['crash_k']} of {len(ddp)} buckets", error, f"{detect:.4f}", f"{rebuild:.4f}", f"{started:.4f}",
                       "" if rejoin is None else f"{rejoin:.4f}"))
    return deaths


def stage_crash_job(world, plans, data):
    """The pipeline crash checks' PyTorch job (stage_death.py): one restart, whose output every
    check is compared with (each strategy restarts), then the negative control, whose survivors
    keep the dead step's state; what the survivors saw, and the control's output."""
    import stage_death  # here: it builds on rank_death, which imports this module

    name = f"pipe-crash-{world}"
    shared = Path(plans[0]["out"]).parent.parent / name
    restart = dict(plans[0], name=name, strategy="checkpoint_restart", out=str(shared / "torch"))
    kept = dict(restart, name=f"{name}-kept", keep=True, out=str(shared / "torch-kept"))
    for p in plans:
        p["out"] = restart["out"]
    deaths = []
    for p, (error, detect, rebuild, started, _) in zip((restart, kept), stage_death.run(world, [restart, kept], data)):
        print(f"ddp-check: {p['name']}: stage {rank_death.VICTIM} of {world} killed as micro-batch {stage_death.KILL_AT}'s "
              f"forward pass began; the survivors' pipeline failed {detect:.2f} s later ({error}); rebuilt in {rebuild:.2f} s; "
              f"the new stage started {started:.2f} s after the death", file=sys.stderr)
        deaths.append((p["name"], world, f"stage {rank_death.VICTIM} before micro-batch {stage_death.KILL_AT}", error,
                       f"{detect:.4f}", f"{rebuild:.4f}", f"{started:.4f}", ""))
    return deaths, Path(kept["out"])


def stage_control(check, run_dir, plan, kept, data):
    """The negative control of the pipeline crash: resilab's restart against the PyTorch job
    whose survivors kept the dead step's BatchNorm updates must fail (the failures: one, when it
    passes, or none)."""
    failed = compare(check, run_dir, kept, check.stages, plan, data).failures
    if not failed:
        return [f"{check.name}: resilab's restart agrees with a pipeline whose survivors kept the dead step's state: "
                "the check cannot see whether the checkpoint was reloaded"]
    print(f"ddp-check: {check.name} against survivors that kept the dead step's state: caught, as it must be "
          f"({len(failed)} tensors beyond the bound, e.g. {failed[0]})", file=sys.stderr)
    return []


def ddp_plan():
    """DDP's buckets for the checks' model at BUCKET_MB, as its Reducer rebuilds them."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        return ddp_buckets.ddp_plans(make_model, BUCKET_MB, None)[1]
    finally:
        dist.destroy_process_group()


def buckets_check(binary, work, only, t0):
    """DDP's own bucket plans against resilab's (scripts/ddp_buckets.py): the failures, or None
    when `only` names no bucket case."""
    results = ddp_buckets.check(lambda *a: resilab(binary, *a), work / "buckets", free_port(), only)
    for name, sizes, failure in results:
        verdict = "differ from resilab's" if failure else "are resilab's"
        print(f"ddp-check: {name}: DDP's {len(sizes)} buckets of {sizes} parameters {verdict}", file=sys.stderr)
    if results:
        print(f"ddp-check: buckets: compared ({time.time() - t0:.0f} s)", file=sys.stderr)
    return [f"{name}: {failure}" for name, _, failure in results if failure] if results else None


def revision():
    """The resilab source revision the check ran from (git), for the table's provenance."""
    r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def report(rows, out, provenance):
    """The table (and the CSV `out`): per check and tensor kind, the largest difference and
    where, the bound it was held to, and how many comparisons the ReLU allowance excused, with
    the largest of them (not in max_rel_diff)."""
    header = ("check", "kind", "max_rel_diff", "step", "tensor", "rank", "bound", "excused", "excused_max_rel_diff")
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'check':<{width}}  {'kind':<8}  max rel diff  step  {'bound':>7}  excused  (tensor, rank)")
    for name, kind, d, step, key, rank, bound, excused, excused_d in rows:
        also = f" (largest {excused_d:.1e})" if excused else ""
        print(f"{name:<{width}}  {kind:<8}  {d:12.2e}  {step:>4}  {bound:7.1e}  {excused:>7}  ({key}, {rank}){also}")
    if out:
        write_rows(out, header, rows, provenance)


def write_rows(out, header, rows, provenance):
    """Writes `rows` under `header` to the CSV file `out`, each followed by `provenance`:
    PyTorch's version and the revision (read before any file is rewritten, which dirties the
    tree)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow((*header, "torch", "revision"))
        for r in rows:
            w.writerow((*r, *provenance))


if __name__ == "__main__":
    main()
