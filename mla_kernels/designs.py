"""Every kernel design behind one name: its grid, its launch, and the formats it serves.

The occupancy model and the benchmarks call the same ``grid`` functions the launcher uses,
so "programs launched" is what really launches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

import torch
import triton

from .formats import as_uint8
from .kernels.chunk_loop import chunked_kernel, serial_kernel
from .kernels.common import FORMAT_CODES
from .kernels.tiled import tiled_kernel

try:  # Gluon ships with triton >= 3.4; without it the Hopper design is never offered
    from .kernels.hopper_ws import hopper_ws_kernel
except ImportError:
    hopper_ws_kernel = None
from .problem import Problem, interpreting

Tensors = tuple  # the nine arguments of gather_kv_b_proj, in order


@dataclass(frozen=True)
class LaunchConfig:
    """Tunable launch parameters; None means the design's default."""

    chunk_tokens: int | None = None
    block_k: int | None = None
    num_warps: int = 4
    num_stages: int | None = None
    split_parts: bool = False  # tiled: K-nope and V of a head in two programs
    programs: int | None = None  # persistent designs: programs launched (None: one per SM)
    stages: int = 4  # hopper_ws: depth of the weight ring

    def kwargs(self) -> dict:
        kw = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            kw["num_stages"] = self.num_stages
        return kw


@dataclass(frozen=True)
class Design:
    name: str
    description: str
    formats: tuple[str, ...]
    grid: Callable[[Problem, int | None, LaunchConfig], tuple[int, ...]]
    launch: Callable[[Problem, Tensors, int | None, LaunchConfig], None]
    default_config: LaunchConfig = field(default_factory=LaunchConfig)
    available: Callable[[Problem, torch.device], bool] = lambda prob, device: True
    vendors: tuple[str, ...] = ("amd", "nvidia")  # GPU families it is written for

    def runs(self, prob: Problem, device: torch.device) -> bool:
        """Whether this design serves the problem's weight format and can run it on device."""
        return prob.weight_format in self.formats and self.available(prob, device)

    def programs(self, prob: Problem, max_context_len: int | None = None,
                 config: LaunchConfig | None = None) -> int:
        g = self.grid(prob, max_context_len, config or self.default_config)
        n = 1
        for d in g:
            n *= d
        return n


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def chunk_tokens(prob: Problem, config: LaunchConfig) -> int:
    return config.chunk_tokens or prob.chunk_tokens


def block_k(prob: Problem, config: LaunchConfig) -> int:
    """K per dot step: 128 for fp8 operands, 64 for bf16 ones, so that the weight tiles
    (and their pipelined copies in the serial loop) fit in a Hopper SM's shared memory."""
    return config.block_k or (128 if prob.dot_in_fp8 else 64)


def _context_bound(prob: Problem, max_context_len: int | None) -> int:
    # Without a hint, the output row count bounds every sequence's length.
    return prob.out_rows if max_context_len is None else max_context_len


def serial_grid(prob: Problem, max_context_len: int | None, config: LaunchConfig
                ) -> tuple[int, ...]:
    return (prob.num_heads, prob.batch)


def chunked_grid(prob: Problem, max_context_len: int | None, config: LaunchConfig
                 ) -> tuple[int, ...]:
    ck = chunk_tokens(prob, config)
    return (triton.cdiv(_context_bound(prob, max_context_len), ck), prob.num_heads, prob.batch)


def tiled_grid(prob: Problem, max_context_len: int | None, config: LaunchConfig
               ) -> tuple[int, ...]:
    bm = config.chunk_tokens or 64
    return (triton.cdiv(prob.out_rows, bm), prob.num_heads * (2 if config.split_parts else 1))


GRID_YZ_LIMIT = 65535  # CUDA's limit on a grid's second and third axes


def _check_grid(grid: tuple[int, ...]) -> None:
    """Reject a problem whose grid the device cannot launch, before anything is written."""
    for axis, n in enumerate(grid[1:], start=1):
        if n > GRID_YZ_LIMIT:
            raise ValueError(f"kv_indptr: expected a batch and head count that give at most "
                             f"{GRID_YZ_LIMIT} programs on grid axis {axis}, got {n}")


def _common_args(prob: Problem, t: Tensors, config: LaunchConfig) -> tuple[list, dict]:
    """Arguments every portable design takes, in kernel order, and their constants."""
    k_buffer, k_scale, kv_indptr, kv_indices, cs, w, ws, k_out, v_out = t
    w = as_uint8(w)
    ws = as_uint8(ws) if ws is not None else w  # any pointer: unused without a scale
    args = [k_buffer, k_scale if k_scale is not None else k_buffer, kv_indptr, kv_indices, cs,
            w, ws, k_out, v_out,
            k_buffer.stride(0), k_buffer.stride(1), k_out.stride(0), k_out.stride(1),
            v_out.stride(0), v_out.stride(1), w.shape[1], ws.shape[1] if ws.dim() == 2 else 1]
    consts = dict(
        KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
        BPE=_pow2(prob.pe_dim, 1), BNOPE=_pow2(prob.nope_dim), BV=_pow2(prob.v_dim),
        BLOCK_SIZE=prob.block_size, BK=block_k(prob, config), FMT=FORMAT_CODES[prob.weight_format],
        DOT_BF16=not prob.dot_in_fp8, HAS_K_SCALE=k_scale is not None, **config.kwargs())
    return args, consts


