"""Tensors on the second GPU of a two-GPU machine while the first is current, as a
tensor-parallel rank makes the call (docs/contract.md, "Where the call works"): every design
that serves the problem there, the launch on that GPU's current stream, a plan per GPU, the
custom op eagerly and compiled, a CUDA graph captured on that GPU, FP8 outputs, hopper_ws's
dynamic tail (its counter on that GPU), and arguments split over the two GPUs, refused by
name before anything is written. The split's analogue that runs anywhere: one argument on
the meta device (or the CPU, beside GPU tensors).

On a two-GPU machine: ``TESTS_K=second_gpu bash scripts/device_run.sh <commit> tests-all``.
"""

import pytest
import torch
from test_bad_input import _op  # the op on the call's arguments

import mla_kernels as mk
from mla_kernels import api
from mla_kernels.api import target_device
from mla_kernels.core.problem import GatherArgs, check_arguments
from mla_kernels.core.shapes import MLAShape
from mla_kernels.designs import DESIGNS, launch, variant_names
from mla_kernels.lab.checks import check_outputs

FP8 = torch.float8_e4m3fn
SECOND = "cuda:1"
VARIANTS = variant_names()  # every design in the registry, and auto
# Every design over an fp8 per-row and a bf16 weight (an fp8 cache), and auto over an fp8
# weight and a bf16 cache (on an H200 hopper_ws, which widens the weight into a copy it
# allocates on the tensors' GPU). Each case compiles its kernels: the two-GPU run is kept
# within its step's limit on a cold compile cache.
CASES = [(v, fmt, "fp8") for v in VARIANTS for fmt in ("fp8_row", "bf16")] + [
    ("auto", "fp8_row", "bf16")]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
# GPU cycles the side stream sleeps before it writes the cache (about half a second on an
# H200): a launch on any other stream would read the cache before it is written.
SLEEP_CYCLES = 10**9


def build(seed, device=SECOND, fmt="fp8_row", cache="fp8", **kw):
    return mk.build_inputs("kimi-k3-tp8", [300, 0, 37], block_size=16, cache_dtype=cache,
                           weight_format=fmt, device=device, seed=seed, **kw)


def skip_unless_served(variant, inp):
    if variant == "auto":
        return
    prob = check_arguments(*inp.args())
    if not DESIGNS[variant].runs(prob, target_device(inp.k_buffer.device)):
        pytest.skip(f"{variant} does not serve {inp.weight_format} over a {inp.cache_dtype} "
                    "cache on this GPU")


def warmed_up(variant, seed):
    """Inputs on the second GPU, compiled and planned for ``variant`` by one call made with
    cuda:0 current, and a side stream of cuda:1."""
    inp = build(seed)
    skip_unless_served(variant, inp)
    with torch.cuda.device(0):
        mk.gather_kv_b_proj(*inp.args(), variant=variant)
        torch.cuda.synchronize(1)
    return inp, torch.cuda.Stream(device=1)


