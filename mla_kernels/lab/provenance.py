"""Where a measurement came from: device, versions, commit, date.

The commit is derived, never typed. In a git checkout it is ``HEAD``, with ``+dirty`` when
the package's files differ from it. A machine without the history (a copy of the tree on
the GPU machine, or one whose ``.git`` is older than its files) reads the manifest written
beside the package in the checkout it was copied from (``python -m mla_kernels.lab.provenance
--manifest``): the commit and the git blob hash of every tracked package file. The run stamps
that commit only when the package files it imports hash to the manifest's; otherwise
``+unmatched`` (or ``+dirty`` against the ``.git`` it has). ``MLA_RUN_LABEL`` adds a
label to the stamp (``<commit>+<label>``) for runs of a patched tree.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import triton

from ..core.devices import live_device
from .repo_files import REPO_ROOT, write_text_atomic

PACKAGE = "mla_kernels"
MANIFEST = REPO_ROOT / "provenance-manifest.json"
SHORT = 12


def blob_hash(data: bytes) -> str:
    """The id git gives a file's content (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(*args: str, root: Path = REPO_ROOT) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=root,
                             check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def tracked_package_files(root: Path = REPO_ROOT) -> dict[str, str] | None:
    """{path: blob hash at HEAD} of the package's tracked files, or None without git."""
    listing = _git("ls-tree", "-r", "HEAD", "--", PACKAGE, root=root)
    if listing is None or not (root / ".git").exists():
        return None
    files = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        files[path] = meta.split()[2]
    return files


def _files_match(listed: dict[str, str], root: Path) -> bool:
    """Whether the package's files under ``root`` are exactly ``listed`` ({path: blob hash}):
    each with that content, and no Python file beside them (an unlisted module runs too)."""
    for path, blob in listed.items():
        p = root / path
        if not p.is_file() or blob_hash(p.read_bytes()) != blob:
            return False
    return all(str(p.relative_to(root)) in listed for p in (root / PACKAGE).rglob("*.py"))


def write_manifest(path: Path = MANIFEST, root: Path = REPO_ROOT) -> dict:
    """The manifest of HEAD for a copy of the tree that travels without ``.git``."""
    files = tracked_package_files(root)
    if files is None:
        raise ValueError(f"--manifest: expected a git checkout at {root}, got none")
    head = (_git("rev-parse", "HEAD", root=root) or "").strip()
    manifest = {"commit": head, "files": files}
    write_text_atomic(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _manifest_stamp(root: Path, manifest_path: Path) -> str | None:
    """The manifest's commit when the package files match it, ``<commit>+unmatched`` when
    they do not, None without a readable manifest."""
    try:
        manifest = json.loads(manifest_path.read_text())
        commit, listed = manifest["commit"][:SHORT], manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return commit if _files_match(listed, root) else f"{commit}+unmatched"


def commit_stamp(root: Path = REPO_ROOT, manifest_path: Path | None = None) -> str:
    """``<commit>`` when the package files are those of a known commit: a checkout's clean
    ``HEAD``, else the manifest's commit when they match it (a copy whose ``.git``, if any,
    is not the one its files came from); otherwise ``<commit>+dirty`` (a checkout with
    changes), ``<commit>+unmatched`` (a copy whose files differ from its manifest), or
    ``unknown`` with neither git nor a manifest."""
    manifest_path = root / MANIFEST.name if manifest_path is None else manifest_path
    files = tracked_package_files(root)
    head = None
    if files is not None:
        head = (_git("rev-parse", f"--short={SHORT}", "HEAD", root=root) or "").strip()
        if _files_match(files, root):
            return head
    from_manifest = _manifest_stamp(root, manifest_path)
    if from_manifest is not None and (head is None or "+" not in from_manifest):
        return from_manifest
    return f"{head}+dirty" if head is not None else "unknown"


def git_commit() -> str:
    """The stamp of the commit being measured, with ``MLA_RUN_LABEL`` appended when set."""
    label = os.environ.get("MLA_RUN_LABEL")
    stamp = commit_stamp()
    return f"{stamp}+{label}" if label else stamp


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.lab.provenance",
                                 description="Print the commit stamp a run would record, or "
                                             "write the manifest a copy without .git reads.")
    ap.add_argument("--manifest", action="store_true",
                    help=f"write {MANIFEST.name} at the repository root from HEAD")
    a = ap.parse_args(argv)
    try:
        if a.manifest:
            m = write_manifest()
            print(f"{MANIFEST}: {m['commit'][:SHORT]}, {len(m['files'])} files")
        print(commit_stamp())
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
