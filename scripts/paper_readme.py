#!/usr/bin/env python3
"""Writes results/paper/README.md from the presets' reports: every verdict comes from the
report's own tests (comparisons.csv, bits.csv), none is written by hand.

    python3 scripts/paper_readme.py results/paper > results/paper/README.md

Each preset folder holds what `resilab campaign` and `resilab report --out <folder>` wrote:
campaign.toml, campaign.json, runs.csv, cells.csv, comparisons.csv, report.md, plots/ (and
bits.csv for the per-bit preset). A claim names the published trend, the axis and pair of
options it compares, the metric and the expected sign of (b - a); its verdict counts the
comparisons of the report that match it (one per combination of the other coordinates):
"shown" when every one is shown in the expected direction, "partly (k of n)" when some are,
"not shown" when none is, and "contradicted" when one is shown in the opposite direction.
Only the standard library is used.
"""

import csv
import json
import math
import os
import re
import sys

# The N-EV factor study's claims, at either continuation length.
FACTOR_CLAIMS = [
    ("the 64-bit view gives less N-EV than the 32-bit word", "inject", "32-bit word", "64-bit view", "nev_pct", -1),
    ("allow_NaN_values = false gives less N-EV", "inject.allow_NaN_values", "true", "false", "nev_pct", -1),
    ("drawing over the whole file gives less N-EV than over model and optimizer state", "inject.use_random_locations", "false", "true", "nev_pct", -1),
]

# (folder, published table, description, claims). A claim: (text, axis, a, b, metric, sign).
PRESETS = [
    ("nev", "table 1: N-EV vs flips x model", "N-EV after 1-1000 flips in a checkpoint, per model", [
        ("N-EV grows from 1 to 10 flips", "inject.injection_tries", "1", "10", "nev_pct", +1),
        ("N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", +1),
        ("N-EV grows from 100 to 1000 flips", "inject.injection_tries", "100", "1000", "nev_pct", +1),
    ]),
    ("nev-paper", "table 1 at its published size", "Table 1 at 250 runs per cell", [
        ("N-EV grows from 1 to 10 flips", "inject.injection_tries", "1", "10", "nev_pct", +1),
        ("N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", +1),
        ("N-EV grows from 100 to 1000 flips", "inject.injection_tries", "100", "1000", "nev_pct", +1),
    ]),
    ("nev-factors", "table 1: which setting its N-EV came from", "precision x locations x allow_NaN_values x flips x model, 20-step continuation", FACTOR_CLAIMS),
    ("nev-factors-5ep", "table 1: which setting its N-EV came from", "the same factors, 400-step continuation (5 epochs)", FACTOR_CLAIMS),
    ("bits", "table 1's finding: the critical bit", "one flip per evaluation, every bit position", []),
    ("precision", "table 2: 16- vs 32-bit", "N-EV at 16 and 32 bits per flip count and model", [
        ("32-bit flips give more N-EV than 16-bit ones", "inject", "f16", "f32", "nev_pct", +1),
    ]),
    ("masks", "table 3: multi-bit masks", "accuracy and N-EV after multi-bit masks", [
        ("masks with more bits set cost more accuracy (the published runs do not show it)", "inject.bit_mask", "3:10001010", "6:11101101", "acc_all_pct", -1),
    ]),
    ("dp-one-flip", "table 4: one flip in 1 of 8 workers", "RWC after one flip in one replica's model or optimizer state", [
        ("RWC is lower after an optimizer-state flip than after a model flip", "inject.locations_to_corrupt", "model", "optimizer", "rwc_pct", -1),
        ("RWC on every replica is lower after an optimizer-state flip than after a model flip", "inject.locations_to_corrupt", "model", "optimizer", "rwc_all_pct", -1),
        ("an optimizer-state flip leaves the replicas diverged more often than a model flip", "inject.locations_to_corrupt", "model", "optimizer", "diverged_pct", +1),
        ("Horovod's restart (parameters and optimizer state broadcast) leaves fewer diverged replicas than DDP's", "parallel.sync", "ddp", "horovod", "diverged_pct", -1),
    ]),
    ("dp-one-flip-paper", "table 4 at its published size", "Table 4 at 180 runs per row (campaign.repetitions=60)", [
        ("RWC is lower after an optimizer-state flip than after a model flip", "inject.locations_to_corrupt", "model", "optimizer", "rwc_pct", -1),
        ("RWC on every replica is lower after an optimizer-state flip than after a model flip", "inject.locations_to_corrupt", "model", "optimizer", "rwc_all_pct", -1),
        ("an optimizer-state flip leaves the replicas diverged more often than a model flip", "inject.locations_to_corrupt", "model", "optimizer", "diverged_pct", +1),
        ("Horovod's restart (parameters and optimizer state broadcast) leaves fewer diverged replicas than DDP's", "parallel.sync", "ddp", "horovod", "diverged_pct", -1),
    ]),
    ("dp-many-flips", "table 5: many flips in k of 8 workers", "N-EV and accuracy after 1-100 flips in 1-8 replicas", [
        ("N-EV grows from 1 to 10 flips", "inject.injection_tries", "1", "10", "nev_pct", +1),
        ("N-EV grows from 10 to 100 flips", "inject.injection_tries", "10", "100", "nev_pct", +1),
        ("N-EV grows from 1 to 8 workers hit", "workers_hit", "1", "8", "nev_pct", +1),
        ("model flips cost more accuracy than optimizer-state flips", "inject.locations_to_corrupt", "model", "optimizer", "acc_all_pct", +1),
    ]),
    # A study: its hypotheses are stated in its campaign file and tested by the report.
    ("recovery", "section 6: recovery strategies (CCGrid'22)", "which strategy when: strategy x job MTBF x workers x checkpoint interval", []),
    ("permanent-loss", "MaTEx-Caffe / ULFM (\"What does fault tolerant Deep Learning need from MPI?\"): shrink vs Reinit", "which policy after permanent loss: 0, 1, 2, 4 of 16 workers x respawn, reinit, shrink (two batch rules)", []),
    ("pipeline", "none (resilab's own)", "faults in each stage's weights, optimizer state, activations and gradient messages", []),
]


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(x, digits=1):
    try:
        return f"{float(x):.{digits}f}"
    except (TypeError, ValueError):
        return ""