RESIDENT_WEIGHT_BYTES = 160 * 1024  # leaves room for the latent tiles in 227 KB (Hopper)


def serial_weight_resident(prob: Problem) -> bool:
    """Whether the serial design keeps a head's weight resident across its chunk loop:
    only if the head, in the dot's operand dtype, fits beside the latent tiles."""
    per_elem = 1 if prob.dot_in_fp8 else 2
    return prob.kv_c_dim * (prob.nope_dim + prob.v_dim) * per_elem <= RESIDENT_WEIGHT_BYTES


def _launch_serial(prob: Problem, t: Tensors, max_context_len: int | None,
                   config: LaunchConfig) -> None:
    grid = serial_grid(prob, max_context_len, config)
    _check_grid(grid)
    if 0 in grid:
        return
    ck = chunk_tokens(prob, config)
    args, consts = _common_args(prob, t, config)
    serial_kernel[grid](*args, triton.cdiv(_context_bound(prob, max_context_len), ck), 0, CK=ck,
                        RESIDENT=serial_weight_resident(prob), **consts)


def _launch_chunked(prob: Problem, t: Tensors, max_context_len: int | None,
                    config: LaunchConfig) -> None:
    grid = chunked_grid(prob, max_context_len, config)
    _check_grid(grid)
    if 0 in grid:
        return
    ck = chunk_tokens(prob, config)
    args, consts = _common_args(prob, t, config)
    chunked_kernel[grid](*args, triton.cdiv(_context_bound(prob, max_context_len), ck), CK=ck,
                         **consts)


def _launch_tiled(prob: Problem, t: Tensors, max_context_len: int | None,
                  config: LaunchConfig, tma: bool = False) -> None:
    grid = tiled_grid(prob, max_context_len, config)
    if 0 in grid or prob.batch == 0:
        return
    args, consts = _common_args(prob, t, config)
    bm = config.chunk_tokens or 64
    descs = {}
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k_out, v_out = t[7], t[8]
        k2 = k_out.view(k_out.shape[0], -1)
        v2 = v_out.view(v_out.shape[0], -1)
        descs = dict(k_desc=TensorDescriptor.from_tensor(k2, [bm, prob.nope_dim]),
                     rope_desc=TensorDescriptor.from_tensor(k2, [bm, prob.pe_dim]),
                     v_desc=TensorDescriptor.from_tensor(v2, [bm, prob.v_dim]), TMA=True)
    tiled_kernel[grid](*args, prob.batch, BM=bm, SEARCH_STEPS=max(1, prob.batch.bit_length()),
                       SPLIT=config.split_parts, **descs, **consts)


def _launch_tiled_tma(prob: Problem, t: Tensors, max_context_len: int | None,
                      config: LaunchConfig) -> None:
    # TMA stores serve the split programs only; the grid must be sized for them too.
    _launch_tiled(prob, t, max_context_len, replace(config, split_parts=True), tma=True)


def tma_available(prob: Problem, device: torch.device) -> bool:
    """TMA stores need a Hopper-class NVIDIA GPU (or the interpreter) and power-of-two
    nope / pe / v widths (the tiles are stored whole)."""
    dims_ok = all(d == triton.next_power_of_2(d) and d >= 16
                  for d in (prob.nope_dim, prob.pe_dim, prob.v_dim))
    if device.type == "cpu":
        return dims_ok
    return (dims_ok and not torch.version.hip
            and torch.cuda.get_device_capability(device)[0] >= 9)


HOPPER_WS_TILE = 128  # tokens per tile and columns per item of hopper_ws (BM = BN)
HOPPER_WS_DEFAULT_PROGRAMS = 132  # for models with no device at hand: an H200's SM count


def hopper_ws_grid(prob: Problem, max_context_len: int | None, config: LaunchConfig
                   ) -> tuple[int, ...]:
    items = triton.cdiv(prob.out_rows, HOPPER_WS_TILE) * 2 * prob.num_heads
    return (min(items, config.programs or HOPPER_WS_DEFAULT_PROGRAMS),)


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return HOPPER_WS_DEFAULT_PROGRAMS  # compile checks on the CPU target an H200


