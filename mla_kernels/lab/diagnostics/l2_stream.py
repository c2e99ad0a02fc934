"""The weight's stream from L2 into shared memory, alone: one persistent program an SM, each
streaming a run of weight items (128 rows x kv_c) by TMA, K chunk by K chunk, into a ring
of 16 KB slots as `hopper_ws`'s weight loader does (`WeightRing`), its reader waiting for
each chunk and freeing the slot at once: no dot, no latent, no stores. Delivered TB/s by
ring depth, for fp8 chunks ([128 x 128]) and bf16 ones ([128 x 64]) of a Kimi-K3 TP8-sized
weight (1.5 or 3 MB, held in L2), each program streaming as many items as at 32000 tokens.

Why: at 32000 tokens every `hopper_ws` config whose items stream 128 KB of weight (a bf16
weight; MXFP4's split route, at rings 4 and 6) took 172-182 us, 4.3-4.6 TB/s of weight, and
fp8 per row with FP8 outputs 4.49 over half the bytes (docs/log/2026-12-05-split-route-fp8-outputs.md).
If this stream alone tops out there at every ring depth, it bounds an item of 128 tokens;
if it runs well past it, something beside the stream sets the pace.

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.l2_stream [--out FOLDER]
(rows to FOLDER/l2_stream.csv; FOLDER defaults to reports/diag/, which git ignores). With
no GPU: ``--check`` compiles every kernel for sm_90 and prints its resources.
"""
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from ...core.shapes import get_shape
from ...designs.hopper_ws.plan import _smem_layout
from ...designs.hopper_ws.shared_buffers import WeightRing
from .command_line import check_or_measure, write_rows

ROWS = gl.constexpr(128)  # an item's weight rows, hopper_ws's BN
SLOT_BYTES = 16384  # a ring slot: 128 rows x 128 bytes
DEPTHS = (2, 3, 4, 5, 6)  # beside the pad, six slots fill what an SM gives
PAD_WORDS = gl.constexpr(32768)  # 128 KB held beside the ring: one program an SM
PROGRAMS = 132  # the H200's SMs
MODEL = "kimi-k3-tp8"
TOKENS = 32000  # each program streams the items it runs at this many tokens


@gluon.jit
def _reader(ring, total):
    """Each chunk waited for, its slot freed at once."""
    for c in range(total):
        ring.wait_full(c)
        ring.release(c)


@gluon.jit
def _loader(ring, w_desc, n_items, items, CHUNKS: gl.constexpr):
    """A contiguous run of ``items`` weight items, K chunk by K chunk, into the ring."""
    WK: gl.constexpr = w_desc.block_type.shape[1]
    first = gl.program_id(0) * items
    c = 0
    for it in range(items):
        row = ((first + it) % n_items) * ROWS
        for kb in gl.static_range(CHUNKS):
            s = ring.wait_free(c)
            ring.fill(w_desc, s, row, kb * WK)
            c += 1


@gluon.jit
def stream_kernel(w_desc, sink_ptr, n_items, items, KV_C: gl.constexpr,
                  STAGES: gl.constexpr, num_warps: gl.constexpr):
    WK: gl.constexpr = w_desc.block_type.shape[1]
    CHUNKS: gl.constexpr = KV_C // WK
    slots = gl.allocate_shared_memory(w_desc.dtype, [STAGES, ROWS, WK], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    info = gl.allocate_shared_memory(gl.int32, [1, ROWS], flat)  # the ring's MXFP4 field, unused
    # Held so that no second program fits beside this one (stored, then read: kept).
    pad = gl.allocate_shared_memory(gl.int32, [PAD_WORDS], flat)
    one: gl.constexpr = gl.BlockedLayout([4], [32], [num_warps], [0])
    pad.slice(0, 4 * 32 * num_warps).store(gl.zeros([4 * 32 * num_warps], gl.int32, one))
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    held = gl.max(pad.slice(0, 4 * 32 * num_warps).load(one), axis=0)
    if held < 0:  # never: the pad's read stays, nothing is written
        gl.store(sink_ptr, held)
    ring = WeightRing(slots, ready, empty, info, STAGES, False)
    gl.warp_specialize([
        (_reader, (ring, items * CHUNKS)),
        (_loader, (ring, w_desc, n_items, items, CHUNKS)),
    ], [1], [24])


def _descriptor(w: torch.Tensor):
    """A TMA descriptor of ``w``'s ring chunks, in the layout hopper_ws's weight ring takes."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    wk = SLOT_BYTES // ROWS.value // w.element_size()
    return TensorDescriptor(w, list(w.shape), list(w.stride()), [ROWS.value, wk],
                            _smem_layout(ROWS.value, wk, w.dtype))


def launches(device: str):
    """(dtype, ring depth, items a program, bytes streamed, the launch) of every case."""
    s = get_shape(MODEL)
    n_rows, kv_c = s.weight_rows, s.kv_c_dim
    n_items = n_rows // ROWS.value
    # The items a program runs at TOKENS tokens, every tile's items shared out evenly.
    items = -(-(-(-TOKENS // ROWS.value) * n_items) // PROGRAMS)
    sink = torch.zeros(1, dtype=torch.int32, device=device)
    out = []
    for dtype in (torch.float8_e4m3fn, torch.bfloat16):
        w = torch.randn(n_rows, kv_c, device=device).to(dtype)
        desc = _descriptor(w)
        nbytes = PROGRAMS * items * n_rows * kv_c * w.element_size() // n_items
        for depth in DEPTHS:
            out.append((dtype, depth, items, nbytes, lambda desc=desc, depth=depth, w=w:
                        stream_kernel[(PROGRAMS,)](desc, sink, n_items, items, KV_C=kv_c,
                                                   STAGES=depth, num_warps=4)))
    return out, sink


def check() -> None:
    from ..compile_check import HOPPER, compile_calls, kernel_report

    calls, _ = launches("cpu")
    for dtype, depth, _, _, fn in calls:
        (k,) = compile_calls(fn, HOPPER, 90)
        r = kernel_report(k)
        print(f"{str(dtype):22s} ring {depth}  shared {r['shared_bytes']:7d}  "
              f"warps {r['num_warps']:2d}  "
              f"tma loads {k.asm['ptx'].count('cp.async.bulk.tensor')}")


def main(out: Path) -> None:
    import pandas as pd

    from ..provenance import provenance
    from ..timing import graphed, measure

    calls, sink = launches("cuda")
    rows = []
    for rnd in range(2):  # twice in turn: the spread between rounds is the noise
        for dtype, depth, items, nbytes, fn in calls:
            t = measure(graphed(fn))
            rows.append(dict(provenance(), model=MODEL, tokens=TOKENS, programs=PROGRAMS,
                             chunk_dtype=str(dtype).removeprefix("torch."), ring_depth=depth,
                             items_per_program=items, bytes=nbytes, round=rnd,
                             timing="graph", median_us=t.median_us, q1_us=t.q1_us,
                             q3_us=t.q3_us, reps=t.reps,
                             tbps=nbytes / t.median_us / 1e6))
    assert int(sink.item()) == 0
    df = pd.DataFrame(rows)
    print(write_rows(df, out, "l2_stream.csv"))
    print(df.pivot_table(index=["chunk_dtype", "ring_depth"], columns="round",
                         values="tbps", sort=False).round(2).to_string())


if __name__ == "__main__":
    check_or_measure(__doc__, "l2_stream.csv", check, lambda a: main(a.out),
                     "compile each kernel for sm_90 on the CPU and print its resources")
