"""The performance matrix's points and the rows they produce (no GPU: the schema and the
weight draws, not timings)."""

import math

import torch

import mla_kernels as mk
from mla_kernels.designs.hopper_ws import fp8_route
from mla_kernels.lab import bench, matrix
from mla_kernels.lab.measurements import Measurement

CEILINGS = {"copy_tbps": 4.2, "write_tbps": 3.4, "mm_tflops_bf16": 630.0, "mm_tflops_fp8": 1000.0}
PROV = {"device": "x", "torch": "x", "triton": "x", "commit": "x", "date": "x", "compute_units": 132}


def test_every_point_draws_a_known_weight():
    points = matrix.points()
    assert all(p.weight_draw in bench.WEIGHT_DRAWS for p in points.values())
    wide = matrix.select(["kimi/mxfp4/fp8/p1/*/wide"])
    assert sorted(p.contexts[0] for p in wide.values()) == [32000, 65536, 109440]
    assert {(p.weight_format, p.weight_draw) for p in wide.values()} == {("mxfp4", "wide")}
    assert all(p.weight_draw == "" for k, p in points.items() if not k.endswith("/wide"))


def test_fp8_row_target_points_also_time_graph8():
    # Scored on graph rows with graph8 reported beside them: those six points, no other.
    points = matrix.points()
    flagged = {k for k, p in points.items() if p.graph8}
    assert flagged == set(matrix.GRAPH8_POINTS)
    assert {(points[k].shape, points[k].contexts[0], len(points[k].contexts)) for k in flagged} \
        == {("kimi-k3-tp8", c, 1) for c in (4096, 32000, 65536, 109440)} \
        | {("kimi-k3-tp8", 4096, 64), ("deepseek-v3-tp1", 32000, 1)}
    assert all((p.weight_format, p.cache_dtype, p.block_size) == ("fp8_row", "fp8", 1)
               for k, p in points.items() if k in flagged)
    assert matrix.point("kimi-k3-tp8", (8,), "fp8_row", "fp8", 1, ["auto"]).graph8 is False


def test_weight_draws_put_mxfp4_items_on_the_routes_they_name(seed):
    # The default draw: every 128-row item on hopper_ws's e4m3 route; "wide": none.
    default = mk.build_inputs("kimi-k3-tp8", [4], weight_format="mxfp4", seed=seed)
    wide = mk.build_inputs("kimi-k3-tp8", [4], weight_format="mxfp4", seed=seed,
                           **bench.WEIGHT_DRAWS["wide"])
    assert bool(fp8_route(default.kv_proj_scale).all())
    assert not bool(fp8_route(wide.kv_proj_scale).any())
    codes = wide.kv_proj_scale.int()
    assert bool((codes.amin(1) == 127 - 8).all() and (codes.amax(1) == 127 + 4).all())
    # Any other format ignores the MXFP4 options.
    fp8 = mk.build_inputs("kimi-k3-tp8", [4], weight_format="fp8_row", seed=seed,
                          **bench.WEIGHT_DRAWS["wide"])
    assert fp8.kv_proj_weight.dtype == torch.float8_e4m3fn


def test_rows_carry_the_draw_and_the_e4m3_share():
    pt = matrix.point("kimi-k3-tp8", (32000,), "mxfp4", "fp8", 1, ("hopper_ws",),
                      weight_draw="wide")
    row = bench.measurement_row(PROV, pt, "hopper_ws", "graph", 400.0, "bf16", CEILINGS, 1e-3,
                                True, design="hopper_ws", fp8_route_share=0.0)
    assert (row.weight_draw, row.fp8_route_share) == ("wide", 0.0)
    assert "weight_draw" in Measurement.KEY
    other = bench.measurement_row(PROV, matrix.point("kimi-k3-tp8", (32000,), "fp8_row", "fp8",
                                                     1, ()),
                                  "tiled", "graph", 200.0, "fp8", CEILINGS, 1e-3, True)
    assert other.weight_draw == "" and math.isnan(other.fp8_route_share)


def test_figures_leave_other_weight_draws_out():
    # A matrix run holds MXFP4 at 32000 tokens twice (the default weight and "wide"): the
    # figures compare designs on the default one unless asked.
    import pandas as pd

    from mla_kernels.review import analysis

    rows = pd.DataFrame([
        {"model": "kimi-k3-tp8", "weight_format": "mxfp4", "cache_dtype": "fp8", "block_size": 1,
         "contexts": "32000", "batch": 1, "ctx": 32000, "variant": "hopper_ws",
         "timing": "graph", "median_us": us, "config": float("nan"), "weight_draw": draw}
        for us, draw in ((170.0, float("nan")), (435.0, "wide"))])
    kept = analysis.select(rows, timing=None)
    assert kept["median_us"].tolist() == [170.0]
    assert len(analysis.select(rows, timing=None, default_weight=False)) == 2
