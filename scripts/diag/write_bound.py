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
rows = []
for t in tokens:
    buf = torch.empty(t * per_token, dtype=torch.uint8, device="cuda")
    fill = lambda b=buf: b.fill_(7)  # noqa: E731
    for timing, fn in (("graph", bench._graphed(fill)), ("flushed", fill)):
        rows.append(dict(provenance(), what="fill", tokens=t, nbytes=buf.numel(),
                         timing=timing, median_us=bench._bench(fn)))
    del buf
args = [torch.empty(16, device="cuda") for _ in range(9)]


def empty() -> None:
    bench.empty_kernel[(132,)](*args, *range(11), C0=1, C1=2, C2=3, C3=4)


for timing, fn in (("graph", bench._graphed(empty)), ("flushed", empty)):
    rows.append(dict(provenance(), what="empty launch", tokens=0, nbytes=0, timing=timing,
                     median_us=bench._bench(fn)))
df = pd.DataFrame(rows)
df["tbps"] = df.nbytes / df.median_us / 1e6
df.to_csv(out, index=False)
print(df[["what", "tokens", "nbytes", "timing", "median_us", "tbps"]].to_string(index=False))
