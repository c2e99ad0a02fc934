"""Argument checks of the context path's entry points: each bad argument is a ValueError
``"<name>: expected <what>, got <what was given>"``, raised before anything is allocated or
written. Shapes, dtypes and devices only; ``check_pages`` reads the page table (it
synchronises) and runs where validation is asked for, as the call's own ``validate``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.formats import FP8_BLOCK, detect_weight_format
from ..core.problem import interpreting

FP8 = torch.float8_e4m3fn
QUERY_DTYPES = (torch.bfloat16, torch.float16)
SCALE_DTYPES = (torch.float32, torch.bfloat16)


def fail(name: str, expected: str, got) -> ValueError:
    return ValueError(f"{name}: expected {expected}, got {got}")


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _dtypes(ds: Sequence[torch.dtype]) -> str:
    return " or ".join(_dtype(d) for d in ds)


def device_of(q, name: str = "q") -> torch.device:
    """The device every tensor of a call must be on: ``q``'s, a CUDA device, or the CPU
    under the Triton interpreter."""
    if not isinstance(q, torch.Tensor):
        raise fail(name, "a torch.Tensor", type(q).__name__)
    ok = q.device.type == "cuda" or (q.device.type == "cpu" and interpreting())
    if not ok:
        raise fail(name, "a CUDA tensor (a CPU one under TRITON_INTERPRET=1)",
                   f"a tensor on {q.device}")
    return q.device


def tensor(t, name: str, *, dims: int, dtypes: Sequence[torch.dtype], device: torch.device,
           shape: Sequence[int | None] | None = None, contiguous: bool = True) -> torch.Tensor:
    """``t`` a tensor of ``dims`` dimensions, one of ``dtypes``, on ``device``, contiguous,
    of ``shape`` where given (None: any size on that axis)."""
    if not isinstance(t, torch.Tensor):
        raise fail(name, "a torch.Tensor", type(t).__name__)
    if t.dim() != dims:
        raise fail(name, f"{dims} dimensions", f"{t.dim()} (shape {list(t.shape)})")
    if t.dtype not in dtypes:
        raise fail(name, f"dtype {_dtypes(dtypes)}", _dtype(t.dtype))
    if t.device != device:
        raise fail(name, f"device {device} (that of q)", t.device)
    if shape is not None and any(w is not None and w != g for w, g in zip(shape, t.shape, strict=True)):
        want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
        raise fail(name, f"shape {want}", list(t.shape))
    if contiguous and not t.is_contiguous():
        raise fail(name, "a contiguous tensor", f"strides {t.stride()}")
    if t.is_neg():
        raise fail(name, "a tensor with no pending negation (call .resolve_neg())",
                   "a negative view")
    return t


def scale(t, name: str, device: torch.device, needed: bool, why: str) -> None:
    """A per-tensor scale: a float32 [1] tensor where ``needed``, else None."""
    if not needed:
        if t is not None:
            raise fail(name, f"None ({why})", f"a {type(t).__name__}")
        return
    if t is None:
        raise fail(name, f"a float32 [1] tensor ({why})", None)
    tensor(t, name, dims=1, dtypes=(torch.float32,), device=device, shape=(1,))


def int_at_least(v, name: str, lo: int) -> int:
    if type(v) is not int or v < lo:
        raise fail(name, f"an int >= {lo}", repr(v))
    return v


def optional_int_at_least(v, name: str, lo: int) -> int | None:
    return None if v is None else int_at_least(v, name, lo)


def sm_scale(v, head_dim: int) -> float:
    """The softmax scale: None for 1 / sqrt(head_dim), else a finite positive float."""
    if v is None:
        return head_dim ** -0.5
    if type(v) not in (int, float) or not (0 < v < float("inf")):
        raise fail("sm_scale", "None or a finite float > 0", repr(v))
    return float(v)


def flag_or_none(v, name: str) -> bool | None:
    if v is not None and type(v) is not bool:
        raise fail(name, "None, True or False", repr(v))
    return v


def validating(validate: bool | None) -> bool:
    """Contents are checked by default under the interpreter only, as the call does."""
    return interpreting() if validate is None else validate


def weight_format(w, ws, name: str, device: torch.device, rows: int, kv_c: int) -> str:
    """A bf16 or fp8 kv_b_proj weight [rows, kv_c] and its scale (per row or per 128x128
    block; an fp8 weight needs one): the format's name."""
    tensor(w, name, dims=2, dtypes=(torch.bfloat16, FP8), device=device, shape=(rows, kv_c))
    fmt = detect_weight_format(w, ws)
    sname = "kv_proj_scale"
    if ws is None:
        if fmt != "bf16":
            raise fail(sname, "a scale for an fp8 weight (per row or per 128x128 block)", None)
        return fmt
    if not isinstance(ws, torch.Tensor) or ws.dtype not in SCALE_DTYPES or ws.device != device:
        raise fail(sname, f"a {_dtypes(SCALE_DTYPES)} tensor on {device}",
                   ws if not isinstance(ws, torch.Tensor) else f"{_dtype(ws.dtype)} on {ws.device}")
    blocks = [-(-rows // FP8_BLOCK), -(-kv_c // FP8_BLOCK)]
    if list(ws.shape) not in ([rows], [rows, 1], blocks):
        raise fail(sname, f"shape [{rows}], [{rows}, 1] or {blocks}", list(ws.shape))
    return fmt


def cache(k_buffer, k_scale, device: torch.device, latent_dim: int) -> bool:
    """The paged latent cache [blocks, block_size, latent_dim], bf16 or e4m3 (then with its
    scale): whether it is fp8."""
    tensor(k_buffer, "k_buffer", dims=3, dtypes=(torch.bfloat16, FP8), device=device,
           shape=(None, None, latent_dim))
    if k_buffer.shape[1] < 1:
        raise fail("k_buffer", "a page size (shape[1]) of at least 1", k_buffer.shape[1])
    fp8 = k_buffer.dtype == FP8
    if fp8:
        scale(k_scale, "k_scale", device, True, "an fp8 cache's dequant scale")
    return fp8


def page_table(kv_indptr, kv_indices, device: torch.device) -> None:
    """One sequence's page table: kv_indptr int32 [2], kv_indices int32 [>= its blocks]."""
    tensor(kv_indptr, "kv_indptr", dims=1, dtypes=(torch.int32,), device=device, shape=(2,))
    tensor(kv_indices, "kv_indices", dims=1, dtypes=(torch.int32,), device=device)


def check_pages(k_buffer, k_scale, kv_indptr, kv_indices, context_len: int) -> None:
    """What shapes cannot say (reads the tensors): kv_indptr starts at 0 and holds the
    context's ceil(context_len / block_size) blocks, kv_indices is that long, every block id
    is in range, and an fp8 cache's scale is finite and > 0."""
    bs = k_buffer.shape[1]
    need = -(-context_len // bs)
    ptr = [int(x) for x in kv_indptr.cpu()]
    if ptr[0] != 0 or ptr[1] - ptr[0] != need:
        raise fail("kv_indptr", f"[0, {need}] (ceil(context_len / block_size) blocks)", ptr)
    if kv_indices.numel() < need:
        raise fail("kv_indices", f"at least {need} entries", kv_indices.numel())
    ids = kv_indices[:need].cpu()
    bad = ((ids < 0) | (ids >= k_buffer.shape[0])).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise fail(f"kv_indices[{i}]", f"a block id in [0, {k_buffer.shape[0]})", int(ids[i]))
    if k_scale is not None and k_buffer.dtype == FP8:
        v = float(k_scale.cpu()[0])
        if not (0 < v < float("inf")):
            raise fail("k_scale", "a finite scale > 0", v)


def out_buffer(t, name: str, device: torch.device, shape: Sequence[int],
               dtypes: Sequence[torch.dtype]) -> torch.Tensor | None:
    """An output given by the caller (None: allocated by the call)."""
    if t is None:
        return None
    return tensor(t, name, dims=len(shape), dtypes=dtypes, device=device, shape=shape)


def no_overlap(named: dict[str, torch.Tensor | None], outputs: Sequence[str]) -> None:
    """No output's bytes overlap another named tensor's (by address range)."""
    spans = {n: (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
             for n, t in named.items() if isinstance(t, torch.Tensor) and t.numel()}
    for o in outputs:
        if o not in spans:
            continue
        a0, a1 = spans[o]
        for n, (b0, b1) in spans.items():
            if n != o and a0 < b1 and b0 < a1:
                raise fail(o, f"memory apart from {n}", "an overlapping tensor")
