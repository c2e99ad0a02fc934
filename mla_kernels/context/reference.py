"""The float32 torch reference of prefix attention, computed over the keys in chunks with
online softmax: at n = 8192 new tokens over 109440 cached ones a whole score matrix would
not fit, a chunk's does.

``prefix_reference`` expands each chunk of the latent cache by the call's own reference
(``core.reference.gather_kv_b_proj_reference``, float32) and attends to it, so both paths
are judged against the same float32 truth; ``attention_reference`` attends to given K/V
(FP8 ones dequantised by their scales). Each also gives the magnitude the errors are
judged against: the same attention over |V|.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..core.formats import FP8_DTYPES
from ..core.reference import gather_kv_b_proj_reference
from . import checks
from .expanded import head_dims

SCORE_ELEMENTS = 1 << 26  # float32 scores held at a time (256 MiB)


class Attention(NamedTuple):
    """float32 out [n, H, v], lse [n, H] (natural), and magnitude [n, H, v]: the attention
    of |V|, what a value that cancelled is judged against."""

    out: torch.Tensor
    lse: torch.Tensor
    magnitude: torch.Tensor


class _Online:
    """Online softmax over key chunks, float32, base e."""

    def __init__(self, q: torch.Tensor, sm_scale: float, v_dim: int):
        n, h, _ = q.shape
        self.q = q.float()
        self.scale = sm_scale
        self.m = torch.full((n, h), float("-inf"), device=q.device)
        self.l = torch.zeros((n, h), device=q.device)
        self.acc = torch.zeros((n, h, v_dim), device=q.device)
        self.mag = torch.zeros((n, h, v_dim), device=q.device)

    def add(self, k: torch.Tensor, v: torch.Tensor) -> None:
        s = torch.einsum("nhd,chd->nhc", self.q, k.float()) * self.scale
        m = torch.maximum(self.m, s.amax(-1))
        alpha = torch.exp(self.m - m)
        p = torch.exp(s - m[..., None])
        self.l = self.l * alpha + p.sum(-1)
        self.acc = self.acc * alpha[..., None] + torch.einsum("nhc,chd->nhd", p, v.float())
        self.mag = self.mag * alpha[..., None] + torch.einsum("nhc,chd->nhd", p, v.float().abs())
        self.m = m

    def result(self) -> Attention:
        return Attention(self.acc / self.l[..., None], self.m + torch.log(self.l),
                         self.mag / self.l[..., None])


def _chunk(q: torch.Tensor, chunk: int | None) -> int:
    if chunk is not None and (type(chunk) is not int or chunk < 1):
        raise ValueError(f"chunk: expected None or an int >= 1, got {chunk!r}")
    return chunk or max(1, SCORE_ELEMENTS // max(1, q.shape[0] * q.shape[1]))


def _shapes(q, k, v) -> None:
    """q [n, H, Dk], k [C, H, Dk], v [C, H, Dv]: what the reference needs to agree."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            got = f"shape {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name}: expected a tensor of 3 dimensions, got {got}")
    if tuple(k.shape[1:]) != tuple(q.shape[1:]):
        raise ValueError(f"k: expected shape [*, {q.shape[1]}, {q.shape[2]}] (q's heads and "
                         f"head dim), got {list(k.shape)}")
    if v.shape[0] != k.shape[0] or v.shape[1] != q.shape[1]:
        raise ValueError(f"v: expected shape [{k.shape[0]}, {q.shape[1]}, *], got {list(v.shape)}")


def _no_tf32(fn):
    def run(*args, **kw):
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return fn(*args, **kw)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    run.__doc__, run.__name__ = fn.__doc__, fn.__name__
    return run


@_no_tf32
def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                        n_keys: int | None = None, sm_scale: float | None = None,
                        k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                        chunk: int | None = None) -> Attention:
    """q [n, H, Dk] over the first ``n_keys`` rows of k [C, H, Dk] and v [C, H, Dv], in
    float32, ``chunk`` keys at a time; FP8 K and V times their scales."""
    _shapes(q, k, v)
    n_keys = k.shape[0] if n_keys is None else n_keys
    if type(n_keys) is not int or not 1 <= n_keys <= k.shape[0]:
        raise ValueError(f"n_keys: expected None or an int in [1, {k.shape[0]}] (k's rows), "
                         f"got {n_keys!r}")
    scale = checks.sm_scale(sm_scale, q.shape[2])
    step = _chunk(q, chunk)
    for name, t, s in (("k_scale", k, k_scale), ("v_scale", v, v_scale)):
        if t.dtype in FP8_DTYPES and not (isinstance(s, torch.Tensor) and s.numel() == 1):
            raise ValueError(f"{name}: expected a [1] tensor for FP8 {name[0].upper()}, got "
                             f"{type(s).__name__}")
    run = _Online(q, scale, v.shape[2])
    ks = float(k_scale) if k.dtype in FP8_DTYPES else 1.0
    vs = float(v_scale) if v.dtype in FP8_DTYPES else 1.0
    for t0 in range(0, n_keys, step):
        t1 = min(n_keys, t0 + step)
        run.add(k[t0:t1].float() * ks, v[t0:t1].float() * vs)
    return run.result()


@_no_tf32
def prefix_reference(q: torch.Tensor, k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, context_len: int,
                     kv_proj_weight: torch.Tensor, kv_proj_scale: torch.Tensor | None, *,
                     sm_scale: float | None = None, chunk: int | None = None) -> Attention:
    """q [n, H, nope + pe] over the C cached tokens of one sequence's paged latent cache,
    each chunk expanded in float32 by the call's reference, then attended (``chunk``
    tokens at a time; rounded to whole pages)."""
    _, h, dk = q.shape
    _, _, _, v = head_dims(q, k_buffer, kv_proj_weight, kv_proj_scale)
    checks.int_at_least(context_len, "context_len", 1)
    scale = checks.sm_scale(sm_scale, dk)
    bs = k_buffer.shape[1]
    step = max(bs, _chunk(q, chunk) // bs * bs)
    run = _Online(q, scale, v)
    dev = k_buffer.device
    for t0 in range(0, context_len, step):
        ln = min(step, context_len - t0)
        ptr = torch.tensor([0, -(-ln // bs)], dtype=torch.int32, device=dev)
        cs = torch.tensor([0, ln], dtype=torch.int32, device=dev)
        args = (k_buffer, k_scale, ptr, kv_indices[t0 // bs:], cs, kv_proj_weight, kv_proj_scale)
        k, vv = gather_kv_b_proj_reference(args, num_heads=h, v_head_dim=v,
                                           compute_dtype=torch.float32)
        run.add(k, vv)
    return run.result()
