"""The performance matrix: every configuration the targets are scored on, by name.

``scripts/perf_matrix.py`` times a subset (``--points``, glob patterns over the names) and
appends each point's rows to its CSV as soon as they are measured, so a run may span
several runs at one commit (one CSV part per run).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import replace

import torch

from ..core.devices import DEVICES, DeviceSpec, live_device
from ..core.formats import WEIGHT_FORMATS
from ..designs import DESIGNS
from .bench import Point
from .measurements import DEFAULT_OUT_DTYPE, FP8_OUT_DTYPE
from .occupancy import problem_for
from .timing import FULL, SHORT

KIMI = "kimi-k3-tp8"
GLM5 = "glm-5-style"
HEADLINE = (4096, 32000, 65536, 109440)
RAGGED8 = (512, 1024, 2048, 4096, 8192, 16384, 3000, 700)
# Designs a point times where they run. serial, the public change's "before", is timed by
# the context sweep (notebook 02), not here: at long contexts it costs tens of ms a call.
TIMED = ("chunked", "tiled", "tiled_tma", "hopper_ws", "auto")
# What the kernel targets are scored on: timed at the full budget. The portable designs and
# the torch paths are drawn beside them at a shorter one (data/README.md says which rows).
TARGETS = ("hopper_ws", "auto")
# The FP8-output points (``/fp8out``) time the targets, and tiled at 32000 tokens over an
# fp8 cache as a portable design's reference: the other portable designs (and tiled
# elsewhere) add device time, not a comparison.
FP8_OUT_TIMED = ("hopper_ws", "auto")
FP8_OUT_PORTABLE = ("tiled",)
FP8_OUT_SUFFIX = "/fp8out"
# The GLM-5-style points beside the first (fp8 per row at 32000, which times TIMED, tiled
# included: what auto ran for these heads before hopper_ws served them) time the targets.
GLM5_TIMED = ("hopper_ws", "auto")


def budget(name: str) -> tuple[int, int]:
    """The timing budget of a candidate of a matrix point: ``timing.FULL`` for the targets,
    ``timing.SHORT`` for the rest."""
    return FULL if name in TARGETS else SHORT


def point(shape: str, contexts: tuple[int, ...], fmt: str, cache: str, page: int,
          variants: Iterable[str], device: DeviceSpec | None = None,
          weight_draw: str = "", out_dtype: str = DEFAULT_OUT_DTYPE) -> Point:
    """A Point timing those of ``variants`` that run this problem (with outputs of
    ``out_dtype``, torch's name) on ``device`` (default: the live GPU, else the registry's
    H200); "auto" always."""
    if device is None:
        device = live_device() or DEVICES["H200"]
    prob = problem_for(shape, contexts, cache, fmt, page, getattr(torch, out_dtype))
    runs = tuple(v for v in variants
                 if v == "auto" or (v in DESIGNS and DESIGNS[v].runs(prob, device)))
    return Point(shape, tuple(contexts), fmt, cache, page, runs, weight_draw=weight_draw,
                 out_dtype=out_dtype)


def _point(shape: str, contexts: tuple[int, ...], fmt: str, cache: str, page: int,
           device: DeviceSpec, weight_draw: str = "") -> Point:
    return point(shape, contexts, fmt, cache, page, TIMED, device, weight_draw)


# The fp8 per-row targets' points: scored on graph rows, plain calls and graph8 beside them.
GRAPH8_POINTS = tuple(f"kimi/fp8_row/fp8/p1/{c}" for c in (*HEADLINE, "64x4096")) + (
    "deepseek-v3-tp1/fp8_row/fp8/p1/32000",)
# A forward pass's calls: one a layer (61 in DeepSeek-V3 and Kimi-K3), each layer its own
# cache and weight. These points also time SEQUENCE calls on as many input sets, in one graph
# and eagerly (graph61, eager61), for the targets.
SEQUENCE = 61
SEQUENCE_POINTS = tuple(f"kimi/fp8_row/fp8/p1/{c}" for c in (4096, 8192, 32000))


def points(device: DeviceSpec = DEVICES["H200"]) -> dict[str, Point]:
    """name -> Point: Kimi-K3 TP8 at the headline contexts for every weight format and cache
    dtype (MXFP4 also with a weight too wide for e4m3, ``.../wide``); fp8 per-row at page
    sizes 16, 64 and 128; the ragged batch; 64 sequences of 4096; DeepSeek-V3 TP8 and TP1
    at 32000; GLM-5-style heads (``GLM5``) for every weight format over an fp8 cache at 4096,
    32000 and 109440, over a bf16 cache and with FP8 outputs at 32000. The points of
    ``GRAPH8_POINTS`` also time graph8, and those of ``SEQUENCE_POINTS`` (fp8 per row at 4096,
    8192, 32000) SEQUENCE calls on their own input sets, in one graph and eagerly.

    FP8 outputs (e4m3, per-tensor scales), named ``<point>/fp8out``: every weight format on
    an fp8 cache at the headline contexts and on a bf16 cache at 32000, timing
    ``FP8_OUT_TIMED`` (and ``FP8_OUT_PORTABLE`` at 32000 over an fp8 cache) beside the torch paths, each
    quantizing its bf16 result; their bf16-output twins are the points without the suffix."""
    out = {}
    for cache in ("fp8", "bf16"):
        for fmt in WEIGHT_FORMATS:
            for ctx in HEADLINE:
                out[f"kimi/{fmt}/{cache}/p1/{ctx}"] = _point(KIMI, (ctx,), fmt, cache, 1, device)
    for page in (16, 64, 128):
        for ctx in (32000, 109440):
            out[f"kimi/fp8_row/fp8/p{page}/{ctx}"] = _point(KIMI, (ctx,), "fp8_row", "fp8", page,
                                                           device)
    # MXFP4 with every row too wide for e4m3: hopper_ws's split route on every item; and at
    # 32000 rows wider still, its bf16 route.
    for ctx in HEADLINE[1:]:
        out[f"kimi/mxfp4/fp8/p1/{ctx}/wide"] = _point(KIMI, (ctx,), "mxfp4", "fp8", 1, device,
                                                     "wide")
    out["kimi/mxfp4/fp8/p1/32000/widest"] = _point(KIMI, (32000,), "mxfp4", "fp8", 1, device,
                                                   "widest")
    # 8192 tokens for the sequence timings alone (SEQUENCE_POINTS), between 4096 and 32000.
    out["kimi/fp8_row/fp8/p1/8192"] = point(KIMI, (8192,), "fp8_row", "fp8", 1, TARGETS, device)
    out["kimi/fp8_row/fp8/p1/ragged8"] = _point(KIMI, RAGGED8, "fp8_row", "fp8", 1, device)
    out["kimi/fp8_row/fp8/p1/64x4096"] = _point(KIMI, (4096,) * 64, "fp8_row", "fp8", 1, device)
    for shape in ("deepseek-v3-tp8", "deepseek-v3-tp1", GLM5):
        out[f"{shape}/fp8_row/fp8/p1/32000"] = _point(shape, (32000,), "fp8_row", "fp8", 1,
                                                      device)
    # GLM-5-style heads, timing GLM5_TIMED: every weight format over an fp8 cache at 4096,
    # 32000 (fp8 per row's above) and 109440, and at 32000 over a bf16 cache and with FP8
    # outputs (the other pages are the tests').
    for fmt in WEIGHT_FORMATS:
        for cache, ctx in (("fp8", 4096), ("fp8", 32000), ("fp8", 109440), ("bf16", 32000)):
            name = f"{GLM5}/{fmt}/{cache}/p1/{ctx}"
            if name not in out:
                out[name] = point(GLM5, (ctx,), fmt, cache, 1, GLM5_TIMED, device)
        out[f"{GLM5}/{fmt}/fp8/p1/32000{FP8_OUT_SUFFIX}"] = point(
            GLM5, (32000,), fmt, "fp8", 1, GLM5_TIMED, device, out_dtype=FP8_OUT_DTYPE)
    for fmt in WEIGHT_FORMATS:
        for cache, ctx in [("fp8", c) for c in HEADLINE] + [("bf16", 32000)]:
            timed = FP8_OUT_TIMED + (FP8_OUT_PORTABLE if (cache, ctx) == ("fp8", 32000) else ())
            out[f"kimi/{fmt}/{cache}/p1/{ctx}{FP8_OUT_SUFFIX}"] = point(
                KIMI, (ctx,), fmt, cache, 1, timed, device, out_dtype=FP8_OUT_DTYPE)
    return {name: replace(pt, graph8=name in GRAPH8_POINTS,
                          **({"sequence": SEQUENCE, "sequence_variants": TARGETS}
                             if name in SEQUENCE_POINTS else {}))
            for name, pt in out.items()}


def select(patterns: Iterable[str] | None, device: DeviceSpec = DEVICES["H200"]
           ) -> dict[str, Point]:
    """The points whose names match any of the glob patterns (all of them for None); a
    pattern matching nothing is a ValueError naming it."""
    every = points(device)
    if not patterns:
        return every
    out = {}
    for pat in patterns:
        hit = {k: v for k, v in every.items() if fnmatch.fnmatchcase(k, pat)}
        if not hit:
            raise ValueError(f"--points: expected a pattern matching one of {sorted(every)}, "
                             f"got {pat!r}")
        out.update(hit)
    return out