def verdict(comps, claim):
    text, axis, a, b, metric, sign = claim
    rows = [c for c in comps if c["axis"] == axis and c["a"] == a and c["b"] == b and c["metric"] == metric]
    if not rows:
        return "no test", [], rows
    shown = [c for c in rows if c["verdict"] == "shown" and float(c["diff"]) * sign > 0]
    against = [c for c in rows if c["verdict"] == "shown" and float(c["diff"]) * sign < 0]
    if against:
        v = f"contradicted ({len(against)} of {len(rows)})"
    elif len(shown) == len(rows):
        v = "shown" if len(rows) == 1 else f"shown ({len(rows)} of {len(rows)})"
    elif shown:
        v = f"partly ({len(shown)} of {len(rows)})"
    else:
        v = f"not shown (0 of {len(rows)})"
    return v, shown, rows


def detail(c):
    return (f"{c['fixed']}: {num(c['value_a'])} -> {num(c['value_b'])} ({float(c['diff']):+.1f} "
            f"[{float(c['ci_lo']):+.1f}, {float(c['ci_hi']):+.1f}], p Holm {float(c['p_holm']):.2g}, n = {c['n_a']}/{c['n_b']}, "
            f"{c['seeds']} seeds): {c['verdict']}")


def cells_table(cells, axes):
    cols = [("seeds", "seeds", 0), ("ACC %", "acc_pct", 1), ("ACC all %", "acc_all_pct", 1), ("golden %", "golden_acc_pct", 1)]
    out = []
    has = lambda k: any(c.get(k) for c in cells)
    header = [a.removeprefix("inject.") for a in axes] + ["runs (ok)"] + [h for h, k, _ in cols if has(k)]
    shares = [("N-EV", "nev"), ("EV injected", "ev_injected"), ("NaN", "nan"), ("RWC", "rwc"), ("RWC all replicas", "rwc_all"),
              ("replicas diverged", "diverged"), ("step counter altered", "step_altered"), ("load failed", "load_failed")]
    # The confounds' columns appear when some cell has a nonzero count; the others when some
    # cell has a value at all.
    optional = {"step_altered", "load_failed"}
    has_share = lambda k: any(c.get(k) not in (None, "", "0") for c in cells) if k in optional else has(k + "_pct")
    header += [h for h, k in shares if has_share(k)]
    agree = has("nev_vs_ev")
    header += ["N-EV vs EV injected (McNemar)"] if agree else []
    extra = [("hit replica ACC %", "hit_acc_pct", 1), ("worst replica ACC %", "replica_acc_min_pct", 1), ("sim. overhead %", "sim_overhead_pct", 2),
             ("steps recomputed", "steps_recomputed", 2)]
    header += [h for h, k, _ in extra if has(k)]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for c in cells:
        r = [c.get(a, "") for a in axes] + [f"{c['runs']} ({c['ok']})"]
        r += [num(c[k], d) if d else c[k] for h, k, d in cols if has(k)]
        for h, k in shares:
            if has_share(k):
                r.append(f"{c[k]} ({num(c[k + '_pct'])} [{num(c[k + '_lo'])}, {num(c[k + '_hi'])}])" if c.get(k + "_pct") else "")
        if agree:
            r.append(f"{c['nev_vs_ev']} (p Holm {float(c['nev_vs_ev_p_holm']):.2g})" if c.get("nev_vs_ev") else "")
        r += [num(c[k], d) for h, k, d in extra if has(k)]
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def axes_of(cells):
    fixed = {"runs", "ok", "not_ok", "seeds"}
    keys = list(cells[0].keys()) if cells else []
    out = []
    for k in keys:
        if k in fixed:
            break
        out.append(k)
    return out


