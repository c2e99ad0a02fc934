"""Random input sets for any shape, context list, block size, cache dtype and weight format.

Tests, benchmarks and notebooks all build their inputs here. Scales are deliberately far
from 1 (weight scales 1e-3..1e2, e8m0 exponents 2^-8..2^4, k_scale != 1) so a kernel that
drops or misplaces a scale fails the tolerance.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, make_dataclass

import torch

from ..core.formats import (
    E8M0_NAN,
    FP8_BLOCK,
    FP8_MAX,
    MX_BLOCK,
    WEIGHT_FORMATS,
    cache_torch_dtype,
    dequantize_weight,
)
from ..core.problem import FP8_OUT, OUT_DTYPES, GatherArgs
from ..core.shapes import MLAShape, get_shape
from ..core.value_rules import Reject, Rule, choice, flag, int_in

# The call's arguments as settable fields, named and typed once, by GatherArgs: the nine
# tensors, then the FP8 outputs' scales (keyword fields, None for other outputs).
_NINE = GatherArgs._fields[:9]
CallArguments = make_dataclass(
    "CallArguments",
    [(n, GatherArgs.__annotations__[n]) for n in _NINE]
    + [(n, GatherArgs.__annotations__[n], field(default=None, kw_only=True))
       for n in GatherArgs._fields[9:]])


@dataclass
class GatherInputs(CallArguments):
    """Everything one call of gather_kv_b_proj takes (the nine arguments, by name), plus
    what built it."""

    shape: MLAShape
    contexts: tuple[int, ...]
    block_size: int
    cache_dtype: str
    weight_format: str
    meta: dict = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return sum(self.contexts)

    def args(self) -> GatherArgs:
        """The arguments of gather_kv_b_proj, in order and by name (the FP8 outputs' scales
        last: None for other outputs)."""
        return GatherArgs(*(getattr(self, n) for n in GatherArgs._fields))

    @property
    def out_is_fp8(self) -> bool:
        return self.k_prefix.dtype == FP8_OUT

    def reference(self, **kw) -> tuple[torch.Tensor, torch.Tensor]:
        from ..core.reference import gather_kv_b_proj_reference

        return gather_kv_b_proj_reference(self.args(), num_heads=self.shape.num_heads,
                                          v_head_dim=self.shape.v_head_dim, **kw)

    def poison_outputs(self) -> None:
        """Fill the outputs with NaN so an unwritten row shows."""
        self.k_prefix.fill_(float("nan"))
        self.v_prefix.fill_(float("nan"))


def _log_uniform(gen: torch.Generator, size, lo: float, hi: float) -> torch.Tensor:
    u = torch.rand(size, generator=gen, dtype=torch.float64)
    lo_t, hi_t = torch.log(torch.tensor(lo, dtype=torch.float64)), torch.log(
        torch.tensor(hi, dtype=torch.float64))
    return torch.exp(lo_t + u * (hi_t - lo_t)).float()


def random_fp8_codes(gen: torch.Generator, size, dtype: torch.dtype) -> torch.Tensor:
    """fp8 codes spread over the format's range (never all zero)."""
    vals = torch.randn(size, generator=gen) * (FP8_MAX[dtype] / 8)
    return vals.clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)


