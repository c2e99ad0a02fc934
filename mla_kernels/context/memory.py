"""What each path holds on the device while it runs, counted from its shapes: the buffers
its plan allocates (the output and its LSE included), the temporaries of its torch steps,
and nothing of the caller's (queries, cache, weight). A test holds the count to the plans'
own tensors; the map sets it beside torch's peak allocation on the GPU."""

from __future__ import annotations

import torch

from ..core.shapes import MLAShape, get_shape
from . import checks

F32 = 4


def _size(dtype, name: str) -> int:
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name}: expected a torch.dtype, got {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def _counts(new_tokens, context_len, splits) -> None:
    """The counts every estimate takes: ints, n >= 0 (no new token holds nothing of n),
    C >= 1, splits >= 1."""
    for name, v, lo in (("new_tokens", new_tokens, 0), ("context_len", context_len, 1),
                        ("splits", splits, 1)):
        checks.int_at_least(v, name, lo)


def expanded_peak_bytes(shape: str | MLAShape, new_tokens: int, context_len: int, *,
                        chunk_tokens: int | None = None, splits: int = 1,
                        kv_dtype: torch.dtype = torch.bfloat16,
                        out_dtype: torch.dtype = torch.bfloat16) -> int:
    """Expand-then-attend: one chunk's K and V, the partials of ``splits`` splits
    (float32 output and LSE), the running float32 output (several chunks, an output of
    another dtype), the output and LSE, and the chunks' page tables."""
    s = get_shape(shape)
    _counts(new_tokens, context_len, splits)
    if chunk_tokens is not None and (type(chunk_tokens) is not int or chunk_tokens < 1):
        raise ValueError(f"chunk_tokens: expected None or an int >= 1, got {chunk_tokens!r}")
    n, h = new_tokens, s.num_heads
    chunk = min(context_len, chunk_tokens or context_len)
    chunks = -(-context_len // chunk)
    kv = chunk * h * (s.k_head_dim + s.v_head_dim) * _size(kv_dtype, "kv_dtype")
    parts = splits * n * h * (s.v_head_dim + 1) * F32
    running = n * h * s.v_head_dim * F32 if chunks > 1 and out_dtype != torch.float32 else 0
    out = n * h * s.v_head_dim * _size(out_dtype, "out_dtype") + n * h * F32
    tables = chunks * 4 * 4
    return kv + parts + running + out + tables


def absorbed_peak_bytes(shape: str | MLAShape, new_tokens: int, context_len: int, *,
                        splits: int = 1, q_dtype: torch.dtype = torch.bfloat16,
                        prepare: bool = False) -> int:
    """Absorbed: the absorbed queries and the fold's product before it is copied in, the
    partials (float32, kv_c wide), the latent output, the projection's product and the
    output with its LSE; and the prepared weights (held beside them while the call runs).

    ``prepare``: the plan also prepares the weights (``absorb_weights``, before any buffer
    of its own): the larger of that and the run. The preparation holds the prepared weights
    and one head's rows of the weight in float32 twice (the copy and its scaled product)
    with the head's row scale, as a per-row scale or a head of whole 128-row blocks does."""
    s = get_shape(shape)
    _counts(new_tokens, context_len, splits)
    if type(prepare) is not bool:
        raise ValueError(f"prepare: expected a bool, got {prepare!r}")
    n, h, b = new_tokens, s.num_heads, _size(q_dtype, "q_dtype")
    q_absorbed = n * h * s.latent_dim * b
    fold_tmp = n * h * s.kv_c_dim * b
    parts = splits * n * h * (s.kv_c_dim + 1) * F32
    o_latent = n * h * s.kv_c_dim * b
    proj_tmp = n * h * s.v_head_dim * b
    out = n * h * s.v_head_dim * b + n * h * F32
    weights = h * (s.qk_nope_dim + s.v_head_dim) * s.kv_c_dim * b
    # The fold's product is freed once copied; the projection's comes after it, so the two
    # temporaries are never held together: the larger counts.
    run = q_absorbed + max(fold_tmp, proj_tmp) + parts + o_latent + out + weights
    if not prepare:
        return run
    per_head = s.qk_nope_dim + s.v_head_dim
    head = 2 * per_head * s.kv_c_dim * F32 + per_head * F32
    return max(run, weights + head)
