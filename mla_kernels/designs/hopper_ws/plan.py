"""hopper_ws's host plan: the grid, the work model, the TMA descriptors and the launch, and
the predicates of what it serves."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
import triton
from triton.experimental.gluon import language as gl

from ...core.devices import DeviceSpec
from ...core.formats import as_uint8
from ...core.problem import GatherArgs, Problem
from ..jit import SCALE_CODES, search_steps
from ..launch import DescriptorCache, JitLauncher
from ..portable_plan import no_launch
from .config import (
    LOCKSTEP_ITEMS,
    MAX_RING_DEPTH,
    MX_ROUTE_BF16,
    MX_ROUTE_E4M3,
    MX_ROUTE_SPLIT,
    MX_SPAN,
    MX_SPLIT_SPAN,
    PREFETCH_PARTS,
    TILE,
    WIDEN_MAX_STAGES,
    WIDEN_MIN_STAGES,
    HopperWSConfig,
    whole_items,
)
from .kernel import hopper_ws_kernel
from .schedule import lockstep_granule
from .tail import stream_counter
from .widening import (
    WidenedItems,
    WidenedWeight,
    widened_items_shapes,
    widened_problem,
    widened_shapes,
)


def items_per_tile(prob: Problem) -> int:
    """A token tile's work items: the heads' weight rows, TILE at a time."""
    return prob.num_heads * (prob.nope_dim + prob.v_dim) // TILE


def hopper_ws_grid(prob: Problem, max_context_len: int | None, config: HopperWSConfig,
                   device: DeviceSpec) -> tuple[int, ...]:
    items = triton.cdiv(prob.out_rows, TILE) * items_per_tile(prob)
    return (min(items, config.programs or device.compute_units),)


def hopper_ws_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
                   config: HopperWSConfig, device: DeviceSpec) -> int:
    # As the kernel splits its items: at least two programs a token tile give each tile
    # min(parts, items a tile) non-empty shares; otherwise contiguous runs of items (of
    # whole granules in lockstep, where fewer granules than programs leave some idle).
    # With the ping-pong schedule the runs are split in heads (two items each).
    launched = hopper_ws_grid(prob, max_context_len, config, device)[0]
    tiles = -(-sum(contexts) // TILE)
    unit = 2 if config.pingpong else 1
    per_tile = items_per_tile(prob)
    if tiles == 0:
        return 0
    if 2 * tiles <= launched:
        return tiles * min(launched // tiles, per_tile // unit)
    g = lockstep_granule(per_tile, tiles, launched, unit)
    return min(launched, tiles * per_tile // (g or unit))


@lru_cache(maxsize=16)
def _smem_layout(rows: int, cols: int, dtype: torch.dtype):
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16,
                torch.float8_e4m3fn: gl.float8e4nv, torch.uint8: gl.uint8}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


def _descriptors(shape, strides, dtype: torch.dtype, rows: int, cols: int) -> DescriptorCache:
    """TMA descriptors of [rows, cols] blocks, cached per address (base.DescriptorCache)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = _smem_layout(rows, cols, dtype)
    return DescriptorCache(lambda base, shape, strides: TensorDescriptor(
        base, shape, strides, [rows, cols], layout), shape, strides, dtype)


