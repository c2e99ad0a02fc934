"""Benchmark harness: times any design by name, the torch path a user would write, and the
device's own ceilings, in one run; every timed configuration is checked against the
reference, so a fast wrong kernel is reported as wrong.

GPU only (timings: ``timing.measure``, a flushed L2, the median with its quartiles).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..api import gather_kv_b_proj
from ..core.reference import quantize_e4m3, token_rows
from ..core.shapes import get_shape
from ..designs import DesignConfig, resolve
from . import roofline
from .cases import build_case
from .checks import check_outputs, expected
from .clock import ClockLog
from .inputs import GatherInputs, HostDraws, build_inputs
from .measurements import DEFAULT_OUT_DTYPE, Measurement, contexts_str
from .provenance import provenance
from .timing import FULL, NOT_TIMED, Timing, graphed, measure, median_us, rotating

NAN = float("nan")
L2_ROTATE_BYTES = 2 * 60 * 2**20  # rotate input sets smaller than twice the H200's L2
# The host draws a matrix run keeps for later points (scripts/perf_matrix.py's
# ``inputs.HostDraws``): every point's base and rotation sets, 3.8 GiB at 87 points.
MATRIX_DRAW_BYTES = 6 * 2**30
# Input sets drawn at once: a set's draw runs on the host, one core each (torch's seeded
# generators), and a sequence point draws tens of sets.
BUILD_THREADS = max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class Point:
    """One benchmarked configuration and the designs to time on it."""

    shape: str
    contexts: tuple[int, ...]
    weight_format: str
    cache_dtype: str
    block_size: int
    variants: tuple[str, ...]
    configs: dict = field(default_factory=dict, hash=False, compare=False)
    weight_draw: str = ""  # a key of WEIGHT_DRAWS
    graph8: bool = False  # also time 8 back-to-back launches in one graph (run_points)
    # Also time ``sequence`` back-to-back calls, each with its own input set, as a forward
    # pass's layers make them (``time_sequence``), for those of ``variants`` named here.
    sequence: int = 0
    sequence_variants: tuple[str, ...] = ()
    out_dtype: str = DEFAULT_OUT_DTYPE  # the outputs' dtype, torch's name ("float8_e4m3fn")

    @property
    def out_torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.out_dtype)


# build_inputs' weight options by name, beside the format's default draw: "wide", an MXFP4
# weight every row of which spans 13 binades of scale, one more than e4m3 holds (hopper_ws
# runs every item on its split route: two e4m3 parts); "widest", every row spanning 25
# (beyond the split route: every item on its bf16 route).
WEIGHT_DRAWS: dict[str, dict] = {
    "": {},
    "wide": {"e8m0_range": (-8, 4), "e8m0_full_span": True},
    "widest": {"e8m0_range": (-20, 4), "e8m0_full_span": True},
}


# ------------------------------------------------------------------ ceilings
def _copy_and_fill_us(nbytes: int) -> tuple[float, float]:
    # float32 elements: torch's fill_ of a uint8 or bf16 buffer writes about 25% slower on
    # the H200 (docs/log/2026-12-01-gather-write-bound.md), which made the
    # write ceiling, and write_floor_us, the rate of that fill rather than of the device.
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    return median_us(lambda: dst.copy_(src)), median_us(lambda: dst.fill_(7.0))


def measure_ceilings(shape: str = "kimi-k3-tp8", tokens: int = 32000,
                     tensor_cores: str | os.PathLike | None = None) -> dict[str, float]:
    """Copy (read + write), write-only fill, and the matrix rates at this op's M, N, K (cuBLAS;
    fp8 also at K = 2 kv_c, ``mm_tflops_fp8x2``, MXFP4's split route's product); with
    ``tensor_cores``, the tensor cores' own rates of that CSV of
    ``lab.diagnostics.mma_rate``'s rows (``tensor_core_rates``)."""
    if tensor_cores and not Path(tensor_cores).is_file():
        raise ValueError(f"tensor_cores: expected mma_rate's CSV, got {str(tensor_cores)!r} "
                         "(no such file)")
    dev = "cuda"
    nbytes = 2**30
    copy_us, fill_us = _copy_and_fill_us(nbytes)
    s = get_shape(shape)
    m, n, k = tokens, s.weight_rows, s.kv_c_dim
    a = torch.randn(m, k, device=dev).bfloat16()
    b = torch.randn(n, k, device=dev).bfloat16()
    bf16_us = median_us(lambda: a @ b.t())
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev)
    fp8 = {}
    for name, sa, sb in (("tensor", one, one),
                         ("row", torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev))):
        for fast in (False, True):
            try:
                fp8[f"{name}{'_fast' if fast else ''}"] = median_us(
                    lambda sa=sa, sb=sb, f=fast: torch._scaled_mm(
                        a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                        use_fast_accum=f))
            except (RuntimeError, TypeError):
                continue  # a mode this build does not offer
    # MXFP4's split route: two fp8 K loops on one accumulator, the matrix work of one
    # product of K = 2 kv_c (cuBLAS runs a longer K nearer its peak than two products).
    a2 = torch.randn(m, 2 * k, device=dev).to(torch.float8_e4m3fn)
    b2 = torch.randn(n, 2 * k, device=dev).to(torch.float8_e4m3fn)
    fp8x2 = []
    for fast in (False, True):
        try:
            fp8x2.append(median_us(lambda f=fast: torch._scaled_mm(
                a2, b2.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                use_fast_accum=f)))
        except (RuntimeError, TypeError):
            continue
    flop = 2 * m * n * k
    return {
        "copy_tbps": 2 * nbytes / copy_us / 1e6,
        "write_tbps": nbytes / fill_us / 1e6,
        "mm_tflops_bf16": flop / bf16_us / 1e6,
        "mm_tflops_fp8": flop / min(fp8.values()) / 1e6,
        **{f"mm_tflops_fp8_{k_}": flop / v / 1e6 for k_, v in fp8.items()},
        **({"mm_tflops_fp8x2": 2 * flop / min(fp8x2) / 1e6} if fp8x2 else {}),
        **(tensor_core_rates(tensor_cores) if tensor_cores else {}),
    }


