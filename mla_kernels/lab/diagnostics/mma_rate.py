"""The tensor cores' own rate at this operation's tile shape: a kernel doing only the matrix
work of ``hopper_ws``'s items, with no loads, no gather and no epilogue.

Each persistent program (one per SM) keeps one latent tile's K chunks (A, ``[BM, BK]`` each)
and one weight chunk (B, ``[BN, BK]``) in shared memory and runs ``items`` items of
``BM x BN x K`` async wgmma chains on them, waiting for each item's chain as ``hopper_ws``
must before its epilogue. Its FLOPs over its time is the rate a design of this tile shape
could reach with every other cost hidden: a matrix floor that cuBLAS's rate (measured at
another shape, with its own launch amortised) is not.

    python -m mla_kernels.lab.diagnostics.mma_rate OUT.csv [--rep-ms MS]   # on an sm_90 GPU
    python -m mla_kernels.lab.diagnostics.mma_rate --check     # compile for sm_90 on a machine with none
"""

from __future__ import annotations

import argparse
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

BM = BN = 128  # hopper_ws's tile rows and item columns
KV_C = 512  # the latent's K (Kimi-K3, DeepSeek-V3)
# (dot dtype, warps): one warpgroup with the whole tile, or two with half the rows each, as
# hopper_ws's one and two MMA groups.
CASES = (("fp8", 4), ("fp8", 8), ("bf16", 4), ("bf16", 8))


@gluon.jit
def mma_only_kernel(a_ptr, b_ptr, out_ptr, items, BM: gl.constexpr, BN: gl.constexpr,
                    BK: gl.constexpr, NK: gl.constexpr, num_warps: gl.constexpr):
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    bits: gl.constexpr = dtype.primitive_bitwidth
    smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=bits,
                                              rank=2)
    load: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [num_warps, 1], [1, 0])
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, load))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, load))
    offs = rows[:, None] * BK + cols[None, :]
    a_s = gl.allocate_shared_memory(dtype, [NK, BM, BK], smem)
    b_s = gl.allocate_shared_memory(dtype, [1, BN, BK], smem)
    for kb in gl.static_range(NK):
        a_s.index(kb).store(gl.load(a_ptr + kb * BM * BK + offs))
    b_s.index(0).store(gl.load(b_ptr + offs))
    fence_async_shared()  # ordinary stores, read next by the tensor cores
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 256 // bits])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for _ in range(items):
        for kb in gl.static_range(NK):
            acc = warpgroup_mma(a_s.index(kb), b_s.index(0).permute((1, 0)), acc,
                                is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    out_rows = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    out_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    # One tile a program: what keeps the chain from being dropped.
    gl.store(out_ptr + gl.program_id(0) * BM * BN + out_rows[:, None] * BN + out_cols[None, :],
             acc)


def _block_k(dot: str) -> int:
    return 128 if dot == "fp8" else 64  # 128 bytes of K a row: one swizzle row


def _operands(dot: str, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    bk = _block_k(dot)
    nk = KV_C // bk
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(nk * BM * bk, generator=g) * 0.5
    b = torch.randn(BN * bk, generator=g) * 0.5
    dt = torch.float8_e4m3fn if dot == "fp8" else torch.bfloat16
    return a.to(dt).to(device), b.to(dt).to(device), bk


def prepared(dot: str, warps: int, items: int, programs: int, device="cuda"):
    """The launch of one case, its operands and output allocated once: a call launches and
    returns the output (one tile a program)."""
    a, b, bk = _operands(dot, device)
    out = torch.empty(programs * BM * BN, dtype=torch.float32, device=device)

    def run() -> torch.Tensor:
        mma_only_kernel[(programs,)](a, b, out, items, BM, BN, bk, KV_C // bk, num_warps=warps)
        return out
    return run


def launch(dot: str, warps: int, items: int, programs: int, device="cuda") -> torch.Tensor:
    return prepared(dot, warps, items, programs, device)()


def flops(items: int, programs: int) -> int:
    return 2 * BM * BN * KV_C * items * programs


def measure(items: int = 2000, rep_ms: int = 2000) -> list[dict]:
    """One row per case: its median time (``triton.testing.do_bench`` over ``rep_ms``), rate
    and the median SM clock during it (``lab.clock``)."""
    import triton

    from ..clock import ClockLog
    from ..provenance import provenance

    programs = torch.cuda.get_device_properties(0).multi_processor_count
    prov, rows = provenance(), []
    with ClockLog() as log:
        for dot, warps in CASES:
            run = prepared(dot, warps, items, programs)
            run()
            torch.cuda.synchronize()
            # Warmed up outside the window: the clock settles under the MMA load first.
            triton.testing.do_bench(run, warmup=0, rep=min(200, rep_ms))
            with log.window() as clock:
                us = triton.testing.do_bench(run, warmup=0, rep=rep_ms,
                                             return_mode="median") * 1e3
            rows.append({**prov, "dot_dtype": dot, "num_warps": warps, "programs": programs,
                         "items": items, "tile": f"{BM}x{BN}x{KV_C}", "median_us": us,
                         "tflops": flops(items, programs) / (us * 1e-6) / 1e12,
                         "sm_clock_mhz": clock.mhz})
    return rows


def check() -> list[dict]:
    """Compile every case for sm_90 with no GPU: shared memory, warps, wgmma count."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget

    out = []
    for dot, warps in CASES:
        bk = _block_k(dot)
        ptr = "*fp8e4nv" if dot == "fp8" else "*bf16"
        src = gluon._runtime.GluonASTSource(
            mma_only_kernel, {"a_ptr": ptr, "b_ptr": ptr, "out_ptr": "*fp32", "items": "i32",
                              "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
                              "NK": "constexpr", "num_warps": "constexpr"},
            {"BM": BM, "BN": BN, "BK": bk, "NK": KV_C // bk, "num_warps": warps})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        out.append({"dot_dtype": dot, "num_warps": warps, "shared_bytes": k.metadata.shared,
                    "wgmma": len(re.findall(r"wgmma\.mma_async", k.asm["ptx"]))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.lab.diagnostics.mma_rate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="CSV of the rows (measure)")
    ap.add_argument("--check", action="store_true", help="compile for sm_90 with no GPU")
    ap.add_argument("--items", type=int, default=2000, help="items a program runs")
    ap.add_argument("--rep-ms", type=int, default=2000, help="milliseconds timed per case")
    a = ap.parse_args(argv)
    if a.check:
        for r in check():
            print(r)
        return 0
    if a.out is None:
        ap.error("OUT.csv: expected a path for the rows, got none")
    import pandas as pd

    df = pd.DataFrame(measure(a.items, a.rep_ms))
    df.to_csv(a.out, index=False)
    print(df[["dot_dtype", "num_warps", "median_us", "tflops", "sm_clock_mhz"]].to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
