"""A rank that really dies: the crash-* checks of scripts/ddp_check.py.

N processes train in one gloo group (operations time out after TIMEOUT_S). In the crash step,
rank 1 takes part in the step's all-reduces of its first k buckets (DDP's own buckets, in DDP's
order) and is then killed (SIGKILL: the process ends, and its kernel closes its sockets). The
survivors' all-reduce of bucket k fails. Each survivor destroys its group and joins a new one
(the same TCPStore under a new prefix, as TorchFT rebuilds), then finishes the step as its
strategy says:

- lossy forward: keeps the k buckets reduced over all N, reduces the rest of its own gradient
  over the N-1 survivors, and steps;
- rollback: restores the copy it took before the step and redoes the step over the survivors;
- checkpoint-restart: joins a group of N with a replacement rank 1 (a new process), and every
  rank reloads the newest checkpoint (the step before's) and redoes the step.

Under lossy forward and rollback, a new rank 1 (a new process) joins before the next step, and
becomes a copy of rank 0 (its parameters, buffers and momentum, broadcast). Each rank's state
after each step is written as ddp_check.py's hooked checks write theirs, and compared with
resilab's by the same code.

The step is DDP's arithmetic written out, because a DDP Reducer whose collective failed cannot
finish its step: rank 0's buffers broadcast before the forward pass (broadcast_buffers), each
gradient divided by the group's size, and each bucket of DDP's plan one gloo all-reduce, in
DDP's order. The plan is DDP's own (a one-process DDP job at the check's bucket_cap_mb records
it), and resilab's must equal it.

Every process is started from a fork server that has imported PyTorch, so a replacement joins in
well under a second.
"""

import datetime
import multiprocessing as mp
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import ddp_check as dc

TIMEOUT_S = 60  # gloo's per-operation timeout: a killed peer is detected by its closed sockets
RENDEZVOUS_S = 300  # how long a group's members wait for each other to arrive
JOB_S = 900  # the whole job, before the launcher gives up


VICTIM = 1  # the rank that dies in each crash step


def first_line(error):
    """An error's first line without gloo's source location ("[.../pair.cc:547] ")."""
    line = str(error).strip().splitlines()[0]
    return re.sub(r"^\[[^]]*\] ", "", line)[:80].replace(",", ";")


