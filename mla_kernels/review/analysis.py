"""What the notebooks do between measuring and plotting: batches, loading committed
measurements, the tables a design review reads (the public change's, speedups,
fractions of the floor, weight formats, fractions of each device's attainable peak), and
atomic writes.

Kept here, not in the notebooks, so it is under test and every notebook shares it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.devices import lookup_device
from ..lab.measurements import (
    DEFAULT_OUT_DTYPE,
    Measurement,
    contexts_str,
    out_dtypes,
    sequence_length,
    write_csv_atomic,
)

__all__ = ["contexts_str", "write_csv_atomic"]  # re-exported for the notebooks

# Columns a CSV must have to count as measurements of the benchmark harness (the full
# schema is in data/README.md); other CSVs under a data folder are skipped.
MEASUREMENT_COLUMNS = ("device", "model", "cache_dtype", "weight_format", "block_size",
                       "contexts", "batch", "ctx", "variant", "timing", "median_us")

# The torch code a user would write, as the harness names it.
TORCH_BASE = ("torch_bf16", "torch_fp8")

# The public change's headline contexts; the sweep adds a log grid around them.
HEADLINE_CONTEXTS = (4096, 32000, 65536, 109440)


def log_grid(lo: int = 1024, hi: int = 131072, per_octave: int = 1) -> list[int]:
    """Powers of two (and ``per_octave - 1`` steps between) from lo to hi, inclusive."""
    out, x = [], float(lo)
    step = 2.0 ** (1.0 / per_octave)
    while x <= hi * (1 + 1e-9):
        out.append(int(round(x)))
        x *= step
    return out


def sweep_contexts(extra: Iterable[int] = HEADLINE_CONTEXTS, lo: int = 1024,
                   hi: int = 131072) -> list[int]:
    """The headline contexts plus a log grid from lo to hi, sorted, without repeats."""
    return sorted(set(log_grid(lo, hi)) | {int(c) for c in extra})


def batches_for(batch: str, contexts: Sequence[int], ragged_contexts: Sequence[int] = ()
                ) -> list[tuple[int, ...]]:
    """The batches a notebook runs: one single-sequence batch per context, or the one
    ragged batch."""
    if batch == "single":
        return [(int(c),) for c in contexts]
    if batch == "ragged":
        if not ragged_contexts:
            raise ValueError("ragged_contexts: expected a non-empty list for batch='ragged'")
        return [tuple(int(c) for c in ragged_contexts)]
    raise ValueError(f"batch: expected 'single' or 'ragged', got {batch!r}")


# ------------------------------------------------------------------ reading measurements
# What the figures draw from a measurement row: a time and a fraction of a floor. NaN is
# "not measured" only beside the row's error (a design that failed to build or run).
DRAWN_COLUMNS = ("median_us", "roof_fraction")


def text(col: pd.Series) -> pd.Series:
    """A column as strings, "" where missing: a column read from a CSV with nothing in it is
    float64, which takes no string fill."""
    return col.astype(object).where(col.notna(), "").astype(str)


def read_measurement_csv(path: Path, root: Path, named: bool = False) -> pd.DataFrame | None:
    """One CSV under a data folder, checked: the frame when it is a measurement CSV, None
    for another table. A ValueError names the file (from ``root``), and the row and column
    where there is one: an empty or unreadable file, a measurement CSV lacking a column the
    notebooks read (one ``named`` by a notebook's file names, or one with every other
    column of a measurement), or a NaN (with no error) or negative time or fraction."""
    rel = path.relative_to(root)
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(f"data_dir: expected CSVs with a header, got an empty file {rel}"
                         ) from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"data_dir: expected a readable CSV, got {rel} "
                         f"({type(e).__name__}: {str(e).strip()[:120]})") from None
    missing = [c for c in MEASUREMENT_COLUMNS if c not in df.columns]
    if missing and not named and any(c not in DRAWN_COLUMNS for c in missing):
        return None  # another table (resources, identity, a diagnostic's)
    if missing:
        raise ValueError(f"{rel}: expected the columns {missing} of a measurement CSV, got "
                         f"none")
    errors = (text(df["error"]).str.len() > 0 if "error" in df.columns
              else pd.Series(False, index=df.index))
    for col in DRAWN_COLUMNS:
        if col not in df.columns:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad = (values < 0) | (values.isna() & ~errors)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{rel}: row {i} (line {i + 2}): {col}: expected a finite value "
                             f">= 0 (NaN only beside an error), got {df[col].iloc[i]!r}")
    return df


def check_data_dir(data_dir: str | os.PathLike, names: Sequence[str] | None = None) -> None:
    """What a replot reads from ``data_dir``, before anything is drawn: the folder there,
    holding measurement CSVs (named ``names``, when given), each as read_measurement_csv
    takes it. A ValueError names data_dir, or the file, row and column."""
    root = Path(data_dir)
    if not root.is_dir():
        raise ValueError(f"data_dir: expected a folder of measurement CSVs, got {str(root)!r} "
                         f"({'a file' if root.exists() else 'no such folder'})")
    if _measurement_rows(root, names) is None:  # each file checked as it is read
        files = " or ".join(f"{n}*.csv" for n in names or ()) or "*.csv"
        raise ValueError(f"data_dir: expected measurement CSVs ({files}, with the columns "
                         f"{list(MEASUREMENT_COLUMNS)}) under {str(root)!r}, got none")


def _measurement_rows(root: Path, names: Sequence[str] | None) -> pd.DataFrame | None:
    """Every measurement CSV under ``root`` (recursively; only files named ``names``, when
    given) as one frame with each row's ``source`` file; None when there are none."""
    frames = []
    for p in sorted(root.rglob("*.csv")) if root.is_dir() else []:
        if names is not None and not p.name.startswith(tuple(names)):
            continue
        df = read_measurement_csv(p, root, named=names is not None)
        if df is not None:
            frames.append(df.assign(source=str(p.relative_to(root))))
    return pd.concat(frames, ignore_index=True) if frames else None


