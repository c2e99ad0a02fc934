"""Absorbed prefix attention: the K up-projection folded into the queries, attention over
the paged latent itself, the V up-projection applied to the n outputs.

For head h, W_UK = W[h (nope + v) : h (nope + v) + nope] and W_UV the v rows after it
([nope, kv_c] and [v, kv_c], the kv_b_proj weight the call reads, dequantised as the
reference does). q_nope . (W_UK c) = (q_nope W_UK) . c, so each query becomes a
(kv_c + pe)-wide row [q_nope W_UK, q_pe] scored against the cache row [c, pe] as it is
stored: one key and one value (c) per token, shared by every head, as MLA decode reads them.
The attention's output over c, times W_UV^T, is the expanded path's output.

Every (query, head) pair is one row of the attention (n x H rows over the same keys), so
the rows fill 64-row tiles from a few queries on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..core.devices import device_spec
from ..core.formats import FP8_BLOCK, dequantize_weight, is_block_scale
from ..designs.jit import dot_acc
from . import absorbed_hopper, checks
from .attention import (
    LOG2E,
    MAX_SPLITS,
    Blocking,
    choose_kernel,
    fewest_waves,
    keys_per_split,
    split_count,
)
from .expanded import head_dims
from .kernels import load_two_parts, online_step, split_start, store_partial
from .merge import merge_parts


def absorbed_blocking(rows: int, fp8_cache: bool = True) -> Blocking:
    """The absorbed kernel's tiles for ``rows`` (queries x heads) over an fp8 or bf16
    latent cache."""
    # A 64 x kv_c float32 accumulator is a whole warpgroup pair's registers: 8 warps. Then
    # the key tiles that measured fastest on the H200 (scripts/absorbed_tiles.py): an fp8
    # latent, widened in registers, at 128 keys one tile deep; a bf16 one, loaded straight
    # into shared memory, at 64 keys two deep.
    if rows < 64:
        return Blocking(16, 32, 8, 2)
    return Blocking(64, 128, 8, 1) if fp8_cache else Blocking(64, 64, 8, 2)


# The attention's kernels: the portable Triton one, and Gluon's for sm_90 (absorbed_hopper.py).
KERNELS = ("portable", "hopper")
# What ``plan_absorbed(kernel=...)`` takes: a kernel, or "auto": Gluon's where it runs (the
# faster over the crossover map's grid, data/exploration/h100/*-absorbed-hopper/), the
# portable one elsewhere and wherever a blocking is given (its tiles are the portable's).
KERNEL_CHOICES = ("auto", *KERNELS)


class AbsorbedWeights(NamedTuple):
    """The kv_b_proj weight split and laid out for the two projections, in the queries'
    dtype: w_uk [H, nope, kv_c] (q_nope @ w_uk[h] folds), w_uv_t [H, kv_c, v] (o_lat @
    w_uv_t[h] projects)."""

    w_uk: torch.Tensor
    w_uv_t: torch.Tensor


def absorb_weights(kv_proj_weight: torch.Tensor, kv_proj_scale: torch.Tensor | None, *,
                   num_heads: int, nope: int, dtype: torch.dtype = torch.bfloat16
                   ) -> AbsorbedWeights:
    """Dequantise the weight (``formats.dequantize_weight``, as the reference does) and split
    it per head; once per weight, not per call."""
    # torch alone, so on any device (the plan holds its result to the queries' device).
    if not isinstance(kv_proj_weight, torch.Tensor):
        raise checks.fail("kv_proj_weight", "a torch.Tensor", type(kv_proj_weight).__name__)
    dev = kv_proj_weight.device
    checks.tensor(kv_proj_weight, "kv_proj_weight", dims=2, dtypes=(torch.bfloat16, checks.FP8),
                  device=dev)
    rows, cols = kv_proj_weight.shape
    fmt = checks.weight_format(kv_proj_weight, kv_proj_scale, "kv_proj_weight", dev, rows, cols)
    h = checks.int_at_least(num_heads, "num_heads", 1)
    if rows % h:
        raise checks.fail("num_heads", f"a divisor of the weight's {rows} rows", h)
    if type(nope) is not int or not 1 <= nope < rows // h:
        raise checks.fail("nope", f"an int in [1, {rows // h}) (a head's {rows // h} weight rows "
                          "less at least one of v)", repr(nope))
    if dtype not in checks.QUERY_DTYPES:
        raise checks.fail("dtype", "torch.bfloat16 or torch.float16 (the queries')", dtype)
    # Head by head: the whole weight dequantised at once held it twice in float32 (the copy
    # and its scaled product) before anything else of the plan, above the path's own peak
    # at small n (memory.absorbed_peak_bytes, ``prepare``). The same values, rounded once.
    per_head = rows // h
    w_uk = torch.empty((h, nope, cols), dtype=dtype, device=dev)
    w_uv_t = torch.empty((h, cols, per_head - nope), dtype=dtype, device=dev)
    for i in range(h):
        w = _dequantized_rows(kv_proj_weight, kv_proj_scale, fmt, i * per_head,
                              (i + 1) * per_head)
        w_uk[i] = w[:nope]
        w_uv_t[i] = w[nope:].t()
    return AbsorbedWeights(w_uk, w_uv_t)


def _dequantized_rows(weight: torch.Tensor, scale: torch.Tensor | None, fmt: str, r0: int,
                      r1: int) -> torch.Tensor:
    """float32 rows [r0, r1) of ``dequantize_weight(weight, scale, fmt)``: a per-row scale
    sliced with them, a block scale's whole 128-row blocks dequantised and cut."""
    if scale is None or not is_block_scale(weight, scale):
        return dequantize_weight(weight[r0:r1], None if scale is None else scale[r0:r1], fmt)
    a = r0 // FP8_BLOCK * FP8_BLOCK
    b = min(-(-r1 // FP8_BLOCK) * FP8_BLOCK, weight.shape[0])
    w = dequantize_weight(weight[a:b], scale[a // FP8_BLOCK:-(-b // FP8_BLOCK)], fmt)
    return w[r0 - a:r1 - a]


@triton.jit
def latent_attention_kernel(
    q_ptr, cache_ptr, k_scale_ptr, block_ids_ptr, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, qk_scale,
    stride_block, stride_slot, stride_part_o, stride_part_lse,
    KV_C: tl.constexpr, PE: tl.constexpr, BKV: tl.constexpr, BPE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_K_SCALE: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Grid (row tile, split): BM rows of absorbed queries [rows, KV_C + PE] (one row per
    query and head: every head reads the same keys) over the split's tokens of the paged
    latent cache. Each key tile is gathered once and serves as the key (latent and rope)
    and, its first KV_C columns, as the value.

    An fp8 cache is widened to the queries' dtype as it is loaded (exact); its scale is
    applied to the scores and to the output."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows = tile * BM + tl.arange(0, BM)
    rmask = rows < n_rows
    dc = tl.arange(0, BKV)
    dp = tl.arange(0, BPE)
    q_c, q_pe = load_two_parts(q_ptr + rows.to(tl.int64)[:, None] * (KV_C + PE), rmask,
                               KV_C, BKV, PE, BPE, True)
    dt = q_ptr.dtype.element_ty
    scale = qk_scale
    if HAS_K_SCALE:
        k_scale = tl.load(k_scale_ptr)
        scale = scale * k_scale
    k0, k1, m_i, l_i, acc = split_start(split, keys_per_split, n_keys, BM, BKV)
    # The split's own bounds, not a guard in the loop's body, so the compiler can pipeline
    # the next tile's loads under this one's dots.
    for j in tl.range(k0, k1, BN, num_stages=STAGES):
        keys = j + tl.arange(0, BN)
        kok = keys < k1
        blocks = tl.load(block_ids_ptr + keys // BLOCK_SIZE, mask=kok, other=0)
        # Widened before the multiply: block id x stride passes 32 bits on large caches.
        row = blocks.to(tl.int64) * stride_block + (keys % BLOCK_SIZE) * stride_slot
        ct = tl.load(cache_ptr + row[None, :] + dc[:, None],
                     mask=kok[None, :] & (dc[:, None] < KV_C), other=0.0).to(dt)
        pet = tl.load(cache_ptr + row[None, :] + KV_C + dp[:, None],
                      mask=kok[None, :] & (dp[:, None] < PE), other=0.0).to(dt)
        s = dot_acc(q_c, ct, tl.zeros([BM, BN], tl.float32))
        s = dot_acc(q_pe, pet, s)
        p, m_i, l_i, acc = online_step(s * scale, kok, m_i, l_i, acc)
        acc = dot_acc(p.to(dt), tl.trans(ct), acc)
    if HAS_K_SCALE:
        acc = acc * k_scale
    store_partial(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                   rows, rmask, acc, m_i, l_i, KV_C, BKV)


@dataclass
class AbsorbedPlan:
    """Everything one absorbed call launches, allocated and checked once: ``fold``,
    ``attend`` and ``project`` (each timed apart by the map), or ``run``."""

    q: torch.Tensor
    k_buffer: torch.Tensor
    k_scale: torch.Tensor | None
    block_ids: torch.Tensor
    context_len: int
    weights: AbsorbedWeights
    sm_scale: float
    splits: int
    q_absorbed: torch.Tensor
    part_o: torch.Tensor
    part_lse: torch.Tensor
    o_latent: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    blocking: Blocking | None = None  # the tiles the split count was made for (None: absorbed_blocking's)
    kernel: str = "portable"  # the attention's kernel: one of KERNELS

    def workspace(self) -> dict[str, torch.Tensor]:
        """The tensors the plan allocated (the output and LSE included), by name; the
        prepared weights apart."""
        return {"q_absorbed": self.q_absorbed, "part_o": self.part_o,
                "part_lse": self.part_lse, "o_latent": self.o_latent, "out": self.out,
                "lse": self.lse}

    def fold(self) -> None:
        """[q_nope W_UK, q_pe] per head, into q_absorbed [n, H, kv_c + pe]."""
        kv_c = self.o_latent.shape[2]
        nope = self.weights.w_uk.shape[1]
        lat = torch.bmm(self.q[..., :nope].transpose(0, 1), self.weights.w_uk)
        self.q_absorbed[..., :kv_c].copy_(lat.transpose(0, 1))
        self.q_absorbed[..., kv_c:].copy_(self.q[..., nope:])

    def attend(self) -> None:
        n, h, width = self.q_absorbed.shape
        kv_c = self.o_latent.shape[2]
        rows = n * h
        fp8 = self.k_buffer.dtype == checks.FP8
        if self.kernel == "hopper":
            absorbed_hopper.launch(self.q_absorbed, self.k_buffer, self.k_scale if fp8 else None,
                                   self.block_ids, self.part_o, self.part_lse,
                                   self.context_len, self.splits, self.sm_scale * LOG2E)
        else:
            blk = self.blocking or absorbed_blocking(rows, fp8)  # None in a plan made by hand
            per = keys_per_split(self.context_len, self.splits, blk.block_n)
            latent_attention_kernel[(triton.cdiv(rows, blk.block_m), self.splits)](
                self.q_absorbed, self.k_buffer, self.k_scale if fp8 else self.q_absorbed,
                self.block_ids, self.part_o, self.part_lse, rows, self.context_len, per,
                self.sm_scale * LOG2E, self.k_buffer.stride(0), self.k_buffer.stride(1),
                self.part_o[0].numel(), self.part_lse[0].numel(),
                KV_C=kv_c, PE=width - kv_c, BKV=triton.next_power_of_2(kv_c),
                BPE=max(16, triton.next_power_of_2(width - kv_c)),
                BLOCK_SIZE=self.k_buffer.shape[1], BM=blk.block_m, BN=blk.block_n,
                HAS_K_SCALE=fp8, STAGES=blk.num_stages, num_warps=blk.num_warps)
        merge_parts(self.part_o, self.part_lse, self.splits, self.o_latent, self.lse)

    def project(self) -> None:
        """o_latent [n, H, kv_c] @ W_UV^T per head, into out [n, H, v]."""
        o = torch.bmm(self.o_latent.transpose(0, 1), self.weights.w_uv_t)
        self.out.copy_(o.transpose(0, 1))

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.fold()
        self.attend()
        self.project()
        return self.out, self.lse


def plan_absorbed(
    q: torch.Tensor,  # [n, H, nope + pe] bf16 / fp16: the new tokens' queries (rope applied)
    k_buffer: torch.Tensor,  # [num_blocks, block_size, kv_c + pe] bf16 / e4m3: the latent cache
    k_scale: torch.Tensor | None,  # [1] float32: an fp8 cache's scale
    kv_indptr: torch.Tensor,  # [2] int32: the sequence's pages, kv_indices[0 : kv_indptr[1]]
    kv_indices: torch.Tensor,  # [>= ceil(C / block_size)] int32: block ids
    context_len: int,  # C: the cached tokens
    kv_proj_weight: torch.Tensor,  # [H * (nope + v), kv_c] bf16 or e4m3
    kv_proj_scale: torch.Tensor | None,  # per row [N] / [N, 1] or per 128x128 block
    *,
    weights: AbsorbedWeights | None = None,  # absorb_weights' result, to skip the dequantise
    sm_scale: float | None = None,  # None: 1 / sqrt(nope + pe), the expanded path's
    num_splits: int | None = None,  # splits of the keys (None: to fill the device)
    out: torch.Tensor | None = None,  # [n, H, v] q's dtype
    lse: torch.Tensor | None = None,  # [n, H] float32
    validate: bool | None = None,  # read the page table and scales (default: interpreter only)
    blocking: Blocking | None = None,  # the portable kernel's tiles (None: absorbed_blocking's)
    kernel: str = "auto",  # the attention's kernel: "auto", "portable", or "hopper" (sm_90)
) -> AbsorbedPlan:
    """Check every argument and allocate the absorbed queries and partials: the plan
    ``absorbed_prefix_attention`` runs."""
    dev = checks.device_of(q)
    checks.tensor(q, "q", dims=3, dtypes=checks.QUERY_DTYPES, device=dev)
    n, h, dk = q.shape
    checks.tensor(k_buffer, "k_buffer", dims=3, dtypes=(torch.bfloat16, checks.FP8), device=dev)
    checks.tensor(kv_proj_weight, "kv_proj_weight", dims=2, dtypes=(torch.bfloat16, checks.FP8),
                  device=dev)
    kv_c, pe, nope, v = head_dims(q, k_buffer, kv_proj_weight, kv_proj_scale)
    checks.weight_format(kv_proj_weight, kv_proj_scale, "kv_proj_weight", dev,
                         h * (nope + v), kv_c)
    fp8 = checks.cache(k_buffer, k_scale, dev, kv_c + pe)
    given_k_scale = k_scale  # still the caller's tensor: the outputs stay apart from it
    if not fp8 and k_scale is not None:  # a bf16 cache has nothing to dequantise: ignored
        k_scale = None
    checks.page_table(kv_indptr, kv_indices, dev)
    checks.int_at_least(context_len, "context_len", 1)
    if weights is not None:
        if not (isinstance(weights, AbsorbedWeights)
                and tuple(weights.w_uk.shape) == (h, nope, kv_c)
                and tuple(weights.w_uv_t.shape) == (h, kv_c, v)
                and weights.w_uk.dtype == q.dtype == weights.w_uv_t.dtype
                and weights.w_uk.device == dev == weights.w_uv_t.device):
            raise checks.fail("weights", f"absorb_weights' result for this weight ({q.dtype} "
                              f"[{h}, {nope}, {kv_c}] and [{h}, {kv_c}, {v}] on {dev})",
                              type(weights).__name__ if not isinstance(weights, AbsorbedWeights)
                              else [list(weights.w_uk.shape), list(weights.w_uv_t.shape)])
    scale = checks.sm_scale(sm_scale, dk)
    splits = checks.optional_int_at_least(num_splits, "num_splits", 1)
    if splits is not None and splits > MAX_SPLITS:
        raise checks.fail("num_splits", f"None or an int in [1, {MAX_SPLITS}]", splits)
    checks.out_buffer(out, "out", dev, (n, h, v), (q.dtype,))
    checks.out_buffer(lse, "lse", dev, (n, h), (torch.float32,))
    kernel = choose_kernel(kernel, blocking, KERNEL_CHOICES,
                           lambda: absorbed_hopper.supports(q, k_buffer))
    if blocking is not None and blocking.tma:
        raise checks.fail("blocking.tma", "False (the absorbed kernels read the cache by "
                          "pointers)", True)
    prepared = {} if weights is None else {"weights.w_uk": weights.w_uk,
                                           "weights.w_uv_t": weights.w_uv_t}
    checks.no_overlap({"q": q, "k_buffer": k_buffer, "k_scale": given_k_scale,
                       "kv_indptr": kv_indptr, "kv_indices": kv_indices,
                       "kv_proj_weight": kv_proj_weight, "kv_proj_scale": kv_proj_scale,
                       **prepared, "out": out, "lse": lse}, ["out", "lse"])
    if checks.validating(checks.flag_or_none(validate, "validate")):
        checks.check_pages(k_buffer, k_scale, kv_indptr, kv_indices, context_len)
    if weights is None:
        weights = absorb_weights(kv_proj_weight, kv_proj_scale, num_heads=h, nope=nope,
                                 dtype=q.dtype)
    rows = n * h
    blk = blocking or (absorbed_blocking(rows, fp8) if kernel == "portable"
                       else absorbed_hopper.BLOCKING)
    if splits is None:
        programs, units = triton.cdiv(rows, blk.block_m), device_spec(dev).compute_units
        splits = split_count(programs, context_len, blk.block_n, units)
        if kernel == "hopper":  # one program an SM (its shared memory): whole waves
            splits = fewest_waves(programs, splits, units)
    return AbsorbedPlan(
        q, k_buffer, k_scale, kv_indices, context_len, weights, scale, splits,
        q_absorbed=torch.empty((n, h, kv_c + pe), dtype=q.dtype, device=dev),
        part_o=torch.empty((splits, n, h, kv_c), dtype=torch.float32, device=dev),
        part_lse=torch.empty((splits, n, h), dtype=torch.float32, device=dev),
        o_latent=torch.empty((n, h, kv_c), dtype=q.dtype, device=dev),
        out=torch.empty((n, h, v), dtype=q.dtype, device=dev) if out is None else out,
        lse=torch.empty((n, h), dtype=torch.float32, device=dev) if lse is None else lse,
        blocking=blk, kernel=kernel)


def absorbed_prefix_attention(q, k_buffer, k_scale, kv_indptr, kv_indices, context_len,
                              kv_proj_weight, kv_proj_scale, **options
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The n new queries over the C cached tokens by attending over the latent directly:
    (out [n, H, v], lse [n, H]). The arguments are ``plan_absorbed``'s."""
    return plan_absorbed(q, k_buffer, k_scale, kv_indptr, kv_indices, context_len,
                         kv_proj_weight, kv_proj_scale, **options).run()
