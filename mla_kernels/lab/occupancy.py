"""How much of a device each design occupies: programs launched, programs that do work,
waves, and the share of compute units busy in the first wave.

Programs launched come from ``Design.grid``, the function the launcher itself calls, so the
12 programs of the serial design at 12 heads are what really launches, not a constant.
Nothing here allocates a tensor: ``problem_for`` builds the ``Problem`` from the shape
registry and the context lengths alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch

from ..core.devices import DeviceSpec, get_device, live_device
from ..core.formats import DEFAULT_SCALE, cache_torch_dtype
from ..core.problem import Problem
from ..core.shapes import MLAShape, get_shape
from ..designs import DESIGNS, Design, DesignConfig, resolve
from .measurements import contexts_str

# Stored weight dtype of each format, as check_arguments would see it (MXFP4 travels as
# uint8 bytes). Only ``Problem.dot_in_fp8`` reads it here.
_WEIGHT_DTYPE = {"bf16": torch.bfloat16, "fp8_row": None, "fp8_block": None,
                 "mxfp4": torch.uint8}

# Hardware cap on resident thread blocks per SM (32 on Hopper); AMD limits by waves.
_MAX_PROGRAMS_PER_CU = {"nvidia": 32, "amd": 32}
# Registers are handed out per warp in units of 256 (8 per thread) on NVIDIA and in
# granules of 8 VGPRs on CDNA: round up before dividing the register file.
_REG_GRANULE = 8
# CUDA reserves 1 KiB of shared memory per resident block.
_SMEM_RESERVED = {"nvidia": 1024, "amd": 0}


def problem_for(shape: str | MLAShape, contexts: Sequence[int], cache_dtype: str = "fp8",
                weight_format: str = "fp8_row", block_size: int = 1,
                out_dtype: torch.dtype = torch.bfloat16) -> Problem:
    """The Problem a call with these sequences would describe, without allocating the cache.

    Output rows are the total token count: the tightest output a caller can pass, and
    the bound the chunked grid sizes its chunk axis from when no hint is given.
    """
    s = get_shape(shape)
    contexts = tuple(int(c) for c in contexts)
    if any(c < 0 for c in contexts):
        raise ValueError(f"contexts: expected lengths >= 0, got {contexts}")
    if weight_format not in _WEIGHT_DTYPE:
        raise ValueError(f"weight_format: expected one of {sorted(_WEIGHT_DTYPE)}, "
                         f"got {weight_format!r}")
    if block_size < 1:
        raise ValueError(f"block_size: expected >= 1, got {block_size}")
    cdt = cache_torch_dtype(cache_dtype)
    # An fp8 weight shares the cache's fp8 type when the cache is fp8 (the dot then runs
    # in fp8); over a bf16 cache it is e4m3fn.
    wdt = _WEIGHT_DTYPE[weight_format] or (cdt if cdt != torch.bfloat16
                                           else torch.float8_e4m3fn)
    return Problem(num_heads=s.num_heads, kv_c_dim=s.kv_c_dim, pe_dim=s.kv_pe_dim,
                   nope_dim=s.qk_nope_dim, v_dim=s.v_head_dim, block_size=block_size,
                   batch=len(contexts), out_rows=sum(contexts), weight_format=weight_format,
                   cache_dtype=cdt, weight_dtype=wdt, weight_scale=DEFAULT_SCALE[weight_format],
                   out_dtype=out_dtype)


# ------------------------------------------------------------------ programs that do work
def working_programs(design: Design, prob: Problem, contexts: Sequence[int], device: DeviceSpec,
                     max_context_len: int | None = None,
                     config: DesignConfig | None = None) -> int:
    """Programs that do work (touch at least one token): the design's own work model."""
    return design.work(prob, tuple(contexts), max_context_len, design.config(config), device)


