"""What variant="auto" runs: a committed table of the best measured design and launch
config per (device, weight format), with a portable fallback for unknown devices.

Entries come from `scripts/tune.py` on the lent H200 (Kimi-K3 TP8, fp8 cache, page size 1,
32000 tokens; rows in data/exploration/h200/: tune_2026-11-29.csv for the portable designs,
tune_2026-11-30.csv for hopper_ws's ring depths 2-4, whose plain-call rows are host-bound
below 109440 tokens; depth 4 was chosen from graph timings, docs/perf-notes.md). A design
the table names but a problem cannot use (hopper_ws off an sm_90 GPU, or outside its
shapes) falls back to FALLBACK. Re-run it to extend the table to another device.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from .designs import LaunchConfig
from .devices import lookup_device

TUNED: dict[tuple[str, str], tuple[str, LaunchConfig]] = {
    ("H200", "fp8_row"): ("hopper_ws", LaunchConfig(stages=4)),
    ("H200", "fp8_block"): ("tiled", LaunchConfig(chunk_tokens=128, num_warps=8, num_stages=2,
                                                  split_parts=True)),
    ("H200", "bf16"): ("tiled", LaunchConfig(chunk_tokens=64, num_warps=4, num_stages=2,
                                             split_parts=True)),
    ("H200", "mxfp4"): ("tiled", LaunchConfig(chunk_tokens=128, num_warps=8, num_stages=2,
                                              split_parts=False)),
}

# The best portable design on every format measured: tiled, split, 64-row tiles.
FALLBACK: tuple[str, LaunchConfig] = ("tiled", LaunchConfig(chunk_tokens=64, num_warps=4,
                                                            split_parts=True))


@lru_cache(maxsize=16)
def _device_key(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    spec = lookup_device(torch.cuda.get_device_name(device))
    return spec.name if spec else torch.cuda.get_device_name(device)


def auto_choice(weight_format: str, device: torch.device) -> tuple[str, LaunchConfig]:
    """(design name, launch config) that "auto" runs on this device for this format."""
    return TUNED.get((_device_key(device), weight_format), FALLBACK)


def named_design(variant: str, weight_format: str, device_name: str):
    """(Design, LaunchConfig) a variant name stands for on a registry device, "auto" through
    this table, for models (occupancy) that reason about a device without running on it."""
    from .designs import DESIGNS

    if variant == "auto":
        spec = lookup_device(device_name)
        name, cfg = TUNED.get((spec.name if spec else device_name, weight_format), FALLBACK)
        return DESIGNS[name], cfg
    if variant not in DESIGNS:
        raise ValueError(f"variant: expected one of {['auto', *DESIGNS]}, got {variant!r}")
    return DESIGNS[variant], DESIGNS[variant].default_config
