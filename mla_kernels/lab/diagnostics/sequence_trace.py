"""Where a forward pass's call spends its time, program by program: N calls (distinct inputs)
in one CUDA graph, ``auto`` unless named (Kimi-K3 TP8, fp8 per row over an fp8 cache, page 1,
bf16 outputs), each hopper_ws program stamping the global timer at a few moments into a
buffer of its call, on a tree with the diagnostic patch ``hopper_ws_sequence_trace.patch``
applied (``diagnostics/__init__.py`` says where it is kept). One launch replayed alone from
a graph (the L2 flushed before it) is stamped alongside.

The question it answers: what a short context's call in a sequence spends beyond writing
its outputs at the write-only fill rate: the hand-over between grids (the previous grid's
last store to this grid's wait returning), the start-up (the wait to the first store), the
items themselves, or the programs' uneven ends.

Usage on the GPU, from the patched tree (``git apply scripts/diag/<patch>`` in a copy):

  MLA_RUN_LABEL=seqtrace python3 -m mla_kernels.lab.diagnostics.sequence_trace [--out FOLDER]
      [--calls N] [--variant V [--config JSON]] [tokens ...]

``--check`` (no GPU, any tree) applies the patch to a copy of the package and compiles the
patched kernel for sm_90: the patch still applies, and its stamps add no spills.

Rows: ``sequence_trace.csv``, one per (tokens, timing, call) with the moments below in µs
(medians over the call's programs with items, unless named), and
``sequence_trace_stamps.csv``, every program's stamps in ns after its replay's first and the
SM it ran on (both with the run's provenance). ``end_shares`` says how much of the spread of
the programs' ends follows the program id, and how much the SM.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ...designs import DESIGNS
from .. import bench
from ..clock import ClockLog
from ..provenance import provenance
from ..repo_files import REPO_ROOT
from ..timing import FULL, graphed, measure
from .command_line import sequence_parser, write_rows

SHAPE = "kimi-k3-tp8"
SM_SLOT = 8  # the program's SM, plus one (0: not stamped); the time slots come before it
SLOTS = SM_SLOT + 1
PATCH = REPO_ROOT / "scripts" / "diag" / "hopper_ws_sequence_trace.patch"
# Stamp slot -> the moment (the patch's order within a program).
STAMPS = {
    0: "entered",  # before the prefetches and the wait
    1: "wait returned",
    6: "gatherer: first tile's block ids asked for",
    7: "gatherer: first tile's copies issued",
    2: "MMA: first item's K loop issued",
    3: "MMA: first item's stores issued",
    4: "MMA: last item started",
    5: "MMA: every store drained",
}


def _patched_plan():
    from ...designs.hopper_ws import plan
    if not hasattr(plan, "TRACE"):
        raise SystemExit("sequence_trace: expected a tree with hopper_ws_sequence_trace.patch "
                         "applied (hopper_ws's plan has no TRACE), got the tree as committed")
    return plan


def call_rows(stamps: torch.Tensor) -> list[dict]:
    """One row per call from ``stamps`` [calls, programs, SLOTS] (ns, 0: not stamped): each
    moment after the call's median wait return, and the hand-over from the call before."""
    rows = []
    prev_end = None
    for i in range(stamps.shape[0]):
        t = stamps[i].double()
        entered = t[:, 0] != 0
        worked = t[:, 5] != 0
        if not bool(worked.any()):
            prev_end = None
            continue
        w = t[worked]
        wait = float(w[:, 1].median())
        row = dict(call=i, programs=int(entered.sum()), programs_with_items=int(worked.sum()),
                   first_entered_us=(float(t[entered, 0].min()) - wait) / 1e3,
                   wait_spread_us=float(w[:, 1].max() - w[:, 1].min()) / 1e3)
        for slot, what in STAMPS.items():
            if slot in (0, 1):
                continue
            col = w[:, slot]
            row[what] = float((col[col != 0] - w[col != 0, 1]).median()) / 1e3 \
                if bool((col != 0).any()) else float("nan")
        row["last program's end_us"] = float(w[:, 5].max() - wait) / 1e3
        end = float(w[:, 5].max())
        if prev_end is not None:
            # The wait returns once the grid before has finished and its writes are visible.
            row["hand-over_us"] = (float(w[:, 1].min()) - prev_end) / 1e3
            row["call_interval_us"] = (end - prev_end) / 1e3
        prev_end = end
        rows.append(row)
    return rows


