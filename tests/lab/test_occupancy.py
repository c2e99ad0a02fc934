"""The occupancy model: programs from the launcher's own grid functions, waves, busy share,
resident programs from kernel resources."""

import dataclasses
import math
from types import SimpleNamespace

import pytest

from mla_kernels import DESIGNS, build_inputs
from mla_kernels.core.devices import DEVICES, get_device
from mla_kernels.core.problem import check_arguments
from mla_kernels.lab import occupancy as occ

KIMI = "kimi-k3-tp8"


def test_serial_at_12_heads_on_mi355x_is_4_7_percent():
    prob = occ.problem_for(KIMI, [32000])
    o = occ.occupancy("serial", prob, [32000], "MI355X")
    assert o.programs_launched == 12 and o.programs_working == 12
    assert o.compute_units == 256
    assert o.busy_share == pytest.approx(12 / 256)
    assert round(100 * o.busy_share, 1) == 4.7
    assert o.waves == 1
    assert o.programs_per_cu == pytest.approx(12 / 256)


@pytest.mark.parametrize("contexts", [[1], [32000], [5, 0, 77]])
def test_launched_programs_by_hand(contexts):
    # Each design's grid, written out here from its definition (docs/contract.md).
    prob = occ.problem_for(KIMI, contexts)
    rows, batch = sum(contexts), len(contexts)
    want = {"serial": 12 * batch, "chunked": -(-rows // 32) * 12 * batch,
            "tiled": -(-rows // 64) * 12, "tiled_tma": -(-rows // 128) * 24,
            "hopper_ws": min(-(-rows // 128) * 24, 132)}
    for name, n in want.items():
        assert occ.occupancy(name, prob, contexts, "H200").programs_launched == n, name


def test_model_counts_what_a_launch_launches(monkeypatch, device):
    # The grid a real launch hands to Triton (intercepted) against the model's count.
    import mla_kernels as mk
    from mla_kernels.api import clear_plans
    from mla_kernels.designs import launch

    seen = []
    monkeypatch.setattr(launch.JitLauncher, "__call__",
                        lambda self, *args: seen.append(math.prod(self.grid)))
    clear_plans()
    contexts = [5, 0, 77]
    inp = build_inputs(KIMI, contexts, block_size=16, device=device, spare_rows=0)
    prob = check_arguments(*inp.args())
    for name in ("serial", "chunked", "tiled", "tiled_tma"):
        mk.gather_kv_b_proj(*inp.args(), variant=name)
        modelled = occ.occupancy(name, prob, contexts, "H200").programs_launched
        assert len(seen) and seen[-1] == modelled, name
        seen.clear()


@pytest.mark.parametrize("ctx", [1, 4096, 109440])
def test_serial_does_not_grow_with_context(ctx):
    o = occ.occupancy("serial", occ.problem_for(KIMI, [ctx]), [ctx], "MI355X")
    assert o.programs_launched == 12


@pytest.mark.parametrize("cache_dtype,chunk", [("fp8", 32), ("bf16", 16)])
def test_chunked_single_sequence(cache_dtype, chunk):
    ctx = 32000
    prob = occ.problem_for(KIMI, [ctx], cache_dtype=cache_dtype)
    o = occ.occupancy("chunked", prob, [ctx], "MI355X")
    want = 12 * -(-ctx // chunk)
    assert o.programs_launched == want and o.programs_working == want
    assert o.busy_share == 1.0
    assert o.waves == -(-want // 256)


def test_chunked_ragged_batch_counts_idle_programs():
    contexts = [100, 0, 1000]
    prob = occ.problem_for(KIMI, contexts)
    o = occ.occupancy("chunked", prob, contexts, "H200")
    # Chunk axis from the output rows (1100 tokens -> 35 chunks), for every sequence.
    assert o.programs_launched == 35 * 12 * 3
    assert o.programs_working == 12 * (4 + 0 + 32)
    hinted = occ.occupancy("chunked", prob, contexts, "H200", max_context_len=1000)
    assert hinted.programs_launched == 32 * 12 * 3
    assert hinted.programs_working == o.programs_working
    serial = occ.occupancy("serial", prob, contexts, "H200")
    assert serial.programs_launched == 36 and serial.programs_working == 24


def test_waves_and_slot_fill_with_resident_programs():
    prob = occ.problem_for(KIMI, [32000])
    one = occ.occupancy("chunked", prob, [32000], "MI355X")
    four = occ.occupancy("chunked", prob, [32000], "MI355X", resident_per_cu=4)
    assert one.waves == math.ceil(12000 / 256) == 47
    assert four.waves == math.ceil(12000 / 1024) == 12
    assert four.slot_fill == pytest.approx(12000 / (12 * 1024))
    assert one.busy_share == four.busy_share == 1.0


def test_empty_batch_has_no_waves():
    prob = occ.problem_for(KIMI, [0])
    o = occ.occupancy("chunked", prob, [0], "H200")
    assert o.programs_working == 0 and o.waves == 0 and o.busy_share == 0.0


@pytest.mark.parametrize("cache_dtype,weight_format", [
    ("fp8", "fp8_row"), ("fp8", "bf16"), ("bf16", "fp8_block"), ("bf16", "mxfp4"),
    ("bf16", "bf16")])
@pytest.mark.parametrize("block_size", [1, 16])
def test_problem_for_matches_check_arguments(cache_dtype, weight_format, block_size):
    # Built from names alone, it must equal what the launcher derives from real tensors.
    contexts = (3, 17)
    inp = build_inputs(KIMI, contexts, block_size=block_size, cache_dtype=cache_dtype,
                       weight_format=weight_format, spare_rows=0)
    want = check_arguments(*inp.args())
    got = occ.problem_for(KIMI, contexts, cache_dtype, weight_format, block_size)
    assert got == want


def test_problem_for_rejects_bad_input():
    with pytest.raises(ValueError, match="contexts"):
        occ.problem_for(KIMI, [-1])
    with pytest.raises(ValueError, match="weight_format"):
        occ.problem_for(KIMI, [1], weight_format="int4")
    with pytest.raises(ValueError, match="block_size"):
        occ.problem_for(KIMI, [1], block_size=0)
    with pytest.raises(ValueError, match="shape"):
        occ.problem_for("no-such-model", [1])


def test_resident_programs_by_hand():
    h200 = get_device("H200")
    # 168 registers x 32 lanes x 4 warps = 21504 per program: 65536 // 21504 = 3.
    # 50000 + 1024 reserved bytes of shared memory: 233472 // 51024 = 4. Warps: 64 // 4.
    r = occ.resident_programs(h200, num_warps=4, regs_per_thread=168, shared_bytes=50000)
    assert (r["by_regs"], r["by_smem"], r["by_warps"]) == (3, 4, 16)
    assert r["resident"] == 3 and r["limit"] == "regs"
    # Registers round up to a multiple of 8: 161 counts as 168.
    assert occ.resident_programs(h200, 4, 161)["by_regs"] == 3
    assert occ.resident_programs(h200, 4)["resident"] == 16
    small_smem = occ.resident_programs(h200, 4, 32, 200_000)
    assert small_smem["resident"] == 1 and small_smem["limit"] == "smem"
    mi = occ.resident_programs(get_device("MI355X"), 4, 128, 0)
    assert mi["by_regs"] == 131072 // (128 * 64 * 4) and mi["by_warps"] == 8
    with pytest.raises(ValueError):
        occ.resident_programs(h200, 0)


def test_kernel_resources_reads_compiled_metadata():
    fake = SimpleNamespace(n_regs=96, n_spills=0,
                           metadata=SimpleNamespace(shared=16384, num_warps=8))
    assert occ.kernel_resources(fake) == {"n_regs": 96, "n_spills": 0, "shared_bytes": 16384,
                                          "num_warps": 8}
    assert occ.kernel_resources(None) is None
    assert occ.kernel_resources(object()) is None


def test_no_compiled_kernels_on_the_interpreter(device):
    if device != "cpu":
        pytest.skip("on a GPU the kernels compile")
    assert occ.design_resources(DESIGNS["serial"]) == []
    assert occ.measure_resources(KIMI, ["serial"], get_device("H200")) is None


def test_resolve_device():
    import torch

    assert occ.resolve_device("MI355X") is DEVICES["MI355X"]
    live = occ.resolve_device("auto")
    if torch.cuda.is_available():  # the live GPU, as torch counts its compute units
        assert live.compute_units == torch.cuda.get_device_properties(0).multi_processor_count
    else:  # no GPU: the fallback, the registry's H200
        assert live == DEVICES["H200"] and live.compute_units == 132
    with pytest.raises(ValueError):
        occ.resolve_device("no-such-gpu")


def test_occupancy_table_rows():
    rows = occ.occupancy_table(["serial", "chunked"], [(4096,), (1024, 2048)],
                               ["MI355X", "H200"], resident={("H200", "chunked"): 2})
    assert len(rows) == 8
    r = next(r for r in rows if r["device"] == "MI355X" and r["variant"] == "serial"
             and r["batch"] == 1)
    assert r["contexts"] == "4096" and r["ctx"] == 4096 and r["programs_launched"] == 12
    h = [r for r in rows if r["device"] == "H200" and r["variant"] == "chunked"]
    assert all(r["resident_per_cu"] == 2 for r in h)


def test_tiled_counts_tiles_of_the_flat_token_axis():
    if "tiled" not in DESIGNS:
        pytest.skip("no tiled design")
    contexts = [100, 0, 1000]
    prob = occ.problem_for(KIMI, contexts)
    o = occ.occupancy("tiled", prob, contexts, "H200")
    assert o.programs_launched == o.programs_working == -(-1100 // 64) * 12


def test_design_resources_reads_the_design_s_kernels():
    # On a GPU, launched kernels sit in their JIT function's cache; a stand-in here.
    compiled = SimpleNamespace(name="k", n_regs=128, n_spills=2,
                               metadata=SimpleNamespace(shared=4096, num_warps=4))
    jit = SimpleNamespace(device_caches={0: ({"key": compiled}, {}, None, None, None)})
    design = dataclasses.replace(DESIGNS["serial"], name="fake", kernels=(jit,))
    assert occ.design_resources(design) == [{"kernel": "k", "n_regs": 128, "n_spills": 2,
                                             "shared_bytes": 4096, "num_warps": 4}]


@pytest.mark.parametrize(("contexts", "working"), [
    ([128], 24),  # one tile: each of its 24 items on its own program
    ([4096], 128),  # 32 tiles x 4 programs a tile (132 // 32)
    ([96, 4000], 128),  # tiles run over the flat token axis, across sequences
    ([32000], 132),  # 250 tiles: contiguous runs on every SM
])
def test_hopper_ws_work_model_follows_its_item_split(contexts, working):
    prob = occ.problem_for(KIMI, contexts)
    o = occ.occupancy("hopper_ws", prob, contexts, "H200")
    assert o.programs_working == working


def test_a_gpu_family_design_is_not_modelled_on_another_family():
    rows = occ.occupancy_table(["serial", "hopper_ws"], [[4096]], ["MI355X", "H200"])
    assert {(r["device"], r["variant"]) for r in rows} == {
        ("MI355X", "serial"), ("H200", "serial"), ("H200", "hopper_ws")}


@pytest.mark.parametrize(("cache", "fmt", "device", "design"), [
    ("fp8", "fp8_row", "H200", "hopper_ws"),
    ("bf16", "fp8_row", "H200", "hopper_ws"),
    ("bf16", "mxfp4", "H200", "hopper_ws"),  # widened to a bf16 copy ahead of the kernel
    ("fp8", "fp8_block", "H200", "hopper_ws"),
    ("fp8", "fp8_row", "MI355X", "tiled"),  # a device the table does not know: the fallback
])
def test_auto_is_modelled_as_the_call_resolves_it(cache, fmt, device, design):
    # The model draws what that device would run, whatever this machine can run.
    prob = occ.problem_for(KIMI, [4096], cache, fmt)
    o = occ.occupancy("auto", prob, [4096], device)
    assert (o.variant, o.design) == ("auto", design)
