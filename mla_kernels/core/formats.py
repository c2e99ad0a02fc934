"""Weight and cache formats: names, dtypes, quantizers and their inverses.

The layouts are the contract's (docs/contract.md, "Weight formats"): fp8 per output row,
fp8 per 128x128 block, MXFP4 (two e2m1 values a byte along K, low nibble first, one e8m0
power-of-two scale per 32 values).
Quantizers compute in float64 and store float32 scales; dequantizers return float32.
"""

from __future__ import annotations

import torch

WEIGHT_FORMATS: tuple[str, ...] = ("bf16", "fp8_row", "fp8_block", "mxfp4")
CACHE_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp8_fnuz")

FP8_BLOCK = 128  # granularity of the per-block weight scale
MX_BLOCK = 32  # values sharing one e8m0 scale along K

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
# Largest finite magnitude, where quantizers saturate.
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
# Smallest subnormal step: bounds the absolute rounding error near zero.
FP8_MIN_STEP = {torch.float8_e4m3fn: 2.0**-9, torch.float8_e4m3fnuz: 2.0**-10}

# e2m1 magnitudes by the low three bits of a code; bit 3 is the sign.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MAX = 6.0
E8M0_NAN = 255

_UINT8_VIEWS = tuple(
    dt for dt in (getattr(torch, "float4_e2m1fn_x2", None), getattr(torch, "float8_e8m0fnu", None))
    if dt is not None
)


def cache_torch_dtype(cache_dtype: str) -> torch.dtype:
    """torch dtype of a latent cache by its name in CACHE_DTYPES."""
    table = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "fp8_fnuz": torch.float8_e4m3fnuz}
    if not isinstance(cache_dtype, str) or cache_dtype not in table:
        raise ValueError(f"cache_dtype: expected one of {CACHE_DTYPES}, got {cache_dtype!r}")
    return table[cache_dtype]


def as_uint8(t: torch.Tensor) -> torch.Tensor:
    """View float4_e2m1fn_x2 / float8_e8m0fnu tensors as uint8 (Triton 3.6 takes neither)."""
    return t.view(torch.uint8) if t.dtype in _UINT8_VIEWS else t


def fp8_round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    fmax = FP8_MAX[dtype]
    return x.clamp(-fmax, fmax).to(dtype)


def _scale_from_amax(amax: torch.Tensor, fmax: float) -> torch.Tensor:
    # An all-zero group keeps scale 1 so its codes stay 0 and dequantize to 0.
    scale = (amax.double() / fmax).float()
    return torch.where(amax > 0, scale, torch.ones_like(scale))


# ---------------------------------------------------------------- fp8 per output row
def quantize_fp8_per_row(w: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize [N, K] to fp8 codes with one float32 scale per row: returns (codes, scale[N])."""
    w = w.float()
    scale = _scale_from_amax(w.abs().amax(dim=1), FP8_MAX[dtype])
    codes = fp8_round(w.double() / scale.double()[:, None], dtype)
    return codes, scale


# ---------------------------------------------------------------- fp8 per 128x128 block
def expand_blocks(scale: torch.Tensor, n: int, k: int, block: int = FP8_BLOCK) -> torch.Tensor:
    return scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]


def quantize_fp8_per_block(w: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize [N, K] with one scale per 128x128 block: returns (codes, scale[ceil(N/128), ceil(K/128)])."""
    w = w.float()
    n, k = w.shape
    nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
    padded = w.new_zeros(nb * FP8_BLOCK, kb * FP8_BLOCK)
    padded[:n, :k] = w.abs()
    amax = padded.view(nb, FP8_BLOCK, kb, FP8_BLOCK).amax(dim=(1, 3))
    scale = _scale_from_amax(amax, FP8_MAX[dtype])
    codes = fp8_round(w.double() / expand_blocks(scale, n, k).double(), dtype)
    return codes, scale


# ---------------------------------------------------------------- MXFP4
def _round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (4 bits, uint8) of each value, ties to the even code, saturating at 6."""
    mags = E2M1_VALUES.to(x.device, torch.float64)
    a = x.abs().double().clamp(max=E2M1_MAX)
    dist = (a[..., None] - mags).abs()
    nearest = dist == dist.amin(dim=-1, keepdim=True)
    even = (torch.arange(8, device=x.device) % 2 == 0)
    # Among the nearest magnitudes prefer the even code (the OCP tie rule).
    code = (nearest.to(torch.int8) * 2 + even.to(torch.int8)).argmax(dim=-1).to(torch.uint8)
    return code | ((x < 0).to(torch.uint8) << 3)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize [N, K] (K % 32 == 0) to MXFP4: returns (packed uint8 [N, K/2], e8m0 uint8 [N, K/32])."""
    n, k = w.shape
    if k % MX_BLOCK:
        raise ValueError(f"w: expected K a multiple of {MX_BLOCK}, got K={k}")
    groups = w.float().reshape(n, k // MX_BLOCK, MX_BLOCK)
    amax = groups.abs().amax(dim=-1)
    # OCP MX shared exponent: floor(log2(amax)) - 2, so amax / 2^exp lies in [4, 8).
    exp = torch.floor(torch.log2(amax.double().clamp(min=2.0**-140))) - 2
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127)).clamp(-127, 127)
    codes = _round_to_e2m1(groups.double() / torch.exp2(exp)[..., None]).reshape(n, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), (exp + 127).to(torch.uint8)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> e2m1 codes uint8 [N, K], low nibble first."""
    packed = as_uint8(packed)
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(packed.shape[0], -1)


def e2m1_to_float(codes: torch.Tensor) -> torch.Tensor:
    mags = E2M1_VALUES.to(codes.device)[(codes & 7).long()]
    return torch.where(codes >= 8, -mags, mags)


def e8m0_to_float(e: torch.Tensor) -> torch.Tensor:
    e = as_uint8(e)
    val = torch.exp2(e.float() - 127)
    return torch.where(e == E8M0_NAN, torch.full_like(val, float("nan")), val)


def dequantize_mxfp4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    values = e2m1_to_float(unpack_e2m1(packed))
    return values * e8m0_to_float(scale).repeat_interleave(MX_BLOCK, dim=1)


# ---------------------------------------------------------------- dispatch by format
def quantize_weight(w: torch.Tensor, weight_format: str,
                    fp8_dtype: torch.dtype = torch.float8_e4m3fn
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quantize a float weight [N, K] into (stored weight, scale) of the named format."""
    if weight_format == "bf16":
        return w.to(torch.bfloat16), None
    if weight_format == "fp8_row":
        return quantize_fp8_per_row(w, fp8_dtype)
    if weight_format == "fp8_block":
        return quantize_fp8_per_block(w, fp8_dtype)
    if weight_format == "mxfp4":
        return quantize_mxfp4(w)
    raise ValueError(f"weight_format: expected one of {WEIGHT_FORMATS}, got {weight_format!r}")


