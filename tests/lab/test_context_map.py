"""The context path's map: it refuses to run with no GPU before anything is written; one of
its points, made under the interpreter with the timing stood in, has every path's row,
checked correct, with its floor and peak memory; on a GPU one small point is measured."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mla_kernels.context import expanded_peak_bytes
from mla_kernels.lab import context_map
from mla_kernels.lab.context_floors import Rates, absorbed_floor, expanded_floor, flop_crossover
from mla_kernels.lab.context_inputs import build_context_inputs
from mla_kernels.lab.timing import Timing

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is the CPU's")
def test_refuses_without_a_gpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "mla_kernels.lab.context_map", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr
    assert not (tmp_path / "out").exists()


def test_a_point_has_every_path_checked(monkeypatch, device):
    if device == "cpu":  # the interpreter has no timing: a stand-in that still runs each fn
        monkeypatch.setattr(context_map, "graphed", lambda fn: fn)
        monkeypatch.setattr(context_map, "measure", lambda fn, budget: (fn(), Timing(
            5.0, 3, 4.0, 6.0))[1])
    rates = Rates.datasheet("H200")
    rows = context_map.measure_point("kimi-k3-tp8", 70, 3, cache_dtype="fp8",
                                     weight_format="fp8_row", kv_dtype="bf16", chunk_tokens=32,
                                     rates=rates, budget=(1, 2), prov={"commit": "x"},
                                     device=device)
    assert [r["path"] for r in rows] == list(context_map.PATHS)
    assert all(r["correct"] for r in rows), [(r["path"], r["max_err"]) for r in rows]
    assert all(r["median_us"] > 0 and r["floor_us"] > 0 for r in rows)
    by = {r["path"]: r for r in rows}
    ef = expanded_floor("kimi-k3-tp8", 70, 3, "fp8", "fp8_row", rates)
    assert by["expanded"]["floor_us"] == pytest.approx(ef["floor_us"])
    assert by["expanded"]["peak_bytes_model"] == expanded_peak_bytes(
        "kimi-k3-tp8", 3, 70, chunk_tokens=32, splits=by["expanded"]["splits"])
    if device == "cuda":  # torch's allocator saw no more than the count (inputs aside)
        assert by["expanded"]["peak_bytes_measured"] <= 1.1 * by["expanded"]["peak_bytes_model"] + 2**21


def test_floors():
    # By FLOPs alone the crossover is at 170.7 new tokens for Kimi-K3 TP8's dims; the
    # expanded path's floor holds the expansion's own whatever n is.
    assert flop_crossover("kimi-k3-tp8") == pytest.approx(512 * 256 / 768)
    r = Rates.datasheet("H200")
    few = expanded_floor("kimi-k3-tp8", 32000, 16, "fp8", "fp8_row", r)
    many = expanded_floor("kimi-k3-tp8", 32000, 8192, "fp8", "fp8_row", r)
    assert few["expand_floor_us"] == many["expand_floor_us"] > 0
    assert absorbed_floor("kimi-k3-tp8", 32000, 16, "fp8", "fp8_row", r)["floor_us"] < few["floor_us"]
    assert absorbed_floor("kimi-k3-tp8", 32000, 8192, "fp8", "fp8_row", r)["floor_us"] > many["floor_us"]


@pytest.mark.parametrize(("kw", "message"), [
    ({"new_tokens": 0}, "new_tokens: expected an int >= 1, got 0"),
    ({"new_tokens": 2.0}, "new_tokens: expected an int >= 1, got 2.0"),
    ({"score_std": True}, "score_std: expected a finite float > 0, got True"),
    ({"score_std": float("nan")}, "score_std: expected a finite float > 0, got nan"),
])
def test_context_inputs_name_a_bad_argument(kw, message):
    args = {"new_tokens": 3, **kw}
    with pytest.raises(ValueError, match=re.escape(message)):
        build_context_inputs("kimi-k3-tp8", 40, args.pop("new_tokens"), **args)
