"""Host cost of a launch against the kernel's own time, per design, on the live GPU.

do_bench times each call between two events on the stream; when the host takes longer to
enqueue a launch than the GPU takes to run it, the GPU idles in between and the host cost
is what gets measured. This prints, per design and context: host_us (mean enqueue time of
one call), flushed_us (do_bench, L2 flushed: what run_points reports) and graph_us (the
same call replayed from a CUDA graph: kernel time without the host).
Usage: python scripts/launch_overhead.py [variant ...]"""
import sys
import time

import torch

from mla_kernels import bench
from mla_kernels.api import gather_kv_b_proj
from mla_kernels.designs import LaunchConfig
from mla_kernels.inputs import build_inputs

# "name" or "name:stages" (hopper_ws's ring depth)
variants = sys.argv[1:] or ["tiled_tma", "hopper_ws:3", "hopper_ws:4"]
for ctx in (4096, 32000, 109440):
    inp = build_inputs("kimi-k3-tp8", [ctx], device="cuda", spare_indices=0, spare_rows=0,
                       spare_blocks=0)
    args = inp.args()
    for spec in variants:
        v, _, stages = spec.partition(":")
        cfg = LaunchConfig(stages=int(stages)) if stages else None

        def fn(v=v, args=args, cfg=cfg):
            gather_kv_b_proj(*args, variant=v, config=cfg)
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        host = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        flushed = bench._bench(fn)
        graph = bench._bench(bench._graphed(fn))
        print(f"{spec:12s} ctx {ctx:6d}: host {host:7.1f} us  flushed {flushed:7.1f} us  "
              f"graph {graph:7.1f} us", flush=True)
