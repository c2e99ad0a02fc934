"""The expanded attention's kernel for Hopper (sm_90), in Gluon, beside the portable one in
``attention.py``: the same work (a head's queries over one split of its expanded keys; a
partial output and its LSE) with the loads and the dots in partitions of their own.

Why another kernel: the portable one, compiled by Triton, runs each key tile's loads, two
dots and softmax in one warpgroup, its next tiles' copies in flight under the compiler's
pipeline; on the H200 it reads its K/V at under 0.6 of the copy rate at n = 128, C = 32000
(docs/log/2026-12-06-expanded-attention-tiles.md), about the time of its dots and its
reads added, not overlapped. Here:

- the **loader** (one warp) issues the copy engine's loads: the program's query tile once,
  then each tile of BN keys (K's two column parts and V) into the next free stage;
- two **consumer** warpgroups (the default partition and one worker) each own 64 of the
  program's 128 queries: scores (S = Q K^T from shared memory), online softmax, and
  O += P V with P in registers, each freeing a stage once both have read it. The two are
  scheduled by the SM's warp schedulers: one's softmax runs under the other's dots.
  ``Schedule.overlap`` has each consumer also run its own softmax under its last tile's
  P V: it issues tile j's scores' dot, then tile j - 1's output dot, and waits for the
  scores alone before its softmax (P and the rescale then one tile behind).
  ``Schedule.pingpong`` (with the overlap) orders the two: each consumer issues a tile's
  dots only after the other has issued its last ones, so one's dots queue behind the
  other's and its softmax runs while they do; without it, both wait on the same landed
  tile and tend to issue, and then soften, at once. Not the default: on an H100 it left
  64-key tiles' dots as they were (docs/log/2026-12-07-expanded-attention-bounds.md).
  ``Schedule.apart`` frees a stage's K and V apart: K once the tile's scores have landed,
  V once its output dot has, and the loader fills each as it is freed, so with two stages
  of 128 keys the next tile's K loads while the last tile's P V still holds its V.
  ``WIDE_SCHEDULE`` (``Schedule(2, True, 128, apart=True)``) is the plan's from
  ``WIDE_FROM`` (512) queries up (``schedule_for``): there the dots hold the kernel and it
  ran at their speed, faster than the default at every point measured on an H100; below,
  where the loads hold the kernel, the default stays
  (docs/log/2026-12-07-expanded-attention-bounds.md).

A program covers 128 queries of one head; shared memory holds the query tile (48 KB) and
``Schedule.stages`` key tiles (40 KB of 64 keys, 80 KB of 128), so one program an SM.
``Schedule.block_n`` sets the keys a tile: 128 halves the shared-memory reads of the scores'
dot per key (the query tile, its operand from shared memory, is read once a tile), for twice
the registers a consumer's scores and probabilities take and one stage fewer; 64 stays the
default below 512 queries, faster at 128 on an H100
(docs/log/2026-12-07-expanded-attention-one-wave.md).

Restricted to what it was written for: bf16 or fp16 queries and K/V of 128 + 64 key columns
and 128 value columns (Kimi-K3, DeepSeek-V3, GLM-5), each row's heads packed; ``supports``
says so and the expanded plan refuses anything else by name.

This module keeps its annotations evaluated (it defines a bundle: ``compat.bundle``).
"""

import functools
from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..core.devices import DEVICES
from ..designs.hopper_ws.compat import Buffer, Descriptor, Scalar, bundle, tma_io
from .attention import LOG2E, keys_per_split, split_by_waves
from .kernels import LN2
from .sm90 import device_reason, online_softmax, wgmma_acc_layout

BM = gl.constexpr(64)  # queries a consumer warpgroup: its wgmma rows
GROUPS = gl.constexpr(2)  # consumer warpgroups: a program's GROUPS x BM queries
DA = gl.constexpr(128)  # K's first part (the no-rope columns), a query's too
DB = gl.constexpr(64)  # K's second part (the rope's)
DV = gl.constexpr(128)  # V's columns
QUERIES = gl.constexpr(GROUPS.value * BM.value)  # a program's queries
LOADER_REGS = 40  # the loader warp's
SMEM_BYTES = DEVICES["H200"].smem_per_program  # an sm_90 SM's, for one block


