"""The weight partitions: the TMA loader of fp8 and bf16 weights, and in its place MXFP4's
packed loader and widener. They fill the weight ring in the order the MMA warps read it:
each item of the program's run, K chunk by K chunk."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .compat import partition_sync, tma_io
from .config import BK, BN, MX_BIAS, MX_ROUTE_BF16, MX_ROUTE_E4M3, SCALE_E8M0, WIDEN_WARPS
from .conversions import (
    as_words,
    halves,
    mx_codes,
    mx_offsets,
    packed_words,
    widen_bf16,
    widen_e4m3,
)


@gluon.jit
def weight_loader(p):
    """One warp: each item's 128 weight rows by TMA, a [128 x WK] chunk a ring slot, the run's
    items and then any the dynamic tail's claims hold (MXFP4 widened once a call:
    ``_widened_items_loader``)."""
    items = p.items
    if p.SCALE == SCALE_E8M0:
        _widened_items_loader(p)
    else:
        total, start, end = items.run()
        c = _load_items(p, start, end, gl.to_tensor(0))
        if items.TAIL > 0:  # the dynamic tail's claims, as the gatherer makes them
            on, _, _ = items.tail_of(total)
            if on:
                claim_layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
                j = 0
                start, end = p.claims.take(items, total, 0, claim_layout)
                while end > start:
                    c = _load_items(p, start, end, c)
                    j += 1
                    start, end = p.claims.take(items, total, j, claim_layout)


@gluon.jit
def _load_items(p, start, end, c):
    """Items [start, end) into the ring from its ``c``-th chunk; returns the chunks after."""
    ring = p.ring
    WK: gl.constexpr = p.WK
    for it in range(start, end):
        w_row = p.items.weight_row(it)
        for kb in gl.static_range(p.items.KV_C // WK):
            s = ring.wait_free(c)
            ring.fill(p.w_desc, s, w_row, kb * WK)
            c += 1
    return c


@gluon.jit
def _widened_items_loader(p):
    """MXFP4 over an fp8 cache widened once a call (widening.widen_mx_items_kernel: each
    item's rows as e4m3, as two e4m3 parts or as bf16 in a copy of 2 kv_c bytes a row;
    ws_ptr each row's info): each item's info into its ring entry, then its chunks by TMA,
    K chunks of 128 bytes a row: kv_c / 128 e4m3 ones, or twice as many (the split route's
    two parts, or [128 x 64] bf16 ones). The next
    item's info is loaded while this item's chunks go out."""
    ring = p.ring
    items = p.items
    NK: gl.constexpr = items.KV_C // BK
    STAGES: gl.constexpr = ring.STAGES
    info_layout: gl.constexpr = gl.BlockedLayout([BN // 32], [32], [1], [0])
    rows = gl.arange(0, BN, layout=info_layout)
    _, start, end = items.run()
    nxt = gl.load(p.ws_ptr + items.weight_row(start) + rows)
    c = 0
    for it in range(start, end):
        info = nxt
        nxt = gl.load(p.ws_ptr + items.weight_row(gl.minimum(it + 1, end - 1)) + rows)
        # The split and bf16 routes load both halves of the copy's rows.
        chunks = NK * (1 + (gl.max(info & 3, axis=0) != MX_ROUTE_E4M3).to(gl.int32))
        # As the widener's: an entry is rewritten STAGES + 1 items later, once the MMA warps
        # have released this item's first slot and so read it (they read it first). The
        # first chunk's barrier (an arrival after every thread's store) publishes it.
        s = ring.wait_free(c)
        ring.info.index((it - start) % (STAGES + 1)).store(info)
        partition_sync()
        w_row = items.weight_row(it)
        ring.fill(p.w_desc, s, w_row, 0)
        for j in range(1, chunks):
            s = ring.wait_free(c + j)
            ring.fill(p.w_desc, s, w_row, j * BK)
        c += chunks


@gluon.jit
def packed_loader(p):
    """MXFP4's loader (one warp, over an fp8 cache): each item's e8m0 codes into a codes slot
    (plain loads and stores) and its packed e2m1 bytes by TMA, K chunk by K chunk, into the
    packed ring, ahead of the widener. The widener then never waits on memory: its every
    hand-over's proxy fence waits for the loads it has in flight (MEMBAR.ALL.CTA), so loads
    of its own put their latency on its path once an item at least."""
    items = p.items
    pk = p.packed
    KV_C: gl.constexpr = items.KV_C
    NK: gl.constexpr = KV_C // BK
    CODES: gl.constexpr = pk.codes.shape[2]
    code_layout: gl.constexpr = gl.BlockedLayout([1, CODES], [32, 1], [1, 1], [1, 0])
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, code_layout))
    cols = gl.arange(0, CODES, layout=gl.SliceLayout(0, code_layout))
    _, start, end = items.run()
    c = 0
    for it in range(start, end):
        w_row = items.weight_row(it)
        q = it - start
        code = gl.load(p.ws_ptr + (w_row + rows)[:, None] * p.WS_LD + cols[None, :],
                       mask=(cols < KV_C // 32)[None, :], other=0)
        s = pk.codes_free(q)
        pk.codes.index(s).store(code)
        partition_sync()
        mbarrier.arrive(pk.codes_ready.index(s), count=1)
        for kb in gl.static_range(NK):
            s = pk.wait_free(c)
            mbarrier.expect(pk.ready.index(s), p.w_desc.block_type.nbytes)
            tma_io.load(p.w_desc, [w_row, kb * (BK // 2)], pk.ready.index(s), pk.slots.index(s))
            c += 1


@gluon.jit
def _read_chunk(pk, n, layout: gl.constexpr):
    """Packed chunk ``n`` of the run as [128 x 16] words in ``layout``, once it has landed.
    Its slot is freed with the ring slot its widened chunk goes to (``_free_chunk``): TMA
    writes the slot again, and the async proxy is ordered after these reads only by the
    hand-over's proxy fence, issued once they have returned (the widened chunk is stored)."""
    s = pk.wait_full(n)
    return packed_words(pk.slots.index(s)).load(layout)


@gluon.jit
def _free_chunk(pk, n):
    """Packed chunk ``n``'s slot to the loader, after a hand-over (its fence and barrier)."""
    mbarrier.arrive(pk.empty.index(n % pk.PK), count=1)


@gluon.jit
def mx_widener(p):
    """MXFP4's widener (four warps, over an fp8 cache, beside the packed loader): reads each
    item's e8m0 codes and packed e2m1 chunks from shared memory and writes them into the
    ring widened, as [128 x 128] e4m3 chunks when every row fits (MX_SPAN), else as
    [128 x 64] bf16 chunks, with one factor 2^F a row (undone in the epilogue). The item's
    F and route go to the ring's ``info`` entry before its first chunk is published.
    """
    ring = p.ring
    pk = p.packed
    items = p.items
    KV_C: gl.constexpr = items.KV_C
    STAGES: gl.constexpr = ring.STAGES
    NK: gl.constexpr = KV_C // BK
    CODES: gl.constexpr = pk.codes.shape[2]
    info_layout: gl.constexpr = gl.BlockedLayout([1], [32], [WIDEN_WARPS], [0])
    code_layout: gl.constexpr = gl.BlockedLayout([1, CODES], [32, 1], [WIDEN_WARPS, 1],
                                                 [1, 0])
    # A chunk's packed words, a row a thread.
    word_layout: gl.constexpr = gl.BlockedLayout([1, BK // 8], [32, 1], [WIDEN_WARPS, 1],
                                                 [1, 0])
    _, start, end = items.run()
    c = 0  # ring chunks written
    n = 0  # packed chunks read
    for it in range(start, end):
        q = it - start
        s = pk.codes_full(q)
        code = pk.codes.index(s).load(code_layout).to(gl.int32)
        packed, top, fits = mx_codes(code, KV_C)
        partition_sync()  # every thread has read its row's codes
        mbarrier.arrive(pk.codes_empty.index(s), count=1)
        # An info entry is rewritten STAGES + 1 items later: by then the MMA warps have
        # released this item's first slot and so read the entry (they read it first).
        ring.wait_free(c)
        ring.info.index(q % (STAGES + 1)).store(
            gl.convert_layout((top - MX_BIAS) * 4 + (1 - fits.to(gl.int32)) * MX_ROUTE_BF16,
                              info_layout))
        # Chunks are handed over two at a time: one fence and one barrier for two slots. The
        # first is held while the second's slot frees, which takes the MMA warps' next
        # chunk only with three slots or more (WIDEN_MIN_STAGES).
        if fits:
            for kb in gl.static_range(0, NK, 2):
                e4m3 = widen_e4m3(_read_chunk(pk, n, word_layout),
                                  mx_offsets(packed, top, kb, word_layout))
                s = ring.wait_free(c)
                as_words(ring.slots.index(s)).store(e4m3)
                if kb + 1 < NK:
                    e4m3 = widen_e4m3(_read_chunk(pk, n + 1, word_layout),
                                      mx_offsets(packed, top, kb + 1, word_layout))
                    s1 = ring.wait_free(c + 1)
                    as_words(ring.slots.index(s1)).store(e4m3)
                    ring.publish2(s, s1)
                    _free_chunk(pk, n)
                    _free_chunk(pk, n + 1)
                    c += 2
                    n += 2
                else:
                    ring.publish(s)
                    _free_chunk(pk, n)
                    c += 1
                    n += 1
        else:
            ring16 = ring.as_bf16()
            for kb in gl.static_range(NK):
                w_lo, d_lo, w_hi, d_hi = halves(_read_chunk(pk, n, word_layout),
                                                mx_offsets(packed, top, kb, word_layout))
                s = ring16.wait_free(c)
                ring16.slots.index(s).store(widen_bf16(w_lo, d_lo))
                s1 = ring16.wait_free(c + 1)
                ring16.slots.index(s1).store(widen_bf16(w_hi, d_hi))
                ring16.publish2(s, s1)
                _free_chunk(pk, n)
                c += 2
                n += 1
