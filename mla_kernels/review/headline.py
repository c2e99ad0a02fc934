"""The README's headline results, read from the latest committed run: never typed in.

    python -m mla_kernels.review.headline            # print the block
    python -m mla_kernels.review.headline --write    # rewrite it in README.md
    python -m mla_kernels.review.headline --check    # exit 1 when README.md differs

The latest committed run is the folder under ``data/h200/`` sorted last by name (run folders
are named <date>-<commit>) that holds performance-matrix CSVs (``perf_matrix*.csv``). The
block is what ``render`` makes of it: for each weight format, Kimi-K3 TP8 over an fp8 cache,
page size 1, one sequence, at ``CONTEXTS`` tokens, the floor, ``auto``'s ``graph`` time and
its fraction of the floor, and the fastest torch path (any timing); then the run's folder,
commit stamp, device and date, and a link to each of its figures. ``README.md`` holds it
between ``START`` and ``END``; ``tests/test_headline.py`` checks that it is what this module
generates from the committed data.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..lab.measurements import DEFAULT_OUT_DTYPE, out_dtypes
from ..lab.repo_files import REPO_ROOT, write_text_atomic

START = "<!-- headline:start -->"
END = "<!-- headline:end -->"
COMMAND = "python -m mla_kernels.review.headline --write"
RUNS_DIR = REPO_ROOT / "data" / "h200"
README = REPO_ROOT / "README.md"

# The point the headline shows: the shape and cache the perf notes lead with, every weight
# format, a mid and the longest context of the matrix.
MODEL, CACHE, PAGE = "kimi-k3-tp8", "fp8", 1
CONTEXTS = (32000, 109440)
FORMATS = ("fp8_row", "fp8_block", "mxfp4", "bf16")
TIMING = "graph"


def latest_run(runs_dir: str | Path = RUNS_DIR) -> Path:
    """The run folder under ``runs_dir`` with matrix CSVs whose rows were measured last (the
    newest ``date``, as the notebooks' replot picks its run; two runs of one day are not in
    name order), the last by name among equals or where no row says."""
    runs = [p for p in Path(runs_dir).iterdir() if p.is_dir() and _matrix_files(p)]
    if not runs:
        raise FileNotFoundError(f"no run folder with perf_matrix*.csv under {runs_dir}")
    return max(runs, key=lambda p: (_measured(p), p.name))


def _measured(run: Path) -> str:
    """The newest ``date`` of a run's matrix rows ("" where they have none)."""
    dates = []
    for f in _matrix_files(run):
        try:
            dates += pd.read_csv(f, usecols=["date"])["date"].astype(str).tolist()
        except (ValueError, pd.errors.EmptyDataError):  # no date column, an empty file
            continue
    return max(dates, default="")


def _matrix_files(run: Path) -> list[Path]:
    return sorted(run.glob("perf_matrix*.csv"))


def matrix_rows(run: str | Path) -> pd.DataFrame:
    """The run's matrix rows (every ``perf_matrix*.csv`` of the folder, one frame)."""
    return pd.concat([pd.read_csv(p) for p in _matrix_files(Path(run))], ignore_index=True)


def _point_rows(df: pd.DataFrame, fmt: str, ctx: int) -> pd.DataFrame:
    d = df[(df["model"] == MODEL) & (df["cache_dtype"] == CACHE)
           & (df["block_size"].astype(int) == PAGE) & (df["batch"].astype(int) == 1)
           & (df["ctx"].astype(int) == ctx) & (df["weight_format"] == fmt)]
    if "weight_draw" in d.columns:  # the default draw, not the 'wide' one
        d = d[d["weight_draw"].isna() | (d["weight_draw"].astype(str).str.strip() == "")]
    return d[out_dtypes(d) == DEFAULT_OUT_DTYPE]  # bf16 outputs: the FP8 ones are beside them


