"""The commit a run stamps is derived and checked: from git in a checkout, from the manifest
in a copy without the history, never typed."""

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from mla_kernels.lab import provenance as prov

ROOT = Path(__file__).parents[2]
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

# Stamps typed by hand before commits were derived: the first seven characters name the
# commit measured, the rest was made up (the runs' READMEs say so). Kept as measured.
TYPED_BY_HAND = {"f9a93138e5e0": "f9a9313", "3c5725f8b0b4": "3c5725f", "a8be341e0f0b": "a8be341"}
LABELS_OF_EARLY_EXPLORATION = {"explore", "tune"}  # 2026-11-29/30 exploration files


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "repo"
    (root / "mla_kernels" / "lab").mkdir(parents=True)
    (root / "mla_kernels" / "__init__.py").write_text("x = 1\n")
    (root / "mla_kernels" / "lab" / "bench.py").write_text("y = 2\n")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "01_plot.ipynb").write_text("{}\n")
    (root / "configs").mkdir()
    (root / "configs" / "cpu.yaml").write_text("a: 1\n")
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return root


def test_blob_hash_is_git_s():
    assert prov.blob_hash(b"x = 1\n") == "7d4290a117a4ddcc11daae7ea675841033830c8f"


@needs_git
def test_a_checkout_stamps_head_and_marks_changes(checkout):
    head = _git(checkout, "rev-parse", "--short=12", "HEAD")
    assert prov.commit_stamp(checkout) == head
    (checkout / "mla_kernels" / "lab" / "bench.py").write_text("y = 3\n")
    assert prov.commit_stamp(checkout) == f"{head}+dirty"
    _git(checkout, "checkout", "-q", "--", ".")
    (checkout / "mla_kernels" / "extra.py").write_text("z = 1\n")  # untracked code runs too
    assert prov.commit_stamp(checkout) == f"{head}+dirty"


@needs_git
def test_a_copy_without_history_stamps_its_manifest_s_commit_only_when_it_matches(checkout,
                                                                                  tmp_path):
    head = _git(checkout, "rev-parse", "HEAD")
    manifest = prov.write_manifest(checkout / prov.MANIFEST.name, root=checkout)
    assert manifest["commit"] == head and set(manifest["files"]) == {
        "mla_kernels/__init__.py", "mla_kernels/lab/bench.py", "notebooks/01_plot.ipynb",
        "configs/cpu.yaml"}
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    assert prov.commit_stamp(copy) == head[:12]
    (copy / "mla_kernels" / "lab" / "bench.py").write_text("y = 3\n")
    assert prov.commit_stamp(copy) == f"{head[:12]}+unmatched"
    (copy / prov.MANIFEST.name).unlink()
    assert prov.commit_stamp(copy) == "unknown"
    (copy / prov.MANIFEST.name).write_text(json.dumps({"commit": head}))  # no file list
    assert prov.commit_stamp(copy) == f"{head[:12]}+unmatched"


@needs_git
def test_a_copy_with_an_older_git_stamps_the_manifest_it_matches(checkout):
    # A copy of a later tree over an earlier .git: git alone would say "<old>+dirty".
    old = _git(checkout, "rev-parse", "--short=12", "HEAD")
    (checkout / "mla_kernels" / "lab" / "bench.py").write_text("y = 3\n")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    new = _git(checkout, "rev-parse", "HEAD")
    prov.write_manifest(checkout / prov.MANIFEST.name, root=checkout)
    _git(checkout, "reset", "-q", "--soft", old)  # the files stay those of `new`
    assert prov.commit_stamp(checkout) == new[:12]
    (checkout / "mla_kernels" / "lab" / "bench.py").write_text("y = 4\n")  # neither
    assert prov.commit_stamp(checkout) == f"{old}+dirty"


@needs_git
def test_a_copy_over_a_clone_that_lacks_its_commit_stamps_the_manifest_it_matches(checkout,
                                                                                  tmp_path):
    # A later tree copied over a clone made before its commit (git there has never seen
    # it): git alone would say "<old>+dirty"; the manifest's own hashes decide.
    old = _git(checkout, "rev-parse", "--short=12", "HEAD")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(checkout), str(clone))
    (checkout / "mla_kernels" / "lab" / "bench.py").write_text("y = 3\n")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    new = _git(checkout, "rev-parse", "HEAD")
    prov.write_manifest(checkout / prov.MANIFEST.name, root=checkout)
    shutil.copytree(checkout, clone, ignore=shutil.ignore_patterns(".git"), dirs_exist_ok=True)
    assert prov.tracked_package_files(clone, new) is None  # the clone lacks the commit
    assert prov.commit_stamp(clone) == new[:12]
    (clone / "mla_kernels" / "lab" / "bench.py").write_text("y = 4\n")  # neither
    assert prov.commit_stamp(clone) == f"{old}+dirty"


@needs_git
def test_git_s_view_wins_over_a_manifest_naming_head(checkout):
    # A manifest that names HEAD but hashes edited files: git sees the edit.
    head = _git(checkout, "rev-parse", "HEAD")
    bench = checkout / "mla_kernels" / "lab" / "bench.py"
    bench.write_text("y = 3\n")
    files = prov.tracked_package_files(checkout)
    files["mla_kernels/lab/bench.py"] = prov.blob_hash(b"y = 3\n")
    (checkout / prov.MANIFEST.name).write_text(json.dumps({"commit": head, "files": files}))
    stamp, why = prov.check_commit(checkout)
    assert stamp == f"{head[:12]}+dirty" and why == "mla_kernels/lab/bench.py differs"


