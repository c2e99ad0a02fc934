"""FP8 outputs in the lab (no GPU): the matrix's /fp8out points, the schema's out_dtype and
accuracy columns through a CSV and back, the byte model at one byte an output element, and
the torch path's quantize step against the contract's rule."""

import copy
import math

import pandas as pd
import torch

import mla_kernels as mk
from mla_kernels.core.devices import DEVICES
from mla_kernels.core.formats import WEIGHT_FORMATS
from mla_kernels.core.reference import quantize_e4m3
from mla_kernels.designs import DESIGNS
from mla_kernels.lab import bench, matrix, roofline
from mla_kernels.lab.checks import check_outputs
from mla_kernels.lab.measurements import COLUMNS, Measurement, frame, out_dtypes, write_csv_atomic
from mla_kernels.lab.occupancy import problem_for
from mla_kernels.review import analysis

FP8 = "float8_e4m3fn"
CEILINGS = {"copy_tbps": 4.2, "write_tbps": 4.6, "mm_tflops_bf16": 630.0, "mm_tflops_fp8": 1000.0}
PROV = {"device": "x", "torch": "x", "triton": "x", "commit": "c1", "date": "2026-12-03T00:00:00Z",
        "compute_units": 132}


def test_the_fp8_output_points_are_named_and_timed():
    points = matrix.points()
    want = {f"kimi/{f}/fp8/p1/{c}/fp8out" for f in WEIGHT_FORMATS for c in matrix.HEADLINE}
    want |= {f"kimi/{f}/bf16/p1/32000/fp8out" for f in WEIGHT_FORMATS}
    want |= {f"glm-5-style/{f}/fp8/p1/32000/fp8out" for f in WEIGHT_FORMATS}
    assert {k for k in points if k.endswith("/fp8out")} == want
    assert set(matrix.select(["*/fp8out"])) == want
    for name in want:
        pt = points[name]
        twin = points[name.removesuffix("/fp8out")]  # the same point with bf16 outputs
        assert (pt.shape, pt.contexts, pt.weight_format, pt.cache_dtype, pt.block_size) == (
            twin.shape, twin.contexts, twin.weight_format, twin.cache_dtype, twin.block_size)
        assert pt.out_dtype == FP8 and pt.out_torch_dtype == torch.float8_e4m3fn
        assert twin.out_dtype == "bfloat16" and not pt.graph8
        prob = problem_for(pt.shape, pt.contexts, pt.cache_dtype, pt.weight_format, 1,
                           torch.float8_e4m3fn)
        ws = DESIGNS["hopper_ws"].runs(prob, DEVICES["H200"])
        assert ws, name  # hopper_ws stores FP8 outputs at both shapes' heads
        portable = ("tiled",) if (pt.shape, pt.contexts, pt.cache_dtype) == (
            "kimi-k3-tp8", (32000,), "fp8") else ()
        assert pt.variants == ("hopper_ws", "auto") + portable, name
    # Every other point keeps bf16 outputs.
    assert all(p.out_dtype == "bfloat16" for k, p in points.items() if k not in want)


def _row(out_dtype: str, **kw) -> Measurement:
    pt = matrix.point("kimi-k3-tp8", (32000,), "fp8_row", "fp8", 1, ("auto",),
                      out_dtype=out_dtype)
    return bench.measurement_row(PROV, pt, "auto", "graph", 100.0, "fp8", CEILINGS, 1e-3, True,
                                 design="tiled", **kw)


def test_out_dtype_is_in_the_key_and_the_byte_model_counts_one_byte_an_output():
    bf16, fp8 = _row("bfloat16"), _row(FP8, fp8_exact_share=0.97, fp8_max_steps=3.0)
    assert "out_dtype" in Measurement.KEY and bf16.key() != fp8.key()
    assert (bf16.out_dtype, fp8.out_dtype) == ("bfloat16", FP8)
    assert math.isnan(bf16.fp8_exact_share) and math.isnan(bf16.fp8_max_steps)
    out = roofline.output_bytes("kimi-k3-tp8", 32000)  # at 2 bytes an element
    assert bf16.min_bytes - fp8.min_bytes == out // 2
    assert fp8.min_bytes == roofline.min_bytes("kimi-k3-tp8", 32000, "fp8", "fp8_row", 1)
    assert math.isclose(fp8.write_floor_us, bf16.write_floor_us / 2)
    assert fp8.byte_floor_us < bf16.byte_floor_us