def stamp_rows(stamps: torch.Tensor) -> pd.DataFrame:
    """Every program's stamps, in ns after the first stamp of the replay, and its SM (-1: not
    stamped)."""
    s = stamps[..., :SM_SLOT].clone()
    t0 = s[s != 0].min()
    s[s != 0] -= t0
    calls, programs, _ = s.shape
    df = pd.DataFrame(s.reshape(calls * programs, SM_SLOT).numpy(),
                      columns=[STAMPS[k] for k in range(SM_SLOT)])
    df.insert(0, "sm", (stamps[..., SM_SLOT] - 1).reshape(-1).numpy())
    df.insert(0, "program", [p for _ in range(calls) for p in range(programs)])
    df.insert(0, "call", [c for c in range(calls) for _ in range(programs)])
    return df


def end_shares(df: pd.DataFrame) -> dict:
    """How much of the spread of the programs' ends (each program's last store drained, after
    its call's median, over the calls after the first) the program id and the SM explain: the
    share of its variance that each one's mean removes. A share near 1 for the SM says some
    SMs finish their runs sooner than others in every call, which a static split by program
    id can follow only where the SM under each program id stays the same."""
    d = df[(df["call"] > 0) & (df[STAMPS[5]] != 0) & (df["sm"] >= 0)]
    end = d[STAMPS[5]] - d[STAMPS[1]]
    rel = end - end.groupby(d["call"]).transform("median")
    var = float(rel.var(ddof=0))
    out = dict(end_spread_us=float(rel.std(ddof=0)) / 1e3)
    for key in ("program", "sm"):
        left = rel - rel.groupby(d[key]).transform("mean")
        out[f"{key}_share"] = 1 - float(left.var(ddof=0)) / var if var > 0 else float("nan")
    return out


def trace_point(tokens: int, calls: int, clock: ClockLog, variant: str = "auto",
                config: dict | None = None) -> tuple[list[dict], list[pd.DataFrame]]:
    plan = _patched_plan()
    pt = bench.Point(SHAPE, (tokens,), "fp8_row", "fp8", 1, (variant,))
    sets = bench.input_sets(pt, calls, seed=0)
    # A buffer row per program launched: one per SM, or the config's own count.
    programs = max(torch.cuda.get_device_properties(0).multi_processor_count,
                   int((config or {}).get("programs") or 0))
    bufs = torch.zeros(calls, programs * SLOTS, dtype=torch.int64, device="cuda")
    for i, s in enumerate(sets):
        plan.TRACE[s.k_prefix.data_ptr()] = bufs[i]
    fns = [bench._design_fn(s, variant, config) for s in sets]
    base = dict(provenance(), shape=SHAPE, weight_format="fp8_row", cache_dtype="fp8",
                tokens=tokens, variant=variant,
                config=repr(DESIGNS[variant].config(config)) if config else "")
    rows, raw = [], []

    def sequence() -> None:
        for f in fns:
            f()
    for timing, fn, n in (("graph", fns[0], 1), (f"graph{calls}", sequence, calls)):
        t0 = time.time()
        # The last replay's stamps stay in the buffers.
        per_call = measure(graphed(fn), FULL).median_us / n
        mhz = clock.median_mhz(t0, time.time())
        torch.cuda.synchronize()
        stamps = bufs[:n].reshape(n, programs, SLOTS).cpu()
        for r in call_rows(stamps):
            rows.append(dict(base, timing=timing, per_call_us=per_call, sm_clock_mhz=mhz, **r))
        d = stamp_rows(stamps)
        for col, v in reversed(list(dict(base, timing=timing).items())):
            d.insert(0, col, v)
        raw.append(d)
        bufs.zero_()
    for s in sets:
        plan.TRACE.pop(s.k_prefix.data_ptr(), None)
    return rows, raw


