"""The call where serving engines make it: cached plans, several threads, torch.compile
through the custom op, CUDA-graph capture (tensors on a second GPU: test_second_gpu.py)."""

import threading

import pytest
import torch

import mla_kernels as mk
from mla_kernels import api
from mla_kernels.core.shapes import MLAShape
from mla_kernels.designs import launch
from mla_kernels.lab.checks import check_outputs

SMALL = MLAShape("test-2h", num_heads=2)


def test_a_repeated_call_is_checked_once(monkeypatch, device, seed):
    inp = mk.build_inputs(SMALL, [40, 7], block_size=16, device=device, seed=seed)
    api.clear_plans()
    checked = []
    real = api.check_arguments
    monkeypatch.setattr(api, "check_arguments", lambda *a: checked.append(1) or real(*a))
    for _ in range(3):
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
        assert check_outputs(inp)["correct"]
    assert checked == [1]
    # Other outputs of the same signature: the same plan, the new pointers.
    inp.k_prefix = torch.full_like(inp.k_prefix, float("nan"))
    inp.v_prefix = torch.full_like(inp.v_prefix, float("nan"))
    mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
    assert checked == [1] and check_outputs(inp)["correct"]


def test_the_latest_signature_is_found_without_building_the_key(monkeypatch, device, seed):
    # A forward pass's next layer: the plan of the call before, found by the tensor guard.
    inp = mk.build_inputs(SMALL, [40, 7], block_size=16, device=device, seed=seed)
    api.clear_plans()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
    looked = []

    class Counting(dict):
        def get(self, key, default=None):
            looked.append(key)
            return super().get(key, default)

    monkeypatch.setattr(api, "PLANS", Counting(api.PLANS))
    inp.k_prefix = torch.full_like(inp.k_prefix, float("nan"))
    inp.v_prefix = torch.full_like(inp.v_prefix, float("nan"))
    mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
    assert looked == [] and check_outputs(inp)["correct"]
    # Any other signature is looked up by its key, and runs as its own.
    for kw in ({"variant": "chunked", "validate": False},
               {"variant": "tiled", "validate": False, "max_context_len": 40},
               {"variant": "tiled", "validate": True}):
        before = len(looked)
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), **kw)
        assert len(looked) == before + 1, kw
        assert check_outputs(inp)["correct"], kw
    # A negative view of the weight right after a good call of its signature: refused.
    mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
    inp.poison_outputs()
    with pytest.raises(ValueError, match="kv_proj_weight"):
        mk.gather_kv_b_proj(*inp.args()._replace(kv_proj_weight=inp.kv_proj_weight._neg_view()),
                            variant="tiled", validate=False)
    assert bool(torch.isnan(inp.k_prefix).all())
    # One tensor in two places (the guard fails a repeated tensor): found by the full key.
    other = mk.build_inputs(SMALL, [40, 7], block_size=16, device=device, seed=seed,
                            out_dtype=torch.float8_e4m3fn)
    shared = other.args()._replace(v_out_scale=other.k_out_scale)
    other.v_out_scale = other.k_out_scale
    for _ in range(2):
        other.poison_outputs()
        mk.gather_kv_b_proj(*shared, variant="tiled", validate=False)
        assert check_outputs(other)["correct"]


