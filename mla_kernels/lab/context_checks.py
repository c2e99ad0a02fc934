"""The context path's outputs against the float32 reference: the relative error per output
column (one head's value column over the queries) and per row (one query, every head), as
``checks.error_measures`` takes them with the magnitude floor of the attention over |V|,
and the largest LSE difference; each judged by the K/V's format.

Tolerances: bf16 K/V (or the latent itself) round each key and value by up to 2^-9 and the
probabilities once more before the value dot; e4m3 K/V by up to 2^-4, so against the
float32 truth an FP8 path is judged by its own, wider tolerance, and against the attention
over its own dequantised K/V by bf16's.
"""

from __future__ import annotations

import torch

from ..context.reference import Attention
from .checks import error_measures, nan_max

# (column, row, lse): per K/V format. A column holds one head's value over the queries, a
# few of them in the tests: its error is the noisiest of the three, so its bound is widest.
TOLERANCES = {"bf16": (6e-2, 2e-2, 2e-2), "fp8": (0.6, 0.15, 0.25)}


def attention_errors(out: torch.Tensor, lse: torch.Tensor, ref: Attention) -> dict[str, float]:
    """``column``, ``row`` (relative, with the magnitude floor) and ``lse`` (absolute: the
    LSE is a log, its error a relative one of the softmax sum); NaN anywhere reads NaN."""
    e = error_measures(out, ref.out, ref.magnitude)
    d = (lse.float() - ref.lse.float()).abs()
    return {"column": e["column"], "row": e["row"],
            "lse": float("nan") if torch.isnan(d).any() else float(d.max())}


def judge(errors: dict[str, float], kv_format: str) -> bool:
    """Every error within the format's tolerance (NaN never passes)."""
    tol = dict(zip(("column", "row", "lse"), TOLERANCES[kv_format], strict=True))
    return all(errors[k] == errors[k] and errors[k] <= tol[k] for k in tol)


def worst(errors: dict[str, float]) -> float:
    return nan_max(errors.values())
