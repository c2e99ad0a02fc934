"""Correctness: the error measures shared by the tests, the benchmark harness and the
notebooks, and ``check_variants``, which runs each variant once against the reference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..api import gather_kv_b_proj
from ..core.problem import interpreting
from .cases import build_case
from .inputs import GatherInputs
from .measurements import contexts_str, dtype_name

# Largest relative error per output column (see max_rel_err) each weight format may show.
# bf16 output rounding alone is up to 2^-8 per element; fp8 adds Hopper's fast fp8
# accumulation. A wrong scale, a swapped nibble or an unwritten row is off by O(1).
TOLERANCES: dict[str, float] = {"bf16": 5e-3, "fp8_row": 1e-2, "fp8_block": 1e-2, "mxfp4": 5e-3}


# A dot product's rounding error scales with sum |x_k w_k|, not with its (possibly
# cancelled) value: each column's (and row's) error is measured against at least this
# fraction of the same norm of |latent| @ |W|^T (about twice a typical ||ref|| for random
# data at K = 512).
MAGNITUDE_FLOOR = 1 / 8
# A column's gain (the least-squares factor from ref to out) is judged on columns of at
# least this many rows: over fewer, one cancelled value makes it meaningless.
GAIN_MIN_ROWS = 16
E4M3_MIN_NORMAL = 2.0 ** -6  # the smallest normal e4m3fn value
# An FP8 output's gain is computed when at least this share of its values is in e4m3's
# normal range (neither subnormal nor saturated).
GAIN_MIN_NORMAL_SHARE = 0.25
# The share of an FP8 output's values that must equal the rule applied to the reference.
# The H200's fp8 dots leave 0.993-1.0 exact (their reduced-precision accumulation moves a
# few values to a neighbour); a scale off by 1.5% leaves about 0.75.
FP8_MIN_EXACT_SHARE = 0.9


def _rel(err: torch.Tensor, ref: torch.Tensor, mag: torch.Tensor | None) -> torch.Tensor:
    denom = ref if mag is None else torch.maximum(ref, mag * MAGNITUDE_FLOOR)
    return err / denom.clamp_min(1e-30)


def error_measures(out: torch.Tensor, ref: torch.Tensor, magnitude: torch.Tensor | None = None
                   ) -> dict[str, float]:
    """Three relative errors of ``out`` against ``ref``, each NaN if anything is NaN:

    - ``column``: max over output columns of ||out - ref|| / max(||ref||, ||mag|| / 8):
      per column because weight scales span 1e-3..1e2, so a global norm would let the
      large columns hide a wrong scale on a small one;
    - ``row``: the same per output row (a token, every head): one token read from the wrong
      block fails however many tokens the call holds;
    - ``gain``: max over columns of at least 16 rows of |<out, ref> / <ref, ref> - 1|: a
      systematic scale error, which the magnitude floor would dilute in ``column``.

    The magnitude floor keeps a value that cancelled (fp8 tensor cores accumulate in
    reduced precision) from reading as a large relative error.
    """
    if out.numel() == 0:
        return {"column": 0.0, "row": 0.0, "gain": 0.0}
    o = out.double().reshape(out.shape[0], -1)
    r = ref.double().reshape(ref.shape[0], -1)
    if torch.isnan(o).any():
        return {"column": float("nan"), "row": float("nan"), "gain": float("nan")}
    m = None if magnitude is None else magnitude.double().reshape(r.shape)
    e = o - r
    col = _rel(e.norm(dim=0), r.norm(dim=0), None if m is None else m.norm(dim=0))
    row = _rel(e.norm(dim=1), r.norm(dim=1), None if m is None else m.norm(dim=1))
    gain = 0.0
    if o.shape[0] >= GAIN_MIN_ROWS:
        rr = (r * r).sum(dim=0)
        g = (o * r).sum(dim=0) / rr.clamp_min(1e-300)
        gain = float((g - 1).abs()[rr > 0].max()) if bool((rr > 0).any()) else 0.0
    return {"column": float(col.max()), "row": float(row.max()), "gain": gain}


def nan_max(values) -> float:
    """The largest of ``values``, NaN if any is NaN (a NaN never reads as small)."""
    return max(values, key=lambda x: (x != x, x))


def max_rel_err(out: torch.Tensor, ref: torch.Tensor, magnitude: torch.Tensor | None = None
                ) -> float:
    """The largest of ``error_measures`` (NaN if anything is NaN)."""
    return nan_max(error_measures(out, ref, magnitude).values())


class Expected(NamedTuple):
    """The reference outputs and the magnitudes |latent| @ |W|^T their errors are judged by."""

    k: torch.Tensor
    v: torch.Tensor
    k_mag: torch.Tensor
    v_mag: torch.Tensor


def expected(inp: GatherInputs) -> Expected:
    """Everything check_outputs compares with; compute it once per input set."""
    return Expected(*inp.reference(), *inp.reference(absolute=True))


def fp8_measures(out: torch.Tensor, ref: torch.Tensor, magnitude: torch.Tensor,
                 scale: torch.Tensor, tol: float) -> dict[str, float]:
    """An FP8 output (e4m3fn codes) against the float reference, by the contract's rule
    (``reference.quantize_e4m3``):

    - ``exact_share``: the share of values equal to the rule applied to the reference;
    - ``max_steps``: the most e4m3 steps between a value and that (1: a neighbour);
    - ``beyond_steps``: the most steps a value lies outside one step of the rule applied
      anywhere within the dot's error of the reference (``tol`` x |latent| @ |W|^T): what
      a correct kernel keeps at 0, since a value that cancelled may sit many fine steps
      from the reference by the dot's rounding alone;
    - ``gain``: |<out x scale, ref> / <ref, ref> - 1| over every value in e4m3's normal
      range (2^-6 to 448 times the scale; saturated values are judged by the steps alone;
      0, not judged, where fewer than a quarter of the values are in that range):
      rounding to nearest is unbiased there, so a scale applied wrongly to the whole tensor
      shows; per column it would not (with a per-tensor scale, columns of small weight
      scales hold subnormals and zeros). Reported; ``check_outputs`` judges by the steps
      and the exact share.

    Each is NaN if a written value is NaN where the reference's is not."""
    from ..core.reference import E4M3_MAX, e4m3_steps, quantize_e4m3

    if out.numel() == 0:
        return {"exact_share": 1.0, "max_steps": 0.0, "beyond_steps": 0.0, "gain": 0.0}
    r = ref.float().reshape(out.shape)
    q = quantize_e4m3(r, scale)
    if bool((out.float().isnan() & ~q.float().isnan()).any()):
        nan = float("nan")
        return {"exact_share": nan, "max_steps": nan, "beyond_steps": nan, "gain": nan}
    steps = e4m3_steps(out, q)
    e = tol * magnitude.float().reshape(out.shape)
    lo, hi = quantize_e4m3(r - e, scale), quantize_e4m3(r + e, scale)
    below, above = e4m3_steps(out, lo), e4m3_steps(out, hi)
    o, lo_f, hi_f = out.float(), lo.float(), hi.float()
    beyond = torch.where(o < lo_f, below - 1, torch.where(o > hi_f, above - 1, 0)).clamp_min(0)
    a, sf = r.abs(), scale.float()
    # Neither subnormal nor saturated: where rounding is unbiased.
    normal = (a >= E4M3_MIN_NORMAL * sf) & (a <= E4M3_MAX * sf)
    rr = (r * r)[normal].double().sum()
    # Over a few values at the range's edges (most saturated) the gain means nothing.
    judged = bool(rr > 0) and float(normal.float().mean()) >= GAIN_MIN_NORMAL_SHARE
    gain = float(((o * scale.float() * r)[normal].double().sum() / rr - 1).abs()) \
        if judged else 0.0
    return {"exact_share": float((steps == 0).float().mean()), "max_steps": float(steps.max()),
            "beyond_steps": float(beyond.max()), "gain": gain}