# ------------------------------------------------------------------ the torch path
def _quantize_pair(k: torch.Tensor, v: torch.Tensor, k_scale: torch.Tensor,
                   v_scale: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor) -> None:
    # The contract's rule itself, traced into one compiled function for both tensors.
    k_out.copy_(quantize_e4m3(k, k_scale))
    v_out.copy_(quantize_e4m3(v, v_scale))


@functools.cache
def quantize_outputs() -> Callable[..., None]:
    """The torch path's FP8 step: K and V (bf16) to e4m3 codes of value / their per-tensor
    scale, written into the outputs, by one ``torch.compile``d function for both tensors
    (compiled once per process; a new token count is a new specialisation of it)."""
    return torch.compile(_quantize_pair)


def torch_path(inp: GatherInputs, dot: str) -> Callable[[], None]:
    """What a user would write: index all tokens' rows at once, dequantize, one matmul over
    all tokens and heads, slice-assign both outputs. The row index and the dequantized
    (bf16) or rescaled (fp8) weight are prepared outside the timed call, as a server would
    cache them. FP8 outputs: the same bf16 result, into bf16 buffers allocated outside the
    timed call (a server's workspace), then quantized into the outputs by
    ``quantize_outputs``."""
    s = inp.shape
    t = inp.total_tokens
    blocks, slots = token_rows(inp.kv_indptr, inp.kv_indices, inp.kv_prefix_sum_context_lens,
                               inp.block_size)
    flat = (blocks * inp.block_size + slots)
    cache = inp.k_buffer.view(-1, s.latent_dim)
    ks = inp.k_scale if inp.k_scale is not None else torch.ones(1, device=cache.device)
    if not inp.out_is_fp8:
        k_out, v_out = inp.k_prefix, inp.v_prefix
        return _torch_bf16_result(inp, dot, flat, cache, ks, k_out, v_out)
    k_out = torch.empty((t, *inp.k_prefix.shape[1:]), dtype=torch.bfloat16, device=cache.device)
    v_out = torch.empty((t, *inp.v_prefix.shape[1:]), dtype=torch.bfloat16, device=cache.device)
    bf16 = _torch_bf16_result(inp, dot, flat, cache, ks, k_out, v_out)
    quant = quantize_outputs()
    k_fp8, v_fp8 = inp.k_prefix, inp.v_prefix
    k_sc, v_sc = inp.k_out_scale, inp.v_out_scale

    def run() -> None:
        bf16()
        quant(k_out, v_out, k_sc, v_sc, k_fp8[:t], v_fp8[:t])
    return run