def written(inp):
    t = inp.total_tokens
    return inp.k_prefix[:t].view(torch.uint8).cpu(), inp.v_prefix[:t].view(torch.uint8).cpu()


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize(("variant", "fmt", "cache"), CASES)
def test_every_design_on_the_second_gpu(variant, fmt, cache, seed):
    inp = build(seed, fmt=fmt, cache=cache)
    skip_unless_served(variant, inp)
    api.clear_plans()
    with torch.cuda.device(0):
        for rnd in range(2):  # checked, then the cached plan
            inp.poison_outputs()
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
            assert torch.cuda.current_device() == 0  # the call gives the current device back
            torch.cuda.synchronize(1)
            res = check_outputs(inp)
            assert res["correct"], (rnd, res)
    (plan,) = api.PLANS.values()
    assert plan.device_index == 1


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_call_launches_on_the_second_gpu_s_current_stream(variant, seed):
    # The cache is written on cuda:1's current stream (a side stream) after a long sleep, and
    # the call is made with cuda:0 current: only a launch on that stream reads it written.
    inp, side = warmed_up(variant, seed)
    with torch.cuda.device(0):
        cache = inp.k_buffer.clone()
        inp.k_buffer.zero_()
        inp.poison_outputs()
        side.wait_stream(torch.cuda.current_stream(1))
        with torch.cuda.stream(side):  # cuda:1 current, side its current stream
            torch.cuda._sleep(SLEEP_CYCLES)
            inp.k_buffer.copy_(cache)
            with torch.cuda.device(0):  # cuda:1's current stream stays side
                assert torch.cuda.current_stream(1) == side
                mk.gather_kv_b_proj(*inp.args(), variant=variant)
        torch.cuda.synchronize(1)
        res = check_outputs(inp)
        assert res["correct"], res


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("variant", VARIANTS)
def test_one_signature_on_each_of_the_second_gpu_and_the_first_gets_a_plan_each(variant,
                                                                                seed):
    # One seed: the same values and the same signature but for the devices.
    inputs = [build(seed), build(seed, device="cuda:0")]
    skip_unless_served(variant, inputs[0])
    api.clear_plans()
    with torch.cuda.device(0):
        for rnd in range(2):
            for inp in inputs:
                inp.poison_outputs()
                mk.gather_kv_b_proj(*inp.args(), variant=variant)
                torch.cuda.synchronize(inp.k_buffer.device)
                res = check_outputs(inp)
                assert res["correct"], (rnd, str(inp.k_buffer.device), res)
    plans = sorted(api.PLANS.values(), key=lambda p: p.device_index)
    assert [p.device_index for p in plans] == [0, 1]
    if launch.FAST_LAUNCH:  # each plan's compiled kernel is the one loaded on its own GPU
        for plan in plans:
            launcher = getattr(plan.launch, "main", plan.launch)
            assert list(launcher.compiled) == [plan.device_index], variant
    # The same kernel over the same values: the same bytes on either GPU.
    (k1, v1), (k0, v0) = (written(inp) for inp in inputs)
    assert torch.equal(k1, k0) and torch.equal(v1, v0)


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("backend", [None, "aot_eager", "inductor"])
def test_the_op_on_the_second_gpu_eagerly_and_compiled(backend, seed):
    from mla_kernels import ops  # noqa: F401  registers torch.ops.mla_kernels

    inp = build(seed)
    t = inp.total_tokens

    def layer(*a):
        _op(*a, variant="auto")
        return a[7][:t].float().sum(dim=-1) + a[8][:t].float().sum(dim=-1)

    if backend == "inductor":
        pytest.importorskip("torch._inductor")
    torch._dynamo.reset()
    run = layer if backend is None else torch.compile(layer, fullgraph=True, backend=backend)
    with torch.cuda.device(0):
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="auto")
        torch.cuda.synchronize(1)
        want = written(inp)
        for rnd in range(2):  # traced (or planned), then the cached graph (or plan)
            inp.poison_outputs()
            got = run(*inp.args())
            torch.cuda.synchronize(1)
            assert got.device == torch.device(SECOND)
            res = check_outputs(inp)
            assert res["correct"], (rnd, res)
            k, v = written(inp)
            assert torch.equal(k, want[0]) and torch.equal(v, want[1]), rnd


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_cuda_graph_captured_on_the_second_gpu(variant, seed):
    # Captured on a stream of cuda:1 (torch.cuda.graph makes cuda:1 current for the capture),
    # the call made with cuda:0 current inside it; replayed with cuda:0 current.
    api.clear_plans()
    inp, side = warmed_up(variant, seed)  # outside the capture
    with torch.cuda.device(0):
        graphs = []
        for planned in (True, False):
            if not planned:  # a first call of the signature during capture: checked, not cached
                api.clear_plans()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                with torch.cuda.device(0):
                    mk.gather_kv_b_proj(*inp.args(), variant=variant)
            assert torch.cuda.current_device() == 0
            assert len(api.PLANS) == (1 if planned else 0), planned
            graphs.append(graph)
        for planned, graph in zip((True, False), graphs, strict=True):
            inp.poison_outputs()
            graph.replay()
            torch.cuda.synchronize(1)
            res = check_outputs(inp)
            assert res["correct"], (planned, res)



