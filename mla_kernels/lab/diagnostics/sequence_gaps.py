"""Whether a forward pass's calls are slower than one launch for the SM clock: N calls of a
variant, ``auto`` unless named (Kimi-K3 TP8, fp8 per row over an fp8 cache, page 1, bf16
outputs), each on its own input set, in one CUDA graph with an idle gap before each call (a
one-program kernel that spins on the global timer for GAP µs while the rest of the GPU
rests), per call less the gaps' own time (the same N spins alone in one graph), with the SM
clock sampled over each timing. Gap 0 is the matrix's ``graph<N>`` row; one launch
(``graph``, L2 flushed) is timed alongside.

The question it answers (docs/log/2026-12-04-host-path-and-overlap.md): at 32000 tokens a
call in a 61-call sequence reads slower than one launch, at a lower clock. If calls with
gaps run at one launch's time and clock while gapless ones do not, the sustained load's
clock is the difference; if they stay slow at one launch's clock, it is not.

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.sequence_gaps [--out FOLDER]
[--calls N] [--gaps 0 20 100] [--variant V [--config JSON]] [tokens ...] (rows to
FOLDER/sequence_gaps.csv; FOLDER defaults to reports/diag/, which git ignores; ``--check``
compiles the gap kernel for sm_90 on a machine with no GPU).
"""
import time

import pandas as pd
import torch
import triton
import triton.language as tl

from ...designs import DESIGNS
from .. import bench
from ..clock import ClockLog
from ..provenance import provenance
from ..timing import FULL, graphed, measure
from .command_line import sequence_parser, write_rows
from .spin import wait_ns

SHAPE = "kimi-k3-tp8"


@triton.jit
def _spin(flag, NS: tl.constexpr):
    """Wait NS ns on the global timer, one program."""
    tl.store(flag, wait_ns(NS).to(tl.int32))


def spin(flag: torch.Tensor, gap_us: float) -> None:
    """One launch of the gap kernel (nothing for a gap of 0)."""
    if gap_us > 0:
        _spin[(1,)](flag, NS=int(gap_us * 1000))


def rows_at(tokens: int, calls: int, gaps: list[float], clock: ClockLog,
            variant: str = "auto", config: dict | None = None) -> list[dict]:
    pt = bench.Point(SHAPE, (tokens,), "fp8_row", "fp8", 1, (variant,))
    sets = bench.input_sets(pt, calls, seed=0)
    fns = [bench._design_fn(s, variant, config) for s in sets]
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    base = dict(provenance(), shape=SHAPE, weight_format="fp8_row", cache_dtype="fp8",
                tokens=tokens, calls=calls, variant=variant,
                # The typed config's repr, as the matrix's rows give theirs.
                config=repr(DESIGNS[variant].config(config)) if config else "")

    def timed(fn) -> tuple[float, float]:
        t0 = time.time()
        t = measure(fn, FULL).median_us
        return t, clock.median_mhz(t0, time.time())

    one, one_mhz = timed(graphed(fns[0]))
    out = [dict(base, timing="graph", gap_us=float("nan"), median_us=one, gaps_us=0.0,
                per_call_us=one, sm_clock_mhz=one_mhz)]
    for gap in gaps:
        def sequence(gap=gap) -> None:
            for f in fns:
                spin(flag, gap)
                f()

        def spins(gap=gap) -> None:
            for _ in fns:
                spin(flag, gap)
        total, mhz = timed(graphed(sequence))
        alone = timed(graphed(spins))[0] if gap > 0 else 0.0
        out.append(dict(base, timing=f"graph{calls}", gap_us=gap, median_us=total,
                        gaps_us=alone, per_call_us=(total - alone) / calls, sm_clock_mhz=mhz))
    return out


def check() -> None:
    """The gap kernel compiled for sm_90 (the interpreter runs no inline assembly): one
    read of the global timer before its loop, one in it, and its store."""
    from triton import compile as compile_kernel
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    k = compile_kernel(ASTSource(_spin, {"flag": "*i32", "NS": "constexpr"}, {"NS": 1000}),
                       target=GPUTarget("cuda", 90, 32))
    ptx = k.asm["ptx"]
    reads = ptx.count("%globaltimer")
    assert reads >= 2 and "st.global" in ptx, (reads, "st.global" in ptx)
    print(f"sequence_gaps: the gap kernel compiles for sm_90 ({reads} timer reads)")


def main(argv: list[str] | None = None) -> None:
    ap = sequence_parser(__doc__, "sequence_gaps.csv", (4096, 32000),
                         "the design timed, by its name (default auto, which on any Hopper "
                         "runs the H200's tuned entries)")
    ap.add_argument("--gaps", type=float, nargs="+", default=[0, 20, 100],
                    help="idle µs before each call (default 0 20 100)")
    ap.add_argument("--check", action="store_true",
                    help="compile the gap kernel for sm_90 and time nothing")
    a = ap.parse_args(argv)
    if a.calls < 1:
        ap.error(f"--calls: expected at least 1, got {a.calls}")
    if any(g < 0 for g in a.gaps):
        ap.error(f"--gaps: expected µs >= 0, got {a.gaps}")
    if a.config is not None and not isinstance(a.config, dict):
        ap.error(f"--config: expected a JSON mapping of config fields, got {a.config!r}")
    if a.config is not None and a.variant not in DESIGNS:
        ap.error(f"--config: expected a design's name as --variant, got {a.variant!r}")
    if a.check:
        check()
        return
    rows = []
    with ClockLog() as clock:
        for t in a.tokens:
            rows += rows_at(t, a.calls, a.gaps, clock, a.variant, a.config)
            torch.cuda.empty_cache()  # the point's input sets went with rows_at's frame
    df = pd.DataFrame(rows)
    write_rows(df, a.out, "sequence_gaps.csv")
    print(df[["tokens", "timing", "gap_us", "per_call_us", "sm_clock_mhz"]].to_string(
        index=False))


if __name__ == "__main__":
    main()
