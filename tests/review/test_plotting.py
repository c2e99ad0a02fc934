"""Figures and the replot path: what a figure draws comes from the CSV it was given, in one
colour per design and one line style per timing, with the run named in a footer."""

import shutil
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from mla_kernels.lab import (
    checks,  # noqa: E402
    roofline,  # noqa: E402
)
from mla_kernels.lab import occupancy as occ  # noqa: E402
from mla_kernels.review import analysis, plotting

FIXTURE = Path(__file__).parent / "fixtures" / "measurements_sample.csv"
REFERENCE = Path(__file__).parents[2] / "data" / "reference" / "seed_mi355x.csv"
MERGED = Path(__file__).parents[2] / "data" / "reference" / "seed_mi355x_merged.csv"


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


def by_gid(ax, gid: str):
    found = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, [ln.get_gid() for ln in ax.get_lines()]
    return found[0]


def series_lines(ax):
    """The lines of data series (ours and the public change's), not roofs or guides."""
    return [ln for ln in ax.get_lines()
            if (ln.get_gid() or "").count("/") >= 1 and not (ln.get_gid() or "").startswith(
                ("roof/", "ridge/", "ceiling/", "fraction/"))]


def footer_text(fig) -> str:
    texts = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "footer"]
    assert len(texts) == 1, texts
    return texts[0]


def replot_sweep(data_dir: Path, **kw):
    rows = analysis.select(analysis.load_measurements(data_dir), shape="kimi-k3-tp8",
                           cache_dtype="fp8", weight_format="fp8_row", block_size=1,
                           batch="single", timing=None)
    return rows, plotting.plot_context_sweep(rows, analysis.load_reference(REFERENCE), **kw)


def shipped(df: pd.DataFrame) -> pd.DataFrame:
    """The fixture's rows a figure may show: default launch configs, single sequences."""
    return df[df.config.isna() & (df.batch == 1)]


def synthetic(variants=("serial", "chunked", "torch_fp8"), timings=("flushed", "graph"),
              contexts=(4096, 32000, 109440), *, device="H200", commit="abc123def456",
              date="2026-12-01T10:00:00Z", weight_format="fp8_row", cache_dtype="fp8",
              copy=4.25, mm=None) -> pd.DataFrame:
    """Rows in the measurement schema, with consistent bytes, FLOPs, floors and rates."""
    mm = mm or {"fp8": 1000.0, "bf16": 640.0}
    rows = []
    for i, v in enumerate(variants):
        for j, t in enumerate(timings):
            for c in contexts:
                nb = roofline.min_bytes("kimi-k3-tp8", c, cache_dtype, weight_format)
                nf = roofline.flops("kimi-k3-tp8", c)
                dt = "bf16" if v == "torch_bf16" else roofline.dot_dtype(cache_dtype,
                                                                           weight_format)
                floor = max(nb / copy / 1e6, nf / mm[dt] / 1e6)
                us = floor * (1.5 + i + 0.25 * j) * (1 + 1000 / c)
                rows.append({"device": device, "compute_units": 132, "commit": commit,
                             "date": date, "model": "kimi-k3-tp8", "heads": 12,
                             "weight_format": weight_format, "cache_dtype": cache_dtype,
                             "block_size": 1, "contexts": str(c), "batch": 1, "ctx": c,
                             "variant": v, "timing": t, "median_us": us, "min_bytes": nb,
                             "flops": nf, "dot_dtype": dt, "copy_tbps": copy, "write_tbps": 3.3,
                             "mm_tflops": mm[dt], "floor_us": floor, "roof_fraction": floor / us,
                             "achieved_tbps": nb / us / 1e6, "achieved_tflops": nf / us / 1e6,
                             "config": np.nan})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ context sweep
