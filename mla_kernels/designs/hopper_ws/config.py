"""hopper_ws's launch config and the constants its kernel and host plan share."""

from __future__ import annotations

from dataclasses import dataclass

from triton.experimental.gluon import language as gl

from ...core.value_rules import choice, flag, int_in, one_of, optional
from ..design import DesignConfig
from ..jit import SCALE_CODES

TILE = 128  # tokens per tile, output columns per item (one head-half), K per weight chunk
BM = gl.constexpr(TILE)  # tokens per tile
BN = gl.constexpr(TILE)  # output columns per item: one head-half
BK = gl.constexpr(TILE)  # K per weight chunk (128 fp8 bytes: one 128-byte swizzle row)
GATHER_WARPS = gl.constexpr(4)


def whole_items(nope: int, v: int) -> bool:
    """Whether each item's output is one head's K-nope or V columns (Kimi-K3, DeepSeek-V3:
    128 of each), rather than two pieces of TILE / 2 columns, each K-nope or V of some head
    (GLM-5's 192 and 256: items are the heads' weight rows, TILE at a time, in order).
    The kernel asks the same of its constants."""
    return nope % TILE == 0 and v % TILE == 0
# How the weight's scale applies (the SCALE constant; jit.SCALE_CODES' numbering).
SCALE_NONE = gl.constexpr(SCALE_CODES["none"])
SCALE_ROW = gl.constexpr(SCALE_CODES["row"])
SCALE_BLOCK = gl.constexpr(SCALE_CODES["block"])
SCALE_E8M0 = gl.constexpr(SCALE_CODES["e8m0"])

# Lockstep runs. Every program sweeps its tiles' items head by head; with equal runs each
# starts at its own head, so together they keep the whole weight in use, and a weight of
# many heads (DeepSeek-V3 TP1: 16.8 MB of fp8) falls out of L2 between two programs' reads
# of a row. Runs of whole granules (a tile, or 1/2 ... 1/8 of one) start every program at
# one of a few heads, so programs read each weight chunk at about the same time. A small
# weight stays in L2 anyway and would pay only the granules' imbalance, so only weights of
# 64 heads or more (README.md: what it bought).
LOCKSTEP_ITEMS = gl.constexpr(128)  # items a tile (2 x heads) from which runs go in lockstep
LOCKSTEP_SPLITS = gl.constexpr(4)  # granules tried: a tile, 1/2, 1/4, 1/8 of one

# The dynamic tail (HopperWSConfig.tail_items). Programs end their static runs at different
# times, by more from call to call than any static split can follow; the last items are
# handed out instead, a claim at a time, from a counter in global memory, to whichever
# program's gatherer asks first. The tail holds TAIL_CLAIMS claims a program, at most a
# quarter of the items. A gatherer claims only when its MMA warps ask, TAIL_LEAD items before
# their run's end (claims made sooner go out in launch order, not in order of need), which
# leaves the claim, its block ids and its tile's copies that long to land.
TAIL_CLAIMS = gl.constexpr(2)
TAIL_LEAD = gl.constexpr(3)
CLAIM_SLOTS = gl.constexpr(2)  # claims in flight from the gatherer to the other partitions
CLAIM_WIDTH = gl.constexpr(32)  # a claim's entry: one int32, repeated over a warp's lanes
TAIL_COUNTER_STRIDE = 4  # int32s between two streams' counters: each 16-byte aligned

# ------------------------------------------------------------- MXFP4 widening
WIDEN_WARPS = gl.constexpr(4)
# The e4m3 route holds a weight row whose e8m0 exponents span at most MX_SPAN binades: with
# the row's factor 2^F, F = (largest exponent) - 6, each 32-value group is scaled by 2^d,
# d in [-5, 6], and every e2m1 value (0.5 to 6) times 2^d is a normal e4m3 value
# (2^-6 to 384), so the widening is exact. A work item (128 weight rows) whose rows all fit
# runs fp8 x fp8; any other item widens its weight to bf16 (same factor) and runs bf16.
MX_SPAN = gl.constexpr(11)
# Widened once a call, an item whose rows span up to MX_SPLIT_SPAN binades goes as two e4m3
# parts instead of bf16 (the split route): the groups of d in [-5, 6] as on the e4m3 route,
# and those of d in [-17, -6] scaled by 2^MX_SPLIT_SHIFT into [-5, 6]. The item runs two fp8
# K loops, the low part's after the product so far is multiplied by 2^MX_SPLIT_SHIFT, and
# its rows' factors are 2^(F - MX_SPLIT_SHIFT).
MX_SPLIT_SHIFT = gl.constexpr(12)
MX_SPLIT_FACTOR = gl.constexpr(float(2 ** MX_SPLIT_SHIFT.value))
MX_SPLIT_SPAN = gl.constexpr(2 * MX_SPAN.value + 1)
# An item's route, in the low bits of each of its rows' info (4 F + route).
MX_ROUTE_E4M3 = gl.constexpr(0)
MX_ROUTE_BF16 = gl.constexpr(1)
MX_ROUTE_SPLIT = gl.constexpr(2)
# HopperWSConfig.prefetch's choices, each with what it prefetches ("inputs": the latent
# rows and the weight).
PREFETCH_PARTS = {"none": frozenset(), "table": frozenset({"table"}),
                  "latent": frozenset({"latent"}), "weight": frozenset({"weight"}),
                  "table+weight": frozenset({"table", "weight"}),
                  "inputs": frozenset({"latent", "weight"})}