QUERY_BYTES = QUERIES.value * (DA.value + DB.value) * 2
# The worker consumer's registers a thread, by keys a tile (the tiles the kernel takes):
# 128 keys' scores and probabilities take more (ptxas spills at 160); the default partition
# gets what the other two leave, at most 256.
CONSUMER_REGS = {64: 160, 128: 216}
BLOCK_NS = tuple(CONSUMER_REGS)  # keys a tile


def tile_bytes(block_n: int) -> int:
    """A key tile's shared memory: block_n keys' K and V, 16-bit."""
    return block_n * (DA.value + DB.value + DV.value) * 2


def max_stages(block_n: int) -> int:
    """The key tiles of block_n keys that fit beside the query tile (1 KB: barriers, slack)."""
    return (SMEM_BYTES - QUERY_BYTES - 1024) // tile_bytes(block_n)


@dataclass(frozen=True)
class Schedule:
    """The kernel's pipeline: ``stages`` key tiles of ``block_n`` keys in shared memory
    beside the 48 KB query tile (2 to 4 of 64 keys fit, 2 of 128); ``overlap``: each
    consumer's softmax under its own previous tile's output dot; ``pingpong``: the two
    consumers' dots issued in turn; ``apart``: a stage's K and V freed apart (see the
    module's notes)."""

    stages: int = 3
    overlap: bool = True
    block_n: int = 64
    pingpong: bool = False
    apart: bool = False

    def __post_init__(self):
        if type(self.block_n) is not int or self.block_n not in BLOCK_NS:
            raise ValueError(f"block_n: expected one of {BLOCK_NS}, got {self.block_n!r}")
        top = max_stages(self.block_n)
        if type(self.stages) is not int or not 2 <= self.stages <= top:
            raise ValueError(f"stages: expected an int in [2, {top}] (key tiles of "
                             f"{tile_bytes(self.block_n)} B beside the query tile's "
                             f"{QUERY_BYTES} B in {SMEM_BYTES} B), got {self.stages!r}")
        if type(self.overlap) is not bool:
            raise ValueError(f"overlap: expected a bool, got {self.overlap!r}")
        if type(self.pingpong) is not bool:
            raise ValueError(f"pingpong: expected a bool, got {self.pingpong!r}")
        if type(self.apart) is not bool:
            raise ValueError(f"apart: expected a bool, got {self.apart!r}")
        if self.pingpong and not self.overlap:
            raise ValueError("pingpong: expected False without overlap (the order is kept "
                             "between the overlapped steps), got True")

    @classmethod
    def parse(cls, spec: str) -> "Schedule":
        """'hopper', 'hopper,4', 'hopper,4,serial', 'hopper,2,n128', 'hopper,pingpong', ...:
        a Schedule, the default's fields where not given ('serial': no overlap; 'nKEYS':
        tiles of KEYS keys; 'pingpong': the consumers' dots in turn; 'apart': K and V
        freed apart). A ValueError names what it cannot read."""
        head, *parts = spec.split(",")
        modes = [x for x in parts if x in ("overlap", "serial")]
        keys = [x for x in parts if x.startswith("n") and x[1:].isdigit()]
        flags = [x for x in parts if x in ("pingpong", "apart")]
        stages = [x for x in parts if x not in modes and x not in keys and x not in flags]
        if (head != "hopper" or len(modes) > 1 or len(stages) > 1 or len(keys) > 1
                or len(flags) > len(set(flags)) or not all(x.isdigit() for x in stages)):
            raise ValueError("schedule: expected hopper[,STAGES][,overlap|,serial][,nKEYS]"
                             f"[,pingpong][,apart], got {spec!r}")
        return cls(int(stages[0]) if stages else cls.stages,
                   modes[0] == "overlap" if modes else cls.overlap,
                   int(keys[0][1:]) if keys else cls.block_n, "pingpong" in flags,
                   "apart" in flags)


DEFAULT_SCHEDULE = Schedule()
# From WIDE_FROM queries up the dots hold the kernel, and 128-key tiles with K and V freed
# apart run at their speed; below, the loads hold it and the default was as fast or faster
# (data/exploration/h100/2026-12-07-f4bd7722baee-apart-map/).
WIDE_SCHEDULE = Schedule(2, True, 128, apart=True)
WIDE_FROM = 512  # queries (new tokens)