def study_section(d, name, table, what, comps, header):
    """A study's section from its report's own files: each option's accuracy loss and overhead per
    condition (cells_study.csv), each stated hypothesis's verdicts (comparisons.csv, Holm over the
    hypotheses' tests) and the generated "which strategy when" table (which_strategy.csv)."""
    cells = read_csv(os.path.join(d, "cells_study.csv"))
    choices = read_csv(os.path.join(d, "which_strategy.csv"))
    # A mean's column names its unit (acc_loss_pts); its interval's ends follow it (acc_loss_lo).
    ci = lambda c, k: (f"{num(c[k], 2)} [{num(c[k.rsplit('_', 1)[0] + '_lo'], 2)}, {num(c[k.rsplit('_', 1)[0] + '_hi'], 2)}]"
                       if c.get(k) else "n/a")
    # Reports written since the study recorded the final accuracy and the time to the golden
    # run's accuracy carry those columns too.
    timed = bool(cells) and "time_to_acc_pct" in cells[0]
    if timed:
        lines = header + ["| condition | option | runs | seeds | failed | final acc., % [95%] | acc. loss, points [95%] | reached golden acc. [Wilson 95%] | time to it, % of golden [95%] | sim. overhead, % [95%] |",
                          "|---|---|---|---|---|---|---|---|---|---|"]
    else:
        lines = header + ["| condition | strategy | runs | seeds | failed | acc. loss, points [95%] | sim. overhead, % [95%] |", "|---|---|---|---|---|---|---|"]
    for c in cells:
        row = f"| {c['condition']} | {c['option']} | {c['runs']} | {c['seeds']} | {c['failed']} | "
        if timed:
            reached = f"{c['reached']}/{c['runs']} [{num(c['reached_lo'])}, {num(c['reached_hi'])}%]" if c.get("reached_lo") else "n/a"
            row += f"{ci(c, 'final_acc_pct')} | {ci(c, 'acc_loss_pts')} | {reached} | {ci(c, 'time_to_acc_pct')} | {ci(c, 'sim_overhead_pct')} |"
        else:
            row += f"{ci(c, 'acc_loss_pts')} | {ci(c, 'sim_overhead_pct')} |"
        lines.append(row)
    lines += ["", f"Hypotheses stated in `configs/paper/{name}.toml` before the runs, each tested in every condition; Holm over all {len(comps)} tests:", ""]
    verdicts = []
    for h in dict.fromkeys(c["hypothesis"] for c in comps):
        rows = [c for c in comps if c["hypothesis"] == h]
        count = {v: sum(c["verdict"] == v for c in rows) for v in ("b lower", "b higher", "not shown")}
        v = f"{rows[0]['b']} lower in {count['b lower']}, higher in {count['b higher']}, not shown in {count['not shown']} of {len(rows)}"
        verdicts.append((h, v))
        lines.append(f"- **{h}** ({rows[0]['metric']}, {rows[0]['b']} against {rows[0]['a']}): {v}.")
    lines += ["", "Which strategy when (generated by the report: the lowest mean overhead among the strategies whose accuracy loss is not shown to exceed the budget):", "",
              "| condition | choice | sim. overhead % | acc. loss (points) | ruled out |", "|---|---|---|---|---|"]
    for c in choices:
        lines.append(f"| {c['condition']} | {c['choice'] or 'none qualifies'} | {num(c['sim_overhead_pct'], 2)} | {num(c['acc_loss_pts'], 2)} | {c['ruled_out']} |")
    lines.append("")
    runs = sum(int(c["runs"]) for c in cells)
    return "\n".join(lines), (name, table, f"{runs}", verdicts)