def _torch_bf16_result(inp: GatherInputs, dot: str, flat: torch.Tensor, cache: torch.Tensor,
                       ks: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor
                       ) -> Callable[[], None]:
    """The torch path's call writing its bf16 result into ``k_out`` and ``v_out``."""
    s = inp.shape
    t = inp.total_tokens
    nope, kv_c = s.qk_nope_dim, s.kv_c_dim
    from ..core.formats import dequantize_weight

    if dot == "bf16":
        w = dequantize_weight(inp.kv_proj_weight, inp.kv_proj_scale, inp.weight_format)
        w_t = w.bfloat16().t()

        def run() -> None:
            lat = cache[flat].float() * ks
            kv = (lat[:, :kv_c].bfloat16() @ w_t).view(t, s.num_heads, -1)
            k_out[:t, :, :nope] = kv[..., :nope]
            k_out[:t, :, nope:] = lat[:, None, kv_c:].bfloat16()
            v_out[:t] = kv[..., nope:]
        return run
    if dot == "fp8":
        if inp.weight_format != "fp8_row" or not inp.cache_dtype.startswith("fp8"):
            raise ValueError("dot: the fp8 torch path needs an fp8 cache and an fp8_row weight")
        w8 = inp.kv_proj_weight
        sb = inp.kv_proj_scale.reshape(1, -1).float()
        sa = ks.reshape(1, 1).expand(t, 1).contiguous()

        def run() -> None:
            lat = cache[flat]
            kv = torch._scaled_mm(lat[:, :kv_c].contiguous(), w8.t(), scale_a=sa, scale_b=sb,
                                  out_dtype=torch.bfloat16, use_fast_accum=True)
            kv = kv.view(t, s.num_heads, -1)
            k_out[:t, :, :nope] = kv[..., :nope]
            k_out[:t, :, nope:] = (lat[:, None, kv_c:].float() * ks).bfloat16()
            v_out[:t] = kv[..., nope:]
        return run
    raise ValueError(f"dot: expected 'bf16' or 'fp8', got {dot!r}")


# ------------------------------------------------------------------ designs
def _design_fn(inp: GatherInputs, variant: str, config: DesignConfig | None
               ) -> Callable[[], None]:
    args = inp.args()

    def run() -> None:
        gather_kv_b_proj(*args, variant=variant, config=config)
    return run


def time_graph8(inp: GatherInputs, make: Callable[[GatherInputs], Callable[[], None]],
                budget: tuple[int, int] = FULL) -> Timing:
    """One launch's time among 8 back-to-back launches captured in a CUDA graph, each
    writing its own output buffers."""
    import copy

    copies = []
    for _ in range(8):
        c = copy.copy(inp)
        c.k_prefix = torch.empty_like(inp.k_prefix)
        c.v_prefix = torch.empty_like(inp.v_prefix)
        copies.append(make(c))

    def eight() -> None:
        for f in copies:
            f()
    return measure(graphed(eight), budget).scaled(1 / 8)


