"""Two trees of this package timed side by side in one run on the GPU: `hopper_ws` and
`auto` for every weight format over both caches at 32000 and 109440 tokens, plain calls and
replayed from a CUDA graph (L2 flushed), the trees interleaved round by round so drift hits
both. Each round runs each tree in its own process (PYTHONPATH = the tree). The "no slower
than 3%" check of a kernel change against its starting commit.

Usage: python scripts/ab_timing.py ROWS.csv --tree 6a3775e=.ab/6a3775e --tree <sha>=. [--rounds 2]
       [--points GLOB ...]
A tree's label is recorded as its commit; it must hold mla_kernels/ (of any version whose
bench.Point and bench.run_points(design_graphs=...) exist: 3daddda and later). --points:
matrix points instead (names of lab/matrix.py, globs, as each tree's matrix names them),
timing `hopper_ws` and `auto` at each."""
import argparse
import os
import subprocess
import sys
import tempfile

import pandas as pd

CHILD = r"""
import os, sys, pandas as pd, dataclasses
import mla_kernels
# The package timed is the tree's own (run from outside any tree, its path first).
home = os.path.realpath(os.path.dirname(mla_kernels.__file__))
assert home == os.path.realpath(os.path.join(sys.argv[2], "mla_kernels")), home
from mla_kernels.lab import bench
if len(sys.argv) > 3:  # matrix points, the kernel targets only
    from mla_kernels.lab import matrix
    pts = [dataclasses.replace(p, variants=("hopper_ws", "auto"), graph8=False)
           for p in matrix.select(sys.argv[3:]).values()]
else:  # every weight format over both caches at 32000 and 109440 tokens, the targets only
    pts = [bench.Point("kimi-k3-tp8", (c,), f, cache, 1, ("hopper_ws", "auto"))
           for cache in ("fp8", "bf16") for f in ("fp8_row", "fp8_block", "bf16", "mxfp4")
           for c in (32000, 109440)]
rows = bench.run_points(pts, torch_paths=False, design_graphs=True, progress=False)
rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in rows]
pd.DataFrame(rows).to_csv(sys.argv[1], index=False)
"""

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--tree", action="append", required=True, help="LABEL=PATH")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--points", nargs="+", default=[])
a = ap.parse_args()
trees = [t.split("=", 1) for t in a.tree]
frames = []
with tempfile.TemporaryDirectory() as tmp:
    for rnd in range(a.rounds):
        for label, path in trees:
            out = os.path.join(tmp, f"{label}-{rnd}.csv")
            env = dict(os.environ, PYTHONPATH=os.path.abspath(path) + os.pathsep
                       + os.environ.get("PYTHONPATH", ""), MLA_RUN_LABEL=label)
            # Run from the temporary folder: ``python -c`` puts its working folder first on
            # the path, where a tree's root would shadow PYTHONPATH's tree.
            r = subprocess.run([sys.executable, "-c", CHILD, out, os.path.abspath(path),
                                *a.points], env=env, text=True, capture_output=True, cwd=tmp)
            if r.returncode:
                print(r.stdout[-2000:], r.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"tree {label} failed in round {rnd}")
            frames.append(pd.read_csv(out).assign(tree=label, round=rnd))
            print(f"round {rnd}: {label} done", flush=True)
df = pd.concat(frames, ignore_index=True)
df.to_csv(a.out, index=False)
if "weight_draw" not in df:  # a tree from before the column
    df["weight_draw"] = ""
key = ["tree", "model", "cache_dtype", "weight_format", "ctx", "weight_draw", "variant", "timing"]
g = df.fillna({"weight_draw": ""}).groupby(key)["median_us"]
t = g.median().unstack("tree")
labels = [lab for lab, _ in trees]
if len(labels) > 1:  # one tree: its times alone
    t["new_over_old"] = t[labels[1]] / t[labels[0]]
pd.set_option("display.width", 200)
print(t.round(3).to_string())
print("all correct:", bool(df.correct.all()))
