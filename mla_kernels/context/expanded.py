"""Expand, then attend: the cached prefix's latent turned into per-head K and V by
``gather_kv_b_proj``, chunk by chunk, each chunk attended by the n new queries and merged
into the running output by its log-sum-exp, so the memory held is set by the chunk and
not by the context.

A chunk is a sub-range of the cached tokens, handed to the call as a page table of its own:
``kv_indices`` sliced from the chunk's first block (a view), ``kv_indptr`` = [0, its blocks]
and prefix sums [0, its tokens]. Chunks start on page boundaries (``chunk_tokens`` is a
multiple of the page size), so a chunk's token t is the context's token t0 + t in the same
block and slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..api import gather_kv_b_proj
from ..core.devices import device_spec
from ..core.formats import FP8_DTYPES, detect_weight_format
from ..core.problem import GatherArgs, check_aliasing, check_arguments, validate_inputs
from . import attention_hopper, checks
from .attention import (
    MAX_SPLITS,
    Blocking,
    choose_kernel,
    default_splits,
    expanded_blocking,
    launch_prefix,
    prefix_sources,
)
from .merge import merge_parts

KV_DTYPES = (torch.bfloat16, torch.float16, checks.FP8)
# The attention's kernels: the portable Triton one (attention.py) and Gluon's for sm_90
# (attention_hopper.py). What ``plan_expanded(kernel=...)`` takes: a kernel, or "auto":
# Gluon's where it runs, the portable one elsewhere and wherever a blocking is given.
KERNELS = ("portable", "hopper")
KERNEL_CHOICES = ("auto", *KERNELS)


def latent_kv_c(weight: torch.Tensor, scale: torch.Tensor | None) -> int:
    """kv_c of a kv_b_proj weight: its columns (MXFP4 packs two a byte)."""
    return weight.shape[1] * (2 if detect_weight_format(weight, scale) == "mxfp4" else 1)


def head_dims(q: torch.Tensor, k_buffer: torch.Tensor, weight: torch.Tensor,
              scale: torch.Tensor | None) -> tuple[int, int, int, int]:
    """(kv_c, pe, nope, v) from the tensors: pe is the cache row past kv_c, nope the query's
    head dim less pe, v a head's weight rows less nope."""
    h, dk = q.shape[1], q.shape[2]
    kv_c = latent_kv_c(weight, scale)
    pe = k_buffer.shape[2] - kv_c
    if pe < 1 or pe >= dk:
        raise checks.fail("k_buffer", f"rows of kv_c ({kv_c}, the weight's) + pe values, pe in "
                          f"[1, {dk}) (q's head dim {dk} = nope + pe)", f"{k_buffer.shape[2]} values")
    nope = dk - pe
    rows = weight.shape[0]
    if rows % h or rows // h <= nope:
        raise checks.fail("kv_proj_weight", f"H x (nope + v) rows with H = {h} (q's heads) and "
                          f"nope = {nope}", f"{rows} rows")
    return kv_c, pe, nope, rows // h - nope