def time_sequence(sets: Sequence[GatherInputs],
                  make: Callable[[GatherInputs], Callable[[], None]], graph: bool,
                  budget: tuple[int, int] = FULL) -> Timing:
    """One call's time among ``len(sets)`` back-to-back calls, call i on input set i (its
    own cache, indices, weight and outputs, as one layer each): captured in one CUDA graph
    (``graph``) or called eagerly, the host's launches included. The L2 is flushed before
    the sequence, not between its calls."""
    calls = [make(inp) for inp in sets]

    def sequence() -> None:
        for f in calls:
            f()
    return measure(graphed(sequence) if graph else sequence, budget).scaled(1 / len(calls))


def input_sets(pt: Point, n: int, seed: int, have: Sequence[GatherInputs] = (),
               device: str | torch.device = "cuda", draws: HostDraws | None = None
               ) -> list[GatherInputs]:
    """``n`` input sets of ``pt`` on ``device``, set i drawn with seed ``seed + i``: those of
    ``have`` first (already drawn so), then the rest (the timings' rotation, a sequence's
    layers), drawn on up to ``BUILD_THREADS`` threads: each set from its own generator, so
    the same sets as drawn one by one (``draws``: ``build_inputs``' host draws kept)."""
    draw = WEIGHT_DRAWS[pt.weight_draw]
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        # A worker thread's current GPU is its own: the sets go to the caller's.
        device = torch.device("cuda", torch.cuda.current_device())

    def build(i: int) -> GatherInputs:
        return build_inputs(get_shape(pt.shape), pt.contexts, block_size=pt.block_size,
                            cache_dtype=pt.cache_dtype, weight_format=pt.weight_format,
                            device=device, seed=seed + i, spare_indices=0, spare_rows=0,
                            spare_blocks=0, out_dtype=pt.out_torch_dtype, draws=draws, **draw)

    todo = range(len(have), n)
    workers = min(len(todo), BUILD_THREADS)
    if workers <= 1:
        return list(have) + [build(i) for i in todo]
    with ThreadPoolExecutor(workers) as pool:
        return list(have) + list(pool.map(build, todo))


def dot_rate(ceilings: dict, kind: str, dot: str, fp8_route_share: float = NAN,
             split_route_share: float = NAN) -> float:
    """The ``kind`` rate (``mm_tflops``: cuBLAS's, ``tc_tflops``: the tensor cores' own) of
    the dot that ran: the format's ``dot``, or for a design that splits its work by route,
    the time-weighted rate of its routes (``roofline.route_rate``). NaN where the ceilings
    lack it."""
    ran = roofline.route_dot(dot, fp8_route_share, split_route_share)
    fp8, bf16 = (ceilings.get(f"{kind}_{d}", NAN) for d in ("fp8", "bf16"))
    if ran in ("fp8", "bf16"):
        return fp8 if ran == "fp8" else bf16
    # The split route's product at its own rate where measured (cuBLAS at K = 2 kv_c; the
    # tensor cores' rate is the same at any K).
    return roofline.route_rate(fp8_route_share, fp8, bf16, split_route_share,
                               ceilings.get(f"{kind}_fp8x2", fp8))


def tensor_core_rates(mma_rows) -> dict[str, float]:
    """The ceilings' tensor-core entries from ``lab.diagnostics.mma_rate``'s rows (a frame or
    its CSV): per dot, the faster of its warp counts (``tc_tflops_<dot>``) and the SM clock
    it ran at (``tc_clock_mhz_<dot>``)."""
    import pandas as pd

    df = pd.read_csv(mma_rows) if not isinstance(mma_rows, pd.DataFrame) else mma_rows
    out: dict[str, float] = {}
    for dot, d in df.groupby("dot_dtype"):
        best = d.loc[d["tflops"].idxmax()]
        out[f"tc_tflops_{dot}"] = float(best["tflops"])
        out[f"tc_clock_mhz_{dot}"] = float(best["sm_clock_mhz"])
    return out


def at_clock(ceilings: dict, sm_clock_mhz: float) -> dict:
    """The tensor cores' rates scaled to a row's SM clock (their rate is one MMA per cycle:
    proportional to it), where both clocks are known; unscaled otherwise."""
    out = dict(ceilings)
    for dot in ("fp8", "bf16"):
        mhz = ceilings.get(f"tc_clock_mhz_{dot}", NAN)
        if f"tc_tflops_{dot}" in out and mhz > 0 and sm_clock_mhz > 0:
            out[f"tc_tflops_{dot}"] = ceilings[f"tc_tflops_{dot}"] * sm_clock_mhz / mhz
    return out


