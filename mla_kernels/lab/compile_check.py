"""Compile a design's kernel for a GPU target on a machine with no GPU, and report what it
uses: shared memory, registers, spills, and which matrix instructions it emits.

Triton compiles for a named target without a driver, so a design can be checked against a
Hopper SM's limits (227 KB of shared memory, 64K registers) before any device time is
spent: the serial design's 280 KB bf16 weight, seen failing on the H200, shows here.

The same holds for AMD: with ``--device MI355X`` (gfx950) or ``--device MI300X`` (gfx942)
the kernel is compiled for ``GPUTarget("hip", arch, 64)`` through Triton's AMD backend (its
LLVM, assembler and linker are in-process, so no ROCm install is needed) and the numbers are
read from the AMDGCN the compiler emits: VGPRs, SGPRs, AGPRs, LDS, scratch, the compiler's
own ``; Occupancy:`` (waves per SIMD) and the count of ``v_mfma`` instructions.
``amd_resident_programs`` turns them into resident programs per CU.

Run in a process with TRITON_INTERPRET unset or 0 (under the interpreter the kernels are
not compiled at all):  python -m mla_kernels.lab.compile_check --variant tiled
                       python -m mla_kernels.lab.compile_check --device MI355X --variant tiled
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.runtime.jit import JITFunction

from ..core.devices import DEVICES, DeviceSpec, get_device
from ..designs import DESIGNS, DesignConfig, resolve
from .inputs import build_inputs
from .occupancy import problem_for

MODULE = "mla_kernels.lab.compile_check"  # run as `python -m` in a child process
HOPPER = DEVICES["H200"]  # the sm_90 part whose limits the checks use
HOPPER_SMEM = HOPPER.smem_per_program


def _target(device: DeviceSpec, capability: int):
    """Triton's compile target for a registry device: ``hip``/gfx arch/wave size for AMD,
    ``cuda``/``capability``/32 otherwise."""
    from triton.backends.compiler import GPUTarget

    if device.vendor == "amd":
        if not device.arch.startswith("gfx"):
            raise ValueError(f"device: expected an AMD device with a gfx arch, got {device!r}")
        return GPUTarget("hip", device.arch, device.warp_size)
    return GPUTarget("cuda", capability, 32)


def compile_calls(run, device: DeviceSpec, capability: int) -> list:
    """Every Triton kernel ``run()`` launches, compiled for the target instead of launched,
    in launch order (``run`` may hand CPU tensors: only their dtypes reach the compiler).

    The launcher's kernel call is intercepted and handed to Triton's own argument binder
    and packer, so the signature, the constants and the specialisations (16-byte
    divisibility of pointers and integers) are those of a real launch.
    """
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = _target(device, capability)
    backend = make_backend(target)
    seen = []

    def compile_instead(self, *args, grid, warmup, **kwargs):
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        opts, sig, consts, attrs = self._pack_args(backend, kwargs, bound, spec, opts)
        source = ASTSource
        if self.is_gluon():  # Gluon's source class sets the module's warp count first
            from triton.experimental.gluon._runtime import GluonASTSource as source
        seen.append(triton.compile(source(self, sig, consts, attrs), target=target,
                                   options=opts.__dict__))

    real = JITFunction.run
    JITFunction.run = compile_instead
    try:
        run()
    finally:
        JITFunction.run = real
    return seen


def launch_keys(run, device: DeviceSpec, capability: int = 90) -> list[tuple[str, ...]]:
    """What identifies each Triton kernel ``run()`` launches in Triton's compile cache, in
    launch order, compiling and launching nothing: (its name, then the signature,
    constants, specialisations and options as ``compile_calls`` would compile it, each as
    its repr). Two calls whose keys are equal compile nothing the other has not."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(_target(device, capability))
    seen = []

    def key_instead(self, *args, grid, warmup, **kwargs):
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        opts, sig, consts, attrs = self._pack_args(backend, kwargs, bound, spec, opts)
        seen.append((self.__name__, repr(sig), repr(consts), repr(attrs),
                     repr(sorted(opts.__dict__.items()))))

    real = JITFunction.run
    JITFunction.run = key_instead
    try:
        run()
    finally:
        JITFunction.run = real
    return seen


