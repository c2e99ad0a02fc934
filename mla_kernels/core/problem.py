"""Argument checks of gather_kv_b_proj and the problem they describe (docs/contract.md).

``check_arguments`` reads shapes, dtypes, strides and devices only (no device-to-host
copy); ``check_aliasing`` compares the byte ranges at the tensors' addresses
(whatever storage object holds them); ``check_hint`` the host-side hint. They
run before every launch. ``validate_inputs`` reads tensor contents (it synchronises): the
launch runs it first when asked (``validate=True``, the default under the interpreter).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .formats import (
    DEFAULT_SCALE,
    E8M0_NAN,
    FP8_BLOCK,
    FP8_DTYPES,
    MX_BLOCK,
    as_uint8,
    detect_weight_format,
    scale_kind,
)

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn)
# Outputs stored as e4m3 codes of value / scale, with the caller's per-tensor scale.
FP8_OUT = torch.float8_e4m3fn
OUT_SCALE_MIN = 2.0 ** -126  # the smallest FP8 output scale: its float32 reciprocal is finite


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (fixed per process, at import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def fp8_fnuz_supported() -> bool:
    """e4m3fnuz is a native fp8 type only on AMD MI300-class backends."""
    return bool(torch.version.hip) and not interpreting()


class GatherArgs(NamedTuple):
    """The arguments of gather_kv_b_proj, by name (docs/contract.md): the nine tensors,
    then the FP8 outputs' scales (None for outputs of any other dtype)."""

    k_buffer: torch.Tensor
    k_scale: torch.Tensor | None
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_prefix_sum_context_lens: torch.Tensor
    kv_proj_weight: torch.Tensor
    kv_proj_scale: torch.Tensor | None
    k_prefix: torch.Tensor
    v_prefix: torch.Tensor
    k_out_scale: torch.Tensor | None = None
    v_out_scale: torch.Tensor | None = None


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
    weight_scale: str = ""  # "none", "row", "block", "e8m0"; "" for the format's default
    scale_dtype: torch.dtype | None = None  # of a float scale; None: float32 (or no scale)
    aligned16: bool = True  # weight and outputs 16-byte aligned (TMA designs need it)

    @property
    def scale(self) -> str:
        """How the weight's scale applies (formats.scale_kind)."""
        return self.weight_scale or DEFAULT_SCALE[self.weight_format]

    @property
    def out_is_fp8(self) -> bool:
        """Outputs stored as e4m3 codes of value / the caller's scale (docs/contract.md)."""
        return self.out_dtype == FP8_OUT

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


HINT_LIMIT = 2**31  # max_context_len below this: row indices are int32 in every kernel
SCALE_DTYPES = (torch.float32, torch.bfloat16)  # float weight scales; bf16 read as float32


def _fail(arg: str, expected: str, got) -> ValueError:
    return ValueError(f"{arg}: expected {expected}, got {got}")


# A negative view's memory holds the values unnegated: the kernels would read (or write)
# them with the wrong sign. (expected, got) of its refusal, wherever it is checked.
NOT_NEGATED = ("a tensor with no pending negation (call .resolve_neg())",
               "a negative view (is_neg() is True)")


def _require(cond: bool, arg: str, expected: str, got) -> None:
    if not cond:
        raise _fail(arg, expected, got)


def _check_tensor(t, arg: str, *, dims: int, dtypes: tuple, device: torch.device) -> None:
    # Runs on every plan: the messages are only formatted once a check has failed.
    if (isinstance(t, torch.Tensor) and t.dim() == dims and t.dtype in dtypes
            and t.device == device and t.is_contiguous() and not t.is_neg()):
        return
    _require(isinstance(t, torch.Tensor), arg, "a torch.Tensor", type(t).__name__)
    _require(t.dim() == dims, arg, f"{dims} dimensions", f"shape {tuple(t.shape)}")
    _require(t.dtype in dtypes, arg, f"dtype in {[str(d) for d in dtypes]}", t.dtype)
    _require(t.device == device, arg, f"device {device} (that of k_buffer)", t.device)
    _require(t.is_contiguous(), arg, "a contiguous tensor", f"strides {t.stride()}")
    # (Complex dtypes, the only ones with a pending conjugation, are refused above.)
    _require(not t.is_neg(), arg, *NOT_NEGATED)


def data_ptr(t) -> int:
    """A tensor's address, or 0 for one without real storage (a fake tensor being traced)."""
    try:
        return t.data_ptr()
    except RuntimeError:
        return 0