def prepare_hopper_ws(prob: Problem, t: GatherArgs, max_context_len: int | None,
                      config: HopperWSConfig, device: DeviceSpec, widened_items: bool = False):
    """The plan of one problem class (``widened_items``: the launch that follows MXFP4's
    widening once a call, over its copy and info rather than the weight)."""
    if not prob.cache_is_fp8 and prob.weight_dtype != torch.bfloat16:
        # An fp8 or MXFP4 weight over a bf16 cache: widened to a bf16 copy ahead of the
        # kernel (widening.py), which then runs the bf16 weight's path. Only shapes,
        # strides and dtypes of the copy are read here: meta tensors stand in.
        shape, factor_shape = widened_shapes(prob, t.kv_proj_weight.shape[0])
        meta = t._replace(
            kv_proj_weight=torch.empty(shape, dtype=torch.bfloat16, device="meta"),
            kv_proj_scale=(t.kv_proj_scale if factor_shape is None else
                           torch.empty(factor_shape, dtype=torch.float32, device="meta")))
        main = prepare_hopper_ws(widened_problem(prob), meta, max_context_len, config, device)
        if main is no_launch:
            return no_launch
        return WidenedWeight(prob, t.kv_proj_weight, t.kv_proj_scale, main)
    mx = prob.scale == "e8m0"
    if mx and prob.cache_is_fp8 and config.mxfp4_widening == "call" and not widened_items:
        # MXFP4 over an fp8 cache widened once a call (widening.WidenedItems): each item's
        # rows as e4m3 or bf16 in a copy of 2 kv_c bytes a row, each row's route and factor
        # in an int32 info; the kernel loads the copy by TMA. Meta tensors stand in.
        shape, info_shape = widened_items_shapes(t.kv_proj_weight.shape[0], prob.kv_c_dim)
        meta = t._replace(
            kv_proj_weight=torch.empty(shape, dtype=torch.float8_e4m3fn, device="meta"),
            kv_proj_scale=torch.empty(info_shape, dtype=torch.int32, device="meta"))
        main = prepare_hopper_ws(prob, meta, max_context_len, config, device, True)
        if main is no_launch:
            return no_launch
        return WidenedItems(t.kv_proj_weight, t.kv_proj_scale, prob.kv_c_dim, main)
    mx_in = mx and not widened_items  # widened in the kernel
    # A bf16 weight multiplies a bf16 latent tile (over an fp8 cache widened at the gather),
    # or, over an fp8 cache with the latent in registers, the fp8 tile as gathered, each MMA
    # group widening its rows into registers once a tile.
    bf16_regs = (prob.weight_dtype == torch.bfloat16 and prob.cache_is_fp8
                 and config.latent_in_registers)
    lat16 = prob.weight_dtype == torch.bfloat16 and not bf16_regs
    if mx_in and config.ring_depth < WIDEN_MIN_STAGES:
        # The widener holds one slot while it waits for the next: with two, the MMA warps
        # would wait for the held one.
        raise ValueError(f"config.ring_depth: expected {WIDEN_MIN_STAGES} or more for an MXFP4 "
                         f"weight widened in the kernel over an fp8 cache (its chunks are "
                         f"handed over in pairs), got {config.ring_depth}")
    if mx_in and config.ring_depth > WIDEN_MAX_STAGES:
        raise ValueError(f"config.ring_depth: expected {WIDEN_MAX_STAGES} or less for an MXFP4 "
                         f"weight widened in the kernel over an fp8 cache (its packed chunks "
                         f"take the room of deeper rings), got {config.ring_depth}")
    grid = hopper_ws_grid(prob, max_context_len, config, device)
    if 0 in grid or prob.batch == 0:
        return no_launch
    rows = t.k_prefix.shape[0]
    k_cols, v_cols = prob.num_heads * (prob.nope_dim + prob.pe_dim), prob.num_heads * prob.v_dim
    w, ws = t.kv_proj_weight, t.kv_proj_scale
    if mx_in:  # MXFP4 as uint8 (Triton 3.6 takes no float4 or e8m0 dtype): its packed bytes
        # by TMA, [128 x 64] a K chunk; its codes by pointer.
        w_view = as_uint8 if w.dtype != torch.uint8 or ws.dtype != torch.uint8 else None
        ws = as_uint8(ws)
        wu = as_uint8(w)
        w_desc = _descriptors(list(wu.shape), list(wu.stride()), torch.uint8, TILE, TILE // 2)
        wk = TILE  # e4m3 chunks in the ring
    else:
        w_view = None
        # Weight chunks of 128-byte rows: [128 x 128] fp8 or [128 x 64] bf16, 16 KB either way.
        wk = TILE // w.element_size()
        w_desc = _descriptors(list(w.shape), list(w.stride()), w.dtype, TILE, wk)
    groups = config.mma_groups
    pingpong = config.pingpong
    whole = whole_items(prob.nope_dim, prob.v_dim)
    if pingpong and not whole:
        raise ValueError("config.pingpong: expected False for heads of "
                         f"{prob.nope_dim} K-nope and {prob.v_dim} V columns (the ping-pong "
                         "groups take a head's K-nope and V items; these heads' items mix "
                         "them), got True")
    if pingpong and groups != 2:
        raise ValueError("config.pingpong: expected False with one MMA group (the ping-pong "
                         "schedule runs two groups in turn; set mma_groups=2), got True")
    if pingpong and config.latent_in_registers:
        raise ValueError("config.latent_in_registers: expected False with pingpong (each "
                         "group's whole-tile accumulator takes the registers), got True")
    # MXFP4 widened once a call reaches the MMA warps as an fp8 per-row weight's chunks do
    # (or as bf16 ones, item by item).
    two_group_scales = ("row", "block") if pingpong else ("row", "e8m0") if widened_items \
        else ("none",) if bf16_regs else ("row",)
    if groups == 2 and not (prob.scale in two_group_scales and prob.cache_is_fp8
                            and not lat16):
        raise ValueError("config.mma_groups: expected 1 here (two MMA groups take an fp8 "
                         f"per-row weight over an fp8 cache, or MXFP4 widened once a call, or "
                         f"with pingpong a per-row or per-block fp8 one, or with "
                         f"latent_in_registers an unscaled bf16 one), got 2 "
                         f"(weight format {prob.weight_format}, scale {prob.scale}, cache "
                         f"{prob.cache_dtype})")
    if mx and config.latent_in_registers:
        raise ValueError("config.latent_in_registers: expected False for an MXFP4 weight (its "
                         "bf16 route reads the latent from shared memory), got True")
    spare = config.spare_latent_chunks
    if spare and not pingpong:
        raise ValueError("config.spare_latent_chunks: expected 0 without pingpong (spare latent "
                         f"slots are the ping-pong schedule's), got {spare}")
    if pingpong and pingpong_smem(prob, config.ring_depth, spare) > device.smem_per_program:
        deepest = max_pingpong_ring(prob, device, spare)
        raise ValueError(f"config.ring_depth: expected at most {deepest} with pingpong, {spare} "
                         f"spare latent chunks and {prob.out_dtype} outputs (each group stages "
                         f"its own item: {pingpong_smem(prob, config.ring_depth, spare)} bytes of "
                         f"shared memory asked, {device.smem_per_program} there), got "
                         f"{config.ring_depth}")
    staging = config.staging_buffers
    if staging is not None and (lat16 or pingpong):
        raise ValueError("config.staging_buffers: expected None with a bf16 latent tile or "
                         f"pingpong (their staging is fixed), got {staging}")

    def two_fit(depth: int) -> bool:
        """Whether two output staging buffers fit beside a ring of ``depth`` over an fp8
        latent tile: FP8 staging, or bf16 beside 4 slots or fewer and no in-kernel MXFP4
        widener's packed slots."""
        return (depth <= 4 and not mx_in) or prob.out_is_fp8

    def buffers(depth: int) -> int:
        """The kernel's staging buffers (NBUF): the config's, else two where they fit."""
        return staging or (2 if two_fit(depth) else 1)

    if staging == 2 and not two_fit(config.ring_depth):
        raise ValueError("config.staging_buffers: expected 1 or None here (two bf16 staging "
                         f"buffers fit beside rings of 4 or less), got 2 (ring_depth "
                         f"{config.ring_depth})")
    nbuf = buffers(config.ring_depth)
    if not (lat16 or pingpong or mx_in):  # (each of those has its own rule above or below)
        asked = fp8_tile_smem(prob, config.ring_depth, nbuf, widened_items)
        if asked > device.smem_per_program:
            deepest = max(d for d in range(2, MAX_RING_DEPTH + 1) if fp8_tile_smem(
                prob, d, buffers(d), widened_items) <= device.smem_per_program)
            raise ValueError(f"config.ring_depth: expected at most {deepest} over an fp8 latent "
                             f"tile with {prob.out_dtype} outputs and {nbuf} staging buffer(s) "
                             f"({asked} bytes of shared memory asked, {device.smem_per_program} "
                             f"there), got {config.ring_depth}")
    if config.latent_in_registers and groups != 2:
        raise ValueError("config.latent_in_registers: expected False with one MMA group (the "
                         "latent rows take the registers of two groups' halves; set "
                         "mma_groups=2), got True")
    if config.ring_depth > 4 and lat16:
        # A bf16 latent tile (128 KB) leaves room for four weight slots.
        raise ValueError("config.ring_depth: expected 2 to 4 with a bf16 latent tile (a bf16 "
                         f"weight, or any weight over a bf16 cache), got {config.ring_depth}")
    if config.rope_ahead and (lat16 or pingpong or not whole):
        why = ("a bf16 latent tile's rope is the gather warps'" if lat16 else
               "a ping-pong run stages its rope in one group" if pingpong else
               f"heads of {prob.nope_dim} K-nope and {prob.v_dim} V columns store their "
               "rope with an item's piece")
        raise ValueError(f"config.rope_ahead: expected False here ({why}), got True")
    tail = config.tail_items
    if tail and (lat16 or pingpong or mx or items_per_tile(prob) >= LOCKSTEP_ITEMS.value):
        why = ("its claims are gathered into an fp8 latent tile" if lat16 else
               "a ping-pong run holds whole heads" if pingpong else
               "an MXFP4 weight's items are handed over by position in the run" if mx else
               f"{items_per_tile(prob)} items a tile go in lockstep runs")
        raise ValueError(f"config.tail_items: expected 0 here ({why}), got {tail}")
    # Rows of one TMA store: a group's share of a tile, or with pingpong the whole tile.
    srows = TILE if pingpong else TILE // groups
    # Columns of one store: an item, or one of its two pieces (heads of other widths).
    scols = TILE if whole else TILE // 2
    k_desc = _descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, srows, scols)
    pe_desc = _descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, srows, prob.pe_dim)
    v_desc = _descriptors([rows, v_cols], [v_cols, 1], t.v_prefix.dtype, srows, scols)
    ints = (t.k_buffer.stride(0), t.k_buffer.stride(1), t.k_buffer.shape[0], prob.batch,
            t.kv_indices.shape[0])
    device_index = t.k_buffer.device.index
    prefetch = PREFETCH_PARTS[config.prefetch]
    if prefetch and not config.overlap_launch:
        raise ValueError("config.prefetch: expected 'none' without overlap_launch (its "
                         "prefetches come before the overlapped launch's wait), got "
                         f"{config.prefetch!r}")
    # The weight's bytes to prefetch: a contiguous weight read by TMA as it is given.
    w_bytes = (w.numel() * w.element_size()
               if "weight" in prefetch and not mx_in and w.is_contiguous() else 0)
    cache_fp8 = prob.cache_is_fp8
    consts = dict(KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
                  HEADS=prob.num_heads, BLOCK_SIZE=prob.block_size,
                  SEARCH_STEPS=search_steps(prob.batch),
                  STAGES=config.ring_depth,
                  # MXFP4's widener holds an item's codes, a packed chunk and a widened one
                  # (its loader's 24 are the kernel's); the gatherer fits in 88 (no spills,
                  # compile-checked), 96 with the rope in registers, 200 widening the latent
                  # (a whole tile of words in registers; the MMA warps keep 256:
                  # 4 x 32 x (256 + 200 + 24) <= 64K).
                  LOADER_REGS=160 if mx_in else 24,  # MXFP4: the widener's
                  # Two groups with a bf16 weight's latent in registers (128 a thread of
                  # their 224) leave the gatherer 40: 2 x 224 + 40 + 24 = 512.
                  GATHER_REGS=(40 if bf16_regs else 88 if mx_in or groups == 2
                               else 200 if lat16 and cache_fp8 else 96),
                  num_warps=4, WK=wk, LAT16=lat16, CACHE_FP8=cache_fp8,
                  # A block scale [ceil(N / 128), kv_c / 128] is read a block row at a time.
                  SCALE=SCALE_CODES[prob.scale],
                  WS_LD=ws.stride(0) if prob.scale in ("block", "e8m0") else 0,
                  # 4 + 1 (MXFP4: 4) + 4 warps launch as three warpgroups: 12 x 32 x 168 <=
                  # 64K registers; the partitions' register counts then move the rest to the
                  # MMA warps. Two MMA groups: four warpgroups at 128, then 2 x 200 + 88 + 24.
                  MMA_GROUPS=groups, MMA_REGS=224 if bf16_regs else 200,
                  LAT_REGS=config.latent_in_registers,
                  PAIRS=pingpong, OUT_FP8=prob.out_is_fp8, LAT_SPARE=spare,
                  MX_WIDENED=widened_items, STAGING=nbuf,
                  # Overlapped launch: the attribute and the kernel's wait go together.
                  PDL=config.overlap_launch, launch_pdl=config.overlap_launch,
                  PREFETCH_TABLE="table" in prefetch, PREFETCH_LATENT="latent" in prefetch,
                  ROW_BYTES=(prob.kv_c_dim + prob.pe_dim) * t.k_buffer.element_size(),
                  W_BYTES=w_bytes, GUESS_IDS=config.early_block_ids,
                  ROPE_AHEAD=config.rope_ahead, TAIL=tail,
                  # MXFP4's 4 + 4 + 4 + 1 warps, four warpgroups: as two MMA groups.
                  maxnreg=168 if groups == 1 and not mx_in else 128)
    has_ws = ws is not None

    out_fp8 = prob.out_is_fp8

    def make(c: GatherArgs) -> list:
        w, ws = c.kv_proj_weight, c.kv_proj_scale
        if w_view is not None and type(w) is not int:  # addresses (ints) need no view
            w, ws = w_view(w), w_view(ws)
        # A bf16 cache's k_scale (it may be None) is never read: a stand-in pointer.
        ks = c.k_scale if cache_fp8 else c.k_buffer
        # The dynamic tail's counter (tail.py); where there is none, the tail is off and an
        # int32 stand-in is never read.
        got = stream_counter(device_index) if tail and device_index is not None else None
        counter = (c.kv_indptr if got is None else got[1] if type(ks) is int else got[0])
        return [c.k_buffer, ks, c.kv_indptr, c.kv_indices, c.kv_prefix_sum_context_lens,
                # Every weight arrives by TMA: its pointer only for prefetches (else a
                # stand-in, never read).
                w if w_bytes else ks,
                # A weight with no scale (bf16): a pointer the kernel never reads.
                ws if has_ws else ks,
                c.k_prefix, c.v_prefix,
                # The FP8 outputs' scales; other outputs have none: stand-ins, never read.
                c.k_out_scale if out_fp8 else ks, c.v_out_scale if out_fp8 else ks,
                counter,
                w_desc(w), k_desc(c.k_prefix), pe_desc(c.k_prefix),
                v_desc(c.v_prefix), *ints, int(got is not None)]
    return JitLauncher(hopper_ws_kernel, grid, 22, consts, make)