def preset_section(root, name, table, what, claims):
    d = os.path.join(root, name)
    cells = read_csv(os.path.join(d, "cells.csv"))
    if not cells or not os.path.exists(os.path.join(d, "comparisons.csv")):
        return None, None
    comps = read_csv(os.path.join(d, "comparisons.csv"))
    if comps and "hypothesis" in comps[0]:
        meta = json.load(open(os.path.join(d, "campaign.json"))) if os.path.exists(os.path.join(d, "campaign.json")) else {}
        wall = open(os.path.join(d, "wall_s.txt")).read().strip() if os.path.exists(os.path.join(d, "wall_s.txt")) else "?"
        header = [f"## {name}: {what}", "", f"Published: {table}. Run in {wall} s on `{meta.get('platform', '?')}`, started {meta.get('started', '?')}, "
                  f"code revision `{meta.get('revision', '?')}`. Files: `{name}/report.md`, `cells_study.csv`, `comparisons.csv` (the hypotheses' tests), `which_strategy.csv`, `runs.csv`, `plots/pareto_*.png`"
                  + (", `plots/accuracy_time.png`" if os.path.exists(os.path.join(d, "plots", "accuracy_time.png")) else "") + ".", ""]
        return study_section(d, name, table, what, comps, header)
    meta = json.load(open(os.path.join(d, "campaign.json"))) if os.path.exists(os.path.join(d, "campaign.json")) else {}
    runs = sum(int(c["runs"]) for c in cells)
    wall = open(os.path.join(d, "wall_s.txt")).read().strip() if os.path.exists(os.path.join(d, "wall_s.txt")) else "?"
    lines = [f"## {name}: {what}", "", f"Published: {table}. {runs} runs in {wall} s (base and golden runs included) on `{meta.get('platform', '?')}`, started {meta.get('started', '?')}"
             + (f", code revision `{meta['revision']}`" if meta.get("revision") else "") + ". "
             f"Files: `{name}/report.md` (rules, all columns, plots), `cells.csv`, `comparisons.csv` (every test), `runs.csv`.", ""]
    lines.append(cells_table(cells, axes_of(cells)))
    lines.append("")
    verdicts = []
    for claim in claims:
        v, shown, rows = verdict(comps, claim)
        verdicts.append((claim[0], v))
        lines.append(f"- **{claim[0]}**: {v}.")
        for c in rows:
            lines.append(f"  - {detail(c)}")
    if name.startswith("nev-factors"):
        published = {"10": (2.8, 8.8), "100": (12.8, 66.8)}
        lines.append("- **Cells whose N-EV (Wilson 95% interval) overlaps the published range** (10 flips: 2.8-8.8%, 100 flips: 12.8-66.8%):")
        for flips, (lo, hi) in published.items():
            inside = [c for c in cells if c.get("inject.injection_tries") == flips and c.get("nev_lo") and float(c["nev_lo"]) <= hi and float(c["nev_hi"]) >= lo]
            total = [c for c in cells if c.get("inject.injection_tries") == flips]
            lines.append(f"  - {flips} flips: {len(inside)} of {len(total)} cells" + (": " + "; ".join(
                ", ".join(f"{k.removeprefix('inject.')}={c[k]}" for k in axes_of(cells) if k != "inject.injection_tries") + f" ({num(c['nev_pct'])}%)" for c in inside) if inside else ""))
        verdicts.append(("cells in the published range", "see section"))
    bits = read_csv(os.path.join(d, "bits.csv")) if name == "bits" else []
    if bits:
        crit = [b for b in bits if b["verdict"].startswith("more")]
        lines.append("- **Bits with more N-EV than the other bits of their precision** (bits.csv, two-proportion test, Holm over all bits): "
                     + (", ".join(f"{b['precision']}-bit bit {b['bit']} ({num(b['nev_pct'])}% [{num(b['nev_lo'])}, {num(b['nev_hi'])}] vs {num(b['others_nev_pct'])}%)" for b in crit) or "none") + ".")
        verdicts.append(("critical bits", ", ".join(f"{b['precision']}:{b['bit']}" for b in crit) or "none shown"))
    if not claims and comps:
        shown = [c for c in comps if c["verdict"] == "shown"]
        lines.append(f"- {len(shown)} of {len(comps)} tested differences shown (see comparisons.csv).")
        for c in shown[:12]:
            lines.append(f"  - {c['axis']} {c['a']} vs {c['b']}, {c['metric']}: {detail(c)}")
        verdicts.append(("differences shown", f"{len(shown)} of {len(comps)}"))
    lines.append("")
    return "\n".join(lines), (name, table, f"{runs} ({wall} s)", verdicts)