def load_measurements(data_dir: str | os.PathLike, names: Sequence[str] | None = None
                      ) -> pd.DataFrame | None:
    """The measurement CSVs under ``data_dir`` (recursively) of its latest run, as one frame;
    None when there are none. A run is the commit measured last; it may be split over
    several files (identical rows are dropped).

    ``names``: read only files whose name starts with one of these (a notebook's own CSV,
    e.g. ``context_sweep``), so a replot draws exactly the rows its figure was drawn from
    in the run. Without it every measurement CSV is read, and a configuration timed twice
    in the run (by the sweep and the matrix) shows its later measurement.
    """
    root = Path(data_dir)
    df = _measurement_rows(root, names)
    if df is None:
        return None
    df = df.drop_duplicates(subset=[c for c in df.columns if c != "source"])
    latest = df.groupby("commit")["date"].max().idxmax()
    df = df[df["commit"] == latest]
    if "out_dtype" in df.columns:  # a part without the column wrote bf16 outputs
        df = df.assign(out_dtype=out_dtypes(df))
    if names is not None:
        return df
    key = [c for c in RUN_KEY if c in df.columns]
    return df.sort_values("date", kind="stable").drop_duplicates(subset=key, keep="last")


def replot_source(data_dir: str | os.PathLike, names: Sequence[str] | None = None) -> str:
    """Which run a replot of ``data_dir`` draws (``load_measurements``' rows): its folders,
    from the repository root where they lie under it, and its commit; "" when it has no
    rows."""
    from ..lab.repo_files import REPO_ROOT

    root = Path(data_dir)
    df = load_measurements(root, names)
    if df is None or df.empty:
        return ""
    where = []
    for src in sorted({str(Path(s).parent) for s in df["source"]}):
        p = (root / src).absolute()
        where.append(str(p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p))
    return f"{', '.join(where)} (commit {df['commit'].iloc[0]})"


