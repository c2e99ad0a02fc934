"""The gather partition: each token tile's latent rows into shared memory by cp.async, or, for a
bf16 weight over an fp8 cache, loaded, widened to bf16 and stored (the latent widener)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, mbarrier

from .compat import cp_async
from .config import BK, BM, GATHER_WARPS
from .conversions import as_words, widen_words
from .schedule import tile_row0
from .shared_buffers import publish_slot


@gluon.jit
def latent_gatherer(p):
    """Gathers each token tile's latent rows (and rope) into shared memory by cp.async, a
    barrier per K chunk (and one for an fp8 cache's rope).

    A bf16 latent tile (LAT16) is [2 NK, 128, 64] bf16 K slices, two a chunk barrier, and
    the rope skips shared memory: loaded into registers and stored from them to the K rows
    of every head of the run's items in the tile. Over an fp8 cache (a bf16 weight) the
    tile is widened on its way in instead (``_latent_widener``)."""
    LAT16: gl.constexpr = p.tile.LAT16
    if LAT16:
        rope_inv = p.out.k_inverse()  # the rope is K's: FP8 outputs take K's scale
    else:
        rope_inv = 1.0  # (the MMA warps store the rope)
    if LAT16 and p.cache.FP8:
        _latent_widener(p.items, p.cache, p.tile, p.out.k_ptr, rope_inv)
    else:
        _latent_copier(p.items, p.cache, p.tile, p.claims, p.out.k_ptr, rope_inv)


@gluon.jit
def _latent_copier(items, cache, tile_bufs, claims, k_out_ptr, rope_inv):
    """``latent_gatherer`` where the tile holds the cache's own dtype: the run's tiles, then
    with a dynamic tail (``Items.tail_of``) the claims' tiles, one claim at a time, each
    claimed when the MMA warps ask for it, a few items before they end the run before."""
    LAT16: gl.constexpr = tile_bufs.LAT16
    PE: gl.constexpr = items.PE
    # 16 contiguous bytes per thread: one cp.async each; a row of a K slice (LK values).
    VEC: gl.constexpr = 8 if LAT16 else 16
    lat_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [4, 8], [GATHER_WARPS, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // (PE // VEC), PE // VEC],
                                               [GATHER_WARPS, 1], [1, 0])
    LK: gl.constexpr = BK // 2 if LAT16 else BK
    index = cache.batch_index(items, lat_layout)
    total, start, end, first_tile, last_tile, rows, tmask = cache.first_tile(items, lat_layout,
                                                                             index)
    k_cols = gl.arange(0, LK, layout=gl.SliceLayout(0, lat_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    for tile in range(first_tile, last_tile):
        _copy_tile(items, cache, tile_bufs, k_out_ptr, rope_inv, total, tile, tile - first_tile,
                   start, end, rows, tmask, k_cols, pe_cols, pe_layout)
        # The next tile's row offsets (dependent index loads) are fetched while this
        # tile's matrix work runs, off the MMA warps' critical path.
        rows, tmask = cache.tile_rows(items, total, tile + 1, lat_layout, index)
    if items.TAIL > 0:
        on, _, _ = items.tail_of(total)
        if on:
            PER_TILE: gl.constexpr = items.PER_TILE
            claim_layout: gl.constexpr = gl.BlockedLayout([1], [32], [GATHER_WARPS], [0])
            n = last_tile - first_tile  # tiles gathered so far
            j = 0
            start, end = claims.claim(items, total, 0, claim_layout)
            while end > start:
                # A claim's tiles' row offsets, each fetched as its tile begins: the gatherer
                # runs a claim ahead, and nothing held across claims leaves it registers.
                for tile in range(start // PER_TILE, (end + PER_TILE - 1) // PER_TILE):
                    t_rows, t_mask = cache.tile_rows(items, total, tile, lat_layout, index)
                    _copy_tile(items, cache, tile_bufs, k_out_ptr, rope_inv, total, tile, n,
                               start, end, t_rows, t_mask, k_cols, pe_cols, pe_layout)
                    n += 1
                j += 1
                start, end = claims.claim(items, total, j, claim_layout)


@gluon.jit
def _copy_tile(items, cache, tile_bufs, k_out_ptr, rope_inv, total, tile, n, start, end, rows,
               tmask, k_cols, pe_cols, pe_layout: gl.constexpr):
    """Token tile ``tile``, the ``n``-th this program gathers (from 0), of the run or claim
    [start, end): its rope and K chunks by cp.async into their slots once free (row offsets
    ``rows``, masked by ``tmask``); a bf16 cache's rope stored from registers."""
    LAT16: gl.constexpr = tile_bufs.LAT16
    KV_C: gl.constexpr = items.KV_C
    LK: gl.constexpr = BK // 2 if LAT16 else BK
    NK: gl.constexpr = KV_C // BK
    lat = tile_bufs.bufs
    lat_ready = tile_bufs.ready
    # A buffer's first fill waits on the phase before the barrier's first: it passes.
    free_phase = (n & 1) ^ 1
    # Rope first (the MMA warps stage it at the tile's start), then the K chunks in order,
    # each on its own barrier so the first wgmma starts as soon as its chunk has landed.
    pe_rows = gl.convert_layout(rows, gl.SliceLayout(1, pe_layout))
    pe_mask = gl.convert_layout(tmask, gl.SliceLayout(1, pe_layout))
    pe_ptrs = cache.k_ptr + pe_rows[:, None] + (KV_C + pe_cols)[None, :]
    if not LAT16:
        mbarrier.wait(tile_bufs.rope_empty(), free_phase)
        cp_async.load(tile_bufs.pe, pe_ptrs, mask=pe_mask[:, None])
        # Each thread's arrival lands when its own copies have: the barriers count threads.
        async_copy.mbarrier_arrive(tile_bufs.rope_ready(), increment_count=False)
    for kb in gl.static_range(NK):
        s = tile_bufs.wait_free(n, kb, free_phase)
        for h in gl.static_range(BK // LK):
            cp_async.load(lat.index(s * (BK // LK) + h), cache.k_ptr + rows[:, None]
                          + (kb * BK + h * LK + k_cols)[None, :], mask=tmask[:, None])
        async_copy.mbarrier_arrive(lat_ready.index(s), increment_count=False)
    if LAT16:  # a bf16 cache: nothing to dequantise
        _store_rope(items, k_out_ptr, pe_ptrs, pe_mask, rope_inv, total, tile, start, end,
                    pe_cols, pe_layout)


@gluon.jit
def _store_rope(items, k_out_ptr, pe_ptrs, pe_mask, k_scale, total, tile, start, end, pe_cols,
                pe_layout: gl.constexpr):
    """The rope of one tile with a bf16 latent tile, from registers (x k_scale, 1 for a bf16
    cache, and / k_out_scale for FP8 outputs): stored into the K rows of every head whose
    K-nope begins in an item of this tile in the run [start, end) (the program that stores
    it stores its rope). The tile's rows past the last token are masked; a shifted last
    tile writes its first rows again with the same bits."""
    NOPE: gl.constexpr = items.NOPE
    ITEMS_PER_TILE: gl.constexpr = items.PER_TILE
    HEADS: gl.constexpr = items.HEADS
    out_ty: gl.constexpr = k_out_ptr.dtype.element_ty
    KROW: gl.constexpr = NOPE + items.PE
    pe = (gl.load(pe_ptrs, mask=pe_mask[:, None], other=0.0).to(gl.float32) * k_scale
          ).to(out_ty)
    r = tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, pe_layout))
    out = k_out_ptr + (r.to(gl.int64) * (KROW * HEADS) + NOPE)[:, None] + pe_cols[None, :]
    # Heads whose K-nope begins in an item of this tile in the run.
    t0 = gl.maximum(start - tile * ITEMS_PER_TILE, 0)
    t1 = gl.minimum(end - tile * ITEMS_PER_TILE, ITEMS_PER_TILE)
    for head in range(items.first_head_from(t0), items.first_head_from(t1)):
        gl.store(out + head * KROW, pe, mask=pe_mask[:, None])


@gluon.jit
def _slice_load(k32, words, rw, tmask, j: gl.constexpr, NS: gl.constexpr):
    """K slice ``j`` of a tile (rows at word offsets ``rw``) as [128 x 16] words, or, past
    the tile's NS slices, a stand-in that is never stored (nothing loaded)."""
    SW: gl.constexpr = BK // 8  # words of a slice's row
    if j < NS:
        x = gl.load(k32 + (rw + j * SW)[:, None] + words[None, :], mask=tmask[:, None],
                    other=0)
    else:
        x = gl.zeros([BM, SW], gl.int32, words.type.layout.parent)
    return x


@gluon.jit
def _tile_words(k32, words, rows, tmask, NS: gl.constexpr):
    """A tile's row offsets (``rows``, masked by ``tmask``: ``Cache.tile_rows``'s) in words,
    and its 8 slices' loads (stand-ins past NS), all issued at once."""
    # Rows start at multiples of 4 bytes (kv_c + pe is a multiple of 64).
    rw = rows // 4
    return (rw, _slice_load(k32, words, rw, tmask, 0, NS),
            _slice_load(k32, words, rw, tmask, 1, NS), _slice_load(k32, words, rw, tmask, 2, NS),
            _slice_load(k32, words, rw, tmask, 3, NS), _slice_load(k32, words, rw, tmask, 4, NS),
            _slice_load(k32, words, rw, tmask, 5, NS), _slice_load(k32, words, rw, tmask, 6, NS),
            _slice_load(k32, words, rw, tmask, 7, NS))


@gluon.jit
def _widen_chunk(tile_bufs, kb: gl.constexpr, n, free_phase, x_lo, x_hi, NS: gl.constexpr):
    """K chunk ``kb`` of the run's ``n``-th tile (its two slices' words in registers)
    widened into the bf16 tile once the MMA warps have freed its slot (``free_phase``:
    ``LatentTile.wait_free``), and handed to them."""
    if 2 * kb < NS:
        lat = tile_bufs.bufs
        s = tile_bufs.wait_free(n, kb, free_phase)
        as_words(lat.index(2 * s)).store(widen_words(x_lo))
        as_words(lat.index(2 * s + 1)).store(widen_words(x_hi))
        publish_slot(tile_bufs.ready.index(s))


@gluon.jit
def _latent_widener(items, cache, tile_bufs, k_out_ptr, rope_inv):
    """The gather partition of a bf16 weight over an fp8 cache: each token tile's fp8 latent
    rows loaded into registers, widened exactly to bf16 (widen_words) and stored as the
    tile of bf16 K slices a bf16 cache's gather leaves, so the MMA warps run the bf16 cache's
    K loops (k_scale in their epilogue); the rope x k_scale stored from registers. Widened
    once a tile, where widening once an item would repeat the work for every item of it.

    The whole next tile (64 KB: 128 registers a thread) is loaded as soon as this one is
    handed over, so its loads land while the MMA warps run this tile's items. Each
    hand-over's proxy fence (MEMBAR.ALL.CTA) waits for every load in flight: loads issued
    between two hand-overs would put their latency on the MMA warps' path once a chunk."""
    KV_C: gl.constexpr = items.KV_C
    PE: gl.constexpr = items.PE
    # A [128 x 64] fp8 slice as [128 x 16] words of 4 values: 4 words (16 bytes) a thread,
    # four threads a row; 8 words of 2 bf16 (two 16-byte stores) out.
    word_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [GATHER_WARPS, 1], [1, 0])
    # The rope, 16 values a thread: rows on the threads as in word_layout (no conversion).
    pe_layout: gl.constexpr = gl.BlockedLayout([1, PE // 4], [8, 4], [GATHER_WARPS, 1], [1, 0])
    SW: gl.constexpr = BK // 8  # words of a slice's row
    NS: gl.constexpr = 2 * (KV_C // BK)  # slices a tile: 2 to 8
    k32 = cache.k_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    words = gl.arange(0, SW, layout=gl.SliceLayout(0, word_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    index = cache.batch_index(items, word_layout)
    k_scale = gl.load(cache.k_scale_ptr)
    rope_factor = k_scale * rope_inv
    total, start, end, first_tile, last_tile, rows, tmask = cache.first_tile(items, word_layout,
                                                                             index)
    rw, x0, x1, x2, x3, x4, x5, x6, x7 = _tile_words(k32, words, rows, tmask, NS)
    for tile in range(first_tile, last_tile):
        n = tile - first_tile
        # A buffer's first fill waits on the phase before the barrier's first: it passes.
        free_phase = (n & 1) ^ 1
        _widen_chunk(tile_bufs, 0, n, free_phase, x0, x1, NS)
        _widen_chunk(tile_bufs, 1, n, free_phase, x2, x3, NS)
        _widen_chunk(tile_bufs, 2, n, free_phase, x4, x5, NS)
        _widen_chunk(tile_bufs, 3, n, free_phase, x6, x7, NS)
        pe_ptrs = cache.k_ptr + gl.convert_layout(rw * 4, gl.SliceLayout(1, pe_layout))[:, None] \
            + (KV_C + pe_cols)[None, :]
        pe_mask = gl.convert_layout(tmask, gl.SliceLayout(1, pe_layout))
        _store_rope(items, k_out_ptr, pe_ptrs, pe_mask, rope_factor, total, tile, start, end,
                    pe_cols, pe_layout)
        next_rows, tmask = cache.tile_rows(items, total, tile + 1, word_layout, index)
        rw, x0, x1, x2, x3, x4, x5, x6, x7 = _tile_words(k32, words, next_rows, tmask, NS)