def schedule_for(new_tokens: int) -> Schedule:
    """The expanded plan's schedule for ``new_tokens`` queries: WIDE_SCHEDULE from
    WIDE_FROM up, DEFAULT_SCHEDULE below."""
    return WIDE_SCHEDULE if new_tokens >= WIDE_FROM else DEFAULT_SCHEDULE


# A program's start (its query tile, the stages' first fill) and end (its partial output)
# and its share of the merge, in keys' time: what a wave more costs beside its keys. From
# one wave against two on an H100 at 128 and 512 queries, in tiles of 64 keys
# (docs/context-path.md).
OVERHEAD_KEYS = 640


@bundle
class Split:
    """One program's work: queries [row0, row0 + QUERIES) (``n_rows`` in all) of head
    ``head`` over keys [k0, k1), in ``n_tiles`` tiles of BN."""

    row0: gl.tensor
    n_rows: Scalar
    head: gl.tensor
    k0: gl.tensor
    k1: gl.tensor
    n_tiles: gl.tensor
    BN: gl.constexpr


@bundle
class Shared:
    """The partitions' shared memory and barriers: the query tile's two parts per consumer
    ([GROUPS, BM, DA] and [GROUPS, BM, DB]), the key tiles' ([STAGES, BN, ...] each), and the
    hand-overs: the query tile landed, a key tile landed / freed by both consumers (its K
    alone with ``Schedule.apart``, its V then landed / freed in ``v_ready`` / ``v_empty``),
    and (``Schedule.pingpong``) each consumer's turn to issue its dots."""

    q_a: Buffer
    q_b: Buffer
    k_a: Buffer
    k_b: Buffer
    v: Buffer
    q_ready: Buffer
    kv_ready: Buffer
    kv_empty: Buffer
    v_ready: Buffer
    v_empty: Buffer
    turn: Buffer


@bundle
class Source:
    """The copy engine's descriptors: the queries [n, H x (DA + DB)] in [BM, DA] and
    [BM, DB] blocks, K [C, H x (DA + DB)] in [BN, DA] and [BN, DB] blocks, V [C, H x DV] in
    [BN, DV] blocks. Their rows end at the queries' and the context's last, so rows past
    them land as zeros."""

    q_a: Descriptor
    q_b: Descriptor
    k_a: Descriptor
    k_b: Descriptor
    v: Descriptor


@bundle
class Sink:
    """Where a split's partial output [n, H, DV] float32 and its LSE [n, H] go (``heads``
    H), and the scores' factor (sm_scale x log2(e))."""

    part_o_ptr: gl.tensor
    part_lse_ptr: gl.tensor
    heads: Scalar
    qk_scale: gl.tensor


