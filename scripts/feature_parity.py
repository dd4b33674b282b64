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

Exits 1 when a crate is listed, with the features to add to crates/feature-parity/Cargo.toml,
and when the profile overrides CI's feature build compiles with (.ci/backends.toml) name a
crate that build would otherwise reuse.
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
            "--features", "hdf5-static,avx512,wgpu,tch,ndarray", "--test", "wgpu", "--test", "tch",
            "--test", "ndarray"]
# CI's feature build compiles what it compiles anyway at a lower opt-level (.ci/backends.toml).
OVERRIDES = ["--config", ".ci/backends.toml"]


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


def identities(us):
    """Each unit's identity: its package, target, mode, features and profile, and its
    dependencies' identities (a unit compiles again when any of these differs)."""
    memo = {}

    def ident(i):
        if i not in memo:
            u = us[i]
            deps = tuple(sorted(ident(d["index"]) for d in u["dependencies"]))
            memo[i] = hash((u["pkg_id"], u["target"]["name"], u["target"]["kind"][0], u["mode"], tuple(sorted(u["features"])),
                            json.dumps(u["profile"], sort_keys=True), u.get("platform"), deps))
        return memo[i]

    return [ident(i) for i in range(len(us))]


def reused(default_units, feature_units):
    """The packages of the feature build's units that the default build compiled already."""
    have = set(identities(default_units))
    return sorted({package(u)[0] for u, i in zip(feature_units, identities(feature_units)) if i in have})


def check_overrides(default_units, feature_units):
    """The profile overrides of .ci/backends.toml must not make the feature build compile again a
    crate it would otherwise reuse from the default build. Returns the crates they would."""
    overridden = units(FEATURES[:3] + OVERRIDES + FEATURES[3:])
    return sorted(set(reused(default_units, feature_units)) - set(reused(default_units, overridden)))


def main():
    default_units, feature_units = units(DEFAULT), units(FEATURES)
    lost = check_overrides(default_units, feature_units)
    if lost:
        print(f".ci/backends.toml overrides crates the feature build would reuse: {', '.join(lost)}")
        sys.exit(1)
    default, feature = features(default_units), features(feature_units)
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
