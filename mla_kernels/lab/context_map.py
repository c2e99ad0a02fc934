"""The crossover map of the cached prefix's two ways, on the live GPU: per cached context C
and new-token count n, expand-then-attend (the whole, the expansion alone, the attention
alone), the absorbed path, and torch's scaled_dot_product_attention over the expanded K/V
as a baseline. Each path is checked against the float32 reference (computed over the keys
in chunks) before it is timed, as one CUDA graph's replay (median, L2 flushed); each row
carries its floor, its peak memory as counted and as torch's allocator saw it, and the
run's provenance.

Usage on the H200: python -m mla_kernels.lab.context_map --out FOLDER [--contexts ...]
[--new-tokens ...] [--chunk-tokens N] (rows to FOLDER/context_map.csv). With no GPU it
refuses before anything runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from ..context import (
    absorbed_hopper,
    absorbed_peak_bytes,
    expanded_peak_bytes,
    plan_absorbed,
    plan_expanded,
)
from ..context.absorbed import KERNELS
from ..context.expanded import KERNEL_CHOICES as EXPANDED_KERNELS
from ..core.formats import CACHE_DTYPES, WEIGHT_FORMATS
from ..core.shapes import SHAPES
from .bench import measure_ceilings
from .context_checks import attention_errors, judge, worst
from .context_floors import Rates, absorbed_floor, expanded_floor
from .context_inputs import build_context_inputs
from .provenance import provenance
from .repo_files import write_text_atomic
from .timing import SHORT, Timing, graphed, measure, median_us

CONTEXTS = (4096, 32000, 109440)
NEW_TOKENS = (16, 64, 128, 512, 2048, 8192)
CHUNK_TOKENS = 32768  # the expansion's chunk: K/V of at most this many tokens at a time
FILE = "context_map.csv"
# Paths timed, by name: the whole of each way, the expanded one's two parts, the baseline.
PATHS = ("expanded", "expanded_expand", "expanded_attend", "absorbed", "sdpa")


def attention_rate() -> float:
    """cuBLAS's bf16 rate at an attention-like shape (8192 x 8192, K = 512), TFLOP/s."""
    a = torch.randn(8192, 512, device="cuda").bfloat16()
    b = torch.randn(8192, 512, device="cuda").bfloat16()
    return 2 * 8192 * 8192 * 512 / median_us(lambda: a @ b.t(), SHORT) / 1e6


def _peak(fn, device: str) -> tuple[float, object]:
    """Bytes torch's allocator held above what it held before ``fn`` (plan and first run),
    and ``fn``'s result; NaN off a GPU (no allocator statistics)."""
    if device != "cuda":
        return float("nan"), fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, result


def _sdpa(q, k, v, n_keys, scale):
    """torch's SDPA over the expanded K/V ([C, H, d] viewed as [1, H, C, d])."""
    qh = q.transpose(0, 1)[None]
    kh = k[:n_keys].transpose(0, 1)[None]
    vh = v[:n_keys].transpose(0, 1)[None]
    return lambda: torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, scale=scale)


