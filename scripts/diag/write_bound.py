"""What writing a call's outputs alone costs, timed as the designs' rows are (median, L2
flushed, one launch replayed from a CUDA graph and a plain call): ``fill_`` of one buffer of
the call's output bytes (K and V, bf16) at each token count, and an empty Triton launch.
A lower bound for any kernel that writes those outputs (docs/perf-notes.md, bounds).

Usage on the H200: MLA_COMMIT=<sha> python3 scripts/diag/write_bound.py OUT.csv [tokens ...]
"""
import sys

import pandas as pd
import torch

from mla_kernels import bench
from mla_kernels.provenance import provenance
from mla_kernels.shapes import get_shape

out = sys.argv[1]
tokens = [int(t) for t in sys.argv[2:]] or [4096, 32000]
shape = get_shape("kimi-k3-tp8")
per_token = shape.num_heads * (shape.k_head_dim + shape.v_head_dim) * 2  # bf16 K and V


def timed(what: str, tokens: int, nbytes: int, fn) -> list[dict]:
    return [dict(provenance(), what=what, tokens=tokens, nbytes=nbytes, timing=timing,
                 median_us=bench._bench(f))
            for timing, f in (("graph", bench._graphed(fn)), ("flushed", fn))]


rows = []
for t in tokens:
    buf = torch.empty(t * per_token, dtype=torch.uint8, device="cuda")
    rows += timed("fill", t, buf.numel(), lambda b=buf: b.fill_(7))
    del buf
rows += timed("empty launch", 0, 0, bench.empty_launch())
df = pd.DataFrame(rows)
df["tbps"] = df.nbytes / df.median_us / 1e6
df.to_csv(out, index=False)
print(df[["what", "tokens", "nbytes", "timing", "median_us", "tbps"]].to_string(index=False))