def pingpong_smem(prob: Problem, ring_depth: int, spare: int = 0) -> int:
    """Shared memory the ping-pong schedule's kernel asks (over an fp8 cache): the latent
    tile, its ``spare`` extra chunk slots and its rope, the weight ring, a staging buffer for
    each group and the rope's, the barriers and the unused info entry."""
    out = torch.empty((), dtype=prob.out_dtype).element_size()
    slots = prob.kv_c_dim // TILE + spare
    tile = TILE * (slots * TILE + prob.pe_dim)
    stage = (2 * TILE + prob.pe_dim) * TILE * out
    barriers = 8 * (2 * (slots + 1) + 2 * ring_depth + 2)
    return tile + ring_depth * TILE * TILE + stage + barriers + 4 * TILE


SMEM_ALIGN_SLACK = 2048  # bytes: the compiler's padding between shared allocations, and more


def fp8_tile_smem(prob: Problem, ring_depth: int, staging: int, mx_widened: bool = False) -> int:
    """Shared memory the kernel asks over an fp8 latent tile without the ping-pong schedule,
    MXFP4 widened in the kernel aside: the tile and its rope, the weight ring, ``staging``
    output staging buffers and the rope's, the barriers, and the info entries (a ring's and
    one more for MXFP4 widened once a call, else one unused), and room for the compiler's
    alignment of them (up to 1,040 bytes compiled, triton 3.6 and 3.9)."""
    out = torch.empty((), dtype=prob.out_dtype).element_size()
    slots = prob.kv_c_dim // TILE
    tile = TILE * (slots * TILE + prob.pe_dim)
    stage = (staging * TILE + prob.pe_dim) * TILE * out
    barriers = 8 * (2 * (slots + 1) + 2 * ring_depth)
    info = 4 * TILE * ((ring_depth + 1) if mx_widened else 1)
    return tile + ring_depth * TILE * TILE + stage + barriers + info + SMEM_ALIGN_SLACK