# ------------------------------------------------------------------ resident programs
def resident_programs(device: DeviceSpec, num_warps: int, regs_per_thread: int | None = None,
                      shared_bytes: int = 0) -> dict[str, int]:
    """Programs one compute unit can hold at once, and the resource that limits it.

    Returns ``{"resident": n, "by_warps": .., "by_regs": .., "by_smem": .., "limit": name}``;
    a resource that was not given does not limit. On AMD ``num_warps`` counts wavefronts.
    """
    if num_warps < 1:
        raise ValueError(f"num_warps: expected >= 1, got {num_warps}")
    cap = _MAX_PROGRAMS_PER_CU.get(device.vendor, 32)
    by = {"by_warps": device.max_warps_per_cu // num_warps, "by_cap": cap}
    if regs_per_thread:
        regs = -(-regs_per_thread // _REG_GRANULE) * _REG_GRANULE
        by["by_regs"] = device.regs_per_cu // (regs * device.warp_size * num_warps)
    if shared_bytes:
        per_program = shared_bytes + _SMEM_RESERVED.get(device.vendor, 0)
        by["by_smem"] = device.smem_per_cu // per_program
    limit = min(by, key=by.get)
    return {**by, "resident": max(0, by[limit]), "limit": limit.removeprefix("by_")}


def compiled_kernels(jit_fn) -> list:
    """CompiledKernel objects a JIT function has built so far (empty under the interpreter,
    which compiles nothing)."""
    caches = getattr(jit_fn, "device_caches", None)
    if not caches:
        return []
    out = []
    for entry in list(caches.values()):
        kernel_cache = entry[0] if isinstance(entry, tuple) else entry
        for k in list(getattr(kernel_cache, "values", lambda: [])()):
            if hasattr(k, "metadata"):  # skip compiles still in flight (futures)
                out.append(k)
    return out


def kernel_resources(compiled) -> dict[str, int] | None:
    """Registers per thread, spills, shared memory and warps of a CompiledKernel.

    None when there is nothing compiled to read (the CPU interpreter returns no kernel).
    ``n_regs`` is filled in when the binary is loaded, so load it if a launch has not.
    """
    if compiled is None or not hasattr(compiled, "metadata"):
        return None
    try:
        if getattr(compiled, "n_regs", None) is None:
            compiled._init_handles()
        return {"n_regs": int(compiled.n_regs), "n_spills": int(compiled.n_spills),
                "shared_bytes": int(compiled.metadata.shared),
                "num_warps": int(compiled.metadata.num_warps)}
    except (AttributeError, RuntimeError, TypeError):
        return None


def design_resources(design: Design) -> list[dict[str, int]]:
    """Resources of every specialisation of a design's kernels compiled in this process."""
    out = []
    for fn in design.kernels:
        for k in compiled_kernels(fn):
            res = kernel_resources(k)
            if res is not None:
                out.append({"kernel": getattr(k, "name", ""), **res})
    return out


# ------------------------------------------------------------------ the occupancy model
@dataclass(frozen=True)
class Occupancy:
    """One design's occupancy of one device for one problem."""

    variant: str  # the name asked for ("auto" included)
    design: str  # the design it resolved to on this device
    config: str  # the launch config it resolved to (repr)
    device: str
    compute_units: int
    programs_launched: int
    programs_working: int
    programs_per_cu: float  # working programs per compute unit
    resident_per_cu: int  # programs a compute unit holds at once (1 without resources)
    busy_share: float  # compute units with a working program in the first wave
    waves: int  # rounds of resident slots the working programs need
    slot_fill: float  # working programs / (waves x resident slots): tail losses show here

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def occupancy(variant: str, prob: Problem, contexts: Sequence[int],
              device: DeviceSpec | str, *, max_context_len: int | None = None,
              config: DesignConfig | None = None, resident_per_cu: int = 1) -> Occupancy:
    """The occupancy model for one variant (a design name or "auto"), problem and device.

    The design and config are what ``designs.resolve`` gives on that device, as a call
    there would run them. A compute unit counts as busy when at least one working program
    lands on it; programs spread over compute units before they stack, so the first wave
    covers min(working, CUs) of them. Programs that return at once are left out: they take
    a slot for a few cycles only.
    """
    dev = get_device(device) if isinstance(device, str) else device
    d, cfg = resolve(variant, prob, dev, config)
    launched = d.programs(prob, dev, max_context_len, cfg)
    working = working_programs(d, prob, contexts, dev, max_context_len, cfg)
    cus = dev.compute_units
    resident = max(1, int(resident_per_cu))
    slots = cus * resident
    waves = math.ceil(working / slots) if working else 0
    return Occupancy(
        variant=variant, design=d.name, config=repr(cfg), device=dev.name, compute_units=cus,
        programs_launched=launched, programs_working=working, programs_per_cu=working / cus,
        resident_per_cu=resident, busy_share=min(working, cus) / cus, waves=waves,
        slot_fill=working / (waves * slots) if waves else 0.0)


def resolve_device(name: str, fallback: str = "H200") -> DeviceSpec:
    """A registry device by name; "auto" is the live GPU, or ``fallback`` when there is none."""
    if name == "auto":
        live = live_device()
        return live if live is not None else get_device(fallback)
    return get_device(name)


def occupancy_table(variants: Iterable[str], batches: Iterable[Sequence[int]],
                    devices: Iterable[DeviceSpec | str], *, shape: str = "kimi-k3-tp8",
                    cache_dtype: str = "fp8", weight_format: str = "fp8_row",
                    block_size: int = 1, max_context_len: int | None = None,
                    resident: dict[tuple[str, str], int] | None = None) -> list[dict]:
    """Tidy rows of the model for every (device, batch, variant): what notebook 01 plots.

    ``resident`` maps (device name, variant) to programs per compute unit, when known.
    """
    rows = []
    s = get_shape(shape)
    for dev in devices:
        spec = get_device(dev) if isinstance(dev, str) else dev
        for contexts in batches:
            prob = problem_for(s, contexts, cache_dtype, weight_format, block_size)
            for v in variants:
                if v in DESIGNS and not DESIGNS[v].runs(prob, spec):
                    continue  # e.g. a GPU-family design on another family
                r = (resident or {}).get((spec.name, v), 1)
                occ = occupancy(v, prob, contexts, spec, max_context_len=max_context_len,
                                resident_per_cu=r)
                rows.append({"model": s.name, "heads": s.num_heads, "cache_dtype": cache_dtype,
                             "weight_format": weight_format, "block_size": block_size,
                             "contexts": contexts_str(contexts),
                             "batch": len(contexts), "ctx": sum(contexts), **occ.as_dict()})
    return rows


def measure_resources(shape: str, variants: Iterable[str], device: DeviceSpec, *,
                      cache_dtype: str = "fp8", weight_format: str = "fp8_row",
                      block_size: int = 1, contexts: Sequence[int] = (256,)
                      ) -> list[dict[str, object]] | None:
    """Launch each variant once on this GPU and read what the kernel it runs uses
    (registers, spills, shared memory, warps) and the programs per compute unit that
    allows. None without a GPU: the interpreter compiles nothing to read."""
    from ..core.problem import interpreting
    from .cases import build_case

    if interpreting() or not torch.cuda.is_available():
        return None
    case = build_case(shape, contexts, block_size=block_size, cache_dtype=cache_dtype,
                      weight_format=weight_format, device="cuda")
    case = dataclasses.replace(case, device=device)  # resolved as ``device`` would run it
    rows = []
    for v, design, cfg in case.resolved(variants):
        res = kernel_resources(design.launch(case.problem, case.inputs.args(), None, cfg, device))
        torch.cuda.synchronize()
        if res is None:
            continue
        fit = resident_programs(device, res["num_warps"], res["n_regs"], res["shared_bytes"])
        rows.append({"device": device.name, "variant": v, "design": design.name,
                     "config": repr(cfg), "model": shape, "cache_dtype": cache_dtype,
                     "weight_format": weight_format, "block_size": block_size, **res,
                     "resident_per_cu": fit["resident"], "resident_limit": fit["limit"]})
    return rows
