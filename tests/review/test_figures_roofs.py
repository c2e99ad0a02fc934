"""What the roofline, bandwidth, sweep and occupancy figures draw for a design review: the
tensor cores' own roof (or a note that the run did not measure it), every series asked for
(or a note naming those left out), token counts written exactly, reference lines in colours
no design uses, labels that do not print over each other, and footers naming the data's
run, commit, torch and triton."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from mla_kernels.lab import roofline  # noqa: E402
from mla_kernels.review import plotting  # noqa: E402
from mla_kernels.review.plotting import style  # noqa: E402

ASKED = ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto", "torch_bf16",
         "torch_fp8")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


def rows(variants=ASKED, contexts=(4096, 32000, 65536, 109440), *, tc=None, clock=None,
         config="") -> pd.DataFrame:
    """Graph-timed rows in the measurement schema; ``tc``: {dot: tensor-core TFLOP/s} for
    the tc columns (absent without it)."""
    mm, copy = {"fp8": 1030.0, "bf16": 630.0}, 4.2
    out = []
    for i, v in enumerate(variants):
        for c in contexts:
            nb = roofline.min_bytes("kimi-k3-tp8", c, "fp8", "fp8_row")
            nf = roofline.flops("kimi-k3-tp8", c)
            dt = "bf16" if v == "torch_bf16" else "fp8"
            byte_floor = nb / copy / 1e6
            floor = max(byte_floor, nf / mm[dt] / 1e6)
            us = floor * (1.1 + 0.7 * i) * (1 + 1000 / c)
            r = {"device": "H200", "compute_units": 132, "torch": "2.11.0+cu130",
                 "triton": "3.6.0", "commit": "abc123def456", "date": "2026-12-01T10:00:00Z",
                 "model": "kimi-k3-tp8", "heads": 12, "weight_format": "fp8_row",
                 "cache_dtype": "fp8", "block_size": 1, "contexts": str(c), "batch": 1,
                 "ctx": c, "variant": v, "timing": "graph", "median_us": us, "min_bytes": nb,
                 "flops": nf, "dot_dtype": dt, "copy_tbps": copy, "write_tbps": 4.6,
                 "mm_tflops": mm[dt], "byte_floor_us": byte_floor, "floor_us": floor,
                 "roof_fraction": floor / us, "achieved_tbps": nb / us / 1e6,
                 "achieved_tflops": nf / us / 1e6,
                 "design": "hopper_ws" if v == "auto" else ("" if v.startswith("torch") else v),
                 "config": config if v == "auto" else ""}
            if tc is not None:
                r["tc_tflops"] = tc[dt] * (1 + 0.001 * (c % 7))  # a spread for the median
                r["sm_clock_mhz"] = clock if clock is not None else np.nan
                r["tc_floor_us"] = max(byte_floor, nf / r["tc_tflops"] / 1e6)
            out.append(r)
    return pd.DataFrame(out)


def gids(ax) -> list[str]:
    return [ln.get_gid() or "" for ln in ax.get_lines()]


def by_gid(ax, gid: str):
    found = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, gids(ax)
    return found[0]


def texts(fig, gid: str) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_gid() == gid]


def footer_and_note(fig) -> tuple[str, str | None]:
    (foot,) = [t.get_text() for t in texts(fig, "footer")]
    notes = [t.get_text() for t in texts(fig, "note")]
    assert len(notes) <= 1
    return foot, (notes[0] if notes else None)


# ------------------------------------------------------------------ roofline
def test_roofline_draws_the_tensor_core_roof_from_the_rows():
    df = rows(tc={"fp8": 1620.0, "bf16": 840.0}, clock=1755.0)
    fig = plotting.plot_roofline(df)
    ax, ax_z, ax_f, ax_t = fig.axes[:4]
    shown = df[df.variant != "torch_bf16"]  # the default set: torch_fp8 is the faster path
    want = shown[shown.dot_dtype == "fp8"].tc_tflops.median()
    np.testing.assert_allclose(by_gid(ax, "roof/tc/fp8").get_ydata(), want)
    # In the zoom the tensor-core roof is still on the copy bandwidth (its ridge is past the
    # band at these rates), and its label says so.
    (z,) = [t.get_text() for t in ax_z.texts if t.get_gid() == "label/roof/tc/fp8"]
    assert z == "tensor cores fp8 (bandwidth-bound here)"
    assert by_gid(ax, "roof/tc/fp8").get_label() == (
        f"tensor cores, fp8, {want:.0f} TFLOP/s at 1755 MHz")
    # The three roofs, each its own swatch: no two (colour, line style) alike.
    roofs = [by_gid(ax, g) for g in ("roof/measured/bandwidth", "roof/measured/fp8",
                                     "roof/tc/fp8", "roof/datasheet/bandwidth",
                                     "roof/datasheet/fp8")]
    swatches = {(ln.get_color(), str(ln.get_linestyle())) for ln in roofs}
    assert len(swatches) == len(roofs)
    assert by_gid(ax, "ridge/tc/fp8").get_xdata()[0] == pytest.approx(want / 4.2)
    assert not texts(fig, "note/tc")
    # Both floors' fractions, each against its own floor.
    r = df[df.variant == "hopper_ws"].sort_values("ctx")
    np.testing.assert_allclose(by_gid(ax_f, "hopper_ws/graph").get_ydata(), r.roof_fraction)
    np.testing.assert_allclose(by_gid(ax_t, "hopper_ws/graph").get_ydata(),
                               r.tc_floor_us / r.median_us)
    assert "cuBLAS" in ax_f.get_title(loc="left") and "roof_fraction" in ax_f.get_title(loc="left")
    assert "tensor-core" in ax_t.get_title(loc="left")


@pytest.mark.parametrize("how", ["absent", "nan"])
def test_roofline_says_when_the_tensor_core_rate_was_not_measured(how):
    df = rows()
    if how == "nan":
        df = df.assign(tc_tflops=np.nan, tc_floor_us=np.nan, sm_clock_mhz=np.nan)
    fig = plotting.plot_roofline(df)
    ax, _, ax_f, ax_t = fig.axes[:4]
    assert not [g for g in gids(ax) if g.startswith(("roof/tc", "ridge/tc"))]
    notes = [t.get_text() for t in texts(fig, "note/tc")]
    assert notes and set(notes) == {"tensor-core rate not measured in this run"}
    assert [g for g in gids(ax_t) if "/" in g] == []  # no fractions against a missing floor
    by_gid(ax_f, "hopper_ws/graph")  # the cuBLAS floor's fractions still drawn


def test_roofline_clock_missing_is_said():
    fig = plotting.plot_roofline(rows(tc={"fp8": 1620.0, "bf16": 840.0}))
    assert by_gid(fig.axes[0], "roof/tc/fp8").get_label().endswith("(SM clock not recorded)")


def test_roofline_zoom_names_every_series_apart():
    fig = plotting.plot_roofline(rows(tc={"fp8": 1620.0, "bf16": 840.0}, clock=1755.0))
    ax_z = fig.axes[1]
    labels = {t.get_gid(): t for t in ax_z.texts if (t.get_gid() or "").startswith("label/")}
    for v in ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto", "torch_fp8"):
        assert f"label/{v}/graph" in labels
    assert labels["label/auto/graph"].get_text() == "auto (ran hopper_ws)"
    # Labels a text line apart (in log10 y), all within the axes' height.
    y0, y1 = ax_z.get_ylim()
    ys = sorted(np.log10(t.xyann[1]) for t in labels.values())
    assert np.min(np.diff(ys)) >= 0.03 * np.log10(y1 / y0) - 1e-9
    assert np.log10(y0) <= ys[0] and ys[-1] <= np.log10(y1)
    # The zoom spans the band, not the ridges.
    a = rows().eval("flops / min_bytes")
    lo, hi = ax_z.get_xlim()
    assert lo < a.min() and a.max() < hi < a.max() * 1.2


def test_auto_says_what_it_ran_with_its_config_briefly():
    cfg = "HopperWSConfig(ring_depth=4, programs=None, mma_groups=1, latent_in_registers=True)"
    df = rows(config=cfg)
    for fig in (plotting.plot_roofline(df), plotting.plot_context_sweep(df),
                plotting.plot_bandwidth(df)):
        (auto,) = {ln.get_label() for ln in fig.axes[0].get_lines()
                   if (ln.get_gid() or "") == "auto/graph"}
        assert auto == ("auto (ran hopper_ws with ring_depth=4, mma_groups=1, "
                        "latent_in_registers), device time")
    assert style.short_config("X(a=None, b=(1, 2), c=False)") == "b=(1, 2)"
    assert style.short_config("cfg 32") == "cfg 32" and style.short_config(np.nan) == ""


# ------------------------------------------------------------------ sweep
def test_sweep_draws_every_design_asked_and_names_what_it_leaves_out():
    df = rows()
    fig = plotting.plot_context_sweep(df)
    drawn = {g.split("/")[0] for g in gids(fig.axes[0]) if "/" in g}
    assert {"serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto", "torch_fp8"} <= drawn
    _, note = footer_and_note(fig)
    assert note == "not drawn: torch_bf16 (slower than torch_fp8)"
    # With a limit, what it drops is named, and why.
    fig = plotting.plot_context_sweep(df, limit=5)
    drawn = {g.split("/")[0] for g in gids(fig.axes[0]) if "/" in g}
    _, note = footer_and_note(fig)
    gone = set(ASKED) - drawn
    assert gone and all(f"{v} (" in note for v in gone)
    assert "auto (over the limit of 5 lines)" in note
    # Everything drawn: no note.
    fig = plotting.plot_context_sweep(df, series="all")
    assert footer_and_note(fig)[1] is None


def test_roofline_and_bandwidth_name_the_series_they_leave_out():
    for fig in (plotting.plot_roofline(rows()), plotting.plot_bandwidth(rows())):
        assert footer_and_note(fig)[1] == "not drawn: torch_bf16 (slower than torch_fp8)"


# ------------------------------------------------------------------ token counts, footers
def test_token_counts_are_written_exactly_everywhere():
    assert [plotting.ctx_label(c) for c in (1024, 32000, 32768, 109440, 131072)] == [
        "1024", "32000", "32768", "109440", "131072"]
    df = rows(contexts=(1024, 32000, 32768, 109440))
    for fig in (plotting.plot_context_sweep(df), plotting.plot_bandwidth(df),
                plotting.plot_roofline(df)):
        for ax in fig.axes:
            if ax.get_xscale() == "log" and "context" in ax.get_xlabel():
                got = [t.get_text().strip() for t in ax.get_xticklabels()]
                assert got == ["1024", "32000", "32768", "109440"]
                assert "k = 1024" not in ax.get_xlabel()
        words = " ".join(t.get_text() for t in fig.findobj(Text))
        assert "31.2k" not in words and "107k" not in words


def test_footers_name_device_run_commit_date_torch_and_triton():
    df = rows()
    for fig in (plotting.plot_roofline(df), plotting.plot_bandwidth(df),
                plotting.plot_context_sweep(df)):
        foot, _ = footer_and_note(fig)
        assert foot.startswith("data: H200, run 2026-12-01-abc123def456 (commit abc123def456, ")
        assert "2026-12-01" in foot and "torch 2.11.0+cu130" in foot and "triton 3.6.0" in foot
    # Two runs: both named.
    two = pd.concat([df, df.assign(commit="fedcba987654", date="2026-12-02T00:00:00Z",
                                   triton="3.7.0")])
    foot, _ = footer_and_note(plotting.plot_bandwidth(two))
    assert "runs 2026-12-01-abc123def456, 2026-12-02-fedcba987654" in foot
    assert "triton 3.6.0, 3.7.0" in foot


# ------------------------------------------------------------------ reference lines
def test_reference_lines_use_colours_no_design_uses():
    used = (list(style.DESIGN_COLORS.values()) + list(style.EXTRA_COLORS)
            + list(style.TORCH_COLORS.values()) + list(style.TORCH_EXTRA) + [style.REFERENCE_COLOR])

    def lab(c):  # sRGB -> CIE L*a*b* (D65)
        rgb = np.array(to_rgb(c))
        rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                        [0.0193, 0.1192, 0.9505]]) @ rgb / np.array([0.95047, 1.0, 1.08883])
        f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])

    def far(a, b):  # CIE76 distance: clearly another colour, not a shade of it
        return np.linalg.norm(lab(a) - lab(b)) > 25

    refs = style.REFERENCE_LINE_COLORS
    assert all(far(r, u) for r in refs for u in used)
    assert all(far(a, b) for i, a in enumerate(refs) for b in refs[i + 1:])
    fig = plotting.plot_roofline(rows(tc={"fp8": 1620.0, "bf16": 840.0}, clock=1755.0))
    for ln in fig.axes[0].get_lines():
        if (ln.get_gid() or "").startswith(("roof/", "ridge/")):
            assert ln.get_color() in refs and ln.get_marker() in ("None", None, "")


def test_bandwidth_labels_do_not_overlap_and_stay_inside():
    df = rows().assign(write_tbps=4.63)
    fig = plotting.plot_bandwidth(df, peak_tbps=4.80)
    ax = fig.axes[0]
    fig.canvas.draw()
    labels = [t for t in ax.texts if (t.get_gid() or "").startswith("label/")]
    assert {t.get_gid() for t in labels} >= {"label/peak", "label/write", "label/copy",
                                             "label/ceiling/fp8"}
    boxes = [t.get_window_extent() for t in labels]
    inside = ax.get_window_extent()
    for i, b in enumerate(boxes):
        assert inside.x0 <= b.x0 and b.x1 <= inside.x1 and b.y1 <= inside.y1, labels[i].get_text()
        for c in boxes[i + 1:]:
            assert not b.overlaps(c)