def max_pingpong_ring(prob: Problem, device: DeviceSpec, spare: int = 0) -> int:
    """The deepest weight ring the ping-pong schedule fits in ``device``'s shared memory
    beside ``spare`` extra latent chunk slots."""
    return max((d for d in range(2, 7)
                if pingpong_smem(prob, d, spare) <= device.smem_per_program), default=0)


def mx_routes(scale: torch.Tensor, cache_is_fp8: bool = True, widening: str = "call"
              ) -> torch.Tensor:
    """Each 128-row block's (work item's) route through the kernel for an MXFP4 weight, from
    its e8m0 scale [N, K/32] (``config.MX_ROUTE_*``, int64): over an fp8 cache e4m3 when its
    rows' codes all span at most MX_SPAN binades, else, widened once a call (``widening``
    "call"), the split route's two e4m3 parts when they span at most MX_SPLIT_SPAN, else
    bf16; over a bf16 cache bf16 for every item (the weight is widened to a bf16 copy ahead
    of the kernel: ``widening``). The kernel decides the same on the device, per item; this
    host-side copy of the rule is for reporting (the matrix's route shares) and tests."""
    codes = as_uint8(scale).to(torch.int32)
    span = (codes.amax(dim=1) - codes.amin(dim=1)).view(-1, TILE).amax(dim=1)
    routes = torch.full_like(span, MX_ROUTE_BF16.value, dtype=torch.int64)
    if not cache_is_fp8:
        return routes
    if widening == "call":
        routes[span <= MX_SPLIT_SPAN.value] = MX_ROUTE_SPLIT.value
    routes[span <= MX_SPAN.value] = MX_ROUTE_E4M3.value
    return routes


