"""The README's headline results are generated from the latest committed run, never typed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from mla_kernels.review import headline

ROOT = Path(__file__).parents[2]


def test_the_readme_headline_is_the_latest_committed_runs():
    run = headline.latest_run()
    want = headline.render(run)
    have = headline.current_block((ROOT / "README.md").read_text())
    assert have == want, (f"README.md's headline is not what {run.relative_to(ROOT)} gives: "
                          f"run `{headline.COMMAND}` and commit README.md")


def _copy_run(tmp_path: Path, name: str) -> Path:
    # A run folder of the latest committed run's matrix rows and figure names, to alter.
    src = headline.latest_run()
    run = tmp_path / "data" / "h200" / name
    (run / "figures").mkdir(parents=True)
    for p in src.glob("perf_matrix*.csv"):
        shutil.copy(p, run / p.name)
    (run / "figures" / "roofline.png").write_bytes(b"")
    (run / "README.md").write_text("# a run\n")
    return run


def _auto_row(df: pd.DataFrame, fmt: str, ctx: int):
    return ((df["variant"] == "auto") & (df["timing"] == "graph") & (df["weight_format"] == fmt)
            & (df["model"] == headline.MODEL) & (df["cache_dtype"] == headline.CACHE)
            & (df["block_size"] == headline.PAGE) & (df["ctx"] == ctx) & (df["batch"] == 1)
            & df["weight_draw"].isna()
            # bf16 outputs (a run before the column wrote nothing else)
            & (df["out_dtype"] == "bfloat16" if "out_dtype" in df else True))


def test_the_table_reads_each_value_from_the_rows(tmp_path):
    run = _copy_run(tmp_path, "2099-01-01-000000000000")
    before = headline.render(run, tmp_path)
    assert "[roofline](data/h200/2099-01-01-000000000000/figures/roofline.png)" in before
    p, df = next((p, df) for p in sorted(run.glob("perf_matrix*.csv"))
                 if _auto_row(df := pd.read_csv(p), "fp8_row", 32000).any())
    hit = _auto_row(df, "fp8_row", 32000)
    assert hit.sum() == 1
    df.loc[hit, ["median_us", "roof_fraction", "commit"]] = [123.45, 0.8766, "abcdef123456"]
    df.to_csv(p, index=False)
    after = headline.render(run, tmp_path)
    row = next(line for line in after.splitlines() if line.startswith("| `fp8_row` | 32000 |"))
    assert "| 123.5 | 0.877 |" in row, row
    assert "`abcdef123456`" in after  # the run's commit stamps, as its rows give them
    assert after != before


def test_a_new_run_without_regenerating_fails_the_check(tmp_path, capsys):
    old = _copy_run(tmp_path, "2099-01-01-000000000000")
    readme = tmp_path / "README.md"
    readme.write_text(f"# r\n\nintro\n\n{headline.START}\n{headline.END}\n\nrest\n")
    args = ["--runs", str(old.parent), "--readme", str(readme)]
    assert headline.main([*args, "--check"]) == 1
    assert headline.COMMAND in capsys.readouterr().err
    assert headline.main([*args, "--write"]) == 0
    text = readme.read_text()
    assert text.startswith("# r\n\nintro\n\n") and text.endswith("\n\nrest\n")
    assert headline.main([*args, "--check"]) == 0
    new = _copy_run(tmp_path, "2099-01-02-111111111111")
    p = sorted(new.glob("perf_matrix*.csv"))[0]
    df = pd.read_csv(p)
    df["median_us"] = df["median_us"] * 2
    df.to_csv(p, index=False)
    assert headline.latest_run(old.parent) == new
    assert headline.main([*args, "--check"]) == 1


def test_the_latest_run_is_the_last_folder_with_matrix_rows(tmp_path):
    runs = tmp_path / "h200"
    for name, files in (("2026-01-01-a", ["perf_matrix_a.csv"]), ("2026-01-02-b", ["ceilings.csv"]),
                        ("2025-12-31-c", ["perf_matrix.csv"])):
        (runs / name).mkdir(parents=True)
        for f in files:
            (runs / name / f).write_text("")
    assert headline.latest_run(runs).name == "2026-01-01-a"
    with pytest.raises(FileNotFoundError):
        headline.latest_run(runs / "2026-01-02-b")
    # Two runs of one day: the one measured last, whatever the commits' names.
    for name, when in (("2026-01-03-ffff", "2026-01-03T01:00:00Z"),
                       ("2026-01-03-0000", "2026-01-03T02:00:00Z")):
        (runs / name).mkdir()
        (runs / name / "perf_matrix_all.csv").write_text(f"date,median_us\n{when},1.0\n")
    assert headline.latest_run(runs).name == "2026-01-03-0000"


@pytest.mark.parametrize("text", ["no markers", f"{headline.END}\n{headline.START}",
                                  f"{headline.START}{headline.START}{headline.END}"])
def test_a_readme_without_one_block_is_refused(text):
    with pytest.raises(ValueError, match="headline:start"):
        headline.replace_block(text, "x")
