"""The absorbed attention's kernel for Hopper (sm_90), in Gluon, beside the portable one in
``absorbed.py``: the same work (BM rows of absorbed queries, one per query and head, over
one split of the paged latent's tokens; a partial output and its LSE) shaped as FlashMLA
shapes it on this GPU.

Why another kernel: the portable one runs each key tile's loads, widening, softmax and two
dots in turn in one program of 8 warps at 255 registers, far from the path's floor
(docs/log/2026-12-04-absorbed-tiles.md). Here three partitions overlap them:

- the **loader** (4 warps) gathers each tile of BN keys (576 values a row: the latent, then
  the rope) into shared memory as bf16, two tiles in flight, and loads the query tile once.
  A bf16 cache goes by cp.async; an fp8 one through registers, as words of four values
  widened exactly by integer arithmetic, the next tile's words in flight;
- the **left** warpgroup (the default partition) scores the tile (S = Q K^T, K = 576 over nine
  64-column chunks), runs the online softmax, hands P and the rows' rescale factor to the
  right warpgroup through shared memory, and accumulates the output's first 256 columns
  (O += P V, V being the tile's first 512 columns) from P in its registers;
- the **right** warpgroup accumulates the other 256 columns from the same P.

A 64 x 512 float32 output is 256 registers a thread for one warpgroup, more than it has;
split in two it is 128 each, and the scores are computed once. Shared memory: the query tile
72 KB, two key tiles 144 KB, P 8 KB (225 KB of the 227 KB a program may take). The dots read
their operands there, and its bandwidth is shared with the loader's stores: so each
warpgroup's P V is one N = 256 wgmma a k-step (P read once, not once per 64 columns), and
the left warpgroup keeps P and the query tile's rope chunk in registers.

Restricted to what it was written for: a latent of 512 values and a rope of 64 (Kimi-K3,
DeepSeek-V3, GLM-5), bf16 queries, an fp8 (scaled) or bf16 cache; ``supports`` says so and
``plan_absorbed(kernel="hopper")`` refuses anything else by name.

This module keeps its annotations evaluated (it defines a bundle: ``compat.bundle``).
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..designs.hopper_ws.compat import (
    Buffer,
    Scalar,
    bundle,
    cp_async,
    partition_sync,
    replaced,
    smem,
)
from ..designs.hopper_ws.conversions import widen_words
from ..designs.hopper_ws.shared_buffers import publish_slot
from .attention import Blocking, keys_per_split
from .kernels import LN2
from .sm90 import device_reason, online_softmax, wgmma_acc_layout

BM = gl.constexpr(64)  # rows (query x head) a program: one warpgroup's wgmma rows
BN = gl.constexpr(64)  # keys a tile
CW = gl.constexpr(64)  # columns a chunk: one 128-byte swizzled bf16 row
STAGES = gl.constexpr(2)  # key tiles in shared memory
KV_C_DIM = 512  # the latent's width, the value's
PE_DIM = 64  # the rope's
NC = gl.constexpr((KV_C_DIM + PE_DIM) // 64)  # chunks of a query or key row: 8 latent, 1 rope
NL = gl.constexpr(KV_C_DIM // 64)  # latent chunks of a key row
NV = gl.constexpr(NL // 2)  # value chunks each warpgroup accumulates
VW = gl.constexpr(NV * 64)  # the output columns each warpgroup accumulates
Q_REGS = gl.constexpr(1)  # query chunks the left warpgroup holds in registers
# The tiles as the plan records them (rows, keys, warps launched, key tiles in flight).
BLOCKING = Blocking(BM.value, BN.value, 12, STAGES.value)
# The right warpgroup's and the loader's registers a thread. The loader holds a tile of fp8
# words (72) beside its addresses; given more, ptxas schedules it into spills under 3.9.
WORKER_REGS = (160, 104)
LOADER_THREADS = gl.constexpr(128)  # the loader's 4 warps


@bundle
class Split:
    """One program's work: rows [row0, row0 + BM) of the absorbed queries (``n_rows`` in
    all) over keys [k0, k1) of the paged latent, in ``n_tiles`` tiles of BN."""

    row0: gl.tensor
    n_rows: Scalar
    k0: gl.tensor
    k1: gl.tensor
    n_tiles: gl.tensor


@bundle
class Shared:
    """The partitions' shared memory and barriers: the query tile's chunks, the key tiles'
    (STAGES x NC chunks), P [BM, BN] bf16 and a row vector (each tile's rescale factor, at
    the end the softmax sums), and the hand-overs: the query tile loaded, a key tile loaded /
    freed by both warpgroups, P written / read, the sums written."""

    q: Buffer
    kv: Buffer
    p: Buffer
    rows: Buffer
    q_ready: Buffer
    kv_ready: Buffer
    kv_empty: Buffer
    p_ready: Buffer
    p_empty: Buffer
    sums_ready: Buffer


@bundle
class Source:
    """Where the loader reads: the absorbed queries [n_rows, KV_C + PE], the cache and its
    page table (block ids a token's page at ``block_ids``, strides of a block and a slot)."""

    q_ptr: gl.tensor
    cache_ptr: gl.tensor
    block_ids_ptr: gl.tensor
    stride_block: Scalar
    stride_slot: Scalar
    BLOCK_SIZE: gl.constexpr
    FP8: gl.constexpr  # an fp8 cache (else bf16)


@bundle
class Sink:
    """Where a split's partial output [n_rows, KV_C] float32 and its LSE [n_rows] go, and
    the factors: the scores' (sm_scale x log2(e), times k_scale for an fp8 cache) and the
    output's (k_scale, or 1)."""

    part_o_ptr: gl.tensor
    part_lse_ptr: gl.tensor
    qk_scale: gl.tensor
    o_scale: gl.tensor


@gluon.constexpr_function
def _row_layout(values_a_row, bits):
    """A [rows x values_a_row] tile of ``bits``-bit values loaded 16 bytes a thread, a warp
    on 512 bytes of consecutive rows."""
    per = 128 // bits
    across = values_a_row // per
    return gl.BlockedLayout([1, per], [32 // across, across], [4, 1], [1, 0])


@gluon.jit
def _chunk_ptrs(base, cols, c: gl.constexpr):
    """Chunk ``c``'s values of the rows at ``base`` (pointers to each row's first value), the
    chunk ``cols.shape[0]`` values wide."""
    return base[:, None] + c * cols.shape[0] + cols[None, :]


@gluon.jit
def _load_chunk(base, cols, mask, c: gl.constexpr):
    """Chunk ``c`` of the rows at ``base`` as stored (masked rows zero)."""
    return gl.load(_chunk_ptrs(base, cols, c), mask=mask[:, None], other=0)


@gluon.jit
def _store_widened(chunk, words, WIDEN: gl.constexpr):
    """[BN x CW / 4] int32 words of 4 e4m3 values into a bf16 chunk of shared memory, widened
    exactly by integer and bf16x2 arithmetic (``widen_words``): the conversion units' own
    e4m3 -> f16 -> bf16 route took two conversions a value and set the loader's pace.
    Without WIDEN (``PARTS="unwidened"``) each word is stored twice as loaded: the same
    stores, no arithmetic."""
    view = smem.reinterpret(chunk, gl.int32, [BN, CW // 2], gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=32, rank=2))
    if WIDEN:
        view.store(widen_words(words))
    else:
        view.store(gl.join(words, words).reshape([BN, CW // 2]))


@gluon.jit
def _block_ids(work, src, rows, j):
    """The block ids of key tile ``j``'s keys (0 past the split's end)."""
    keys = work.k0 + j * BN + rows
    return gl.load(src.block_ids_ptr + keys // src.BLOCK_SIZE, mask=keys < work.k1, other=0)


@gluon.jit
def _tile_rows(work, src, blk, rows, j):
    """Pointers to key tile ``j``'s rows in the cache (``blk``: their block ids) and which of
    them are keys of the split."""
    keys = work.k0 + j * BN + rows
    # Widened before the multiply: block id x stride passes 32 bits on large caches.
    base = src.cache_ptr + (blk.to(gl.int64) * src.stride_block
                            + (keys % src.BLOCK_SIZE).to(gl.int64) * src.stride_slot)
    return base, keys < work.k1


@gluon.jit
def _gather_bf16(work, sh, src, rows, cols):
    """A bf16 cache's tiles by cp.async: each thread's copies arrive on the stage's barrier
    as they land, so the loader goes on to the next tile at once."""
    blk = _block_ids(work, src, rows, 0)
    for j in range(work.n_tiles):
        s = j % STAGES
        base, kok = _tile_rows(work, src, blk, rows, j)
        # The next tile's block ids now, so their trip to memory overlaps this tile's rows'.
        blk = _block_ids(work, src, rows, j + 1)
        # A stage's first fill waits on the phase before the barrier's first: it passes.
        mbarrier.wait(sh.kv_empty.index(s), ((j // STAGES) & 1) ^ 1)
        for c in gl.static_range(NC):
            cp_async.load(_chunk(sh, s, c), _chunk_ptrs(base, cols, c),
                          mask=kok[:, None])
        async_copy.mbarrier_arrive(sh.kv_ready.index(s), increment_count=False)


@gluon.jit
def _fp8_words(work, src, blk, rows, j):
    """Pointers to key tile ``j``'s rows as int32 words (four fp8 values each)."""
    base, kok = _tile_rows(work, src, blk, rows, j)
    return base.to(gl.pointer_type(gl.int32), bitcast=True), kok


@gluon.jit
def _gather_fp8(work, sh, src, rows, cols, WIDEN: gl.constexpr):
    """An fp8 cache's tiles through registers, as words of four values widened into the
    stage: the registers hold one tile, and chunk c of the next tile is loaded as soon as
    chunk c of this one is widened, so a tile's loads are in flight while the tile before it
    is widened and while its stage is waited for (a tile loaded only after the one before
    it was stored left the load's latency bare)."""
    w, kok = _fp8_words(work, src, _block_ids(work, src, rows, 0), rows, 0)
    xs = ()
    for c in gl.static_range(NC):
        xs = xs + (_load_chunk(w, cols, kok, c),)
    blk = _block_ids(work, src, rows, 1)
    for j in range(work.n_tiles):
        s = j % STAGES
        # The next tile (past the split's end: all masked, no loads).
        w, kok = _fp8_words(work, src, blk, rows, j + 1)
        blk = _block_ids(work, src, rows, j + 2)
        mbarrier.wait(sh.kv_empty.index(s), ((j // STAGES) & 1) ^ 1)
        for c in gl.static_range(NC):
            _store_widened(_chunk(sh, s, c), xs[c], WIDEN)
            xs = replaced(xs, c, _load_chunk(w, cols, kok, c))
        publish_slot(sh.kv_ready.index(s))


@gluon.jit
def _loader(work, sh, src, WIDEN: gl.constexpr):
    """The query tile once, then each key tile of the split into the next free stage, as
    bf16: a bf16 cache as stored, an fp8 one widened exactly (unless not WIDEN)."""
    layout: gl.constexpr = _row_layout(CW, 16)
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, CW, layout=gl.SliceLayout(0, layout))
    WIDTH: gl.constexpr = NC * CW
    r = work.row0 + rows
    qbase = src.q_ptr + r.to(gl.int64) * WIDTH
    rmask = r < work.n_rows
    for c in gl.static_range(NC):
        sh.q.index(c).store(_load_chunk(qbase, cols, rmask, c))
    publish_slot(sh.q_ready)
    if src.FP8:
        # Key rows as int32 words of four values, 16 bytes a thread.
        wl: gl.constexpr = _row_layout(CW // 4, 32)
        _gather_fp8(work, sh, src, gl.arange(0, BN, layout=gl.SliceLayout(1, wl)),
                    gl.arange(0, CW // 4, layout=gl.SliceLayout(0, wl)), WIDEN)
    else:
        _gather_bf16(work, sh, src, gl.arange(0, BN, layout=gl.SliceLayout(1, layout)), cols)


@gluon.jit
def _chunk(sh, s, c: gl.constexpr):
    """Chunk ``c`` of key stage ``s``. The stages' latent chunks come first, each stage's NL
    in a row, then the stages' rope chunks: a stage's values lie whole in shared memory."""
    if c < NL:
        return sh.kv.index(s * NL + c)
    else:
        return sh.kv.index(STAGES * NL + s)


@gluon.jit
def _values(sh, s, V0: gl.constexpr):
    """Value chunks [V0, V0 + NV) of stage ``s`` as one [BN, VW] operand. A swizzled tile
    wider than its 128-byte swizzle lies in shared memory as its 64-column blocks one after
    the other, as a stage's chunks do; one N = VW wgmma a k-step reads P once, where NV of
    N = 64 read it NV times (shared memory's bandwidth is what the dots share with the
    loader)."""
    layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                rank=2)
    halves = smem.reinterpret(sh.kv, gl.bfloat16, [STAGES * 2, BN, VW], layout)
    return halves.index(s * 2 + V0 // NV)


@gluon.jit
def _store_out(sink, work, o, l_i, V0: gl.constexpr, num_warps: gl.constexpr):
    """Value columns [V0 x CW, V0 x CW + VW) of the split's output, divided by the softmax
    sums (0 where the split saw no key) and times the output's factor."""
    acc_layout: gl.constexpr = wgmma_acc_layout(num_warps, VW)
    rows = work.row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, VW, layout=gl.SliceLayout(0, acc_layout))
    inv = sink.o_scale / gl.where(l_i > 0, l_i, 1.0)
    base = sink.part_o_ptr + rows.to(gl.int64) * (2 * VW) + V0 * CW
    gl.store(base[:, None] + cols[None, :], o * inv[:, None],
             mask=(rows < work.n_rows)[:, None])


@gluon.jit
def _left(work, sh, sink, num_warps: gl.constexpr):
    """Scores, online softmax, P and the rescale factor handed over, the first half of the
    output; at the end the sums handed over, and the LSE."""
    acc_layout: gl.constexpr = wgmma_acc_layout(num_warps, BN)
    row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    o_layout: gl.constexpr = wgmma_acc_layout(num_warps, VW)
    # P as the A operand in registers (two consecutive keys a register): this warpgroup's
    # P V reads no P from shared memory.
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    m_i = gl.full([BM], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BM], gl.float32, row_layout)
    o = gl.zeros([BM, VW], gl.float32, o_layout)
    key_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    mbarrier.wait(sh.q_ready, 0)
    # The query tile's last Q_REGS chunks (the rope's) as A operands in registers for the
    # whole split: the scores' wgmma read them from no shared memory (a second chunk spills
    # under triton 3.9).
    q_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout,
                                                 k_width=2)
    q_regs = ()
    for c in gl.static_range(NC - Q_REGS, NC):
        q_regs = q_regs + (sh.q.index(c).load(q_layout),)
    for j in range(work.n_tiles):
        s = j % STAGES
        mbarrier.wait(sh.kv_ready.index(s), (j // STAGES) & 1)
        fence_async_shared()  # a bf16 tile's cp.async writes, for wgmma's reads
        sc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for c in gl.static_range(NC):
            if c < NC - Q_REGS:
                sc = warpgroup_mma(sh.q.index(c), _chunk(sh, s, c).permute((1, 0)), sc,
                                   is_async=True)
            else:
                sc = warpgroup_mma(q_regs[c - (NC - Q_REGS)],
                                   _chunk(sh, s, c).permute((1, 0)), sc, is_async=True)
        sc = warpgroup_mma_wait(num_outstanding=0, deps=(sc,))
        p, alpha, m_i, l_i = online_softmax(sc, key_cols, j, work.k0, work.k1,
                                            sink.qk_scale, m_i, l_i, BN)
        p = p.to(gl.bfloat16)
        # P and alpha's buffers are free once the right warpgroup has used the last ones.
        mbarrier.wait(sh.p_empty, (j & 1) ^ 1)
        sh.p.store(p)
        sh.rows.store(alpha)
        publish_slot(sh.p_ready)
        pa = gl.convert_layout(p, p_layout)
        alpha = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
        o = warpgroup_mma(pa, _values(sh, s, 0), o * alpha[:, None], is_async=True)
        o, pa = warpgroup_mma_wait(num_outstanding=0, deps=(o, pa))
        mbarrier.arrive(sh.kv_empty.index(s), count=1)
    # The sums, once the right warpgroup has read the last factor.
    mbarrier.wait(sh.p_empty, (work.n_tiles & 1) ^ 1)
    sh.rows.store(l_i)
    partition_sync()
    mbarrier.arrive(sh.sums_ready, count=1)
    _store_out(sink, work, o, gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 0,
               num_warps)
    rows = work.row0 + gl.arange(0, BM, layout=row_layout)
    safe = gl.where(l_i > 0, l_i, 1.0)
    gl.store(sink.part_lse_ptr + rows,
             gl.where(l_i > 0, (m_i + gl.log2(safe)) * LN2, float("-inf")),
             mask=rows < work.n_rows)


@gluon.jit
def _right(work, sh, sink, num_warps: gl.constexpr):
    """The second half of the output, from the left warpgroup's P and factors."""
    acc_layout: gl.constexpr = wgmma_acc_layout(num_warps, VW)
    row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    o = gl.zeros([BM, VW], gl.float32, acc_layout)
    for j in range(work.n_tiles):
        s = j % STAGES
        mbarrier.wait(sh.kv_ready.index(s), (j // STAGES) & 1)
        mbarrier.wait(sh.p_ready, j & 1)
        fence_async_shared()
        alpha = sh.rows.load(row_layout)
        o = warpgroup_mma(sh.p, _values(sh, s, NV), o * alpha[:, None], is_async=True)
        o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))
        mbarrier.arrive(sh.p_empty, count=1)
        mbarrier.arrive(sh.kv_empty.index(s), count=1)
    mbarrier.wait(sh.sums_ready, 0)
    l_i = sh.rows.load(row_layout)
    _store_out(sink, work, o, l_i, NV, num_warps)


# What a launch runs (``PARTS``): the kernel's work, one side of it with a partner that only
# keeps the hand-overs going, or the kernel with an fp8 tile stored as loaded ("unwidened":
# its values wrong, its loads, stores and dots the kernel's), which
# lab.diagnostics.absorbed_bounds times to say what bounds the kernel.
PARTS = ("all", "dots", "gather", "unwidened")


@gluon.jit
def _stages_once(work, sh, src):
    """The loader's stand-in for ``PARTS="dots"``: the query tile and both key stages written
    once (zeros), then each stage handed back as soon as both warpgroups free it, so they run
    every tile's dots and softmax with no gather."""
    zero = gl.zeros([BM, CW], gl.bfloat16, _row_layout(CW, 16))
    for c in gl.static_range(NC):
        sh.q.index(c).store(zero)
    for c in gl.static_range(STAGES * NC):
        sh.kv.index(c).store(zero)
    publish_slot(sh.q_ready)
    for j in range(work.n_tiles):
        s = j % STAGES
        mbarrier.wait(sh.kv_empty.index(s), ((j // STAGES) & 1) ^ 1)
        # As many arrivals as the loader's own (one, or one a thread by cp.async).
        fence_async_shared()
        partition_sync()
        mbarrier.arrive(sh.kv_ready.index(s), count=1 if src.FP8 else LOADER_THREADS)


@gluon.jit
def _free_at_once(work, sh, sink, num_warps: gl.constexpr):
    """A warpgroup's stand-in for ``PARTS="gather"``: each key tile's stage freed as soon as
    it is loaded, so the loader gathers (and widens) every tile with no dots waiting."""
    for j in range(work.n_tiles):
        s = j % STAGES
        mbarrier.wait(sh.kv_ready.index(s), (j // STAGES) & 1)
        mbarrier.arrive(sh.kv_empty.index(s), count=1)


@gluon.jit
def _warpgroup_side(work, sh, sink, num_warps: gl.constexpr, PARTS: gl.constexpr,
                    RIGHT: gl.constexpr):
    """The left (or, with RIGHT, the right) warpgroup, or its stand-in for "gather"."""
    if PARTS == "gather":
        _free_at_once(work, sh, sink, num_warps)
    elif RIGHT:
        _right(work, sh, sink, num_warps)
    else:
        _left(work, sh, sink, num_warps)


@gluon.jit
def _loader_side(work, sh, src, PARTS: gl.constexpr):
    """The loader, or its stand-in for "dots"."""
    if PARTS == "dots":
        _stages_once(work, sh, src)
    else:
        _loader(work, sh, src, PARTS != "unwidened")


@gluon.jit
def absorbed_hopper_kernel(
    q_ptr, cache_ptr, k_scale_ptr, block_ids_ptr, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, qk_scale, stride_block, stride_slot, stride_part_o,
    stride_part_lse, BLOCK_SIZE: gl.constexpr, HAS_K_SCALE: gl.constexpr,
    WG1_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, num_warps: gl.constexpr,
    PARTS: gl.constexpr,
):
    """Grid (row tile, split), as ``absorbed.latent_attention_kernel``'s; PARTS, one of
    ``PARTS``: the whole kernel ("all"), one side of it, or it unwidened."""
    tile = gl.program_id(0)
    split = gl.program_id(1)
    k0 = split * keys_per_split
    k1 = gl.minimum(k0 + keys_per_split, n_keys)
    n_tiles = gl.cdiv(gl.maximum(k1 - k0, 0), BN)
    if HAS_K_SCALE:
        k_scale = gl.load(k_scale_ptr)
        qk = qk_scale * k_scale
        o_scale = k_scale
    else:
        qk = qk_scale + 0.0
        o_scale = qk * 0.0 + 1.0
    work = Split(tile * BM, n_rows, k0, k1, n_tiles)

    chunk: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                               rank=2)
    bar: gl.constexpr = mbarrier.MBarrierLayout()
    q = gl.allocate_shared_memory(gl.bfloat16, [NC, BM, CW], chunk)
    kv = gl.allocate_shared_memory(gl.bfloat16, [STAGES * NC, BN, CW], chunk)
    p = gl.allocate_shared_memory(gl.bfloat16, [BM, BN], chunk)
    rows = gl.allocate_shared_memory(gl.float32, [BM],
                                     gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    q_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
    kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    p_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
    p_empty = gl.allocate_shared_memory(gl.int64, [1], bar)
    sums_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(p_ready, count=1)
    mbarrier.init(p_empty, count=1)
    mbarrier.init(sums_ready, count=1)
    for s in gl.static_range(STAGES):
        # Loaded through registers (fp8): one arrival; by cp.async (bf16): each loader
        # thread's, as its copies land.
        mbarrier.init(kv_ready.index(s), count=1 if HAS_K_SCALE else LOADER_THREADS)
        mbarrier.init(kv_empty.index(s), count=2)  # freed by both warpgroups
    sh = Shared(q, kv, p, rows, q_ready, kv_ready, kv_empty, p_ready, p_empty, sums_ready)
    src = Source(q_ptr, cache_ptr, block_ids_ptr, stride_block, stride_slot, BLOCK_SIZE,
                 HAS_K_SCALE)
    sink = Sink(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                qk, o_scale)
    gl.warp_specialize([
        (_warpgroup_side, (work, sh, sink, num_warps, PARTS, False)),
        (_warpgroup_side, (work, sh, sink, num_warps, PARTS, True)),
        (_loader_side, (work, sh, src, PARTS)),
    ], [num_warps, 4], [WG1_REGS, LOADER_REGS])


def supports(q: torch.Tensor, k_buffer: torch.Tensor) -> str | None:
    """Why this kernel cannot run these tensors (None: it can): an sm_90 CUDA device, bf16
    queries, a latent of 512 values and a rope of 64."""
    why = device_reason(q.device)
    if why is not None:
        return why
    if q.dtype != torch.bfloat16:
        return f"bf16 queries, got {q.dtype}"
    width = k_buffer.shape[-1]
    if width != KV_C_DIM + PE_DIM:
        return f"cache rows of {KV_C_DIM} + {PE_DIM} values, got {width}"
    # Rows copied 16 bytes at a time: each row's values contiguous, its start 16-byte aligned.
    if k_buffer.stride(2) != 1 or any(st * k_buffer.element_size() % 16
                                      for st in k_buffer.stride()[:2]):
        return f"cache rows 16-byte aligned with contiguous values, got strides {k_buffer.stride()}"
    return None


def launch(q_absorbed: torch.Tensor, k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
           block_ids: torch.Tensor, part_o: torch.Tensor, part_lse: torch.Tensor,
           context_len: int, splits: int, qk_scale: float, parts: str = "all") -> None:
    """The kernel over ``splits`` splits of the keys (each a whole number of key tiles), its
    partial outputs into ``part_o`` [splits, n, H, KV_C] and ``part_lse`` [splits, n, H].
    ``parts`` other than "all" (``PARTS``) is for lab.diagnostics.absorbed_bounds's
    timings: "dots" writes the partials of zero-filled tiles, "gather" writes nothing,
    "unwidened" (an fp8 cache: its raw bytes as the tiles' values; a bf16 one: "all") wrong
    partials."""
    if parts not in PARTS:
        raise ValueError(f"parts: expected one of {PARTS}, got {parts!r}")
    n, h, width = q_absorbed.shape
    rows = n * h
    per = keys_per_split(context_len, splits, BN.value)
    fp8 = k_scale is not None
    absorbed_hopper_kernel[(triton.cdiv(rows, BM.value), splits)](
        q_absorbed, k_buffer, k_scale if fp8 else q_absorbed, block_ids, part_o, part_lse,
        rows, context_len, per, qk_scale, k_buffer.stride(0), k_buffer.stride(1),
        part_o[0].numel(), part_lse[0].numel(), BLOCK_SIZE=k_buffer.shape[1],
        HAS_K_SCALE=fp8, WG1_REGS=WORKER_REGS[0], LOADER_REGS=WORKER_REGS[1], num_warps=4,
        PARTS=parts, maxnreg=168)