Z95 = 1.959963984540054


def two_proportions(k1, n1, k2, n2):
    """The report's test (crates/report/src/stats.rs): difference p2 - p1 with Newcombe's hybrid
    score interval (from the two Wilson intervals), two-sided p from the pooled z."""
    p1, p2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    diff = p2 - p1
    (l1, u1), (l2, u2) = wilson(k1, n1), wilson(k2, n2)
    lo = max(-1.0, diff - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2))
    hi = min(1.0, diff + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2))
    if pooled <= 0 or pooled >= 1:
        return diff, lo, hi, 1.0
    z = diff / math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return diff, lo, hi, math.erfc(abs(z) / math.sqrt(2))


def mcnemar_exact(b, c):
    """The report's exact McNemar test (crates/report/src/stats.rs) of paired outcomes from the
    discordant pairs: two-sided p = min(1, 2 P(X <= min(b, c))), X ~ Binomial(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def holm(ps):
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [1.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def wilson(k, n):
    if n == 0:
        return float("nan"), float("nan")
    p, z2 = k / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k, n):
    """`k of n (% [Wilson 95%])`."""
    if not n:
        return f"{k} of 0"
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}])"


PUBLISHED_NEV = {"10": (2.8, 8.8), "100": (12.8, 66.8)}


def tested(groups):
    """Comparison rows shaped as the report's comparisons.csv (so that verdict() and detail()
    read them) from `(fields, k_a, n_a, k_b, n_b, seeds)` groups of N-EV counts: the report's
    two-proportion test, Holm over the groups, "shown" at p < 0.05 with 3 seeds on both sides."""
    tests = [two_proportions(ka, na, kb, nb) for _, ka, na, kb, nb, _ in groups]
    out = []
    for (fields, ka, na, kb, nb, seeds), (diff, lo, hi, _), ph in zip(groups, tests, holm([t[3] for t in tests])):
        out.append(dict(fields, metric="nev_pct", value_a=100 * ka / na, value_b=100 * kb / nb, n_a=na, n_b=nb, seeds=seeds,
                        diff=100 * diff, ci_lo=100 * lo, ci_hi=100 * hi, p_holm=ph,
                        verdict="shown" if ph < 0.05 and seeds >= 3 else "not shown"))
    return out


def factor_section(root, short, long):
    """Each factor of the N-EV factor study on its own: N-EV at one level against the other,
    pooled over the other factors and the models (the grid is a full factorial, so this is the
    factor's main effect), per flip count, from runs.csv (status ok). The report's
    two-proportion test, Holm-adjusted over these comparisons; each level's pooled N-EV with
    its Wilson interval against the published range."""
    runs, corrupt, altered, total = {}, {}, {}, {}
    for name, steps in ((short, "20 steps"), (long, "400 steps")):
        for r in read_csv(os.path.join(root, name, "runs.csv")):
            flips = (name, r["inject.injection_tries"])
            if r["status"] in ("ok", "corrupt_file"):
                total[flips] = total.get(flips, 0) + 1
            if r["status"] == "corrupt_file":
                corrupt[flips] = corrupt.get(flips, 0) + 1
            elif r["status"] == "ok" and r.get("base_step", "") != r.get("restart_step", ""):
                altered[flips] = altered.get(flips, 0) + 1
            elif r["status"] == "ok":
                r["continuation"] = steps
                runs.setdefault(name, []).append(r)
    if short not in runs:
        return None, None
    if long in runs and numerics_of(meta_of(root, short).get("platform")) != numerics_of(meta_of(root, long).get("platform")):
        del runs[long]
    rows = [r for v in runs.values() for r in v]
    factors = [("inject", "32-bit word", "64-bit view", "precision"),
               ("inject.allow_NaN_values", "true", "false", "allow_NaN_values"),
               ("inject.use_random_locations", "false", "true", "datasets drawn over the whole file"),
               ("continuation", "20 steps", "400 steps", "continuation"),
               # The reference injector's sample configs and default against Table 1's setting.
               (("inject", "inject.allow_NaN_values"), ("32-bit word", "true"), ("64-bit view", "false"), "precision and allow_NaN_values together")]
    if long not in runs:
        factors = [f for f in factors if f[0] != "continuation"]
    value = lambda r, key: tuple(r[k] for k in key) if isinstance(key, tuple) else r[key]
    show = lambda level: " + ".join(level) if isinstance(level, tuple) else level
    groups = []
    for flips in ("10", "100"):
        for key, a, b, label in factors:
            pools = []
            for level in (a, b):
                sel = [r for r in rows if r["inject.injection_tries"] == flips and value(r, key) == level
                       and (key == "continuation" or r["continuation"] == "20 steps")]
                pools.append((sum(r["nev"] == "true" for r in sel), len(sel), len({r["seed"] for r in sel})))
            (ka, na, sa), (kb, nb, sb) = pools
            if na and nb:
                groups.append(({"flips": flips, "label": label, "a": show(a), "b": show(b)}, ka, na, kb, nb, min(sa, sb)))
    lines = [f"## {short}: each factor's effect on N-EV, pooled", "",
             "N-EV (by the outcome) at each level of one factor, pooled over the other factors and the three "
             "models (a full factorial, so each factor's main effect), per flip count, within "
             f"`{short}` (20-step continuation)"
             + (f", except for the continuation factor, which compares it with `{long}`" if long in runs else "")
             + ". The report's two-proportion test (Newcombe's interval), Holm over these comparisons. "
             "Published N-EV: 2.8-8.8% at 10 flips, 12.8-66.8% at 100.", "",
             f"Left out of N-EV's denominator, each its own rate of the `{short}` runs that ran or met such a file: "
             + "; ".join(f"{flips} flips: files the loader rejected {rate(corrupt.get((short, flips), 0), total.get((short, flips), 0))}, "
                         f"runs whose step counter a flip altered (their continuation trained another number of steps) "
                         f"{rate(altered.get((short, flips), 0), total.get((short, flips), 0))}"
                         for flips in ("10", "100")) + ".", "",
             "| flips | factor | level a: N-EV % [95%] | level b: N-EV % [95%] | b - a [95% CI] | p Holm | verdict | in the published range |",
             "|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for (_, ka, na, kb, nb, _), c in zip(groups, tested(groups)):
        lo_pub, hi_pub = PUBLISHED_NEV[c["flips"]]
        levels, inside = [], []
        for level, k, n in ((c["a"], ka, na), (c["b"], kb, nb)):
            wl, wh = wilson(k, n)
            levels.append(f"{level}: {100 * k / n:.1f} [{100 * wl:.1f}, {100 * wh:.1f}] (n = {n})")
            if 100 * wl <= hi_pub and 100 * wh >= lo_pub:
                inside.append(level)
        lines.append(f"| {c['flips']} | {c['label']} | {levels[0]} | {levels[1]} | {c['diff']:+.1f} [{c['ci_lo']:+.1f}, {c['ci_hi']:+.1f}] | "
                     f"{c['p_holm']:.2g} | {c['verdict']} | {', '.join(inside) or 'neither'} |")
        verdicts.append((f"{c['label']} at {c['flips']} flips", f"{c['verdict']} ({c['diff']:+.1f} points)"))
    lines.append("")
    return "\n".join(lines), (f"{short} (pooled)", "table 1: which setting its N-EV came from", f"{len(rows)} ok runs", verdicts)


def meta_of(root, name):
    path = os.path.join(root, name, "campaign.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def numerics_of(platform):
    """The numerics a platform string names: its backend and kernels revision (`flex + resilab
    kernels r4`), the part that decides the bits a run computes."""
    m = re.search(r"\(([^)]*)\)", platform or "")
    return m.group(1) if m else (platform or "?")


def current_numerics():
    """The kernels' current numerics revision (`NUMERICS` in crates/kernels/src/lib.rs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "crates", "kernels", "src", "lib.rs")).read()
    return int(re.search(r"pub const NUMERICS: u32 = (\d+);", text).group(1))


def continuation_section(root, short, long):
    """N-EV after the short continuation against the long one on the same injections: runs are
    paired by cell, seed and repetition (the same base checkpoint and fault seed, so the same
    altered files) and tested with the report's exact McNemar test, Holm over the cells. Only
    when both presets ran on the same numerics: otherwise their altered files differ."""
    a_runs, b_runs = read_csv(os.path.join(root, short, "runs.csv")), read_csv(os.path.join(root, long, "runs.csv"))
    if not a_runs or not b_runs:
        return None, None
    claim = "the longer continuation gives less N-EV"
    head = [f"## {short} vs {long}: the continuation's length", ""]
    na, nb = numerics_of(meta_of(root, short).get("platform")), numerics_of(meta_of(root, long).get("platform"))
    if na != nb:
        text = "\n".join(head + [f"Not compared: `{short}` ran on `{na}` and `{long}` on `{nb}`, so their base checkpoints, and the files "
                                 "the same flips altered, differ; the runs are not paired. Rerun both on the same numerics to compare them.", ""])
        return text, (f"{short} vs {long}", "table 1: the continuation's length", "0 pairs", [(claim, "not compared (different numerics)")])
    axes = [k for k in a_runs[0] if k.startswith("inject") or k == "model"]
    key = lambda r: (tuple(r[k] for k in axes), r["seed"], r["rep"])
    usable = lambda r: r["status"] == "ok" and r.get("base_step", "") == r.get("restart_step", "")
    longer = {key(r): r for r in b_runs if usable(r)}
    cells = {}
    for r in a_runs:
        if usable(r) and key(r) in longer:
            cells.setdefault(key(r)[0], []).append((r["nev"] == "true", longer[key(r)]["nev"] == "true", r["seed"]))
    tests = []
    for coords, pairs in cells.items():
        only_short = sum(x and not y for x, y, _ in pairs)
        only_long = sum(y and not x for x, y, _ in pairs)
        tests.append((coords, pairs, only_short, only_long, mcnemar_exact(only_short, only_long)))
    adjusted = holm([t[4] for t in tests])
    lines, shown, against = [], 0, 0
    for (coords, pairs, b, c, p), ph in zip(tests, adjusted):
        n, seeds = len(pairs), len({s for _, _, s in pairs})
        diff = 100 * (sum(y for _, y, _ in pairs) - sum(x for x, _, _ in pairs)) / n
        ok = ph < 0.05 and seeds >= 3
        shown += ok and diff < 0
        against += ok and diff > 0
        label = ", ".join(k.removeprefix("inject.") + "=" + v for k, v in zip(axes, coords))
        lines.append(f"  - {label}: {diff:+.1f} points "
                     f"({n} paired runs, N-EV in {short} only {b}, in {long} only {c}, McNemar p Holm {ph:.2g}, {seeds} seeds): "
                     + ("shown" if ok else "not shown"))
    v = f"contradicted ({against} of {len(tests)})" if against else (f"shown ({shown} of {len(tests)})" if shown == len(tests) else
                                                                    (f"partly ({shown} of {len(tests)})" if shown else f"not shown (0 of {len(tests)})"))
    text = "\n".join(head + [f"N-EV after the {short} continuation against the {long} one on the same altered checkpoints "
                             "(paired by cell, seed and repetition; runs whose step counter was altered left out), exact McNemar "
                             "test, Holm over the cells.", "", f"- **{claim}**: {v}."] + lines + [""])
    return text, (f"{short} vs {long}", "table 1: the continuation's length", f"{sum(len(t[1]) for t in tests)} paired runs", [(claim, v)])


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "results/paper"
    sections, summary = [], []
    for name, table, what, claims in PRESETS:
        s, row = preset_section(root, name, table, what, claims)
        if s:
            sections.append(s)
            summary.append(row)
    for section in (factor_section, continuation_section):
        s, row = section(root, "nev-factors", "nev-factors-5ep")
        if s:
            sections.append(s)
            summary.append(row)
    print("# Reproductions of the published tables\n")
    print("Generated by `python3 scripts/paper_readme.py results/paper` from the reports in this folder; "
          "no verdict here is written by hand. Each folder holds one `configs/paper/` preset's campaign "
          "(`bash scripts/paper.sh` reruns them all): `report.md`, `cells.csv`, `comparisons.csv`, `runs.csv`, `plots/`.\n")
    print("Rules: N-EV is decided by the outcome of the continued training (docs/metrics.md), EV injected "
          "(what the flip wrote) is its own column; shares carry Wilson 95% intervals; a difference is "
          "*shown* when its own test (two-proportion z with Newcombe's interval for rates, exact McNemar for paired rates, Welch's t for means), Holm-adjusted over "
          "the preset's report, gives p < 0.05 and both cells rest on at least 3 training seeds. A claim "
          "lists every comparison it rests on (one per combination of the other grid coordinates).\n")
    current = current_numerics()
    print(f"The numerics column names the backend and kernels revision each preset ran on; the current revision is r{current}, "
          "and a preset on an earlier one is marked *stale* (its bits, not its rules, are out of date).\n")
    print("| preset | published | runs (wall time) | numerics | verdicts |")
    print("|---|---|---|---|---|")
    for name, table, runs, verdicts in summary:
        folder = name.split(" ")[0]
        numerics = numerics_of(meta_of(root, folder).get("platform"))
        stale = "" if f"kernels r{current}" in numerics else " (*stale*)"
        print(f"| `{name}` | {table} | {runs} | {numerics}{stale} | " + "; ".join(f"{t}: **{v}**" for t, v in verdicts) + " |")
    print()
    for s in sections:
        print(s)
    # Folders written by an earlier resilab, before N-EV was decided by the outcome and before
    # differences were tested: listed, never read for a verdict.
    legacy = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n))
                    and os.path.exists(os.path.join(root, n, "cells.csv"))
                    and not os.path.exists(os.path.join(root, n, "comparisons.csv")))
    if legacy:
        print("## Earlier runs under the old rules\n")
        print("These folders were written before N-EV was decided by the outcome of training and before "
              "differences were tested; their `nev` column counted a NaN/Inf/extreme value at any point after "
              "the injection, the injected values included. They are kept for "
              "the campaign-throughput figures in the top-level README and are not read for any verdict here: "
              + ", ".join(f"`{n}/`" for n in legacy) + ".\n")


if __name__ == "__main__":
    main()