def compile_launches(variant: str, inputs, prob, config: DesignConfig | None,
                     device: DeviceSpec, capability: int) -> tuple:
    """Compile what the launcher would launch, for the target, instead of launching it:
    (the design, every kernel compiled, in launch order: a weight widening ahead of the
    main kernel included), by ``compile_calls``."""
    design, cfg = resolve(variant, prob, device, config)
    seen = compile_calls(lambda: design.launch(prob, inputs.args(), None, cfg, device), device,
                         capability)
    if not seen:
        raise ValueError(f"variant: {variant!r} launched nothing for this problem")
    return design, seen


def kernel_report(compiled, capability: int = 90) -> dict:
    """What an sm_``capability`` kernel uses: its name, shared memory, warps, wgmma and
    mma.sync counts, and ptxas' registers and spills."""
    ptx = compiled.asm["ptx"]
    return {"kernel": compiled.name if hasattr(compiled, "name") else compiled.metadata.name,
            "shared_bytes": int(compiled.metadata.shared),
            "num_warps": int(compiled.metadata.num_warps),
            "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
            "mma_sync": len(re.findall(r"\bmma\.sync", ptx)),
            **ptxas_report(ptx, capability)}


def compile_main_kernel(variant: str, inputs, prob, config: DesignConfig | None,
                    device: DeviceSpec, capability: int):
    """(the design, the last kernel its launch compiles: the main one)."""
    design, kernels = compile_launches(variant, inputs, prob, config, device, capability)
    return design, kernels[-1]


def ptxas_report(ptx: str, capability: int) -> dict[str, int]:
    """Registers and spill bytes from the ptxas that ships with Triton's NVIDIA backend."""
    from triton.backends.nvidia.compiler import get_ptxas

    ptxas = get_ptxas(capability).path
    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([ptxas, f"--gpu-name={arch}", "-v", str(src), "-o",
                              str(Path(d) / "k.cubin")], capture_output=True, text=True)
    text = out.stdout + out.stderr
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores", text)
    # ptxas waits for each wgmma before the next where the registers run short.
    return {"n_regs": int(regs.group(1)) if regs else -1,
            "spill_bytes": int(spill.group(1)) if spill else 0,
            "wgmma_serialized": "wgmma.mma_async instructions are serialized" in text}


# ---------------------------------------------------------------------------------- AMD
# CDNA3 (gfx942) and CDNA4 (gfx950), wave64, as LLVM's AMDGPU backend models them
# (AMDGPUBaseInfo / GCNSubtarget): a SIMD's register file holds 512 VGPRs per lane, shared
# by the architectural VGPRs and the AGPRs (unified on gfx90a and later); VGPRs are
# allocated in granules of 8; at most 8 waves per SIMD; 4 SIMDs per CU.
AMD_SIMDS_PER_CU = 4
AMD_VGPRS_PER_SIMD = 512
AMD_VGPR_GRANULE = 8
AMD_MAX_WAVES_PER_SIMD = 8
# LDS is allocated per workgroup in blocks of 128 dwords (COMPUTE_PGM_RSRC2.LDS_SIZE).
AMD_LDS_GRANULE = 512
# A workgroup of more than one wave holds one of a CU's 16 barriers (LLVM's
# getMaxWorkGroupsPerCU on GFX9).
AMD_MAX_BARRIER_WORKGROUPS_PER_CU = 16


def amd_backend_missing() -> str | None:
    """Why Triton's AMD backend cannot compile here, or None when it can. Triton 3.9 needs
    no ROCm for a compile: LLVM's AMDGPU code generator and assembler ship in
    ``triton/backends/amd/lib/libtriton_amd_codegen.so`` and lld is linked into libtriton
    (``amd.link_hsaco``), so AMDGCN and the hsaco are made on a machine with no GPU."""
    try:
        from triton._C.libtriton import amd  # noqa: F401
        from triton.backends.amd.compiler import get_amd_codegen_path
    except ImportError as e:
        return f"triton {triton.__version__} has no AMD backend ({e})"
    path = Path(get_amd_codegen_path())
    if not path.exists():
        return f"triton's AMD code generator is missing: {path}"
    return None