@dataclass
class ExpandedPlan:
    """Everything one expand-then-attend call launches, allocated and checked once: a CUDA
    graph captures ``run`` (or ``expand`` and ``attend`` apart, to time each part)."""

    q: torch.Tensor
    chunk_args: list[GatherArgs]
    chunk_tokens: list[int]
    splits: list[int]
    sm_scale: float
    variant: str
    k_chunk: torch.Tensor
    v_chunk: torch.Tensor
    part_o: torch.Tensor
    part_lse: torch.Tensor
    running: torch.Tensor | None
    out: torch.Tensor
    lse: torch.Tensor
    index_tensors: list[torch.Tensor] = field(default_factory=list)
    blocking: Blocking | None = None  # the attention's tiles (None: expanded_blocking's)
    kernel: str = "portable"  # the attention's kernel (KERNELS)
    # The Gluon kernel's pipeline (its key stages and tiles, its softmax under its own last
    # output dot or not): plan_expanded's, the splits cut for its tiles. Set another before
    # the first run and the splits stay those cut for the plan's.
    schedule: attention_hopper.Schedule = attention_hopper.DEFAULT_SCHEDULE
    # The attention's K/V arguments (descriptors, where it reads through them) by chunk
    # length, built at a chunk's first launch: an eager run builds none after its first.
    sources: dict[int, tuple] = field(default_factory=dict, repr=False)

    @property
    def chunks(self) -> int:
        return len(self.chunk_args)

    def workspace(self) -> dict[str, torch.Tensor]:
        """The tensors the plan allocated (the output and LSE included), by name."""
        named = {"k_chunk": self.k_chunk, "v_chunk": self.v_chunk, "part_o": self.part_o,
                 "part_lse": self.part_lse, "out": self.out, "lse": self.lse}
        if self.running is not None:
            named["running"] = self.running
        named.update({f"index{i}": t for i, t in enumerate(self.index_tensors)})
        return named

    def expand_chunk(self, j: int) -> None:
        gather_kv_b_proj(*self.chunk_args[j], variant=self.variant, validate=False)

    def attend_chunk(self, j: int) -> None:
        """Chunk j's attention, merged: into the running output while chunks remain (after
        the earlier ones), into ``out`` at the last."""
        a, keys = self.chunk_args[j], self.chunk_tokens[j]
        src = self.sources.get(keys)
        if self.kernel == "hopper":
            if src is None:
                src = self.sources[keys] = attention_hopper.descriptors(
                    self.q, self.k_chunk, self.v_chunk, keys, self.schedule.block_n)
            attention_hopper.launch(self.q, self.k_chunk, self.v_chunk, keys, self.sm_scale,
                                    self.splits[j], self.part_o, self.part_lse, src,
                                    self.schedule)
        else:
            blk = self.blocking or expanded_blocking(self.q.shape[0], keys)
            if src is None:
                src = self.sources[keys] = prefix_sources(self.q, self.k_chunk, self.v_chunk,
                                                          keys, blk)
            launch_prefix(self.q, self.k_chunk, self.v_chunk, a.k_out_scale, a.v_out_scale,
                          keys, self.sm_scale, self.splits[j], self.part_o, self.part_lse,
                          blk, src)
        last = j == self.chunks - 1
        dest = self.out if last else self.running
        prev = (self.running, self.lse) if j > 0 else (None, None)
        merge_parts(self.part_o, self.part_lse, self.splits[j], dest, self.lse, *prev)

    def expand(self) -> None:
        """Every chunk's expansion alone (the last chunk's K/V stay in the buffers)."""
        for j in range(self.chunks):
            self.expand_chunk(j)

    def attend(self) -> None:
        """Every chunk's attention and merge alone, over whatever the buffers hold."""
        for j in range(self.chunks):
            self.attend_chunk(j)

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        for j in range(self.chunks):
            self.expand_chunk(j)
            self.attend_chunk(j)
        return self.out, self.lse


