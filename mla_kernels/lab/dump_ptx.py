"""Compile every design for sm_90 on a machine with no GPU and write each kernel's PTX,
debug line info stripped, one file per (design, config, weight format, cache, page size):
the before/after check of a change that should not alter what a kernel compiles to.

    python -m mla_kernels.lab.dump_ptx FOLDER           # then: diff -r BEFORE_FOLDER AFTER_FOLDER

Every kernel a launch compiles is kept (the weight widening ahead of ``hopper_ws`` over a
bf16 cache included). Run with TRITON_INTERPRET unset or 0.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

# hopper_ws's configs that its tuning table or its tests reach, beside the default.
HOPPER_WS_CONFIGS = (
    {},
    {"ring_depth": 6, "mma_groups": 2, "latent_in_registers": True},
    {"ring_depth": 6, "mma_groups": 2},
    {"ring_depth": 2},
)
PAGE_SIZES = (1, 16)


def strip_debug(ptx: str) -> str:
    """PTX without what moves when only source lines move: ``.loc`` and ``.file``
    directives, the ``.debug_*`` sections and the inline-scope labels that point into them."""
    out, in_debug = [], False
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith(".section") and ".debug" in s:
            in_debug = True
            continue
        if in_debug:
            if s == "}":
                in_debug = False
            continue
        if s.startswith((".loc", ".file")) or re.match(r"\$L__(tmp|func_begin|func_end)\d+:", s):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def kernels_of(variant: str, weight_format: str, cache: str, page: int, config: dict | None):
    """(name, ptx) of each kernel the launch compiles, in launch order."""
    from .compile_check import HOPPER, compile_launches
    from .inputs import build_inputs
    from .occupancy import problem_for

    inp = build_inputs("kimi-k3-tp8", [300], block_size=page, cache_dtype=cache,
                       weight_format=weight_format, device="cpu")
    prob = problem_for("kimi-k3-tp8", [300], cache, weight_format, page)
    _, kernels = compile_launches(variant, inp, prob, config or None, HOPPER, 90)
    return [(k.metadata.name, k.asm["ptx"]) for k in kernels]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for the .ptx files")
    ap.add_argument("--variant", nargs="*", help="designs (default: every registered one)")
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        ap.error("run with TRITON_INTERPRET unset or 0")
    from ..core.formats import WEIGHT_FORMATS
    from ..designs import DESIGNS
    from .compile_check import HOPPER
    from .occupancy import problem_for

    a.out.mkdir(parents=True, exist_ok=True)
    n = 0
    for name in a.variant or list(DESIGNS):
        configs = HOPPER_WS_CONFIGS if name == "hopper_ws" else ({},)
        for config in configs:
            tag = "-".join(f"{k}{int(v)}" for k, v in config.items()) or "default"
            for fmt in WEIGHT_FORMATS:
                for cache in ("fp8", "bf16"):
                    for page in PAGE_SIZES:
                        prob = problem_for("kimi-k3-tp8", [300], cache, fmt, page)
                        if not DESIGNS[name].runs(prob, HOPPER):
                            continue
                        try:
                            DESIGNS[name].config(config or None)
                            kernels = kernels_of(name, fmt, cache, page, config)
                        except ValueError as e:  # a config this problem refuses
                            print(f"skip {name} {tag} {fmt} {cache} p{page}: {e}", file=sys.stderr)
                            continue
                        for i, (kname, ptx) in enumerate(kernels):
                            f = a.out / f"{name}.{tag}.{fmt}.{cache}.p{page}.{i}.{kname}.ptx"
                            f.write_text(strip_debug(ptx))
                            n += 1
    print(f"{n} kernels written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
