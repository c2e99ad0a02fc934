"""The performance matrix's points and the rows they produce (no GPU: the schema and the
weight draws, not timings)."""

import math

import torch

import mla_kernels as mk
from mla_kernels.core.problem import check_arguments
from mla_kernels.designs.hopper_ws import fp8_route, row_extras
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
    widest = matrix.select(["kimi/mxfp4/fp8/p1/*/widest"])
    assert [(p.contexts, p.weight_draw) for p in widest.values()] == [((32000,), "widest")]
    assert all(p.weight_draw == "" for k, p in points.items()
               if not k.endswith(("/wide", "/widest")))


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
    # The default draw: every 128-row item on hopper_ws's e4m3 route; "wide": every one on
    # the split route (widened once a call; bf16 widened in the kernel); "widest": bf16.
    from mla_kernels.designs.hopper_ws.config import HopperWSConfig

    default = mk.build_inputs("kimi-k3-tp8", [4], weight_format="mxfp4", seed=seed)
    wide = mk.build_inputs("kimi-k3-tp8", [4], weight_format="mxfp4", seed=seed,
                           **bench.WEIGHT_DRAWS["wide"])
    widest = mk.build_inputs("kimi-k3-tp8", [4], weight_format="mxfp4", seed=seed,
                             **bench.WEIGHT_DRAWS["widest"])
    assert bool(fp8_route(default.kv_proj_scale).all())
    assert not bool(fp8_route(wide.kv_proj_scale).any())
    prob = check_arguments(*wide.args())
    shares = {name: row_extras(prob, inp.args()) for name, inp in
              (("default", default), ("wide", wide), ("widest", widest))}
    assert shares == {"default": {"fp8_route_share": 1.0, "split_route_share": 0.0},
                      "wide": {"fp8_route_share": 0.0, "split_route_share": 1.0},
                      "widest": {"fp8_route_share": 0.0, "split_route_share": 0.0}}
    assert row_extras(prob, wide.args(), HopperWSConfig(mxfp4_widening="kernel")) == {
        "fp8_route_share": 0.0, "split_route_share": 0.0}
    codes = wide.kv_proj_scale.int()
    assert bool((codes.amin(1) == 127 - 8).all() and (codes.amax(1) == 127 + 4).all())
    codes = widest.kv_proj_scale.int()
    assert bool((codes.amin(1) == 127 - 20).all() and (codes.amax(1) == 127 + 4).all())
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


TC = {"tc_tflops_fp8": 1620.0, "tc_clock_mhz_fp8": 1755.0,
      "tc_tflops_bf16": 840.0, "tc_clock_mhz_bf16": 1770.0}


def _mxfp4_row(share, ceilings=CEILINGS, **kw):
    pt = matrix.point("kimi-k3-tp8", (32000,), "mxfp4", "fp8", 1, ("hopper_ws",))
    return bench.measurement_row(PROV, pt, "hopper_ws", "graph", 170.0, "bf16", ceilings,
                                 1e-3, True, design="hopper_ws", fp8_route_share=share, **kw)