def test_replot_draws_the_fixture_and_follows_it(data_dir):
    rows, fig = replot_sweep(data_dir)
    ax_t, ax_s, ax_f = fig.axes[:3]
    want = rows[rows.variant == "chunked"].sort_values("ctx")
    got = line(ax_t, "chunked, plain call")  # the fixture times the designs flushed only
    np.testing.assert_array_equal(got.get_xdata(), want["ctx"].to_numpy())
    np.testing.assert_allclose(got.get_ydata(), want["median_us"].to_numpy())
    serial = rows[rows.variant == "serial"].sort_values("ctx")["median_us"].to_numpy()
    np.testing.assert_allclose(line(ax_s, "chunked, plain call").get_ydata(),
                               serial / want["median_us"].to_numpy())

    # torch_fp8's rows timed "graph" are device time, solid, and the default shows them
    # rather than its plain calls.
    fx = shipped(pd.read_csv(FIXTURE))
    graph = fx[(fx.variant == "torch_fp8") & (fx.timing == "graph")].sort_values("ctx")
    torch_line = line(ax_t, "torch_fp8, device time")
    np.testing.assert_allclose(torch_line.get_ydata(), graph.median_us)
    assert torch_line.get_linestyle() == "-"
    assert "torch_fp8, plain call" not in [ln.get_label() for ln in ax_t.get_lines()]
    assert 1.0 not in got.get_ydata()  # a tuning row never reaches a figure

    # Change the fixture: the figure's data changes with it.
    df = pd.read_csv(data_dir / "run.csv")
    df.loc[df.variant == "chunked", "median_us"] *= 2
    df.to_csv(data_dir / "run.csv", index=False)
    _, fig2 = replot_sweep(data_dir)
    np.testing.assert_allclose(line(fig2.axes[0], "chunked, plain call").get_ydata(),
                               2 * want["median_us"].to_numpy())


def test_sweep_overlays_the_public_figures_as_their_own_series(data_dir):
    _, fig = replot_sweep(data_dir)
    ref = pd.read_csv(REFERENCE)
    before = line(fig.axes[0], "public change on MI355X: before")
    np.testing.assert_allclose(before.get_ydata(), ref["before_ms"] * 1e3)
    np.testing.assert_allclose(line(fig.axes[0], "public change on MI355X: after").get_ydata(),
                               ref["after_ms"] * 1e3)
    sp = line(fig.axes[1], "public change on MI355X: after vs before")
    np.testing.assert_allclose(sp.get_ydata(), ref["before_ms"] / ref["after_ms"])
    assert before.get_color() == plotting.REFERENCE_COLOR
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"
    assert "µs" in fig.axes[0].get_ylabel()
    assert "H200" in fig._suptitle.get_text()


def test_sweep_takes_the_merged_table_with_its_own_columns():
    merged = pd.read_csv(MERGED, comment="#")
    fig = plotting.plot_context_sweep(synthetic(), {"merged": merged})
    after = line(fig.axes[0], "merged on MI355X: after")
    np.testing.assert_array_equal(after.get_xdata(), merged["ctx_tokens"])
    np.testing.assert_allclose(after.get_ydata(), merged["after_us"])


def test_sweep_fraction_panel_is_floor_over_time():
    df = synthetic()
    fig = plotting.plot_context_sweep(df)
    ax_f = fig.axes[2]
    for v in ("serial", "chunked", "torch_fp8"):
        r = df[(df.variant == v) & (df.timing == "graph")].sort_values("ctx")
        got = by_gid(ax_f, f"{v}/graph")
        np.testing.assert_array_equal(got.get_xdata(), r["ctx"])
        np.testing.assert_allclose(got.get_ydata(), r["floor_us"] / r["median_us"])
    assert "floor" in ax_f.get_ylabel()


def test_sweep_title_names_only_the_timings_drawn():
    df = synthetic()
    title = plotting.plot_context_sweep(df)._suptitle.get_text()
    assert "device time" in title and "plain call" not in title
    title = plotting.plot_context_sweep(df, series=["default", "flushed"])._suptitle.get_text()
    assert "device time" in title and "plain call" in title


def test_context_ticks_are_exactly_the_contexts_with_data():
    df = synthetic(contexts=(1024, 3000, 32000, 32768, 109440))
    fig = plotting.plot_context_sweep(df)
    for ax in fig.axes[:3]:
        assert list(ax.get_xticks()) == [1024, 3000, 32000, 32768, 109440]
        labels = [t.get_text().strip() for t in ax.get_xticklabels()]
        # Exact token counts, one way in every figure: 32000 and 32768 never read alike.
        assert labels == ["1024", "3000", "32000", "32768", "109440"]
    # With the public table, its contexts are ticks too (they have data).
    ref = pd.DataFrame({"ctx": [2048], "before_ms": [1.0], "after_ms": [0.5]})
    ticks = plotting.plot_context_sweep(df, ref).axes[0].get_xticks()
    assert list(ticks) == [1024, 2048, 3000, 32000, 32768, 109440]
    bw = plotting.plot_bandwidth(df).axes[0]
    assert list(bw.get_xticks()) == [1024, 3000, 32000, 32768, 109440]


