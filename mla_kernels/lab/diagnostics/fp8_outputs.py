"""FP8 outputs beside bf16 ones on hopper_ws, config by config, in one process: each call
checked against the reference, then timed as one launch replayed from a CUDA graph (median,
L2 flushed), bf16 and FP8 outputs of one config back to back. A round's look before the
matrix, which times only what ``auto`` and the default run.

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.fp8_outputs [--out FOLDER]
[--cases I,J] [--configs A,B] [--warm]  (rows to FOLDER/fp8_outputs.csv; FOLDER defaults
to reports/diag/, which git ignores). ``--warm`` compiles and checks every config on 1000
tokens and times nothing (several such processes fill the compile cache side by side);
``--cases`` picks entries of CASES by index, ``--configs`` keeps only the named configs.
"""
from __future__ import annotations

import pandas as pd
import torch

from ...api import gather_kv_b_proj
from ...designs.hopper_ws import HopperWSConfig
from ..bench import WEIGHT_DRAWS, check_columns
from ..checks import check_outputs
from ..inputs import build_inputs
from ..provenance import provenance
from ..timing import graphed, measure
from .command_line import parser, write_rows


def _in_registers(ring_depth: int, **more) -> HopperWSConfig:
    """Two MMA groups holding the tile's latent in registers."""
    return HopperWSConfig(ring_depth=ring_depth, mma_groups=2, latent_in_registers=True, **more)


CONFIGS = {"r4": HopperWSConfig(ring_depth=4), "r6": HopperWSConfig(ring_depth=6),
           "r6g2": HopperWSConfig(ring_depth=6, mma_groups=2),
           "r4g2L": _in_registers(4), "r5g2L": _in_registers(5), "r6g2L": _in_registers(6),
           # FP8 staging: a seventh slot (r7), one staging buffer (1), an eighth slot
           # beside one buffer (r8).
           "r7g2L": _in_registers(7), "r6g2L1": _in_registers(6, staging_buffers=1),
           "r7g2L1": _in_registers(7, staging_buffers=1),
           "r8g2L1": _in_registers(8, staging_buffers=1),
           # One group, one staging buffer where two fit (MXFP4 widened once a call).
           "r4s1": HopperWSConfig(ring_depth=4, staging_buffers=1),
           "r6s1": HopperWSConfig(ring_depth=6, staging_buffers=1),
           "r6pp": HopperWSConfig(ring_depth=6, mma_groups=2, pingpong=True),
           "r4pp": HopperWSConfig(ring_depth=4, mma_groups=2, pingpong=True),
           # The ping-pong schedule with spare latent chunk slots (s1-s3), each beside the
           # deepest weight ring that fits with FP8 outputs.
           "r6pp_s1": HopperWSConfig(ring_depth=6, mma_groups=2, pingpong=True,
                                     spare_latent_chunks=1),
           "r5pp_s2": HopperWSConfig(ring_depth=5, mma_groups=2, pingpong=True,
                                     spare_latent_chunks=2),
           "r4pp_s3": HopperWSConfig(ring_depth=4, mma_groups=2, pingpong=True,
                                     spare_latent_chunks=3)}
