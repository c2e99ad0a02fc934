"""Compile a design's kernel for a GPU target on a machine with no GPU, and report what it
uses: shared memory, registers, spills, and which matrix instructions it emits.

Triton compiles for a named target without a driver, so a design can be checked against a
Hopper SM's limits (227 KB of shared memory, 64K registers) before any device time is
spent: the serial design's 280 KB bf16 weight, seen failing on the H200, shows here.

Run in a process with TRITON_INTERPRET unset or 0 (under the interpreter the kernels are
not compiled at all):  python -m mla_kernels.compile_check --variant tiled
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.runtime.jit import JITFunction

from .designs import DESIGNS, DesignConfig, resolve
from .devices import DEVICES, DeviceSpec
from .inputs import build_inputs
from .occupancy import problem_for

HOPPER = DEVICES["H200"]  # the sm_90 part whose limits the checks use
HOPPER_SMEM = HOPPER.smem_per_program


def _compile_launch(variant: str, inputs, prob, config: DesignConfig | None,
                    device: DeviceSpec, capability: int):
    """Compile what the launcher would launch, for the target, instead of launching it.

    The launcher's kernel call is intercepted and handed to Triton's own argument binder
    and packer, so the signature, the constants and the specialisations (16-byte
    divisibility of pointers and integers) are those of a real launch.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    seen = {}

    def compile_instead(self, *args, grid, warmup, **kwargs):
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        opts, sig, consts, attrs = self._pack_args(backend, kwargs, bound, spec, opts)
        source = ASTSource
        if self.is_gluon():  # Gluon's source class sets the module's warp count first
            from triton.experimental.gluon._runtime import GluonASTSource as source
        seen["kernel"] = triton.compile(source(self, sig, consts, attrs), target=target,
                                        options=opts.__dict__)

    design, cfg = resolve(variant, prob, device, config)
    real = JITFunction.run
    JITFunction.run = compile_instead
    try:
        design.launch(prob, inputs.args(), None, cfg, device)
    finally:
        JITFunction.run = real
    if not seen:
        raise ValueError(f"variant: {variant!r} launched nothing for this problem")
    return design, seen["kernel"]


def _ptxas_report(ptx: str, capability: int) -> dict[str, int]:
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
    return {"n_regs": int(regs.group(1)) if regs else -1,
            "spill_bytes": int(spill.group(1)) if spill else 0}


def compile_design(variant: str, shape: str = "kimi-k3-tp8", *, cache_dtype: str = "fp8",
                   weight_format: str = "fp8_row", block_size: int = 1,
                   config: DesignConfig | None = None, capability: int = 90,
                   device: DeviceSpec = HOPPER) -> dict:
    """Compile what ``variant`` runs on ``device`` (a registry device: "auto" resolves as
    it would there) for an NVIDIA target of this compute capability; return its shared
    memory, registers, spills and matrix-instruction counts."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("compile checks need TRITON_INTERPRET unset or 0 in this process")
    # CPU tensors stand in for device ones: only their dtypes reach the compiler.
    inp = build_inputs(shape, [300], block_size=block_size, cache_dtype=cache_dtype,
                       weight_format=weight_format, device="cpu")
    prob = problem_for(shape, [300], cache_dtype, weight_format, block_size)
    design, compiled = _compile_launch(variant, inp, prob, config, device, capability)
    ptx = compiled.asm["ptx"]
    return {"variant": variant, "design": design.name, "weight_format": weight_format,
            "cache_dtype": cache_dtype,
            "shared_bytes": int(compiled.metadata.shared),
            "num_warps": int(compiled.metadata.num_warps),
            "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
            "mma_sync": len(re.findall(r"\bmma\.sync", ptx)),
            **_ptxas_report(ptx, capability)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.compile_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", nargs="+", default=list(DESIGNS))
    ap.add_argument("--weight-format", nargs="+", default=["fp8_row"])
    ap.add_argument("--cache-dtype", default="fp8")
    ap.add_argument("--capability", type=int, default=90)
    a = ap.parse_args(argv)
    for v in a.variant:
        for f in a.weight_format:
            print(json.dumps(compile_design(v, cache_dtype=a.cache_dtype, weight_format=f,
                                            capability=a.capability)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
