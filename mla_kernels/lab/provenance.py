"""Where a measurement came from: device, versions, commit, date."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess

import torch
import triton

from ..devices import live_device


def git_commit() -> str:
    """The commit being measured: $MLA_COMMIT when given (the device copy has no .git)."""
    env = os.environ.get("MLA_COMMIT")
    if env:
        return env
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance() -> dict[str, object]:
    """Columns every measured row carries."""
    dev = live_device()
    return {
        "device": dev.name if dev else "cpu",
        "compute_units": dev.compute_units if dev else os.cpu_count(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