PREFETCH_KINDS = tuple(PREFETCH_PARTS)
MAX_RING_DEPTH = 8  # the deepest weight ring a config may ask (the plan refuses what won't fit)
WIDEN_MIN_STAGES = 3  # ring slots MXFP4's in-kernel widener needs (it hands chunks over in pairs)
WIDEN_MAX_STAGES = 4  # its packed chunks take the room of deeper rings
MX_PACKED = gl.constexpr(4)  # packed K chunks in flight to the widener (8 KB each)
MX_CODES = gl.constexpr(2)  # items' codes in flight to the widener
MX_BIAS = gl.constexpr(127 + 6)  # F = e8m0 code - MX_BIAS for the row's largest code


@dataclass(frozen=True)
class HopperWSConfig(DesignConfig):
    """``ring_depth``: weight chunks in flight: 2-4 with a bf16 latent tile, 2-6 with an fp8
    one, where 5 and 6 take the room of the second output staging buffer, and 7 (8 beside
    one staging buffer) with FP8 outputs where shared memory holds it; ``programs``:
    persistent programs launched, None for one per SM; ``mma_groups``: MMA and epilogue
    warpgroups, 1, or 2 for an fp8 per-row weight over an fp8 cache, or an unscaled bf16
    one with ``latent_in_registers`` (each takes 64 of a tile's 128 rows);
    ``latent_in_registers``: with two groups, each holds its rows of a tile's latent as
    wgmma's A operand in registers (for a bf16 weight the fp8 tile widened to bf16 once a
    tile); ``pingpong``: with two groups, each
    takes whole items instead (one every K-nope item, the other every V item, of runs of
    whole heads), their K loops in turn, so one group's epilogue runs while the other
    multiplies (an fp8 per-row or per-block weight over an fp8 cache);
    ``staging_buffers``: output staging buffers over an fp8 latent tile (not pingpong), None
    for the rule above (two where they fit), 1 for one even where two would;
    ``spare_latent_chunks``: with pingpong, latent chunk slots beyond a tile's, so the next
    tile's first chunks are gathered while the last items of a tile still read it;
    ``mxfp4_widening``: an MXFP4 weight over an fp8 cache widened once a call into a copy the
    TMA loader reads (``"call"``), or item by item in the kernel by a widener partition fed
    by a packed loader (``"kernel"``, rings of 3 or 4); ``overlap_launch`` (on unless set
    off): launched with programmatic dependent launch, so the kernel's launch and setup
    overlap the end of the kernel before it on the stream, every read of memory after that
    kernel has finished (docs/contract.md); ``prefetch``: with the overlapped launch, the
    programs a short context leaves without items (the first to start) prefetch the call's
    page table's block ids (``"table"``), its latent rows (``"latent"``, the block ids
    with them), its weight (``"weight"``), the block ids and the weight (``"table+weight"``)
    or the rows and the weight (``"inputs"``) into L2 before that kernel has finished
    (prefetch.py), or nothing (``"none"``); ``early_block_ids``: the gather reads its first
    tile's block ids beside the batch's offsets, at indices guessed as if the page table
    held the batch's pages exactly and each sequence's pages began at its first token's
    page (right for page 1 and a table sized to the batch), each row's guess checked and
    the wrong ones read again (``schedule.Cache.first_tile``), instead of after the
    offsets; ``rope_ahead``: at each full tile's start, once its rope is staged, the rope
    of every head whose K-nope item the run holds in that tile is stored at once, not with
    that item (heads of whole items, an fp8 latent tile, not pingpong); ``tail_items``: runs
    of long contexts (fewer than two programs a token tile) end short of the last items,
    which programs then claim ``tail_items`` at a time as their gatherers ask for more (the
    dynamic tail: a counter per device and stream, ``tail.py``), or 0 for static runs alone
    (an fp8 per-row, per-block or unscaled weight over an fp8 latent tile, not pingpong).
    What each option bought, and where ``auto`` sets them: README.md."""

    ring_depth: int = 4
    programs: int | None = None
    mma_groups: int = 1
    latent_in_registers: bool = False
    pingpong: bool = False
    spare_latent_chunks: int = 0
    staging_buffers: int | None = None
    mxfp4_widening: str = "call"
    overlap_launch: bool = True
    prefetch: str = "none"
    early_block_ids: bool = False
    rope_ahead: bool = False
    tail_items: int = 0

    _rules = {"ring_depth": int_in(2, MAX_RING_DEPTH), "programs": optional(int_in(1, 1 << 20)),
              "mma_groups": one_of(1, 2), "latent_in_registers": flag(), "pingpong": flag(),
              "spare_latent_chunks": int_in(0, 3), "staging_buffers": optional(int_in(1, 2)),
              "mxfp4_widening": choice(("call", "kernel")), "overlap_launch": flag(),
              "prefetch": choice(PREFETCH_KINDS), "early_block_ids": flag(),
              "rope_ahead": flag(), "tail_items": int_in(0, 64)}
    _legacy = {"stages": "ring_depth", "programs": "programs"}
