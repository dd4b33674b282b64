#!/usr/bin/env python3
"""What a crash costs a real torch.distributed job on this machine (gloo on CPU): detection,
rebuild and relaunch, measured (docs/recovery.md, "Measured here").

- detection: N processes in one gloo group (`init_process_group(timeout=T)`) all-reduce
  together; the survivors then enter their next all-reduce at once, and the last rank dies
  half a second later, so they are waiting in it, as survivors of a crash inside a step wait
  in its all-reduce. Two ways to die: `exit` (the process ends: its kernel closes its
  sockets, as after a crash of the process) and `stop` (SIGSTOP: the process and its sockets
  stay, as with a hung process or a lost node, which sends nothing). The detection time is
  from the death (the victim's clock just before it dies, or the parent's just after SIGSTOP)
  to the survivor's error, the slowest survivor's; the wait, from the survivor's entry into
  the all-reduce to its error (gloo's timeout counts from there).
- rebuild: each survivor then destroys the group and joins a new one of N-1 ranks (the same
  store under a new prefix, as TorchFT rebuilds), and all-reduces over it: from the error to
  the end of that first all-reduce, the slowest survivor's.
- relaunch: N fresh Python processes (import torch, rendezvous, one all-reduce), from the start
  of the first to the end of the last one's all-reduce: what a torchrun-style restart costs
  before any scheduler, container or checkpoint read.

Run it through scripts/torch-check.sh (PyTorch 2.9.0), on an otherwise idle machine:

    bash scripts/torch-check.sh gloo_costs.py --out results/parallel/gloo_costs.csv
"""

import argparse
import csv
import datetime
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    sys.exit(f"gloo-costs: the Python module {e.name} is missing: run it through scripts/torch-check.sh")