def measure_point(shape: str, c: int, n: int, *, cache_dtype: str, weight_format: str,
                  kv_dtype: str, chunk_tokens: int | None, rates: Rates, budget, prov: dict,
                  seed: int = 0, device: str = "cuda",
                  absorbed_kernels: tuple[str, ...] = ("portable",),
                  expanded_kernel: str = "auto") -> list[dict]:
    """One (C, n) point's rows (``device`` "cpu" under the interpreter checks the rows'
    making; its timings need the GPU's); the expanded path's attention on
    ``expanded_kernel`` (``plan_expanded``'s ``kernel``; the one it ran in column
    "expanded_kernel"), the absorbed path once per kernel of ``absorbed_kernels`` (rows
    "absorbed", and "absorbed_hopper" for Gluon's on sm_90)."""
    ci = build_context_inputs(shape, c, n, cache_dtype=cache_dtype, weight_format=weight_format,
                              device=device, seed=seed)
    ref = ci.reference()
    kv = ci.fp8_scales() if kv_dtype == "fp8" else {}
    head = {**prov, "model": shape, "heads": ci.q.shape[1], "cache_dtype": cache_dtype,
            "weight_format": weight_format, "kv_dtype": kv_dtype, "block_size": 1, "ctx": c,
            "new_tokens": n, "chunk_tokens": min(chunk_tokens or c, c), "timing": "graph",
            "floor_source": rates.source}
    ef = expanded_floor(shape, c, n, cache_dtype, weight_format, rates, kv_dtype)
    af = absorbed_floor(shape, c, n, cache_dtype, weight_format, rates)
    rows = []

    def row(path, t: Timing, floor_us, errs, ok, splits, model_bytes, peak_bytes, error=""):
        rows.append({**head, "path": path, "median_us": t.median_us, "q1_us": t.q1_us,
                     "q3_us": t.q3_us, "reps": t.reps, "floor_us": floor_us,
                     "roof_fraction": floor_us / t.median_us if t.median_us == t.median_us else float("nan"),
                     "err_column": errs.get("column"), "err_row": errs.get("row"),
                     "err_lse": errs.get("lse"), "max_err": worst(errs) if errs else float("nan"),
                     "correct": ok, "splits": splits, "peak_bytes_model": model_bytes,
                     "peak_bytes_measured": peak_bytes, "error": error})

    peak, ex = _peak(lambda: _run(plan_expanded(*ci.args(), chunk_tokens=chunk_tokens,
                                                kernel=expanded_kernel, **kv)), device)
    ex_plan, (out, lse) = ex
    head["expanded_kernel"] = ex_plan.kernel
    errs = attention_errors(out, lse, ref)
    ok = judge(errs, kv_dtype)
    model = expanded_peak_bytes(shape, n, c, chunk_tokens=chunk_tokens, splits=max(ex_plan.splits),
                                kv_dtype=ex_plan.k_chunk.dtype)
    splits = max(ex_plan.splits)
    row("expanded", measure(graphed(ex_plan.run), budget), ef["floor_us"], errs, ok, splits,
        model, peak)
    row("expanded_expand", measure(graphed(ex_plan.expand), budget), ef["expand_floor_us"],
        {}, ok, splits, float("nan"), float("nan"))
    row("expanded_attend", measure(graphed(ex_plan.attend), budget), ef["attend_floor_us"],
        {}, ok, splits, float("nan"), float("nan"))
    del ex_plan, ex, out, lse

    for kernel in absorbed_kernels:
        peak, ab = _peak(lambda k=kernel: _run(plan_absorbed(*ci.args(), kernel=k)), device)
        ab_plan, (out, lse) = ab
        errs = attention_errors(out, lse, ref)
        row("absorbed" if kernel == "portable" else f"absorbed_{kernel}",
            measure(graphed(ab_plan.run), budget), af["floor_us"], errs, judge(errs, "bf16"),
            ab_plan.splits, absorbed_peak_bytes(shape, n, c, splits=ab_plan.splits,
                                                prepare=True), peak)
        del ab_plan, ab, out, lse

    # The baseline over the whole context's expanded K/V (bf16: SDPA's own dtypes).
    whole = plan_expanded(*ci.args())
    whole.expand()
    fn = _sdpa(ci.q, whole.k_chunk, whole.v_chunk, c, whole.sm_scale)
    try:
        got = fn()[0].transpose(0, 1)
        errs = attention_errors(got.contiguous(), ref.lse, ref)
        errs["lse"] = 0.0  # SDPA gives no LSE: judged by its output alone
        ok = judge(errs, "bf16")
        row("sdpa", measure(graphed(lambda: fn()), budget), ef["attend_floor_us"], errs, ok,
            1, float("nan"), float("nan"))
    except RuntimeError as e:  # no SDPA backend for this shape
        row("sdpa", Timing(float("nan"), 0, float("nan"), float("nan")), ef["attend_floor_us"],
            {}, False, 1, float("nan"), float("nan"), error=str(e).splitlines()[0][:200])
    del whole
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def default_absorbed_kernels() -> tuple[str, ...]:
    """The absorbed kernels a map times by default: the portable one, and on an sm_90 GPU
    the Gluon one too, which the call's default runs there (the crossover reads its rows)."""
    hopper = (torch.cuda.is_available()
              and absorbed_hopper.device_reason(torch.device("cuda")) is None)
    return ("portable", "hopper") if hopper else ("portable",)


