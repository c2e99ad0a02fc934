"""Where one hopper_ws launch spends its time, program by program (measured on
2026-12-01, docs/log/2026-12-01-rounds-g-h-trace.md): each partition of every program stamps
the SM's cycle counter (and the global timer at the MMA partition's start and end) at fixed
points into a buffer, on a tree with the diagnostic patch ``hopper_ws_trace.patch`` applied
(``diagnostics/__init__.py`` says where it is kept). The buffer is passed in the
weight-pointer argument that only MXFP4 reads, so fp8 and bf16 weights only. The launch is
replayed from a CUDA graph with the L2 flushed (as the matrix's graph rows); the stamps of
the last replay are read back. On the H200, from the patched tree:

  MLA_RUN_LABEL=trace python3 -m mla_kernels.lab.diagnostics.trace_hopper_ws 4096 32000 \
      [--config 'HopperWSConfig(...)'] [--out FOLDER] [--name trace_default.csv]

(rows to FOLDER/NAME; FOLDER defaults to reports/diag/, which git ignores, NAME to trace.csv).

Rows: one per (tokens, config, stamp) with the median, 10th and 90th percentile and the
largest time across programs, in µs after the program's MMA partition started (cycles over
the SM clock each program measured between its first and last stamp), plus the graph
time, the span from the first program's start to the last one's end, and the starts' and
ends' spread. Kimi-K3 TP8, fp8 per row, fp8 cache, page 1.
"""

import pandas as pd
import torch

from ...api import gather_kv_b_proj
from ...designs import hopper_ws as hw
from ...designs.design import parse_config
from ..inputs import build_inputs
from ..provenance import provenance
from ..timing import graphed, median_us
from .command_line import parser, write_rows

# Stamp slot -> what had happened (the partitions' order within a program). Slots 19 and
# 22-31 come with hopper_ws_trace_chunks.patch; a slot no program stamped is left out.
STAMPS = {
    2: "MMA: its item range known (cs[batch] loaded)",
    12: "loader: started",
    13: "loader: item range known, first TMA next",
    9: "gatherer: started",
    22: "gatherer: cs and kv_indptr vectors loaded",
    23: "gatherer: its item range known",
    10: "gatherer: first tile's row offsets known",
    11: "gatherer: first tile's cp.async issued",
    14: "MMA: first weight chunk landed",
    15: "MMA: first tile's rope landed",
    16: "MMA: first latent chunk landed",
    17: "MMA: last latent chunk landed",
    19: "MMA: first tile's rope staged",
    24: "MMA: first item, chunk 0 ready", 28: "MMA: first item, chunk 0 wgmma issued",
    25: "MMA: first item, chunk 1 ready", 29: "MMA: first item, chunk 1 wgmma issued",
    26: "MMA: first item, chunk 2 ready", 30: "MMA: first item, chunk 2 wgmma issued",
    27: "MMA: first item, chunk 3 ready", 31: "MMA: first item, chunk 3 wgmma issued",
    3: "MMA: first item's wgmma issued",
    4: "MMA: first item's wgmma done",
    5: "MMA: first item's stores issued",
    20: "MMA: second item started",
    21: "MMA: last item started",
    6: "MMA: last item's stores issued",
    7: "MMA: every store drained (end)",
}


def main(argv: list[str] | None = None) -> None:
    ap = parser(__doc__, "the rows (--name)")
    ap.add_argument("tokens", nargs="+", type=int, help="tokens of one sequence")
    ap.add_argument("--name", default="trace.csv", help="file name of the rows (default trace.csv)")
    ap.add_argument("--config", default=None, help="a HopperWSConfig repr (default: the default)")
    a = ap.parse_args(argv)
    cfg = parse_config(hw.HopperWSConfig, a.config) if a.config else hw.HopperWSConfig()
    rows = []
    for tokens in a.tokens:
        inp = build_inputs("kimi-k3-tp8", [tokens], block_size=1, cache_dtype="fp8",
                           weight_format="fp8_row", device="cuda", seed=0)
        hw.TRACE = torch.zeros(4096, hw.SLOTS, dtype=torch.int64, device="cuda")

        def launch(inp=inp) -> None:
            gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=cfg)
        launch()
        graph_us = median_us(graphed(launch))
        t = hw.TRACE.cpu()
        t = t[t[:, 1] != 0]
        ghz = (t[:, 7] - t[:, 1]).double() / (t[:, 8] - t[:, 0]).double()  # cycles per ns
        span = float(t[:, 8].max() - t[:, 0].min()) / 1e3
        print(f"{tokens} tokens, {cfg}: graph {graph_us:.1f} us; {len(t)} programs; first start to "
              f"last end {span:.1f} us; starts spread {float(t[:, 0].max() - t[:, 0].min()) / 1e3:.2f}"
              f" us, ends {float(t[:, 8].max() - t[:, 8].min()) / 1e3:.2f} us; SM clock "
              f"{float(ghz.median()):.2f} GHz", flush=True)
        for slot, what in STAMPS.items():
            if not bool((t[:, slot] != 0).any()):
                continue
            us = ((t[:, slot] - t[:, 1]).double() / ghz / 1e3)
            q = torch.quantile(us, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
            print(f"  {what:48s} median {q[1]:6.2f}  p10 {q[0]:6.2f}  p90 {q[2]:6.2f}  max "
                  f"{float(us.max()):6.2f} us", flush=True)
            rows.append(dict(provenance(), model="kimi-k3-tp8", weight_format="fp8_row",
                             cache_dtype="fp8", block_size=1, contexts=str(tokens), config=repr(cfg),
                             stamp=what, median_us=float(q[1]), p10_us=float(q[0]),
                             p90_us=float(q[2]), max_us=float(us.max()), graph_us=graph_us,
                             span_us=span, programs=len(t), sm_ghz=float(ghz.median())))
        hw.TRACE = None
    write_rows(pd.DataFrame(rows), a.out, a.name)


if __name__ == "__main__":
    main()