def expand_scale(scale: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """A float weight scale as a float32 [n, k] factor: per output row ([n] or [n, 1]) or
    per 128x128 block ([ceil(n/128), ceil(k/128)]); bf16 scales are read as float32."""
    scale = scale.float()
    if scale.numel() == n and (scale.dim() == 1 or scale.shape[1] == 1):
        return scale.reshape(n, 1).expand(n, k)
    return expand_blocks(scale, n, k)


def dequantize_weight(weight: torch.Tensor, scale: torch.Tensor | None, weight_format: str
                      ) -> torch.Tensor:
    """float32 [N, K] of a stored weight in the named format. A bf16 or fp8 weight's scale
    may be per output row or per 128x128 block (``expand_scale``)."""
    if weight_format in ("bf16", "fp8_row", "fp8_block"):
        w = weight.float()
        return w if scale is None else w * expand_scale(scale, *w.shape)
    if weight_format == "mxfp4":
        return dequantize_mxfp4(weight, scale)
    raise ValueError(f"weight_format: expected one of {WEIGHT_FORMATS}, got {weight_format!r}")


def is_block_scale(weight: torch.Tensor, scale: torch.Tensor | None) -> bool:
    """A 2-D scale that is not one value per output row: per 128x128 block (a
    [ceil(N/128), 1] scale of a K <= 128 weight included)."""
    return scale is not None and scale.dim() == 2 and (
        scale.shape[1] != 1 or scale.shape[0] != weight.shape[0])


def detect_weight_format(weight: torch.Tensor, scale: torch.Tensor | None) -> str:
    """Name the format of a (weight, scale) pair by dtypes and the scale's shape. A bf16
    weight is "bf16" with or without a scale (``scale_kind`` says which)."""
    if weight.dtype in (torch.uint8, getattr(torch, "float4_e2m1fn_x2", torch.uint8)):
        return "mxfp4"
    if weight.dtype in FP8_DTYPES:
        return "fp8_block" if is_block_scale(weight, scale) else "fp8_row"
    return "bf16"


def scale_kind(weight: torch.Tensor, scale: torch.Tensor | None) -> str:
    """How a weight's scale applies: "none", "row" (per output row), "block" (per 128x128
    block) or "e8m0" (MXFP4's power of two per 32 values along K)."""
    if detect_weight_format(weight, scale) == "mxfp4":
        return "e8m0"
    if scale is None:
        return "none"
    return "block" if is_block_scale(weight, scale) else "row"


# The scale kind a format has unless its scale says otherwise (only bf16's may vary).
DEFAULT_SCALE = {"bf16": "none", "fp8_row": "row", "fp8_block": "block", "mxfp4": "e8m0"}