def measurement_row(prov: dict, pt: Point, variant: str, timing: str, us: float | Timing,
                    dot: str, ceilings: dict, max_rel_err: float, correct: bool,
                    config: str = "", error: str = "", design: str = "",
                    fp8_route_share: float = NAN, sm_clock_mhz: float = NAN,
                    resolved_config: str = "", fp8_exact_share: float = NAN,
                    fp8_max_steps: float = NAN, split_route_share: float = NAN
                    ) -> Measurement:
    """One row of the measurement schema (``measurements.Measurement``): the point, one
    timing of one variant (a ``Timing``, or a bare median whose spread is unknown), its
    floors from the ceilings by the dot that ran (``dot``, split by ``fp8_route_share`` and
    ``split_route_share`` where the design reports them), the tensor-core floor where the
    ceilings hold the tensor cores' rates, and its check against the reference (FP8
    outputs: with the share of values exact to the contract's rule and the most e4m3 steps
    from it). The byte model counts the outputs at the point's output element size."""
    t = us if isinstance(us, Timing) else Timing(float(us), 0, NAN, NAN)
    us = t.median_us
    s = get_shape(pt.shape)
    tokens = sum(pt.contexts)
    out_bytes = pt.out_torch_dtype.itemsize
    nbytes = roofline.min_bytes(s, tokens, pt.cache_dtype, pt.weight_format, out_bytes)
    nflops = roofline.flops(s, tokens)
    mm = dot_rate(ceilings, "mm_tflops", dot, fp8_route_share, split_route_share)
    fl = roofline.floors(nbytes, nflops, ceilings["copy_tbps"], mm)
    tc = dot_rate(at_clock(ceilings, sm_clock_mhz), "tc_tflops", dot, fp8_route_share,
                  split_route_share)
    tc_floor = (roofline.floors(nbytes, nflops, ceilings["copy_tbps"], tc)["floor_us"]
                if tc == tc else NAN)
    return Measurement(
        **prov, model=s.name, heads=s.num_heads, weight_format=pt.weight_format,
        cache_dtype=pt.cache_dtype, block_size=pt.block_size, contexts=contexts_str(pt.contexts),
        batch=len(pt.contexts), ctx=tokens, variant=variant, timing=timing, median_us=us,
        min_bytes=nbytes, flops=nflops,
        dot_dtype=roofline.route_dot(dot, fp8_route_share, split_route_share),
        copy_tbps=ceilings["copy_tbps"],
        write_tbps=ceilings["write_tbps"], mm_tflops=mm, **fl,
        write_floor_us=(roofline.output_bytes(s, tokens, out_bytes)
                        / (ceilings["write_tbps"] * 1e12) * 1e6),
        roof_fraction=fl["floor_us"] / us, achieved_tbps=nbytes / us / 1e6,
        achieved_tflops=nflops / us / 1e6, max_rel_err=max_rel_err, correct=correct,
        config=config, error=error, design=design, weight_draw=pt.weight_draw,
        fp8_route_share=fp8_route_share, reps=t.reps, q1_us=t.q1_us, q3_us=t.q3_us,
        resolved_config=resolved_config, sm_clock_mhz=sm_clock_mhz, tc_tflops=tc,
        tc_floor_us=tc_floor, out_dtype=pt.out_dtype, fp8_exact_share=fp8_exact_share,
        fp8_max_steps=fp8_max_steps, split_route_share=split_route_share)


def check_columns(chk: dict) -> dict:
    """A row's check columns (``measurement_row``'s keywords) from ``check_outputs``' result:
    the error and verdict, and for FP8 outputs the exact share and most e4m3 steps (NaN
    where the check has none: other outputs, a call that failed)."""
    return {"max_rel_err": chk["max_rel_err"], "correct": chk["correct"],
            "fp8_exact_share": chk.get("fp8_exact_share", NAN),
            "fp8_max_steps": chk.get("fp8_max_steps", NAN)}


