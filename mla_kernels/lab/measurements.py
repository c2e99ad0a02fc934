"""The measurement schema: one typed row per (configuration, variant, timing), the one
serialiser of a batch's context lengths, and the CSV writers every notebook and script uses.

The columns, in order, are ``Measurement``'s fields (data/README.md documents each).
``Measurement.KEY`` names the fields that make two rows "the same configuration measured
again"; readers keep the later of such rows.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd

from .repo_files import atomic_path


def contexts_str(contexts: Sequence[int]) -> str:
    """The ``contexts`` column: the batch's context lengths, space-separated."""
    return " ".join(str(int(c)) for c in contexts)


def parse_contexts(text: str | int) -> tuple[int, ...]:
    """Inverse of ``contexts_str`` (a lone int, as pandas may read a one-sequence batch,
    is accepted)."""
    return tuple(int(c) for c in str(text).split())


DEFAULT_OUT_DTYPE = "bfloat16"  # the ``out_dtype`` column of bf16 outputs
FP8_OUT_DTYPE = "float8_e4m3fn"  # ... and of FP8 ones


def sequence_length(timing: str) -> int:
    """N for a sequence timing ("graph<N>", "eager<N>": N back-to-back calls on N input
    sets), else 0 ("graph8", 8 calls on one input set, is not one)."""
    m = re.fullmatch(r"(graph|eager)([0-9]+)", str(timing))
    return 0 if m is None or str(timing) == "graph8" else int(m.group(2))


@dataclass(frozen=True)
class Measurement:
    """One row of a measurement CSV."""

    device: str
    compute_units: int
    torch: str
    triton: str
    commit: str
    date: str
    model: str
    heads: int
    weight_format: str
    cache_dtype: str
    block_size: int
    contexts: str
    batch: int
    ctx: int
    variant: str
    timing: str  # "flushed", "graph", "graph8", "graph<N>", "eager<N>" (data/README.md)
    median_us: float
    min_bytes: int
    flops: int
    dot_dtype: str
    copy_tbps: float
    write_tbps: float
    mm_tflops: float
    byte_floor_us: float
    matrix_floor_us: float
    floor_us: float
    write_floor_us: float
    roof_fraction: float
    achieved_tbps: float
    achieved_tflops: float
    max_rel_err: float
    correct: bool
    config: str = ""
    error: str = ""
    design: str = ""  # the design the variant resolved to ("" for the torch paths)
    weight_draw: str = ""  # how the weight was drawn beside its format ("" the default)
    # MXFP4 on hopper_ws: the share of work items widened to e4m3 (NaN: no such route)
    fp8_route_share: float = float("nan")
    # The timing's spread: repetitions the median is taken from (0: not recorded) and the
    # quartiles of those repetitions, us.
    reps: int = 0
    q1_us: float = float("nan")
    q3_us: float = float("nan")
    # The config the design ran with (``config`` is the one asked for: "" for the design's
    # own choice, which for ``auto`` is its tuned table's).
    resolved_config: str = ""
    # The median SM clock during the timing (NaN: not reported), the tensor cores' own rate
    # for the dot that ran at that clock, and the floor at that rate: max(byte floor,
    # flops / tc_tflops), beside ``floor_us``'s cuBLAS rate (data/README.md, "Floors").
    sm_clock_mhz: float = float("nan")
    tc_tflops: float = float("nan")
    tc_floor_us: float = float("nan")
    # The outputs' dtype, torch's name: "float8_e4m3fn" for e4m3 codes of value / a
    # per-tensor scale. Rows of runs without the column wrote bf16 (``out_dtypes``).
    out_dtype: str = DEFAULT_OUT_DTYPE
    # FP8 outputs against the contract's rule applied to the float reference: the share of
    # values equal to it and the most e4m3 steps from it (NaN for other outputs).
    fp8_exact_share: float = float("nan")
    fp8_max_steps: float = float("nan")
    # MXFP4 on hopper_ws: the share of work items on the split route, two e4m3 parts (NaN:
    # not reported; rows of runs without the column had no such route).
    split_route_share: float = float("nan")

    KEY: ClassVar[tuple[str, ...]] = ("device", "model", "heads", "weight_format",
                                      "cache_dtype", "block_size", "contexts", "variant",
                                      "timing", "config", "weight_draw", "out_dtype")

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in self.KEY)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Measurement))

def dtype_name(dtype) -> str:
    """The ``out_dtype`` column's text for a torch dtype (or its name)."""
    return str(dtype).removeprefix("torch.")


def out_dtypes(df: pd.DataFrame) -> pd.Series:
    """Each row's ``out_dtype``: "bfloat16" where the column is absent or empty (every run
    before the column wrote bf16 outputs)."""
    if "out_dtype" not in df.columns:
        return pd.Series(DEFAULT_OUT_DTYPE, index=df.index, dtype=object)
    s = df["out_dtype"]
    return s.astype(object).where(s.notna() & (s.astype(str).str.strip() != ""),
                                  DEFAULT_OUT_DTYPE).astype(str)


def frame(rows: Iterable[Measurement | dict]) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's columns first, in order."""
    recs = [r.as_dict() if isinstance(r, Measurement) else dict(r) for r in rows]
    df = pd.DataFrame(recs)
    if df.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    first = [c for c in COLUMNS if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]


def write_csv_atomic(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a CSV atomically: a failed run leaves the old file whole."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def append_csv_atomic(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Append rows to a CSV (creating it), rewriting it atomically: each append either lands
    whole or not at all, so a run cut short keeps every point measured before."""
    path = Path(path)
    if path.is_file() and path.stat().st_size:
        df = pd.concat([pd.read_csv(path), df], ignore_index=True)
    return write_csv_atomic(df, path)
