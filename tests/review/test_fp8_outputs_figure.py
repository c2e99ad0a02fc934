"""The formats figure's FP8-output panels: drawn from synthetic rows with FP8 outputs beside
bf16 ones (fixtures/measurements_fp8_outputs.csv, not measured), each bar's ratio and exact
share written, the target line labelled; absent, and the figure unchanged, without them."""

import io
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from mla_kernels.lab.repo_files import REPO_ROOT  # noqa: E402
from mla_kernels.review import analysis, plotting  # noqa: E402
from mla_kernels.review.plotting import formats  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "measurements_fp8_outputs.csv"
FP8 = "float8_e4m3fn"
# The committed run the figure must redraw byte for byte (it has no FP8-output rows).
COMMITTED = REPO_ROOT / "data" / "h200" / "2026-12-02-240294eda7a8"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


def texts(fig, prefix: str) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for t in fig.findobj(Text)
            if (t.get_gid() or "").startswith(prefix)}


def draw(df: pd.DataFrame, ctx: int = 32000, **kw):
    """As notebook 04 draws: the heatmaps' rows at ctx, every context's for the FP8 panels."""
    rows = analysis.select(df, timing=None, batch="single")
    rows = rows[rows["ctx"] == ctx]
    outputs = analysis.select(df, timing=None, batch="single", out_dtype=None)
    return plotting.plot_formats(rows, ctx=ctx, outputs=outputs, **kw)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def test_the_panels_set_fp8_outputs_against_bf16_outputs():
    df = pd.read_csv(FIXTURE)
    fig = draw(df)
    panels = {ax.get_gid(): ax for ax in fig.axes if (ax.get_gid() or "").startswith("fp8out/")}
    assert list(panels) == ["fp8out/fp8/32000", "fp8out/fp8/109440", "fp8out/bf16/32000"]
    bars = texts(fig, "fp8out/")
    for (cache, ctx, fmt, v), g in df[df["out_dtype"] == FP8].groupby(
            ["cache_dtype", "ctx", "weight_format", "variant"]):
        twin = df[(df["out_dtype"] == "bfloat16") & (df["cache_dtype"] == cache)
                  & (df["ctx"] == ctx) & (df["weight_format"] == fmt) & (df["variant"] == v)]
        ratio = g["median_us"].iloc[0] / twin["median_us"].iloc[0]
        share, steps = g["fp8_exact_share"].iloc[0], g["fp8_max_steps"].iloc[0]
        assert bars[f"fp8out/{cache}/{ctx}/{fmt}/{v}"] == (
            f"{ratio:.2f}x · {100 * share:.1f}% exact · ≤{steps:.0f} steps")
    # The torch path beside the targets, the portable reference at 32000 only.
    assert "fp8out/fp8/32000/fp8_row/torch_fp8" in bars and "fp8out/fp8/32000/mxfp4/tiled" in bars
    assert "fp8out/fp8/109440/mxfp4/tiled" not in bars
    for gid, ax in panels.items():
        target = [ln for ln in ax.get_lines() if ln.get_gid() == "fp8out/target"]
        assert len(target) == 1 and set(target[0].get_ydata()) == {formats.FP8_OUT_TARGET}
        assert bars[f"{gid}/target"] == f"target\n{formats.FP8_OUT_TARGET}"
        assert ax.get_xlabel() == "weight format"
        assert [t.get_text() for t in ax.get_xticklabels()] == list(plotting.FORMAT_ORDER)
    assert "ratio" in panels["fp8out/fp8/32000"].get_ylabel()
    footer = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "footer"]
    assert len(footer) == 1 and "fixture" in footer[0]
    note = next(t.get_text() for t in fig.findobj(Text) if t.get_gid() == "notes")
    assert "FP8 outputs: time per call with e4m3 outputs" in note and "0.85" in note
    assert "FP8 outputs against bf16 outputs" in fig._suptitle.get_text()


def test_the_heatmaps_draw_bf16_outputs_only():
    df = pd.read_csv(FIXTURE)
    fig = draw(df)
    bf16 = df[(df["out_dtype"] == "bfloat16") & (df["cache_dtype"] == "fp8")
              & (df["ctx"] == 32000) & (df["variant"] == "auto")].set_index("weight_format")
    cell = texts(fig, "ratio/fp8/mxfp4/auto")["ratio/fp8/mxfp4/auto"]
    us = bf16["median_us"]
    assert cell == f"{us['mxfp4'] / us['fp8_row']:.2f}x\n{us['mxfp4']:.0f} µs"
    # Handed every row, the figure still keeps the heatmaps to bf16 outputs.
    all_rows = plotting.plot_formats(df, ctx=32000)
    assert texts(all_rows, "ratio/fp8/mxfp4/auto")["ratio/fp8/mxfp4/auto"] == cell
    assert any((ax.get_gid() or "").startswith("fp8out/") for ax in all_rows.axes)


def test_a_wrong_or_unpaired_bar_says_so():
    df = pd.read_csv(FIXTURE)
    fp8 = (df["out_dtype"] == FP8) & (df["variant"] == "auto") & (df["ctx"] == 109440)
    df.loc[fp8 & (df["weight_format"] == "mxfp4"), "correct"] = False
    # No bf16-output twin for bf16 weights at 109440: no ratio.
    df = df[~((df["out_dtype"] == "bfloat16") & (df["ctx"] == 109440)
              & (df["weight_format"] == "bf16"))]
    cells = plotting.fp8_output_cells(df)
    bad = cells[(cells["ctx"] == 109440) & (cells["variant"] == "auto")].set_index(
        "weight_format")
    assert not bad.loc["mxfp4", "correct"] and np.isnan(bad.loc["bf16", "time_ratio"])
    bars = texts(draw(df), "fp8out/fp8/109440/")
    assert bars["fp8out/fp8/109440/mxfp4/auto"].endswith(" · WRONG")
    assert bars["fp8out/fp8/109440/bf16/auto"].startswith("no bf16 row · ")


def test_without_fp8_output_rows_the_figure_is_as_before():
    df = pd.read_csv(FIXTURE)
    bf16 = df[df["out_dtype"] == "bfloat16"]
    old = bf16.drop(columns=["out_dtype", "fp8_exact_share", "fp8_max_steps"])
    assert plotting.fp8_output_cells(old).empty and plotting.fp8_output_cells(bf16).empty
    before = plotting.plot_formats(old[old["ctx"] == 32000], ctx=32000)
    assert not any((ax.get_gid() or "").startswith("fp8out/") for ax in before.axes)
    assert png(before) == png(draw(bf16)) == png(draw(old))


def test_the_committed_run_redraws_as_it_did():
    # Notebook 04's replot of a run with no FP8-output rows: the panel absent, the PNG the
    # same bytes with the outputs handed over as without.
    names = ["formats", "perf_matrix"]
    data = analysis.load_measurements(COMMITTED, names)
    rows = analysis.require_rows(data, data_dir=COMMITTED, names=names, shape="kimi-k3-tp8",
                                 block_size=1, batch="single", timing=None, device="auto",
                                 default_config=False, default_weight=False,
                                 require={"ctx": ("ctx", [32000])})
    outputs = analysis.select(data, shape="kimi-k3-tp8", block_size=1, batch="single",
                              timing=None, device="auto", default_config=False, out_dtype=None)
    assert plotting.fp8_output_cells(outputs).empty
    with_outputs = plotting.plot_formats(rows, ctx=32000, outputs=outputs)
    assert not any((ax.get_gid() or "").startswith("fp8out/") for ax in with_outputs.axes)
    assert png(with_outputs) == png(plotting.plot_formats(rows, ctx=32000))