@lru_cache(maxsize=16)
def _smem_layout(rows: int, cols: int, dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16,
                torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


def _descriptor(x: torch.Tensor, rows: int, cols: int):
    """A TMA descriptor of [rows, cols] blocks over a 2-D tensor. Its shared layout is cached:
    building one costs a good part of a short launch's host time."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return TensorDescriptor(x, list(x.shape), list(x.stride()), [rows, cols],
                            _smem_layout(rows, cols, x.dtype))


def _launch_hopper_ws(prob: Problem, t: Tensors, max_context_len: int | None,
                      config: LaunchConfig) -> None:
    k_buffer, k_scale, kv_indptr, kv_indices, cs, w, ws, k_out, v_out = t
    if config.programs is None:
        config = replace(config, programs=_sm_count(k_buffer.device))
    grid = hopper_ws_grid(prob, max_context_len, config)
    if 0 in grid or prob.batch == 0:
        return
    tile = HOPPER_WS_TILE
    k2 = k_out.view(k_out.shape[0], -1)
    v2 = v_out.view(v_out.shape[0], -1)
    hopper_ws_kernel[grid](
        k_buffer, k_scale, kv_indptr, kv_indices, cs, ws, k_out, v_out,
        _descriptor(w, tile, tile), _descriptor(k2, tile, tile),
        _descriptor(k2, tile, prob.pe_dim), _descriptor(v2, tile, tile),
        k_buffer.stride(0), k_buffer.stride(1), prob.batch,
        KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
        HEADS=prob.num_heads, BLOCK_SIZE=prob.block_size,
        SEARCH_STEPS=max(1, prob.batch.bit_length()), STAGES=config.stages,
        LOADER_REGS=24, GATHER_REGS=96, num_warps=4,
        # 4 + 1 + 4 warps launch as three warpgroups: 12 x 32 threads x 168 <= 64K registers.
        maxnreg=168)


def hopper_ws_supports(prob: Problem) -> bool:
    """The shapes and formats the Gluon design was written for: an fp8 e4m3fn cache, an fp8
    per-row weight, nope = v = 128, pe = 64, kv_c a multiple of 128, bf16 or fp16 outputs."""
    return (prob.nope_dim == prob.v_dim == HOPPER_WS_TILE and prob.pe_dim == 64
            and prob.kv_c_dim % HOPPER_WS_TILE == 0
            and prob.cache_dtype == torch.float8_e4m3fn
            and prob.weight_dtype == torch.float8_e4m3fn and prob.weight_format == "fp8_row"
            and prob.out_dtype in (torch.bfloat16, torch.float16))


def hopper_ws_available(prob: Problem, device: torch.device) -> bool:
    """Supported shapes on an NVIDIA GPU of compute capability 9.x, or on the CPU for
    compile checks; never under the interpreter (Gluon kernels are compiled only)."""
    if not hopper_ws_supports(prob) or interpreting():
        return False
    if device.type == "cuda" and (torch.version.hip
                                  or torch.cuda.get_device_capability(device)[0] != 9):
        return False
    return hopper_ws_kernel is not None


ALL_FORMATS = ("bf16", "fp8_row", "fp8_block", "mxfp4")

DESIGNS: dict[str, Design] = {
    d.name: d
    for d in (
        Design("serial", "one program per (sequence, head), a loop over chunks (the 'before')",
               ALL_FORMATS, serial_grid, _launch_serial),
        Design("chunked", "one program per (sequence, head, chunk) (the 'after')",
               ALL_FORMATS, chunked_grid, _launch_chunked),
        Design("tiled", "one program per (tile of 64 rows of the flat token axis, head)",
               ALL_FORMATS, tiled_grid, _launch_tiled,
               LaunchConfig(chunk_tokens=64, num_warps=4)),
        Design("tiled_tma", "tiled, halves split, full tiles stored by TMA (Hopper and newer)",
               ALL_FORMATS, tiled_grid, _launch_tiled_tma,
               LaunchConfig(chunk_tokens=128, num_warps=4, split_parts=True), tma_available),
        Design("hopper_ws", "persistent, warp-specialised Gluon kernel: TMA weight ring, "
               "cp.async latent gather, async wgmma, overlapped TMA stores (sm_90 only)",
               ("fp8_row",), hopper_ws_grid, _launch_hopper_ws, LaunchConfig(),
               hopper_ws_available, vendors=("nvidia",)),
    )
}


def variant_names() -> list[str]:
    return ["auto", *DESIGNS]


def resolve_variant(variant: str, prob: Problem, device: torch.device,
                    config: LaunchConfig | None = None) -> tuple[Design, LaunchConfig]:
    """The Design (and launch config) a variant name runs for this problem, or a ValueError
    listing the valid names. "auto" takes both from the tuning table."""
    if variant == "auto":
        from .tuning import FALLBACK, auto_choice

        name, tuned = auto_choice(prob.weight_format, device)
        if not DESIGNS[name].runs(prob, device):  # e.g. a GPU-family design, other dims
            name, tuned = FALLBACK
        config = config or tuned
    else:
        name = variant
    if name not in DESIGNS:
        raise ValueError(f"variant: expected one of {variant_names()}, got {variant!r}")
    design = DESIGNS[name]
    if not design.runs(prob, device):
        valid = ["auto"] + [d.name for d in DESIGNS.values() if d.runs(prob, device)]
        raise ValueError(f"variant: expected one of {valid} for a {prob.weight_format} weight "
                         f"on {device}, got {variant!r}")
    return design, config or design.default_config