def plan_expanded(
    q: torch.Tensor,  # [n, H, nope + pe] bf16 / fp16: the new tokens' queries (rope applied)
    k_buffer: torch.Tensor,  # [num_blocks, block_size, kv_c + pe] bf16 / e4m3: the latent cache
    k_scale: torch.Tensor | None,  # [1] float32: an fp8 cache's scale
    kv_indptr: torch.Tensor,  # [2] int32: the sequence's pages, kv_indices[0 : kv_indptr[1]]
    kv_indices: torch.Tensor,  # [>= ceil(C / block_size)] int32: block ids
    context_len: int,  # C: the cached tokens
    kv_proj_weight: torch.Tensor,  # [H * (nope + v), kv_c] (MXFP4 [N, kv_c / 2])
    kv_proj_scale: torch.Tensor | None,  # the weight's scale in its format (docs/contract.md)
    *,
    chunk_tokens: int | None = None,  # tokens expanded at a time (None: all C at once)
    kv_dtype: torch.dtype = torch.bfloat16,  # expanded K/V: q's dtype or float8_e4m3fn
    k_out_scale: torch.Tensor | None = None,  # [1] float32: FP8 K's scale
    v_out_scale: torch.Tensor | None = None,  # [1] float32: FP8 V's scale
    sm_scale: float | None = None,  # None: 1 / sqrt(nope + pe)
    num_splits: int | None = None,  # splits of each chunk's keys (None: to fill the device)
    variant: str = "auto",  # the expansion's design (mla_kernels.variant_names())
    blocking: Blocking | None = None,  # the portable kernel's tiles (None: expanded_blocking's)
    kernel: str = "auto",  # the attention's kernel: KERNEL_CHOICES
    # The Gluon kernel's pipeline (None: attention_hopper.schedule_for(n), by the queries)
    schedule: attention_hopper.Schedule | None = None,
    out: torch.Tensor | None = None,  # [n, H, v] q's dtype or float32
    lse: torch.Tensor | None = None,  # [n, H] float32
    validate: bool | None = None,  # read the page table and scales (default: interpreter only)
) -> ExpandedPlan:
    """Check every argument, allocate the chunk's K/V and the partials, and make each
    chunk's page table: the plan ``expand_and_attend`` runs."""
    dev = checks.device_of(q)
    checks.tensor(q, "q", dims=3, dtypes=checks.QUERY_DTYPES, device=dev)
    n, h, dk = q.shape
    checks.tensor(k_buffer, "k_buffer", dims=3, dtypes=(torch.bfloat16, *FP8_DTYPES), device=dev)
    checks.page_table(kv_indptr, kv_indices, dev)
    checks.int_at_least(context_len, "context_len", 1)
    checks.tensor(kv_proj_weight, "kv_proj_weight", dims=2,
                  dtypes=(torch.bfloat16, torch.uint8, *FP8_DTYPES,
                          *([torch.float4_e2m1fn_x2] if hasattr(torch, "float4_e2m1fn_x2") else [])),
                  device=dev)
    kv_c, pe, nope, v = head_dims(q, k_buffer, kv_proj_weight, kv_proj_scale)
    bs = k_buffer.shape[1]
    chunk = context_len if chunk_tokens is None else checks.int_at_least(chunk_tokens,
                                                                         "chunk_tokens", 1)
    if chunk % bs and chunk < context_len:
        raise checks.fail("chunk_tokens", f"a multiple of the page size {bs} (chunks start on "
                          "a page)", chunk)
    chunk = min(chunk, context_len)
    if kv_dtype not in (q.dtype, checks.FP8):
        raise checks.fail("kv_dtype", f"{q.dtype} (q's) or torch.float8_e4m3fn", kv_dtype)
    fp8 = kv_dtype == checks.FP8
    checks.scale(k_out_scale, "k_out_scale", dev, fp8, "FP8 K/V only")
    checks.scale(v_out_scale, "v_out_scale", dev, fp8, "FP8 K/V only")
    scale = checks.sm_scale(sm_scale, dk)
    splits_asked = checks.optional_int_at_least(num_splits, "num_splits", 1)
    if splits_asked is not None and splits_asked > MAX_SPLITS:
        raise checks.fail("num_splits", f"None or an int in [1, {MAX_SPLITS}]", splits_asked)
    if type(variant) is not str:
        raise checks.fail("variant", "a design's name (mla_kernels.variant_names())", repr(variant))
    if schedule is not None:
        if not isinstance(schedule, attention_hopper.Schedule):
            raise checks.fail("schedule", "None or a context.attention_hopper.Schedule",
                              type(schedule).__name__)
        if kernel == "portable" or blocking is not None:
            raise checks.fail("schedule", "None with kernel='portable' or a blocking (a "
                              "schedule is the hopper kernel's)", schedule)
    kernel = choose_kernel(kernel, blocking, KERNEL_CHOICES,
                           lambda: attention_hopper.supports(q, kv_dtype, v))
    if schedule is None:
        schedule = attention_hopper.schedule_for(n)
    checks.out_buffer(out, "out", dev, (n, h, v), (q.dtype, torch.float32))
    checks.out_buffer(lse, "lse", dev, (n, h), (torch.float32,))
    # Every tensor the call reads: an output over a scale or the page table would change
    # what a later chunk's expansion reads, and the caller's input with it.
    checks.no_overlap({"q": q, "k_buffer": k_buffer, "k_scale": k_scale, "kv_indptr": kv_indptr,
                       "kv_indices": kv_indices, "kv_proj_weight": kv_proj_weight,
                       "kv_proj_scale": kv_proj_scale, "k_out_scale": k_out_scale,
                       "v_out_scale": v_out_scale, "out": out, "lse": lse}, ["out", "lse"])
    validate = checks.validating(checks.flag_or_none(validate, "validate"))
    if validate:
        checks.check_pages(k_buffer, k_scale, kv_indptr, kv_indices, context_len)

    starts = list(range(0, context_len, chunk))
    lens = [min(chunk, context_len - t0) for t0 in starts]
    k_chunk = torch.empty((chunk, h, nope + pe), dtype=kv_dtype, device=dev)
    v_chunk = torch.empty((chunk, h, v), dtype=kv_dtype, device=dev)
    # One table pair per chunk, made now: a graph replays the launches, not their set-up.
    tables = torch.tensor([[0, -(-ln // bs), 0, ln] for ln in lens], dtype=torch.int32,
                          device=dev)
    chunk_args, index_tensors = [], [tables]
    for j, t0 in enumerate(starts):
        a = GatherArgs(k_buffer, k_scale, tables[j, :2], kv_indices[t0 // bs:], tables[j, 2:],
                       kv_proj_weight, kv_proj_scale, k_chunk, v_chunk,
                       k_out_scale if fp8 else None, v_out_scale if fp8 else None)
        check_arguments(*a)  # the call's own checks, every argument named as it names them
        check_aliasing(a)
        if validate:
            validate_inputs(*a)
        chunk_args.append(a)
    if kernel == "hopper":  # one program an SM (its shared memory): in waves of them
        units = device_spec(dev).compute_units
        splits = [splits_asked or attention_hopper.splits(n, h, ln, units, schedule.block_n)
                  for ln in lens]
    else:
        splits = [splits_asked or default_splits(q, ln, blocking) for ln in lens]
    part_o = torch.empty((max(splits), n, h, v), dtype=torch.float32, device=dev)
    part_lse = torch.empty((max(splits), n, h), dtype=torch.float32, device=dev)
    out = torch.empty((n, h, v), dtype=q.dtype, device=dev) if out is None else out
    lse = torch.empty((n, h), dtype=torch.float32, device=dev) if lse is None else lse
    running = None
    if len(starts) > 1:
        running = out if out.dtype == torch.float32 else torch.empty(
            (n, h, v), dtype=torch.float32, device=dev)
    return ExpandedPlan(q, chunk_args, lens, splits, scale, variant, k_chunk, v_chunk, part_o,
                        part_lse, running, out, lse, index_tensors, blocking, kernel, schedule)


def expand_and_attend(q, k_buffer, k_scale, kv_indptr, kv_indices, context_len, kv_proj_weight,
                      kv_proj_scale, **options) -> tuple[torch.Tensor, torch.Tensor]:
    """The n new queries over the C cached tokens by expanding the latent into per-head K/V
    (``chunk_tokens`` at a time) and attending: (out [n, H, v], lse [n, H]). The arguments
    are ``plan_expanded``'s."""
    return plan_expanded(q, k_buffer, k_scale, kv_indptr, kv_indices, context_len,
                         kv_proj_weight, kv_proj_scale, **options).run()