# ------------------------------------------------------------------ colours, styles, series
ALL = ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto", "newdesign",
       "torch_bf16", "torch_fp8")


def test_a_design_has_one_colour_in_every_figure_and_variant_set():
    a = synthetic(("serial", "chunked", "torch_fp8"))
    b = synthetic(("chunked", "tiled", "hopper_ws", "torch_bf16"))
    figs = [plotting.plot_context_sweep(a), plotting.plot_bandwidth(b),
            plotting.plot_roofline(b), plotting.plot_context_sweep(b, series="all")]
    want = plotting.design_color("chunked")
    for fig in figs:
        got = {ln.get_color() for ax in fig.axes for ln in ax.get_lines()
               if (ln.get_gid() or "").startswith("chunked/")}
        assert got == {want}
    assert plotting.variant_colors(["chunked"]) == {"chunked": want}
    assert plotting.variant_colors(ALL)["chunked"] == want
    assert plotting.design_color("chunked_graph") == want
    # Distinct designs, distinct colours; an unknown design is stable and not a grey.
    colours = [plotting.design_color(v) for v in ALL if not v.startswith("torch")]
    assert len(set(colours)) == len(colours)
    new = matplotlib.colors.to_rgb(plotting.design_color("newdesign"))
    assert plotting.design_color("newdesign") == plotting.design_color("newdesign")
    assert not np.allclose(new, new[0])


def test_torch_paths_are_grey_and_the_public_change_black():
    for v in ("torch_bf16", "torch_fp8", "torch_bf16_graph", "torch_int8"):
        r, g, b = matplotlib.colors.to_rgb(plotting.design_color(v))
        assert r == g == b and 0.2 < r < 0.9, v
    for v in ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto", "newdesign"):
        r, g, b = matplotlib.colors.to_rgb(plotting.design_color(v))
        assert not (r == g == b), v
    assert matplotlib.colors.to_rgb(plotting.REFERENCE_COLOR) == (0, 0, 0)


def test_line_style_follows_the_timing():
    df = synthetic(("serial", "chunked", "torch_fp8"), timings=("flushed", "graph", "graph8"))
    # The naming of older runs' tables: a "<variant>_graph" row is the variant timed graph.
    old = df[df.timing == "graph"].assign(variant=lambda d: d.variant + "_graph",
                                          timing="flushed")
    df = pd.concat([df[df.timing != "graph"], old])
    fig = plotting.plot_context_sweep(df, series="all")
    want = {"graph": "-", "flushed": "--", "graph8": ":"}
    for ax in fig.axes[:3]:
        for v in ("serial", "chunked", "torch_fp8"):
            for t, ls in want.items():
                if ax is fig.axes[1] and v == "serial":
                    continue  # the speedup panel has serial as its line at 1
                assert by_gid(ax, f"{v}/{t}").get_linestyle() == ls
    assert line(fig.axes[0], "chunked, device time").get_linestyle() == "-"
    assert line(fig.axes[0], "chunked, plain call").get_linestyle() == "--"


def test_default_series_are_at_most_seven_per_panel():
    df = synthetic(ALL, timings=("flushed", "graph", "graph8"))
    ref = pd.read_csv(REFERENCE)
    # The sweep draws every design (its own default, no limit): see test_figures_roofs.
    figs = [plotting.plot_context_sweep(df, ref, limit=7), plotting.plot_context_sweep(df, limit=7),
            plotting.plot_roofline(df), plotting.plot_bandwidth(df), plotting.plot_peaks(df, ref)]
    for fig in figs:
        for ax in fig.axes:
            assert len(series_lines(ax)) <= 7, [ln.get_gid() for ln in series_lines(ax)]
    chosen = plotting.default_series(df, before="serial", reserved=2)
    assert len(chosen) == 5
    # Device time only; auto (it runs another design) goes first, the baseline stays, and
    # one torch path: the fastest.
    assert {t for _, t in chosen} == {"graph"}
    names = [v for v, _ in chosen]
    assert "auto" not in names and "serial" in names
    speed = df[df.timing == "graph"].groupby("variant").median_us.median()
    assert [v for v in names if v.startswith("torch")] == [
        speed[["torch_bf16", "torch_fp8"]].idxmin()]
    # Opting in: plain calls, or everything.
    more = plotting.choose_series(df, ["default", "flushed"], before="serial", reserved=2)
    assert set(chosen) < set(more) and ("serial", "flushed") in more
    assert len(plotting.choose_series(df, "all")) == 27
    assert plotting.choose_series(df, ["hopper_ws_graph", "tiled/graph8", "chunked"]) == [
        ("chunked", "graph"), ("tiled", "graph8"), ("hopper_ws", "graph")]


