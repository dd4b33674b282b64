"""Horovod's average, bit for bit: sum, then scale by 1/N (the "horovod-3" check of
scripts/ddp_check.py).

Step for step against PyTorch, a 1e-5 bound cannot tell "sum, then scale" from "scale, then
sum": the two differ by an ulp, and so do the two sides' own gradients. So the check also
reads, in one step of resilab's run, each worker's gradient before the all-reduce and worker
0's after it, exactly: probe faults that multiply elements by 1.0 (`scaling_factor = 1.0`,
which changes nothing) log each element's bits (`faults.jsonl`'s `old_bits`). At 3 workers
dividing by N is inexact, and for every element logged on every worker the average must be
one that Horovod's arithmetic gives: the N gradients summed in float32 in some order (a ring
all-reduce's chunks start at different ranks), times 1/N. Where "scale, then sum" (each
gradient divided by N, or times 1/N, then summed in any order) gives other bits, the element
tells the two apart; the check needs at least one such element, and a DDP run of the same
probe (which divides first) must fail it.
"""

import itertools

import numpy as np

PROBED = "gradients/layer3/0/conv2/weight"  # 2,304 elements at width 1/4


def probe_faults(world, step):
    """The `[[fault]]` tables that log PROBED before the all-reduce on every worker and after
    it on worker 0, at `step`."""
    common = (f'at_step = {step}\nscaling_factor = 1.0\ninjection_type = "percentage"\ninjection_tries = 100\n'
              f'sampling = "per_element"\nlocations_to_corrupt = ["{PROBED}"]\n')
    tables = [f'[[fault]]\ntarget = "gradients"\nworker = {w}\n{common}' for w in range(world)]
    tables.append(f'[[fault]]\ntarget = "reduced_gradients"\nworker = 0\n{common}')
    return "\n".join(tables)


def logged(faults, target):
    """{(rank, element index): float32 bits} of the probe's records of `target`."""
    out = {}
    for f in faults:
        if f["event"]["target"] != target:
            continue
        for r in f["records"]:
            if r["dataset"] == PROBED and r["old_bits"] == r["new_bits"]:
                out.setdefault((f["event"]["rank"], r["index"]), int(r["old_bits"], 16))
    return out


def sums(values):
    """Every sequential float32 sum of the columns of `values` (elements x N), one per order."""
    n = values.shape[1]
    out = []
    for order in itertools.permutations(range(n)):
        s = values[:, order[0]].copy()
        for i in order[1:]:
            s = (s + values[:, i]).astype(np.float32)
        out.append(s)
    return out


def candidates(values):
    """Per element, the bits Horovod's average can have, and those "scale, then sum" can have."""
    n = values.shape[1]
    inv = np.float32(1.0 / n)
    horovod = [(s * inv).astype(np.float32) for s in sums(values)]
    horovod += [(s.astype(np.float64) / n).astype(np.float32) for s in sums(values)]
    scaled_first = sums((values / np.float32(n)).astype(np.float32)) + sums((values * inv).astype(np.float32))
    as_bits = lambda arrays: np.stack([a.view(np.uint32) for a in arrays], 1)
    return as_bits(horovod), as_bits(scaled_first)


def check(faults, world):
    """(elements compared, elements that tell the two apart, failure or None)."""
    before, after = logged(faults, "gradients"), logged(faults, "reduced_gradients")
    elements = sorted(i for (rank, i) in after if rank == 0 and all((w, i) in before for w in range(world)))
    if not elements:
        return 0, 0, f"the probe logged no element of {PROBED} on every worker and after the all-reduce"
    values = np.array([[before[(w, i)] for w in range(world)] for i in elements], dtype=np.uint32).view(np.float32)
    reduced = np.array([after[(0, i)] for i in elements], dtype=np.uint32)
    horovod, scaled_first = candidates(values)
    is_horovod = (horovod == reduced[:, None]).any(1)
    telling = int((is_horovod & ~(scaled_first == reduced[:, None]).any(1)).sum())
    if not is_horovod.all():
        bad = int(np.argmin(is_horovod))
        return len(elements), telling, (f"{(~is_horovod).sum()} of {len(elements)} averaged elements are not a float32 sum of the workers' gradients "
                                        f"times 1/{world} (element {elements[bad]}: {float(reduced[bad].view(np.float32))} from {values[bad].tolist()})")
    if telling == 0:
        return len(elements), 0, (f"undecided: none of the {len(elements)} probed elements tells sum-then-scale from scale-then-sum; "
                                  "probe more elements (a larger tensor in horovod_probe.PROBED)")
    return len(elements), telling, None