# Run in the patched copy: hopper_ws at 4096 tokens, one group and two, compiled for sm_90.
_CHECK = """
import json
from mla_kernels.designs.hopper_ws import HopperWSConfig, plan
from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
from mla_kernels.lab.inputs import build_inputs
from mla_kernels.lab.occupancy import problem_for
assert isinstance(plan.TRACE, dict), "the patch's TRACE"
for cfg in (HopperWSConfig(ring_depth=4, prefetch="inputs"),
            HopperWSConfig(ring_depth=6, mma_groups=2, latent_in_registers=True)):
    inp = build_inputs("kimi-k3-tp8", [4096], cache_dtype="fp8", weight_format="fp8_row")
    prob = problem_for("kimi-k3-tp8", [4096], "fp8", "fp8_row", 1)
    _, k = compile_main_kernel("hopper_ws", inp, prob, cfg, HOPPER, 90)
    print(json.dumps({"groups": cfg.mma_groups, "timer_reads": k.asm["ptx"].count("%globaltimer"),
                      "sm_reads": k.asm["ptx"].count("%smid"), **ptxas_report(k.asm["ptx"], 90)}),
          flush=True)
"""


def check() -> list[dict]:
    """The patch applied to a copy of the package, its kernel compiled for sm_90 there (in a
    child process, the interpreter off): a row per config with its timer reads and spills."""
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(REPO_ROOT / "mla_kernels", Path(d) / "mla_kernels",
                        ignore=shutil.ignore_patterns("__pycache__"))
        applied = subprocess.run(["git", "apply", str(PATCH)], cwd=d, capture_output=True,
                                 text=True)
        if applied.returncode != 0:
            raise SystemExit(f"sequence_trace: expected {PATCH.name} to apply to this tree, "
                             f"got: {applied.stderr.strip()}")
        env = dict(os.environ, TRITON_INTERPRET="0",
                   PYTHONPATH=os.pathsep.join([d, os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", _CHECK], cwd=d, env=env,
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"sequence_trace: the patched kernel did not compile: "
                             f"{out.stderr[-2000:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        print(f"sequence_trace: patched, {r['groups']} group(s): {r['timer_reads']} timer "
              f"reads, {r['sm_reads']} SM id read(s), {r['spill_bytes']} bytes spilled (sm_90)")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = sequence_parser(__doc__, "sequence_trace.csv", (4096,),
                         "the design traced (default auto; hopper_ws's programs stamp)",
                         ("auto", "hopper_ws"))
    ap.add_argument("--check", action="store_true",
                    help="apply the patch to a copy of the package and compile it for sm_90")
    a = ap.parse_args(argv)
    if a.calls < 2:
        ap.error(f"--calls: expected at least 2 (a hand-over needs a call before), got {a.calls}")
    if a.config is not None and (a.variant != "hopper_ws" or not isinstance(a.config, dict)):
        ap.error(f"--config: expected a JSON mapping with --variant hopper_ws, got {a.config!r}"
                 f" with {a.variant}")
    if a.check:
        check()
        return
    rows, raw = [], []
    with ClockLog() as clock:
        for t in a.tokens:
            r, d = trace_point(t, a.calls, clock, a.variant, a.config)
            rows += r
            raw += d
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    write_rows(df, a.out, "sequence_trace.csv")
    write_rows(pd.concat(raw, ignore_index=True), a.out, "sequence_trace_stamps.csv")
    cols = [c for c in df.columns if c.endswith("_us") or c.startswith(("MMA", "gatherer"))]
    # A sequence's calls after its first (which follows the L2 flush), and the lone launch.
    summary = df[(df["timing"] == "graph") | (df["call"] > 0)].groupby(["tokens", "timing"])[cols].median()
    print(summary.T.to_string(float_format=lambda v: f"{v:.2f}"))
    for d in raw:
        if d["call"].nunique() > 2:
            shares = end_shares(d)
            print(f"sequence_trace: {d['tokens'].iat[0]} tokens, {d['timing'].iat[0]}: the "
                  f"programs' ends spread {shares['end_spread_us']:.2f} µs (sd), of which the "
                  f"program id explains {shares['program_share']:.2f}, the SM "
                  f"{shares['sm_share']:.2f}")


if __name__ == "__main__":
    main()