def fp8_route(scale: torch.Tensor, cache_is_fp8: bool = True) -> torch.Tensor:
    """Which work items of an MXFP4 weight run one fp8 x fp8 K loop (the e4m3 route of
    ``mx_routes``), as booleans."""
    return mx_routes(scale, cache_is_fp8) == MX_ROUTE_E4M3.value


def supports(prob: Problem) -> bool:
    """The shapes and formats the kernel was written for: an fp8 e4m3fn or a bf16 cache;
    an fp8 e4m3fn weight with a per-row or per-128x128-block scale, a bf16 weight with
    none, a per-row or a per-block scale (scales float32 or bf16), or MXFP4; nope and v
    multiples of 64 (128 and 128: Kimi-K3, DeepSeek-V3; 192 and 256: GLM-5) with the heads'
    weight rows a multiple of 128 (whole items), pe = 64, kv_c a multiple of 128 up to 512
    (the whole latent tile lives in shared memory: README.md), bf16, fp16 or FP8 (e4m3fn)
    outputs, and a 16-byte aligned weight and outputs (TMA's rule)."""
    weight_ok = ((prob.weight_dtype == torch.float8_e4m3fn
                  and (prob.weight_format, prob.scale) in (("fp8_row", "row"),
                                                           ("fp8_block", "block")))
                 or (prob.weight_dtype == torch.bfloat16 and prob.weight_format == "bf16"
                     and prob.scale in ("none", "row", "block"))
                 or (prob.weight_format == "mxfp4" and prob.scale == "e8m0"))
    heads_ok = (prob.nope_dim % (TILE // 2) == 0 and prob.v_dim % (TILE // 2) == 0
                and prob.nope_dim > 0 and prob.v_dim > 0
                and prob.num_heads * (prob.nope_dim + prob.v_dim) % TILE == 0)
    return (weight_ok and heads_ok and prob.pe_dim == 64
            and prob.kv_c_dim % TILE == 0 and prob.kv_c_dim <= 4 * TILE
            and prob.cache_dtype in (torch.float8_e4m3fn, torch.bfloat16)
            and prob.scale_dtype in (None, torch.bfloat16)
            and prob.out_dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn)
            and prob.aligned16)


def serves(prob: Problem, device: DeviceSpec) -> bool:
    """Supported problems on an sm_90 GPU (Gluon kernels are compiled, never interpreted)."""
    return device.sm == 90 and supports(prob)


def row_extras(prob: Problem, args: GatherArgs, config: HopperWSConfig | None = None
               ) -> dict[str, float]:
    """The measurement columns this design reports of its own: an MXFP4 weight's shares of
    work items on the e4m3 route and on the split route (under ``config``: the default's
    where None)."""
    if prob.weight_format != "mxfp4":
        return {}
    widening = (config or HopperWSConfig()).mxfp4_widening
    routes = mx_routes(args.kv_proj_scale, prob.cache_is_fp8, widening)
    return {"fp8_route_share": float((routes == MX_ROUTE_E4M3.value).double().mean()),
            "split_route_share": float((routes == MX_ROUTE_SPLIT.value).double().mean())}
