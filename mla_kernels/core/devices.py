"""Registry of devices: compute units and datasheet peaks, plus detection of the live device.

Peaks are vendor datasheet figures, used only as labelled reference lines; measured
ceilings come from the benchmark harness.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    compute_units: int
    peak_tbps: float  # datasheet HBM bandwidth, TB/s
    vendor: str  # "amd" or "nvidia" or "cpu"
    # Resident-program limits used by the occupancy model.
    max_warps_per_cu: int = 64
    regs_per_cu: int = 65536
    smem_per_cu: int = 228 * 1024
    warp_size: int = 32
    # Shared memory (LDS) one program may take: 227 KiB on Hopper (what the H200 reports),
    # 160 KiB on CDNA4, 64 KiB on CDNA3.
    smem_per_program: int = 227 * 1024
    # Datasheet dense matrix rates by operand dtype, TFLOP/s (reference lines only).
    peak_tflops: tuple[tuple[str, float], ...] = ()
    arch: str = ""  # compiler target: "sm_90", "gfx950", ...

    @property
    def sm(self) -> int:
        """NVIDIA compute capability as one int (90 for sm_90); 0 on other vendors."""
        return int(self.arch[3:].rstrip("a")) if self.arch.startswith("sm_") else 0

    def peak(self, dtype: str) -> float:
        """Datasheet dense matrix rate for operands of ``dtype`` (NaN when not listed)."""
        return dict(self.peak_tflops).get(dtype, float("nan"))


DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec("MI355X", 256, 8.0, "amd", max_warps_per_cu=32, regs_per_cu=131072,
                   smem_per_cu=160 * 1024, warp_size=64, smem_per_program=160 * 1024,
                   peak_tflops=(("bf16", 2516.6), ("fp8", 5033.2), ("fp4", 10066.3)),
                   arch="gfx950"),
        DeviceSpec("MI300X", 304, 5.3, "amd", max_warps_per_cu=32, regs_per_cu=131072,
                   smem_per_cu=64 * 1024, warp_size=64, smem_per_program=64 * 1024,
                   peak_tflops=(("bf16", 1307.4), ("fp8", 2614.9)), arch="gfx942"),
        DeviceSpec("H100 SXM", 132, 3.35, "nvidia",
                   peak_tflops=(("bf16", 989.4), ("fp8", 1978.9)), arch="sm_90"),
        DeviceSpec("H200", 132, 4.8, "nvidia",
                   peak_tflops=(("bf16", 989.4), ("fp8", 1978.9)), arch="sm_90"),
    )
}

# Substrings of torch's device name (or gfx arch) that identify a registry entry.
_ALIASES: tuple[tuple[str, str], ...] = (
    ("MI355", "MI355X"),
    ("gfx950", "MI355X"),
    ("MI300X", "MI300X"),
    ("gfx942", "MI300X"),
    ("H200", "H200"),
    ("H100", "H100 SXM"),
)


# Where kernels run under Triton's CPU interpreter: portable designs only, nothing compiled.
INTERPRETER = DeviceSpec("Triton interpreter", 1, float("nan"), "cpu", arch="interpreter")


def lookup_device(name: str) -> DeviceSpec | None:
    """Registry entry for a registry name or a torch device name; None when unknown."""
    if name in DEVICES:
        return DEVICES[name]
    for key, entry in _ALIASES:
        if key.lower() in name.lower():
            return DEVICES[entry]
    return None


def get_device(name: str) -> DeviceSpec:
    spec = lookup_device(name)
    if spec is None:
        raise ValueError(f"device: expected one of {sorted(DEVICES)}, got {name!r}")
    return spec


def live_device(index: int = 0) -> DeviceSpec | None:
    """The current accelerator as a DeviceSpec: compute units from torch, peak from the table.

    Returns None when there is no GPU. An unknown GPU gets its compute units from torch
    and NaN for the peak, so nothing is invented.
    """
    if not torch.cuda.is_available():
        return None
    return _cuda_spec(index)


@functools.cache
def _cuda_spec(index: int) -> DeviceSpec:
    props = torch.cuda.get_device_properties(index)
    gcn = getattr(props, "gcnArchName", "") or ""
    known = lookup_device(props.name) or lookup_device(gcn)
    if known is not None:
        return dataclasses.replace(known, compute_units=props.multi_processor_count)
    vendor = "amd" if torch.version.hip else "nvidia"
    arch = gcn.split(":")[0] if vendor == "amd" else f"sm_{props.major}{props.minor}"
    return DeviceSpec(props.name, props.multi_processor_count, float("nan"), vendor, arch=arch)


def device_spec(device: torch.device) -> DeviceSpec:
    """The DeviceSpec of a tensor's device: the live GPU (cached per index), or the Triton
    interpreter for CPU tensors."""
    if device.type == "cuda":
        return _cuda_spec(device.index if device.index is not None
                          else torch.cuda.current_device())
    return INTERPRETER