def test_designs_without_device_time_fall_back_to_their_plain_call():
    df = pd.concat([synthetic(("serial",), timings=("flushed",)),
                    synthetic(("torch_fp8",), timings=("flushed", "graph"))])
    assert plotting.default_series(df) == [("serial", "flushed"), ("torch_fp8", "graph")]


def test_every_figure_names_its_run():
    df = synthetic(("serial", "chunked", "torch_fp8"))
    ref = pd.read_csv(REFERENCE)
    figs = [plotting.plot_context_sweep(df, ref), plotting.plot_roofline(df),
            plotting.plot_bandwidth(df), plotting.plot_peaks(df, ref),
            plotting.plot_formats(df)]
    for fig in figs:
        text = footer_text(fig)
        assert "H200" in text and "commit abc123def456" in text and "2026-12-01" in text
    assert "MI355X" in footer_text(figs[0])
    two = pd.concat([df, df.assign(commit="fedcba987654", date="2026-12-02T00:00:00Z")])
    text = footer_text(plotting.plot_bandwidth(two))
    assert "abc123def456" in text and "fedcba987654" in text and "2026-12-02" in text
    occ_rows = pd.DataFrame(occ.occupancy_table(["serial"], [(1024,)], ["MI355X", "H200"]))
    assert "MI355X, H200" in footer_text(plotting.plot_occupancy(occ_rows))
    # The run's software too, named as the data's (the code drawing it may be newer).
    text = footer_text(plotting.plot_context_sweep(df.assign(torch="2.11.0", triton="3.6.0")))
    assert text.startswith("data: H200, run 2026-12-01-abc123def456")
    assert "torch 2.11.0" in text and "triton 3.6.0" in text