def check_outputs(inp: GatherInputs, ref: Expected | None = None) -> dict[str, float | bool]:
    """Compare the written rows with the reference and check the spare rows stayed NaN.

    Expects the outputs to have been poisoned (NaN) before the call under test. FP8 outputs
    are judged by the contract's rule (``fp8_measures``): correct when no value lies more
    than one step outside the rule applied within the dot's error, and at least
    FP8_MIN_EXACT_SHARE of them are the rule's value exactly (a scale off by 1.5% moves about
    a quarter of them); ``max_rel_err`` is then the gain, reported, not judged (the rope's
    values are a few e4m3 codes times one ratio, whose roundings need not cancel), and the
    result also carries ``fp8_exact_share`` and ``fp8_max_steps``.
    """
    k_ref, v_ref, k_mag, v_mag = ref if ref is not None else expected(inp)
    t = inp.total_tokens
    tol = TOLERANCES[inp.weight_format]
    spare_ok = bool(torch.isnan(inp.k_prefix[t:].float()).all()
                    and torch.isnan(inp.v_prefix[t:].float()).all())
    if inp.out_is_fp8:
        km = fp8_measures(inp.k_prefix[:t], k_ref, k_mag, inp.k_out_scale, tol)
        vm = fp8_measures(inp.v_prefix[:t], v_ref, v_mag, inp.v_out_scale, tol)
        n_k, n_v = inp.k_prefix[:t].numel(), inp.v_prefix[:t].numel()
        share = (km["exact_share"] * n_k + vm["exact_share"] * n_v) / max(n_k + n_v, 1)
        steps, beyond, err = (nan_max((km[m], vm[m]))
                              for m in ("max_steps", "beyond_steps", "gain"))
        return {"max_rel_err": err, "spare_rows_untouched": spare_ok,
                "fp8_exact_share": share, "fp8_max_steps": steps, "fp8_beyond_steps": beyond,
                "correct": bool(beyond == 0 and share >= FP8_MIN_EXACT_SHARE) and spare_ok}
    k_err = max_rel_err(inp.k_prefix[:t], k_ref, k_mag)
    v_err = max_rel_err(inp.v_prefix[:t], v_ref, v_mag)
    err = max(k_err, v_err) if k_err == k_err and v_err == v_err else float("nan")
    return {"max_rel_err": err, "spare_rows_untouched": spare_ok,
            "correct": bool(err <= tol) and spare_ok}


