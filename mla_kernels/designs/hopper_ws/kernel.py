"""hopper_ws's kernel: shared memory and barriers, then the partitions side by side."""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .config import (
    BK,
    BM,
    BN,
    CLAIM_SLOTS,
    CLAIM_WIDTH,
    GATHER_WARPS,
    MX_CODES,
    MX_PACKED,
    SCALE_E8M0,
    WIDEN_WARPS,
)
from .gather import latent_gatherer
from .grid_dependency import allow_next_grid, wait_for_previous_grid
from .loaders import mx_widener, packed_loader, weight_loader
from .mma import mma_epilogue
from .prefetch import prefetch_share
from .schedule import Cache, Items
from .shared_buffers import Claims, Handles, LatentTile, Outputs, PackedRing, WeightRing


# tail_on changes from call to call (tail.py): never a constant.
@gluon.jit(do_not_specialize=["tail_on"])
def hopper_ws_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, ko_scale_ptr, vo_scale_ptr, counter_ptr, w_desc, k_desc, pe_desc,
    v_desc, stride_block, stride_slot, num_blocks, batch, num_indices, tail_on,
    KV_C: gl.constexpr, PE: gl.constexpr, NOPE: gl.constexpr, V: gl.constexpr,
    HEADS: gl.constexpr, BLOCK_SIZE: gl.constexpr, SEARCH_STEPS: gl.constexpr,
    STAGES: gl.constexpr, LOADER_REGS: gl.constexpr, GATHER_REGS: gl.constexpr,
    WK: gl.constexpr, SCALE: gl.constexpr, WS_LD: gl.constexpr, LAT16: gl.constexpr,
    CACHE_FP8: gl.constexpr, MMA_GROUPS: gl.constexpr, MMA_REGS: gl.constexpr,
    LAT_REGS: gl.constexpr, PAIRS: gl.constexpr, OUT_FP8: gl.constexpr,
    LAT_SPARE: gl.constexpr, MX_WIDENED: gl.constexpr, PDL: gl.constexpr,
    STAGING: gl.constexpr, PREFETCH_TABLE: gl.constexpr, PREFETCH_LATENT: gl.constexpr,
    ROW_BYTES: gl.constexpr, W_BYTES: gl.constexpr, GUESS_IDS: gl.constexpr,
    ROPE_AHEAD: gl.constexpr, TAIL: gl.constexpr, num_warps: gl.constexpr,
):
    # A head's weight rows, BN at a time: two items a head of 128 + 128 columns, 3.5 of GLM-5's.
    ITEMS_PER_TILE: gl.constexpr = HEADS * (NOPE + V) // BN
    NK: gl.constexpr = KV_C // BK
    NKP: gl.constexpr = triton.next_power_of_2(NK)  # K chunks rounded up to a power of two
    # Latent chunk slots: a tile's, and LAT_SPARE more (an fp8 tile), taken as a ring.
    SLOTS: gl.constexpr = NK + LAT_SPARE
    # Output staging buffers of an fp8 tile (NBUF, counted by the plan: its rule, or the
    # config's): two (an item's stores may still read one while
    # the next item stages), or one, whose 32 KB hold the fifth and sixth weight slots (each
    # item then waits for the last item's stores, which a deeper ring leaves long done).
    # FP8 outputs stage in half the bytes: two buffers fit wherever one bf16 one does.
    # MXFP4's packed chunks take the second bf16 buffer's room. MXFP4 widened once a call
    # (MX_WIDENED: a copy of each item as e4m3, two e4m3 parts or bf16, its rows' info at
    # ws_ptr) has none: its chunks come by TMA, as an fp8 weight's.
    MX: gl.constexpr = SCALE == SCALE_E8M0
    MX_IN: gl.constexpr = MX and not MX_WIDENED  # widened in the kernel
    NBUF: gl.constexpr = STAGING
    lat_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                  rank=2)
    bf16_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128,
                                                   element_bitwidth=16, rank=2)
    if LAT16:
        # A bf16 weight: the tile's latent as 2 NK bf16 K slices of [128 x 64] (128 KB at
        # kv_c = 512), wgmma's A operand as they are (over an fp8 cache widened on their way
        # in: _latent_widener); with a 4-deep ring and one output staging buffer 224 KB, so
        # the rope skips shared memory (_store_rope). The rope buffers below are stand-ins,
        # never read.
        lat = gl.allocate_shared_memory(gl.bfloat16, [2 * NK, BM, BK // 2], bf16_smem)
        pe_raw = lat
    else:
        lat = gl.allocate_shared_memory(gl.float8e4nv, [SLOTS, BM, BK], lat_smem)
        pe_raw = gl.allocate_shared_memory(gl.float8e4nv, [BM, PE],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    if MX_IN:
        # MXFP4: the widener writes [128 x 128] e4m3 (or [128 x 64] bf16) chunks, each
        # item's factors and route in its info entry, from the packed loader's slots: an
        # item's codes, [128 x 64] bytes of packed e2m1 a K chunk (w_desc's blocks).
        w_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, BK], lat_smem)
        info = gl.allocate_shared_memory(gl.int32, [STAGES + 1, BN],  # rank-1 entries
                                         gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        pk_slots = gl.allocate_shared_memory(gl.uint8, [MX_PACKED, BN, BK // 2], w_desc.layout)
        codes = gl.allocate_shared_memory(gl.uint8, [MX_CODES, BN, 4 * NKP],
                                          gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
        pk_ready = gl.allocate_shared_memory(gl.int64, [MX_PACKED, 1], mbarrier.MBarrierLayout())
        pk_empty = gl.allocate_shared_memory(gl.int64, [MX_PACKED, 1], mbarrier.MBarrierLayout())
        cd_ready = gl.allocate_shared_memory(gl.int64, [MX_CODES, 1], mbarrier.MBarrierLayout())
        cd_empty = gl.allocate_shared_memory(gl.int64, [MX_CODES, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(MX_PACKED):
            mbarrier.init(pk_ready.index(b), count=1)
            mbarrier.init(pk_empty.index(b), count=1)
        for b in gl.static_range(MX_CODES):
            mbarrier.init(cd_ready.index(b), count=1)
            mbarrier.init(cd_empty.index(b), count=1)
        packed = PackedRing(pk_slots, pk_ready, pk_empty, codes, cd_ready, cd_empty,
                            MX_PACKED, MX_CODES)
    else:
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, WK], w_desc.layout)
        if MX:  # widened once a call: e4m3 or (twice as many) bf16 chunks, the rows' info
            info = gl.allocate_shared_memory(gl.int32, [STAGES + 1, BN],
                                             gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    lat_ready = gl.allocate_shared_memory(gl.int64, [SLOTS + 1, 1], mbarrier.MBarrierLayout())
    lat_empty = gl.allocate_shared_memory(gl.int64, [SLOTS + 1, 1], mbarrier.MBarrierLayout())
    if not MX:
        if LAT16:
            info = lat_ready  # a stand-in, never read (a partition's argument cannot be None)
        else:
            # Unused (512 bytes): a partition's argument cannot be None in newer Gluon.
            info = gl.allocate_shared_memory(gl.int32, [1, BN],
                                             gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    if LAT16:
        out_buf = gl.allocate_shared_memory(k_desc.dtype, [2 if OUT_FP8 else 1, BM, BN],
                                            k_desc.layout)
        pe_out = out_buf
    else:
        # The ping-pong groups (PAIRS) stage their items in a buffer each.
        out_buf = gl.allocate_shared_memory(k_desc.dtype, [2 if PAIRS else NBUF, BM, BN],
                                            k_desc.layout)
        pe_out = gl.allocate_shared_memory(pe_desc.dtype, [BM, PE], pe_desc.layout)

    w_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    w_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    # One barrier per latent chunk slot and a last one for the rope, both ways: a slot is
    # refilled as soon as the last item of its chunk's tile has multiplied it.
    # The ping-pong groups' turns at the tensor cores: each group's K loop waits for the
    # other's to be issued (a stand-in otherwise, never used).
    if PAIRS:
        turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for g in gl.static_range(2):
            mbarrier.init(turns.index(g), count=1)
    else:
        turns = lat_ready
    # A weight chunk is read by every MMA group, or with PAIRS by the one whose item it is.
    READERS: gl.constexpr = 1 if PAIRS else MMA_GROUPS
    for s in gl.static_range(STAGES):
        mbarrier.init(w_ready.index(s), count=1)
        mbarrier.init(w_empty.index(s), count=READERS)  # freed by each reader
    for kb in gl.static_range(SLOTS + 1):
        if LAT16 and CACHE_FP8:  # one arrival a chunk, after its stores (publish_slot)
            mbarrier.init(lat_ready.index(kb), count=1)
        else:  # each gather thread's arrival, when its own cp.async copies have landed
            mbarrier.init(lat_ready.index(kb), count=GATHER_WARPS * 32)
    # Every MMA group reads every latent chunk; with PAIRS only the K-nope group the rope.
    for kb in gl.static_range(SLOTS):
        mbarrier.init(lat_empty.index(kb), count=MMA_GROUPS)
    mbarrier.init(lat_empty.index(SLOTS), count=READERS)

    if not MX_IN:  # stand-ins, never read
        packed = PackedRing(lat_ready, lat_ready, lat_ready, lat_ready, lat_ready, lat_ready,
                            1, 1)
    # The dynamic tail's claims, read by the weight loader and each MMA group. Its runs are
    # the copier's over an fp8 tile, one item at a time (the plan's rule).
    gl.static_assert(TAIL == 0 or not (PAIRS or MX or LAT16), "a dynamic tail: fp8 tile only")
    if TAIL > 0:
        claim_slots = gl.allocate_shared_memory(gl.int32, [CLAIM_SLOTS, CLAIM_WIDTH],
                                                gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        claim_ready = gl.allocate_shared_memory(gl.int64, [CLAIM_SLOTS, 1],
                                                mbarrier.MBarrierLayout())
        claim_empty = gl.allocate_shared_memory(gl.int64, [CLAIM_SLOTS, 1],
                                                mbarrier.MBarrierLayout())
        asked = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
        for j in gl.static_range(CLAIM_SLOTS):
            mbarrier.init(claim_ready.index(j), count=1)
            mbarrier.init(claim_empty.index(j), count=1 + MMA_GROUPS)
        mbarrier.init(asked.index(0), count=1)
        claims = Claims(claim_slots, claim_ready, claim_empty, asked)
    else:
        claims = Claims(lat_ready, lat_ready, lat_ready, lat_ready)
    # Each item one head's K-nope or V (else two pieces of BN / 2 columns: Items.piece).
    WHOLE: gl.constexpr = NOPE % BN == 0 and V % BN == 0
    p = Handles(Items(cs_ptr, batch, NOPE, V, PE, KV_C, ITEMS_PER_TILE, PAIRS, HEADS, WHOLE,
                      counter_ptr, tail_on, TAIL),
                Cache(k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, stride_block,
                      stride_slot, num_blocks, num_indices, BLOCK_SIZE, SEARCH_STEPS,
                      CACHE_FP8, GUESS_IDS),
                w_desc, w_ptr, ws_ptr, WK, SCALE, WS_LD,
                WeightRing(w_ring, w_ready, w_empty, info, STAGES, MX_WIDENED), packed,
                LatentTile(lat, pe_raw, lat_ready, lat_empty, LAT16, NK, SLOTS),
                Outputs(k_out_ptr, v_out_ptr, k_desc, pe_desc, v_desc, out_buf, pe_out,
                        ko_scale_ptr, vo_scale_ptr, OUT_FP8, ROPE_AHEAD), turns, claims)
    # Launched overlapped (PDL): the setup above reads no global memory. The kernel before
    # may still be writing anything this call reads (the cache, its indices, the weight:
    # the widening kernel writes a widened copy), so the partitions start once it has
    # finished; the next kernel may launch at once, its own wait guarding its reads. Before
    # the wait, programs with no items may prefetch inputs into L2 (prefetch.py: why that
    # cannot change what is read after it).
    if PDL:
        if PREFETCH_TABLE or PREFETCH_LATENT or W_BYTES > 0:
            prefetch_share(p.items, p.cache, w_ptr, PREFETCH_TABLE, PREFETCH_LATENT, ROW_BYTES,
                           W_BYTES, num_warps)
        wait_for_previous_grid()
        allow_next_grid()
    # The weight partition: MXFP4's widener (four warps) or the TMA loader (one); with two
    # MMA groups, a second MMA partition. The partitions and their warps differ, so each
    # set is its own call: a list of partitions cannot be held in a variable.
    # Two groups split each item's rows, or with PAIRS take whole items (one row group).
    NWG: gl.constexpr = 1 if PAIRS else 2
    if MMA_GROUPS == 2:
        gl.warp_specialize([
            (mma_epilogue, (p, 0, NWG, LAT_REGS, num_warps)),
            (mma_epilogue, (p, 1, NWG, LAT_REGS, num_warps)),
            (latent_gatherer, (p,)),
            (weight_loader, (p,)),
        ], [num_warps, GATHER_WARPS, 1], [MMA_REGS, GATHER_REGS, LOADER_REGS])
    elif MX_IN:
        gl.warp_specialize([
            (mma_epilogue, (p, 0, 1, False, num_warps)),
            (mx_widener, (p,)),
            (latent_gatherer, (p,)),
            (packed_loader, (p,)),
        ], [WIDEN_WARPS, GATHER_WARPS, 1], [LOADER_REGS, GATHER_REGS, 24])
    else:
        gl.warp_specialize([
            (mma_epilogue, (p, 0, 1, False, num_warps)),
            (weight_loader, (p,)),
            (latent_gatherer, (p,)),
        ], [1, GATHER_WARPS], [LOADER_REGS, GATHER_REGS])
