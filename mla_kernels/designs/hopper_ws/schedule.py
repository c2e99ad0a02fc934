"""The schedule of work items: which items a program runs (lockstep granules included), the
first token row of a tile, an item's weight rows, and where a tile's latent rows are in the
paged cache (searched in registers for a small batch).

A work item is BM tokens x one head-half (K-nope or V, BN = 128 columns). Items are
numbered tile-major, so consecutive items of a program share one gathered latent tile.
This module keeps its annotations evaluated (it defines bundles: ``compat.bundle``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..jit import find_sequence
from .compat import Scalar, bundle
from .config import BM, BN, LOCKSTEP_ITEMS, LOCKSTEP_SPLITS, TAIL_CLAIMS


@gluon.jit
def tile_row0(tile, total):
    """First token row of a tile. The last tile is shifted back to end at the last token, so
    it is full too and leaves by TMA like the others: its first rows, also the previous
    tile's last, are computed twice and written twice with the same bits. Only a batch of
    fewer than BM tokens has a partial tile."""
    return gl.minimum(tile * BM, gl.maximum(total - BM, 0))


@gluon.jit
def short_split(n_tiles, nprog):
    """Short contexts (at least two programs a token tile): programs a tile, and the programs
    left over, which take no items. Those are the lowest program ids, which start first: on
    the SMs a kernel before leaves free, while it still runs (an overlapped launch), where
    they prefetch the call's inputs (``prefetch.prefetch_share``). No tiles: every program
    is left over."""
    parts = nprog // gl.maximum(n_tiles, 1)
    return parts, nprog - n_tiles * parts


@bundle
class Items:
    """The batch's work items: ``cs`` (the prefix sums of the batch's context lengths, its
    last entry the token count), the heads' shape (PER_TILE = heads x (NOPE + V) / BN items
    a tile: 2 x heads for Kimi-K3's 128 and 128 columns, 3.5 x heads for GLM-5's), the
    latent's width (KV_C, then PE rope columns), and with PAIRS runs of whole heads (a head's
    K-nope item and its V item: the ping-pong groups take one each). HEADS and WHOLE (each
    item one head's K-nope or V: both widths multiples of BN; config.whole_items on the
    host) follow from the others, derived once where the kernel builds the bundle. TAIL:
    items a claim of the dynamic tail (0: none), handed out by the int32 at ``counter_ptr``
    where ``tail_on`` is not 0 (``tail_of``)."""

    cs_ptr: gl.tensor
    batch: Scalar
    NOPE: gl.constexpr
    V: gl.constexpr
    PE: gl.constexpr
    KV_C: gl.constexpr
    PER_TILE: gl.constexpr
    PAIRS: gl.constexpr
    HEADS: gl.constexpr
    WHOLE: gl.constexpr
    counter_ptr: gl.tensor
    tail_on: Scalar
    TAIL: gl.constexpr

    @gluon.jit
    def run(self):
        """(tokens, first item, end item) of this program (``run_of`` the batch's tokens)."""
        return self.run_of(gl.load(self.cs_ptr + self.batch))

    @gluon.jit
    def run_of(self, total):
        """(``total``, first item, end item) of this program in a batch of ``total`` tokens.

        With at least two programs per token tile, each program takes an equal share of one
        tile's items, so none gathers two tiles in a row (short contexts: the programs left
        over, ``short_split``, take none); otherwise the
        items of all tiles are split into contiguous runs, which touch as few tiles as
        possible: equal runs, or, for a weight of LOCKSTEP_ITEMS items a tile or more, runs
        of whole granules (``lockstep_granule``), so that programs start at one of a few
        heads and read each weight chunk at about the same time, while it is in L2.
        With PAIRS the same splits are made in heads (two items each), so a run holds
        whole heads.
        """
        # Runs are split in units of UNIT items; per tile UNITS of them.
        UNIT: gl.constexpr = 2 if self.PAIRS else 1
        UNITS: gl.constexpr = self.PER_TILE // UNIT
        n_tiles = gl.cdiv(total, BM)
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        if n_tiles * 2 <= nprog:
            parts, idle = short_split(n_tiles, nprog)
            q = gl.maximum(pid - idle, 0)
            tile = q // parts
            part = q % parts
            start = tile * UNITS + (part * UNITS) // parts
            end = tile * UNITS + ((part + 1) * UNITS) // parts
            if pid < idle:
                end = start
        else:
            n_units = n_tiles * UNITS
            if self.TAIL > 0:
                # Equal runs over the items before the tail, if this call has one (no
                # lockstep: the plan takes the tail for weights of fewer heads).
                _, n_units, _ = self.tail_of(total)
            start = (pid * n_units) // nprog
            end = ((pid + 1) * n_units) // nprog
            if self.PER_TILE >= LOCKSTEP_ITEMS and self.TAIL == 0:
                # The largest granule (a tile, a half, ... an eighth) whose whole-granule
                # runs cost at most 1/16 in balance; none: the equal runs above.
                g = 0
                for k in gl.static_range(LOCKSTEP_SPLITS - 1, -1, -1):
                    n_g = n_units // (UNITS >> k)
                    if gl.cdiv(n_g, nprog) * nprog * 16 <= n_g * 17:
                        g = UNITS >> k
                if g > 0:
                    n_g = n_units // g
                    start = (pid * n_g) // nprog * g
                    end = ((pid + 1) * n_g) // nprog * g
        return total, start * UNIT, end * UNIT

    @gluon.jit
    def tail_of(self, total):
        """The dynamic tail of a batch of ``total`` tokens: (whether this call has one, its
        first item, its claims). Only long contexts have one (fewer than two programs a
        token tile, where every program has a static run): TAIL_CLAIMS claims of TAIL items
        a program, at most a quarter of the items, from the end. Every program makes one
        claim past the last (``Claims.claim``)."""
        G: gl.constexpr = self.TAIL
        n_tiles = gl.cdiv(total, BM)
        nprog = gl.num_programs(0)
        n_items = n_tiles * self.PER_TILE
        size = gl.minimum(nprog * (TAIL_CLAIMS * G), (n_items // 4) // G * G)
        on = (self.tail_on != 0) & (n_tiles * 2 > nprog) & (size > 0)
        if not on:
            size = 0
        return on, n_items - size, size // G

    @gluon.jit
    def claimed(self, total, chunk):
        """Items [start, end) of claim ``chunk`` of the tail (``tail_of``): empty past the
        last claim."""
        _, first, n_claims = self.tail_of(total)
        start = first + gl.minimum(chunk, n_claims) * self.TAIL
        end = gl.where(chunk < n_claims, start + self.TAIL, start)
        return start, end

    @gluon.jit
    def span(self):
        """(tokens, the run's items [start, end), its token tiles [first, last))."""
        return self.span_of(gl.load(self.cs_ptr + self.batch))

    @gluon.jit
    def span_of(self, total):
        """``span`` in a batch of ``total`` tokens."""
        ITEMS_PER_TILE: gl.constexpr = self.PER_TILE
        total, start, end = self.run_of(total)
        first_tile = start // ITEMS_PER_TILE
        last_tile = (end + ITEMS_PER_TILE - 1) // ITEMS_PER_TILE
        if end == start:
            last_tile = first_tile  # no items: gather nothing
        return total, start, end, first_tile, last_tile

    @gluon.jit
    def weight_row(self, it):
        """First weight row of item ``it``: its BN rows of the heads' weight, [K-nope | V] a
        head, in order (for heads of whole items, its head's K-nope rows or its V rows)."""
        hp = it % self.PER_TILE
        if self.WHOLE:
            return (hp // 2) * (self.NOPE + self.V) + (hp % 2) * self.NOPE
        else:
            return hp * BN

    @gluon.jit
    def piece(self, it, j: gl.constexpr):
        """Where piece ``j`` (columns [j PW, (j + 1) PW) of the item's output, PW = BN / 2) of
        item ``it`` goes, for heads whose K-nope or V is not whole items (GLM-5's 192 and 256
        columns): (a K column, its head, its column within the head's K-nope or V). A piece
        never straddles the two: both widths are multiples of PW."""
        HC: gl.constexpr = self.NOPE + self.V
        f = (it % self.PER_TILE) * BN + j * (BN // 2)
        head = f // HC
        col = f % HC
        is_k = col < self.NOPE
        if not is_k:
            col -= self.NOPE
        return is_k, head, col

    @gluon.jit
    def begins_head(self, it):
        """Whether one of item ``it``'s pieces begins a head's K-nope (at most one does: a
        head has BN columns or more)."""
        HC: gl.constexpr = self.NOPE + self.V
        f = (it % self.PER_TILE) * BN
        return (f % HC == 0) | ((f + BN // 2) % HC == 0)

    @gluon.jit
    def first_head_from(self, t):
        """The first head whose K-nope begins in item ``t`` of a tile or later: the program
        that runs the item where a head's K-nope begins stores the head's rope."""
        HC: gl.constexpr = self.NOPE + self.V
        if self.WHOLE:
            return (t + 1) // 2
        else:
            return (t * BN + HC - 1) // HC


@bundle
class Cache:
    """The paged latent cache (``k_ptr``: [blocks, BLOCK_SIZE, KV_C + PE], fp8 with
    ``k_scale`` or bf16) and its page table (kv_indptr, kv_indices: ``num_indices`` long)."""

    k_ptr: gl.tensor
    k_scale_ptr: gl.tensor
    kv_indptr_ptr: gl.tensor
    kv_indices_ptr: gl.tensor
    stride_block: Scalar
    stride_slot: Scalar
    num_blocks: Scalar
    num_indices: Scalar
    BLOCK_SIZE: gl.constexpr
    SEARCH_STEPS: gl.constexpr  # binary-search steps over the batch's cs
    FP8: gl.constexpr
    GUESS: gl.constexpr  # the first tile's block ids read at guessed indices (first_tile)

    @gluon.jit
    def batch_index(self, items, layout: gl.constexpr, EARLY: gl.constexpr = False):
        """cs[i] and kv_indptr[i] for i in [0, BM) (the last entry repeated past the batch),
        loaded at a gather partition's start as vectors of ``layout``'s rows. A batch of at
        most BM sequences is then searched in registers (``tile_rows``): its first tile's
        row offsets wait on two dependent round trips to memory (these loads, then the
        block ids) instead of one a search step, one for cs[b] and kv_indptr[b] and one for
        the block ids. EARLY: read before the grid dependency wait (``tile_rows``)."""
        i = gl.minimum(gl.arange(0, BM, layout=gl.SliceLayout(1, layout)), items.batch)
        if EARLY:
            return (gl.load(items.cs_ptr + i, cache_modifier=".cg"),
                    gl.load(self.kv_indptr_ptr + i, cache_modifier=".cg"))
        else:
            return gl.load(items.cs_ptr + i), gl.load(self.kv_indptr_ptr + i)

    @gluon.jit
    def first_tile(self, items, layout: gl.constexpr, index):
        """The program's span (``Items.span``), and its first tile's row offsets and row mask
        (``tile_rows``). With GUESS, that tile's block ids are read beside the batch's token
        count instead of after it (``_guess``): a trip to memory fewer before the first
        rows are gathered wherever the guess holds, one more load where it does not."""
        if self.GUESS:
            g_idx, g_blk, g_ok = self._guess(items, layout)
        total, start, end, first, last = items.span()
        if self.GUESS:
            first_block, t, tmask = self._tile_index(items, total, first, layout, index)
            idx = first_block + t // self.BLOCK_SIZE
            # A row holding a token whose index into the page table was guessed keeps the
            # block id read there; the others are read now (a row past the tokens reads
            # none, as in tile_rows: its guessed entry may be a spare one, holding anything).
            hit = g_ok & tmask & (idx == g_idx)
            blk = gl.where(hit, g_blk, gl.load(self.kv_indices_ptr + idx,
                                               mask=tmask & ~hit, other=0))
            gl.device_assert((blk >= 0) & (blk < self.num_blocks),
                             "kv_indices: block id out of range")
            rows = self._row_offsets(blk, t)
        else:
            rows, tmask = self.tile_rows(items, total, first, layout, index)
        return total, start, end, first, last, rows, tmask

    @gluon.jit
    def _guess(self, items, layout: gl.constexpr):
        """The page table's entries for the program's first tile, read before the batch's
        token count is known, at indices guessed as if the table held the batch's pages
        exactly (num_indices x BLOCK_SIZE tokens: a page-1 table sized to the batch) and each
        sequence's pages began at its first token's page (kv_indptr x BLOCK_SIZE == cs: so
        for page 1, where a sequence has a page a token, and for full pages). (indices,
        block ids, which were read): every index lies in the table, so the loads are safe
        whatever the guess; ``first_tile`` keeps only the rows whose index proves to be
        the guessed one."""
        total = self.num_indices * self.BLOCK_SIZE
        _, _, _, first, _ = items.span_of(total)
        r = tile_row0(first, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        ok = (r >= 0) & (r < total)  # (a table of 2^31 tokens or more: none read)
        idx = r // self.BLOCK_SIZE
        return idx, gl.load(self.kv_indices_ptr + idx, mask=ok, other=0), ok

    @gluon.jit
    def _tile_index(self, items, total, tile, layout: gl.constexpr, index):
        """For each row of token tile ``tile``: its sequence's first index into the page
        table, its offset from its sequence's start, and whether it holds a token
        (``tile_rows``)."""
        SEARCH_STEPS: gl.constexpr = self.SEARCH_STEPS
        cs_ptr = items.cs_ptr
        r = tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        tmask = r < total
        if (1 << SEARCH_STEPS) <= BM:
            cs_v, ip_v = index
            lo = find_sequence(cs_ptr, r, items.batch, SEARCH_STEPS, cs_v)
            t = r - gl.gather(cs_v, lo, 0)
            first_block = gl.gather(ip_v, lo, 0)
        else:
            lo = find_sequence(cs_ptr, r, items.batch, SEARCH_STEPS)
            t = r - gl.load(cs_ptr + lo)
            first_block = gl.load(self.kv_indptr_ptr + lo)
        return first_block, t, tmask

    @gluon.jit
    def _row_offsets(self, blk, t):
        """Element offsets of the latent rows at block ids ``blk``, slots ``t`` mod the page
        (64-bit: block id x stride overflows 32 bits on large caches)."""
        return (blk.to(gl.int64) * self.stride_block
                + (t % self.BLOCK_SIZE).to(gl.int64) * self.stride_slot)

    @gluon.jit
    def tile_rows(self, items, total, tile, layout: gl.constexpr, index,
                  EARLY: gl.constexpr = False):
        """Element offsets of the latent rows of token tile ``tile`` (64-bit: block id x
        stride overflows 32 bits on large caches), and which rows hold a token; ``index``:
        the batch's cs and kv_indptr in registers (``batch_index``), used for a batch of at
        most BM sequences (SEARCH_STEPS <= log2(BM)). Compiled with debug=True, a block id
        outside [0, num_blocks) stops the kernel.

        EARLY (a prefetch's addresses, before the grid dependency wait, a batch searched in
        registers): the page table may still be being written, so its values are read from
        L2 alone and each is clamped into its tensor's bounds: the offsets then lie in the
        cache whatever was read, and a row that holds a token may be a wrong one."""
        gl.static_assert(not EARLY or (1 << self.SEARCH_STEPS) <= BM,
                         "early row offsets: a batch searched in registers only")
        first_block, t, tmask = self._tile_index(items, total, tile, layout, index)
        if EARLY:
            t = gl.maximum(t, 0)
            at = gl.minimum(gl.maximum(first_block + t // self.BLOCK_SIZE, 0),
                            self.num_indices - 1)
            blk = gl.load(self.kv_indices_ptr + at, mask=tmask & (at >= 0), other=0,
                          cache_modifier=".cg")
            blk = gl.minimum(gl.maximum(blk, 0), self.num_blocks - 1)
        else:
            blk = gl.load(self.kv_indices_ptr + first_block + t // self.BLOCK_SIZE, mask=tmask,
                          other=0)
            gl.device_assert((blk >= 0) & (blk < self.num_blocks),
                             "kv_indices: block id out of range")
        return self._row_offsets(blk, t), tmask


def lockstep_granule(items_per_tile: int, n_tiles: int, programs: int, unit: int = 1) -> int:
    """The kernel's choice (``Items.run``) of a run granule in items, 0 for equal runs:
    for LOCKSTEP_ITEMS items a tile or more, the largest of a tile, 1/2 ... 1/8 of one whose
    whole-granule runs cost at most 1/16 in balance; ``unit``: 2 where runs hold whole heads
    (PAIRS), whose granules are counted in heads."""
    if items_per_tile < LOCKSTEP_ITEMS.value or n_tiles * 2 <= programs:
        return 0
    units = items_per_tile // unit
    n_units = n_tiles * units
    for k in range(LOCKSTEP_SPLITS.value):
        g = units >> k
        n_g = n_units // g
        if -(-n_g // programs) * programs * 16 <= n_g * 17:
            return g * unit
    return 0