Maker = Callable[[GatherInputs], Callable[[], None]]


def candidates(pt: Point, torch_paths: bool = True) -> list[tuple[str, str, Maker]]:
    """What a point times, in order: (name, dot dtype, maker of a call on an input set).
    Its designs, then the torch code a user would write: the bf16 path always, the fp8
    ``_scaled_mm`` path where it exists (an fp8 per-row weight on an fp8 cache). With FP8
    outputs each torch path keeps its name (its dot) and quantizes its bf16 result
    (``torch_path``); the rows' ``out_dtype`` tells the two apart."""
    dot = roofline.dot_dtype(pt.cache_dtype, pt.weight_format)
    out: list[tuple[str, str, Maker]] = [
        (v, dot, functools.partial(_design_fn, variant=v, config=pt.configs.get(v)))
        for v in pt.variants]
    if torch_paths:
        out.append(("torch_bf16", "bf16", lambda i: torch_path(i, "bf16")))
        if pt.weight_format == "fp8_row" and pt.cache_dtype.startswith("fp8"):
            out.append(("torch_fp8", "fp8", lambda i: torch_path(i, "fp8")))
    return out


def run_points(points: Sequence[Point], *, ceilings: dict | None = None, torch_paths: bool = True,
               graph8: bool = False, design_graphs: bool = False, progress: bool = True,
               seed: int = 0, budget: Callable[[str], tuple[int, int]] | None = None,
               sm_clock: bool = True, clock: ClockLog | None = None,
               draws: HostDraws | None = None) -> list[Measurement]:
    """Time every design of every point, check each against the reference, return tidy rows.

    Timings: "flushed" (do_bench, L2 flushed, the Python launch path included); "graph"
    (the same launch replayed from a CUDA graph, L2 flushed: the device's time without the
    host's), always for the torch paths and for the designs with ``design_graphs``; "graph8"
    (8 back-to-back launches in one graph) with ``graph8``, or at a point whose own
    ``graph8`` is set; "graph<N>" and "eager<N>" (N back-to-back calls, each on its own
    input set, in one graph and eagerly: ``time_sequence``) for the point's
    ``sequence_variants`` where its ``sequence`` is N. ``budget`` maps a candidate's name
    to its (warm-up ms, repetition ms); every candidate gets ``timing.FULL`` without it.
    Each row records its repetitions and quartiles, and the median SM clock during its
    timing (``lab.clock``), read once every point is timed (``sm_clock`` false: not
    sampled, NaN). ``clock``: an open ``ClockLog`` to read instead of one opened for this
    call (a caller timing point after point keeps one sampler running: each log's
    ``nvidia-smi`` takes a while to start), ``sm_clock`` then unused. ``draws``: the host's
    draws of the points' input sets (their sequences' aside) kept for a later point that
    builds the same (``inputs.HostDraws``: the same values, copied again)."""
    from tqdm.auto import tqdm

    ceilings = ceilings or measure_ceilings()
    prov = provenance()
    pending: list[tuple[dict, object]] = []  # each row's arguments and its clock window
    with contextlib.nullcontext(clock) if clock is not None else ClockLog(
            enabled=sm_clock) as clock:
        for pt in tqdm(points, disable=not progress, desc="points"):
            pending += _time_point(pt, prov, ceilings, clock, torch_paths=torch_paths,
                                   graph8=graph8, design_graphs=design_graphs, seed=seed,
                                   budget=budget, draws=draws)
        return [measurement_row(**kw, sm_clock_mhz=clock.median_mhz(*w) if w else NAN)
                for kw, w in pending]


