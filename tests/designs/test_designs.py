"""The registry: a design is one home, one rule resolves every variant name, configs are typed
and checked, and the package's imports hold no cycle."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import mla_kernels as mk
from mla_kernels import designs
from mla_kernels.core import tuning
from mla_kernels.core.devices import DEVICES, INTERPRETER
from mla_kernels.core.formats import CACHE_DTYPES, WEIGHT_FORMATS
from mla_kernels.core.problem import check_arguments
from mla_kernels.core.shapes import MLAShape
from mla_kernels.designs import DESIGNS, parse_config, resolve
from mla_kernels.designs.chunk_loop import ChunkConfig
from mla_kernels.designs.hopper_ws import HopperWSConfig
from mla_kernels.designs.tiled import TiledConfig
from mla_kernels.lab import bench
from mla_kernels.lab import occupancy as occ
from mla_kernels.lab.checks import check_outputs

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
SMALL = MLAShape("test-2h", num_heads=2)


@pytest.fixture
def grid_stride():
    """The throwaway design of tests/designs/fixtures/grid_stride_design.py, registered for a test."""
    sys.path.insert(0, str(FIXTURES))
    try:
        mod = importlib.import_module("grid_stride_design")
    finally:
        sys.path.remove(str(FIXTURES))
    if "grid_stride" not in DESIGNS:
        designs.register(mod.DESIGN)
    yield mod.DESIGN
    designs.unregister("grid_stride")


# ------------------------------------------------------------------ one home, one entry
def test_a_throwaway_design_is_served_with_no_other_edit(grid_stride, device, seed):
    assert "grid_stride" in mk.variant_names()
    inp = mk.build_inputs(SMALL, [37, 0, 70], block_size=16, device=device, seed=seed)
    prob = check_arguments(*inp.args())
    # Resolution and the public call.
    design, cfg = resolve("grid_stride", prob, INTERPRETER)
    assert design is grid_stride and cfg == grid_stride.config_type()
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="grid_stride")
    assert check_outputs(inp)["correct"]
    # The occupancy model: at most 6 programs per compute unit, from its own grid and work.
    big = occ.problem_for("kimi-k3-tp8", [32000])
    o = occ.occupancy("grid_stride", big, [32000], "MI355X")
    assert o.design == "grid_stride" and o.programs_launched == 6 * 256
    assert o.programs_working == 6 * 256
    # The harness times what resolution gives.
    pt = bench.Point("kimi-k3-tp8", (5,), "fp8_row", "fp8", 1, ("grid_stride",))
    (name, dot, make), *torch_paths = bench.candidates(pt)
    assert (name, dot) == ("grid_stride", "fp8") and [c[0] for c in torch_paths] == [
        "torch_bf16", "torch_fp8"]
    inp.poison_outputs()
    make(inp)()
    assert check_outputs(inp)["correct"]


@pytest.mark.slow
def test_compile_check_serves_a_throwaway_design():
    pytest.importorskip("triton.backends.nvidia.compiler")
    code = ("import grid_stride_design; from mla_kernels.lab.compile_check import main; "
            "main(['--variant', 'grid_stride', '--weight-format', 'fp8_row'])")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(FIXTURES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert row["variant"] == row["design"] == "grid_stride"
    assert 0 < row["shared_bytes"] <= DEVICES["H200"].smem_per_program and row["n_regs"] > 0


# ------------------------------------------------------------------ one rule for auto
@pytest.mark.parametrize("device", [*DEVICES.values(), INTERPRETER], ids=lambda d: d.name)
def test_auto_resolves_to_a_design_that_runs_there(device):
    for fmt in WEIGHT_FORMATS:
        for cache in ("bf16", "fp8"):
            for page in (1, 16, 64, 128):
                prob = occ.problem_for("kimi-k3-tp8", [100], cache, fmt, page)
                design, cfg = resolve("auto", prob, device)
                assert design.runs(prob, device), (fmt, cache, page)
                assert isinstance(cfg, design.config_type)


def test_auto_follows_the_tuning_table(monkeypatch):
    prob = occ.problem_for("kimi-k3-tp8", [100], "fp8", "fp8_row")
    design, cfg = resolve("auto", prob, DEVICES["H200"])
    assert design.name == "hopper_ws" and cfg == HopperWSConfig(ring_depth=4, prefetch="inputs")
    mx = occ.problem_for("kimi-k3-tp8", [100], "fp8", "mxfp4")
    design, cfg = resolve("auto", mx, DEVICES["H200"])
    assert (design.name, cfg) == ("hopper_ws", HopperWSConfig(ring_depth=4))
    # An entry that changes with the context (a list by minimum output rows, as MXFP4's
    # was before hopper_ws served it).
    monkeypatch.setitem(tuning.TUNED, ("H200", "mxfp4", "fp8", tuning.ANY),
                        [(16384, "tiled_tma", {}),
                         (0, "tiled", {"block_m": 128, "num_warps": 8, "num_stages": 2})])
    design, cfg = resolve("auto", mx, DEVICES["H200"])
    assert (design.name, cfg) == ("tiled", TiledConfig(block_m=128, num_warps=8, num_stages=2))
    design, cfg = resolve("auto", occ.problem_for("kimi-k3-tp8", [32000], "fp8", "mxfp4"),
                          DEVICES["H200"])
    assert (design.name, cfg) == ("tiled_tma", TiledConfig(block_m=128, split=True))
    # A device the table does not know gets the portable fallback.
    design, cfg = resolve("auto", prob, DEVICES["MI355X"])
    assert design.name == tuning.FALLBACK[0] and cfg == design.config(tuning.FALLBACK[1])


def test_tuning_table_names_registered_designs_and_valid_configs():
    for (dev, fmt, cache, page), entry in tuning.TUNED.items():
        # A format, or a format and its scale kind ("bf16:none").
        fmt, _, scale = fmt.partition(":")
        assert dev in DEVICES and fmt in WEIGHT_FORMATS
        assert scale in ("", "none", "row", "block", "e8m0")
        assert cache in (*CACHE_DTYPES, tuning.ANY) and (page == tuning.ANY or page >= 1)
        choices = [entry] if isinstance(entry, tuple) else [e[1:] for e in entry]
        if not isinstance(entry, tuple):  # largest minimum first, the last for any length
            mins = [e[0] for e in entry]
            assert mins == sorted(mins, reverse=True) and mins[-1] == 0
        for name, fields in choices:
            DESIGNS[name].config(fields)  # a ValueError here names the bad field


def test_a_config_for_auto_applies_to_what_auto_resolved():
    prob = occ.problem_for("kimi-k3-tp8", [100], "fp8", "fp8_row")
    design, cfg = resolve("auto", prob, DEVICES["H200"], {"ring_depth": 2})
    assert design.name == "hopper_ws" and cfg.ring_depth == 2
    with pytest.raises(ValueError, match="config: expected fields of HopperWSConfig"):
        resolve("auto", prob, DEVICES["H200"], {"block_m": 64})


# ------------------------------------------------------------------ typed configs
@pytest.mark.parametrize(("make", "field"), [
    (lambda: TiledConfig(block_m=3), "config.block_m"),
    (lambda: TiledConfig(split="yes"), "config.split"),
    (lambda: TiledConfig(num_warps=True), "config.num_warps"),
    (lambda: ChunkConfig(chunk=48), "config.chunk"),
    (lambda: HopperWSConfig(ring_depth=9), "config.ring_depth"),
    (lambda: HopperWSConfig(programs=0), "config.programs"),
])
def test_bad_config_fields_name_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.") + ": expected"):
        make()


# Config fields that rounds ran and the package took out again (the first two are in
# 468e490, defer_stores in abed352, latent_widening in 37206ea, staggered in 258a08b,
# vector_staging in 956a810): their rows stay as measured
# (docs/log/2026-12-01-rounds-i-j-bounds.md, docs/log/2026-12-02-fp8-outputs.md,
# docs/log/2026-12-04-bf16-weight-operand.md, docs/log/2026-12-05-*.md).
RETIRED_FIELDS = {"hopper_ws": ("paired_runs", "late_rope", "defer_stores", "latent_widening",
                                "staggered", "vector_staging")}
# Retired values whose rows' other fields only they allowed (the operand route's ring of 7):
# refused, naming the field, and not read further.
RETIRED_ROUTES = ("latent_widening='operand'",)


def test_configs_from_committed_csvs_parse():
    # Every config string a committed tuning or matrix CSV holds, legacy LaunchConfig
    # reprs included, reads as its design's typed config; one naming a retired field is
    # refused, naming it, and reads once that field is dropped (a retired route's rows, whose
    # other fields only it allowed, are refused only).
    if not (ROOT / "data").is_dir():
        pytest.skip("no data/ in this copy of the tree")
    seen = retired = 0
    for path in sorted((ROOT / "data").rglob("*.csv")):
        df = pd.read_csv(path)
        if "config" not in df.columns or "variant" not in df.columns:
            continue
        for variant, text in df[["variant", "config"]].dropna().itertuples(index=False):
            if variant in DESIGNS and str(text).strip():
                config_type = DESIGNS[variant].config_type
                text = str(text)
                gone = [f for f in RETIRED_FIELDS.get(variant, ()) if f"{f}=" in text]
                if gone:
                    with pytest.raises(ValueError, match=gone[0]):
                        parse_config(config_type, text)
                    if any(r in text for r in RETIRED_ROUTES):
                        retired += 1
                        continue
                    for f in gone:
                        text = re.sub(rf",\s*{f}=[\w']+", "", text)
                    retired += 1
                # A diagnostic's rows of 2026-12-05 named the fields given, as JSON.
                cfg = (DESIGNS[variant].config(json.loads(text)) if text.startswith("{")
                       else parse_config(config_type, text))
                assert isinstance(cfg, config_type)
                seen += 1
    assert seen > 10
    assert retired < seen


def test_parse_config_legacy_and_round_trip():
    legacy = ("LaunchConfig(chunk_tokens=128, block_k=None, num_warps=8, num_stages=2, "
              "split_parts=True, programs=None, stages=4)")
    assert parse_config(TiledConfig, legacy) == TiledConfig(block_m=128, num_warps=8,
                                                            num_stages=2, split=True)
    assert parse_config(HopperWSConfig, "LaunchConfig(stages=3)") == HopperWSConfig(3)
    for cfg in (TiledConfig(block_m=32, split=True), ChunkConfig(chunk=64), HopperWSConfig(2, 7)):
        assert parse_config(type(cfg), repr(cfg)) == cfg
    with pytest.raises(ValueError, match="programs=5"):
        parse_config(TiledConfig, "LaunchConfig(programs=5)")
    with pytest.raises(ValueError, match="config: expected"):
        parse_config(TiledConfig, "__import__('os').system('true')")


@pytest.mark.parametrize("bad", ["fast", 3, ["tiled"], TiledConfig()])
def test_the_public_call_rejects_a_bad_config(bad, device, seed):
    inp = mk.build_inputs(SMALL, [9], block_size=16, device=device, seed=seed)
    inp.k_prefix.fill_(7.0)
    with pytest.raises(ValueError, match="config: expected"):
        mk.gather_kv_b_proj(*inp.args(), variant="chunked", config=bad)
    assert bool((inp.k_prefix == 7.0).all())


def test_seeds_are_drawn_and_reported(seed, request):
    assert 0 <= seed < 2**31
    assert ("seed", seed) in request.node.user_properties
    torch.manual_seed(seed)


BAD_CONFIG_TEXTS = {
    "repeated keyword": ("TiledConfig(block_m=3, block_m=32)", "keyword argument repeated"),
    "a mapping spread": ("TiledConfig(**{'block_m': 32})", "** is not a keyword argument"),
    "not a str": (b"TiledConfig()", "a config's repr (a str), got bytes"),
    "a long string": ("TiledConfig(block_m=" + "1" * 3000 + ")", "at most 2000 characters"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIG_TEXTS))
def test_parse_config_refuses_a_bad_text_by_name(case):
    text, words = BAD_CONFIG_TEXTS[case]
    with pytest.raises(ValueError) as err:
        parse_config(TiledConfig, text)
    msg = str(err.value)
    assert msg.startswith("config: expected") and words in msg, msg
    assert len(msg) < 500


def test_parse_config_bounds_deep_texts_before_parsing():
    # 100000 nested minus signs or terms cost the parser its memory or its stack: the
    # length bound refuses them first (a child process, should the parser fall over).
    code = (
        "from mla_kernels.designs import parse_config\n"
        "from mla_kernels.designs.tiled import TiledConfig\n"
        "for text in ('TiledConfig(block_m=' + '-' * 100000 + '1)',\n"
        "             'TiledConfig(block_m=' + '+'.join(['1'] * 100000) + ')'):\n"
        "    try:\n"
        "        parse_config(TiledConfig, text)\n"
        "    except ValueError as e:\n"
        "        assert 'at most 2000 characters' in str(e) and len(str(e)) < 300, str(e)\n"
        "    else:\n"
        "        raise SystemExit('accepted')\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_parse_config_reports_unknown_fields_in_bounded_words():
    text = "TiledConfig(" + ", ".join(f"f{i}=1" for i in range(250)) + ")"
    assert len(text) <= 2000
    with pytest.raises(ValueError) as err:
        parse_config(TiledConfig, text)
    msg = str(err.value)
    assert "got 250 unknown: 'f0', 'f1', 'f10', 'f100', 'f101' and 245 more" in msg, msg
    with pytest.raises(ValueError) as err:  # a mapping from Python has no length bound
        designs.DESIGNS["tiled"].config({f"x{i}": 1 for i in range(100000)})
    assert "100000 unknown" in str(err.value) and len(str(err.value)) < 500


def test_a_config_changed_behind_its_frozen_fields_is_refused(device, seed):
    cfg = TiledConfig(block_m=32)
    object.__setattr__(cfg, "block_m", 3)  # past the dataclass's frozen guard
    inp = mk.build_inputs(SMALL, [9], block_size=16, device=device, seed=seed)
    inp.k_prefix.fill_(7.0)
    with pytest.raises(ValueError, match="config.block_m: expected"):
        mk.gather_kv_b_proj(*inp.args(), variant="tiled", config=cfg)
    assert bool((inp.k_prefix == 7.0).all())
