"""Attention of n new queries over C cached keys, split over the keys when the queries
alone would leave the device idle (flash-decoding): each split writes a partial output and
its log-sum-exp, and the merge weighs them into one output and its LSE, which merges in turn
with the new tokens' own causal attention (``merge.merge_attention``).

``prefix_attention`` reads expanded per-head K and V (what ``gather_kv_b_proj`` writes),
bf16 or FP8 with per-tensor scales. The absorbed path's attention over the latent cache
is in ``absorbed.py``; both share the split rule here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
import triton
import triton.language as tl

from ..core.devices import device_spec
from ..designs.jit import dot_acc
from . import checks
from .kernels import load_rows, load_two_parts, online_step, split_start, store_partial
from .merge import merge_parts

LOG2E = 1.0 / math.log(2.0)
MAX_SPLITS = 64
# Splits are sized so each program walks at least this many key tiles: fewer would spend
# more on the merge and the queries' loads than on the keys.
MIN_TILES_PER_SPLIT = 4
PROGRAMS_PER_UNIT = 2  # programs per SM (CU) a launch aims for
LONG_KEYS = 16384  # from here 128 queries take 128-row tiles (``expanded_blocking``)


@dataclass(frozen=True)
class Blocking:
    """A launch's tile sizes: ``block_m`` query rows and ``block_n`` keys per step, its warps,
    and the key tiles in flight (``num_stages``: the loop's software pipeline; None leaves
    it to the compiler). ``tma``: the expanded attention reads K and V tiles through tensor
    descriptors (the copy engine of Hopper and later) where they allow it
    (``tma_allowed``), by pointers elsewhere; the absorbed kernels read by pointers only."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int | None = None
    tma: bool = False


# What a caller's blocking may hold (``plan_absorbed``'s and ``plan_expanded``'s): the tiles
# the kernels' dots and shared memory allow on the GPUs the repository runs on.
BLOCK_M = (16, 32, 64, 128)
BLOCK_N = (16, 32, 64, 128)
WARPS = (4, 8)
STAGES = (1, 2, 3, 4)


def check_blocking(blocking) -> Blocking:
    """A caller's blocking, or a ValueError naming the field."""
    if not isinstance(blocking, Blocking):
        raise checks.fail("blocking", "a context.attention.Blocking", type(blocking).__name__)
    for field, allowed in (("block_m", BLOCK_M), ("block_n", BLOCK_N), ("num_warps", WARPS),
                           ("num_stages", STAGES)):
        value = getattr(blocking, field)
        if type(value) is not int or value not in allowed:
            raise checks.fail(f"blocking.{field}", f"one of {allowed}", repr(value))
    if type(blocking.tma) is not bool:
        raise checks.fail("blocking.tma", "a bool", repr(blocking.tma))
    return blocking


def choose_kernel(kernel, blocking, choices: tuple[str, ...], hopper_reason) -> str:
    """The attention kernel a plan runs ("portable" or "hopper") from its ``kernel`` (one of
    ``choices``) and ``blocking``: a blocking is the portable kernel's tiles, so it takes
    that kernel (refused beside "hopper"); "hopper" runs where ``hopper_reason()`` (why the
    Gluon kernel cannot run; None: it can) allows and is refused by name elsewhere; "auto"
    takes the one that runs. Shared by ``plan_expanded`` and ``plan_absorbed``."""
    if type(kernel) is not str or kernel not in choices:
        raise checks.fail("kernel", f"one of {choices}", repr(kernel))
    if blocking is not None:
        if kernel == "hopper":
            raise checks.fail("blocking", f"None with kernel={kernel!r} (its tiles are fixed)",
                              blocking)
        check_blocking(blocking)
        return "portable"
    if kernel == "portable":
        return kernel
    why = hopper_reason()
    if kernel == "hopper" and why is not None:
        raise checks.fail("kernel", f"'portable' here (the hopper kernel needs {why})",
                          repr(kernel))
    return "portable" if why is not None else "hopper"