def rotation_sets(pt: Point) -> int:
    """The input sets a point's timings rotate between: enough (at most 8) to span twice the
    L2 together."""
    per_set = roofline.min_bytes(get_shape(pt.shape), sum(pt.contexts), pt.cache_dtype,
                                 pt.weight_format, pt.out_torch_dtype.itemsize)
    return max(1, min(8, -(-L2_ROTATE_BYTES // max(per_set, 1))))


def _time_point(pt: Point, prov: dict, ceilings: dict, clock: ClockLog, *, torch_paths: bool,
                graph8: bool, design_graphs: bool, seed: int,
                budget: Callable[[str], tuple[int, int]] | None,
                draws: HostDraws | None = None) -> list[tuple[dict, object]]:
    """``run_points``' work at one point: each row's ``measurement_row`` arguments and the
    (start, end) of its timing (None: not timed)."""
    s = get_shape(pt.shape)
    draw = WEIGHT_DRAWS[pt.weight_draw]
    case = build_case(s, pt.contexts, block_size=pt.block_size, cache_dtype=pt.cache_dtype,
                      weight_format=pt.weight_format, device="cuda", seed=seed,
                      spare_indices=0, spare_rows=0, spare_blocks=0,
                      out_dtype=pt.out_torch_dtype, draws=draws, **draw)
    base, prob, dev = case.inputs, case.problem, case.device
    ref = expected(base)
    sets = input_sets(pt, rotation_sets(pt), seed, [base], draws=draws)

    def timed(fn: Callable[..., Timing], *args) -> tuple[Timing, tuple[float, float]]:
        t0 = time.time()
        t = fn(*args)
        return t, (t0, time.time())

    out: list[tuple[dict, object]] = []
    layers = sets  # a sequence's input sets (Point.sequence): the rotation's, then more
    for name, dot, make in candidates(pt, torch_paths):
        design, cfg, extras, resolved_cfg = "", pt.configs.get(name), {}, None
        try:
            if not name.startswith("torch"):
                resolved, resolved_cfg = resolve(name, prob, dev, cfg)
                design = resolved.name
                # Columns the design reports of its own (hopper_ws: MXFP4's route shares).
                extras = resolved.row_extras(prob, base.args(), resolved_cfg)
                if isinstance(cfg, Mapping):
                    # A mapping is unhashable, so each call would be planned afresh: the
                    # calls pass the design's own (frozen) config, as an engine would.
                    make = functools.partial(_design_fn, variant=name, config=resolved_cfg)
                cfg = None if cfg is None else resolved_cfg
            spend = budget(name) if budget else FULL
            timings = [("flushed", *timed(measure, rotating([make(i) for i in sets]), spend))]
            if name.startswith("torch") or design_graphs:
                timings.append(("graph", *timed(
                    measure, rotating([graphed(make(i)) for i in sets]), spend)))
            if graph8 or pt.graph8:
                timings.append(("graph8", *timed(time_graph8, base, make, spend)))
            if pt.sequence and name in pt.sequence_variants:
                n = pt.sequence
                if len(layers) < n:  # drawn once a point, for every variant it times
                    layers = input_sets(pt, n, seed, layers)
                for kind, in_graph in (("graph", True), ("eager", False)):
                    timings.append((f"{kind}{n}", *timed(time_sequence, layers, make,
                                                         in_graph, spend)))
            base.poison_outputs()
            make(base)()
            torch.cuda.synchronize()
            chk = check_outputs(base, ref)
            error = ""
        except Exception as e:  # a design that fails to build or run is reported, not fatal
            timings, chk = [("flushed", NOT_TIMED, None)], {"max_rel_err": float("nan"),
                                                            "correct": False}
            error = f"{type(e).__name__}: {str(e)[:200]}"
        out += [(dict(prov=prov, pt=pt, variant=name, timing=timing, us=t, dot=dot,
                      ceilings=ceilings, **check_columns(chk),
                      config="" if cfg is None else repr(cfg),
                      error=error, design=design,
                      fp8_route_share=extras.get("fp8_route_share", NAN),
                      split_route_share=extras.get("split_route_share", NAN),
                      resolved_config="" if resolved_cfg is None else repr(resolved_cfg)),
                 window)
                for timing, t, window in timings]
    del sets, base, ref, layers
    torch.cuda.empty_cache()
    return out
