"""The MMA and epilogue partition: every item's K loop by async wgmma, its scale, and its
output staged in shared memory and stored by TMA.

This module keeps its annotations evaluated (it defines bundles: ``compat.bundle``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .compat import Buffer, bundle, partition_sync, replaced, tma_io
from .config import (
    BK,
    BM,
    BN,
    MX_ROUTE_E4M3,
    MX_ROUTE_SPLIT,
    MX_SPLIT_FACTOR,
    SCALE_BLOCK,
    SCALE_E8M0,
    SCALE_ROW,
)
from .conversions import as_pairs, as_words, pow2, widen_pairs
from .schedule import tile_row0


@bundle
class Item:
    """Where work item ``it`` of the run lies: its head and half (0: K-nope, 1: V; heads of
    whole items only, ``Items.piece`` places the others' two pieces), its
    tile's first token row, whether the tile is full, whether the item is its tile's first
    or last in the run, and how many tiles the run has begun, this one's included."""

    it: gl.tensor
    head: gl.tensor
    half: gl.tensor
    row0: gl.tensor
    full: gl.tensor
    first: gl.tensor
    last: gl.tensor
    tiles_seen: gl.tensor


@bundle
class Group:
    """One MMA group's part of every item: rows [R0, R0 + HM) of each tile, and what its
    epilogue reuses item after item (the token count, k_scale, the rope's factor: k_scale,
    over k_out_scale for FP8 outputs, column and row offsets in the layouts it stores from,
    its rows of the rope buffers); OWN_BUF: the staging buffer a ping-pong group keeps, -1
    where the groups take the buffers in turn."""

    total: gl.tensor
    k_scale: gl.tensor
    pe_scale: gl.tensor
    cols: gl.tensor
    pe_cols: gl.tensor
    pe_rows: gl.tensor
    st_cols: gl.tensor
    st_rows: gl.tensor
    pe_src: Buffer
    pe_dst: Buffer
    R0: gl.constexpr
    HM: gl.constexpr
    NWG: gl.constexpr
    acc_layout: gl.constexpr
    pe_layout: gl.constexpr
    st_layout: gl.constexpr
    OWN_BUF: gl.constexpr


@gluon.jit
def _item_at(items, it, start, end, total, tiles_seen):
    """Item ``it`` of the run [start, end) (``Item``), and the tiles begun with it. With PAIRS
    a group runs every other item: first and last are of its own items in the tile."""
    ITEMS_PER_TILE: gl.constexpr = items.PER_TILE
    tile = it // ITEMS_PER_TILE
    hp = it % ITEMS_PER_TILE
    head = hp // 2
    half = hp % 2
    row0 = tile_row0(tile, total)
    full = row0 + BM <= total
    if items.PAIRS:
        last_of_tile = (hp >= ITEMS_PER_TILE - 2) | (it >= end - 2)
        new_tile = (it < start + 2) | (hp < 2)
    else:
        last_of_tile = (hp == ITEMS_PER_TILE - 1) | (it == end - 1)
        new_tile = (it == start) | (hp == 0)
    if new_tile:
        tiles_seen += 1
    return Item(it, head, half, row0, full, new_tile, last_of_tile, tiles_seen), tiles_seen


@gluon.jit
def _wait_for_chunk(ring, lat, item, c, kb, h, LANDED: gl.constexpr = False):
    """Wait until weight chunk ``c`` is in its ring slot (returned) and, for the first item of
    a tile, until its latent K chunk ``kb`` has landed (cp.async wrote it through the generic
    proxy; wgmma reads through the async one, hence the fence), unless the caller knows it
    has (LANDED)."""
    s = ring.wait_full(c)
    if h == 0 and not LANDED:
        if item.first:
            lat.wait_chunk(item.tiles_seen - 1, kb)
            fence_async_shared()
    return s


@gluon.jit
def _item_k_loop(ring, lat, item, acc, c, NK: gl.constexpr, STEP: gl.constexpr,
                 a_layout: gl.constexpr, WG: gl.constexpr = 0, NWG: gl.constexpr = 1,
                 a_regs=0, LAT_REGS: gl.constexpr = False, PART: gl.constexpr = 0):
    """Issue one item's K loop on one accumulator: weight chunk kb * STEP + h multiplies K
    slice h of latent chunk kb (STEP 1: fp8 x fp8 from shared memory; STEP 2: a bf16 weight
    chunk times the bf16 latent tile's slice kb * 2 + h from shared memory (LAT16), or, on
    MXFP4's bf16 route over an fp8 tile, the fp8 latent slice widened to a bf16 A operand in
    registers). With LAT_REGS (two groups) the group's rows of each latent chunk are
    wgmma's A operand in registers (``a_regs``, loaded by a tile's first item, which frees
    the chunk for the next tile at once): an entry a chunk (fp8), or, for a bf16 weight over
    the fp8 tile (STEP 2), an entry a K slice, widened to bf16 as it is loaded. PART: 0 the
    whole item; on MXFP4's split route 1 its first K loop (the latent chunks kept for the
    second) and 2 its second (the chunks landed, the product accumulated onto). Returns with
    the last wgmma in flight (``_item_done`` retires it), the weight-chunk count and
    ``a_regs``."""
    WK: gl.constexpr = BK // STEP
    n = item.tiles_seen - 1
    for kb in gl.static_range(NK):
        for h in gl.static_range(STEP):
            s = _wait_for_chunk(ring, lat, item, c, kb, h, PART == 2)
            if LAT_REGS:
                if item.first and h == 0:
                    a_regs = _take_latent_chunk(lat, a_regs, n, kb, WG, NWG, STEP)
                if STEP == 1:
                    a = _words_as_fp8(a_regs[kb], a_layout)
                else:
                    a = _words_as_bf16(a_regs[kb * STEP + h], a_layout)
            elif STEP == 1 or lat.LAT16:  # an fp8 chunk, or a bf16 tile's slice
                a = lat.bufs.index(lat.slot(n, kb) * STEP + h)
                if NWG > 1:  # this group's rows of the tile
                    a = a.slice(WG * (BM // NWG), BM // NWG, dim=0)
            else:
                # This K slice of the fp8 latent chunk, widened (exactly) in registers while
                # the previous slice's wgmma runs.
                a = lat.bufs.index(lat.slot(n, kb)).slice(h * WK, WK, dim=1)
                if NWG > 1:
                    a = a.slice(WG * (BM // NWG), BM // NWG, dim=0)
                a = a.load(a_layout).to(gl.bfloat16)
            acc = warpgroup_mma(a, ring.slots.index(s).permute((1, 0)), acc,
                                use_acc=kb * STEP + h > 0 or PART == 2, is_async=True)
            if kb * STEP + h > 0:
                # The previous chunk's wgmma is done: its ring slot can be refilled.
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                ring.release(c - 1)
                if h == 0 and not LAT_REGS and PART != 1:
                    if item.last:  # the tile's last reader of that chunk is done
                        lat.release(n, kb - 1)
            c += 1
    return acc, c, a_regs


@gluon.constexpr_function
def _word_layout(a_layout, per_word=4):
    """The layout of an A operand's registers (a linear layout whose first register bases
    step K by 1 and 2: kWidth 4, fp8; or by 1: kWidth 2, bf16) as int32 words of
    ``per_word`` K values: the same threads and registers, K / per_word. Carried in words,
    the operand takes a register per word (carried as fp8 or bf16 values it takes one per
    value and spills)."""
    steps = [[0, 1 << i] for i in range(per_word.bit_length() - 1)]
    assert a_layout.reg_bases[:len(steps)] == steps, a_layout

    def shrink(bases):
        return [[r, k // per_word] for r, k in bases]
    return gl.DistributedLinearLayout(
        reg_bases=shrink(a_layout.reg_bases[len(steps):]),
        lane_bases=shrink(a_layout.lane_bases), warp_bases=shrink(a_layout.warp_bases),
        block_bases=[], shape=[a_layout.shape[0], a_layout.shape[1] // per_word])


@gluon.jit
def _words_as_fp8(w, a_layout: gl.constexpr):
    """int32 words (``_word_layout``) as the fp8 A operand they hold (four K values a word,
    low byte first): the bytes joined back in place, which is register renaming."""
    b0 = w.to(gl.int8)
    b1 = (w >> 8).to(gl.int8)
    b2 = (w >> 16).to(gl.int8)
    b3 = (w >> 24).to(gl.int8)
    # join(join(b0, b2), join(b1, b3))[r, w, j, i] = b[2 j + i]: K = 4 w + 2 j + i.
    q = gl.join(gl.join(b0, b2), gl.join(b1, b3))
    q = q.reshape([w.shape[0], 4 * w.shape[1]]).to(gl.float8e4nv, bitcast=True)
    return gl.convert_layout(q, a_layout)


@gluon.jit
def _words_as_bf16(w, a_layout: gl.constexpr):
    """int32 words (``_word_layout`` of 2) as the bf16 A operand they hold (two K values a
    word, low half first): register renaming, as ``_words_as_fp8``."""
    lo = w.to(gl.int16)
    hi = (w >> 16).to(gl.int16)
    q = gl.join(lo, hi).reshape([w.shape[0], 2 * w.shape[1]]).to(gl.bfloat16, bitcast=True)
    return gl.convert_layout(q, a_layout)


@gluon.jit
def _take_latent_chunk(lat, a_regs, n, kb: gl.constexpr, WG: gl.constexpr,
                      NWG: gl.constexpr, STEP: gl.constexpr = 1):
    """This group's rows of latent chunk ``kb`` (of the run's ``n``-th tile), loaded into
    registers as int32 words in the layout of ``a_regs``' entries (``_word_layout``), in
    their place: entry kb as the chunk's e4m3 words (STEP 1), or, for a bf16 weight (STEP
    2), entries 2 kb and 2 kb + 1 as its two K slices widened exactly to bf16, once a tile
    rather than once an item. The chunk is then released to the gatherer: every warp of the
    group has read it (the partition's barrier) before the one arrival."""
    HM: gl.constexpr = BM // NWG
    chunk = lat.bufs.index(lat.slot(n, kb))
    if STEP == 1:
        fresh = as_words(chunk).slice(WG * HM, HM, dim=0).load(a_regs[kb].type.layout)
    else:
        pairs = as_pairs(chunk).slice(WG * HM, HM, dim=0)
        PW: gl.constexpr = BK // 4  # pairs of one K slice's row
        first = pairs.slice(0, PW, dim=1).load(a_regs[2 * kb].type.layout)
        second = pairs.slice(PW, PW, dim=1).load(a_regs[2 * kb].type.layout)
    partition_sync()
    lat.release(n, kb)
    if STEP == 1:
        a_regs = replaced(a_regs, kb, fresh)
    else:
        a_regs = replaced(replaced(a_regs, 2 * kb, widen_pairs(first)), 2 * kb + 1,
                          widen_pairs(second))
    return a_regs


@gluon.jit
def _item_done(ring, lat, acc, c, item, NK: gl.constexpr, LAT_REGS: gl.constexpr = False):
    """Retire an item's last wgmma and release its last weight chunk (and, for the tile's
    last item, its last latent chunk, unless it was released when it was loaded into
    registers)."""
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    ring.release(c - 1)
    if item.last and not LAT_REGS:
        lat.release(item.tiles_seen - 1, NK - 1)
    return acc


@gluon.jit
def _wait_turn(turns, WG: gl.constexpr, j):
    """Ping-pong group WG's turn at the tensor cores for its ``j``-th item: group 0 (the
    K-nope items) goes first, then each waits until the other has issued its K loop. A
    group's K loop never overlaps the other's, so its epilogue runs while the other
    multiplies, and a group reaching a ring slot finds every earlier chunk there landed,
    which makes a slot's phase parity unambiguous though each group skips the other's
    chunks."""
    mbarrier.wait(turns.index(WG), (j & 1) ^ 1 ^ WG)


@gluon.jit
def _hand_over(turns, NEXT: gl.constexpr):
    """The turn passes to group NEXT once this group's K loop is issued (one thread's
    arrival: its waits saw every chunk of the loop land, which is what the other group's
    parity waits rely on; the other warps need not have caught up)."""
    mbarrier.arrive(turns.index(NEXT), count=1)


@gluon.jit
def _block_scaled_item(ring, lat, item, acc_t, acc_b, ws_row, c, KV_C: gl.constexpr,
                       WK: gl.constexpr, turns, NEXT: gl.constexpr = -1,
                       RENORM: gl.constexpr = True):
    """One item's K loop with a per-128x128-block weight scale: its 128 weight rows are one
    block row and each 128-wide latent chunk one block column, so chunk kb has one scalar
    scale s[kb] (row ``ws_row`` of the scale). Returns the two halves of the product
    normalised to the last chunk's scale (the caller multiplies by it and k_scale), that
    scale, and the weight-chunk count.

    A block-scaled GEMM promotes each K step's partial product into a second accumulator;
    a second 128x128 fp32 accumulator does not fit beside the first, so the accumulator is
    kept normalised to the current chunk's scale instead: before chunk kb > 0 it must be
    complete and multiplied by s[kb-1] / s[kb]. Done on one accumulator, that would drain
    the wgmma queue at each of the NK - 1 block boundaries and idle the tensor cores there.
    The item's 128 tokens are split into two 64-row halves, each its own m64 wgmma group and
    accumulator (64 registers each, as one 128-row accumulator): the top half is
    renormalised while the bottom half's previous chunk still runs, and the other way
    round, so the queue never empties. What remains is the multiplies and the waits' issue
    slots, while the tensor cores work. NEXT >= 0: the ping-pong group whose turn it is once
    the last wgmma is issued (``_hand_over``). Without RENORM (a per-row weight scale, applied
    by the caller) the same two halves' K loop, the returned scale 1: a ping-pong group's
    128-row product as two 64-row accumulators, whose epilogue ptxas fits in its registers
    where one 128-row accumulator's spills.
    """
    NK: gl.constexpr = KV_C // BK
    STEP: gl.constexpr = BK // WK  # weight chunks per latent chunk: 1 (fp8), 2 (bf16)
    HM: gl.constexpr = BM // 2
    # The next chunk's scale is always in flight.
    if RENORM:
        s_cur = gl.load(ws_row).to(gl.float32)
        if NK > 1:
            s_nxt = gl.load(ws_row + 1).to(gl.float32)
    else:
        s_cur = 1.0
    n = item.tiles_seen - 1
    for kb in gl.static_range(NK):
        for h in gl.static_range(STEP):
            s = _wait_for_chunk(ring, lat, item, c, kb, h)
            w = ring.slots.index(s).permute((1, 0))
            # Both operands from shared memory: an fp8 chunk, or a bf16 tile's slice.
            sl = lat.bufs.index(lat.slot(n, kb) * STEP + h)
            a_t = sl.slice(0, HM, dim=0)
            a_b = sl.slice(HM, HM, dim=0)
            if kb > 0 and RENORM:
                if h == 0:
                    # A block boundary. In flight: the previous chunk's top, then bottom.
                    ratio = s_cur / s_nxt
                    acc_t = warpgroup_mma_wait(num_outstanding=1, deps=(acc_t,))
                    acc_t = acc_t * ratio
                    acc_t = warpgroup_mma(a_t, w, acc_t, is_async=True)
                    acc_b = warpgroup_mma_wait(num_outstanding=1, deps=(acc_b,))
                    # Both halves of the previous chunk are done.
                    ring.release(c - 1)
                    if item.last:  # the tile's last reader of that latent chunk is done
                        lat.release(n, kb - 1)
                    acc_b = acc_b * ratio
                    acc_b = warpgroup_mma(a_b, w, acc_b, is_async=True)
                    s_cur = s_nxt
                    if kb + 1 < NK:
                        s_nxt = gl.load(ws_row + kb + 1).to(gl.float32)
            if kb == 0 or h > 0 or not RENORM:
                acc_t = warpgroup_mma(a_t, w, acc_t, use_acc=kb * STEP + h > 0, is_async=True)
                acc_b = warpgroup_mma(a_b, w, acc_b, use_acc=kb * STEP + h > 0, is_async=True)
                if kb * STEP + h > 0:
                    # Both halves of the previous chunk are done: its ring slot is free.
                    acc_t, acc_b = warpgroup_mma_wait(num_outstanding=2, deps=(acc_t, acc_b))
                    ring.release(c - 1)
                    if kb > 0 and h == 0 and not RENORM:
                        if item.last:  # as at a block boundary above
                            lat.release(n, kb - 1)
            c += 1
    if NEXT >= 0:
        _hand_over(turns, NEXT)
    acc_t, acc_b = warpgroup_mma_wait(num_outstanding=0, deps=(acc_t, acc_b))
    ring.release(c - 1)
    if item.last:
        lat.release(n, NK - 1)
    return acc_t, acc_b, s_cur, c


@gluon.jit
def _mx_item_product(ring, lat, item, grp, acc, c, start, factor, NK: gl.constexpr,
                     a_layout: gl.constexpr, acc16_layout: gl.constexpr,
                     a16_layout: gl.constexpr, one_layout: gl.constexpr, out_ty: gl.constexpr,
                     WG: gl.constexpr, NWG: gl.constexpr):
    """An MXFP4 item of the run from ``start`` (on group WG's rows of NWG): its route read
    from its ``info`` entry, its K loop as fp8 x fp8 (e4m3 chunks), as two fp8 x fp8 ones
    (the split route: the product of the first part x 2^MX_SPLIT_SHIFT, then the second's
    added) or bf16 x bf16 (bf16 chunks, the latent widened in registers), and its output x
    each column's 2^F x ``factor`` (k_scale, over the output's scale for FP8 outputs; on the
    split route F is the row's less the shift). Returns (acc, out, c)."""
    # The item's first chunk is published with its info entry (mx_widener, or the loader of
    # a weight widened once a call).
    ring.wait_full(c)
    entry = ring.info.index((item.it - start) % (ring.STAGES + 1))
    route = gl.max(entry.slice(0, 1).load(one_layout), axis=0) & 3
    if route == MX_ROUTE_E4M3:
        # e4m3 chunks: fp8 x fp8, as fp8_row
        acc, c, _ = _item_k_loop(ring, lat, item, acc, c, NK, 1, a_layout, WG, NWG)
    elif ring.SPLIT and route == MX_ROUTE_SPLIT:
        # Two parts' K loops over the same latent chunks; between them the queue drains
        # once, for the multiply.
        acc, c, _ = _item_k_loop(ring, lat, item, acc, c, NK, 1, a_layout, WG, NWG, PART=1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        ring.release(c - 1)
        acc = acc * MX_SPLIT_FACTOR
        acc, c, _ = _item_k_loop(ring, lat, item, acc, c, NK, 1, a_layout, WG, NWG, PART=2)
    else:  # bf16 chunks, the latent widened in registers, as a bf16 weight
        acc16 = gl.zeros((BM // NWG, BN), gl.float32, acc16_layout)
        acc16, c, _ = _item_k_loop(ring.as_bf16(), lat, item, acc16, c, NK, 2, a16_layout,
                                   WG, NWG)
        acc = gl.convert_layout(acc16, grp.acc_layout)
    # Each column's 2^F x k_scale, read behind the last wgmma.
    scale = pow2(entry.load(gl.SliceLayout(0, grp.acc_layout)) >> 2) * factor
    acc = _item_done(ring, lat, acc, c, item, NK)
    return acc, (acc * scale[None, :]).to(out_ty), c


@gluon.jit
def _stage_rope(items, lat, out, grp, item, start, end):
    """At a tile's first item: wait for its rope (cp.async, generic proxy; fenced for the
    async proxy's wgmma and TMA), and for a full tile stage it x k_scale in the output's rope
    buffer, freeing the rope's slot for the next tile; with ROPE_AHEAD store it there and
    then into every head whose K-nope item of this tile lies in the run [start, end). A
    partial tile's rope is stored from ``pe`` with its K-nope items (``_store_item``).
    Returns the count of rope stores issued."""
    out_ty: gl.constexpr = out.k_ptr.dtype.element_ty
    mbarrier.wait(lat.rope_ready(), (item.tiles_seen - 1) & 1)
    fence_async_shared()
    issued = gl.to_tensor(0)
    if item.full:
        pe = grp.pe_src.load(grp.pe_layout).to(gl.float32) * grp.pe_scale
        tma.store_wait(0)  # the previous tile's rope stores have left its buffer
        grp.pe_dst.store(pe.to(out_ty))
        fence_async_shared()
        mbarrier.arrive(lat.rope_empty(), count=1)  # the next tile's rope may land
        if out.ROPE_AHEAD:
            # The rope needs no product: its bytes leave while the first item multiplies,
            # so a short context's write stream starts an item sooner.
            KROW: gl.constexpr = items.NOPE + items.PE
            base = (item.it // items.PER_TILE) * items.PER_TILE
            h0 = items.first_head_from(gl.maximum(start - base, 0))
            h_end = gl.minimum(items.first_head_from(end - base), items.HEADS)
            for h in range(h0, h_end):
                tma_io.store(out.pe_desc, [item.row0 + grp.R0, h * KROW + items.NOPE],
                             grp.pe_dst)
            issued = gl.maximum(h_end - h0, 0)
    return issued


@gluon.jit
def _store_wait_newest(n, CAP: gl.constexpr):
    """``tma.store_wait`` for a count known at run time: all but the newest min(n, CAP) bulk
    groups done (a count past CAP waits for more than it must, never for less)."""
    if n >= CAP:
        tma.store_wait(CAP)
    for k in gl.static_range(CAP):
        if n == k:
            tma.store_wait(k)


@gluon.jit
def _store_rope_rows(out, grp, row0, head, KROW: gl.constexpr, NOPE: gl.constexpr,
                     HEADS: gl.constexpr):
    """A partial tile's rope (x k_scale) into ``head``'s K rows, row-masked."""
    total = grp.total
    pr = row0 + grp.R0 + grp.pe_rows
    pe = (grp.pe_src.load(grp.pe_layout).to(gl.float32) * grp.pe_scale
          ).to(out.k_ptr.dtype.element_ty)
    gl.store(out.k_ptr + pr.to(gl.int64)[:, None] * (KROW * HEADS)
             + head * KROW + NOPE + grp.pe_cols[None, :], pe, mask=(pr < total)[:, None])


@gluon.jit
def _store_item(items, lat, out, grp, item, n_tma, out_t, out_b, newer,
                HALVES: gl.constexpr):
    """Stage an item's output (``out_t``; with HALVES its top half, ``out_b`` the bottom) in
    a staging buffer and store it: by TMA for a full tile (a K item with its
    tile's rope, but with ROPE_AHEAD, where ``newer`` rope stores were issued since the
    buffer's last item), else row-masked from the buffer. Heads of other widths than whole items
    (GLM-5's) store each item as two pieces (``Items.piece``), the rope with the piece where
    a head's K-nope begins. Returns the count of items staged."""
    NOPE: gl.constexpr = items.NOPE
    V: gl.constexpr = items.V
    KROW: gl.constexpr = NOPE + items.PE  # one head's columns in k_out
    HEADS: gl.constexpr = items.HEADS
    WHOLE: gl.constexpr = items.WHOLE
    PW: gl.constexpr = BN // 2  # a piece's columns
    R0: gl.constexpr = grp.R0
    HM: gl.constexpr = grp.HM
    LAT16: gl.constexpr = lat.LAT16
    row0 = item.row0
    head = item.head
    if grp.OWN_BUF >= 0:
        buf = out.bufs.index(grp.OWN_BUF)
    else:
        buf = out.bufs.index(n_tma % out.bufs.shape[0])
    if grp.NWG > 1:
        buf = buf.slice(R0, HM, dim=0)
    # Before reusing a staging buffer, the stores of the item that last used it (two
    # items back) must be done. Full tiles' items alternate K (rope + K-nope stores, in
    # that order) and V (one store), so that is all but the newest 1 (or 2) groups. A
    # partial tile (a batch under BM tokens: the only tile) issues none and waits for all.
    # With one buffer (a bf16 tile, or a ring past 4) the last item's stores must be done,
    # and so with a ping-pong group's own one (issued an item of the other group ago).
    # A bf16 tile's K items store no rope (the gather warps do): one store an item. Items of
    # two pieces store two each, and the rope where a head's K-nope begins in one.
    # With ROPE_AHEAD (heads of whole items, not pingpong) the tile's start stored its rope:
    # those stores may still be pending, but not the buffer's last item's.
    if out.ROPE_AHEAD:
        if item.full:
            _store_wait_newest(newer + out.bufs.shape[0] - 1, 16)
        else:
            tma.store_wait(0)
    elif not item.full or out.bufs.shape[0] == 1 or grp.OWN_BUF >= 0:
        tma.store_wait(0)
    elif not WHOLE:
        if LAT16:
            tma.store_wait(2)
        elif items.begins_head(item.it - 1):
            tma.store_wait(3)
        else:
            tma.store_wait(2)
    elif item.half == 0 or LAT16:
        tma.store_wait(1)
    else:
        tma.store_wait(2)
    if HALVES:
        buf.slice(0, BM // 2, dim=0).store(out_t)
        buf.slice(BM // 2, BM // 2, dim=0).store(out_b)
    else:
        buf.store(out_t)
    n_tma += 1
    if item.full:
        fence_async_shared()
        if not WHOLE:
            for j in gl.static_range(2):
                is_k, ph, col = items.piece(item.it, j)
                src = buf.slice(j * PW, PW, dim=1)
                if is_k:
                    if col == 0 and not LAT16:
                        tma_io.store(out.pe_desc, [row0 + R0, ph * KROW + NOPE], grp.pe_dst)
                    tma_io.store(out.k_desc, [row0 + R0, ph * KROW + col], src)
                else:
                    tma_io.store(out.v_desc, [row0 + R0, ph * V + col], src)
        elif item.half == 0:
            if not LAT16 and not out.ROPE_AHEAD:
                tma_io.store(out.pe_desc, [row0 + R0, head * KROW + NOPE], grp.pe_dst)
            tma_io.store(out.k_desc, [row0 + R0, head * KROW], buf)
        else:
            tma_io.store(out.v_desc, [row0 + R0, head * V], buf)
    else:
        # TMA would write the spare rows past the last token too: the partial tile is
        # read back from the staging buffer and stored row-masked, 16 bytes a thread.
        total = grp.total
        val = buf.load(grp.st_layout)
        r = (row0 + R0 + grp.st_rows).to(gl.int64)[:, None]
        rmask = (row0 + R0 + grp.st_rows < total)[:, None]
        if not WHOLE:
            for j in gl.static_range(2):
                is_k, ph, col = items.piece(item.it, j)
                inside = (grp.st_cols >= j * PW) & (grp.st_cols < (j + 1) * PW)
                c = (grp.st_cols - j * PW + col)[None, :]
                if is_k:
                    gl.store(out.k_ptr + r * (KROW * HEADS) + ph * KROW + c, val,
                             mask=rmask & inside[None, :])
                    if col == 0 and not LAT16:
                        _store_rope_rows(out, grp, row0, ph, KROW, NOPE, HEADS)
                else:
                    gl.store(out.v_ptr + r * (V * HEADS) + ph * V + c, val,
                             mask=rmask & inside[None, :])
        elif item.half == 0:
            gl.store(out.k_ptr + r * (KROW * HEADS) + head * KROW + grp.st_cols[None, :], val,
                     mask=rmask)
            if not LAT16:
                _store_rope_rows(out, grp, row0, head, KROW, NOPE, HEADS)
        else:
            gl.store(out.v_ptr + r * (V * HEADS) + head * V + grp.st_cols[None, :], val,
                     mask=rmask)
        if item.last and not LAT16:  # the tile's rope buffer was read until now
            if grp.OWN_BUF < 0 or item.half == 0:  # ping-pong: by the K-nope group only
                mbarrier.arrive(lat.rope_empty(), count=1)
    return n_tma


@gluon.jit
def mma_epilogue(p, WG: gl.constexpr, NWG: gl.constexpr, LAT_REGS: gl.constexpr,
                  num_warps: gl.constexpr):
    """The MMA and epilogue warps: every item of the run, on rows [R0, R0 + HM) of each
    token tile. With two groups (``mma_groups=2``) each takes half of every tile's rows, both
    read each weight chunk and latent chunk (freed when both have) and each stages and stores
    its half; with LAT_REGS each holds its rows of the tile's latent in registers."""
    items = p.items
    ring = p.ring
    lat = p.tile
    out = p.out
    SCALE: gl.constexpr = p.SCALE
    WK: gl.constexpr = p.WK
    KV_C: gl.constexpr = items.KV_C
    PE: gl.constexpr = items.PE
    LAT16: gl.constexpr = lat.LAT16
    NK: gl.constexpr = KV_C // BK  # latent chunks (and scale blocks along K) per tile
    HM: gl.constexpr = BM // NWG  # this group's rows of a tile
    PAIRS: gl.constexpr = items.PAIRS  # ping-pong: group WG takes the items of half WG
    R0: gl.constexpr = 0 if PAIRS else WG * HM
    STEP: gl.constexpr = BK // WK  # weight chunks per latent chunk: 1 (fp8), 2 (bf16)
    # K of one wgmma instruction: 32 fp8 values, 16 bf16 ones.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 32 // STEP])
    # The A operand of a bf16 wgmma held in registers: two consecutive K values a register.
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    # MXFP4's bf16 route (the ring holds e4m3 chunks, STEP = 1, and bf16 ones by item).
    acc16_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16])
    a16_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc16_layout,
                                                   k_width=2)
    if LAT_REGS and STEP == 1:
        # The A operand of an fp8 wgmma held in registers: four consecutive K values a
        # register; a group's 64 rows of the tile's four latent chunks, 64 registers.
        a8_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout,
                                                      k_width=4)
        a0 = gl.zeros((HM, BK // 4), gl.int32,
                      _word_layout(gl.to_linear_layout(a8_layout, [HM, BK])))
        a_regs = (a0, a0, a0, a0)
    elif LAT_REGS:
        # A bf16 weight over the fp8 tile: the bf16 A operand of a group's 64 rows of the
        # tile's eight K slices, two values a register, 128 registers.
        a8_layout: gl.constexpr = a_layout
        a0 = gl.zeros((HM, WK // 2), gl.int32,
                      _word_layout(gl.to_linear_layout(a_layout, [HM, WK]), 2))
        a_regs = (a0, a0, a0, a0, a0, a0, a0, a0)
    else:
        a8_layout: gl.constexpr = a_layout
        a_regs = 0  # a stand-in (triton 3.6 returns no None from a jit function)
    one_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (PE // 8), PE // 8],
                                               [num_warps, 1], [1, 0])
    out_ty: gl.constexpr = out.k_ptr.dtype.element_ty
    total, start, end = items.run()
    if p.cache.FP8:
        k_scale = gl.load(p.cache.k_scale_ptr)
    else:  # a bf16 cache has nothing to dequantise
        k_scale = 1.0
    OUT_FP8: gl.constexpr = out.FP8
    # FP8 outputs of items of two pieces (GLM-5's heads): K's and V's scales by column.
    COL_FACTOR: gl.constexpr = OUT_FP8 and not items.WHOLE
    if OUT_FP8:
        # Stored values are divided by the output's scale: folded into the factors the
        # epilogue multiplies by anyway.
        k_inv = out.k_inverse()
        v_inv = out.v_inverse()
        pe_scale = k_scale * k_inv
    else:
        pe_scale = k_scale
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    pe_rows = gl.arange(0, HM, layout=gl.SliceLayout(1, pe_layout))
    st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
    st_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, st_layout))
    st_rows = gl.arange(0, HM, layout=gl.SliceLayout(1, st_layout))
    # Two 64-row halves (_block_scaled_item): a block scale's, and a ping-pong group's
    # per-row one.
    HALVES: gl.constexpr = SCALE == SCALE_BLOCK or (PAIRS and SCALE == SCALE_ROW)
    if HALVES:
        half_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 32 // STEP])
        acc_t = gl.zeros((BM // 2, BN), gl.float32, half_layout)
        acc_b = gl.zeros((BM // 2, BN), gl.float32, half_layout)
    else:
        acc = gl.zeros((HM, BN), gl.float32, acc_layout)
    pe_src = lat.pe
    pe_dst = out.pe
    if NWG > 1:
        pe_src = lat.pe.slice(R0, HM, dim=0)
        pe_dst = out.pe.slice(R0, HM, dim=0)
    grp = Group(total, k_scale, pe_scale, cols, pe_cols, pe_rows, st_cols, st_rows, pe_src, pe_dst, R0, HM,
                NWG, acc_layout, pe_layout, st_layout, WG if PAIRS else -1)
    c = 0  # weight chunks consumed
    n_tma = 0  # items staged: picks the staging buffer
    tiles_seen = 0
    fresh = 0  # ROPE_AHEAD: rope stores issued at the current tile's start
    tile_it = start  # ... and that tile's first item
    # A ping-pong group runs every other item of its run of whole heads: group 0 the K-nope
    # items, group 1 the V items, each item's chunks at its place in the weight stream.
    IT_STEP: gl.constexpr = 2 if PAIRS else 1
    NEXT: gl.constexpr = 1 - WG if PAIRS else -1
    # The run, then with a dynamic tail each claim the gatherer hands over, until one past
    # the last (an empty run): each an outer pass over its items.
    on = False
    if items.TAIL > 0:
        on, _, _ = items.tail_of(total)
    j = 0  # claims taken
    go = True
    while go:
        for it in range(start + WG if PAIRS else start, end, IT_STEP):
            item, tiles_seen = _item_at(items, it, start, end, total, tiles_seen)
            if items.TAIL > 0:
                if on and WG == 0:
                    p.claims.ask(it, start, end)
            if PAIRS:
                c = (it - start) * (NK * STEP)
            # A bf16 tile's rope is the gather warps' (_store_rope); a ping-pong run's, the
            # K-nope group's.
            if item.first and not LAT16 and (not PAIRS or WG == 0):
                issued = _stage_rope(items, lat, out, grp, item, start, end)
                if out.ROPE_AHEAD:
                    fresh = issued
                    tile_it = it
            w_row = items.weight_row(it)
            if COL_FACTOR:
                # The item's pieces may be K's and V's: a factor a column.
                k0, _, _ = items.piece(it, 0)
                k1, _, _ = items.piece(it, 1)
                factor = gl.where(gl.where(cols < BN // 2, k0, k1), k_scale * k_inv,
                                  k_scale * v_inv)
            elif OUT_FP8:
                if item.half == 0:
                    factor = k_scale * k_inv
                else:
                    factor = k_scale * v_inv
            else:
                factor = k_scale
            if HALVES:
                if SCALE == SCALE_ROW:
                    scale1 = gl.load(p.ws_ptr + w_row + gl.arange(0, BN, layout=one_layout))
                if PAIRS:
                    _wait_turn(p.turns, WG, (it - start) // 2)
                acc_t, acc_b, s_last, c = _block_scaled_item(
                    ring, lat, item, acc_t, acc_b, p.ws_ptr + (w_row // BN) * p.WS_LD, c, KV_C, WK,
                    p.turns, NEXT, SCALE == SCALE_BLOCK)
                if SCALE == SCALE_ROW:
                    scale = gl.convert_layout(scale1.to(gl.float32) * factor,
                                              gl.SliceLayout(0, half_layout))
                    out_t = (acc_t * scale[None, :]).to(out_ty)
                    out_b = (acc_b * scale[None, :]).to(out_ty)
                elif COL_FACTOR:
                    f = s_last * factor
                    out_t = (acc_t * f[None, :]).to(out_ty)
                    out_b = (acc_b * f[None, :]).to(out_ty)
                else:
                    f = s_last * factor
                    out_t = (acc_t * f).to(out_ty)
                    out_b = (acc_b * f).to(out_ty)
            elif SCALE == SCALE_E8M0:
                acc, out_t, c = _mx_item_product(ring, lat, item, grp, acc, c, start, factor, NK,
                                                 a_layout, acc16_layout, a16_layout, one_layout,
                                                 out_ty, WG, NWG)
                out_b = out_t
            else:
                if SCALE == SCALE_ROW:
                    # Fetched now, so their latency hides behind the wgmma.
                    scale = gl.load(p.ws_ptr + w_row + cols).to(gl.float32) * factor
                acc, c, a_next = _item_k_loop(ring, lat, item, acc, c, NK, STEP, a8_layout, WG, NWG,
                                              a_regs, LAT_REGS)
                if LAT_REGS:  # (a loop-carried value only then)
                    a_regs = a_next
                acc = _item_done(ring, lat, acc, c, item, NK, LAT_REGS)
                if SCALE == SCALE_ROW:
                    out_t = (acc * scale[None, :]).to(out_ty)
                elif COL_FACTOR:
                    out_t = (acc * factor[None, :]).to(out_ty)
                else:
                    out_t = (acc * factor).to(out_ty)
                out_b = out_t
            # The rope stores of the tile's start came after the staging buffer's last item
            # only for the tile's first NBUF items.
            newer = 0
            if out.ROPE_AHEAD:
                newer = gl.where(it - tile_it < out.bufs.shape[0], fresh, 0)
            n_tma = _store_item(items, lat, out, grp, item, n_tma, out_t, out_b, newer, HALVES)
        go = False
        if items.TAIL > 0:
            if on:
                if WG == 0 and end == start:  # an empty run asks at once
                    p.claims.asked_now()
                claim_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
                start, end = p.claims.take(items, total, j, claim_layout)
                j += 1
                go = end > start
    tma.store_wait(0)