@gluon.jit
def _loader(work, sh, src, STAGES: gl.constexpr, FETCH_ALL: gl.constexpr,
            APART: gl.constexpr):
    """The query tile once, then each key tile of the split into the next free stage, its K
    and V as one or (APART) each once its own part of the stage is free (without FETCH_ALL,
    the first STAGES only: each later one handed over with its stage's stale bytes,
    ``PARTS="dots"``)."""
    col = work.head * (DA + DB)
    mbarrier.expect(sh.q_ready, GROUPS * (src.q_a.block_type.nbytes
                                          + src.q_b.block_type.nbytes))
    for g in gl.static_range(GROUPS):
        tma_io.load(src.q_a, [work.row0 + g * BM, col], sh.q_ready, sh.q_a.index(g))
        tma_io.load(src.q_b, [work.row0 + g * BM, col + DA], sh.q_ready, sh.q_b.index(g))
    k_bytes: gl.constexpr = src.k_a.block_type.nbytes + src.k_b.block_type.nbytes
    v_bytes: gl.constexpr = src.v.block_type.nbytes
    for j in range(work.n_tiles):
        s = j % STAGES
        # A stage's first fill waits on the phase before the barrier's first: it passes.
        free = ((j // STAGES) & 1) ^ 1
        mbarrier.wait(sh.kv_empty.index(s), free)
        key = work.k0 + j * work.BN
        bar = sh.kv_ready.index(s)
        if FETCH_ALL or j < STAGES:
            if APART:
                mbarrier.expect(bar, k_bytes)
            else:
                mbarrier.expect(bar, k_bytes + v_bytes)
            tma_io.load(src.k_a, [key, col], bar, sh.k_a.index(s))
            tma_io.load(src.k_b, [key, col + DA], bar, sh.k_b.index(s))
            if APART:
                mbarrier.wait(sh.v_empty.index(s), free)
                bar = sh.v_ready.index(s)
                mbarrier.expect(bar, v_bytes)
            tma_io.load(src.v, [key, work.head * DV], bar, sh.v.index(s))
        else:
            mbarrier.arrive(bar, count=1)
            if APART:
                mbarrier.wait(sh.v_empty.index(s), free)
                mbarrier.arrive(sh.v_ready.index(s), count=1)


@gluon.jit
def _take_turn(sh, g: gl.constexpr, j, PINGPONG: gl.constexpr):
    """Consumer g waits for its turn to issue tile j's dots: consumer 0 first (its first
    wait is on the phase before the barrier's first, which passes), then each after the
    other has issued its own."""
    if PINGPONG:
        mbarrier.wait(sh.turn.index(g), (j & 1) ^ (1 - g))


@gluon.jit
def _pass_turn(sh, g: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(sh.turn.index(1 - g), count=1)


@gluon.jit
def _keys_read(sh, j, STAGES: gl.constexpr, APART: gl.constexpr):
    """Tile j's scores have landed: with APART its stage's K is freed now."""
    if APART:
        mbarrier.arrive(sh.kv_empty.index(j % STAGES), count=1)


@gluon.jit
def _values(sh, j, STAGES: gl.constexpr, APART: gl.constexpr):
    """Tile j's V in shared memory, for its output dot (with APART it lands on its own)."""
    if APART:
        mbarrier.wait(sh.v_ready.index(j % STAGES), (j // STAGES) & 1)
    return sh.v.index(j % STAGES)


@gluon.jit
def _tile_read(sh, j, STAGES: gl.constexpr, APART: gl.constexpr):
    """Tile j's output dot has landed: its stage freed (its V alone with APART)."""
    if APART:
        mbarrier.arrive(sh.v_empty.index(j % STAGES), count=1)
    else:
        mbarrier.arrive(sh.kv_empty.index(j % STAGES), count=1)


@gluon.jit
def _scores(sh, q_a, q_b, j, STAGES: gl.constexpr, BN: gl.constexpr,
            s_layout: gl.constexpr):
    """Key tile j's raw scores, its two dots issued once the tile has landed (not waited)."""
    s = j % STAGES
    mbarrier.wait(sh.kv_ready.index(s), (j // STAGES) & 1)
    sc = warpgroup_mma(q_a, sh.k_a.index(s).permute((1, 0)),
                       gl.zeros([BM, BN], gl.float32, s_layout), is_async=True)
    return warpgroup_mma(q_b, sh.k_b.index(s).permute((1, 0)), sc, is_async=True)


@gluon.jit
def _consumer(work, sh, sink, g: gl.constexpr, num_warps: gl.constexpr, STAGES: gl.constexpr,
              OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, APART: gl.constexpr):
    """Queries [row0 + g x BM, + BM) over the split's key tiles: scores, online softmax in
    base 2, the output with P in registers; then the partial output and its LSE."""
    BN: gl.constexpr = work.BN
    s_layout: gl.constexpr = wgmma_acc_layout(num_warps, BN)
    o_layout: gl.constexpr = wgmma_acc_layout(num_warps, DV)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_i = gl.full([BM], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BM], gl.float32, row_layout)
    o = gl.zeros([BM, DV], gl.float32, o_layout)
    key_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    q_a = sh.q_a.index(g)
    q_b = sh.q_b.index(g)
    mbarrier.wait(sh.q_ready, 0)
    if OVERLAP:
        # Tile 0's softmax alone; then tile j's scores and tile j - 1's output in flight
        # together, the softmax once the scores land; the last tile's output after.
        pa = gl.zeros([BM, BN], q_a.dtype, p_layout)
        alpha = gl.full([BM], 1.0, gl.float32, o_rows)
        if work.n_tiles > 0:
            _take_turn(sh, g, 0, PINGPONG)
            sc = _scores(sh, q_a, q_b, 0, STAGES, BN, s_layout)
            _pass_turn(sh, g, PINGPONG)
            sc = warpgroup_mma_wait(num_outstanding=0, deps=(sc,))
            _keys_read(sh, 0, STAGES, APART)
            p, al, m_i, l_i = online_softmax(sc, key_cols, 0, work.k0, work.k1,
                                             sink.qk_scale, m_i, l_i, BN)
            pa = gl.convert_layout(p.to(q_a.dtype), p_layout)
            alpha = gl.convert_layout(al, o_rows)
        for j in range(1, work.n_tiles):
            _take_turn(sh, g, j, PINGPONG)
            sc = _scores(sh, q_a, q_b, j, STAGES, BN, s_layout)
            o = warpgroup_mma(pa, _values(sh, j - 1, STAGES, APART), o * alpha[:, None],
                              is_async=True)
            _pass_turn(sh, g, PINGPONG)
            sc = warpgroup_mma_wait(num_outstanding=1, deps=(sc,))
            _keys_read(sh, j, STAGES, APART)
            p, al, m_i, l_i = online_softmax(sc, key_cols, j, work.k0, work.k1,
                                             sink.qk_scale, m_i, l_i, BN)
            o, pa = warpgroup_mma_wait(num_outstanding=0, deps=(o, pa))
            _tile_read(sh, j - 1, STAGES, APART)
            pa = gl.convert_layout(p.to(q_a.dtype), p_layout)
            alpha = gl.convert_layout(al, o_rows)
        if work.n_tiles > 0:
            last = work.n_tiles - 1
            o = warpgroup_mma(pa, _values(sh, last, STAGES, APART), o * alpha[:, None],
                              is_async=True)
            o, pa = warpgroup_mma_wait(num_outstanding=0, deps=(o, pa))
            _tile_read(sh, last, STAGES, APART)
    else:
        for j in range(work.n_tiles):
            sc = warpgroup_mma_wait(num_outstanding=0,
                                    deps=(_scores(sh, q_a, q_b, j, STAGES, BN, s_layout),))
            _keys_read(sh, j, STAGES, APART)
            p, alpha, m_i, l_i = online_softmax(sc, key_cols, j, work.k0, work.k1,
                                                sink.qk_scale, m_i, l_i, BN)
            pa = gl.convert_layout(p.to(q_a.dtype), p_layout)
            alpha = gl.convert_layout(alpha, o_rows)
            o = warpgroup_mma(pa, _values(sh, j, STAGES, APART), o * alpha[:, None],
                              is_async=True)
            o, pa = warpgroup_mma_wait(num_outstanding=0, deps=(o, pa))
            _tile_read(sh, j, STAGES, APART)
    _store_partial(work, sink, o, m_i, l_i, g, num_warps)


@gluon.jit
def _store_partial(work, sink, o, m_i, l_i, g: gl.constexpr, num_warps: gl.constexpr):
    """The consumer's queries' output, divided by their softmax sums (0 where the split saw
    no key), and their LSE (-inf there), at flat rows query x H + head."""
    o_layout: gl.constexpr = wgmma_acc_layout(num_warps, DV)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    queries = work.row0 + g * BM + gl.arange(0, BM, layout=o_rows)
    cols = gl.arange(0, DV, layout=gl.SliceLayout(0, o_layout))
    flat = queries.to(gl.int64) * sink.heads + work.head
    inv = 1.0 / gl.where(l_i > 0, l_i, 1.0)
    o = o * gl.convert_layout(inv, o_rows)[:, None]
    gl.store(sink.part_o_ptr + flat[:, None] * DV + cols[None, :], o,
             mask=(queries < work.n_rows)[:, None])
    row_layout: gl.constexpr = gl.SliceLayout(1, wgmma_acc_layout(num_warps, work.BN))
    queries = work.row0 + g * BM + gl.arange(0, BM, layout=row_layout)
    safe = gl.where(l_i > 0, l_i, 1.0)
    gl.store(sink.part_lse_ptr + queries * sink.heads + work.head,
             gl.where(l_i > 0, (m_i + gl.log2(safe)) * LN2, float("-inf")),
             mask=queries < work.n_rows)


# What a launch runs (``PARTS``): the kernel's work, or one side of it beside a stand-in that
# only keeps the hand-overs going, which lab.diagnostics.expanded_bounds times to say what
# bounds the kernel: "dots", every tile's scores, softmax and output over stages loaded once;
# "loads", every tile's loads, each stage freed as it lands.
PARTS = ("all", "dots", "loads")


@gluon.jit
def _free_at_once(work, sh, STAGES: gl.constexpr, APART: gl.constexpr):
    """A consumer's stand-in for ``PARTS="loads"``: each key tile's stage freed as soon as
    it lands (the query tile waited for too, so no copy is in flight at the end)."""
    mbarrier.wait(sh.q_ready, 0)
    for j in range(work.n_tiles):
        s = j % STAGES
        mbarrier.wait(sh.kv_ready.index(s), (j // STAGES) & 1)
        mbarrier.arrive(sh.kv_empty.index(s), count=1)
        if APART:
            mbarrier.wait(sh.v_ready.index(s), (j // STAGES) & 1)
            mbarrier.arrive(sh.v_empty.index(s), count=1)


@gluon.jit
def _consumer_side(work, sh, sink, g: gl.constexpr, num_warps: gl.constexpr,
                   STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
                   APART: gl.constexpr, PARTS: gl.constexpr):
    """Consumer g, or its stand-in for "loads"."""
    if PARTS == "loads":
        _free_at_once(work, sh, STAGES, APART)
    else:
        _consumer(work, sh, sink, g, num_warps, STAGES, OVERLAP, PINGPONG, APART)


@gluon.jit
def prefix_attention_hopper_kernel(
    q_a_desc, q_b_desc, k_a_desc, k_b_desc, v_desc, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, num_heads, qk_scale, stride_part_o, stride_part_lse,
    BN: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
    APART: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr, num_warps: gl.constexpr,
    PARTS: gl.constexpr,
):
    """Grid (query tile of QUERIES, head, split), as ``attention.prefix_attention_kernel``'s;
    PARTS, one of ``PARTS``: the whole kernel ("all") or one side of it."""
    tile = gl.program_id(0)
    head = gl.program_id(1)
    split = gl.program_id(2)
    k0 = split * keys_per_split
    k1 = gl.minimum(k0 + keys_per_split, n_keys)
    work = Split(tile * QUERIES, n_rows, head, k0, k1, gl.cdiv(gl.maximum(k1 - k0, 0), BN), BN)

    bar: gl.constexpr = mbarrier.MBarrierLayout()
    q_a = gl.allocate_shared_memory(q_a_desc.dtype, [GROUPS, BM, DA], q_a_desc.layout)
    q_b = gl.allocate_shared_memory(q_b_desc.dtype, [GROUPS, BM, DB], q_b_desc.layout)
    k_a = gl.allocate_shared_memory(k_a_desc.dtype, [STAGES, BN, DA], k_a_desc.layout)
    k_b = gl.allocate_shared_memory(k_b_desc.dtype, [STAGES, BN, DB], k_b_desc.layout)
    v = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, DV], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
    kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    turn = gl.allocate_shared_memory(gl.int64, [GROUPS, 1], bar)
    mbarrier.init(q_ready, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(kv_ready.index(s), count=1)
        mbarrier.init(kv_empty.index(s), count=GROUPS)  # freed by both consumers
        if APART:
            mbarrier.init(v_ready.index(s), count=1)
            mbarrier.init(v_empty.index(s), count=GROUPS)
    for g in gl.static_range(GROUPS):
        mbarrier.init(turn.index(g), count=1)  # passed by the other consumer
    sh = Shared(q_a, q_b, k_a, k_b, v, q_ready, kv_ready, kv_empty, v_ready, v_empty, turn)
    src = Source(q_a_desc, q_b_desc, k_a_desc, k_b_desc, v_desc)
    sink = Sink(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                num_heads, qk_scale)
    gl.warp_specialize([
        (_consumer_side, (work, sh, sink, 0, num_warps, STAGES, OVERLAP, PINGPONG, APART,
                          PARTS)),
        (_consumer_side, (work, sh, sink, 1, num_warps, STAGES, OVERLAP, PINGPONG, APART,
                          PARTS)),
        (_loader, (work, sh, src, STAGES, PARTS != "dots", APART)),
    ], [num_warps, 1], [CONSUMER_REGS, LOADER_REGS])


def supports(q: torch.Tensor, kv_dtype: torch.dtype, dv: int) -> str | None:
    """Why this kernel cannot attend with these queries over K/V of ``kv_dtype`` with ``dv``
    value columns, as the expanded plan allocates them (None: it can): an sm_90 CUDA
    device, bf16 or fp16 queries, K/V of their dtype, heads of DA + DB key and DV value
    columns, the queries' heads packed in 16-byte aligned rows."""
    why = device_reason(q.device)
    if why is not None:
        return why
    if q.dtype not in (torch.bfloat16, torch.float16) or kv_dtype != q.dtype:
        return f"bf16 or fp16 queries and K/V of their dtype, got {q.dtype} and {kv_dtype}"
    if q.shape[2] != DA.value + DB.value or dv != DV.value:
        return (f"heads of {DA.value} + {DB.value} key and {DV.value} value columns, got "
                f"{q.shape[2]} and {dv}")
    if (q.stride(2) != 1 or q.stride(1) != q.shape[2] or q.data_ptr() % 16
            or q.stride(0) * q.element_size() % 16):
        return f"q's heads packed in 16-byte aligned rows, got strides {q.stride()}"
    return None


@functools.lru_cache(maxsize=16)
def _layout(rows: int, cols: int, dtype: torch.dtype):
    # Cached: building a layout costs more host time than the descriptor built on it.
    gl_dtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


def splits(n_queries: int, heads: int, n_keys: int, compute_units: int,
           block_n: int = DEFAULT_SCHEDULE.block_n) -> int:
    """The split count of ``n_keys`` keys for ``n_queries`` queries of ``heads`` heads in
    tiles of ``block_n``: its one program an SM in whole waves, each costing OVERHEAD_KEYS
    beside its keys."""
    programs = -(-n_queries // QUERIES.value) * heads
    return split_by_waves(programs, n_keys, block_n, compute_units, OVERHEAD_KEYS // block_n)


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_keys: int,
                block_n: int = DEFAULT_SCHEDULE.block_n) -> tuple:
    """The kernel's five descriptors: the queries' two parts, K's two over its first
    ``n_keys`` rows, V's over the same, in tiles of ``block_n`` keys. A plan builds them once
    per chunk length."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    n, h, dk = q.shape
    q2 = q.view(n, h * dk)
    k2 = k[:n_keys].view(n_keys, h * dk)
    v2 = v[:n_keys].view(n_keys, h * v.shape[2])
    return tuple(TensorDescriptor.from_tensor(t, [rows, cols], _layout(rows, cols, t.dtype))
                 for t, rows, cols in ((q2, BM.value, DA.value), (q2, BM.value, DB.value),
                                       (k2, block_n, DA.value), (k2, block_n, DB.value),
                                       (v2, block_n, DV.value)))


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_keys: int, sm_scale: float,
           splits: int, part_o: torch.Tensor, part_lse: torch.Tensor,
           descs: tuple | None = None, schedule: Schedule = DEFAULT_SCHEDULE,
           parts: str = "all") -> None:
    """The kernel over ``splits`` splits of the first ``n_keys`` keys (each a whole number
    of key tiles), its partials into part_o [>= splits, n, H, DV] (float32) and part_lse
    [>= splits, n, H]; ``descs``: ``descriptors(q, k, v, n_keys, schedule.block_n)``, built
    here if None; ``schedule``: its pipeline. ``parts`` other than "all" (``PARTS``) is for
    lab.diagnostics.expanded_bounds's timings: "dots" writes partials of stale tiles,
    "loads" writes nothing. No checks of the tensors (``supports`` first)."""
    if parts not in PARTS:
        raise ValueError(f"parts: expected one of {PARTS}, got {parts!r}")
    n, h, _ = q.shape
    per = keys_per_split(n_keys, splits, schedule.block_n)
    prefix_attention_hopper_kernel[(triton.cdiv(n, QUERIES.value), h, splits)](
        *(descs or descriptors(q, k, v, n_keys, schedule.block_n)), part_o, part_lse,
        n, n_keys, per, h, sm_scale * LOG2E, part_o[0].numel(),
        part_lse[0].numel(), BN=schedule.block_n, STAGES=schedule.stages,
        OVERLAP=schedule.overlap, PINGPONG=schedule.pingpong, APART=schedule.apart,
        CONSUMER_REGS=CONSUMER_REGS[schedule.block_n], LOADER_REGS=LOADER_REGS, PARTS=parts,
        num_warps=4, maxnreg=168)
