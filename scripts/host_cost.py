"""Host cost of the eager call on the live GPU: host_cost.csv (host time per call of every
design and of auto at 256 and 4096 tokens, beside an empty Triton launch and a torch op,
interleaved round by round), host_profile.txt (cProfile of cached calls) and
eager_layers.csv (61 eager calls back to back against the same calls from one CUDA graph,
per call).

Usage: python scripts/host_cost.py FOLDER [--before LABEL=PATH]
``--before`` also times the package of another tree (its checkout at PATH, e.g. made by
``git worktree add``) in the same process and rounds, as LABEL: a before/after."""
import argparse
import importlib.util
import sys

import pandas as pd

import mla_kernels
from mla_kernels.designs import DESIGNS
from mla_kernels.lab import host_cost
from mla_kernels.lab.measurements import write_csv_atomic
from mla_kernels.lab.provenance import provenance


def load_tree(path: str, name: str = "mla_kernels_before"):
    """The package at PATH/mla_kernels imported under another name, beside this one."""
    spec = importlib.util.spec_from_file_location(
        name, f"{path}/mla_kernels/__init__.py", submodule_search_locations=[f"{path}/mla_kernels"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--contexts", nargs="+", type=int, default=[4096, 32000, 109440])
ap.add_argument("--before", help="LABEL=PATH of another tree to time beside this one")
a = ap.parse_args()

trees = {provenance()["commit"]: mla_kernels.gather_kv_b_proj}
if a.before:
    label, path = a.before.split("=", 1)
    trees[label] = load_tree(path).gather_kv_b_proj
variants = ["auto", *DESIGNS]
cost = pd.DataFrame(host_cost.host_cost(variants, trees=trees))
write_csv_atomic(cost, f"{a.out}/host_cost.csv")
pd.set_option("display.width", 200)
table = cost.pivot_table(index=["ctx", "variant"], columns="tree",
                         values=["host_us", "x_empty_launch"], sort=False)
print(table.round(2).to_string(), flush=True)
with open(f"{a.out}/host_profile.txt", "w") as f:
    for label, call in trees.items():
        for v in ("hopper_ws", "tiled"):
            f.write(f"==== {label}: {v}, 4096 tokens, 2000 cached calls\n")
            f.write(host_cost.host_profile(v, 4096, call=call))
layers = pd.DataFrame(host_cost.eager_layers(["auto", "hopper_ws", "tiled"], a.contexts))
write_csv_atomic(layers, f"{a.out}/eager_layers.csv")
layers["eager_over_graph"] = layers["eager_us"] / layers["graph_us"]
print(layers[["ctx", "variant", "eager_us", "graph_us", "eager_over_graph"]].round(3).to_string())
