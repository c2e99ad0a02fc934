"""Figures and the replot path: what a figure draws comes from the CSV it was given."""

import shutil
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from mla_kernels import analysis, plotting  # noqa: E402
from mla_kernels import occupancy as occ  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "measurements_sample.csv"
REFERENCE = Path(__file__).parents[1] / "data" / "reference" / "seed_mi355x.csv"


@pytest.fixture
def data_dir(tmp_path) -> Path:
    d = tmp_path / "h200"
    d.mkdir()
    shutil.copy(FIXTURE, d / "run.csv")
    return d


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


def line(ax, label: str):
    found = [ln for ln in ax.get_lines() if ln.get_label() == label]
    assert len(found) == 1, [ln.get_label() for ln in ax.get_lines()]
    return found[0]


def replot_sweep(data_dir: Path):
    rows = analysis.select(analysis.load_measurements(data_dir), shape="kimi-k3-tp8",
                           cache_dtype="fp8", weight_format="fp8_row", block_size=1,
                           batch="single")
    return rows, plotting.plot_context_sweep(rows, analysis.load_reference(REFERENCE))


def shipped(df: pd.DataFrame) -> pd.DataFrame:
    """The fixture's rows a figure may show: default launch configs, single sequences."""
    return df[df.config.isna() & (df.batch == 1)]


def test_replot_draws_the_fixture_and_follows_it(data_dir):
    rows, fig = replot_sweep(data_dir)
    ax_t, ax_s = fig.axes[:2]
    want = rows[rows.variant == "chunked"].sort_values("ctx")
    got = line(ax_t, "chunked")
    np.testing.assert_array_equal(got.get_xdata(), want["ctx"].to_numpy())
    np.testing.assert_allclose(got.get_ydata(), want["median_us"].to_numpy())
    serial = rows[rows.variant == "serial"].sort_values("ctx")["median_us"].to_numpy()
    np.testing.assert_allclose(line(ax_s, "chunked vs serial").get_ydata(),
                               serial / want["median_us"].to_numpy())

    # Graph-replayed torch rows are their own series; a tuning row never reaches a figure.
    fx = shipped(pd.read_csv(FIXTURE))
    graph = fx[(fx.variant == "torch_fp8") & (fx.timing == "graph")].sort_values("ctx")
    np.testing.assert_allclose(line(ax_t, "torch_fp8_graph").get_ydata(), graph.median_us)
    assert 1.0 not in line(ax_t, "chunked").get_ydata()

    # Change the fixture: the figure's data changes with it.
    df = pd.read_csv(data_dir / "run.csv")
    df.loc[df.variant == "chunked", "median_us"] *= 2
    df.to_csv(data_dir / "run.csv", index=False)
    _, fig2 = replot_sweep(data_dir)
    np.testing.assert_allclose(line(fig2.axes[0], "chunked").get_ydata(),
                               2 * want["median_us"].to_numpy())


def test_sweep_overlays_the_public_figures_as_their_own_series(data_dir):
    _, fig = replot_sweep(data_dir)
    ref = pd.read_csv(REFERENCE)
    before = line(fig.axes[0], "serial on MI355X (public change)")
    np.testing.assert_allclose(before.get_ydata(), ref["before_ms"] * 1e3)
    sp = line(fig.axes[1], "chunked vs serial on MI355X (public change)")
    np.testing.assert_allclose(sp.get_ydata(), ref["speedup"])
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"
    assert "µs" in fig.axes[0].get_ylabel()
    assert "H200" in fig._suptitle.get_text()


