"""Registry of devices: compute units and datasheet peaks, plus detection of the live device.

Peaks are vendor datasheet figures, used only as labelled reference lines; measured
ceilings come from the benchmark harness.
"""

from __future__ import annotations

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


DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        DeviceSpec("MI355X", 256, 8.0, "amd", max_warps_per_cu=32, regs_per_cu=131072,
                   smem_per_cu=160 * 1024, warp_size=64),
        DeviceSpec("MI300X", 304, 5.3, "amd", max_warps_per_cu=32, regs_per_cu=131072,
                   smem_per_cu=64 * 1024, warp_size=64),
        DeviceSpec("H100 SXM", 132, 3.35, "nvidia"),
        DeviceSpec("H200", 132, 4.8, "nvidia"),
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
    props = torch.cuda.get_device_properties(index)
    known = lookup_device(props.name) or lookup_device(getattr(props, "gcnArchName", "") or "")
    if known is not None:
        return DeviceSpec(known.name, props.multi_processor_count, known.peak_tbps, known.vendor,
                          known.max_warps_per_cu, known.regs_per_cu, known.smem_per_cu,
                          known.warp_size)
    vendor = "amd" if torch.version.hip else "nvidia"
    return DeviceSpec(props.name, props.multi_processor_count, float("nan"), vendor)
