"""One hopper_ws launch for Nsight Compute to profile (docs/perf-notes.md, session of
2026-12-01): a warm-up launch, then the profiled one. On the lent H200, for example:

  ncu --kernel-name hopper_ws_kernel --launch-skip 1 --launch-count 1 --set full \
      --clock-control none -o $OUT/hws python3 scripts/diag/profile_hopper_ws.py 32000

Arguments: tokens of one sequence (default 32000), then the weight format and cache dtype
(default fp8_row fp8); Kimi-K3 TP8, page size 1.
"""

import sys

import torch

import mla_kernels as mk

tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 32000
fmt = sys.argv[2] if len(sys.argv) > 2 else "fp8_row"
cache = sys.argv[3] if len(sys.argv) > 3 else "fp8"
inp = mk.build_inputs("kimi-k3-tp8", [tokens], block_size=1, cache_dtype=cache,
                      weight_format=fmt, device="cuda", seed=0)
for _ in range(2):
    mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws")
torch.cuda.synchronize()
