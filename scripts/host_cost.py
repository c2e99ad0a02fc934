"""Host cost of the eager call on the live GPU: host_cost.csv (host time per call of every
design and of auto at 256 and 4096 tokens, beside an empty Triton launch and a torch op)
and eager_layers.csv (61 eager calls back to back against the same calls from one CUDA
graph, per call). Usage: MLA_COMMIT=<sha> python scripts/host_cost.py OUTDIR [--quick]"""
import argparse

import pandas as pd

from mla_kernels import bench
from mla_kernels.designs import DESIGNS
from mla_kernels.measurements import write_csv_atomic

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--contexts", nargs="+", type=int, default=[4096, 32000, 109440])
a = ap.parse_args()

variants = ["auto", *DESIGNS]
cost = pd.DataFrame(bench.host_cost(variants))
write_csv_atomic(cost, f"{a.out}/host_cost.csv")
anchor = float(cost.loc[cost.variant == "empty_triton_launch", "host_us"].iloc[0])
cost["x_empty_launch"] = cost["host_us"] / anchor
print(cost[["ctx", "variant", "host_us", "x_empty_launch"]].round(2).to_string(), flush=True)
layers = pd.DataFrame(bench.eager_layers(["auto", "hopper_ws", "tiled"], a.contexts))
write_csv_atomic(layers, f"{a.out}/eager_layers.csv")
layers["eager_over_graph"] = layers["eager_us"] / layers["graph_us"]
print(layers[["ctx", "variant", "eager_us", "graph_us", "eager_over_graph"]].round(3).to_string())