def _run(plan):
    return plan, plan.run()


def run(*, shape: str = "kimi-k3-tp8", contexts=CONTEXTS, new_tokens=NEW_TOKENS,
        cache_dtype: str = "fp8", weight_format: str = "fp8_row", kv_dtype: str = "bf16",
        chunk_tokens: int | None = CHUNK_TOKENS, budget=SHORT,
        out: Path | None = None, absorbed_kernels: tuple[str, ...] | None = None,
        expanded_kernel: str = "auto") -> pd.DataFrame:
    """Every (C, n) point's rows, as one frame (GPU only); with ``out``, the rows so far are
    rewritten to ``out`` after each point, so a run cut short keeps what it measured.
    ``absorbed_kernels`` None: ``default_absorbed_kernels()``; ``expanded_kernel``:
    ``plan_expanded``'s ``kernel``."""
    if not torch.cuda.is_available():
        raise RuntimeError("context_map: needs a CUDA GPU, and this machine has none")
    absorbed_kernels = absorbed_kernels or default_absorbed_kernels()
    rates = Rates.measured(measure_ceilings(shape), attention_rate())
    prov = provenance()
    rows = []
    for c in contexts:
        for n in new_tokens:
            got = measure_point(shape, c, n, cache_dtype=cache_dtype, weight_format=weight_format,
                                kv_dtype=kv_dtype, chunk_tokens=chunk_tokens, rates=rates,
                                budget=budget, prov=prov, absorbed_kernels=absorbed_kernels,
                                expanded_kernel=expanded_kernel)
            for r in got:
                print(f"C {c:6d} n {n:5d} {r['path']:16s} {r['median_us']:10.1f} us  floor "
                      f"{r['floor_us']:9.1f}  correct {r['correct']}", flush=True)
            rows += got
            if out is not None:
                write_text_atomic(out, pd.DataFrame(rows).to_csv(index=False))
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.lab.context_map",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, metavar="FOLDER",
                    help=f"folder for {FILE} (created)")
    ap.add_argument("--shape", default="kimi-k3-tp8", choices=sorted(SHAPES))
    ap.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS))
    ap.add_argument("--new-tokens", type=int, nargs="+", default=list(NEW_TOKENS))
    ap.add_argument("--cache-dtype", default="fp8", choices=[c for c in CACHE_DTYPES if c != "fp8_fnuz"])
    ap.add_argument("--weight-format", default="fp8_row",
                    choices=[f for f in WEIGHT_FORMATS if f != "mxfp4"])
    ap.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"],
                    help="the expanded K/V's dtype")
    ap.add_argument("--chunk-tokens", type=int, default=CHUNK_TOKENS,
                    help="tokens expanded at a time (0: the whole context at once)")
    ap.add_argument("--absorbed-kernels", nargs="+", default=None, choices=KERNELS,
                    help="the absorbed path's kernels to time (default: portable, and hopper "
                         "on an sm_90 GPU; hopper: Gluon's, rows 'absorbed_hopper')")
    ap.add_argument("--expanded-kernel", default="auto", choices=EXPANDED_KERNELS,
                    help="the expanded path's attention kernel (plan_expanded's kernel; "
                         "hopper: Gluon's on sm_90, auto: it where it runs)")
    a = ap.parse_args(argv)
    bad = [x for x in a.contexts + a.new_tokens if x < 1]
    if bad or a.chunk_tokens < 0:
        print(f"context_map: expected contexts and new tokens >= 1 and a chunk >= 0, got "
              f"{bad or a.chunk_tokens}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("context_map: needs a CUDA GPU (this machine has none); nothing was run",
              file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    df = run(shape=a.shape, contexts=a.contexts, new_tokens=a.new_tokens,
             cache_dtype=a.cache_dtype, weight_format=a.weight_format, kv_dtype=a.kv_dtype,
             chunk_tokens=a.chunk_tokens or None, out=a.out / FILE,
             absorbed_kernels=tuple(dict.fromkeys(a.absorbed_kernels or ())) or None,
             expanded_kernel=a.expanded_kernel)
    print(a.out / FILE)
    return 0 if bool(df["correct"].all()) else 1


if __name__ == "__main__":
    sys.exit(main())
