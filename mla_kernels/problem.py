"""Argument checks of gather_kv_b_proj and the problem they describe.

``check_arguments`` reads shapes, dtypes and devices only (no device-to-host copy), so it
runs on every launch. ``validate_inputs`` reads tensor contents and is called on demand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .formats import FP8_BLOCK, FP8_DTYPES, MX_BLOCK, as_uint8, detect_weight_format

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (fixed per process, at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def fp8_fnuz_supported() -> bool:
    """e4m3fnuz is a native fp8 type only on AMD MI300-class backends."""
    return bool(torch.version.hip) and not interpreting()


class GatherArgs(NamedTuple):
    """The nine arguments of gather_kv_b_proj, by name (docs/contract.md)."""

    k_buffer: torch.Tensor
    k_scale: torch.Tensor | None
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_prefix_sum_context_lens: torch.Tensor
    kv_proj_weight: torch.Tensor
    kv_proj_scale: torch.Tensor | None
    k_prefix: torch.Tensor
    v_prefix: torch.Tensor


CACHE_NAMES = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8",
               torch.float8_e4m3fnuz: "fp8_fnuz"}


@dataclass(frozen=True)
class Problem:
    """What the kernels need to know about one call, derived from shapes alone."""

    num_heads: int
    kv_c_dim: int
    pe_dim: int
    nope_dim: int
    v_dim: int
    block_size: int
    batch: int
    out_rows: int
    weight_format: str
    cache_dtype: torch.dtype
    weight_dtype: torch.dtype
    out_dtype: torch.dtype = torch.bfloat16

    @property
    def cache_is_fp8(self) -> bool:
        return self.cache_dtype in FP8_DTYPES

    @property
    def dot_in_fp8(self) -> bool:
        """Both operands fp8 of one type: the dot runs in fp8; otherwise in bf16 (lossless)."""
        return self.cache_is_fp8 and self.weight_dtype == self.cache_dtype

    @property
    def cache_name(self) -> str:
        """The cache dtype's name in formats.CACHE_DTYPES ("bf16", "fp8", "fp8_fnuz")."""
        return CACHE_NAMES[self.cache_dtype]

    @property
    def chunk_tokens(self) -> int:
        """ChunkK of the public kernel: 16 tokens for a bf16 cache, 32 for fp8."""
        return 32 if self.cache_is_fp8 else 16


def _fail(arg: str, expected: str, got) -> ValueError:
    return ValueError(f"{arg}: expected {expected}, got {got}")


def _require(cond: bool, arg: str, expected: str, got) -> None:
    if not cond:
        raise _fail(arg, expected, got)


def _check_tensor(t, arg: str, *, dims: int, dtypes: tuple, device: torch.device) -> None:
    # Runs on every launch: the messages are only formatted once a check has failed.
    if (isinstance(t, torch.Tensor) and t.dim() == dims and t.dtype in dtypes
            and t.device == device and t.is_contiguous()):
        return
    _require(isinstance(t, torch.Tensor), arg, "a torch.Tensor", type(t).__name__)
    _require(t.dim() == dims, arg, f"{dims} dimensions", f"shape {tuple(t.shape)}")
    _require(t.dtype in dtypes, arg, f"dtype in {[str(d) for d in dtypes]}", t.dtype)
    _require(t.device == device, arg, f"device {device} (that of k_buffer)", t.device)
    _require(t.is_contiguous(), arg, "a contiguous tensor", f"strides {t.stride()}")