def test_the_schema_round_trips_and_old_csvs_read_as_bf16(tmp_path):
    rows = [_row("bfloat16"), _row(FP8, fp8_exact_share=0.97, fp8_max_steps=3.0)]
    run = tmp_path / "run"
    run.mkdir()
    write_csv_atomic(frame(rows), run / "perf_matrix.csv")
    back = analysis.load_measurements(run, ["perf_matrix"])
    assert list(back.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert back["out_dtype"].tolist() == ["bfloat16", FP8]  # two rows: the key tells them apart
    fp8 = back[back["out_dtype"] == FP8].iloc[0]
    assert (fp8["fp8_exact_share"], fp8["fp8_max_steps"]) == (0.97, 3.0)
    # (pandas reads an empty text column as NaN)
    assert tuple("" if pd.isna(fp8[c]) else str(fp8[c]) for c in Measurement.KEY) == tuple(
        str(v) for v in rows[1].key())
    assert analysis.load_measurements(run)["out_dtype"].tolist() == ["bfloat16", FP8]
    # Figures of bf16 outputs keep their rows; None keeps every one.
    assert analysis.select(back, timing=None)["out_dtype"].tolist() == ["bfloat16"]
    assert len(analysis.select(back, timing=None, out_dtype=None)) == 2
    # A CSV of a run before the column: every row bf16, read and checked unchanged.
    old = frame(rows[:1]).drop(columns=["out_dtype", "fp8_exact_share", "fp8_max_steps"])
    write_csv_atomic(old, tmp_path / "old" / "perf_matrix.csv")
    analysis.check_data_dir(tmp_path / "old", ["perf_matrix"])
    read = analysis.load_measurements(tmp_path / "old", ["perf_matrix"])
    assert "out_dtype" not in read.columns
    assert out_dtypes(read).tolist() == ["bfloat16"] and len(analysis.select(read, timing=None)) == 1
    # A part without the column beside one with it, at the same commit: its rows are bf16.
    write_csv_atomic(old, run / "perf_matrix_b.csv")
    both = analysis.load_measurements(run, ["perf_matrix"])
    assert sorted(both["out_dtype"]) == ["bfloat16", "bfloat16", FP8]


def test_a_row_from_an_fp8_check_carries_its_accuracy(seed):
    inp = mk.build_inputs("kimi-k3-tp8", [5, 3], weight_format="fp8_row",
                          out_dtype=torch.float8_e4m3fn, seed=seed)
    inp.poison_outputs()
    bench.torch_path(inp, "bf16")()
    chk = check_outputs(inp)
    cols = bench.check_columns(chk)
    assert cols["correct"] and 0 < cols["fp8_exact_share"] <= 1 and cols["fp8_max_steps"] >= 0
    row = _row(FP8, **{k: v for k, v in cols.items() if k.startswith("fp8_")})
    assert (row.fp8_exact_share, row.fp8_max_steps) == (chk["fp8_exact_share"],
                                                        chk["fp8_max_steps"])
    # Other outputs, or a call that failed: NaN.
    plain = bench.check_columns({"max_rel_err": 1e-3, "correct": True})
    assert math.isnan(plain["fp8_exact_share"]) and math.isnan(plain["fp8_max_steps"])


def test_the_torch_path_quantizes_its_bf16_result_by_the_contracts_rule(seed):
    inp = mk.build_inputs("kimi-k3-tp8", [6, 2], weight_format="mxfp4", cache_dtype="fp8",
                          out_dtype=torch.float8_e4m3fn, seed=seed)
    t = inp.total_tokens
    # The same inputs with bf16 outputs: the torch path's bf16 result.
    plain = copy.copy(inp)
    plain.k_prefix = torch.full(inp.k_prefix.shape, float("nan"), dtype=torch.bfloat16)
    plain.v_prefix = torch.full(inp.v_prefix.shape, float("nan"), dtype=torch.bfloat16)
    plain.k_out_scale = plain.v_out_scale = None
    bench.torch_path(plain, "bf16")()
    inp.poison_outputs()
    bench.torch_path(inp, "bf16")()
    for out, bf16, scale in ((inp.k_prefix, plain.k_prefix, inp.k_out_scale),
                             (inp.v_prefix, plain.v_prefix, inp.v_out_scale)):
        want = quantize_e4m3(bf16[:t], scale)
        assert torch.equal(out[:t].view(torch.uint8), want.view(torch.uint8))
        assert bool(out[t:].float().isnan().all())  # the spare rows left alone
    assert bench.quantize_outputs() is bench.quantize_outputs()  # compiled once per process
    assert pd.notna(check_outputs(inp)["fp8_exact_share"])
