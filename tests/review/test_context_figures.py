"""The context path's crossover table and figures: which way wins, what each engine's rule
chooses and where it is wrong, the crossover in new tokens, and the figures drawn from
measured rows and from the floors alone."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from mla_kernels.review import crossover, plotting  # noqa: E402


def map_rows(times):
    """Map rows (lab.context_map's columns) for {(ctx, n): (expanded_us, absorbed_us)}."""
    rows = []
    for (c, n), (e, a) in times.items():
        for path, us in (("expanded", e), ("absorbed", a), ("expanded_expand", e / 2),
                         ("sdpa", e)):
            rows.append({"model": "kimi-k3-tp8", "cache_dtype": "fp8", "weight_format": "fp8_row",
                         "kv_dtype": "bf16", "ctx": c, "new_tokens": n, "path": path,
                         "median_us": us, "floor_us": us / 2, "correct": True,
                         "peak_bytes_model": 1000.0, "peak_bytes_measured": float("nan"),
                         "chunk_tokens": min(c, 32768), "device": "NVIDIA H200",
                         "commit": "abc", "date": "2026-12-03T00:00:00Z"})
    return pd.DataFrame(rows)


def test_winners_and_engine_rules():
    rows = map_rows({(4096, 16): (30.0, 10.0), (4096, 512): (40.0, 80.0),
                     (65536, 16): (300.0, 100.0), (65536, 512): (400.0, 1200.0)})
    t = crossover.measured_table(rows).set_index(["ctx", "new_tokens"])
    assert list(t["winner"]) == ["absorbed", "expanded", "absorbed", "expanded"]
    assert list(t["speedup"]) == [3.0, 2.0, 3.0, 3.0]
    assert (t["expanded_fraction"] == 0.5).all()
    # SGLang expands from 8192 cached tokens on; ATOM absorbs above 32768.
    assert list(t["SGLang_choice"]) == ["absorbed", "absorbed", "expanded", "expanded"]
    assert list(t["SGLang_wrong"]) == [False, True, True, False]
    assert list(t["ATOM_wrong"]) == [True, False, False, True]
    assert t.loc[(4096, 512), "SGLang_cost"] == 2.0
    assert (t["expanded_peak_bytes"] == 1000.0).all()  # the count, where nothing was measured
    cross = crossover.crossover_new_tokens(crossover.measured_table(rows))
    # log(3) above 1 at n = 16, log(1/2) below at 512: interpolated in log n between them.
    assert 16 < cross.iloc[0]["expand_from_new_tokens"] < 512


def test_the_absorbed_way_is_the_kernel_the_call_runs_by_default():
    # A map that timed both absorbed kernels (an sm_90 GPU) is read with the Gluon kernel's
    # rows, which the call's default runs there; without them, the portable kernel's.
    rows = map_rows({(4096, 16): (30.0, 40.0), (65536, 16): (300.0, 100.0)})
    hopper = rows[rows["path"] == "absorbed"].assign(path="absorbed_hopper")
    hopper["median_us"] = [20.0, 90.0]
    both = crossover.measured_table(pd.concat([rows, hopper], ignore_index=True))
    assert list(both["absorbed_us"]) == [20.0, 90.0]
    assert list(both["absorbed_kernel"]) == ["hopper", "hopper"]
    assert list(both["winner"]) == ["absorbed", "absorbed"]
    portable = crossover.measured_table(rows)
    assert list(portable["absorbed_us"]) == [40.0, 100.0]
    assert list(portable["absorbed_kernel"]) == ["portable", "portable"]
    assert list(portable["winner"]) == ["expanded", "absorbed"]
    # The figures name the kernel the absorbed way's times are of.
    for table, name in ((both, "Gluon kernel"), (portable, "portable kernel")):
        fig = plotting.plot_crossover(table)
        titles = [ax.get_title() for ax in fig.axes]
        assert sum(f"absorbed ({name})" in t for t in titles) == 2, titles
        matplotlib.pyplot.close(fig)


def test_engine_thresholds_at_their_edges():
    assert crossover.engine_choice("SGLang", 8191) == "absorbed"
    assert crossover.engine_choice("SGLang", 8192) == "expanded"
    assert crossover.engine_choice("ATOM", 32768) == "expanded"
    assert crossover.engine_choice("ATOM", 32769) == "absorbed"
    with pytest.raises(ValueError, match="engine: expected one of"):
        crossover.engine_choice("vLLM", 1)


def test_model_table_crosses_near_the_flop_crossover():
    t = crossover.model_table("kimi-k3-tp8", [32000], [16, 64, 128, 256, 512], cache_dtype="bf16",
                              weight_format="bf16")
    assert t["source"].iloc[0].startswith("model")
    assert list(t["winner"]) == ["absorbed"] * 3 + ["expanded"] * 2
    # bf16 everywhere: bytes aside, the floors cross where the FLOPs do (170.7 new tokens).
    n = crossover.crossover_new_tokens(t).iloc[0]["expand_from_new_tokens"]
    assert 128 < n < 256


@pytest.mark.parametrize(("device", "kv", "gluon"), [("H200", "bf16", True), ("H200", "fp8", False),
                                                   ("MI355X", "bf16", False)])
def test_model_table_counts_the_partials_of_the_kernel_the_plan_takes(device, kv, gluon):
    # plan_expanded's default attends over bf16 K/V on sm_90 with the Gluon kernel, whose
    # splits (split_by_waves) differ from the portable kernel's: the counted memory follows.
    import torch

    from mla_kernels.context import attention_hopper as g
    from mla_kernels.context.attention import expanded_blocking, split_count
    from mla_kernels.context.memory import expanded_peak_bytes
    from mla_kernels.core.devices import get_device

    units = get_device(device).compute_units
    t = crossover.model_table("kimi-k3-tp8", [32000], [128, 512], cache_dtype="fp8",
                              weight_format="fp8_row", kv_dtype=kv, device=device)
    for n, got in zip(t["new_tokens"], t["expanded_peak_bytes"], strict=True):
        blk = expanded_blocking(n, 32000)
        splits = (g.splits(n, 12, 32000, units)
                  if gluon else split_count(-(-n // blk.block_m) * 12, 32000, blk.block_n, units))
        dtype = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
        assert got == expanded_peak_bytes("kimi-k3-tp8", n, 32000, splits=splits, kv_dtype=dtype)
    if gluon:  # the two counts differ here, so the count above tells the kernels apart
        assert g.splits(128, 12, 32000, units) != split_count(
            12, 32000, expanded_blocking(128, 32000).block_n, units)


@pytest.mark.parametrize("measured", [True, False])
def test_figures_draw_every_cell(measured, tmp_path):
    if measured:
        t = crossover.measured_table(map_rows({(c, n): (10.0 * n, 50.0) for c in (4096, 65536)
                                               for n in (16, 512)}))
    else:
        t = crossover.model_table("kimi-k3-tp8", [4096, 65536], [16, 512], cache_dtype="fp8",
                                  weight_format="fp8_row", chunk_tokens=4096)
    fig = plotting.plot_crossover(t)
    gids = {a.get_gid() for a in fig.findobj() if a.get_gid()}
    assert {f"cell/{c}/{n}" for c in (4096, 65536) for n in (16, 512)} <= gids
    assert {"engine/SGLang", "engine/ATOM", "footer"} <= gids
    footer = [a for a in fig.findobj() if a.get_gid() == "footer"][0].get_text()
    assert ("no measured rows" in footer) != measured
    fig = plotting.plot_context_memory(t)
    gids = {a.get_gid() for a in fig.findobj() if a.get_gid()}
    assert {"memory/expanded/4096", "memory/absorbed/65536", "time/expanded/65536"} <= gids
    assert plotting.save_figure(fig, tmp_path, "context_memory")


def test_measured_figures_name_their_run():
    # The table carries the map rows' provenance, so its CSV and both figures' footers name
    # the run the times come from, not "no run named".
    rows = map_rows({(c, n): (10.0 * n, 50.0) for c in (4096, 65536) for n in (16, 512)})
    rows["timing"], rows["floor_source"] = "graph", "measured"
    t = crossover.measured_table(rows)
    assert set(t["commit"]) == {"abc"} and set(t["device"]) == {"NVIDIA H200"}
    for plot in (plotting.plot_crossover, plotting.plot_context_memory):
        fig = plot(t)
        text = [a for a in fig.findobj() if a.get_gid() == "footer"][0].get_text()
        assert "commit abc" in text and "2026-12-03" in text and "no run named" not in text
        assert "measured rates" in text
        matplotlib.pyplot.close(fig)