def random_weight(gen: torch.Generator, n: int, k: int, weight_format: str,
                  fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                  scale_range: tuple[float, float] = (1e-3, 1e2),
                  e8m0_range: tuple[int, int] = (-7, 4),
                  e8m0_full_span: bool = False,
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A stored weight of the format with random codes and scales, laid out as the contract
    (docs/contract.md) states. MXFP4's exponents are drawn from ``e8m0_range``; with
    ``e8m0_full_span`` every row holds both ends of it (its first two groups)."""
    if weight_format == "bf16":
        return (torch.randn(n, k, generator=gen) * 0.05).to(torch.bfloat16), None
    if weight_format == "fp8_row":
        return random_fp8_codes(gen, (n, k), fp8_dtype), _log_uniform(gen, (n,), *scale_range)
    if weight_format == "fp8_block":
        nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
        return random_fp8_codes(gen, (n, k), fp8_dtype), _log_uniform(gen, (nb, kb), *scale_range)
    if weight_format == "mxfp4":
        codes = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
        lo, hi = e8m0_range
        exps = torch.randint(lo + 127, hi + 128, (n, k // MX_BLOCK), generator=gen,
                             dtype=torch.int32).to(torch.uint8)
        if e8m0_full_span:
            exps[:, 0], exps[:, 1 % exps.shape[1]] = lo + 127, hi + 127
        return packed, exps
    raise ValueError(f"weight_format: expected bf16, fp8_row, fp8_block or mxfp4, got {weight_format!r}")


def _whole(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _contexts(v) -> tuple[int, ...]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or not all(
            _whole(c) and c >= 0 for c in v):
        raise Reject
    return tuple(int(c) for c in v)


def _finite_positive(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _scale_range(v) -> tuple[float, float]:
    if not (isinstance(v, Sequence) and len(v) == 2 and all(_finite_positive(x) for x in v)
            and v[0] <= v[1]):
        raise Reject
    return float(v[0]), float(v[1])


# e8m0 codes are exponent + 127 in [0, 254]; 255 is NaN.
_E8M0_LO, _E8M0_HI = -127, E8M0_NAN - 1 - 127


def _e8m0_range(v) -> tuple[int, int]:
    if not (isinstance(v, Sequence) and len(v) == 2 and all(_whole(x) for x in v)
            and _E8M0_LO <= v[0] <= v[1] <= _E8M0_HI):
        raise Reject
    return int(v[0]), int(v[1])


def _seed(v) -> int:
    if not _whole(v):
        raise Reject
    return int(v)


def _k_scale(v) -> float | None:
    if v is not None and not _finite_positive(v):
        raise Reject
    return None if v is None else float(v)


def _out_dtype(v) -> torch.dtype:
    if v not in OUT_DTYPES:
        raise Reject
    return v


def _device(v) -> torch.device:
    try:
        d = torch.device(v)
    except (RuntimeError, TypeError):
        raise Reject from None
    if d.type not in ("cpu", "cuda") or (d.type == "cuda" and not torch.cuda.is_available()):
        raise Reject
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise Reject
    return d


_BUILD_RULES: dict[str, Rule] = {
    "contexts": Rule("a sequence of ints >= 0", _contexts),
    "block_size": int_in(1),
    "weight_format": choice(WEIGHT_FORMATS),
    "device": Rule(lambda: "'cpu' or a CUDA device this machine has"
                   + ("" if torch.cuda.is_available() else " (it has none)"), _device),
    "seed": Rule("an int", _seed),
    "spare_indices": int_in(0),
    "spare_rows": int_in(0),
    "spare_blocks": int_in(0),
    "k_scale": Rule("None or a finite number > 0", _k_scale),
    "weight_scale_range": Rule("(lo, hi) with 0 < lo <= hi, both finite", _scale_range),
    "out_dtype": Rule(f"one of {[str(d) for d in OUT_DTYPES]}", _out_dtype),
    "e8m0_range": Rule(f"(lo, hi) ints with {_E8M0_LO} <= lo <= hi <= {_E8M0_HI} (e8m0 "
                       "codes 0-254)", _e8m0_range),
    "e8m0_full_span": flag(),
}


INT32_MAX = 2**31 - 1  # the index tensors and prefix sums are int32


def _memory_bytes(device: torch.device) -> int:
    """What one input set may take: the host's memory (every tensor is drawn there first),
    and a GPU's own where it lives."""
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if device.type == "cuda":
        return min(host, torch.cuda.get_device_properties(device).total_memory)
    return host


def _check_sizes(shp: MLAShape, contexts: tuple[int, ...], block_size: int, spare_indices: int,
                 spare_rows: int, spare_blocks: int, cache_bytes: int, out_dtype: torch.dtype,
                 device: torch.device) -> None:
    """Sizes whose int32 index tensors would wrap, or whose tensors cannot fit, as a
    ValueError naming the argument that makes them so, before anything is allocated."""
    def fail(arg, expected, got):
        raise ValueError(f"{arg}: expected {expected}, got {got}")

    total = sum(contexts)
    if total > INT32_MAX:
        fail("contexts", f"at most {INT32_MAX} tokens in all (int32 prefix sums)",
             f"{total} tokens")
    used = sum(-(-c // block_size) for c in contexts)
    if used + spare_blocks > INT32_MAX:
        fail("spare_blocks", f"at most {INT32_MAX - used} (int32 block ids beside {used} used "
             "blocks)", spare_blocks)
    if used + spare_indices > INT32_MAX:
        fail("spare_indices", f"at most {INT32_MAX - used} (int32 indices beside {used} used "
             "entries)", spare_indices)
    if total + spare_rows > INT32_MAX:
        fail("spare_rows", f"at most {INT32_MAX - total} (output rows beside {total} tokens, "
             "int32)", spare_rows)
    # Bytes of the cache (drawn in float32 first), the outputs and the weight; the argument
    # named is the one behind the largest share.
    per_slot = shp.latent_dim * max(cache_bytes, 4)
    out_row = shp.num_heads * (shp.k_head_dim + shp.v_head_dim) * out_dtype.itemsize
    # The pages past the tokens (a last block's padding, the spare blocks) grow with both
    # block_size and spare_blocks: the larger of the two is named.
    pages = "block_size" if block_size >= spare_blocks else "spare_blocks"
    shares = {"contexts": total * (per_slot + out_row),
              pages: ((used + spare_blocks) * block_size - total) * per_slot,
              "spare_rows": spare_rows * out_row}
    need = sum(shares.values()) + shp.weight_rows * shp.kv_c_dim * 4
    have = _memory_bytes(device)
    if need > have:
        arg = max(shares, key=shares.get)
        given = {"contexts": f"{len(contexts)} contexts of {total} tokens",
                 "block_size": block_size, "spare_blocks": spare_blocks,
                 "spare_rows": spare_rows}[arg]
        fail(arg, f"sizes whose tensors fit in this machine's {have} bytes of memory",
             f"{given}, needing {need} bytes")


def build_inputs(
    shape: str | MLAShape,
    contexts: Sequence[int],
    *,
    block_size: int = 1,
    cache_dtype: str = "fp8",
    weight_format: str = "fp8_row",
    device: str | torch.device = "cpu",
    seed: int = 0,
    spare_indices: int = 3,
    spare_rows: int = 5,
    spare_blocks: int = 7,
    k_scale: float | None = None,
    weight_scale_range: tuple[float, float] = (1e-3, 1e2),
    out_dtype: torch.dtype = torch.bfloat16,
    e8m0_range: tuple[int, int] = (-7, 4),
    e8m0_full_span: bool = False,
    draws: HostDraws | None = None,
) -> GatherInputs:
    """A full random input set on ``device``.

    ``draws``: where the host's draws of an earlier call with the same arguments (the
    outputs' dtype aside) are kept, to be copied to a GPU again rather than drawn again
    (the same values: every tensor drawn is a function of those arguments alone); unused
    for a CPU ``device``, whose tensors would share them.

    An MXFP4 weight's power-of-two exponents are drawn from ``e8m0_range`` (inclusive); with
    ``e8m0_full_span`` every weight row holds both ends of it. The default spans 12 binades,
    the widest whose rows hopper_ws widens to e4m3 (a real checkpoint's rows span a few);
    ``(-8, 4)`` with ``e8m0_full_span`` puts every row one binade past it (its split route
    widened once a call, else bf16), ``(-20, 4)`` past the split route too (bf16).

    Blocks are allocated in shuffled order (plus ``spare_blocks`` never used), ``kv_indices``
    has ``spare_indices`` extra entries, and the outputs ``spare_rows`` extra rows.
    Outputs are poisoned with NaN.
    """
    given = dict(contexts=contexts, block_size=block_size, weight_format=weight_format,
                 device=device, seed=seed, spare_indices=spare_indices, spare_rows=spare_rows,
                 spare_blocks=spare_blocks, k_scale=k_scale,
                 weight_scale_range=weight_scale_range, out_dtype=out_dtype,
                 e8m0_range=e8m0_range, e8m0_full_span=e8m0_full_span)
    # Every argument checked before anything is drawn: a ValueError names the first bad one.
    checked = {name: _BUILD_RULES[name](name, value) for name, value in given.items()}
    shp = get_shape(shape)
    contexts, device = checked["contexts"], checked["device"]
    weight_scale_range, e8m0_range = checked["weight_scale_range"], checked["e8m0_range"]
    gen = torch.Generator().manual_seed(seed)
    cdt = cache_torch_dtype(cache_dtype)
    fp8_dtype = cdt if cdt in FP8_MAX else torch.float8_e4m3fn
    _check_sizes(shp, contexts, block_size, spare_indices, spare_rows, spare_blocks,
                 cdt.itemsize, checked["out_dtype"], device)
    if torch.device(device).type == "cpu":
        draws = None  # a CPU set's tensors would share the kept ones
    key = (shp, tuple(contexts), block_size, cache_dtype, weight_format, seed, spare_indices,
           spare_blocks, k_scale, tuple(weight_scale_range), tuple(e8m0_range),
           bool(e8m0_full_span))
    drawn = None if draws is None else draws.get(key)
    if drawn is None:
        drawn = _draw(gen, shp, contexts, block_size, spare_indices, spare_blocks, cdt,
                      fp8_dtype, k_scale, weight_format, weight_scale_range, e8m0_range,
                      e8m0_full_span)
        if draws is not None:
            draws.put(key, drawn)
    kv_indptr, kv_indices, cs, k_buffer, k_scale_t, weight, wscale = drawn
    rows = sum(contexts) + spare_rows
    # The outputs (most of a long context's bytes) are filled where they live: drawing
    # nothing, they need no host copy.
    k_prefix = torch.full((rows, shp.num_heads, shp.k_head_dim), float("nan"), dtype=out_dtype,
                          device=device)
    v_prefix = torch.full((rows, shp.num_heads, shp.v_head_dim), float("nan"), dtype=out_dtype,
                          device=device)

    def dev(t):
        return None if t is None else t.to(device)

    out_scales = (None, None)
    if checked["out_dtype"] == FP8_OUT:
        out_scales = sampled_out_scales(shp, k_buffer, k_scale_t, kv_indptr, kv_indices, cs,
                                        weight, wscale, weight_format, block_size)
    return GatherInputs(
        dev(k_buffer), dev(k_scale_t), dev(kv_indptr), dev(kv_indices), dev(cs),
        dev(weight), dev(wscale), dev(k_prefix), dev(v_prefix),
        k_out_scale=dev(out_scales[0]), v_out_scale=dev(out_scales[1]),
        shape=shp, contexts=contexts, block_size=block_size, cache_dtype=cache_dtype,
        weight_format=weight_format, meta={"seed": seed},
    )


class HostDraws:
    """``build_inputs``' host draws by their arguments, kept while their bytes together stay
    within ``max_bytes`` (one a set: later ones are drawn each time): a process that builds
    the same inputs again (a matrix point with FP8 outputs and its bf16-output twin) copies
    them instead of drawing them again. Safe across threads."""

    def __init__(self, max_bytes: int):
        import threading

        self.max_bytes, self.bytes, self.hits = max_bytes, 0, 0
        self._kept: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple | None:
        with self._lock:
            got = self._kept.get(key)
            self.hits += got is not None
            return got

    def put(self, key: tuple, drawn: tuple) -> None:
        n = sum(t.numel() * t.element_size() for t in drawn if t is not None)
        with self._lock:
            if key not in self._kept and self.bytes + n <= self.max_bytes:
                self._kept[key] = drawn
                self.bytes += n


def _draw(gen: torch.Generator, shp: MLAShape, contexts, block_size: int, spare_indices: int,
          spare_blocks: int, cdt: torch.dtype, fp8_dtype: torch.dtype, k_scale,
          weight_format: str, weight_scale_range, e8m0_range, e8m0_full_span: bool) -> tuple:
    """Everything ``build_inputs`` draws on the host from ``gen``, in its order: (kv_indptr,
    kv_indices, the prefix sums, the cache, its scale, the weight, its scale)."""
    blocks_per_seq = [-(-c // block_size) for c in contexts]
    num_used = sum(blocks_per_seq)
    num_blocks = num_used + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)[:num_used].to(torch.int32)
    kv_indices = torch.cat((perm, torch.randint(0, num_blocks, (spare_indices,), generator=gen,
                                                dtype=torch.int32)))
    kv_indptr = torch.zeros(len(contexts) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(torch.tensor(blocks_per_seq, dtype=torch.int64), 0)
    cs = torch.zeros(len(contexts) + 1, dtype=torch.int32)
    cs[1:] = torch.cumsum(torch.tensor(contexts, dtype=torch.int64), 0)

    if cdt in FP8_MAX:
        k_buffer = random_fp8_codes(gen, (num_blocks, block_size, shp.latent_dim), cdt)
        scale_val = k_scale if k_scale is not None else float(_log_uniform(gen, (1,), 2e-3, 5e-2))
        k_scale_t = torch.tensor([scale_val], dtype=torch.float32)
    else:
        k_buffer = torch.randn(num_blocks, block_size, shp.latent_dim, generator=gen).to(cdt)
        k_scale_t = None if k_scale is None else torch.tensor([k_scale], dtype=torch.float32)

    weight, wscale = random_weight(gen, shp.weight_rows, shp.kv_c_dim, weight_format, fp8_dtype,
                                   scale_range=weight_scale_range, e8m0_range=e8m0_range,
                                   e8m0_full_span=e8m0_full_span)
    return kv_indptr, kv_indices, cs, k_buffer, k_scale_t, weight, wscale


OUT_SCALE_SAMPLE = 256  # tokens whose outputs set the FP8 outputs' scales


def sampled_out_scales(shp: MLAShape, k_buffer, k_scale, kv_indptr, kv_indices, cs, weight,
                       wscale, weight_format: str, block_size: int, tokens: int = OUT_SCALE_SAMPLE
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scales for FP8 outputs, as a serving engine would set them: the largest
    magnitude of K (nope and rope) and of V over the first ``tokens`` tokens, over 448. Later
    tokens may pass it and saturate, as the contract's rule says they do."""
    from ..core.reference import E4M3_MAX, token_rows

    blocks, slots = token_rows(kv_indptr, kv_indices, cs, block_size)
    latent = k_buffer[blocks[:tokens], slots[:tokens]].float()
    if k_buffer.dtype in FP8_MAX:
        latent = latent * k_scale.float()
    w = dequantize_weight(weight, wscale, weight_format).float()
    kv = (latent[:, :shp.kv_c_dim] @ w.T).view(-1, shp.num_heads,
                                                 shp.qk_nope_dim + shp.v_head_dim)

    def amax(x: torch.Tensor) -> float:
        return float(x.abs().amax()) if x.numel() else 0.0
    k_amax = max(amax(kv[..., :shp.qk_nope_dim]), amax(latent[:, shp.kv_c_dim:]))
    v_amax = amax(kv[..., shp.qk_nope_dim:])

    def scale(amax: float) -> torch.Tensor:
        return torch.tensor([amax / E4M3_MAX if amax > 0 else 1.0], dtype=torch.float32)
    return scale(k_amax), scale(v_amax)


def dequantized_weight(inp: GatherInputs) -> torch.Tensor:
    return dequantize_weight(inp.kv_proj_weight, inp.kv_proj_scale, inp.weight_format)