# (weight format, cache, tokens of one sequence, configs[, weight draw]): Kimi-K3 TP8, page
# size 1; the draw a key of bench.WEIGHT_DRAWS. A config the design refuses for one output
# dtype (r6pp: bf16 outputs' staging does not fit beside six slots) is left out for it.
SPARE = ("r6pp_s1", "r5pp_s2", "r4pp_s3")
CASES = [("fp8_row", "fp8", 32000, ("r6g2L", "r6pp", "r4pp", "r6g2", "r4", *SPARE)),
         ("fp8_row", "fp8", 109440, ("r6g2L", "r6pp", "r4pp", "r4", *SPARE)),
         ("fp8_block", "fp8", 32000, ("r4", "r6pp", "r4pp", *SPARE)),
         # A bf16 weight: the bf16 tile (r4), or the fp8 tile widened into each group's
         # registers (g2L).
         ("bf16", "fp8", 32000, ("r4", "r4g2L", "r5g2L", "r6g2L", "r7g2L", "r6g2L1", "r7g2L1",
                                 "r8g2L1")),
         ("fp8_row", "bf16", 32000, ("r4",)),
         ("fp8_row", "fp8", 4096, ("r4", "r6pp")),
         ("fp8_block", "fp8", 4096, ("r4", "r6pp")),
         ("fp8_block", "fp8", 109440, ("r4", "r6pp")),
         # MXFP4 whose every item takes the split route: two fp8 K loops over the fp8 tile,
         # a bf16 weight's bytes and tensor-core time without widening the latent.
         ("mxfp4", "fp8", 32000, ("r4", "r6", "r6g2"), "wide"),
         ("bf16", "fp8", 109440, ("r4", "r6g2L", "r7g2L", "r6g2L1", "r7g2L1", "r8g2L1")),
         ("bf16", "fp8", 4096, ("r4", "r6g2L", "r7g2L", "r6g2L1", "r7g2L1", "r8g2L1")),
         # MXFP4 as the matrix draws it, on auto's ring and deeper, with one staging buffer.
         ("mxfp4", "fp8", 32000, ("r4", "r4s1", "r6", "r6s1"))]
OUTS = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn}


def run(cases, warm: bool) -> list[dict]:
    prov, rows = provenance(), []
    for fmt, cache, tokens, names, *draw in cases:
        tokens = 1000 if warm else tokens
        draw = draw[0] if draw else ""
        inputs = {o: build_inputs("kimi-k3-tp8", [tokens], cache_dtype=cache, weight_format=fmt,
                                  device="cuda", out_dtype=d, **WEIGHT_DRAWS[draw])
                  for o, d in OUTS.items()}
        for name in names:
            cfg = CONFIGS[name]
            for out, inp in inputs.items():
                inp.poison_outputs()
                try:
                    gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=cfg)
                except ValueError as e:  # refused before anything is written
                    print(f"{fmt:9s} {cache:4s} {tokens:6d} {name:6s} {out:13s} left out: {e}")
                    continue
                res = check_outputs(inp)
                t = None if warm else measure(graphed(
                    lambda inp=inp, cfg=cfg: gather_kv_b_proj(*inp.args(), variant="hopper_ws",
                                                              config=cfg)))
                row = {**prov, "model": "kimi-k3-tp8", "weight_format": fmt, "cache_dtype": cache,
                       "block_size": 1, "ctx": tokens, "weight_draw": draw,
                       "variant": "hopper_ws", "config": repr(cfg),
                       "config_name": name, "out_dtype": out, "timing": "graph",
                       "median_us": float("nan") if t is None else t.median_us,
                       "q1_us": float("nan") if t is None else t.q1_us,
                       "q3_us": float("nan") if t is None else t.q3_us,
                       "reps": 0 if t is None else t.reps, **check_columns(res)}
                rows.append(row)
                print(f"{fmt:9s} {cache:4s} {tokens:6d} {name:6s} {out:13s} "
                      f"{row['median_us']:8.1f} us  correct {res['correct']}  exact "
                      f"{row['fp8_exact_share']:.4f}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = parser(__doc__, "fp8_outputs.csv")
    ap.add_argument("--cases", help="indices of CASES, comma-separated (default: all)")
    ap.add_argument("--configs", help="names of CONFIGS to keep, comma-separated (default: all)")
    ap.add_argument("--warm", action="store_true", help="compile and check only, on 1000 tokens")
    a = ap.parse_args()
    cases = CASES if not a.cases else [CASES[int(i)] for i in a.cases.split(",")]
    if a.configs:
        keep = a.configs.split(",")
        unknown = sorted(set(keep) - set(CONFIGS))
        if unknown:
            ap.error(f"--configs: expected names of {sorted(CONFIGS)}, got {unknown}")
        cases = [(f, c, t, tuple(n for n in names if n in keep), *d)
                 for f, c, t, names, *d in cases]
    rows = run(cases, a.warm)
    if not a.warm:
        print(write_rows(pd.DataFrame(rows), a.out, "fp8_outputs.csv"))


if __name__ == "__main__":
    main()