def _amd_field(text: str, pattern: str) -> int | None:
    """The first integer captured by ``pattern`` in ``text``, or None when it is absent."""
    m = re.search(pattern, text, re.MULTILINE)
    return int(m.group(1)) if m else None


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def parse_amdgcn(asm: str) -> dict:
    """The resource numbers the AMDGPU backend states in its AMDGCN text (kernel-info
    comments, ``.amdhsa_*`` directives and the code-object metadata), each None when the
    text does not state it; nothing is derived here but the MFMA count."""
    f = functools.partial(_amd_field, asm)
    mfma = re.findall(r"^\s*(v_mfma_\w+|v_smfmac_\w+)", asm, re.MULTILINE)
    kinds: dict[str, int] = {}
    for name in mfma:
        kinds[name] = kinds.get(name, 0) + 1
    return {
        "vgprs": _first(f(r"^; NumVgprs:\s*(\d+)"), f(r"^\s*\.vgpr_count:\s*(\d+)")),
        "agprs": _first(f(r"^; NumAgprs:\s*(\d+)"), f(r"^\s*\.agpr_count:\s*(\d+)")),
        # Unified VGPR file: architectural VGPRs (padded to AccumOffset) plus AGPRs.
        "total_vgprs": f(r"^; TotalNumVgprs:\s*(\d+)"),
        "accum_offset": f(r"^; AccumOffset:\s*(\d+)"),
        # SGPRs as allocated: with VCC, flat scratch and the XNACK mask.
        "sgprs": _first(f(r"^; TotalNumSgprs:\s*(\d+)"), f(r"^; NumSgprs:\s*(\d+)"),
                        f(r"^\s*\.sgpr_count:\s*(\d+)")),
        "vgprs_for_occupancy": f(r"^; NumVGPRsForWavesPerEU:\s*(\d+)"),
        "sgprs_for_occupancy": f(r"^; NumSGPRsForWavesPerEU:\s*(\d+)"),
        "scratch_bytes": _first(f(r"^; ScratchSize:\s*(\d+)"),
                                f(r"^\s*\.private_segment_fixed_size:\s*(\d+)"),
                                f(r"^\s*\.amdhsa_private_segment_fixed_size\s+(\d+)")),
        "vgpr_spill_count": f(r"^\s*\.vgpr_spill_count:\s*(\d+)"),
        "sgpr_spill_count": f(r"^\s*\.sgpr_spill_count:\s*(\d+)"),
        # LDS the compiler sees statically; Triton's shared memory is dynamic (sized at launch
        # from metadata.shared), so this is 0 for Triton kernels.
        "lds_static_bytes": _first(f(r"^; LDSByteSize:\s*(\d+)"),
                                   f(r"^\s*\.group_segment_fixed_size:\s*(\d+)"),
                                   f(r"^\s*\.amdhsa_group_segment_fixed_size\s+(\d+)")),
        "occupancy_waves_per_simd": f(r"^; Occupancy:\s*(\d+)"),
        "mfma": len(mfma),
        "mfma_kinds": kinds,
    }


def _amd_report(compiled, target) -> dict:
    md = compiled.metadata
    parsed = parse_amdgcn(compiled.asm["amdgcn"])
    shared = getattr(md, "shared", None)
    static = parsed["lds_static_bytes"]
    # What a launch allocates: Triton's dynamic shared memory plus any static LDS.
    lds = None if shared is None and static is None else int(shared or 0) + int(static or 0)
    return {"arch": target.arch, "warp_size": int(target.warp_size),
            "num_warps": int(md.num_warps), "lds_bytes": lds,
            "lds_dynamic_bytes": None if shared is None else int(shared),
            # A waves-per-EU request (0: none) bounds the compiler's register budget.
            "waves_per_eu": getattr(md, "waves_per_eu", None),
            **parsed,
            "hsaco_bytes": len(compiled.asm["hsaco"]) if "hsaco" in compiled.asm else None}


