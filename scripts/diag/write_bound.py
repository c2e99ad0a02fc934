"""What writing a call's outputs alone costs, timed as the designs' rows are (median, L2
flushed, one launch replayed from a CUDA graph and a plain call): ``fill_`` of one buffer of
the call's output bytes (K and V, bf16) at each token count, as uint8, bf16 and float32
elements (``dtype``; rows before 2026-12-01 05:03 UTC are uint8 only), and an empty Triton
launch. Not a lower bound for a kernel that writes those outputs: a plain Triton store
kernel writes them faster (scripts/diag/gather_write_bound.py; docs/perf-notes.md).

Usage on the H200: MLA_COMMIT=<sha> python3 scripts/diag/write_bound.py OUT.csv [tokens ...]
"""
import sys

import pandas as pd
import torch

from mla_kernels.lab import bench
from mla_kernels.lab.provenance import provenance
from mla_kernels.lab.roofline import output_bytes

out = sys.argv[1]
tokens = [int(t) for t in sys.argv[2:]] or [4096, 32000]


def timed(what: str, tokens: int, nbytes: int, fn, dtype: str = "") -> list[dict]:
    return [dict(provenance(), what=what, tokens=tokens, nbytes=nbytes, dtype=dtype,
                 timing=timing, median_us=bench._bench(f))
            for timing, f in (("graph", bench._graphed(fn)), ("flushed", fn))]


rows = []
for t in tokens:
    for dtype in (torch.uint8, torch.bfloat16, torch.float32):
        buf = torch.empty(output_bytes("kimi-k3-tp8", t) // dtype.itemsize, dtype=dtype,
                          device="cuda")
        rows += timed("fill", t, buf.numel() * dtype.itemsize, lambda b=buf: b.fill_(7),
                      str(dtype).removeprefix("torch."))
        del buf
rows += timed("empty launch", 0, 0, bench.empty_launch())
df = pd.DataFrame(rows)
df["tbps"] = df.nbytes / df.median_us / 1e6
df.to_csv(out, index=False)
print(df[["what", "tokens", "dtype", "nbytes", "timing", "median_us", "tbps"]].to_string(
    index=False))