def headline_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (weight format, context) of ``FORMATS`` x ``CONTEXTS`` that the run
    measured: floor_us, dot_dtype, auto_us, fraction, torch_us, torch_path, correct."""
    rows = []
    for fmt in FORMATS:
        for ctx in CONTEXTS:
            d = _point_rows(df, fmt, ctx)
            auto = d[(d["variant"] == "auto") & (d["timing"] == TIMING)]
            if auto.empty:
                continue
            if len(auto) > 1:
                raise ValueError(f"{len(auto)} auto {TIMING} rows for {fmt} at {ctx} tokens")
            a = auto.iloc[0]
            torch = d[d["variant"].astype(str).str.startswith("torch_")]
            t = torch.loc[torch["median_us"].idxmin()] if not torch.empty else None
            rows.append({
                "weight_format": fmt, "ctx": ctx, "floor_us": a["floor_us"],
                "dot_dtype": a["dot_dtype"], "auto_us": a["median_us"],
                "fraction": a["roof_fraction"],
                "torch_us": None if t is None else t["median_us"],
                "torch_path": None if t is None else t["variant"],
                "correct": bool(a["correct"]) and (t is None or bool(t["correct"])),
            })
    return pd.DataFrame(rows)


def _link(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def render(run: str | Path, root: str | Path = REPO_ROOT) -> str:
    """The block, markers included, for run folder ``run``; links relative to ``root``."""
    run, root = Path(run), Path(root)
    df = matrix_rows(run)
    t = headline_table(df)
    if t.empty:
        raise ValueError(f"{run}: no auto {TIMING} rows for {MODEL}, {CACHE} cache, page {PAGE}")
    lines = [START, f"<!-- generated from the committed data by `{COMMAND}`: not edited by hand -->",
             "",
             "| weight format | tokens | floor µs (dot) | `auto` µs | fraction of the floor "
             "| fastest torch path µs | torch / `auto` |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in t.itertuples():
        torch = "—" if r.torch_us is None else f"{r.torch_us:.1f} (`{r.torch_path}`)"
        ratio = "—" if r.torch_us is None else f"{r.torch_us / r.auto_us:.2f}x"
        lines.append(f"| `{r.weight_format}` | {r.ctx} | {r.floor_us:.1f} ({r.dot_dtype}) "
                     f"| {r.auto_us:.1f} | {r.fraction:.3f} | {torch} | {ratio} |")
    stamps = ", ".join(f"`{c}`" for c in sorted(df["commit"].astype(str).unique()))
    devices = ", ".join(sorted(df["device"].astype(str).unique()))
    day = str(df["date"].astype(str).max())[:10]
    versions = ", ".join(f"{k} {v}" for k in ("torch", "triton") if k in df.columns
                         for v in sorted(df[k].astype(str).unique()))
    correct = ("every row above checked correct" if t["correct"].all()
               else f"{int((~t['correct']).sum())} row(s) above NOT correct")
    lines += ["",
              "Kimi-K3 TP8, fp8 cache, page size 1, one sequence, bf16 outputs;",
              f"`{TIMING}` timing (one launch replayed from a CUDA graph, L2 flushed);",
              "the floor: cuBLAS's rate for the same matrix work, in the dot that ran;",
              f"the torch path: the fastest in any timing; {correct}.",
              f"Run [`{_link(run, root)}/`]({_link(run / 'README.md', root)}): {devices}, "
              f"{day}, commit stamp {stamps}, {versions}."]
    figures = sorted((run / "figures").glob("*.png"))
    if figures:
        lines += ["", "Its figures: " + " · ".join(
            f"[{p.stem.replace('_', ' ')}]({_link(p, root)})" for p in figures) + "."]
    lines += ["", END]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with its START...END block replaced by ``block``."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"expected one {START} ... {END} block")
    head, rest = text.split(START, 1)
    return head + block + rest.split(END, 1)[1]


def current_block(text: str) -> str:
    """The START...END block of ``text``, markers included."""
    replace_block(text, "")  # the same checks of the markers
    return START + text.split(START, 1)[1].split(END, 1)[0] + END


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.review.headline",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the block in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md differs")
    ap.add_argument("--runs", type=Path, default=RUNS_DIR, help=argparse.SUPPRESS)
    ap.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    block = render(latest_run(args.runs), args.readme.parent)
    if not (args.write or args.check):
        print(block)
        return 0
    text = args.readme.read_text()
    new = replace_block(text, block)
    if args.check:
        if new != text:
            print(f"{args.readme}: the headline is not the latest run's; run `{COMMAND}`",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        write_text_atomic(args.readme, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