def test_bandwidth_lines_are_labelled_at_their_values(data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    fig = plotting.plot_bandwidth(rows, peak_tbps=4.8)
    ax = fig.axes[0]
    assert line(ax, "datasheet peak 4.80 TB/s").get_ydata()[0] == pytest.approx(4.8)
    copy = line(ax, "measured copy ceiling 4.27 TB/s (read + write)")
    assert copy.get_ydata()[0] == pytest.approx(4.27)
    want = rows[rows.variant == "serial"].sort_values("ctx")["achieved_tbps"].to_numpy()
    np.testing.assert_allclose(line(ax, "serial").get_ydata(), want)
    assert "TB/s" in ax.get_ylabel() and "H200" in ax.get_title(loc="left")
    # An override replaces the measured ceiling.
    fig2 = plotting.plot_bandwidth(rows, peak_tbps=8.0, copy_tbps=5.0)
    line(fig2.axes[0], "datasheet peak 8.00 TB/s")
    line(fig2.axes[0], "measured copy ceiling 5.00 TB/s (read + write)")


def test_roofline_has_both_roofs_and_every_variant(data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    fig = plotting.plot_roofline(rows, peak_tbps=4.8)
    ax = fig.axes[0]
    bw = line(ax, "bandwidth roof: measured copy 4.27 TB/s")
    x, y = bw.get_xdata(), bw.get_ydata()
    np.testing.assert_allclose(y, np.minimum(x * 4.27, 836.0))
    assert line(ax, "matrix roof: measured fp8 matmul 836 TFLOP/s").get_ydata()[0] == 836.0
    line(ax, "bandwidth roof: datasheet 4.80 TB/s")
    for v in ("serial", "chunked", "torch_fp8", "torch_fp8_graph"):
        pts = line(ax, v)
        r = rows[rows.variant == v]
        np.testing.assert_allclose(sorted(pts.get_xdata()), sorted(r.flops / r.min_bytes))
        np.testing.assert_allclose(sorted(pts.get_ydata()), sorted(r.achieved_tflops))
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "FLOP" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()


def test_occupancy_figure_shows_the_model():
    df = pd.DataFrame(occ.occupancy_table(["serial", "chunked"], [(1024,), (32000,)],
                                          ["MI355X", "H200"]))
    fig = plotting.plot_occupancy(df)
    ax = fig.axes[0]
    s = line(ax, "serial on MI355X (256 CUs): 12 programs, 4.7% busy")
    np.testing.assert_allclose(s.get_ydata(), [100 * 12 / 256] * 2)
    np.testing.assert_allclose(line(ax, "chunked on H200 (132 CUs)").get_ydata(), [100, 100])
    assert ax.get_xscale() == "log" and "%" in ax.get_ylabel()


def test_save_figure_writes_png_and_svg_only(tmp_path, data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    paths = plotting.save_figure(plotting.plot_bandwidth(rows), tmp_path / "f", "bw")
    assert [p.name for p in paths] == ["bw.png", "bw.svg"]
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["bw.png", "bw.svg"]
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in paths[1].read_text()[:2000]


# ------------------------------------------------------------------ analysis helpers
def test_select_keeps_shipped_configs_and_names_graph_rows(data_dir):
    df = analysis.load_measurements(data_dir)
    rows = analysis.select(df, batch="single")
    assert (rows.timing == "flushed").all()
    assert set(rows.variant) == {"serial", "chunked", "torch_fp8", "torch_fp8_graph"}
    assert rows[(rows.variant == "chunked") & (rows.ctx == 32000)].median_us.tolist() == [170.0]
    tuned = analysis.select(df, batch="single", default_config=False, graph_as_variants=False)
    assert len(tuned) == len(rows) - 4 + 1  # the graph rows are timing "graph" there
    only = analysis.select(df, batch="single", variants=["serial"])
    assert set(only.variant) == {"serial"}


def test_load_measurements_skips_other_csvs_and_duplicates(data_dir):
    pd.DataFrame({"a": [1]}).to_csv(data_dir / "occupancy.csv", index=False)
    sub = data_dir / "second-session"
    sub.mkdir()
    shutil.copy(FIXTURE, sub / "again.csv")  # the same rows twice: kept once
    df = analysis.load_measurements(data_dir)
    assert len(df) == len(pd.read_csv(FIXTURE))
    assert analysis.load_measurements(data_dir / "missing") is None
    empty = data_dir.parent / "empty"
    empty.mkdir()
    assert analysis.load_measurements(empty) is None
    assert analysis.select(None, batch="single").empty


def test_select_by_batch_and_device(data_dir):
    df = analysis.load_measurements(data_dir)
    single = analysis.select(df, batch="single")
    ragged = analysis.select(df, batch="ragged",
                             ragged_contexts=[1024, 2048, 4096, 8192, 16384, 32768, 49152, 65536])
    assert (single.batch == 1).all() and len(ragged) == 3
    assert len(analysis.select(df, device="H200", timing=None, default_config=False)) == len(df)
    assert analysis.select(df, device="MI355X").empty
    assert analysis.select(df, weight_format="bf16").empty


def test_speedup_table_from_the_fixture(data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    ident = pd.DataFrame({"variant": ["chunked", "chunked"], "ctx": [4096, 32000],
                          "max_abs_diff": [0.0, 0.5]})
    t = analysis.speedup_table(rows, "serial", "chunked", ident)
    r = t[t.ctx == 32000].iloc[0]
    s = rows[(rows.ctx == 32000) & (rows.variant == "serial")].median_us.iloc[0]
    c = rows[(rows.ctx == 32000) & (rows.variant == "chunked")].median_us.iloc[0]
    assert r.before_ms == pytest.approx(s / 1e3) and r.speedup == pytest.approx(s / c)
    assert r.max_abs_diff == 0.5
    assert list(t.ctx) == [4096, 32000, 65536, 109440]
    assert analysis.speedup_table(rows, "serial", "nope").empty


def test_write_csv_atomic_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "out" / "x.csv"
    analysis.write_csv_atomic(pd.DataFrame({"a": [1, 2]}), path)
    assert pd.read_csv(path).a.tolist() == [1, 2]

    class Broken(pd.DataFrame):
        def to_csv(self, f, **kw):
            f.write("a\n9\n")  # half written, then the run dies
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        analysis.write_csv_atomic(Broken({"a": [3]}), path)
    assert pd.read_csv(path).a.tolist() == [1, 2]
    assert [p.name for p in path.parent.iterdir()] == ["x.csv"]


def test_context_grids():
    grid = analysis.sweep_contexts()
    assert {1024, 4096, 32000, 65536, 109440, 131072} <= set(grid)
    assert grid == sorted(set(grid)) and grid[0] == 1024 and grid[-1] == 131072
    assert analysis.batches_for("single", [1, 2]) == [(1,), (2,)]
    assert analysis.batches_for("ragged", [1], [3, 4]) == [(3, 4)]
    with pytest.raises(ValueError):
        analysis.batches_for("ragged", [1], [])
    with pytest.raises(ValueError):
        analysis.batches_for("mixed", [1])


def test_check_variants_bit_identity_at_a_tiny_size():
    rows = analysis.check_variants("kimi-k3-tp8", (3,), variants=["serial", "chunked"])
    assert [r["variant"] for r in rows] == ["serial", "chunked"]
    assert all(r["correct"] for r in rows)
    assert rows[1]["compared_with"] == "serial" and rows[1]["bit_identical"]
