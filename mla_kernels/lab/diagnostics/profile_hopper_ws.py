"""One hopper_ws launch for Nsight Compute to profile (measured on 2026-12-01:
docs/log/2026-12-01-rounds-c-f-profile.md): a warm-up launch, then the profiled one. On the
H200, for example (the report to reports/diag/, which git ignores):

  mkdir -p reports/diag
  ncu --kernel-name hopper_ws_kernel --launch-skip 1 --launch-count 1 --set full \
      --clock-control none -o reports/diag/hws python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000

Arguments: tokens of one sequence (default 32000), then the weight format and cache dtype
(default fp8_row fp8); Kimi-K3 TP8, page size 1. The script writes nothing itself.
"""

import argparse

import torch

from ...api import gather_kv_b_proj
from ..inputs import build_inputs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokens", nargs="?", type=int, default=32000, help="default 32000")
    ap.add_argument("weight_format", nargs="?", default="fp8_row", help="default fp8_row")
    ap.add_argument("cache_dtype", nargs="?", default="fp8", help="default fp8")
    a = ap.parse_args(argv)
    inp = build_inputs("kimi-k3-tp8", [a.tokens], block_size=1, cache_dtype=a.cache_dtype,
                       weight_format=a.weight_format, device="cuda", seed=0)
    for _ in range(2):
        gather_kv_b_proj(*inp.args(), variant="hopper_ws")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