def test_calls_from_several_threads(device, seed):
    api.clear_plans()
    inputs = [mk.build_inputs(SMALL, [9 + 5 * i, 3], block_size=16, device=device,
                              seed=seed + i) for i in range(4)]
    errors = []

    def work(inp):
        try:
            for _ in range(3):
                inp.poison_outputs()
                mk.gather_kv_b_proj(*inp.args(), variant="chunked")
                assert check_outputs(inp)["correct"]
        except Exception as e:  # reported below, with the thread's input
            errors.append((inp.contexts, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_torch_compile_fullgraph_traces_the_custom_op(device, seed):
    from mla_kernels import ops  # noqa: F401  registers torch.ops.mla_kernels

    inp = mk.build_inputs(SMALL, [33, 0, 5], block_size=16, device=device, seed=seed)
    t = inp.total_tokens

    def layer(k_buffer, k_scale, indptr, indices, cs, w, ws, k_out, v_out):
        torch.ops.mla_kernels.gather_kv_b_proj(k_buffer, k_scale, indptr, indices, cs, w, ws,
                                               k_out, v_out, "chunked", None)
        return k_out[:t].float().sum(dim=-1) + v_out[:t].float().sum(dim=-1)

    inp.poison_outputs()
    eager = layer(*inp.args()[:9])
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    inp.poison_outputs()
    got = compiled(*inp.args()[:9])
    assert check_outputs(inp)["correct"]
    assert torch.equal(got, eager)


@pytest.mark.gpu
def test_cuda_graph_capture_after_warm_up(seed):
    inp = mk.build_inputs(SMALL, [300, 44], block_size=16, device="cuda", seed=seed)
    for variant in ("tiled", "auto"):
        mk.gather_kv_b_proj(*inp.args(), variant=variant)  # warm up: compile, cache the plan
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
        inp.poison_outputs()
        graph.replay()
        torch.cuda.synchronize()
        assert check_outputs(inp)["correct"], variant


@pytest.mark.gpu
def test_fast_launch_matches_triton_s_own_and_follows_alignment(seed):
    if not launch.FAST_LAUNCH:
        pytest.skip("this triton takes Triton's own launch path")
    inp = mk.build_inputs("kimi-k3-tp8", [700, 1], block_size=1, device="cuda", seed=seed)
    api.clear_plans()
    outs = []
    for _ in range(3):  # Triton's path, then the cached kernel twice
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="tiled")
        outs.append((inp.k_prefix.clone(), inp.v_prefix.clone()))
    t = inp.total_tokens
    for k, v in outs[1:]:
        assert torch.equal(k[:t], outs[0][0][:t]) and torch.equal(v[:t], outs[0][1][:t])
    # Outputs 8 bytes off a 16-byte boundary: another specialisation, compiled and correct.
    store = torch.empty(inp.k_prefix.numel() * 2 + 8, dtype=torch.uint8, device="cuda")
    inp.k_prefix = store[8:].view(torch.bfloat16).view(inp.k_prefix.shape)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled")
    assert check_outputs(inp)["correct"]


# ------------------------------------------------------------------ the direct launch
def _launcher_module(name: str, base_len: int = 13):
    """A stand-in for a Triton backend's driver module with a launcher of Triton 3.6's
    layout: a C entry taking ``base_len`` leading arguments, wrapped by a closure that
    replaces each tensor-descriptor argument by its encoding."""
    import sys
    import types

    mod = types.ModuleType(name)
    mod._BASE_ARGS_FORMAT_LEN = base_len
    mod.encoded = []

    def make_tensordesc_arg(arg, metadata):
        mod.encoded.append(arg)
        return [("map", arg, metadata), 7, 8]
    mod.make_tensordesc_arg = make_tensordesc_arg

    def wrap(launcher, tensordesc_indices, tensordesc_meta):
        def inner(*args):
            out = list(args[:base_len])
            for i, a in enumerate(args[base_len:]):
                out.extend(make_tensordesc_arg(a, tensordesc_meta[sorted(tensordesc_indices)
                                                                  .index(i)])
                           if i in tensordesc_indices else [a])
            return launcher(*out)
        return inner

    class Launcher:
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid, launch_pdl = False, True

        def __init__(self, raw, indices, meta):
            self.launch = wrap(raw, indices, meta) if indices else raw

        def __call__(self, gx, gy, gz, stream, function, *args):
            self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid,
                        self.launch_pdl, None, None, *args)
    Launcher.__module__ = name
    mod.Launcher = Launcher
    sys.modules[name] = mod
    return mod


class _Compiled:
    function, packed_metadata = "fn", ("packed",)

    def __init__(self, run):
        self.run = run


def test_direct_launch_calls_the_entry_as_the_wrapper_does_and_encodes_once():
    mod = _launcher_module("fake_triton_driver_36")
    seen = []
    raw = print  # a builtin stands for the C entry; replaced below by a recorder
    run = mod.Launcher(raw, {2, 4}, ["m2", "m4"])
    # Record through the wrapper's own cell, as the C entry would receive the arguments.
    run.launch.__closure__[[c for c in run.launch.__code__.co_freevars].index("launcher")] \
        .cell_contents = lambda *a: seen.append(a)
    compiled = _Compiled(run)
    direct = launch.DirectLaunch.of(compiled, (5, 2, 1), n_args=6, tail=("T",))
    assert direct is not None
    d2, d4 = object(), object()
    args = [10, 11, d2, 13, d4, 15]
    compiled.run(5, 2, 1, 99, "fn", ("packed",), None, None, None, *args, "T")
    want = seen.pop()
    mod.encoded.clear()
    for _ in range(3):
        direct(args, 99)
        assert seen.pop() == want
    assert sorted(map(id, mod.encoded)) == sorted([id(d2), id(d4)])  # on the first call only
    other = object()
    direct([10, 11, other, 13, d4, 15], 7)
    assert len(mod.encoded) == 3 and mod.encoded[2] is other and seen.pop()[3] == 7


