"""The weight-format figure and tables: time against fp8 per-row first, written in every
cell; the fraction of the floor scored by the dot that ran; every weight draw, series and
timing asked for drawn or named."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from mla_kernels.review import plotting  # noqa: E402
from mla_kernels.review.plotting import formats, tables  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


# A time per (variant, weight format, cache), µs; the "wide" MXFP4 draw on the fp8 cache.
TIMES = {
    "chunked": {"bf16": 900.0, "fp8_row": 500.0, "fp8_block": 560.0, "mxfp4": 820.0},
    "hopper_ws": {"bf16": 180.0, "fp8_row": 105.0, "fp8_block": 110.0, "mxfp4": 172.0,
                  "mxfp4/wide": 430.0},
    "auto": {"bf16": 181.0, "fp8_row": 102.0, "fp8_block": 109.0, "mxfp4": 171.0,
             "mxfp4/wide": 432.0},
    "torch_bf16": {"bf16": 620.0, "fp8_row": 625.0, "fp8_block": 622.0, "mxfp4": 617.0},
    "torch_fp8": {"fp8_row": 470.0},
}


def frame(times=TIMES, caches=("bf16", "fp8"), timings=("graph",), *, tc=False,
          route_dot="bf16", ctx=32000) -> pd.DataFrame:
    """Rows in the measurement schema: a floor per dot, MXFP4 on hopper_ws/auto with its fp8
    route share (1 by default, 0 for the wide draw) and the dot the rows name."""
    rows = []
    for cache in caches:
        for v, per in times.items():
            for key, us in per.items():
                wf, _, draw = key.partition("/")
                if cache != "fp8" and (v == "torch_fp8" or draw):
                    continue
                for j, t in enumerate(timings):
                    us_t = us * (1 + 0.05 * j) * (1.1 if cache == "bf16" else 1.0)
                    fast = v in ("hopper_ws", "auto")
                    share = (float(cache == "fp8" and not draw) if fast and wf == "mxfp4"
                             else np.nan)
                    dot = ("fp8" if cache == "fp8" and wf.startswith("fp8") and v != "torch_bf16"
                           else "bf16")
                    if fast and wf == "mxfp4" and cache == "fp8":
                        dot = route_dot if not draw else "bf16"
                    floor = {"fp8": 97.7, "bf16": 158.5, "fp8+bf16": 120.0}[dot]
                    row = {"device": "H200", "commit": "abc123def456",
                           "date": "2026-12-01T10:00:00Z", "model": "kimi-k3-tp8", "heads": 12,
                           "weight_format": wf, "cache_dtype": cache, "block_size": 1,
                           "contexts": str(ctx), "batch": 1, "ctx": ctx, "variant": v,
                           "timing": t, "median_us": us_t, "dot_dtype": dot, "floor_us": floor,
                           "roof_fraction": floor / us_t,
                           "design": "hopper_ws" if fast else ("" if v.startswith("torch")
                                                               else v),
                           "config": "", "weight_draw": draw, "fp8_route_share": share}
                    if tc:
                        row["tc_floor_us"] = floor * 0.6
                    rows.append(row)
    return pd.DataFrame(rows)


def texts(fig, prefix: str) -> dict[str, str]:
    return {t.get_gid(): t.get_text() for t in fig.findobj(Text)
            if (t.get_gid() or "").startswith(prefix)}


def the(fig, gid: str) -> str:
    found = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == gid]
    assert len(found) == 1, (gid, sorted(texts(fig, gid.split("/")[0])))
    return found[0]


def notes(fig) -> str:
    return the(fig, "notes")


def test_time_over_fp8_row_is_written_in_every_cell():
    df = frame()
    fig = plotting.plot_formats(df, ctx=32000)
    for v in ("hopper_ws", "auto", "chunked", "torch_bf16"):
        for cache in ("bf16", "fp8"):
            r = df[(df.variant == v) & (df.cache_dtype == cache) & (df.weight_draw == "")]
            us = r.set_index("weight_format").median_us
            got = the(fig, f"ratio/{cache}/mxfp4/{v}")
            assert got == f"{us['mxfp4'] / us['fp8_row']:.2f}x\n{us['mxfp4']:.0f} µs"
            assert the(fig, f"ratio/{cache}/fp8_row/{v}").startswith("1.00x\n")
    # The lead: MXFP4 over an fp8 cache against fp8 per row, per design that runs there.
    assert the(fig, "ratio/fp8/mxfp4/auto").startswith(f"{171.0 / 102.0:.2f}x")
    # The colour is the ratio too (log scale), one image per cache.
    ims = {im.get_gid(): im for ax in fig.axes for im in ax.images}
    assert {"ratio/bf16", "ratio/fp8", "heatmap/bf16", "heatmap/fp8"} <= set(ims)
    t = tables.format_table(df, ctx=32000, value="time_ratio")["fp8"]
    j = list(t.columns).index("auto")
    i = list(t.index).index("mxfp4")
    assert ims["ratio/fp8"].get_array()[i, j] == pytest.approx(np.log2(171.0 / 102.0))
    # torch_fp8 has no row on the bf16 cache: n/a there, its time where it ran.
    assert the(fig, "ratio/bf16/fp8_row/torch_fp8") == "n/a"
    assert the(fig, "ratio/fp8/fp8_row/torch_fp8") == "1.00x\n470 µs"
    # Time leads: the time panels come before the fraction panels.
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    assert "time per call" in titles[0] and "fraction" in titles[-1]


def test_the_wide_draw_is_its_own_row_with_its_route_share():
    df = frame()
    fig = plotting.plot_formats(df, ctx=32000)
    ax = next(ax for ax in fig.axes if any(im.get_gid() == "heatmap/fp8" for im in ax.images))
    assert "mxfp4\n(wide scales)" in [t.get_text() for t in ax.get_yticklabels()]
    wide = "mxfp4 (wide scales)"
    assert the(fig, f"ratio/fp8/{wide}/hopper_ws").startswith(f"{430.0 / 105.0:.2f}x")
    cell = the(fig, f"cell/fp8/{wide}/hopper_ws").split("\n")
    assert cell == [f"{158.5 / 430.0:.2f}", "bf16 floor", "fp8 route 0.00"]
    # The default draw keeps its own row, not a median with the wide one.
    assert the(fig, "cell/fp8/mxfp4/hopper_ws").split("\n")[0] == f"{158.5 / 172.0:.2f}"
    assert the(fig, "cell/fp8/mxfp4/hopper_ws").endswith("fp8 route 1.00")
    assert the(fig, f"cell/bf16/{wide}/hopper_ws") == "n/a"  # not drawn on a bf16 cache
    assert "weight_draw 'wide'" in notes(fig)
    rows = tables.format_table(df, ctx=32000)["fp8"].index
    assert list(rows) == [*plotting.FORMAT_ORDER, wide]


def test_each_fraction_names_the_floor_its_rows_say():
    # Older rows: MXFP4 on the fp8 route names a bf16 dot; label what the column says.
    fig = plotting.plot_formats(frame(), ctx=32000)
    assert the(fig, "cell/fp8/mxfp4/auto").split("\n")[1] == "bf16 floor"
    assert the(fig, "cell/fp8/fp8_row/auto").split("\n")[1] == "fp8 floor"
    assert "bf16 floor, as those rows say" in notes(fig)
    # Newer rows: route-weighted.
    fig = plotting.plot_formats(frame(route_dot="fp8+bf16"), ctx=32000)
    cell = the(fig, "cell/fp8/mxfp4/hopper_ws").split("\n")
    assert cell == [f"{120.0 / 172.0:.2f}", "route-weighted floor", "fp8 route 1.00"]
    assert "route-weighted floor (dot fp8+bf16)" in notes(fig)
    assert "as those rows say" not in notes(fig)
    # No dot_dtype column: said so, still drawn.
    fig = plotting.plot_formats(frame().drop(columns=["dot_dtype"]), ctx=32000)
    assert the(fig, "cell/fp8/mxfp4/auto").split("\n")[1] == "floor (dot not recorded)"


def test_the_tensor_core_floor_where_the_rows_have_it():
    fig = plotting.plot_formats(frame(), ctx=32000)  # no tc_floor_us column
    assert "tc_floor_us" in notes(fig) and "not in these rows" in notes(fig)
    assert "TC floor" not in the(fig, "cell/fp8/fp8_row/hopper_ws")
    df = frame(tc=True)
    df.loc[df.variant == "chunked", "tc_floor_us"] = np.nan  # not measured there
    fig = plotting.plot_formats(df, ctx=32000)
    assert the(fig, "cell/fp8/fp8_row/hopper_ws").split("\n")[2] == (
        f"{97.7 * 0.6 / 105.0:.2f} of TC floor")
    assert "TC floor" not in the(fig, "cell/fp8/fp8_row/chunked")
    assert "not in these rows" not in notes(fig)


def test_series_all_draws_a_design_in_each_of_its_timings():
    df = frame(timings=("graph", "flushed"))
    t = plotting.format_table(df, ctx=32000, series="all")["fp8"]
    assert "hopper_ws/graph" in t.columns and "hopper_ws/flushed" in t.columns
    assert t.columns.is_unique
    fig = plotting.plot_formats(df, ctx=32000, series="all")
    g, f = the(fig, "ratio/fp8/mxfp4/hopper_ws/graph"), the(fig, "ratio/fp8/mxfp4/hopper_ws/flushed")
    assert g.split("\n")[1] == "172 µs" and f.split("\n")[1] == f"{172.0 * 1.05:.0f} µs"
    ax = next(ax for ax in fig.axes if any(im.get_gid() == "ratio/fp8" for im in ax.images))
    labels = [x.get_text() for x in ax.get_xticklabels()]
    assert "hopper_ws\ndevice time" in labels and "hopper_ws\nplain call" in labels


def test_every_series_asked_for_is_drawn_or_named():
    df = frame()
    asked = ["serial", "chunked", "hopper_ws", "auto", "torch_bf16", "torch_fp8"]
    fig = plotting.plot_formats(df, ctx=32000, variants=asked)
    drawn = {g.rsplit("/", 1)[1] for g in texts(fig, "ratio/fp8/bf16/")}
    assert drawn == set(asked) - {"serial"}
    assert "not drawn: serial (no rows at 32000 tokens" in notes(fig)
    # Over the default limit: the series left out are named.
    fig = plotting.plot_formats(df, ctx=32000, limit=4)
    assert "left out over the limit of 4 series" in notes(fig)


def test_auto_says_what_it_ran():
    df = frame()
    fig = plotting.plot_formats(df, ctx=32000)
    ax = next(ax for ax in fig.axes if any(im.get_gid() == "ratio/fp8" for im in ax.images))
    assert "auto\n(ran hopper_ws)" in [x.get_text() for x in ax.get_xticklabels()]
    assert "auto ran hopper_ws (design column), its default config" in notes(fig)
    # A resolved config on auto's rows is kept (it is not a tuning sweep) and named.
    df.loc[df.variant == "auto", "config"] = "HopperWSConfig(mma_groups=2)"
    df = pd.concat([df, df[df.variant == "chunked"].assign(config="ChunkedConfig(x=1)",
                                                           median_us=1.0)])
    fig = plotting.plot_formats(df, ctx=32000)
    assert "config HopperWSConfig(mma_groups=2)" in notes(fig)
    assert the(fig, "ratio/fp8/mxfp4/auto").startswith(f"{171.0 / 102.0:.2f}x")
    assert the(fig, "ratio/fp8/bf16/chunked").endswith("\n900 µs")  # the sweep row left out


def test_one_cache_and_one_format_still_draw():
    df = frame({"hopper_ws": {"fp8_row": 105.0}}, caches=("fp8",))
    fig = plotting.plot_formats(df, ctx=32000)
    assert the(fig, "ratio/fp8/fp8_row/hopper_ws") == "1.00x\n105 µs"
    assert the(fig, "ratio/fp8/mxfp4/hopper_ws") == "n/a"
    assert formats.floor_name("fp8/bf16") == "fp8 floor / bf16 floor"
    # No rows at that context: a panel of "n/a", no error.
    fig = plotting.plot_formats(df, ctx=4096)
    assert set(texts(fig, "ratio/").values()) == {"n/a"}