def check_arguments(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                    kv_proj_weight, kv_proj_scale, k_prefix, v_prefix) -> Problem:
    """Check shapes, dtypes, devices and contiguity; return the Problem they describe."""
    _require(isinstance(k_buffer, torch.Tensor), "k_buffer", "a torch.Tensor",
             type(k_buffer).__name__)
    dev = k_buffer.device
    if not interpreting():
        _require(dev.type == "cuda", "k_buffer",
                 "a GPU tensor (set TRITON_INTERPRET=1 to run on the CPU)", f"device {dev}")
    cache_dtypes = (torch.bfloat16, torch.float8_e4m3fn) + (
        (torch.float8_e4m3fnuz,) if fp8_fnuz_supported() else ())
    if k_buffer.dtype == torch.float8_e4m3fnuz and not fp8_fnuz_supported():
        raise _fail("k_buffer", "bfloat16 or float8_e4m3fn (float8_e4m3fnuz needs an AMD "
                    "MI300-class backend)", k_buffer.dtype)
    _check_tensor(k_buffer, "k_buffer", dims=3, dtypes=cache_dtypes, device=dev)
    cache_fp8 = k_buffer.dtype in FP8_DTYPES

    if cache_fp8 or k_scale is not None:
        _require(k_scale is not None, "k_scale", "a float32 [1] tensor for an fp8 cache", None)
        _check_tensor(k_scale, "k_scale", dims=1, dtypes=(torch.float32,), device=dev)
        _require(k_scale.numel() == 1, "k_scale", "shape [1]", tuple(k_scale.shape))

    for name, t in (("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                    ("kv_prefix_sum_context_lens", kv_prefix_sum_context_lens)):
        _check_tensor(t, name, dims=1, dtypes=(torch.int32,), device=dev)
    _require(kv_indptr.numel() >= 1, "kv_indptr", "shape [batch + 1]", tuple(kv_indptr.shape))
    _require(kv_prefix_sum_context_lens.numel() == kv_indptr.numel(),
             "kv_prefix_sum_context_lens", f"shape [{kv_indptr.numel()}] (that of kv_indptr)",
             tuple(kv_prefix_sum_context_lens.shape))

    _check_tensor(k_prefix, "k_prefix", dims=3, dtypes=OUT_DTYPES, device=dev)
    _check_tensor(v_prefix, "v_prefix", dims=3, dtypes=OUT_DTYPES, device=dev)
    rows, heads = k_prefix.shape[0], k_prefix.shape[1]
    _require(v_prefix.shape[:2] == k_prefix.shape[:2], "v_prefix",
             f"[{rows}, {heads}, v] (rows and heads of k_prefix)", tuple(v_prefix.shape))
    _require(heads >= 1, "k_prefix", "at least one head", tuple(k_prefix.shape))
    v_dim = v_prefix.shape[2]

    weight_dtypes = (torch.bfloat16, torch.float8_e4m3fn, torch.uint8) + tuple(
        d for d in (getattr(torch, "float4_e2m1fn_x2", None),) if d is not None) + (
        (torch.float8_e4m3fnuz,) if fp8_fnuz_supported() else ())
    _check_tensor(kv_proj_weight, "kv_proj_weight", dims=2, dtypes=weight_dtypes, device=dev)
    fmt = detect_weight_format(kv_proj_weight, kv_proj_scale)
    n = kv_proj_weight.shape[0]
    kv_c = kv_proj_weight.shape[1] * (2 if fmt == "mxfp4" else 1)
    _require(n % heads == 0 and n // heads > v_dim, "kv_proj_weight",
             f"rows = {heads} heads (k_prefix.shape[1]) x (nope + {v_dim}) with nope > 0",
             f"{n} rows")
    nope = n // heads - v_dim
    pe = k_prefix.shape[2] - nope
    _require(pe >= 0, "k_prefix", f"last dimension >= nope = {nope}", tuple(k_prefix.shape))
    _require(k_buffer.shape[2] == kv_c + pe, "k_buffer",
             f"last dimension kv_c + pe = {kv_c} + {pe} (from kv_proj_weight and k_prefix)",
             tuple(k_buffer.shape))
    _require(kv_c >= 16, "kv_proj_weight", "kv_c_dim >= 16", kv_c)

    if fmt == "bf16":
        _require(kv_proj_scale is None, "kv_proj_scale", "None for a bf16 weight",
                 None if kv_proj_scale is None else tuple(kv_proj_scale.shape))
    elif fmt == "fp8_row":
        _require(kv_proj_scale is not None, "kv_proj_scale",
                 f"float32 [{n}] or [{n}, 1] for an fp8 weight", None)
        _check_tensor(kv_proj_scale, "kv_proj_scale", dims=kv_proj_scale.dim(),
                      dtypes=(torch.float32,), device=dev)
        _require(tuple(kv_proj_scale.shape) in ((n,), (n, 1)), "kv_proj_scale",
                 f"[{n}] or [{n}, 1] (per output row) or [{-(-n // FP8_BLOCK)}, "
                 f"{-(-kv_c // FP8_BLOCK)}] (per 128x128 block)", tuple(kv_proj_scale.shape))
    elif fmt == "fp8_block":
        _check_tensor(kv_proj_scale, "kv_proj_scale", dims=2, dtypes=(torch.float32,),
                      device=dev)
        want = (-(-n // FP8_BLOCK), -(-kv_c // FP8_BLOCK))
        _require(tuple(kv_proj_scale.shape) == want, "kv_proj_scale",
                 f"{list(want)} (per 128x128 block) or [{n}] (per row)",
                 tuple(kv_proj_scale.shape))
    else:  # mxfp4
        _require(kv_c % MX_BLOCK == 0, "kv_proj_weight",
                 f"kv_c_dim a multiple of {MX_BLOCK} for MXFP4", kv_c)
        _require(kv_proj_scale is not None, "kv_proj_scale",
                 f"e8m0 [{n}, {kv_c // MX_BLOCK}] for an MXFP4 weight", None)
        scale8 = as_uint8(kv_proj_scale)
        _check_tensor(scale8, "kv_proj_scale", dims=2, dtypes=(torch.uint8,), device=dev)
        _require(tuple(scale8.shape) == (n, kv_c // MX_BLOCK), "kv_proj_scale",
                 f"[{n}, {kv_c // MX_BLOCK}] (one e8m0 per 32 values)", tuple(scale8.shape))

    return Problem(
        num_heads=heads, kv_c_dim=kv_c, pe_dim=pe, nope_dim=nope, v_dim=v_dim,
        block_size=k_buffer.shape[1], batch=kv_indptr.numel() - 1, out_rows=rows,
        weight_format=fmt, cache_dtype=k_buffer.dtype, weight_dtype=kv_proj_weight.dtype,
        out_dtype=k_prefix.dtype,
    )


def validate_inputs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                    kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, *,
                    max_context_len: int | None = None) -> None:
    """Check what the launch cannot check without reading the tensors (it synchronises).

    Raises ValueError naming the first bad sequence: indptr and prefix sums start at 0 and
    never decrease, each sequence holds ceil(ctx / block_size) blocks, every block id is in
    range, the outputs have a row for every token, no context exceeds ``max_context_len``.
    """
    prob = check_arguments(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                           kv_proj_weight, kv_proj_scale, k_prefix, v_prefix)
    indptr = kv_indptr.cpu().long()
    cs = kv_prefix_sum_context_lens.cpu().long()
    indices = kv_indices.cpu().long()
    _require(int(indptr[0]) == 0, "kv_indptr", "kv_indptr[0] == 0", int(indptr[0]))
    _require(int(cs[0]) == 0, "kv_prefix_sum_context_lens", "first entry 0", int(cs[0]))
    num_blocks, bs = k_buffer.shape[0], prob.block_size
    for b in range(prob.batch):
        nblk = int(indptr[b + 1] - indptr[b])
        ctx = int(cs[b + 1] - cs[b])
        _require(nblk >= 0, "kv_indptr", f"non-decreasing entries (sequence {b})",
                 f"{int(indptr[b])} then {int(indptr[b + 1])}")
        _require(ctx >= 0, "kv_prefix_sum_context_lens",
                 f"non-decreasing entries (sequence {b})", f"{int(cs[b])} then {int(cs[b + 1])}")
        _require(nblk == -(-ctx // bs), "kv_indptr",
                 f"ceil({ctx} / {bs}) = {-(-ctx // bs)} blocks for sequence {b}", f"{nblk} blocks")
        _require(int(indptr[b + 1]) <= indices.numel(), "kv_indices",
                 f"at least {int(indptr[b + 1])} entries (sequence {b})", indices.numel())
        ids = indices[indptr[b]:indptr[b + 1]]
        bad = ((ids < 0) | (ids >= num_blocks)).nonzero()
        _require(bad.numel() == 0, "kv_indices",
                 f"block ids in [0, {num_blocks}) (sequence {b})",
                 f"{int(ids[bad[0, 0]]) if bad.numel() else ''} at its entry "
                 f"{int(bad[0, 0]) if bad.numel() else ''}")
        if max_context_len is not None:
            _require(ctx <= max_context_len, "max_context_len",
                     f">= every context length (sequence {b} has {ctx})", max_context_len)
    _require(int(cs[-1]) <= prob.out_rows, "k_prefix",
             f"at least {int(cs[-1])} rows (kv_prefix_sum_context_lens[-1])", prob.out_rows)
