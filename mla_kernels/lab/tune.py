"""Search launch configs of each design per weight format on the live GPU; prints the best
per (format, cache, ctx) and appends every row to ROWS.csv as it is measured.
Usage: python -m mla_kernels.lab.tune ROWS.csv [--designs tiled ...] [--formats fp8_row ...]
       [--caches fp8 ...] [--contexts 32000 ...] [--shapes kimi-k3-tp8 ...]
       [--configs JSON] [--out-dtype float8_e4m3fn] [--sequence N]
--configs: a JSON list of config mappings searched instead of SEARCH's for every design
given (a config a format refuses is a row with its error). --sequence: also time N
back-to-back calls on their own input sets, in one graph and eagerly (graph<N>, eager<N>
rows), as a forward pass's layers make them."""
import argparse
import json
import time

from . import bench
from .measurements import append_csv_atomic, frame

SEARCH = {
    "tiled": [dict(block_m=bm, num_warps=w, num_stages=st, split=sp)
              for bm, w, st, sp in ((64, 4, 2, False), (128, 8, 2, False), (128, 4, 2, True),
                                    (128, 8, 2, True), (128, 8, 3, True), (64, 4, 2, True))],
    "chunked": [dict(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
    "serial": [dict(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
    "hopper_ws": [dict(ring_depth=s) for s in (2, 3, 4)],
}
FORMATS = ("fp8_row", "fp8_block", "bf16", "mxfp4")

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.lab.tune",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--designs", nargs="+", default=["tiled", "chunked", "serial"])
    ap.add_argument("--formats", nargs="+", default=list(FORMATS))
    ap.add_argument("--caches", nargs="+", default=["fp8"])
    ap.add_argument("--contexts", nargs="+", type=int, default=[32000])
    ap.add_argument("--shapes", nargs="+", default=["kimi-k3-tp8"])
    ap.add_argument("--configs", type=json.loads, default=None)
    ap.add_argument("--out-dtype", default=bench.DEFAULT_OUT_DTYPE)
    ap.add_argument("--sequence", type=int, default=0)
    a = ap.parse_args(argv)
    if a.configs is not None and not (isinstance(a.configs, list)
                                      and all(isinstance(c, dict) for c in a.configs)):
        ap.error(f"--configs: expected a JSON list of config mappings, got {a.configs!r}")
    if a.sequence < 0:
        ap.error(f"--sequence: expected a count of calls >= 0, got {a.sequence}")
    # Designs with launch configs to search (auto resolves its own: it has none).
    unknown = [d for d in a.designs if d not in SEARCH]
    if unknown:
        ap.error(f"--designs: expected designs among {sorted(SEARCH)}, got {unknown}")

    t0 = time.time()
    ceil = bench.measure_ceilings()
    for shape in a.shapes:
        for fmt in a.formats:
            for cache in a.caches:
                for design in a.designs:
                    for cfg in SEARCH[design] if a.configs is None else a.configs:
                        # serial is ~10x slower than the rest: tuned at the short context only
                        for ctx in (a.contexts if design != "serial" else (4096,)):
                            pt = bench.Point(shape, (ctx,), fmt, cache, 1, (design,),
                                             configs={design: cfg}, out_dtype=a.out_dtype,
                                             sequence=a.sequence,
                                             sequence_variants=(design,) if a.sequence else ())
                            rows = frame(bench.run_points([pt], ceilings=ceil, torch_paths=False,
                                                          design_graphs=True, progress=False))
                            append_csv_atomic(rows, a.out)
                            g = rows[rows.timing == "graph"]
                            seq = rows[rows.timing == f"graph{a.sequence}"]
                            print(f"{shape} {fmt} {cache} {ctx} {design} {cfg}: "
                                  f"{g.median_us.min():.1f} us (graph)"
                                  + (f", {seq.median_us.min():.1f} us a call (graph"
                                     f"{a.sequence})" if len(seq) else "") + ", correct "
                                  f"{bool(rows.correct.all())}  {time.time() - t0:.0f}s"
                                  + "".join(f"  {e}" for e in set(rows.error) if e), flush=True)


if __name__ == "__main__":
    main()
