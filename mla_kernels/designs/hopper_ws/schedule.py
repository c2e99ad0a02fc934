"""The schedule of work items: which items a program runs (lockstep granules included), the
first token row of a tile, an item's weight rows, and a tile's latent row offsets (the
sequence search in registers for a small batch)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..jit import find_sequence
from .config import BM, LOCKSTEP_ITEMS, LOCKSTEP_SPLITS


@gluon.jit
def _item_range(cs_ptr, batch, ITEMS_PER_TILE: gl.constexpr):
    """(tokens, first item, end item) of this program.

    With at least two programs per token tile, each program takes an equal share of one
    tile's items, so none gathers two tiles in a row (short contexts); otherwise the items
    of all tiles are split into contiguous runs, which touch as few tiles as possible:
    equal runs, or, for a weight of LOCKSTEP_ITEMS items a tile or more, runs of whole
    granules (``lockstep_granule``).
    """
    total = gl.load(cs_ptr + batch)
    n_tiles = gl.cdiv(total, BM)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    if n_tiles * 2 <= nprog:
        parts = nprog // n_tiles
        tile = pid // parts
        part = pid % parts
        start = tile * ITEMS_PER_TILE + (part * ITEMS_PER_TILE) // parts
        end = tile * ITEMS_PER_TILE + ((part + 1) * ITEMS_PER_TILE) // parts
        if tile >= n_tiles:
            end = start
    else:
        n_items = n_tiles * ITEMS_PER_TILE
        start = (pid * n_items) // nprog
        end = ((pid + 1) * n_items) // nprog
        if ITEMS_PER_TILE >= LOCKSTEP_ITEMS:
            # The largest granule (a tile, a half, ... an eighth) whose whole-granule runs
            # cost at most 1/16 in balance; none: the equal runs above.
            g = 0
            for k in gl.static_range(LOCKSTEP_SPLITS - 1, -1, -1):
                n_g = n_items // (ITEMS_PER_TILE >> k)
                if gl.cdiv(n_g, nprog) * nprog * 16 <= n_g * 17:
                    g = ITEMS_PER_TILE >> k
            if g > 0:
                n_g = n_items // g
                start = (pid * n_g) // nprog * g
                end = ((pid + 1) * n_g) // nprog * g
    return total, start, end


@gluon.jit
def _tile_row0(tile, total):
    """First token row of a tile. The last tile is shifted back to end at the last token, so
    it is full too and leaves by TMA like the others: its first rows, also the previous
    tile's last, are computed twice and written twice with the same bits. Only a batch of
    fewer than BM tokens has a partial tile."""
    return gl.minimum(tile * BM, gl.maximum(total - BM, 0))


@gluon.jit
def _item_weight_row(it, NOPE: gl.constexpr, V: gl.constexpr, ITEMS_PER_TILE: gl.constexpr):
    """First weight row of item ``it``: its head's K-nope rows, or its V rows."""
    hp = it % ITEMS_PER_TILE
    return (hp // 2) * (NOPE + V) + (hp % 2) * NOPE


@gluon.jit
def _tile_span(cs_ptr, batch, ITEMS_PER_TILE: gl.constexpr):
    """(tokens, the run's items [start, end), its token tiles [first, last))."""
    total, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    first_tile = start // ITEMS_PER_TILE
    last_tile = (end + ITEMS_PER_TILE - 1) // ITEMS_PER_TILE
    if end == start:
        last_tile = first_tile  # no items: gather nothing
    return total, start, end, first_tile, last_tile


@gluon.jit
def _batch_index(cs_ptr, kv_indptr_ptr, batch, layout: gl.constexpr):
    """cs[i] and kv_indptr[i] for i in [0, BM) (the last entry repeated past the batch),
    loaded at a gather partition's start as vectors of ``layout``'s rows. A batch of at most
    BM sequences is then searched in registers (``_tile_rows``): its first tile's row
    offsets cost two dependent round trips to memory (these loads, then the block ids)
    instead of one a search step, one for cs[b] and kv_indptr[b], one for the block ids."""
    i = gl.minimum(gl.arange(0, BM, layout=gl.SliceLayout(1, layout)), batch)
    return gl.load(cs_ptr + i), gl.load(kv_indptr_ptr + i)


@gluon.jit
def _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile,
               stride_block, stride_slot, num_blocks, BLOCK_SIZE: gl.constexpr,
               SEARCH_STEPS: gl.constexpr, layout: gl.constexpr, index):
    """Element offsets of the latent rows of token tile ``tile`` (64-bit: block id x stride
    overflows 32 bits on large caches), and which rows hold a token; ``index``: the batch's
    cs and kv_indptr in registers (``_batch_index``), used for a batch of at most BM
    sequences (SEARCH_STEPS <= log2(BM)). Compiled with debug=True, a block id outside
    [0, num_blocks) stops the kernel."""
    r = _tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    tmask = r < total
    if (1 << SEARCH_STEPS) <= BM:
        cs_v, ip_v = index
        lo = find_sequence(cs_ptr, r, batch, SEARCH_STEPS, cs_v)
        t = r - gl.gather(cs_v, lo, 0)
        first_block = gl.gather(ip_v, lo, 0)
    else:
        lo = find_sequence(cs_ptr, r, batch, SEARCH_STEPS)
        t = r - gl.load(cs_ptr + lo)
        first_block = gl.load(kv_indptr_ptr + lo)
    blk = gl.load(kv_indices_ptr + first_block + t // BLOCK_SIZE, mask=tmask, other=0)
    gl.device_assert((blk >= 0) & (blk < num_blocks), "kv_indices: block id out of range")
    rows = blk.to(gl.int64) * stride_block + (t % BLOCK_SIZE).to(gl.int64) * stride_slot
    return rows, tmask


def lockstep_granule(items_per_tile: int, n_tiles: int, programs: int) -> int:
    """The kernel's choice (``_item_range``) of a run granule in items, 0 for equal runs:
    for LOCKSTEP_ITEMS items a tile or more, the largest of a tile, 1/2 ... 1/8 of one whose
    whole-granule runs cost at most 1/16 in balance."""
    if items_per_tile < LOCKSTEP_ITEMS.value or n_tiles * 2 <= programs:
        return 0
    n_items = n_tiles * items_per_tile
    for k in range(LOCKSTEP_SPLITS.value):
        g = items_per_tile >> k
        n_g = n_items // g
        if -(-n_g // programs) * programs * 16 <= n_g * 17:
            return g
    return 0