def load_table(data_dir: str | os.PathLike, name: str) -> pd.DataFrame | None:
    """A notebook table (``resources.csv``, ``identity.csv``) of the latest run folder under
    ``data_dir`` that has one: the folder of its newest ``date`` column, else the last
    folder by name (run folders are named <date>-<commit>)."""
    root = Path(data_dir)
    found = sorted(root.rglob(name)) if root.is_dir() else []
    if not found:
        return None

    def when(p: Path) -> str:
        df = pd.read_csv(p, nrows=1000)
        return str(df["date"].max()) if "date" in df.columns and not df.empty else p.parent.name

    return pd.read_csv(max(found, key=lambda p: (when(p), str(p))))


def save_csv(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a notebook's table atomically, with the provenance columns (device, torch,
    triton, commit, date) added where it lacks them: every CSV of a run names where it came
    from. A table whose ``device`` column is the modelled device keeps it."""
    from ..lab.provenance import provenance

    prov = provenance()
    missing = {k: v for k, v in prov.items() if k not in df.columns}
    return write_csv_atomic(df.assign(**missing) if missing else df, path)


def measure_or_replot(mode: str, measure, *, data_dir: str | os.PathLike,
                      out_csv: str | os.PathLike, names: Sequence[str]
                      ) -> pd.DataFrame | None:
    """The notebooks' shared step. ``measure``: call ``measure()`` (a GPU run), save its
    rows to ``out_csv`` and return them. ``replot``: the rows of ``data_dir``'s latest run
    from the files named ``names`` (the CSVs the measure step of that run wrote)."""
    if mode == "measure":
        rows = measure()
        df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(
            [r if isinstance(r, dict) else r.as_dict() for r in rows])
        save_csv(df, out_csv)
        return df
    if mode == "replot":
        return load_measurements(data_dir, names)
    raise ValueError(f"mode: expected 'measure' or 'replot', got {mode!r}")


# What identifies one timed configuration within a run.
RUN_KEY = Measurement.KEY


def select(df: pd.DataFrame | None, *, shape: str | None = None, cache_dtype: str | None = None,
           weight_format: str | None = None, block_size: int | None = None,
           batch: str | None = None, timing: str | None = "flushed",
           variants: Sequence[str] | None = None,
           ragged_contexts: Sequence[int] | None = None,
           device: str | None = None, default_config: bool = True,
           default_weight: bool = True, out_dtype: str | None = DEFAULT_OUT_DTYPE,
           sequences: bool = False) -> pd.DataFrame:
    """The rows of one configuration; an empty frame when nothing matches.

    ``device`` (a registry name or torch's device name; None or "auto" for any) keeps the
    rows measured on that device. ``default_config`` drops rows of a tuning sweep (a
    non-empty ``config``): a figure compares designs as they ship; ``default_weight`` drops
    rows of another weight draw (a non-empty ``weight_draw``, e.g. MXFP4's ``wide``).
    ``out_dtype`` keeps the rows of that output dtype (default bf16, as every row of a run
    without the column; None: every one), so a figure of bf16 outputs never takes an FP8
    output's time for the same point's.
    ``timing`` keeps the rows of one timing (None: every timing but the sequence timings,
    ``graph<N>`` and ``eager<N>``, unless ``sequences``; a figure tells them apart by their
    ``timing`` column). ``batch="single"`` keeps one-sequence rows; ``"ragged"``
    keeps the rows whose ``contexts`` equal ``ragged_contexts`` (or every multi-sequence row
    if not given).
    """
    if df is None or df.empty:
        return pd.DataFrame(columns=list(MEASUREMENT_COLUMNS))
    keep = pd.Series(True, index=df.index)
    for flag, col in ((default_config, "config"), (default_weight, "weight_draw")):
        if flag and col in df.columns:
            keep &= df[col].isna() | (df[col].astype(str).str.strip() == "")
    for col, val in (("model", shape), ("cache_dtype", cache_dtype),
                     ("weight_format", weight_format), ("timing", timing)):
        if val is not None and col in df.columns:
            keep &= df[col].astype(str) == str(val)
    if out_dtype is not None:
        keep &= out_dtypes(df) == str(out_dtype)
    if timing is None and not sequences and "timing" in df.columns:
        keep &= df["timing"].map(sequence_length) == 0
    if block_size is not None:
        keep &= df["block_size"].astype(int) == int(block_size)
    if batch == "single":
        keep &= df["batch"].astype(int) == 1
    elif batch == "ragged":
        keep &= df["batch"].astype(int) > 1
        if ragged_contexts:
            keep &= df["contexts"].astype(str) == contexts_str(ragged_contexts)
    if variants is not None:
        keep &= df["variant"].isin(list(variants))
    if device not in (None, "auto"):
        want = lookup_device(device)
        names = df["device"].astype(str)
        keep &= names.map(lambda n: n == device or (want is not None
                                                    and lookup_device(n) == want))
    return df[keep].copy()


def load_reference(path: str | os.PathLike) -> pd.DataFrame | None:
    """A public change table (its first: ctx, before_ms, after_ms, speedup; the merged
    version's: ctx_tokens, before_us, after_us; `#` lines are comments); None if absent."""
    p = Path(path)
    return pd.read_csv(p, comment="#") if p.is_file() else None


def reference_table(ref: pd.DataFrame) -> pd.DataFrame:
    """A public table as ctx (tokens), before_us, after_us, speedup: from the first table's
    ctx, before_ms, after_ms or the merged version's ctx_tokens, before_us, after_us."""
    ctx = ref["ctx_tokens"] if "ctx_tokens" in ref.columns else ref["ctx"]
    if "before_us" in ref.columns:
        before, after = ref["before_us"], ref["after_us"]
    else:
        before, after = ref["before_ms"] * 1e3, ref["after_ms"] * 1e3
    out = pd.DataFrame({"ctx": ctx.astype(int).to_numpy(),
                        "before_us": before.astype(float).to_numpy(),
                        "after_us": after.astype(float).to_numpy()})
    out["speedup"] = out["before_us"] / out["after_us"]
    return out.sort_values("ctx").reset_index(drop=True)


# ------------------------------------------------------------------ tables
def speedup_table(df: pd.DataFrame, before: str = "serial", after: str = "chunked",
                  identity: pd.DataFrame | None = None) -> pd.DataFrame:
    """The public change's table: ctx, before and after in ms, speedup; plus the max abs
    diff between the two designs where ``identity`` (rows of lab.checks.check_variants, or measured
    rows carrying ``max_abs_diff``) has it."""
    t = df.pivot_table(index="ctx", columns="variant", values="median_us", aggfunc="median")
    if before not in t.columns or after not in t.columns:
        return pd.DataFrame(columns=["ctx", "before_ms", "after_ms", "speedup"])
    out = pd.DataFrame({"ctx": t.index.astype(int), "before_ms": t[before].values / 1e3,
                        "after_ms": t[after].values / 1e3})
    out["speedup"] = out["before_ms"] / out["after_ms"]
    if identity is not None and not identity.empty and "max_abs_diff" in identity.columns:
        d = identity[identity["variant"] == after].groupby("ctx")["max_abs_diff"].max()
        out["max_abs_diff"] = out["ctx"].map(d)
    return out.reset_index(drop=True)


TIMING_PREFERENCE = ("graph", "graph8", "flushed")  # device time first, the host's last


def device_time(df: pd.DataFrame) -> pd.DataFrame:
    """Each variant's rows in its best timing for the device's own time: one launch replayed
    from a CUDA graph where measured, else 8 in a graph, else plain calls."""
    if df is None or df.empty or "timing" not in df.columns:
        return df
    keep = []
    for _, g in df.groupby("variant", sort=False):
        have = set(g["timing"].astype(str))
        best = next((t for t in TIMING_PREFERENCE if t in have), None)
        keep.append(g[g["timing"] == best] if best else g)
    return pd.concat(keep)


def roof_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fraction of the roof (floor time / measured time) per context and variant."""
    return (df.pivot_table(index="ctx", columns="variant", values="roof_fraction",
                           aggfunc="median").round(3).reset_index())


def model_table(shape: str, contexts: Sequence[int], cache_dtype: str, weight_format: str,
                copy_tbps: float | None = None, mm_tflops: float | None = None
                ) -> pd.DataFrame:
    """Minimum bytes, FLOPs and arithmetic intensity from the package's byte/FLOP model,
    with the floors they imply when ceilings are given."""
    from ..lab import roofline

    rows = []
    for c in contexts:
        nb = roofline.min_bytes(shape, c, cache_dtype, weight_format)
        nf = roofline.flops(shape, c)
        row = {"ctx": int(c), "min_bytes": nb, "flops": nf, "flop_per_byte": nf / nb,
               "dot_dtype": roofline.dot_dtype(cache_dtype, weight_format)}
        if copy_tbps and mm_tflops:
            row.update(roofline.floors(nb, nf, copy_tbps, mm_tflops))
        rows.append(row)
    return pd.DataFrame(rows)


def timed_points(shape: str, contexts: Sequence[int], times_us: Sequence[float],
                 cache_dtype: str, weight_format: str) -> pd.DataFrame:
    """Calls timed elsewhere (a published table) as rows a roofline can place: ``model_table``'s
    bytes and FLOPs at each context, with ``median_us`` (the time given, µs) and the
    ``achieved_tflops`` it implies."""
    t = model_table(shape, [int(c) for c in contexts], cache_dtype, weight_format)
    us = np.asarray(times_us, dtype=float)
    if t.empty:
        return t.assign(median_us=us, achieved_tflops=us)
    return t.assign(median_us=us, achieved_tflops=t["flops"] / (us * 1e-6) / 1e12)


# ------------------------------------------------------------------ roofs and peaks
def positive(x) -> bool:
    """A number, finite and above zero: a rate or a roof that was measured or is known."""
    try:
        return x is not None and np.isfinite(float(x)) and float(x) > 0
    except (TypeError, ValueError):
        return False


def attainable_tbps(ai: float, copy_tbps: float, mm_tflops: float) -> float:
    """The bandwidth an operation of arithmetic intensity ``ai`` (FLOP/B) can reach:
    min(bandwidth roof, matrix roof / ai), in TB/s."""
    return min(copy_tbps, mm_tflops / ai) if positive(mm_tflops) else copy_tbps


def attainable_tflops(ai: float, bw_tbps: float, mm_tflops: float) -> float:
    """The TFLOP/s an operation of arithmetic intensity ``ai`` (FLOP/B) can reach:
    min(bandwidth roof x ai, matrix roof)."""
    return min(bw_tbps * ai, mm_tflops)


PEAK_FRACTION_COLUMNS = ("ctx", "dot_dtype", "ai", "against", "attainable_tflops", "fraction")


def peak_fractions(rows: pd.DataFrame,
                   roofs: Mapping[str, tuple[float | None, Mapping[str, float]]]
                   ) -> pd.DataFrame:
    """Each row's achieved TFLOP/s as a fraction of the peak attainable at its arithmetic
    intensity (``flops / min_bytes``) under each set of roofs in ``roofs``: {name (e.g.
    "datasheet", "measured"): (bandwidth roof TB/s, {dot dtype: matrix roof TFLOP/s})}.

    One row per (row, set of roofs) whose bandwidth roof and matrix roof for the row's
    ``dot_dtype`` are known, in the rows' order and, per row, in ``roofs``' order; columns
    ``PEAK_FRACTION_COLUMNS`` (``against``: the name of the set of roofs). ``rows`` need
    ``ctx``, ``flops``, ``min_bytes``, ``achieved_tflops`` and ``dot_dtype``.
    """
    out = []
    for r in rows.to_dict("records"):
        ai = r["flops"] / r["min_bytes"]
        for against, (bw, matrix) in roofs.items():
            mm = matrix.get(r["dot_dtype"])
            if positive(bw) and positive(mm):
                att = attainable_tflops(ai, bw, mm)
                out.append((int(r["ctx"]), r["dot_dtype"], ai, against, att,
                            r["achieved_tflops"] / att))
    return pd.DataFrame(out, columns=list(PEAK_FRACTION_COLUMNS))


BANDWIDTH_COLUMNS = ("ctx", "dot_dtype", "ai", "achieved_tbps", "datasheet_tbps",
                     "datasheet_fraction", "datasheet_ceiling_tbps", "measured_ceiling_tbps",
                     "measured_fraction")


def bandwidth_fractions(rows: pd.DataFrame, datasheet: tuple[float | None, Mapping[str, float]],
                        measured: tuple[float | None, Mapping[str, float]] | None = None
                        ) -> pd.DataFrame:
    """Each row's achieved bandwidth (``min_bytes`` / ``median_us``, TB/s) against its device:
    the fraction of the datasheet bandwidth (``datasheet``: (bandwidth TB/s, {dot dtype:
    matrix roof TFLOP/s})), and the ceiling the operation can reach at the row's arithmetic
    intensity (``flops / min_bytes``) under the datasheet roofs and, where given, the
    ``measured`` ones (``attainable_tbps``), with the fraction of the measured ceiling.
    NaN where a roof is not known (a ceiling needs the bandwidth and the dot's matrix
    roof). One row per row, columns ``BANDWIDTH_COLUMNS``."""
    def ceiling(ai, dot, bw, mm):  # both roofs known, else none
        ok = positive(bw) and positive(mm.get(dot))
        return attainable_tbps(ai, bw, mm[dot]) if ok else float("nan")

    out = []
    ds_bw, ds_mm = datasheet
    ms_bw, ms_mm = measured if measured is not None else (None, {})
    for r in rows.to_dict("records"):
        ai = r["flops"] / r["min_bytes"]
        tbps = r["min_bytes"] / r["median_us"] / 1e6
        dot = r.get("dot_dtype", "")
        ds = ds_bw if positive(ds_bw) else float("nan")
        ms = ceiling(ai, dot, ms_bw, ms_mm)
        out.append((int(r["ctx"]), dot, ai, tbps, ds, tbps / ds, ceiling(ai, dot, ds_bw, ds_mm),
                    ms, tbps / ms))
    return pd.DataFrame(out, columns=list(BANDWIDTH_COLUMNS))


# ------------------------------------------------------------------ what a figure needs
def require_rows(data: pd.DataFrame | None, *, data_dir: str | os.PathLike, names: Sequence[str] = (),
            require: dict[str, tuple[str, Sequence]] | None = None, **where) -> pd.DataFrame:
    """``select(data, **where)`` for a figure drawn from those rows, which must be there.

    ``require`` maps a parameter to ``(column, values)``: every one of ``values`` must be in
    ``column``, and the rows are kept to them (a notebook's ``contexts``). A ValueError
    names what is missing and what the data has: ``data_dir`` if it holds no run of
    ``names``; else the first of select's filters that leaves no row (the parameter, its
    value, the values there); else the parameter whose asked values are absent.
    """
    from ..lab.repo_files import REPO_ROOT

    root = Path(data_dir)
    shown = root.relative_to(REPO_ROOT) if root.is_relative_to(REPO_ROOT) else root
    if data is None or data.empty:
        files = " or ".join(f"{n}*.csv" for n in names) or "measurement CSVs"
        raise ValueError(f"data_dir: expected a run's {files} under {shown}, got none")
    if "source" in data.columns:  # read from data_dir: the run's folder(s) within it
        runs = sorted({str(Path(s).parent) for s in data["source"].astype(str)})
        src = ", ".join(str(shown) if r == "." else str(shown / r) for r in runs)
    else:
        src = "the rows measured here"
    # select's filters, in the order a missing configuration is diagnosed, and their columns.
    order = (("shape", "model"), ("cache_dtype", "cache_dtype"),
             ("weight_format", "weight_format"), ("block_size", "block_size"),
             ("batch", "batch"), ("ragged_contexts", "contexts"), ("device", "device"),
             ("timing", "timing"), ("variants", "variant"))
    filters = [k for k, _ in order if where.get(k) is not None]

    def described(keys) -> str:
        said = [f"{k}={where[k]!r}" for k in keys
                if k not in ("variants", "ragged_contexts") and where[k] != "auto"]
        return f" for {', '.join(said)}" if said else ""

    def listed(values) -> str:
        return ", ".join(str(v) for v in sorted(set(values), key=lambda v: (str(type(v)), v)))

    rows = select(data, **where)
    if rows.empty:
        unset = dict.fromkeys(filters)
        before = select(data, **{**where, **unset})
        for i, key in enumerate(filters):
            step = select(data, **{**where, **unset, **{k: where[k] for k in filters[:i + 1]}})
            if step.empty:
                column = dict(order)[key]
                there = before[column].astype(str) if column in before.columns else []
                got = (contexts_str(where[key]) if key == "ragged_contexts" else where[key])
                raise ValueError(f"{key}: expected a value with rows in {src}"
                                 f"{described(filters[:i])}, got {got!r} (there: "
                                 f"{listed(there) or 'no rows'})")
            before = step
        raise ValueError(f"data_dir: expected rows of the shipped designs in {src}, got none")
    for key, (column, values) in (require or {}).items():
        have = set(rows[column])
        missing = [v for v in values if v not in have]
        if missing:
            raise ValueError(f"{key}: expected {key} present in {src}{described(filters)}, "
                             f"got {', '.join(str(v) for v in missing)} "
                             f"(there: {listed(have)})")
        rows = rows[rows[column].isin(list(values))]
    return rows


# ------------------------------------------------------------------ run over run
POINT_KEY = ("model", "weight_format", "cache_dtype", "block_size", "contexts", "variant",
             "config")


def previous_run(rows: pd.DataFrame, committed_dir: str | os.PathLike,
                 names: Sequence[str] = ("perf_matrix",)) -> pd.DataFrame | None:
    """The rows of the committed run measured last before ``rows`` (by date) under
    ``committed_dir``, from the files named ``names``; None when there is none."""
    df = _measurement_rows(Path(committed_dir), names)
    if df is None:
        return None
    new_commits, start = set(rows["commit"].astype(str)), str(rows["date"].min())
    ends = df.groupby("commit")["date"].max().astype(str)
    earlier = ends[(ends < start) & ~ends.index.astype(str).isin(new_commits)]
    return None if earlier.empty else df[df["commit"] == earlier.idxmax()]


def _batch_label(contexts: str) -> str:
    """A batch's contexts as the matrix names them: ``64x4096`` for 64 sequences of 4096."""
    parts = contexts.split()
    return f"{len(parts)}x{parts[0]}" if len(parts) > 1 and len(set(parts)) == 1 else contexts


def run_over_run(rows: pd.DataFrame, previous: pd.DataFrame | None,
                 timing: str = "graph") -> pd.DataFrame:
    """Per matrix point and design, the median time in ``rows`` over ``previous``'s, in
    ``timing`` (a ratio above 1: slower than the previous run). Points only one run has are
    left out; the frame's ``attrs`` name both commits. Where either run has FP8-output rows
    (an ``out_dtype`` column), the output dtype is part of the point."""
    key = list(POINT_KEY)
    if any(d is not None and "out_dtype" in d.columns for d in (rows, previous)):
        key.append("out_dtype")
    cols = [*key, "new_us", "previous_us", "new_over_previous"]
    if previous is None or rows is None or rows.empty:
        return pd.DataFrame(columns=cols)

    def medians(d: pd.DataFrame) -> pd.Series:
        d = d[(d["timing"] == timing) & d["median_us"].notna()].copy()
        d["config"] = text(d["config"]) if "config" in d else ""
        d["out_dtype"] = out_dtypes(d)
        return d.groupby(key)["median_us"].median()

    both = pd.concat({"new_us": medians(rows), "previous_us": medians(previous)},
                     axis=1).dropna()
    both["new_over_previous"] = both["new_us"] / both["previous_us"]
    out = both.reset_index()[cols].sort_values("new_over_previous", ascending=False,
                                               ignore_index=True)
    out["contexts"] = [_batch_label(c) for c in out["contexts"].astype(str)]
    out.attrs = {"new": ", ".join(sorted(set(rows["commit"].astype(str)))),
                 "previous": str(previous["commit"].iloc[0])}
    return out
