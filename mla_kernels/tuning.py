"""What variant="auto" runs: a committed table of the best measured design and launch config
per (device, weight format, cache dtype, page size), and the portable fallback.

Data only: entries name a design and its config fields; ``designs.resolve`` turns them into
a design and its typed config (and falls back where the named design cannot run the
problem: hopper_ws off an sm_90 GPU, or outside its shapes). Importing nothing from the
designs keeps the two free of a cycle.

Sources (scripts/tune.py and the performance matrix on the lent H200; Kimi-K3 TP8, page 1):
- fp8_row: hopper_ws with a 4-deep weight ring (graph timings of rounds 1 and 2,
  docs/perf-notes.md; data/exploration/h200/tune_2026-11-30.csv).
- the other formats: the portable tiled design, data/exploration/h200/tune_2026-11-29.csv
  (32000 tokens, fp8 cache).
Page sizes other than 1 and bf16 caches have not been tuned: they take the entry measured
at page 1 on an fp8 cache (``ANY``), re-run scripts/tune.py to refine them.
"""

from __future__ import annotations

ANY = "*"

# (device, weight format, cache dtype, page size) -> (design, config fields)
TUNED: dict[tuple[str, str, str, object], tuple[str, dict]] = {
    ("H200", "fp8_row", "fp8", ANY): ("hopper_ws", {"ring_depth": 4}),
    ("H200", "fp8_block", ANY, ANY): ("tiled", {"block_m": 128, "num_warps": 8, "num_stages": 2,
                                                "split": True}),
    ("H200", "bf16", ANY, ANY): ("tiled", {"block_m": 64, "num_warps": 4, "num_stages": 2,
                                           "split": True}),
    ("H200", "mxfp4", ANY, ANY): ("tiled", {"block_m": 128, "num_warps": 8, "num_stages": 2,
                                            "split": False}),
}

# The best portable design on every format measured: tiled, split, 64-row tiles.
FALLBACK: tuple[str, dict] = ("tiled", {"block_m": 64, "num_warps": 4, "split": True})


def lookup(device: str, weight_format: str, cache_dtype: str, block_size: int
           ) -> tuple[str, dict]:
    """The most specific entry for this problem class on this device, else FALLBACK."""
    for key in ((device, weight_format, cache_dtype, block_size),
                (device, weight_format, cache_dtype, ANY),
                (device, weight_format, ANY, block_size),
                (device, weight_format, ANY, ANY)):
        if key in TUNED:
            return TUNED[key]
    return FALLBACK