def head_parts(dk: int) -> tuple[int, int]:
    """A head dim as the kernels load it: its largest power of two, then the rest (192:
    128 + 64)."""
    da = 1 << (dk.bit_length() - 1)
    return da, dk - da


def expanded_blocking(n_queries: int, n_keys: int) -> Blocking:
    """The attention's tiles for ``n_queries`` over ``n_keys`` keys (a chunk's, where the
    expanded path attends chunk by chunk): the fastest of scripts/prefix_tiles.py's
    candidates on Hopper."""
    # 128 rows of 64 keys on 8 warps from 256 queries. From 128, 128 rows of 32 keys on 4
    # warps over many keys (a head's keys read once for 128 queries: faster on the H200 at
    # 32000 keys), 64 rows over few (faster on the H100 at 4096, where 128-row partials
    # cost more than the keys; the switch lies between). 64 rows of 32 keys from 64
    # queries, two programs an SM; 16 rows (the smallest dot) below that.
    if n_queries >= 256:
        return Blocking(128, 64, 8, 3)
    if n_queries >= 128 and n_keys >= LONG_KEYS:
        return Blocking(128, 32, 4, 3)
    return Blocking(64, 32, 4, 3) if n_queries >= 64 else Blocking(16, 64, 4)


def split_count(programs: int, n_keys: int, block_n: int, compute_units: int) -> int:
    """How many splits of the keys fill the device: enough that ``programs`` (the launch
    without splits) x splits reaches PROGRAMS_PER_UNIT per compute unit, each split
    keeping MIN_TILES_PER_SPLIT key tiles, at most MAX_SPLITS."""
    want = -(-PROGRAMS_PER_UNIT * compute_units // max(programs, 1))
    most = max(1, -(-n_keys // (MIN_TILES_PER_SPLIT * block_n)))
    return max(1, min(want, most, MAX_SPLITS))


def fewest_waves(programs: int, splits: int, slots: int) -> int:
    """The split count, at most ``splits``, that finishes soonest where ``slots`` programs run
    at once: each split's program takes 1/s of the keys, and the launch ceil(programs x s /
    slots) waves of them. A last wave partly filled costs a whole one, so fewer splits that
    fit whole waves can finish sooner; equal times keep more splits."""
    def waves(s: int) -> Fraction:
        return Fraction(-(-programs * s // slots), s)

    return min(range(1, splits + 1), key=lambda s: (waves(s), -s))


def split_by_waves(programs: int, n_keys: int, block_n: int, slots: int,
                   overhead_tiles: int) -> int:
    """The split count, at most MAX_SPLITS and keeping MIN_TILES_PER_SPLIT key tiles a
    split, that finishes soonest where ``slots`` programs run at once and no more (a kernel
    of one program an SM): ceil(programs x s / slots) waves, each as long as a split's key
    tiles plus ``overhead_tiles`` (a program's start and end, and its share of the merge,
    in key tiles' time). Equal times keep fewer splits (less to merge)."""
    tiles = max(1, -(-n_keys // block_n))
    most = max(1, min(MAX_SPLITS, -(-tiles // MIN_TILES_PER_SPLIT)))

    def cost(s: int) -> int:
        return -(-programs * s // slots) * (-(-tiles // s) + overhead_tiles)

    return min(range(1, most + 1), key=lambda s: (cost(s), s))


def keys_per_split(n_keys: int, splits: int, block_n: int) -> int:
    """Keys each split walks: a whole number of key tiles (the last split takes the rest)."""
    return max(1, triton.cdiv(triton.cdiv(n_keys, splits), block_n)) * block_n


@triton.jit
def key_tile_step(q_a, q_b, k_src, k_pe_src, v_src, head, j, k1, scale, m_i, l_i, acc,
                  stride_k_row, stride_v_row, DA: tl.constexpr, DB: tl.constexpr,
                  DV: tl.constexpr, BDA: tl.constexpr, BDB: tl.constexpr, BDV: tl.constexpr,
                  BN: tl.constexpr, MASK_KEYS: tl.constexpr, TMA: tl.constexpr):
    """One tile of BN keys from key ``j`` (those at or past ``k1`` masked with MASK_KEYS):
    the scores, one online-softmax step and the V product. K loads as rows, as it lies in
    memory, and enters the dot transposed. With TMA the tiles come through descriptors
    whose rows end at the context's last key (the copy engine fills rows past it with
    zeros), so a tile needs no load mask: keys past ``k1`` within the context are real ones
    of the next split, and their scores are masked."""
    dt = q_a.dtype
    keys = j + tl.arange(0, BN)
    kok = keys < k1
    if TMA:
        k_a = k_src.load([j, head * (DA + DB)])
        k_b = k_pe_src.load([j, head * (DA + DB) + DA])
    else:
        k_rows = k_src + keys.to(tl.int64)[:, None] * stride_k_row + head * (DA + DB)
        k_a, k_b = load_two_parts(k_rows, kok, DA, BDA, DB, BDB, MASK_KEYS)
    s = dot_acc(q_a, tl.trans(k_a.to(dt)), tl.zeros([q_a.shape[0], BN], tl.float32))
    s = dot_acc(q_b, tl.trans(k_b.to(dt)), s)
    p, m_i, l_i, acc = online_step(s * scale, kok, m_i, l_i, acc)
    if TMA:
        v = v_src.load([j, head * DV])
    else:
        v = load_rows(v_src + keys.to(tl.int64)[:, None] * stride_v_row + head * DV, kok, DV,
                      BDV, MASK_KEYS)
    return m_i, l_i, dot_acc(p.to(dt), v.to(dt), acc)


@triton.jit
def prefix_attention_kernel(
    q_ptr, k_src, k_pe_src, v_src, k_scale_ptr, v_scale_ptr, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, num_heads, qk_scale,
    stride_q_row, stride_k_row, stride_v_row, stride_part_o, stride_part_lse,
    DA: tl.constexpr, DB: tl.constexpr, DV: tl.constexpr,
    BDA: tl.constexpr, BDB: tl.constexpr, BDV: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, KV_FP8: tl.constexpr, TMA: tl.constexpr,
):
    """Grid (query tile, head, split): BM queries of one head over the split's keys of
    expanded K [keys, H, DA + DB] and V [keys, H, DV]. A head dim that is no power of two
    (192) is loaded as two parts, DA then DB (128 + 64). K and V come as pointers
    (``k_pe_src`` then unused), or with TMA as descriptors over K and V viewed as
    [keys, H x dim]: K's two parts, [BN, DA] and [BN, DB] boxes, and V's [BN, DV].

    FP8 K/V are widened to the queries' dtype as they are loaded (exact), so the dots run
    there; the per-tensor scales are applied to the scores and to the output."""
    tile = tl.program_id(0)
    head = tl.program_id(1)
    split = tl.program_id(2)
    rows = tile * BM + tl.arange(0, BM)
    rmask = rows < n_rows
    q_a, q_b = load_two_parts(q_ptr + rows.to(tl.int64)[:, None] * stride_q_row
                              + head * (DA + DB), rmask, DA, BDA, DB, BDB, True)
    scale = qk_scale
    if KV_FP8:
        scale = scale * tl.load(k_scale_ptr)
    k0, k1, m_i, l_i, acc = split_start(split, keys_per_split, n_keys, BM, BDV)
    # The split's whole key tiles with no key mask, then its partial tile, if any: a mask in
    # the loop's body made the compiler wait on each wgmma at some tilings, and the split's
    # own bounds let it pipeline the next tile's loads under this one's dots.
    k_whole = k0 + tl.maximum(k1 - k0, 0) // BN * BN
    for j in tl.range(k0, k_whole, BN):
        m_i, l_i, acc = key_tile_step(q_a, q_b, k_src, k_pe_src, v_src, head, j, k1, scale,
                                      m_i, l_i, acc, stride_k_row, stride_v_row, DA, DB, DV,
                                      BDA, BDB, BDV, BN, False, TMA)
    if k_whole < k1:
        m_i, l_i, acc = key_tile_step(q_a, q_b, k_src, k_pe_src, v_src, head, k_whole, k1,
                                      scale, m_i, l_i, acc, stride_k_row, stride_v_row, DA,
                                      DB, DV, BDA, BDB, BDV, BN, True, TMA)
    if KV_FP8:
        acc = acc * tl.load(v_scale_ptr)
    store_partial(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                   rows * num_heads + head, rmask, acc, m_i, l_i, DV, BDV)


def tma_allowed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether K and V can be read through tensor descriptors: 16-bit K/V (the queries'
    dtype; FP8 ones widen in registers, by pointers), each part of a head (K's two, V's
    one) a power of two of at least 16 columns, each row's heads packed and the rows
    16-byte aligned, on a GPU of compute capability 9 or later (or under the
    interpreter)."""
    if k.dtype != q.dtype or any(d < 16 or d & (d - 1)
                                 for d in (*head_parts(q.shape[-1]), v.shape[-1])):
        return False
    if any(t.stride(2) != 1 or t.stride(1) != t.shape[2] or t.data_ptr() % 16
           or t.stride(0) * t.element_size() % 16 for t in (k, v)):
        return False
    if k.device.type != "cuda":
        return k.device.type == "cpu"  # the interpreter's
    return torch.cuda.get_device_capability(k.device)[0] >= 9


def prefix_sources(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_keys: int,
                   blk: Blocking) -> tuple:
    """The kernel's K, K-part-two and V arguments on ``blk``'s tiles: descriptors over the
    first n_keys rows where ``blk.tma`` and ``tma_allowed``, else the tensors themselves (K
    twice). A plan builds them once per chunk length."""
    if not (blk.tma and tma_allowed(q, k, v)):
        return k, k, v
    from triton.tools.tensor_descriptor import TensorDescriptor

    h, dk, dv = k.shape[1], k.shape[2], v.shape[2]
    da, db = head_parts(dk)
    k2, v2 = k[:n_keys].view(n_keys, h * dk), v[:n_keys].view(n_keys, h * dv)
    return (TensorDescriptor.from_tensor(k2, [blk.block_n, da]),
            TensorDescriptor.from_tensor(k2, [blk.block_n, db]),
            TensorDescriptor.from_tensor(v2, [blk.block_n, dv]))


def launch_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_scale, v_scale,
                  n_keys: int, sm_scale: float, splits: int, part_o: torch.Tensor,
                  part_lse: torch.Tensor, blocking: Blocking | None = None,
                  sources: tuple | None = None) -> None:
    """The split attention's launch: ``splits`` partials into part_o [>= splits, n, H, DV]
    (float32) and part_lse [>= splits, n, H], on ``blocking``'s tiles (None:
    ``expanded_blocking``'s); ``sources``: ``prefix_sources``' for those tiles, built here
    if None. No checks (the entry points' launch path)."""
    n, h, dk = q.shape
    dv = v.shape[-1]
    blk = blocking or expanded_blocking(n, n_keys)
    da, db = head_parts(dk)
    kv_fp8 = k.dtype == checks.FP8
    per = keys_per_split(n_keys, splits, blk.block_n)
    k_src, k_pe_src, v_src = sources or prefix_sources(q, k, v, n_keys, blk)
    tma = not isinstance(k_src, torch.Tensor)
    prefix_attention_kernel[(triton.cdiv(n, blk.block_m), h, splits)](
        q, k_src, k_pe_src, v_src, k_scale if kv_fp8 else q, v_scale if kv_fp8 else q,
        part_o, part_lse,
        n, n_keys, per, h, sm_scale * LOG2E,
        q.stride(0), k.stride(0), v.stride(0), part_o[0].numel(), part_lse[0].numel(),
        DA=da, DB=db, DV=dv, BDA=da, BDB=max(16, triton.next_power_of_2(max(db, 1))),
        BDV=max(16, triton.next_power_of_2(dv)), BM=blk.block_m, BN=blk.block_n,
        KV_FP8=kv_fp8, TMA=tma, num_warps=blk.num_warps,
        **({} if blk.num_stages is None else {"num_stages": blk.num_stages}))


def default_splits(q: torch.Tensor, n_keys: int, blocking: Blocking | None = None) -> int:
    n, h, _ = q.shape
    blk = blocking or expanded_blocking(n, n_keys)
    return split_count(triton.cdiv(n, blk.block_m) * h, n_keys, blk.block_n,
                       device_spec(q.device).compute_units)


def check_prefix(q, k, v, k_scale, v_scale, n_keys, sm_scale, num_splits, out, lse):
    """The checks of ``prefix_attention``'s arguments; (n_keys, sm_scale, splits)."""
    dev = checks.device_of(q)
    checks.tensor(q, "q", dims=3, dtypes=checks.QUERY_DTYPES, device=dev)
    n, h, dk = q.shape
    if dk < 16:
        raise checks.fail("q", "a head dim (shape[2]) of at least 16", dk)
    kv_dtypes = (q.dtype, checks.FP8)
    checks.tensor(k, "k", dims=3, dtypes=kv_dtypes, device=dev, shape=(None, h, dk))
    checks.tensor(v, "v", dims=3, dtypes=(k.dtype,), device=dev, shape=(k.shape[0], h, None))
    fp8 = k.dtype == checks.FP8
    checks.scale(k_scale, "k_scale", dev, fp8, "FP8 K only")
    checks.scale(v_scale, "v_scale", dev, fp8, "FP8 V only")
    n_keys = k.shape[0] if n_keys is None else n_keys
    if type(n_keys) is not int or not 1 <= n_keys <= k.shape[0]:
        raise checks.fail("n_keys", f"None or an int in [1, {k.shape[0]}] (k's rows)", repr(n_keys))
    scale = checks.sm_scale(sm_scale, dk)
    splits = checks.optional_int_at_least(num_splits, "num_splits", 1)
    if splits is not None and splits > MAX_SPLITS:
        raise checks.fail("num_splits", f"None or an int in [1, {MAX_SPLITS}]", splits)
    checks.out_buffer(out, "out", dev, (n, h, v.shape[2]), (q.dtype, torch.float32))
    checks.out_buffer(lse, "lse", dev, (n, h), (torch.float32,))
    checks.no_overlap({"q": q, "k": k, "v": v, "k_scale": k_scale, "v_scale": v_scale,
                       "out": out, "lse": lse}, ["out", "lse"])
    return n_keys, scale, splits


def prefix_attention(
    q: torch.Tensor,  # [n, H, Dk] bf16 / fp16: the new tokens' queries (rope applied)
    k: torch.Tensor,  # [>= C, H, Dk] q's dtype or float8_e4m3fn: expanded K
    v: torch.Tensor,  # [>= C, H, Dv] k's dtype: expanded V
    *,
    k_scale: torch.Tensor | None = None,  # [1] float32: FP8 K's per-tensor scale
    v_scale: torch.Tensor | None = None,  # [1] float32: FP8 V's per-tensor scale
    n_keys: int | None = None,  # C: the first n_keys rows of k and v (None: all)
    sm_scale: float | None = None,  # None: 1 / sqrt(Dk)
    num_splits: int | None = None,  # None: enough to fill the device
    out: torch.Tensor | None = None,  # [n, H, Dv] q's dtype or float32
    lse: torch.Tensor | None = None,  # [n, H] float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query over every one of the C keys (the cached prefix precedes the new tokens,
    so no mask): (out, lse), lse the natural log-sum-exp of each row's scaled scores."""
    n_keys, scale, splits = check_prefix(q, k, v, k_scale, v_scale, n_keys, sm_scale,
                                         num_splits, out, lse)
    n, h, _ = q.shape
    splits = splits or default_splits(q, n_keys)
    part_o = torch.empty((splits, n, h, v.shape[2]), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((splits, n, h), dtype=torch.float32, device=q.device)
    out = torch.empty((n, h, v.shape[2]), dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty((n, h), dtype=torch.float32, device=q.device) if lse is None else lse
    launch_prefix(q, k, v, k_scale, v_scale, n_keys, scale, splits, part_o, part_lse)
    merge_parts(part_o, part_lse, splits, out, lse)
    return out, lse
