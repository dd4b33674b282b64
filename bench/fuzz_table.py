#!/usr/bin/env python3
"""Prints the Markdown table of a fuzzing CSV (results/bench/fuzz.csv by default): one row per
command of its newest run, the README's Reliability table.

    python3 bench/fuzz_table.py [results/bench/fuzz.csv]
"""
import csv
import sys

FAILURES = ["messy_error", "panic", "signal", "hang", "input_modified"]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "results/bench/fuzz.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    newest = {}
    for r in rows:
        newest[r["command"]] = r  # later rows replace earlier ones
    print("| command | cases | ok | clean error | " + " | ".join(c.replace("_", " ") for c in FAILURES) + " | seconds (summed) |")
    print("|---|" + "---|" * (4 + len(FAILURES)))
    for cmd, r in newest.items():
        cells = [cmd, f"{int(r['cases']):,}", f"{int(r['ok']):,}", f"{int(r['clean_error']):,}"]
        cells += [r[c] for c in FAILURES] + [f"{float(r['seconds']):.0f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
