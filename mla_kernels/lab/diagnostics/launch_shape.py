"""What a launch of `hopper_ws`'s shape costs before any of its work: kernels that do nothing
but take that shape one part at a time, timed as the designs' rows are (median, L2 flushed:
one launch replayed from a CUDA graph, 8 back-to-back launches in one graph per launch, and a
plain call).

The parts, each added to the one before (132 programs):
- `triton empty`: host_cost.empty_kernel (9 tensors, 11 ints), the anchor the notes quote;
- `gluon empty`: a Gluon kernel of 4 warps that does nothing;
- `+ one load`: it loads cs[batch] (a dependent trip to memory, as every design's first);
- `+ smem`: it also holds as much shared memory as hopper_ws does over an fp8 cache
  (221 KB; the launch reserves it, so the SM's carve-out is the largest);
- `+ partitions`: the same work in gl.warp_specialize partitions of 4, 4 and 1 warps with
  hopper_ws's register budgets (12 warps launched, as hopper_ws's default).

A switch build of hopper_ws with every partition's loop empty (launch, barrier init, one
load of cs) took 6.2 us at 4096 tokens against 3.97 for the anchor, measured on 2026-11-30
(docs/log/2026-11-30-fp8-row-rounds-a-b.md); these kernels say which part of that 2.2 us each
costs (docs/log/2026-12-01-launch-shape-graph8.md).

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.launch_shape [--out FOLDER]
(rows to FOLDER/launch_shape.csv; FOLDER defaults to reports/diag/, which git ignores).
On a machine with no GPU:  python3 -m mla_kernels.lab.diagnostics.launch_shape --check  (compiles each for
sm_90 and prints its shared memory and warps; nothing is timed or written)
"""
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .command_line import check_or_measure, write_rows

CHUNK = gl.constexpr(1024)  # int32 words stored into each buffer, which keeps it


@gluon.jit
def _idle(cs_ptr, out_ptr, batch, LOAD: gl.constexpr):
    if LOAD:
        total = gl.load(cs_ptr + batch)
        if total < 0:  # never (cs is a prefix sum): the load stays, nothing is written
            gl.store(out_ptr, total)


@gluon.jit
def shape_kernel(cs_ptr, out_ptr, batch, LOAD: gl.constexpr, SMEM: gl.constexpr,
                 PARTS: gl.constexpr, num_warps: gl.constexpr):
    if SMEM:
        # 221,184 bytes (hopper_ws holds 222,376 over an fp8 cache, resources.csv) as buffers
        # of power-of-two shapes, as Gluon asks, all live at once (each stored, then read
        # after the others were stored), so the launch reserves all of them.
        one: gl.constexpr = gl.BlockedLayout([8], [32], [num_warps], [0])
        flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        zero = gl.zeros([CHUNK], gl.int32, one)
        a = gl.allocate_shared_memory(gl.int32, [32768], flat)
        b = gl.allocate_shared_memory(gl.int32, [16384], flat)
        c = gl.allocate_shared_memory(gl.int32, [4096], flat)
        d = gl.allocate_shared_memory(gl.int32, [2048], flat)
        a.slice(0, CHUNK).store(zero)
        b.slice(0, CHUNK).store(zero)
        c.slice(0, CHUNK).store(zero)
        d.slice(0, CHUNK).store(zero)
        s = (a.slice(0, CHUNK).load(one) + b.slice(0, CHUNK).load(one)
             + c.slice(0, CHUNK).load(one) + d.slice(0, CHUNK).load(one))
        if gl.max(s, axis=0) < 0:  # never: the reads stay, nothing is written
            gl.store(out_ptr, gl.max(s, axis=0))
    if PARTS:
        gl.warp_specialize([
            (_idle, (cs_ptr, out_ptr, batch, LOAD)),
            (_idle, (cs_ptr, out_ptr, batch, LOAD)),
            (_idle, (cs_ptr, out_ptr, batch, LOAD)),
        ], [4, 1], [96, 24])
    else:
        _idle(cs_ptr, out_ptr, batch, LOAD)


SHAPES = {  # name: (LOAD, SMEM, PARTS)
    "gluon empty": (False, False, False),
    "+ one load": (True, False, False),
    "+ smem": (True, True, False),
    "+ partitions": (True, True, True),
    "partitions, no smem": (True, False, True),
}


def check() -> None:
    from triton import compile as compile_kernel
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = {"cs_ptr": "*i32", "out_ptr": "*i32", "batch": "i32", "LOAD": "constexpr",
           "SMEM": "constexpr", "PARTS": "constexpr", "num_warps": "constexpr"}
    for name, (load, smem, parts) in SHAPES.items():
        consts = {"LOAD": load, "SMEM": smem, "PARTS": parts, "num_warps": 4}
        k = compile_kernel(GluonASTSource(shape_kernel, sig, consts, {}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        ptx = k.asm["ptx"]
        print(f"{name:22s} shared {k.metadata.shared:7d}  warps {k.metadata.num_warps:2d}  "
              f"ld.global {ptx.count('ld.global')}")


def main(out: Path) -> None:
    import pandas as pd

    from .. import host_cost
    from ..provenance import provenance
    from ..timing import graphed, median_us

    cs = torch.tensor([0, 4096], dtype=torch.int32, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    calls = {"triton empty": host_cost.empty_launch()}
    for name, (load, smem, parts) in SHAPES.items():
        calls[name] = (lambda load=load, smem=smem, parts=parts: shape_kernel[(132,)](
            cs, sink, 1, LOAD=load, SMEM=smem, PARTS=parts, num_warps=4))
    rows = []
    for rnd in range(2):  # twice in turn: the spread between rounds is the noise
        for name, fn in calls.items():
            eight = graphed(lambda fn=fn: [fn() for _ in range(8)])
            for timing, f, n in (("graph", graphed(fn), 1), ("graph8", eight, 8),
                                 ("flushed", fn, 1)):
                rows.append(dict(provenance(), what=name, round=rnd, timing=timing,
                                 median_us=median_us(f) / n))
    assert int(sink.item()) == 0
    df = pd.DataFrame(rows)
    write_rows(df, out, "launch_shape.csv")
    print(df.pivot_table(index="what", columns=["timing", "round"], values="median_us",
                         sort=False).round(2).to_string())


if __name__ == "__main__":
    check_or_measure(__doc__, "launch_shape.csv", check, lambda a: main(a.out),
                     "compile each kernel for sm_90 on the CPU and print its resources")