def amd_resident_programs(report: dict, device: DeviceSpec | str = "MI355X") -> dict:
    """Resident programs per CU of an AMD compile report (``compile_design`` on an AMD
    device) on ``device``, and the resource that limits them.

    Waves per SIMD by VGPRs: floor(512 / VGPRs rounded up to 8), by SGPRs (GFX9: <= 100
    SGPRs allow 8, more 7), capped at 8; a program's ``num_warps`` waves spread over the
    CU's 4 SIMDs, so the wave slots hold floor(4 * waves per SIMD / num_warps) programs.
    LDS holds floor(LDS per CU / the program's LDS, rounded up to 512 B) programs; a
    multi-wave program holds one of 16 barriers. The compiler's ``; Occupancy:`` sees the
    registers but not Triton's LDS (dynamic, sized at launch), so it is compared with the
    register-only waves per SIMD, and reported beside them.
    """
    device = get_device(device) if isinstance(device, str) else device
    if device.vendor != "amd":
        raise ValueError(f"device: expected an AMD device, got {device.name!r}")
    warps = int(report["num_warps"])
    vgprs = _first(report.get("vgprs_for_occupancy"), report.get("total_vgprs"),
                   report.get("vgprs"))
    sgprs = _first(report.get("sgprs_for_occupancy"), report.get("sgprs"))
    lds = report.get("lds_bytes")
    compiler = report.get("occupancy_waves_per_simd")

    def rounded(n: int, granule: int) -> int:
        return -(-max(n, 1) // granule) * granule

    by_vgprs = (None if vgprs is None else
                min(AMD_MAX_WAVES_PER_SIMD, AMD_VGPRS_PER_SIMD // rounded(vgprs, AMD_VGPR_GRANULE)))
    by_sgprs = (None if sgprs is None else
                min(AMD_MAX_WAVES_PER_SIMD, 8 if sgprs <= 100 else 7))
    waves = min(w for w in (AMD_MAX_WAVES_PER_SIMD, by_vgprs, by_sgprs) if w is not None)
    limits = {"wave slots": AMD_SIMDS_PER_CU * AMD_MAX_WAVES_PER_SIMD // warps}
    if by_sgprs is not None:
        limits["sgprs"] = AMD_SIMDS_PER_CU * by_sgprs // warps
    if by_vgprs is not None:
        limits["vgprs"] = AMD_SIMDS_PER_CU * by_vgprs // warps
    if lds:
        limits["lds"] = device.smem_per_cu // rounded(int(lds), AMD_LDS_GRANULE)
    if warps > 1:
        limits["barriers"] = AMD_MAX_BARRIER_WORKGROUPS_PER_CU
    programs = min(limits.values())
    # The tightest limit; ties go to the first named (the resource, not the wave-slot cap).
    order = ["vgprs", "sgprs", "lds", "barriers", "wave slots"]
    limited_by = next(k for k in order if k in limits and limits[k] == programs)
    return {
        "device": device.name, "arch": device.arch, "num_warps": warps,
        "waves_per_simd_by_vgprs": by_vgprs, "waves_per_simd_by_sgprs": by_sgprs,
        "waves_per_simd_by_registers": waves,
        "compiler_occupancy_waves_per_simd": compiler,
        "agrees_with_compiler": None if compiler is None else waves == compiler,
        "programs_by": limits,
        "programs_per_cu": programs, "limited_by": limited_by,
        "waves_per_cu": programs * warps,
        "waves_per_simd": programs * warps / AMD_SIMDS_PER_CU,
        "lds_per_cu": device.smem_per_cu,
        "lds_fits": None if lds is None else int(lds) <= device.smem_per_program,
    }


def compile_design(variant: str, shape: str = "kimi-k3-tp8", *, cache_dtype: str = "fp8",
                   weight_format: str = "fp8_row", block_size: int = 1,
                   config: DesignConfig | None = None, capability: int = 90,
                   device: DeviceSpec | str = HOPPER) -> dict:
    """Compile what ``variant`` runs on ``device`` (a registry device or its name: "auto"
    resolves as it would there) and report what the kernel uses.

    NVIDIA devices compile for an sm_``capability`` target: shared memory, registers and
    spills (ptxas), matrix-instruction counts. AMD devices compile for their gfx arch
    (wave64): VGPRs, SGPRs, AGPRs, LDS, scratch, the compiler's occupancy and the MFMA
    count, each read from the AMDGCN (None where the compiler does not state it), with
    ``resident`` from ``amd_resident_programs``.
    """
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("compile checks need TRITON_INTERPRET unset or 0 in this process")
    device = get_device(device) if isinstance(device, str) else device
    # CPU tensors stand in for device ones: only their dtypes reach the compiler.
    inp = build_inputs(shape, [300], block_size=block_size, cache_dtype=cache_dtype,
                       weight_format=weight_format, device="cpu")
    prob = problem_for(shape, [300], cache_dtype, weight_format, block_size)
    design, compiled = compile_main_kernel(variant, inp, prob, config, device, capability)
    head = {"variant": variant, "design": design.name, "weight_format": weight_format,
            "cache_dtype": cache_dtype}
    if device.vendor == "amd":
        row = {**head, "device": device.name,
               **_amd_report(compiled, _target(device, capability))}
        row["resident"] = amd_resident_programs(row, device)
        return row
    ptx = compiled.asm["ptx"]
    return {**head,
            "shared_bytes": int(compiled.metadata.shared),
            "num_warps": int(compiled.metadata.num_warps),
            "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
            "mma_sync": len(re.findall(r"\bmma\.sync", ptx)),
            **ptxas_report(ptx, capability)}


def compiled_resources(variants: list[str], device: str = "MI355X", *,
                       cache_dtype: str = "fp8", weight_format: str = "fp8_row",
                       timeout: int = 900) -> list[dict]:
    """What the compiler states for each variant on a registry device with no GPU at hand:
    one row per compile (the CLI's JSON, flattened: programs per CU and its limit from
    ``resident``), run in a child process with the interpreter off (this process may have
    decorated the kernels for it). A variant the device does not run is left out; a child
    that answers for fewer variants than asked (it crashed) is a RuntimeError with its
    exit status and the end of its stderr."""
    cmd = [sys.executable, "-m", MODULE, "--device", device,
           "--variant", *variants, "--weight-format", weight_format,
           "--cache-dtype", cache_dtype]
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if len(answers) < len(variants):
        raise RuntimeError(f"compile_check on {device}: {len(answers)} of {len(variants)} "
                           f"variants answered, exit status {out.returncode}; its stderr "
                           f"ends:\n{out.stderr[-2000:]}")
    rows = []
    for r in answers:
        if "error" in r:  # refused by resolve: not a design this device runs
            continue
        res = r.pop("resident", None) or {}
        r.pop("mfma_kinds", None)
        r["resident_per_cu"] = res.get("programs_per_cu")
        r["resident_limit"] = res.get("limited_by")
        rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> int:
    """One JSON line per (variant, weight format). A variant the device does not run (as
    ``designs.resolve`` rules: hopper_ws and tiled_tma on AMD) gets a line with ``error``
    and the exit status is 1; with no ``--variant`` every design that runs there compiles."""
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", nargs="+", default=None,
                    help="designs (or auto) to compile; default: every design that runs on "
                         "--device")
    ap.add_argument("--weight-format", nargs="+", default=["fp8_row"])
    ap.add_argument("--cache-dtype", default="fp8")
    ap.add_argument("--capability", type=int, default=90,
                    help="NVIDIA compute capability (NVIDIA devices only)")
    ap.add_argument("--device", default="H200",
                    help=f"registry device whose target is compiled for, one of {sorted(DEVICES)}")
    a = ap.parse_args(argv)
    device = get_device(a.device)
    if a.variant is not None:
        todo = [(v, f) for v in a.variant for f in a.weight_format]
    else:
        todo = [(n, f) for f in a.weight_format for n, d in DESIGNS.items()
                if d.runs(problem_for("kimi-k3-tp8", [300], a.cache_dtype, f, 1), device)]
    status = 0
    for v, f in todo:
        try:
            row = compile_design(v, cache_dtype=a.cache_dtype, weight_format=f,
                                 capability=a.capability, device=device)
        except ValueError as e:  # refused by resolve, or launched nothing
            print(f"compile_check: {v} ({f}) on {device.name}: {e}", file=sys.stderr)
            row, status = {"variant": v, "weight_format": f, "cache_dtype": a.cache_dtype,
                           "device": device.name, "error": str(e)}, 1
        print(json.dumps(row), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