def test_rows_are_scored_by_the_dot_that_ran():
    # MXFP4 items on the e4m3 route ran an fp8 dot: its floor is fp8 per-row's within the
    # weight bytes (the matrix floor is the same FLOPs at the same rate).
    fp8_row = bench.measurement_row(PROV, matrix.point("kimi-k3-tp8", (32000,), "fp8_row",
                                                       "fp8", 1, ()),
                                    "hopper_ws", "graph", 100.0, "fp8", CEILINGS, 1e-3, True)
    e4m3 = _mxfp4_row(1.0)
    assert (e4m3.dot_dtype, e4m3.mm_tflops) == ("fp8", CEILINGS["mm_tflops_fp8"])
    assert abs(e4m3.floor_us / fp8_row.floor_us - 1) < 0.05
    wide = _mxfp4_row(0.0)
    assert (wide.dot_dtype, wide.mm_tflops) == ("bf16", CEILINGS["mm_tflops_bf16"])
    # Half the work on each route: time-weighted, not the mean of the rates.
    half = _mxfp4_row(0.5)
    assert half.dot_dtype == "fp8+bf16"
    assert math.isclose(half.matrix_floor_us, half.flops * (0.5 / 1000.0 + 0.5 / 630.0) / 1e6)
    assert math.isclose(half.roof_fraction, half.floor_us / 170.0)
    # No route reported (a portable design, NaN share): the format's dot.
    assert _mxfp4_row(float("nan")).dot_dtype == "bf16"
    # The split route runs two fp8 dots a product: half the fp8 rate.
    split = _mxfp4_row(0.0, split_route_share=1.0)
    assert split.dot_dtype == "fp8x2" and split.split_route_share == 1.0
    assert math.isclose(split.mm_tflops, CEILINGS["mm_tflops_fp8"] / 2)
    three = _mxfp4_row(0.25, split_route_share=0.5)
    assert three.dot_dtype == "fp8+fp8x2+bf16"
    assert math.isclose(three.matrix_floor_us,
                        three.flops * (0.25 / 1000.0 + 2 * 0.5 / 1000.0 + 0.25 / 630.0) / 1e6)
    assert _mxfp4_row(1.0, split_route_share=0.0).dot_dtype == "fp8"
    # With cuBLAS's rate at K = 2 kv_c measured, the split route's product is floored at it;
    # the other routes keep theirs, and the tensor cores' own rate is the same at any K.
    x2 = {**CEILINGS, **TC, "mm_tflops_fp8x2": 1200.0}
    split = _mxfp4_row(0.0, x2, split_route_share=1.0)
    assert math.isclose(split.mm_tflops, 1200.0 / 2)
    assert math.isclose(split.tc_tflops, 1620.0 / 2)
    three = _mxfp4_row(0.25, x2, split_route_share=0.5)
    assert math.isclose(three.matrix_floor_us,
                        three.flops * (0.25 / 1000.0 + 2 * 0.5 / 1200.0 + 0.25 / 630.0) / 1e6)


def test_tensor_core_floor_is_at_the_rows_clock_and_absent_unmeasured():
    plain = _mxfp4_row(1.0)
    assert math.isnan(plain.tc_tflops) and math.isnan(plain.tc_floor_us)
    same = _mxfp4_row(1.0, {**CEILINGS, **TC}, sm_clock_mhz=1755.0)
    assert math.isclose(same.tc_tflops, 1620.0)
    half_clock = _mxfp4_row(1.0, {**CEILINGS, **TC}, sm_clock_mhz=1755.0 / 2)
    assert math.isclose(half_clock.tc_tflops, 810.0)
    assert math.isclose(half_clock.tc_floor_us,
                        max(half_clock.byte_floor_us, half_clock.flops / 810e12 * 1e6))
    unknown_clock = _mxfp4_row(1.0, {**CEILINGS, **TC})  # the rate at the mma step's clock
    assert math.isclose(unknown_clock.tc_tflops, 1620.0)
    assert unknown_clock.tc_floor_us < unknown_clock.floor_us  # a faster rate, a lower floor


def test_tensor_core_rates_take_each_dots_fastest_case():
    import pandas as pd

    rows = pd.DataFrame({"dot_dtype": ["fp8", "fp8", "bf16", "bf16"], "num_warps": [4, 8, 4, 8],
                         "tflops": [1627.0, 1618.0, 836.0, 844.0],
                         "sm_clock_mhz": [1755.0, 1740.0, 1770.0, 1770.0]})
    assert bench.tensor_core_rates(rows) == {"tc_tflops_fp8": 1627.0, "tc_clock_mhz_fp8": 1755.0,
                                             "tc_tflops_bf16": 844.0,
                                             "tc_clock_mhz_bf16": 1770.0}
