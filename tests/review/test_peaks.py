"""Each device against its own peak: achieved TB/s bars, each carrying its fraction of its
device's datasheet bandwidth (from the registry), the datasheet line written on each panel,
the ceiling at this op's arithmetic intensity, and measured-roof fractions kept apart."""

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from mla_kernels.core.devices import get_device  # noqa: E402
from mla_kernels.lab import roofline  # noqa: E402
from mla_kernels.review import analysis, plotting  # noqa: E402

REF = Path(__file__).parents[2] / "data" / "reference"
COPY, MM = 4.2, {"fp8": 1000.0, "bf16": 640.0}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


def ours(variants=("chunked", "hopper_ws", "auto", "torch_fp8"), contexts=(4096, 32000, 109440)):
    rows = []
    for i, v in enumerate(variants):
        for c in contexts:
            nb = roofline.min_bytes("kimi-k3-tp8", c, "fp8", "fp8_row")
            nf = roofline.flops("kimi-k3-tp8", c)
            us = nf / MM["fp8"] / 1e6 * (1.1 + 0.7 * i)
            rows.append({"device": "H200", "commit": "abc123def456",
                         "date": "2026-12-01T10:00:00Z", "model": "kimi-k3-tp8", "heads": 12,
                         "weight_format": "fp8_row", "cache_dtype": "fp8", "block_size": 1,
                         "contexts": str(c), "batch": 1, "ctx": c, "variant": v,
                         "timing": "graph", "median_us": us, "min_bytes": nb, "flops": nf,
                         "dot_dtype": "fp8", "copy_tbps": COPY, "mm_tflops": MM["fp8"],
                         "achieved_tflops": nf / us / 1e6, "achieved_tbps": nb / us / 1e6,
                         "roof_fraction": 0.5, "config": np.nan,
                         "design": "hopper_ws" if v == "auto" else v})
    return pd.DataFrame(rows)


def tables():
    return (analysis.load_reference(REF / "seed_mi355x.csv"),
            analysis.load_reference(REF / "seed_mi355x_merged.csv"))


def bar(fig, gid: str, ctx_index: int):
    found = [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]
    return found[ctx_index]


def text(fig, gid: str) -> str:
    found = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == gid]
    assert len(found) == 1, gid
    return found[0]


def test_bars_are_achieved_tbps_with_their_datasheet_fraction():
    df = ours()
    first, merged = tables()
    fig = plotting.plot_peaks(df, first, merged)
    h200, mi355 = get_device("H200"), get_device("MI355X")
    for k, r in enumerate(df[df.variant == "hopper_ws"].sort_values("ctx").to_dict("records")):
        tbps = r["min_bytes"] / r["median_us"] / 1e6
        assert bar(fig, "hopper_ws/graph", k).get_height() == pytest.approx(tbps)
        assert text(fig, f"fraction/H200/hopper_ws/graph/{r['ctx']}") == (
            f" {tbps / h200.peak_tbps:.2f}")
    # The public change's tables on the MI355X against its own datasheet bandwidth.
    for rname, t, ctx, us in (("first table", first, "ctx", first.after_ms * 1e3),
                              ("as merged", merged, "ctx_tokens", merged.after_us)):
        for k, (c, u) in enumerate(zip(t[ctx], us, strict=True)):
            nb = roofline.min_bytes("kimi-k3-tp8", int(c), "fp8", "fp8_row")
            tbps = nb / u / 1e6
            assert bar(fig, f"reference/{rname}/after", k).get_height() == pytest.approx(tbps)
            assert text(fig, f"fraction/MI355X/reference/{rname}/after/{int(c)}") == (
                f" {tbps / mi355.peak_tbps:.2f}")
    # Each panel's datasheet bandwidth a line, its value written on the panel.
    ax_h, ax_m = fig.axes[:2]
    for ax, spec in ((ax_h, h200), (ax_m, mi355)):
        peak = [ln for ln in ax.get_lines() if ln.get_gid() == "roof/datasheet/bandwidth"]
        assert len(peak) == 1 and peak[0].get_ydata()[0] == spec.peak_tbps
        assert [t.get_text() for t in ax.texts if t.get_gid() == "peak-label"] == [
            f"{spec.name} datasheet {spec.peak_tbps:.2f} TB/s"]
    # The byte model of the public change's tables is named on its panel.
    assert "fp8 cache, fp8_row weight" in ax_m.get_title(loc="left")


def test_the_ceiling_at_this_intensity_and_measured_fractions_apart():
    df = ours()
    fig = plotting.plot_peaks(df, *tables())
    ax_h, ax_m = fig.axes[:2]
    r = df[df.ctx == 109440].iloc[0]
    ai = r.flops / r.min_bytes
    seg = [ln for ln in ax_h.get_lines() if ln.get_gid() == "ceiling/measured/H200/109440"]
    assert len(seg) == 1 and seg[0].get_ydata()[0] == pytest.approx(min(COPY, MM["fp8"] / ai))
    # No measured roofs for the public change's device; its datasheet ceiling at this AI is
    # its bandwidth (the datasheet matrix roof is above it), so no second line.
    assert not [ln for ln in ax_m.get_lines() if (ln.get_gid() or "").startswith("ceiling/")]
    notes = text(fig, "notes")
    best = max((g for _, g in df[df.ctx == 109440].groupby("variant")),
               key=lambda g: -g.median_us.iloc[0]).iloc[0]
    frac = best.min_bytes / best.median_us / 1e6 / min(COPY, MM["fp8"] / ai)
    assert "Apart, not comparable with the datasheet fractions" in notes
    assert f"109440 {best.variant}, device time {frac:.2f}" in notes
    # Bars carry datasheet fractions only.
    assert f"{frac:.2f}" != text(fig, f"fraction/H200/{best.variant}/graph/109440").strip()


def test_auto_says_what_it_ran_and_missing_roofs_still_draw():
    df = ours()
    fig = plotting.plot_peaks(df, *tables())
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "auto, device time (ran hopper_ws)" in labels
    assert "auto ran hopper_ws" in text(fig, "notes")
    # Rows without measured roofs, no public tables: one panel, the datasheet line.
    fig = plotting.plot_peaks(df.drop(columns=["copy_tbps", "mm_tflops"]))
    assert "no measured roofs" in text(fig, "notes")
    assert [ln.get_gid() for ln in fig.axes[0].get_lines()
            if (ln.get_gid() or "").startswith("roof/")] == ["roof/datasheet/bandwidth"]


def test_bandwidth_fractions():
    df = ours(("hopper_ws",))
    fr = analysis.bandwidth_fractions(df, (4.8, {"fp8": 1979.0}), (COPY, MM))
    ai = (df.flops / df.min_bytes).to_numpy()
    tbps = (df.min_bytes / df.median_us / 1e6).to_numpy()
    np.testing.assert_allclose(fr.achieved_tbps, tbps)
    np.testing.assert_allclose(fr.datasheet_fraction, tbps / 4.8)
    np.testing.assert_allclose(fr.datasheet_ceiling_tbps, np.minimum(4.8, 1979.0 / ai))
    np.testing.assert_allclose(fr.measured_fraction, tbps / np.minimum(COPY, MM["fp8"] / ai))
    assert analysis.bandwidth_fractions(df, (4.8, {}))["measured_ceiling_tbps"].isna().all()