def check_variants(shape: str, contexts: Sequence[int], *, variants: Sequence[str],
                   cache_dtype: str = "fp8", weight_format: str = "fp8_row",
                   block_size: int = 1, device: str | None = None, seed: int = 0,
                   out_dtype: torch.dtype = torch.bfloat16) -> list[dict[str, object]]:
    """Run each variant on one random input set and compare it with the reference and with
    the first variant (bit identity: max abs diff 0 means identical bits).

    ``device`` defaults to the CPU under the Triton interpreter and to the GPU otherwise.
    Designs this machine cannot run (a GPU-family design off its GPU) are left out.
    """
    if device is None:
        device = "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"
    case = build_case(shape, contexts, block_size=block_size, cache_dtype=cache_dtype,
                      weight_format=weight_format, device=device, seed=seed,
                      out_dtype=out_dtype)
    inp = case.inputs
    ref = expected(inp)
    t = inp.total_tokens
    rows, first = [], None
    for v, design, _ in case.resolved(variants):
        inp.poison_outputs()
        gather_kv_b_proj(*inp.args(), variant=v)
        res = check_outputs(inp, ref)
        out = torch.cat((inp.k_prefix[:t].flatten(), inp.v_prefix[:t].flatten())).float()
        if first is None:
            first, diff = (v, out.clone()), 0.0
        else:
            d = (out - first[1]).abs()
            # NaN where either wrote nothing: a difference, never "identical".
            diff = float("nan") if torch.isnan(d).any() else float(d.max()) if d.numel() else 0.0
        rows.append({"model": shape, "cache_dtype": cache_dtype, "weight_format": weight_format,
                     "block_size": block_size, "contexts": contexts_str(contexts),
                     "batch": len(contexts), "ctx": t, "variant": v, "design": design.name,
                     "device": device,
                     "out_dtype": dtype_name(out_dtype),
                     "max_rel_err": res["max_rel_err"], "correct": res["correct"],
                     "compared_with": first[0], "max_abs_diff": diff,
                     "bit_identical": diff == 0.0})
    return rows