def _devices_accepted() -> str:
    return "a CUDA tensor, or a CPU one under the Triton interpreter" if interpreting() \
        else "a GPU tensor (set TRITON_INTERPRET=1 to run on the CPU)"


def _weight_dtypes() -> tuple:
    return (torch.bfloat16, torch.float8_e4m3fn, torch.uint8) + tuple(
        d for d in (getattr(torch, "float4_e2m1fn_x2", None),) if d is not None) + (
        (torch.float8_e4m3fnuz,) if fp8_fnuz_supported() else ())


def _check_scale(w: torch.Tensor, ws, fmt: str, kv_c: int, dev: torch.device) -> str:
    """The weight scale's checks by format; returns its kind (formats.scale_kind)."""
    n = w.shape[0]
    row, block = (n,), (-(-n // FP8_BLOCK), -(-kv_c // FP8_BLOCK))
    shapes = f"[{n}] or [{n}, 1] (per output row) or {list(block)} (per 128x128 block)"
    if fmt == "mxfp4":
        # A uint8 weight is MXFP4 only beside an e8m0 scale: with a float scale it is most
        # likely an fp8 weight passed as raw bytes, and the message says so.
        _require(ws is not None, "kv_proj_scale",
                 f"e8m0 [{n}, {kv_c // MX_BLOCK}] for an MXFP4 weight", None)
        _require(not (isinstance(ws, torch.Tensor) and ws.dtype in SCALE_DTYPES),
                 "kv_proj_weight", f"float8_e4m3fn for an fp8 weight with a {ws.dtype} scale "
                 "(a uint8 weight is read as MXFP4: packed e2m1 beside a uint8 or "
                 "float8_e8m0fnu scale)", f"{w.dtype} with a {getattr(ws, 'dtype', None)} scale")
        _require(kv_c % MX_BLOCK == 0, "kv_proj_weight",
                 f"kv_c_dim a multiple of {MX_BLOCK} for MXFP4", kv_c)
        scale8 = as_uint8(ws) if isinstance(ws, torch.Tensor) else ws
        _check_tensor(scale8, "kv_proj_scale", dims=2, dtypes=(torch.uint8,), device=dev)
        _require(tuple(scale8.shape) == (n, kv_c // MX_BLOCK), "kv_proj_scale",
                 f"[{n}, {kv_c // MX_BLOCK}] (one e8m0 per 32 values)", tuple(scale8.shape))
        return "e8m0"
    if ws is None:
        _require(fmt == "bf16", "kv_proj_scale", f"a float32 or bf16 scale {shapes} for an "
                 "fp8 weight", None)
        return "none"
    _require(isinstance(ws, torch.Tensor), "kv_proj_scale", "a torch.Tensor or None",
             type(ws).__name__)
    _check_tensor(ws, "kv_proj_scale", dims=ws.dim(), dtypes=SCALE_DTYPES, device=dev)
    _require(tuple(ws.shape) in (row, (n, 1), block) and ws.dim() in (1, 2), "kv_proj_scale",
             shapes, tuple(ws.shape))
    return scale_kind(w, ws)


def _check_out_scale(scale, arg: str, out: torch.Tensor, out_arg: str,
                     dev: torch.device) -> None:
    """An FP8 output's scale: a float32 [1] tensor beside it; None for any other output."""
    if out.dtype != FP8_OUT:
        _require(scale is None, arg, f"None ({out_arg} is {out.dtype}: only FP8 outputs take "
                 "a scale)", f"a {type(scale).__name__}")
        return
    _require(scale is not None, arg, f"a float32 [1] tensor ({out_arg} is {FP8_OUT})", None)
    _check_tensor(scale, arg, dims=1, dtypes=(torch.float32,), device=dev)
    _require(scale.numel() == 1, arg, "shape [1]", tuple(scale.shape))


def check_arguments(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                    kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale=None,
                    v_out_scale=None) -> Problem:
    """Check shapes, dtypes, devices and contiguity; return the Problem they describe."""
    _require(isinstance(k_buffer, torch.Tensor), "k_buffer", "a torch.Tensor",
             type(k_buffer).__name__)
    dev = k_buffer.device
    _require(dev.type == "cuda" or (dev.type == "cpu" and interpreting()), "k_buffer",
             _devices_accepted(), f"device {dev}")
    cache_dtypes = (torch.bfloat16, torch.float8_e4m3fn) + (
        (torch.float8_e4m3fnuz,) if fp8_fnuz_supported() else ())
    if k_buffer.dtype == torch.float8_e4m3fnuz and not fp8_fnuz_supported():
        raise _fail("k_buffer", "bfloat16 or float8_e4m3fn (float8_e4m3fnuz needs an AMD "
                    "MI300-class backend)", k_buffer.dtype)
    _check_tensor(k_buffer, "k_buffer", dims=3, dtypes=cache_dtypes, device=dev)
    _require(k_buffer.shape[1] >= 1, "k_buffer", "a page size (shape[1]) >= 1",
             f"shape {tuple(k_buffer.shape)}")
    if k_buffer.dtype in FP8_DTYPES:
        # A bf16 cache has nothing to dequantise: its k_scale, if any, is ignored.
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
    _require(v_prefix.dtype == k_prefix.dtype, "v_prefix",
             f"dtype {k_prefix.dtype} (that of k_prefix)", v_prefix.dtype)
    _check_out_scale(k_out_scale, "k_out_scale", k_prefix, "k_prefix", dev)
    _check_out_scale(v_out_scale, "v_out_scale", v_prefix, "v_prefix", dev)
    rows, heads = k_prefix.shape[0], k_prefix.shape[1]
    _require(v_prefix.shape[:2] == k_prefix.shape[:2], "v_prefix",
             f"[{rows}, {heads}, v] (rows and heads of k_prefix)", tuple(v_prefix.shape))
    _require(heads >= 1, "k_prefix", "at least one head", tuple(k_prefix.shape))
    v_dim = v_prefix.shape[2]

    _check_tensor(kv_proj_weight, "kv_proj_weight", dims=2, dtypes=_weight_dtypes(), device=dev)
    _require(kv_proj_scale is None or isinstance(kv_proj_scale, torch.Tensor), "kv_proj_scale",
             "a torch.Tensor or None", type(kv_proj_scale).__name__)
    fmt = detect_weight_format(kv_proj_weight, kv_proj_scale)
    n = kv_proj_weight.shape[0]
    kv_c = kv_proj_weight.shape[1] * (2 if fmt == "mxfp4" else 1)
    kind = _check_scale(kv_proj_weight, kv_proj_scale, fmt, kv_c, dev)
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

    return Problem(
        num_heads=heads, kv_c_dim=kv_c, pe_dim=pe, nope_dim=nope, v_dim=v_dim,
        block_size=k_buffer.shape[1], batch=kv_indptr.numel() - 1, out_rows=rows,
        weight_format=fmt, cache_dtype=k_buffer.dtype, weight_dtype=kv_proj_weight.dtype,
        out_dtype=k_prefix.dtype, weight_scale=kind,
        scale_dtype=kv_proj_scale.dtype if kind in ("row", "block")
        and kv_proj_scale.dtype != torch.float32 else None,
        aligned16=aligned16(data_ptr(kv_proj_weight), data_ptr(k_prefix), data_ptr(v_prefix)),
    )


def aligned16(*ptrs: int) -> bool:
    """Whether every address is a multiple of 16 bytes."""
    return not any(p & 15 for p in ptrs)


_ARG_NAMES = GatherArgs._fields


def aliasing_pairs(args: GatherArgs) -> tuple[tuple[int, int, int, int], ...]:
    """(argument, output, their byte sizes) of every pair the aliasing check compares, by
    position in GatherArgs: each output against every other argument (k_prefix and
    v_prefix once), empty tensors and a bf16 cache's ignored k_scale left out. Fixed by
    shapes and dtypes, so a cached plan keeps them."""
    cache_fp8 = args.k_buffer.dtype in FP8_DTYPES
    sizes = [0 if t is None or (i == 1 and not cache_fp8) else t.numel() * t.element_size()
             for i, t in enumerate(args)]
    return tuple((i, o, sizes[i], sizes[o]) for i in range(len(args)) for o in (7, 8)
                 if i != o and not (i == 7 and o == 8) and sizes[i] and sizes[o])


def check_aliasing(args: GatherArgs, pairs: tuple | None = None, ptrs: tuple | None = None
                   ) -> None:
    """Outputs may not overlap each other or any input: their byte ranges are compared (no
    contents read). Inputs may share storage with each other; a bf16 cache's ignored
    k_scale is not compared. ``pairs`` and ``ptrs`` (the arguments' data pointers), when a
    caller has them, save recomputing them."""
    pairs = aliasing_pairs(args) if pairs is None else pairs
    if ptrs is None:
        # A bf16 cache's k_scale is ignored, whatever it is: it is in no pair.
        ptrs = tuple(t.data_ptr() if isinstance(t, torch.Tensor) else 0 for t in args)
    for i, o, m, n in pairs:
        lo, olo = ptrs[i], ptrs[o]
        if lo < olo + n and olo < lo + m:
            raise _fail(_ARG_NAMES[o], f"memory that overlaps no other argument "
                        f"({_ARG_NAMES[i]} holds bytes [{lo:#x}, {lo + m:#x}))",
                        f"bytes [{olo:#x}, {olo + n:#x})")


def check_negation(args: GatherArgs) -> None:
    """No argument a pending negation (``_check_tensor``'s rule, alone): the custom op's
    check on the caller's tensors, which a traced graph may not hand the launch."""
    fp8 = isinstance(args.k_buffer, torch.Tensor) and args.k_buffer.dtype in FP8_DTYPES
    for i, (name, t) in enumerate(zip(_ARG_NAMES, args, strict=True)):
        if isinstance(t, torch.Tensor) and t.is_neg() and (i != 1 or fp8):
            raise _fail(name, *NOT_NEGATED)


def check_aliasing_traced(args: GatherArgs) -> None:
    """The aliasing rule on tensors without addresses (fake tensors while a graph is traced):
    two tensors overlap only where they share a storage, and there their byte ranges are
    compared by storage offset. A traced graph may hand the op copies of its arguments
    (functionalization), so this is where an overlap of the caller's tensors still shows."""
    for i, o, m, n in aliasing_pairs(args):
        a, out = args[i], args[o]
        if not torch._C._is_alias_of(a, out):
            continue
        lo, olo = a.storage_offset() * a.element_size(), out.storage_offset() * out.element_size()
        if lo < olo + n and olo < lo + m:
            raise _fail(_ARG_NAMES[o], f"memory that overlaps no other argument "
                        f"({_ARG_NAMES[i]} holds bytes [{lo}, {lo + m}) of the same storage)",
                        f"bytes [{olo}, {olo + n})")


def check_hint(max_context_len) -> None:
    """max_context_len: None, or a host int (not a bool) in [0, 2^31)."""
    if max_context_len is None:
        return
    _require(type(max_context_len) is int and 0 <= max_context_len < HINT_LIMIT,
             "max_context_len", f"None or a host int in [0, {HINT_LIMIT})",
             repr(max_context_len))


def validate_inputs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                    kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale=None,
                    v_out_scale=None, *, max_context_len: int | None = None) -> None:
    """Check what the launch cannot check without reading the tensors (it synchronises).

    Raises ValueError naming the first bad sequence or value: indptr and prefix sums start
    at 0 and never decrease, each sequence holds ceil(ctx / block_size) blocks, every
    block id is in range, the outputs have a row for every token, no context exceeds
    ``max_context_len``; scales are finite and > 0 (no e8m0 NaN code 255), the FP8
    outputs' at least 2^-126; the weight and every cache row a token reads hold no NaN or
    infinity.
    """
    args = GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                      kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale,
                      v_out_scale)
    prob = check_arguments(*args)
    check_aliasing(args)
    check_hint(max_context_len)
    used, cs = check_indices(args, prob, max_context_len)
    _check_values(args, prob, used, cs)


def check_indices(args: GatherArgs, prob: Problem, max_context_len: int | None = None
                  ) -> tuple[int, torch.Tensor]:
    """validate_inputs' checks of the index tensors (it synchronises): the sequences' block
    counts, every block id in range, the hint, a row for every token. Returns the blocks
    used (kv_indptr[-1]) and the prefix sums, read to the host (int64)."""
    k_buffer, kv_indptr, kv_indices = args.k_buffer, args.kv_indptr, args.kv_indices
    kv_prefix_sum_context_lens = args.kv_prefix_sum_context_lens
    indptr = kv_indptr.cpu().long()
    cs = kv_prefix_sum_context_lens.cpu().long()
    indices = kv_indices.cpu().long()
    _require(int(indptr[0]) == 0, "kv_indptr", "kv_indptr[0] == 0", int(indptr[0]))
    _require(int(cs[0]) == 0, "kv_prefix_sum_context_lens", "first entry 0", int(cs[0]))
    nblk, ctx = indptr.diff(), cs.diff()
    bs, num_blocks = prob.block_size, k_buffer.shape[0]

    def first(bad: torch.Tensor) -> int | None:
        hit = bad.nonzero()
        return int(hit[0, 0]) if hit.numel() else None

    want = -(-ctx // bs)
    # The first sequence with any fault, then its first fault in this order.
    if (b := first((nblk < 0) | (ctx < 0) | (nblk != want))) is not None:
        _require(int(nblk[b]) >= 0, "kv_indptr", f"non-decreasing entries (sequence {b})",
                 f"{int(indptr[b])} then {int(indptr[b + 1])}")
        _require(int(ctx[b]) >= 0, "kv_prefix_sum_context_lens",
                 f"non-decreasing entries (sequence {b})", f"{int(cs[b])} then {int(cs[b + 1])}")
        raise _fail("kv_indptr", f"ceil({int(ctx[b])} / {bs}) = {int(want[b])} blocks for "
                    f"sequence {b}", f"{int(nblk[b])} blocks")
    used = int(indptr[-1])
    _require(used <= indices.numel(), "kv_indices",
             f"at least {used} entries (kv_indptr[-1])", indices.numel())
    ids = indices[:used]
    if (i := first((ids < 0) | (ids >= num_blocks))) is not None:
        b = int(torch.searchsorted(indptr, i, right=True)) - 1
        raise _fail("kv_indices", f"block ids in [0, {num_blocks}) (sequence {b})",
                    f"{int(ids[i])} at its entry {i - int(indptr[b])}")
    if max_context_len is not None and (b := first(ctx > max_context_len)) is not None:
        raise _fail("max_context_len", f">= every context length (sequence {b} has "
                    f"{int(ctx[b])})", max_context_len)
    _require(int(cs[-1]) <= prob.out_rows, "k_prefix",
             f"at least {int(cs[-1])} rows (kv_prefix_sum_context_lens[-1])", prob.out_rows)
    return used, cs


def _check_values(args: GatherArgs, prob: Problem, used: int, cs: torch.Tensor) -> None:
    """validate_inputs' checks of values: scales, the weight, every cache row a token reads
    (``cs``: the prefix sums on the host, as check_indices read them)."""
    (k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
     kv_proj_scale) = args[:7]
    bs = prob.block_size
    if prob.cache_is_fp8:
        ks = float(k_scale.float().cpu()[0])
        _require(ks == ks and 0 < ks < float("inf"), "k_scale", "a finite value > 0", ks)
    for name in ("k_out_scale", "v_out_scale"):
        t = getattr(args, name)
        if t is not None:
            s = float(t.cpu()[0])
            # The kernels multiply by 1 / scale in float32: below 2^-126 it would be inf,
            # and a zero value times it NaN.
            _require(s == s and OUT_SCALE_MIN <= s < float("inf"), name,
                     "a finite value >= 2^-126 (a float32 whose reciprocal is finite)", s)
    if prob.scale == "e8m0":
        bad = as_uint8(kv_proj_scale) == E8M0_NAN
        if bool(bad.any()):
            raise _fail("kv_proj_scale", f"e8m0 codes below {E8M0_NAN} (255 is NaN)",
                        f"code 255 at {tuple(int(x) for x in bad.nonzero()[0])}")
    elif kv_proj_scale is not None:
        sf = kv_proj_scale.float()
        bad = ~(torch.isfinite(sf) & (sf > 0))
        if bool(bad.any()):
            raise _fail("kv_proj_scale", "finite values > 0",
                        f"{float(sf[bad][0])} at {tuple(int(x) for x in bad.nonzero()[0])}")
    if prob.weight_format != "mxfp4":
        wf = kv_proj_weight.float()
        _require(bool(torch.isfinite(wf).all()), "kv_proj_weight", "finite values (no NaN code)",
                 "a NaN or infinite value")
    if used:
        # Only the rows tokens read: a partly used last block may hold anything past them.
        from .reference import token_rows

        blocks, slots = token_rows(kv_indptr, kv_indices, kv_prefix_sum_context_lens, bs)
        rows = k_buffer[blocks, slots].float()
        bad = ~torch.isfinite(rows).all(dim=1)
        if bool(bad.any()):
            t = int(bad.nonzero()[0, 0])
            b = int(torch.searchsorted(cs, t, right=True)) - 1
            raise _fail("k_buffer", "finite values in every row a token reads (no NaN code)",
                        f"a NaN or infinity in block {int(blocks[t])}, slot {int(slots[t])} "
                        f"(token {t - int(cs[b])} of sequence {b})")