@pytest.mark.gpu
@two_gpus
def test_the_dynamic_tail_on_the_second_gpu_takes_its_counter_there(seed):
    # hopper_ws's dynamic tail (HopperWSConfig.tail_items) keeps a counter per device and
    # stream: a long context on cuda:1, called with cuda:0 current, eagerly and from a graph
    # captured on a stream of cuda:1, with the outputs of static runs and its counter left
    # at zero on cuda:1.
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.designs.hopper_ws.tail import stream_counter

    inp = mk.build_inputs("kimi-k3-tp8", [20000], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=SECOND, seed=seed)
    skip_unless_served("hopper_ws", inp)
    config = HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True,
                            tail_items=2)
    with torch.cuda.device(0):
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws",
                            config=HopperWSConfig(mma_groups=2, ring_depth=6,
                                                  latent_in_registers=True))
        torch.cuda.synchronize(1)
        static = written(inp)
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=config)
        torch.cuda.synchronize(1)
        assert all(torch.equal(a, b) for a, b in zip(written(inp), static, strict=True))
        with torch.cuda.device(1):
            view, _ = stream_counter(1)
        assert view.device == torch.device(SECOND) and int(view.item()) == 0
        side = torch.cuda.Stream(device=1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            with torch.cuda.device(0):
                mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=config)
        for _ in range(2):
            inp.poison_outputs()
            graph.replay()
            torch.cuda.synchronize(1)
            assert all(torch.equal(a, b) for a, b in zip(written(inp), static, strict=True))


def test_a_capture_is_looked_for_on_the_tensors_gpu_not_the_current_one(monkeypatch):
    # What the capture test above holds on two GPUs, here with torch's CUDA state stood in
    # for: cuda:1's current stream capturing while cuda:0 is current. A plan made then is
    # not cached only if the call asks about cuda:1.
    import contextlib

    current = [0]

    @contextlib.contextmanager
    def device(d):
        was, current[0] = current[0], torch.device(d).index
        try:
            yield
        finally:
            current[0] = was

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: current[0] == 1)
    assert api._capturing(torch.device("cuda", 1))
    assert not api._capturing(torch.device("cuda", 0))
    assert not api._capturing(torch.device("cpu"))
    assert current == [0]


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("variant", ["tiled", "auto"])  # a portable design; hopper_ws on an H200
def test_fp8_outputs_on_the_second_gpu(variant, seed):
    inp = build(seed, out_dtype=FP8)
    skip_unless_served(variant, inp)
    assert inp.k_out_scale.device == inp.v_out_scale.device == torch.device(SECOND)
    api.clear_plans()
    with torch.cuda.device(0):
        # Checked, the cached plan, then the cached plan with both scales doubled in place:
        # read on cuda:1 at every call (doubling only shrinks the stored magnitudes).
        for rnd in range(3):
            if rnd == 2:
                inp.k_out_scale.mul_(2.0)
                inp.v_out_scale.mul_(2.0)
            inp.poison_outputs()
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
            torch.cuda.synchronize(1)
            res = check_outputs(inp)  # by the rule at the scales as they now are
            assert res["correct"] and "fp8_exact_share" in res, (rnd, res)
    assert len(api.PLANS) == 1


# ------------------------------------------------------------------ arguments split over devices
SPLIT_VARIANT = "tiled"  # a portable design: the refusals run under the interpreter too


def _layer(*a):
    _op(*a, variant=SPLIT_VARIANT)