# ------------------------------------------------------------------ bandwidth
def test_bandwidth_lines_are_labelled_at_their_values(data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    fig = plotting.plot_bandwidth(rows, peak_tbps=4.8)
    ax = fig.axes[0]
    assert line(ax, "datasheet peak 4.80 TB/s").get_ydata()[0] == pytest.approx(4.8)
    copy = line(ax, "measured copy ceiling 4.27 TB/s (read + write)")
    assert copy.get_ydata()[0] == pytest.approx(4.27)
    want = rows[rows.variant == "serial"].sort_values("ctx")["achieved_tbps"].to_numpy()
    np.testing.assert_allclose(line(ax, "serial, plain call").get_ydata(), want)
    assert "TB/s" in ax.get_ylabel() and "H200" in ax.get_title(loc="left")
    # An override replaces the measured ceiling.
    fig2 = plotting.plot_bandwidth(rows, peak_tbps=8.0, copy_tbps=5.0)
    line(fig2.axes[0], "datasheet peak 8.00 TB/s")
    line(fig2.axes[0], "measured copy ceiling 5.00 TB/s (read + write)")
    # Without an override the datasheet peak comes from the device registry.
    line(plotting.plot_bandwidth(rows).axes[0], "datasheet peak 4.80 TB/s")


def test_bandwidth_draws_the_ceiling_at_the_ops_intensity():
    df = synthetic(("serial", "hopper_ws"), copy=4.245, mm={"fp8": 1006.0, "bf16": 640.0})
    ax = plotting.plot_bandwidth(df).axes[0]
    c = by_gid(ax, "ceiling/fp8")
    r = df[(df.variant == "serial") & (df.timing == "graph")].sort_values("ctx")
    ai = (r.flops / r.min_bytes).to_numpy()
    np.testing.assert_array_equal(c.get_xdata(), r.ctx)
    np.testing.assert_allclose(c.get_ydata(), np.minimum(4.245, 1006.0 / ai))
    # About 2.65 TB/s at ~380 FLOP/B on the H200, labelled with its value.
    assert c.get_ydata()[-1] == pytest.approx(2.65, abs=0.02)
    assert f"= {c.get_ydata()[-1]:.2f} TB/s" in c.get_label()


# ------------------------------------------------------------------ roofline
def test_roofline_has_both_roofs_and_every_variant(data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single", timing=None)
    fig = plotting.plot_roofline(rows, peak_tbps=4.8, series="all")
    ax = fig.axes[0]
    bw = line(ax, "bandwidth roof: measured 4.27 TB/s (copy, read + write)")
    x, y = bw.get_xdata(), bw.get_ydata()
    # The bandwidth part up to the ridge, the matrix roof flat from there: two swatches.
    np.testing.assert_allclose(y, x * 4.27)
    assert x[-1] == pytest.approx(836.0 / 4.27)
    mm = line(ax, "matrix roof: measured fp8 matmul (cuBLAS) 836 TFLOP/s")
    assert set(mm.get_ydata()) == {836.0} and mm.get_xdata()[0] == pytest.approx(836.0 / 4.27)
    assert mm.get_linestyle() != bw.get_linestyle()
    line(ax, "bandwidth roof: datasheet 4.80 TB/s (HBM)")
    line(ax, "matrix roof: datasheet fp8 matmul 1979 TFLOP/s")
    assert by_gid(ax, "ridge/measured/fp8").get_xdata()[0] == pytest.approx(836.0 / 4.27)
    tidy = plotting.tidy(rows)
    for v, t in (("serial", "flushed"), ("chunked", "flushed"), ("torch_fp8", "flushed"),
                 ("torch_fp8", "graph")):
        pts = by_gid(ax, f"{v}/{t}")
        r = tidy[(tidy.variant == v) & (tidy.timing == t)].sort_values("ctx")
        np.testing.assert_allclose(pts.get_xdata(), r.flops / r.min_bytes)
        np.testing.assert_allclose(pts.get_ydata(), r.achieved_tflops)
    # The axes are zoomed to the points, the ridge inside them.
    lo, hi = ax.get_xlim()
    assert lo < 836.0 / 4.27 < 380 < hi < 1000
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "FLOP" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()


def test_roofline_points_follow_the_rows():
    df = synthetic(("chunked", "hopper_ws"))
    ax = plotting.plot_roofline(df).axes[0]
    before = by_gid(ax, "hopper_ws/graph").get_ydata().copy()
    changed = df.copy()
    pick = (changed.variant == "hopper_ws") & (changed.timing == "graph") & (changed.ctx == 32000)
    changed.loc[pick, "achieved_tflops"] = 777.0
    fig = plotting.plot_roofline(changed)
    ax2, ax_f = fig.axes[0], fig.axes[2]
    after = by_gid(ax2, "hopper_ws/graph").get_ydata()
    assert after[1] == 777.0 and after[0] == before[0] and after[2] == before[2]
    # Context is encoded: points in context order, one marker size per context.
    hw = df[(df.variant == "hopper_ws") & (df.timing == "graph")].sort_values("ctx")
    np.testing.assert_allclose(by_gid(ax2, "hopper_ws/graph").get_xdata(),
                               hw.flops / hw.min_bytes)
    sizes = [c.get_sizes() for c in ax2.collections if len(c.get_sizes()) == 3]
    assert sizes and all(len(set(s)) == 3 for s in sizes)
    r = df[(df.variant == "chunked") & (df.timing == "graph")].sort_values("ctx")
    np.testing.assert_allclose(by_gid(ax_f, "chunked/graph").get_ydata(), r.roof_fraction)


# ------------------------------------------------------------------ peaks, formats
# Their figures' tests: tests/review/test_peaks.py, tests/review/test_formats.py.


# ------------------------------------------------------------------ occupancy
def occupancy_cells(fig, which: str) -> dict[str, dict[int, str]]:
    """{row name: {ctx: cell text}} of one of the occupancy tables ("busy" or "per_cu")."""
    out: dict[str, dict[int, str]] = {}
    for t in fig.findobj(Text):
        gid = t.get_gid() or ""
        if gid.startswith(which + "/"):
            name, ctx = gid[len(which) + 1:].rsplit("/", 1)
            out.setdefault(name, {})[int(ctx)] = t.get_text()
    return out


def test_occupancy_figure_shows_the_model():
    df = pd.DataFrame(occ.occupancy_table(["serial", "chunked"], [(1024,), (32000,)],
                                          ["MI355X", "H200"]))
    fig = plotting.plot_occupancy(df, code_commit="abc123def456")
    busy, per = occupancy_cells(fig, "busy"), occupancy_cells(fig, "per_cu")
    # Every (design, device) is a row of its own, each context a cell: none hides another.
    assert set(busy) == set(per) == {"serial on MI355X (256 CUs)", "chunked on MI355X (256 CUs)",
                                     "serial on H200 (132 CUs)", "chunked on H200 (132 CUs)"}
    assert busy["serial on MI355X (256 CUs)"] == {1024: f"{100 * 12 / 256:.3g}%",
                                                   32000: f"{100 * 12 / 256:.3g}%"}
    assert busy["chunked on H200 (132 CUs)"] == {1024: "100%", 32000: "100%"}
    want = df[(df.variant == "chunked") & (df.device == "H200")].sort_values("ctx")
    assert [float(per["chunked on H200 (132 CUs)"][c]) for c in (1024, 32000)] == pytest.approx(
        list(want.programs_per_cu), rel=0.05)
    # Row labels in the design's colour; the contexts written exactly.
    rows = {t.get_gid(): t for t in fig.findobj(Text) if (t.get_gid() or "").startswith("row/")}
    assert rows["row/chunked on H200 (132 CUs)"].get_color() == plotting.design_color("chunked")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1024", "32000"]
    assert "commit abc123def456" in footer_text(fig) and "MI355X, H200" in footer_text(fig)


def test_occupancy_keeps_two_configs_of_one_design_apart():
    def rows(progs):  # one design, one device, its grid at three contexts
        return [{"variant": "tiled", "device": "MI355X", "compute_units": 256, "ctx": c,
                 "contexts": str(c), "programs_launched": p, "programs_working": p,
                 "programs_per_cu": p / 256, "busy_share": min(p, 256) / 256, "model": "m"}
                for c, p in zip((1024, 4096, 32000), progs, strict=True)]

    a, b = rows([192, 768, 6000]), rows([384, 1536, 12000])
    # Interleaved as occupancy_table writes them ("tiled" and "auto" resolved to tiled).
    df = pd.DataFrame([r for pair in zip(a, b, strict=True) for r in pair])
    per = occupancy_cells(plotting.plot_occupancy(df, code_commit="x"), "per_cu")
    assert len(per) == 2
    got = sorted(tuple(float(v[c]) for c in (1024, 4096, 32000)) for v in per.values())
    np.testing.assert_allclose(got, [[0.75, 3.0, 23.4], [1.5, 6.0, 46.9]], atol=0.5)
    # A label or config column names them instead; a config's repr is shortened.
    labelled = df.assign(label=["tiled (A)", "tiled (B)"] * 3)
    per = occupancy_cells(plotting.plot_occupancy(labelled, code_commit="x"), "per_cu")
    assert per["tiled (B)"][1024] == "1.5"
    configs = df.assign(config=["TiledConfig(block_m=64, split=False)",
                                "TiledConfig(block_m=32, split=True)"] * 3)
    fig = plotting.plot_occupancy(configs, code_commit="x")
    per = occupancy_cells(fig, "per_cu")
    assert per["tiled on MI355X (256 CUs), block_m=32, split"][1024] == "1.5"
    assert "TiledConfig" not in " ".join(t.get_text() for t in fig.findobj(Text))


def test_save_figure_writes_png_and_svg_only(tmp_path, data_dir):
    rows = analysis.select(analysis.load_measurements(data_dir), batch="single")
    paths = plotting.save_figure(plotting.plot_bandwidth(rows), tmp_path / "f", "bw")
    assert [p.name for p in paths] == ["bw.png", "bw.svg"]
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["bw.png", "bw.svg"]
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in paths[1].read_text()[:2000]


# ------------------------------------------------------------------ analysis helpers
def test_select_keeps_shipped_configs_and_the_timing_asked_for(data_dir):
    df = analysis.load_measurements(data_dir)
    rows = analysis.select(df, batch="single")
    assert (rows.timing == "flushed").all()
    assert set(rows.variant) == {"serial", "chunked", "torch_fp8"}
    assert rows[(rows.variant == "chunked") & (rows.ctx == 32000)].median_us.tolist() == [170.0]
    tuned = analysis.select(df, batch="single", default_config=False, timing=None)
    assert len(tuned) == len(rows) + 4 + 1  # torch_fp8's four graph rows and the tuning row
    graph = tuned[tuned.timing == "graph"]
    assert set(graph.variant) == {"torch_fp8"} and len(graph) == 4  # named as measured
    only = analysis.select(df, batch="single", variants=["serial"])
    assert set(only.variant) == {"serial"}


def test_format_table_holds_each_variants_value_per_format_and_cache():
    df = pd.concat([synthetic(("chunked", "torch_bf16", "torch_fp8"), contexts=(32000, 65536),
                              weight_format=wf, cache_dtype=cache)
                    for wf in ("bf16", "mxfp4") for cache in ("fp8", "bf16")])
    tables = plotting.format_table(df, ctx=32000)
    assert list(tables) == ["bf16", "fp8"]  # the bf16 cache first
    for cache, t in tables.items():
        assert list(t.index) == list(plotting.FORMAT_ORDER)
        assert list(t.columns) == ["chunked", "torch_bf16", "torch_fp8"]  # every torch path
        for wf in ("bf16", "mxfp4"):
            r = df[(df.cache_dtype == cache) & (df.weight_format == wf) & (df.ctx == 32000)
                   & (df.timing == "graph")].set_index("variant")
            np.testing.assert_allclose(t.loc[wf].to_numpy(dtype=float),
                                       r.roof_fraction[t.columns].to_numpy())
        assert t.loc[["fp8_row", "fp8_block"]].isna().all().all()
    us = plotting.format_table(df, ctx=65536, value="median_us", series=["chunked/flushed"])
    r = df[(df.variant == "chunked") & (df.timing == "flushed") & (df.ctx == 65536)
           & (df.cache_dtype == "fp8") & (df.weight_format == "mxfp4")]
    assert us["fp8"].loc["mxfp4", "chunked"] == r.median_us.iloc[0]


def test_peak_fractions_against_each_set_of_roofs():
    df = synthetic(("hopper_ws",), timings=("graph",))
    roofs = {"datasheet": (4.8, {"fp8": 1979.0}), "measured": (4.245, {"fp8": 1006.0}),
             "unknown": (None, {"fp8": 1000.0})}
    fr = analysis.peak_fractions(df, roofs)
    assert list(fr.against) == ["datasheet", "measured"] * 3  # per row, in the roofs' order
    assert list(fr.ctx) == [c for c in df.ctx for _ in range(2)]
    ai = (df.flops / df.min_bytes).to_numpy()
    for against, (bw, mm) in list(roofs.items())[:2]:
        got = fr[fr.against == against]
        np.testing.assert_allclose(got.ai, ai)
        np.testing.assert_allclose(got.fraction, df.achieved_tflops.to_numpy()
                                   / np.minimum(bw * ai, mm["fp8"]))
    # No matrix roof for the rows' dot dtype: no fraction.
    assert analysis.peak_fractions(df.assign(dot_dtype="bf16"), roofs).empty


def test_timed_points_place_a_published_table_by_the_model():
    ref = analysis.reference_table(pd.read_csv(REFERENCE))
    pts = analysis.timed_points("kimi-k3-tp8", ref.ctx, ref.after_us, "fp8", "fp8_row")
    nb = np.array([roofline.min_bytes("kimi-k3-tp8", c, "fp8", "fp8_row") for c in ref.ctx])
    nf = np.array([roofline.flops("kimi-k3-tp8", c) for c in ref.ctx])
    np.testing.assert_allclose(pts.flop_per_byte, nf / nb)
    np.testing.assert_allclose(pts.achieved_tflops, nf / (ref.after_us.to_numpy() * 1e-6) / 1e12)
    assert set(pts.dot_dtype) == {"fp8"}


def test_load_measurements_skips_other_csvs_and_duplicates(data_dir):
    pd.DataFrame({"a": [1]}).to_csv(data_dir / "occupancy.csv", index=False)
    sub = data_dir / "second-run"
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
            # Half written (to the file object or the temp path it is given), then the run
            # dies.
            if hasattr(f, "write"):
                f.write("a\n9\n")
            else:
                Path(f).write_text("a\n9\n")
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
    rows = checks.check_variants("kimi-k3-tp8", (3,), variants=["serial", "chunked"])
    assert [r["variant"] for r in rows] == ["serial", "chunked"]
    assert all(r["correct"] for r in rows)
    assert rows[1]["compared_with"] == "serial" and rows[1]["bit_identical"]
