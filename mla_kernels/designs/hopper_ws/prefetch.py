"""Prefetches into L2 before the grid dependency wait: the one kind of memory access an
overlapped launch makes before the kernel before it has finished (docs/contract.md).

At short contexts some programs take no items (``schedule.short_split``). They are the
lowest program ids, so in a sequence of overlapped launches they start first, on the SMs the
kernel before leaves free while it still runs. They take shares of the batch's block ids,
the call's latent rows or the weight's bytes (as the config asks) and ask L2 for them, so
that the working programs' first trips after the wait (the batch's offsets, the block ids,
the rows, the weight's first chunks) find L2 instead of device memory.

Why this cannot change a result: L2 is where every SM's reads and writes meet, so a line
brought in early holds whatever the kernel before writes to it afterwards; nothing is read
into an SM's own cache or shared memory. The offsets, block ids and sizes used for the
addresses are read (L2 only, ``.cg``) while that kernel may still be writing them, so each
is clamped into the tensors' bounds: a stale or half-written value prefetches the wrong
rows, never outside the cache, and bounds every loop.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .config import BM
from .schedule import short_split

PIECE = gl.constexpr(1 << 16)  # bytes of one bulk prefetch of a range (the weight, block ids)


@gluon.jit
def _to_l2(ptr, nbytes, on):
    """One bulk prefetch into L2 per element where ``on``: ``nbytes`` (a multiple of 16) from
    ``ptr`` (16-byte aligned)."""
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; } // $0",
        "=r,l,r,r", [ptr, nbytes, on.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _pieces_to_l2(ptr8, nbytes, pid, idle, rows_layout: gl.constexpr):
    """``nbytes`` (a multiple of 16) from ``ptr8`` (an int8 pointer, 16-byte aligned) into
    L2 in 64 KB pieces, pieces pid, pid + idle, ... of them."""
    pieces = gl.cdiv(nbytes, PIECE)
    for k0 in range(0, pieces, BM):  # BM pieces (8 MB) a pass
        k = k0 + gl.arange(0, BM, layout=rows_layout)
        size = gl.minimum(nbytes - k.to(nbytes.dtype) * PIECE, PIECE)
        _to_l2(ptr8 + k.to(gl.int64) * PIECE, size.to(gl.int32),
               (k < pieces) & (k % idle == pid))


@gluon.jit
def _table_bytes(items, cache, nprog):
    """The batch's block ids, kv_indices[kv_indptr[0] : kv_indptr[batch]], as (an int8
    pointer, bytes) cut inward to 16-byte bounds (a bulk prefetch's alignment), so the range
    lies in the tensor. Both ends are read early (L2 only) and clamped into its bounds, and
    the range to nprog x BM ids: what a short context holds at one token a page."""
    lo = gl.load(cache.kv_indptr_ptr, cache_modifier=".cg")
    hi = gl.load(cache.kv_indptr_ptr + items.batch, cache_modifier=".cg")
    lo = gl.minimum(gl.maximum(lo, 0), cache.num_indices)
    hi = gl.minimum(gl.maximum(hi, lo), gl.minimum(cache.num_indices, lo + nprog * BM))
    ID_BYTES: gl.constexpr = cache.kv_indices_ptr.dtype.element_ty.primitive_bitwidth // 8
    base = cache.kv_indices_ptr.to(gl.pointer_type(gl.int8), bitcast=True)
    addr = base.to(gl.int64)
    first = (addr + lo.to(gl.int64) * ID_BYTES + 15) // 16 * 16 - addr
    end = (addr + hi.to(gl.int64) * ID_BYTES) // 16 * 16 - addr
    return base + first, gl.maximum(end - first, 0)


@gluon.jit
def prefetch_share(items, cache, w_ptr, TABLE: gl.constexpr, LATENT: gl.constexpr,
                   ROW_BYTES: gl.constexpr, W_BYTES: gl.constexpr, num_warps: gl.constexpr):
    """This program's share of the call's inputs into L2, if it is one of the programs left
    over at a short context: with TABLE, the batch's block ids (64 KB pieces pid, pid + left
    over, ...); with LATENT, token tiles pid, pid + left over, ... (their rows found as the
    gather finds them, read early: ``Cache.tile_rows``, which brings their block ids too);
    with W_BYTES (the weight's bytes, contiguous at ``w_ptr``; 0: none) its 64 KB pieces by
    the same stride. ROW_BYTES: a latent row's."""
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [num_warps, 1], [1, 0])
    rows_layout: gl.constexpr = gl.SliceLayout(1, layout)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    # At most nprog tiles: a stale count bounds nothing else, and cdiv cannot overflow.
    total = gl.load(items.cs_ptr + items.batch, cache_modifier=".cg")
    total = gl.minimum(gl.maximum(total, 0), nprog * BM)
    n_tiles = gl.cdiv(total, BM)
    if n_tiles * 2 <= nprog:
        parts, idle = short_split(n_tiles, nprog)
        if pid < idle:
            # The bulk ranges first: they are asked for in a pass, while the latent rows
            # take a trip to the block ids a tile, which would hold them back.
            if W_BYTES > 0:
                _pieces_to_l2(w_ptr.to(gl.pointer_type(gl.int8), bitcast=True),
                              gl.to_tensor(W_BYTES).to(gl.int64), pid, idle, rows_layout)
            if TABLE:
                ids, nbytes = _table_bytes(items, cache, nprog)
                _pieces_to_l2(ids, nbytes, pid, idle, rows_layout)
            # A batch searched in registers, as the gather's.
            if LATENT and (1 << cache.SEARCH_STEPS) <= BM:
                index = cache.batch_index(items, layout, True)
                size = gl.full([BM], ROW_BYTES, gl.int32, rows_layout)
                for tile in range(pid, n_tiles, idle):
                    rows, tmask = cache.tile_rows(items, total, tile, layout, index, True)
                    _to_l2(cache.k_ptr + rows, size,
                           tmask & (cache.num_indices > 0) & (cache.num_blocks > 0))