def _calls():
    """The entry points a split call must be refused by: the call, the op eagerly, and the
    op in a graph traced afresh (torch's TorchRuntimeError carries the op's ValueError)."""
    def compiled(*a):
        torch._dynamo.reset()
        return torch.compile(_layer, fullgraph=True, backend="aot_eager")(*a)
    return {"call": (lambda *a: mk.gather_kv_b_proj(*a, variant=SPLIT_VARIANT), ValueError),
            "op": (_layer, ValueError), "compiled op": (compiled, RuntimeError)}


def _values(t):
    return None if not isinstance(t, torch.Tensor) or t.device.type == "meta" else t.clone()


def assert_refused_untouched(args, name, words):
    """Every entry point refuses ``args`` (``name`` on another device) with a ValueError
    holding each of ``words``; no argument's values changed, the outputs' NaN poison
    included."""
    before = [_values(t) for t in args]
    for how, (call, error) in _calls().items():
        with pytest.raises(error) as err:
            call(*args)
        msg = str(err.value)
        assert all(w in msg for w in words), (name, how, msg)
        if error is RuntimeError:
            assert "ValueError" in msg, (name, how, msg)
        for i, (t, was) in enumerate(zip(args, before, strict=True)):
            if was is not None:  # as bytes: NaN codes compare equal
                assert torch.equal(t.view(torch.uint8), was.view(torch.uint8)), (name, how, i)
    for t in args[7:9]:
        if t.device.type != "meta":
            assert bool(torch.isnan(t.float()).all()), name


def device_words(name, home, other):
    """What the refusal of ``name`` on ``other`` beside tensors on ``home`` names: the
    argument, k_buffer's device and its own. k_buffer itself moved, the first argument
    checked against it names both devices."""
    if name == "k_buffer":
        return [f"expected device {other} (that of k_buffer), got {home}"]
    return [f"{name}: expected device {home} (that of k_buffer), got {other}"]


@pytest.mark.gpu
@two_gpus
def test_arguments_split_over_the_second_gpu_and_the_first_are_refused_by_name(seed):
    # FP8 outputs: every one of the eleven arguments is a tensor.
    inp = build(seed, out_dtype=FP8)
    with torch.cuda.device(0):
        # A good call: its plan must serve no split one.
        mk.gather_kv_b_proj(*inp.args(), variant=SPLIT_VARIANT)
        torch.cuda.synchronize(1)
        for i, name in enumerate(GatherArgs._fields):
            inp.poison_outputs()
            args = list(inp.args())
            args[i] = args[i].to("cuda:0")
            assert_refused_untouched(args, name, device_words(name, SECOND, "cuda:0"))
            assert bool(torch.isnan(inp.k_prefix.float()).all()
                        and torch.isnan(inp.v_prefix.float()).all()), name


@pytest.mark.parametrize("other", ["meta", "cpu"])
def test_an_argument_off_k_buffer_s_device_is_refused_by_name(other, device, seed):
    # The split's analogue on any machine: one argument on another device (the meta device,
    # or the CPU beside GPU tensors), each in turn.
    if other == device:
        pytest.skip("the CPU is k_buffer's device under the interpreter")
    inp = mk.build_inputs(MLAShape("test-2h", num_heads=2), [20, 0, 9], block_size=16,
                          cache_dtype="fp8", weight_format="fp8_row", device=device,
                          seed=seed, out_dtype=FP8)
    mk.gather_kv_b_proj(*inp.args(), variant=SPLIT_VARIANT)  # its plan must serve no split call
    home = str(inp.k_buffer.device)
    for i, name in enumerate(GatherArgs._fields):
        inp.poison_outputs()
        args = list(inp.args())
        args[i] = args[i].to(other)
        # k_buffer on the meta device (or the CPU with the interpreter off) is refused by
        # its own device.
        words = (["k_buffer: expected a", f"got device {other}"] if name == "k_buffer"
                 else device_words(name, home, other))
        assert_refused_untouched(args, name, words)
