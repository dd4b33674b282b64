#!/usr/bin/env python3
"""Lists the crates that CI's wgpu and tch build would compile again with other features than
the README's test command compiled them with (see crates/feature-parity/Cargo.toml). It asks
cargo for both builds' unit graphs (`--unit-graph`, unstable: allowed here by RUSTC_BOOTSTRAP=1)
without compiling anything, and compares each crate's features, for the target and for build
scripts and procedural macros separately. Burn's and CubeCL's crates are left out: the GPU
backends change their features by design. So are resilab's own (such as resilab-testkit, whose
`toy` feature only the workspace's tests turn on): they compile in seconds, and those above Burn
compile again in any case.

    python3 scripts/feature_parity.py          # nothing listed: the two builds agree

Exits 1 when a crate is listed, with the features to add to crates/feature-parity/Cargo.toml.
Needs the tch virtual environment (scripts/setup.sh --tch), as the feature build does.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["cargo", "build", "--release", "--workspace", "--tests"]
FEATURES = ["bash", "scripts/with-tch.sh", "cargo", "build", "--release", "--no-default-features",
            "--features", "hdf5-static,avx512,wgpu,tch", "--test", "wgpu", "--test", "tch"]


def units(command):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(command + ["-Z", "unstable-options", "--unit-graph"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"feature_parity: {' '.join(command)} failed:\n{out.stderr}")
    return json.loads(out.stdout)["units"]


def package(unit):
    m = re.search(r"#([^@]+)@(.+)$", unit["pkg_id"])
    return (m.group(1), m.group(2)) if m else (unit["pkg_id"], "")


def features(us):
    """Each library's feature sets, keyed by (package, built for build scripts and macros)."""
    host, stack = set(), [i for i, u in enumerate(us) if u["target"]["kind"][0] in ("proc-macro", "custom-build") and u["mode"] == "build"]
    while stack:
        i = stack.pop()
        if i not in host:
            host.add(i)
            stack.extend(d["index"] for d in us[i]["dependencies"])
    out = {}
    for i, u in enumerate(us):
        if u["mode"] == "build" and u["target"]["kind"][0] in ("lib", "rlib", "proc-macro"):
            out.setdefault((package(u), i in host), set()).add(tuple(sorted(u["features"])))
    return out


def main():
    default, feature = features(units(DEFAULT)), features(units(FEATURES))
    listed = 0
    for key in sorted(feature):
        (name, version), host = key
        if key not in default or default[key] == feature[key] or name.startswith(("burn", "cubecl", "resilab")):
            continue
        have = set().union(*map(set, default[key]))
        want = set().union(*map(set, feature[key]))
        where = "build-dependencies" if host else "dependencies"
        print(f"{name} {version} ({where}): the feature build adds {sorted(want - have)}, leaves out {sorted(have - want)}")
        listed += 1
    if listed:
        print(f"{listed} crates would compile twice: give crates/feature-parity their features in both builds")
        sys.exit(1)
    print("the feature build compiles no crate below Burn again with other features")


if __name__ == "__main__":
    main()
