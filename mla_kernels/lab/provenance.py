"""Where a measurement came from: device, versions, commit, date.

The commit is derived, never typed. In a git checkout it is ``HEAD``, with ``+dirty`` when
the covered files (the package, ``notebooks/``, ``configs/``) differ from it; git's view
wins where ``.git`` exists. A copy without the history (the tree on the GPU machine) reads
the manifest written in the checkout it was copied from (``python -m
mla_kernels.lab.provenance --manifest``): the commit and the git blob hash of every covered
file. The run stamps that commit only when the manifest's fields are valid and the files
hash to them; otherwise ``+unmatched``, with the reason. A stamp is never an exception:
every table write takes one. ``MLA_RUN_LABEL`` adds a label to the stamp
(``<commit>+<label>``) for runs of a patched tree.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.machinery
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
# What a run's figures and rows come from: the package, the notebooks that draw the
# figures, the configurations they run with.
COVERED = (PACKAGE, "notebooks", "configs")
MANIFEST = REPO_ROOT / "provenance-manifest.json"
SHORT = 12
_HEX = frozenset("0123456789abcdef")
# Every file Python may import a module from: an untracked one beside (or shadowing) a
# tracked module changes what runs.
_IMPORTABLE = tuple(importlib.machinery.all_suffixes())


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


def _is_sha(v) -> bool:
    return isinstance(v, str) and len(v) == 40 and set(v) <= _HEX


def tracked_package_files(root: Path = REPO_ROOT, commit: str = "HEAD") -> dict[str, str] | None:
    """{path: blob hash} of the covered files tracked at ``commit``, or None without git (or
    without that commit)."""
    if not (root / ".git").exists():
        return None
    listing = _git("ls-tree", "-r", commit, "--", *COVERED, root=root)
    if listing is None:
        return None
    files = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        files[path] = meta.split()[2]
    return files


def _unlisted(root: Path, listed: dict[str, str]):
    """Files under ``root`` that count as changes when ``listed`` lacks them: in the package,
    any file Python imports a module from (bytecode caches aside); in the notebooks and
    configs, any file outside hidden folders."""
    for top in COVERED:
        base = root / top
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(root)
            if not p.is_file() or "__pycache__" in rel.parts or any(
                    part.startswith(".") for part in rel.parts):
                continue
            if top == PACKAGE and not p.name.endswith(_IMPORTABLE):
                continue
            if rel.as_posix() not in listed:
                yield rel.as_posix()


def _mismatch(listed: dict[str, str], root: Path) -> str | None:
    """Why the covered files under ``root`` are not exactly ``listed`` ({path: blob hash}),
    or None when they are."""
    for path, blob in listed.items():
        p = root / path
        if not p.is_file():
            return f"{path} is missing"
        if blob_hash(p.read_bytes()) != blob:
            return f"{path} differs"
    for path in _unlisted(root, listed):
        return f"{path} is not listed (it adds or shadows a module or a notebook input)"
    return None


def write_manifest(path: Path = MANIFEST, root: Path = REPO_ROOT, commit: str = "HEAD",
                   package_only: bool = False) -> dict:
    """The manifest of ``commit`` (HEAD) for a copy of the tree that travels without
    ``.git``; ``package_only``: of its package files alone, for a copy of the package alone
    (``make ab-tree``)."""
    files = tracked_package_files(root, commit)
    if files is None:
        raise ValueError(f"--manifest: expected a git checkout at {root} with {commit}, got none")
    if package_only:
        files = {k: v for k, v in files.items() if k.startswith(PACKAGE + "/")}
    head = (_git("rev-parse", commit, root=root) or "").strip()
    manifest = {"commit": head, "files": files}
    write_text_atomic(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _read_manifest(path: Path) -> tuple[dict | None, str]:
    """(manifest, "") when it reads and its fields are what they must be; otherwise
    (None, reason), or ({"commit": its commit}, reason) when only the file list is bad;
    (None, "") for no manifest at all. Never raises: every table write stamps."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError, RecursionError, MemoryError) as e:
        return None, f"{path.name}: expected JSON, got {type(e).__name__}: {str(e)[:120]}"
    if not isinstance(manifest, dict):
        return None, f"{path.name}: expected an object, got {type(manifest).__name__}"
    commit, files = manifest.get("commit"), manifest.get("files")
    if not _is_sha(commit):
        return None, f"{path.name}: expected commit a 40-digit hex sha, got {str(commit)[:60]!r}"
    if not isinstance(files, dict) or not files:
        return {"commit": commit}, (f"{path.name}: expected files an object of path: blob hash, got "
                      f"{type(files).__name__}")
    for k, v in files.items():
        parts = k.split("/") if isinstance(k, str) else []
        if not parts or parts[0] not in COVERED or ".." in parts or not _is_sha(v):
            return {"commit": commit}, (f"{path.name}: expected files under {list(COVERED)} with 40-digit "
                          f"blob hashes, got {str(k)[:80]!r}: {str(v)[:60]!r}")
    return manifest, ""


def check_commit(root: Path = REPO_ROOT, manifest_path: Path | None = None
                 ) -> tuple[str, str]:
    """(stamp, reason): the stamp ``commit_stamp`` returns and, when it is not a verified
    commit, why. Never raises."""
    manifest_path = root / MANIFEST.name if manifest_path is None else manifest_path
    files = tracked_package_files(root)
    if files is not None:  # git's view wins
        head = (_git("rev-parse", f"--short={SHORT}", "HEAD", root=root) or "").strip()
        why = _mismatch(files, root)
        if why is None:
            return head, ""
        manifest, bad = _read_manifest(manifest_path)
        if manifest is not None and not bad:  # a commit git has, and its files as git lists
            listed = tracked_package_files(root, manifest["commit"])
            # A commit this git lacks (a later tree copied over an older clone): the
            # manifest's own hashes, as a copy without .git is checked.
            if _mismatch(manifest["files"] if listed is None else listed, root) is None:
                return manifest["commit"][:SHORT], ""
        return f"{head}+dirty", why
    manifest, why = _read_manifest(manifest_path)
    if why:
        return f"{manifest['commit'][:SHORT] if manifest else 'unknown'}+unmatched", why
    if manifest is None:
        return "unknown", "neither git nor a manifest"
    commit = manifest["commit"][:SHORT]
    why = _mismatch(manifest["files"], root)
    return (commit, "") if why is None else (f"{commit}+unmatched", why)


def commit_stamp(root: Path = REPO_ROOT, manifest_path: Path | None = None) -> str:
    """``<commit>`` only for a commit git or the manifest verified: a checkout's ``HEAD``
    whose covered files (``COVERED``) are HEAD's, else, in a checkout, a manifest's commit
    whose files git lists as these (or, a commit git lacks, the manifest does); in a copy
    without ``.git``, the
    manifest's commit when its fields are valid and the files match them. Otherwise
    ``<HEAD>+dirty`` (a checkout), ``<commit>+unmatched`` (a copy whose files differ from its
    manifest, or ``unknown+unmatched`` when the manifest's fields are not what they must
    be), or ``unknown`` with neither. A file Python would import that no listing holds (a
    module beside, or shadowing, a tracked one) counts as a change."""
    return check_commit(root, manifest_path)[0]


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
        stamp, why = check_commit()
        if why:
            print(f"{stamp}: {why}", file=sys.stderr)  # stdout holds the stamp alone
        print(stamp)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