class Rank:
    """One process's part of a world's crash checks, from the check and entry it starts at."""

    def __init__(self, rank, world, plan, port):
        self.rank, self.world, self.plan = rank, world, plan
        self.store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=RENDEZVOUS_S))
        self.images, self.labels = torch.load(plan["data"])
        self.group = None  # the name of the group this process is in

    # -- groups ----------------------------------------------------------------------------

    def join(self, name, members):
        """Leaves the current group and joins `name`, made of the global ranks `members` (this
        process's rank in it: its place in that list). The members first meet in the store, so
        that the group's setup starts on every member at once."""
        self.leave()
        key = f"{name}/arrived"
        self.store.add(key, 1)
        while int(self.store.add(key, 0)) < len(members):
            time.sleep(0.002)
        dist.init_process_group("gloo", store=dist.PrefixStore(name, self.store), rank=members.index(self.rank),
                                world_size=len(members), timeout=datetime.timedelta(seconds=TIMEOUT_S))
        self.group = name

    def leave(self):
        if self.group is not None:
            try:
                dist.destroy_process_group()
            except RuntimeError:
                pass  # a group a peer's death broke
            self.group = None

    # -- one step --------------------------------------------------------------------------

    def forward_backward(self, c, step, model):
        """Rank 0's buffers to every member, then this rank's loss and gradient."""
        for b in model.buffers():
            dist.broadcast(b, 0)
        x, y = dc.batch_of(c, step, self.rank, self.images, self.labels)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    @staticmethod
    def reduce(model, bucket, size, grads=None):
        """One bucket: each gradient (or `grads`' copy of it) divided by `size`, summed over the
        group in one all-reduce, and written back as the parameter's gradient."""
        params = dict(model.named_parameters())
        source = grads or {n: params[n].grad for n in bucket}
        dc.bucket_all_reduce([source[n] for n in bucket], [params[n].grad for n in bucket], divide_by=size)

    def step(self, c, step, model, opt, members):
        self.forward_backward(c, step, model)
        for bucket in c["buckets"]:
            self.reduce(model, bucket, len(members))
        opt.step()
        opt.zero_grad(set_to_none=True)

    def save(self, c, step, model, opt):
        out = Path(c["out"]) / f"step-{step}"
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / f"rank-{self.rank}.npz", **dc.torch_state(model, opt))

    # -- the crash step ----------------------------------------------------------------------

    def die(self, c, i, model):
        """The victim: the step's first k all-reduces, then SIGKILL once every survivor has
        completed them too (so that bucket k is the first one the survivors miss)."""
        self.forward_backward(c, dc.CRASH_STEP, model)
        for bucket in c["buckets"][:c["crash_k"]]:
            self.reduce(model, bucket, self.world)
        done = (self.world - 1) * (1 + c["crash_k"])
        while int(self.store.add(f"c{i}/done", 0)) < done:
            time.sleep(0.001)
        self.store.set(f"c{i}/death", repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    def survive(self, c, i, model, opt):
        """A survivor of the crash step: the step until an all-reduce fails, then the strategy."""
        step, everyone = dc.CRASH_STEP, list(range(self.world))
        survivors = [r for r in everyone if r != VICTIM]
        before = dc.snapshot(model, opt)
        self.forward_backward(c, step, model)
        self.store.add(f"c{i}/done", 1)
        own = {n: p.grad.clone() for n, p in model.named_parameters()}
        done, error = 0, None
        try:
            for bucket in c["buckets"]:
                self.reduce(model, bucket, self.world)
                self.store.add(f"c{i}/done", 1)
                done += 1
        except RuntimeError as e:
            failed, error = time.time(), first_line(e)
        if error is None or done != c["crash_k"]:
            raise SystemExit(f"{c['name']}: rank {self.rank} completed {done} all-reduces where rank 1 died after {c['crash_k']}")
        strategy = c["strategy"]
        if strategy == "checkpoint_restart":
            opt.zero_grad(set_to_none=True)
            self.join(f"c{i}/restart", everyone)  # with a new rank 1
            dc.load_state(model, opt, dc.state_dir(c, step - 1) / f"worker-{self.rank}.h5")
            rebuilt = time.time()
            self.step(c, step, model, opt, everyone)
        else:
            self.join(f"c{i}/survivors", survivors)
            rebuilt = time.time()
            if strategy == "lossy_forward":
                for bucket in c["buckets"][done:]:
                    self.reduce(model, bucket, len(survivors), own)
            else:  # rollback
                opt.zero_grad(set_to_none=True)
                model.load_state_dict(before[0])
                opt.load_state_dict(before[1])
                self.forward_backward(c, step, model)
                for bucket in c["buckets"]:
                    self.reduce(model, bucket, len(survivors))
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.store.set(f"c{i}/survivor/{self.rank}", f"{failed!r},{rebuilt!r},{error}")

    # -- a check -------------------------------------------------------------------------------

    def run_check(self, i, entry):
        """Check `i` from `entry`: "start" (its first step), "rejoin" (a new rank 1 after a
        crash under lossy forward or rollback, from the next step) or "restart" (a new rank 1
        at a checkpoint-restart, from the crash step)."""
        c, everyone = self.plan["checks"][i], list(range(self.world))
        model = dc.make_model().train()
        opt = torch.optim.SGD(model.parameters(), lr=dc.LR, momentum=dc.MOMENTUM, weight_decay=dc.WEIGHT_DECAY)
        group, first = {"start": (f"c{i}/all", c["first"]), "rejoin": (f"c{i}/rejoined", dc.CRASH_STEP + 1),
                        "restart": (f"c{i}/restart", dc.CRASH_STEP)}[entry]
        self.join(group, everyone)
        for step in range(first, c["steps"] + 1):
            dc.load_state(model, opt, dc.state_dir(c, step - 1) / f"worker-{self.rank}.h5")
            if step == dc.CRASH_STEP + 1 and c["strategy"] != "checkpoint_restart":
                if self.group != f"c{i}/rejoined":
                    self.join(f"c{i}/rejoined", everyone)
                    self.store.set(f"c{i}/rejoined/{self.rank}", repr(time.time()))
                dc.respawn(model, opt, self.rank, 0, VICTIM)  # the new rank 1: a copy of rank 0
            if step == dc.CRASH_STEP and entry == "start":
                if self.rank == VICTIM:
                    self.die(c, i, model)
                self.survive(c, i, model, opt)
            else:
                self.step(c, step, model, opt, everyone)
            self.save(c, step, model, opt)
        self.leave()


def rank_main(rank, world, plan, port, at):
    """One process: the checks from `at` = (check index, entry) on. Survivors run them all; a
    rank 1 runs until it is killed in a crash step (or to the end, the last one)."""
    process_main(Rank, rank, world, plan, port, at)


def process_main(kind, rank, world, plan, port, at):
    """A process of `kind` (Rank, or stage_death's Stage) running the checks from `at` on."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    r = kind(rank, world, plan, port)
    i, entry = at
    if entry != "start":
        r.store.set(f"c{i}/replaced", repr(time.time()))
    while i < len(plan["checks"]):
        r.run_check(i, entry)
        i, entry = i + 1, "start"


# ---------------------------------------------------------------------------------------------
# The launcher


def fork_context():
    """The multiprocessing context every PyTorch process of ddp_check.py starts from: a fork
    server that imports this module (and with it ddp_check.py and PyTorch) once, so a new
    process starts in well under a second instead of importing PyTorch again (about 3 s of CPU
    each). The fork server is one per launcher process and starts at its first use, after this
    has set its path (Python 3.11's fork server leaves this directory off it) and its preloads.
    gloo's line per rank and group ("Rank 2 is connected to 3 peer ranks") is left out: a job
    makes several groups per check."""
    here = str(Path(__file__).resolve().parent)
    if here not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "WARNING")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["rank_death", "stage_death"])
    return ctx


def run(world, plans, data, main=rank_main):
    """Runs the crash checks `plans` (ddp_check.py's plans, each with DDP's buckets; or
    stage_death.py's, with `main` its process) in one job of `world` processes, starting a new
    rank 1 after each death. Returns, per check, what the survivors saw: (error line,
    detection s, rebuild s, the new rank 1's start s, its rejoin s or None)."""
    ctx = fork_context()
    port = dc.free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=RENDEZVOUS_S))
    plan = {"data": data, "checks": plans}

    def start(rank, at):
        p = ctx.Process(target=main, args=(rank, world, plan, port, at))
        p.start()
        return p

    procs = {r: start(r, (0, "start")) for r in range(world)}
    try:
        supervise(procs, plans, start, world)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
            p.join()
    return [facts(store, i, world, c) for i, c in enumerate(plans)]


def supervise(procs, plans, start, world):
    """Waits for the job: each death of rank 1 starts the next one (at the check it died in),
    any other failure stops the job."""
    deaths, t0 = 0, time.time()
    while True:
        victim = procs[VICTIM]
        if victim.exitcode == -signal.SIGKILL and deaths < len(plans):
            entry = "restart" if plans[deaths]["strategy"] == "checkpoint_restart" else "rejoin"
            procs[VICTIM] = start(VICTIM, (deaths, entry))
            deaths += 1
            continue
        failed = [(r, p.exitcode) for r, p in procs.items() if p.exitcode not in (None, 0)]
        if failed:
            r, code = failed[0]
            dc.die(f"rank {r} of the {world}-rank crash job failed (exit code {code}) after {deaths} of {len(plans)} crashes; its error is printed above")
        if all(p.exitcode == 0 for p in procs.values()):
            if deaths != len(plans):
                dc.die(f"the {world}-rank crash job ended after {deaths} crashes where {len(plans)} were planned")
            return
        if time.time() - t0 > JOB_S:
            dc.die(f"the {world}-rank crash job did not finish in {JOB_S} s ({deaths} of {len(plans)} crashes)")
        time.sleep(0.01)


def facts(store, i, world, c):
    """What the survivors of check `i` recorded: their first error line, the detection (the
    slowest survivor's error, from the death), the rebuild (from that error to the slowest
    survivor's new group), the new rank 1's start (from the death to its first line) and, after
    lossy forward or rollback, its rejoin (from the death to the slowest member of the group
    with the new rank 1)."""
    death = float(store.get(f"c{i}/death"))
    rows = [store.get(f"c{i}/survivor/{r}").decode().split(",", 2) for r in range(world) if r != VICTIM]
    errors, rebuilt = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
    rejoined = None
    if c["strategy"] != "checkpoint_restart":
        rejoined = max(float(store.get(f"c{i}/rejoined/{r}")) for r in range(world) if r != VICTIM) - death
    started = float(store.get(f"c{i}/replaced")) - death
    return rows[0][2], max(errors) - death, max(rebuilt) - max(errors), started, rejoined