def test_direct_launch_without_descriptors_and_its_refusals():
    mod = _launcher_module("fake_triton_driver_36b")
    seen = []

    class Entry:  # a callable that is no Python function, as the C entry is
        def __call__(self, *a):
            seen.append(a)
    raw = Entry()
    run = mod.Launcher(raw, set(), [])
    direct = launch.DirectLaunch.of(_Compiled(run), (3, 1, 1), n_args=2, tail=())
    direct([1, 2], 5)
    assert seen == [(3, 1, 1, 5, "fn", False, True, None, None, ("packed",), None, None, None,
                     1, 2)]
    # Another layout, scratch buffers, a descriptor past the positional arguments: refused.
    assert launch.DirectLaunch.of(_Compiled(_launcher_module("fake_drv_other", 16).Launcher(
        raw, set(), [])), (1, 1, 1), 2, ()) is None
    scratch = mod.Launcher(raw, set(), [])
    scratch.global_scratch_size = 64
    assert launch.DirectLaunch.of(_Compiled(scratch), (1, 1, 1), 2, ()) is None
    assert launch.DirectLaunch.of(_Compiled(mod.Launcher(raw, {3}, ["m"])), (1, 1, 1), 2, ()) is None
    annotated = mod.Launcher(raw, set(), [])
    annotated.arg_annotations = ()
    assert launch.DirectLaunch.of(_Compiled(annotated), (1, 1, 1), 2, ()) is None
    # A Python function in the entry's place is a wrapper it does not know: refused.
    assert launch.DirectLaunch.of(_Compiled(mod.Launcher(lambda *a: None, set(), [])), (1, 1, 1), 2,
                           ()) is None


@pytest.mark.gpu
@pytest.mark.parametrize("variant, fmt, cache", [
    ("chunked", "mxfp4", "fp8"), ("tiled", "fp8_row", "fp8"), ("tiled_tma", "fp8_row", "fp8"),
    ("hopper_ws", "fp8_row", "fp8"), ("hopper_ws", "fp8_block", "fp8"),
    ("hopper_ws", "bf16", "fp8"), ("hopper_ws", "mxfp4", "fp8"),
    # Widened to a bf16 copy ahead of the kernel: two launches a call, both cached.
    ("hopper_ws", "fp8_row", "bf16"), ("hopper_ws", "mxfp4", "bf16")])
def test_cached_launch_over_many_outputs_matches_triton_s_path(variant, fmt, cache, seed):
    import triton

    inp = mk.build_inputs("kimi-k3-tp8", [700, 1], block_size=1, device="cuda", seed=seed,
                          weight_format=fmt, cache_dtype=cache)
    api.clear_plans()
    outs = [(torch.empty_like(inp.k_prefix), torch.empty_like(inp.v_prefix)) for _ in range(3)]
    t = inp.total_tokens
    first = []
    for rnd in range(2):  # Triton's path for the first call, then the cached launch
        for i, (k, v) in enumerate(outs):
            inp.k_prefix, inp.v_prefix = k, v
            inp.poison_outputs()
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
            assert check_outputs(inp)["correct"], (rnd, i)
            if rnd == 0:
                first.append((k[:t].clone(), v[:t].clone()))
                (plan,) = api.PLANS.values()
                launcher = getattr(plan.launch, "main", plan.launch)
                # Later calls must not go through Triton's binder again.
                launcher._slow = None
                widen = getattr(plan.launch, "widen", None)
                if widen is not None:
                    widen._slow = None
            else:
                assert torch.equal(k[:t], first[i][0]) and torch.equal(v[:t], first[i][1])
    if launch.FAST_LAUNCH:
        assert torch.cuda.current_device() in launcher.compiled
        if widen is not None:
            assert torch.cuda.current_device() in widen.compiled
    if triton.__version__.startswith("3.6."):
        direct = launcher.direct[torch.cuda.current_device()]
        # One encoding per (descriptor, address): the weight's (TMA-read unless MXFP4) and
        # three per output pair.
        weight = variant == "hopper_ws" and (fmt != "mxfp4" or cache == "bf16")
        outputs = 0 if variant in ("chunked", "tiled") else 9
        if widen is None:
            assert len(direct.cache) == outputs + weight
        else:  # the copy's address, as the caching allocator hands it out, call by call
            assert outputs + 1 <= len(direct.cache) <= outputs + 6
    launcher.direct.clear()  # the launcher's own wrapper: the same bits
    k, v = outs[0]
    inp.k_prefix, inp.v_prefix = k, v
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant)
    assert torch.equal(k[:t], first[0][0]) and torch.equal(v[:t], first[0][1])
    assert check_outputs(inp)["correct"]


def test_launch_hooks_count_only_when_one_is_set(monkeypatch):
    # Triton keeps an empty chain of launch hooks when none is set: the cached launch stays
    # on; a profiler's hook (or one assigned) sends launches through Triton's own path.
    assert not launch.hooks_set()
    chain = launch.TRITON_KNOBS.runtime.launch_enter_hook
    if hasattr(chain, "add"):
        def hook(*a):
            return None
        chain.add(hook)
        try:
            assert launch.hooks_set()
        finally:
            chain.remove(hook)
        assert not launch.hooks_set()
    monkeypatch.setattr(launch.TRITON_KNOBS.runtime, "launch_exit_hook", lambda *a: None)
    assert launch.hooks_set()