TENSOR = 256 * 1024  # float32 values per all-reduce (1 MiB)
WARMUP = 3  # all-reduces before the death
SETTLE_S = 0.5  # the victim dies this long after the last common all-reduce
RENDEZVOUS_S = 120  # the store's timeout while the processes start


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_group(rank, world, port, timeout_s):
    """A gloo group of `world` ranks whose operations time out after `timeout_s`. The ranks
    first meet in the store (which waits up to RENDEZVOUS_S for slow starters), so that the
    group's own setup, under the short timeout, starts on every rank at once."""
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=RENDEZVOUS_S))
    store.add("arrived", 1)
    while int(store.add("arrived", 0)) < world:
        time.sleep(0.001)
    dist.init_process_group("gloo", store=dist.PrefixStore("group", store), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return store


def rank_main(rank, world, port, timeout_s, mode, out):
    """One rank of a detection trial; writes `rank,what,seconds-since-epoch` lines to `out`."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    store = join_group(rank, world, port, timeout_s)
    x = torch.ones(TENSOR)
    for _ in range(WARMUP):
        dist.all_reduce(x)
    victim = rank == world - 1
    if victim:
        time.sleep(SETTLE_S)
        if mode == "exit":
            with open(out, "a") as f:
                f.write(f"{rank},death,{time.time()!r}\n")
            os._exit(0)
        with open(out, "a") as f:
            f.write(f"{rank},ready,{time.time()!r}\n")
        while True:  # the parent stops this process
            time.sleep(1)
    entered = time.time()
    try:
        dist.all_reduce(x)
        raise SystemExit(f"rank {rank}: the all-reduce without rank {world - 1} succeeded")
    except RuntimeError as e:
        failed = time.time()
        kind = str(e).strip().splitlines()[0][:120].replace(",", ";")
    try:
        dist.destroy_process_group()
    except RuntimeError:
        pass
    # The survivors' new group: the same store (rank 0 serves it) under a new prefix, as TorchFT
    # does; the survivors keep their ranks (the last one died).
    dist.init_process_group("gloo", store=dist.PrefixStore("rebuilt", store), rank=rank, world_size=world - 1,
                            timeout=datetime.timedelta(seconds=timeout_s))
    dist.all_reduce(x)
    rebuilt = time.time()
    with open(out, "a") as f:
        f.write(f"{rank},entered,{entered!r}\n{rank},error,{failed!r},{kind}\n{rank},rebuilt,{rebuilt!r}\n")
    dist.destroy_process_group()


def detection_trial(world, timeout_s, mode, scratch):
    """One death: (detection s, the survivors' wait s, rebuild s, the survivors' first error
    line)."""
    out = scratch / f"trial-{world}-{mode}-{timeout_s}-{time.time_ns()}.txt"
    port = free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, world, port, timeout_s, mode, out)) for r in range(world)]
    for p in procs:
        p.start()
    victim = procs[-1]
    death = None
    if mode == "stop":
        while death is None:
            if out.exists() and f"{world - 1},ready," in out.read_text():
                os.kill(victim.pid, signal.SIGSTOP)
                death = time.time()
            elif not victim.is_alive():
                raise SystemExit(f"gloo-costs: rank {world - 1} ended before it was stopped")
            else:
                time.sleep(0.001)
    for p in procs[:-1]:
        p.join(timeout_s + 120)
        if p.exitcode != 0:
            raise SystemExit(f"gloo-costs: a survivor of the {world}-rank {mode} trial failed (exit code {p.exitcode})")
    if mode == "stop":
        victim.kill()
    victim.join()
    rows = [line.split(",") for line in out.read_text().splitlines()]
    if death is None:
        death = next(float(r[2]) for r in rows if r[1] == "death")
    entered = {r[0]: float(r[2]) for r in rows if r[1] == "entered"}
    errors = {r[0]: float(r[2]) for r in rows if r[1] == "error"}
    rebuilt = [float(r[2]) for r in rows if r[1] == "rebuilt"]
    kinds = sorted({r[3] for r in rows if r[1] == "error"})
    wait = max(errors[r] - entered[r] for r in errors)
    return max(errors.values()) - death, wait, max(rebuilt) - max(errors.values()), kinds[0]


RELAUNCH = """
import datetime, os, sys, time
import torch, torch.distributed as dist
os.environ["GLOO_SOCKET_IFNAME"] = "lo"
torch.set_num_threads(1)
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
dist.all_reduce(torch.ones(%d))
print(repr(time.time()))
dist.destroy_process_group()
""" % TENSOR


def relaunch_trial(world):
    """Seconds from starting `world` fresh Python processes to the end of the last one's first
    all-reduce."""
    port = free_port()
    start = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", RELAUNCH, str(r), str(world), str(port)], stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    ends = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"gloo-costs: a relaunched rank failed (exit code {p.returncode})")
        ends.append(float(out.strip().splitlines()[-1]))
    return max(ends) - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="a scratch directory")
    ap.add_argument("--resilab", type=Path, help="(ignored: torch-check.sh passes it)")
    ap.add_argument("--worlds", default="4,8", help="world sizes (default 4,8)")
    ap.add_argument("--timeouts", default="1,2,5", help="gloo timeouts in seconds (default 1,2,5)")
    ap.add_argument("--repeats", type=int, default=3, help="trials of each kind (default 3)")
    ap.add_argument("--out", type=Path, help="write every trial here (CSV)")
    args = ap.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    timeouts = [float(t) for t in args.timeouts.split(",")]
    if any(w < 2 for w in worlds) or any(t <= 0 for t in timeouts) or args.repeats < 1:
        sys.exit("gloo-costs: world sizes are at least 2, timeouts > 0 and --repeats at least 1")
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for world in worlds:
        for mode in ("exit", "stop"):
            for timeout_s in timeouts:
                for r in range(args.repeats):
                    detect, wait, rebuild, kind = detection_trial(world, timeout_s, mode, args.work)
                    rows.append((world, mode, timeout_s, r, f"{detect:.4f}", f"{wait:.4f}", f"{rebuild:.4f}", "", kind))
                    print(f"gloo-costs: {world} ranks, {mode}, timeout {timeout_s:g} s: detected in {detect:.3f} s "
                          f"(waited {wait:.3f} s in the all-reduce), rebuilt in {rebuild:.3f} s ({kind})", file=sys.stderr)
        for r in range(args.repeats):
            relaunch = relaunch_trial(world)
            rows.append((world, "relaunch", "", r, "", "", "", f"{relaunch:.4f}", ""))
            print(f"gloo-costs: {world} ranks relaunched in {relaunch:.3f} s", file=sys.stderr)
    summarise(rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["world", "death", "timeout_s", "repeat", "detect_s", "wait_s", "rebuild_s", "relaunch_s", "survivor_error", "torch", "cpus"])
            for row in rows:
                w.writerow([*row, torch.__version__, os.cpu_count()])


def summarise(rows):
    """Medians per world, death and timeout."""
    print(f"{'world':>5}  {'death':<8}  {'timeout s':>9}  {'detect s':>9}  {'wait s':>9}  {'rebuild s':>9}  {'relaunch s':>10}")
    keys = sorted({(r[0], r[1], r[2]) for r in rows}, key=lambda k: (k[0], k[1], str(k[2])))
    for world, death, timeout_s in keys:
        sel = [r for r in rows if (r[0], r[1], r[2]) == (world, death, timeout_s)]
        med = lambda i: f"{statistics.median(float(r[i]) for r in sel):.3f}" if sel[0][i] != "" else "-"
        print(f"{world:>5}  {death:<8}  {str(timeout_s):>9}  {med(4):>9}  {med(5):>9}  {med(6):>9}  {med(7):>10}")


if __name__ == "__main__":
    main()