@needs_git
@pytest.mark.parametrize("with_git", [True, False])
def test_a_file_shadowing_a_tracked_module_is_a_change(checkout, tmp_path, with_git):
    head = _git(checkout, "rev-parse", "HEAD")
    prov.write_manifest(checkout / prov.MANIFEST.name, root=checkout)
    root = checkout
    if not with_git:
        root = tmp_path / "copy"
        shutil.copytree(checkout, root, ignore=shutil.ignore_patterns(".git"))
    assert prov.commit_stamp(root) == head[:12]
    shadow = root / "mla_kernels" / "lab" / "bench" / "__init__.pyc"  # imported before bench.py
    shadow.parent.mkdir()
    shadow.write_bytes(b"\0" * 16)
    stamp, why = prov.check_commit(root)
    assert stamp == head[:12] + ("+dirty" if with_git else "+unmatched")
    assert "mla_kernels/lab/bench/__init__.pyc is not listed" in why
    shadow.unlink()
    (root / "mla_kernels" / "__pycache__").mkdir()  # bytecode caches are no change
    (root / "mla_kernels" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert prov.commit_stamp(root) == head[:12]


@needs_git
@pytest.mark.parametrize("edit", ["notebooks/01_plot.ipynb", "configs/cpu.yaml",
                                  "notebooks/02_new.ipynb"])
def test_notebook_and_config_edits_are_changes(checkout, edit):
    head = _git(checkout, "rev-parse", "--short=12", "HEAD")
    (checkout / edit).write_text('{"cells": []}\n')
    assert prov.commit_stamp(checkout) == f"{head}+dirty"
    (checkout / "notebooks" / ".ipynb_checkpoints").mkdir(exist_ok=True)  # JupyterLab's
    _git(checkout, "checkout", "-q", "--", ".")
    (checkout / "notebooks" / "02_new.ipynb").unlink(missing_ok=True)
    (checkout / "notebooks" / ".ipynb_checkpoints" / "01_plot-checkpoint.ipynb").write_text("")
    assert prov.commit_stamp(checkout) == head


BAD_MANIFESTS = {
    "empty commit": ({"commit": ""}, "unknown+unmatched", "expected commit a 40-digit"),
    "not a commit": ({"commit": "not-a-commit"}, "unknown+unmatched", "'not-a-commit'"),
    "a list commit": ({"commit": ["a"]}, "unknown+unmatched", "expected commit"),
    "a list of files": ({"files": ["mla_kernels/__init__.py"]}, "+unmatched",
                        "expected files an object"),
    "a file outside": ({"files": {"../x.py": "0" * 40}}, "+unmatched", "'../x.py'"),
    "a bad blob": ({"files": {"mla_kernels/__init__.py": 3}}, "+unmatched", "40-digit blob"),
    "not an object": ([], "unknown+unmatched", "expected an object, got list"),
    "nested": ("[" * 200000, "unknown+unmatched", "expected JSON, got RecursionError"),
    "not utf-8": (b"\xff\xfe{", "unknown+unmatched", "expected JSON"),
}


@needs_git
@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_a_bad_manifest_is_unmatched_with_its_reason_never_a_crash(checkout, tmp_path, case):
    good = prov.write_manifest(checkout / prov.MANIFEST.name, root=checkout)
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    change, want, words = BAD_MANIFESTS[case]
    path = copy / prov.MANIFEST.name
    if isinstance(change, bytes):
        path.write_bytes(change)
    elif isinstance(change, str):
        path.write_text(change)
    else:
        path.write_text(json.dumps({**good, **change} if isinstance(change, dict) else change))
    stamp, why = prov.check_commit(copy)
    assert stamp == want if want.startswith("unknown") else stamp == good["commit"][:12] + want
    assert words in why, why


def test_a_label_is_appended_not_substituted(monkeypatch):
    monkeypatch.setenv("MLA_RUN_LABEL", "trace")
    monkeypatch.setenv("MLA_COMMIT", "0123456789ab")  # no longer read: commits are derived
    stamp = prov.git_commit()
    assert stamp.endswith("+trace") and not stamp.startswith("0123456789ab")


def test_writing_a_manifest_outside_a_checkout_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match="--manifest: expected a git checkout"):
        prov.write_manifest(tmp_path / "m.json", root=tmp_path)


def _no_history() -> bool:
    """No git, no repository (a copy of the tree), or a shallow clone."""
    if GIT is None:
        return True
    try:
        return _git(ROOT, "rev-parse", "--is-shallow-repository") == "true"
    except subprocess.CalledProcessError:
        return True


@pytest.mark.skipif(_no_history(), reason="needs the repository's history")
def test_every_committed_row_names_a_commit_of_this_repository():
    stamps = set()
    for path in sorted((ROOT / "data").rglob("*.csv")):
        head = pd.read_csv(path, nrows=0).columns
        if "commit" in head:
            stamps |= set(pd.read_csv(path, usecols=["commit"])["commit"].dropna().astype(str))
        if {"commit", "tree"} <= set(head):
            # A side-by-side run's older tree, a copy of its package made without a manifest
            # (before `make ab-tree` wrote one), stamps "unknown", labelled by its commit:
            # the label must name one.
            d = pd.read_csv(path, usecols=["commit", "tree"]).astype(str)
            older = d["commit"] == "unknown+" + d["tree"]
            stamps -= set(d["commit"][older])
            stamps |= set(d["tree"][older])
    assert stamps
    missing = []
    for stamp in sorted(stamps):
        base = stamp.split("+")[0]
        if base in LABELS_OF_EARLY_EXPLORATION:
            continue
        rev = TYPED_BY_HAND.get(base, base)
        ok = subprocess.run(["git", "rev-parse", "-q", "--verify", f"{rev}^{{commit}}"],
                            cwd=ROOT, capture_output=True).returncode == 0
        if not ok:
            missing.append(stamp)
    assert missing == [], f"stamps that name no commit: {missing}"
