"""What the diagnostics' command lines share: where their rows go.

Imported by the diagnostics beside it, each run as
``python3 -m mla_kernels.lab.diagnostics.<name>``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_FOLDER = Path("reports/diag")  # inside the repository; git ignores reports/


def parser(doc: str, rows: str) -> argparse.ArgumentParser:
    """An argument parser described by ``doc``'s first paragraph, with ``--out FOLDER``, the
    folder ``rows`` (the file the script writes) goes to."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_FOLDER, metavar="FOLDER",
                    help=f"folder for {rows} (default {DEFAULT_FOLDER}/; created)")
    return ap


def sequence_parser(doc: str, rows: str, tokens: tuple[int, ...], variant_help: str,
                    variants: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """``parser`` with the arguments of a diagnostic that times a sequence of calls: the
    tokens of one sequence (default ``tokens``), ``--calls`` (61), ``--variant`` (auto; one
    of ``variants`` where given) and ``--config`` (its config fields as JSON)."""
    ap = parser(doc, rows)
    ap.add_argument("tokens", nargs="*", type=int, default=list(tokens),
                    help=f"tokens of one sequence (default {' '.join(map(str, tokens))})")
    ap.add_argument("--calls", type=int, default=61, help="calls in the graph (default 61)")
    ap.add_argument("--variant", default="auto", choices=variants, help=variant_help)
    ap.add_argument("--config", type=json.loads, default=None,
                    help="the variant's config fields as a JSON mapping (default: its own)")
    return ap


def write_rows(df, out: Path, name: str) -> Path:
    """``df`` as ``out/name``, the folder created first."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / name, index=False)
    return out / name


def check_or_measure(doc: str, rows: str, check, measure, check_help: str, add=None) -> None:
    """The command line of a diagnostic with a CPU ``--check`` beside its measurement:
    ``check()`` with ``--check``, else ``measure(args)``; ``add(parser)`` adds its own
    arguments."""
    ap = parser(doc, rows)
    if add is not None:
        add(ap)
    ap.add_argument("--check", action="store_true", help=check_help)
    a = ap.parse_args()
    check() if a.check else measure(a)


def require_sm90(script: str) -> None:
    """Exit naming why, unless an sm_90 CUDA GPU is here (``--check`` compiles without one)."""
    import torch

    from ...context.sm90 import device_reason

    why = (device_reason(torch.device("cuda")) if torch.cuda.is_available()
           else "a CUDA device, got none")
    if why is not None:
        raise SystemExit(f"{script}: expected an sm_90 GPU, {why} (--check compiles "
                         "without one)")
