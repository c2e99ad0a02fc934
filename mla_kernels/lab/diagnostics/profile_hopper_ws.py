"""One hopper_ws launch for Nsight Compute to profile (measured on 2026-12-01:
docs/log/2026-12-01-rounds-c-f-profile.md): a warm-up launch, then the profiled one. On the
H200, for example (the report to reports/diag/, which git ignores):

  mkdir -p reports/diag
  ncu --kernel-name hopper_ws_kernel --launch-skip 1 --launch-count 1 --set full \
      --clock-control none -o reports/diag/hws python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000

Arguments: tokens of one sequence (default 32000), then the weight format and cache dtype
(default fp8_row fp8); Kimi-K3 TP8, page size 1; ``--variant auto`` for auto's config (the
kernel is hopper_ws_kernel either way on an H200; auto's table names no other device),
``--config NAME`` for one of ``fp8_outputs.CONFIGS`` on hopper_ws, ``--out-dtype
float8_e4m3fn`` for FP8 outputs. The script writes nothing itself.
"""

import argparse

import torch

from ...api import gather_kv_b_proj
from ..inputs import build_inputs
from .fp8_outputs import CONFIGS, OUTS


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokens", nargs="?", type=int, default=32000, help="default 32000")
    ap.add_argument("weight_format", nargs="?", default="fp8_row", help="default fp8_row")
    ap.add_argument("cache_dtype", nargs="?", default="fp8", help="default fp8")
    ap.add_argument("--variant", choices=("hopper_ws", "auto"), default="hopper_ws",
                    help="hopper_ws's default config, or auto's (default hopper_ws)")
    ap.add_argument("--config", choices=sorted(CONFIGS), default=None,
                    help="a config of fp8_outputs.CONFIGS for hopper_ws (default: its default)")
    ap.add_argument("--out-dtype", choices=sorted(OUTS), default="bfloat16",
                    help="the outputs' dtype (default bfloat16)")
    a = ap.parse_args(argv)
    inp = build_inputs("kimi-k3-tp8", [a.tokens], block_size=1, cache_dtype=a.cache_dtype,
                       weight_format=a.weight_format, device="cuda", seed=0,
                       out_dtype=OUTS[a.out_dtype])
    for _ in range(2):
        gather_kv_b_proj(*inp.args(), variant=a.variant,
                         config=None if a.config is None else CONFIGS[a.config])
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
