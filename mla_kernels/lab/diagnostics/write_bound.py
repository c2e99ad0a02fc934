"""What writing a call's outputs alone costs, timed as the designs' rows are (median, L2
flushed, one launch replayed from a CUDA graph and a plain call): ``fill_`` of one buffer of
the call's output bytes (K and V, bf16) at each token count, as uint8, bf16 and float32
elements (``dtype``; the rows of a8be341, 2026-12-01, are uint8 only), and an empty Triton
launch. With ``--sequence N``, also ``fill_`` of N distinct such buffers back to back in
one graph, per fill (``graph<N>``, the L2 flushed before the sequence only), to set beside
the designs' ``graph<N>`` rows: whether writing alone is slower in a sequence than in one
launch (docs/log/2026-12-04-host-path-and-overlap.md). Not a lower bound for a kernel that
writes those outputs: a plain Triton store kernel writes them faster
(mla_kernels.lab.diagnostics.gather_write_bound; docs/log/2026-12-01-gather-write-bound.md).

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.write_bound [--out FOLDER]
[--sequence N] [tokens ...] (rows to FOLDER/write_bound.csv; FOLDER defaults to
reports/diag/, which git ignores).
"""
import pandas as pd
import torch

from .. import host_cost
from ..provenance import provenance
from ..roofline import output_bytes
from ..timing import graphed, median_us
from .command_line import parser, write_rows


def timed(what: str, tokens: int, nbytes: int, fn, dtype: str = "") -> list[dict]:
    return [dict(provenance(), what=what, tokens=tokens, nbytes=nbytes, dtype=dtype,
                 timing=timing, median_us=median_us(f))
            for timing, f in (("graph", graphed(fn)), ("flushed", fn))]


def sequence_row(tokens: int, nbytes: int, dtype: torch.dtype, n: int) -> dict:
    """One ``graph<n>`` row: ``fill_`` of ``n`` distinct buffers of ``nbytes`` in one graph,
    per fill."""
    bufs = [torch.empty(nbytes // dtype.itemsize, dtype=dtype, device="cuda") for _ in range(n)]

    def fills() -> None:
        for b in bufs:
            b.fill_(7)
    us = median_us(graphed(fills)) / n
    return dict(provenance(), what="fill", tokens=tokens, nbytes=nbytes,
                dtype=str(dtype).removeprefix("torch."), timing=f"graph{n}", median_us=us)


def main(argv: list[str] | None = None) -> None:
    ap = parser(__doc__, "write_bound.csv")
    ap.add_argument("tokens", nargs="*", type=int, default=[4096, 32000],
                    help="tokens of one sequence (default 4096 32000)")
    ap.add_argument("--sequence", type=int, default=0, metavar="N",
                    help="also time N bf16 fills back to back in one graph (default 0: not)")
    a = ap.parse_args(argv)
    if a.sequence < 0:
        ap.error(f"--sequence: expected N >= 0, got {a.sequence}")
    tokens = a.tokens
    rows = []
    for t in tokens:
        for dtype in (torch.uint8, torch.bfloat16, torch.float32):
            buf = torch.empty(output_bytes("kimi-k3-tp8", t) // dtype.itemsize, dtype=dtype,
                              device="cuda")
            rows += timed("fill", t, buf.numel() * dtype.itemsize, lambda b=buf: b.fill_(7),
                          str(dtype).removeprefix("torch."))
            del buf
        if a.sequence:
            rows.append(sequence_row(t, output_bytes("kimi-k3-tp8", t), torch.bfloat16,
                                     a.sequence))
            torch.cuda.empty_cache()
    rows += timed("empty launch", 0, 0, host_cost.empty_launch())
    df = pd.DataFrame(rows)
    df["tbps"] = df.nbytes / df.median_us / 1e6
    write_rows(df, a.out, "write_bound.csv")
    print(df[["what", "tokens", "dtype", "nbytes", "timing", "median_us", "tbps"]].to_string(
        index=False))


if __name__ == "__main__":
    main()
