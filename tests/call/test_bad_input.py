"""Bad input on the entry points beside the plain call: the custom op (eager and traced),
debug mode under the interpreter, and the input builder. Each case ends in a ValueError
naming the argument, what it expects and what it got, with every input and output as it
was (a traced graph reports the op's error through torch's own exception: docs/contract.md).
"""

import json
import subprocess
import sys

import pytest
import torch

import mla_kernels as mk
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.checks import check_outputs

pytestmark = pytest.mark.smoke  # in the GPU run's quick tier

SMALL = MLAShape("test-2h", num_heads=2)
SENTINEL = 7.0


def fresh(device, seed, **kw):
    args = dict(block_size=16, cache_dtype="bf16", weight_format="fp8_row", device=device,
                seed=seed)
    args.update(kw)
    inp = mk.build_inputs(SMALL, [20, 9], **args)
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    return inp


def _k_prefix_in_cache(inp):
    """The call's arguments with k_prefix's bytes inside k_buffer's (a bf16 cache of room)."""
    n, m = inp.k_prefix.numel(), inp.k_buffer.numel()
    big = torch.empty(max(m, n + 32), dtype=torch.bfloat16, device=inp.k_buffer.device)
    k_buffer = big[:m].view(inp.k_buffer.shape)
    k_buffer.copy_(inp.k_buffer)
    return inp.args()._replace(k_buffer=k_buffer, k_prefix=big[32: 32 + n].view(inp.k_prefix.shape))


def _op(*args, **kw):
    """The custom op on the call's arguments: the nine by position, the FP8 outputs'
    scales (the last two of GatherArgs) by keyword, as its schema takes them."""
    from mla_kernels import ops  # noqa: F401  registers torch.ops.mla_kernels

    if len(args) > 9:
        kw = dict(kw, k_out_scale=args[9], v_out_scale=args[10])
    return torch.ops.mla_kernels.gather_kv_b_proj(*args[:9], **kw)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_traced_op_refuses_an_output_inside_an_input(backend, device, seed):
    # Functionalization hands the op a copy of k_prefix at another address, so the eager
    # check would pass and the copy be written back over k_buffer: the traced check refuses.
    if backend == "inductor" and device == "cpu":
        pytest.importorskip("torch._inductor")
    args = _k_prefix_in_cache(fresh(device, seed))
    cache = args.k_buffer.clone()

    def layer(*a):
        _op(*a, variant="tiled")
        return a[7].sum()

    torch._dynamo.reset()
    with pytest.raises(RuntimeError) as err:  # torch's TorchRuntimeError carries the op's
        torch.compile(layer, fullgraph=True, backend=backend)(*args)
    msg = str(err.value)
    assert "ValueError" in msg and "k_prefix" in msg and "overlaps no other argument" in msg
    assert torch.equal(args.k_buffer, cache)
    with pytest.raises(ValueError, match="k_prefix: expected memory that overlaps"):
        _op(*args, variant="tiled")  # eager, the same rule
    assert torch.equal(args.k_buffer, cache)


BACKENDS = [None, "eager", "aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


def _runner(backend):
    """The op in a layer, called as it is (None) or compiled by ``backend``."""
    def layer(*a):
        _op(*a, variant="tiled")
        return a[7].sum()

    torch._dynamo.reset()
    if backend == "inductor":
        pytest.importorskip("torch._inductor")
    return layer if backend is None else torch.compile(layer, fullgraph=True, backend=backend)


def _outputs_overlapping(inp):
    """The call's arguments with v_prefix's bytes inside k_prefix's (one tensor, two views)."""
    room = torch.full((inp.k_prefix.numel(),), SENTINEL, dtype=torch.bfloat16,
                      device=inp.k_prefix.device)
    return inp.args()._replace(k_prefix=room.view(inp.k_prefix.shape),
                               v_prefix=room[64: 64 + inp.v_prefix.numel()]
                               .view(inp.v_prefix.shape))


def _outputs_in_two_storages_over_one_memory(inp):
    """k_prefix and v_prefix from one host buffer read twice: two storages, one memory."""
    if inp.k_prefix.device.type != "cpu":
        pytest.skip("torch.frombuffer makes CPU tensors")
    raw = bytearray(inp.k_prefix.nbytes)
    k = torch.frombuffer(raw, dtype=torch.bfloat16, count=inp.k_prefix.numel())
    v = torch.frombuffer(raw, dtype=torch.bfloat16, count=inp.v_prefix.numel())
    assert not torch._C._is_alias_of(k, v)  # no storage in common: only addresses show it
    k.fill_(SENTINEL)
    return inp.args()._replace(k_prefix=k.view(inp.k_prefix.shape),
                               v_prefix=v.view(inp.v_prefix.shape))


OVERLAPS = {"k_prefix inside k_buffer": (_k_prefix_in_cache, "k_prefix"),
            "v_prefix inside k_prefix": (_outputs_overlapping, "k_prefix"),
            "two storages over one memory": (_outputs_in_two_storages_over_one_memory,
                                             "k_prefix")}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(OVERLAPS))
def test_the_op_checks_overlaps_by_address_on_every_call(case, backend, device, seed):
    # A first legal call traces (or plans) the signature; the second, with the same shapes
    # and an overlap, finds that graph: a traced graph hands the launch copies of the
    # outputs, so only the check on the caller's own tensors can see it.
    run = _runner(backend)
    inp = fresh(device, seed)
    run(*inp.args())
    make, arg = OVERLAPS[case]
    args = make(fresh(device, seed))
    before = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]
    with pytest.raises((ValueError, RuntimeError)) as err:
        run(*args)
    msg = str(err.value)
    assert f"{arg}: expected memory that overlaps no other argument" in msg, msg
    assert "got bytes [0x" in msg
    assert all(torch.equal(a, b) for a, b in zip(args, before, strict=True)
               if isinstance(a, torch.Tensor))


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_op_names_a_negative_view_output(backend, device, seed):
    run = _runner(backend)
    inp = fresh(device, seed)
    with pytest.raises((ValueError, RuntimeError)) as err:
        run(*inp.args()._replace(k_prefix=inp.k_prefix._neg_view()))
    assert "k_prefix: expected a tensor with no pending negation" in str(err.value)
    assert bool((inp.k_prefix == SENTINEL).all()) and bool((inp.v_prefix == SENTINEL).all())


def test_a_traced_op_checks_the_arguments_while_tracing(device, seed):
    inp = fresh(device, seed)
    bad = inp.args()._replace(k_buffer=inp.k_buffer[:, :0])

    def layer(*a):
        _op(*a, variant="tiled")
        return a[7].sum()

    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="k_buffer: expected a page size"):
        torch.compile(layer, fullgraph=True, backend="aot_eager")(*bad)
    assert bool((inp.k_prefix == SENTINEL).all())


def test_the_op_takes_config_and_validate_as_the_call_does(device, seed):
    inp = fresh(device, seed)
    inp.poison_outputs()
    _op(*inp.args(), variant="tiled", config="TiledConfig(block_m=32, split=True)",
        validate=True)
    assert check_outputs(inp)["correct"]
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    with pytest.raises(ValueError, match="config: expected a TiledConfig"):
        _op(*inp.args(), variant="tiled", config="ChunkConfig(chunk=32)")
    inp.kv_indices[0] = inp.k_buffer.shape[0]  # out of range: validate=True finds it
    with pytest.raises(ValueError, match="kv_indices: expected block ids in"):
        _op(*inp.args(), variant="tiled", validate=True)
    assert bool((inp.k_prefix == SENTINEL).all()) and bool((inp.v_prefix == SENTINEL).all())


@pytest.mark.parametrize(("replace", "words"), [
    ({"variant": None}, ["variant", "str"]),
    ({"kv_indptr": [0, 1]}, ["kv_indptr", "Tensor"]),
])
def test_the_op_schema_refuses_through_torch_s_dispatcher(replace, words, device, seed):
    # The contract: torch's dispatcher checks the schema before the op runs (RuntimeError).
    inp = fresh(device, seed)
    args = inp.args()._replace(**{k: v for k, v in replace.items() if k != "variant"})
    with pytest.raises(RuntimeError) as err:
        _op(*args, variant=replace.get("variant", "tiled"))
    assert all(w in str(err.value) for w in words)
    assert bool((inp.k_prefix == SENTINEL).all())


def test_debug_checks_block_ids_on_the_host_under_the_interpreter(device, seed):
    # The interpreter runs no device asserts: debug's promise (a block id out of range
    # stops the call) is kept by a host check there, with validation off.
    if device != "cpu":
        pytest.skip("on a GPU debug mode compiles device asserts (tests/call/test_gpu_large.py)")
    inp = fresh(device, seed)
    inp.kv_indices[1] = 10**6
    for variant in ("tiled", "chunked"):
        with pytest.raises(ValueError, match=r"kv_indices: expected block ids in \[0, "):
            mk.gather_kv_b_proj(*inp.args(), variant=variant, validate=False, debug=True)
    assert bool((inp.k_prefix == SENTINEL).all()) and bool((inp.v_prefix == SENTINEL).all())


def test_a_bf16_cache_ignores_whatever_k_scale_is(device, seed):
    # The contract: a bf16 cache's k_scale is ignored, with validation on or off.
    inp = fresh(device, seed)
    for validate in (True, False):
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args()._replace(k_scale=[1.0]), variant="tiled",
                            validate=validate)
        assert check_outputs(inp)["correct"]


BUILD_CASES = [
    ({"contexts": [3.7]}, ["contexts", "ints >= 0", "3.7"]),
    ({"contexts": "17"}, ["contexts", "'17'"]),
    ({"contexts": [5, -1]}, ["contexts", "-1"]),
    ({"spare_rows": -5}, ["spare_rows", ">= 0", "-5"]),
    ({"spare_rows": -30}, ["spare_rows", "-30"]),
    ({"spare_blocks": 1.5}, ["spare_blocks", "1.5"]),
    ({"weight_scale_range": (0, 1.0)}, ["weight_scale_range", "0 < lo", "(0, 1.0)"]),
    ({"weight_scale_range": (2.0, 1.0)}, ["weight_scale_range", "(2.0, 1.0)"]),
    ({"weight_format": "mxfp4", "e8m0_range": (-7, 200)}, ["e8m0_range", "127", "(-7, 200)"]),
    ({"block_size": 0}, ["block_size", ">= 1", "0"]),
    ({"block_size": -4}, ["block_size", "-4"]),
    ({"k_scale": float("nan")}, ["k_scale", "finite", "nan"]),
    ({"out_dtype": torch.int8}, ["out_dtype", "torch.int8"]),
    ({"weight_format": "fp4"}, ["weight_format", "mxfp4", "'fp4'"]),
    ({"cache_dtype": ["fp8"]}, ["cache_dtype", "['fp8']"]),
    ({"shape": ["kimi-k3-tp8"]}, ["shape", "kimi-k3-tp8"]),
    ({"device": "tpu"}, ["device", "'tpu'"]),
]

# Sizes past int32 prefix sums or past memory: refused before anything is allocated.
SIZE_CASES = [
    ({"contexts": [2**31]}, ["contexts", "int32 prefix sums", "2147483648 tokens"]),
    ({"contexts": [2**30, 2**30]}, ["contexts", "int32 prefix sums", "2147483648 tokens"]),
    ({"block_size": 2**40}, ["block_size", "bytes of memory", "1099511627776"]),
    ({"spare_rows": 2**40}, ["spare_rows", "at most 2147483639", "1099511627776"]),
    ({"spare_blocks": 2**40}, ["spare_blocks", "int32 block ids", "1099511627776"]),
    ({"spare_indices": 2**40}, ["spare_indices", "int32 indices", "1099511627776"]),
    ({"contexts": [2**29] * 3}, ["contexts", "bytes of memory", "3 contexts of 1610612736"]),
    ({"spare_rows": 2**31 - 100}, ["spare_rows", "bytes of memory", "2147483548"]),
]


@pytest.mark.parametrize(("kw", "words"), BUILD_CASES, ids=[str(c[0]) for c in BUILD_CASES])
def test_the_input_builder_names_a_bad_argument(kw, words):
    kw = dict(kw)
    shape, contexts = kw.pop("shape", SMALL), kw.pop("contexts", [5, 3])
    with pytest.raises(ValueError) as err:
        mk.build_inputs(shape, contexts, **kw)
    msg = str(err.value)
    assert "expected" in msg and "got" in msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_the_input_builder_refuses_sizes_before_allocating():
    # A child process with a bounded address space: a builder that allocated first would
    # fail there on the allocator (or be stopped), not take the machine's memory.
    code = f"""
import json, resource
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
import mla_kernels as mk
from mla_kernels.core.shapes import MLAShape
out = []
for kw in {[c[0] for c in SIZE_CASES]!r}:
    contexts = kw.pop("contexts", [5, 3])
    try:
        mk.build_inputs(MLAShape("test-2h", num_heads=2), contexts, **kw)
        out.append("built")
    except Exception as e:
        out.append(type(e).__name__ + ": " + str(e))
print(json.dumps(out))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for (kw, words), msg in zip(SIZE_CASES, json.loads(r.stdout), strict=True):
        assert msg.startswith("ValueError: ") and "expected" in msg and "got" in msg, (kw, msg)
        for w in words:
            assert w in msg, f"{w!r} not in {msg!r}"


def test_the_input_builder_refuses_a_gpu_the_machine_lacks():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="device: expected 'cpu' or a CUDA device"):
        mk.build_inputs(SMALL, [5], device="cuda")


def test_the_input_builder_takes_the_ends_of_its_ranges(seed):
    inp = mk.build_inputs(SMALL, (0, 4), weight_format="mxfp4", e8m0_range=(-127, 127),
                          e8m0_full_span=True, seed=seed, spare_rows=0, spare_blocks=0,
                          spare_indices=0)
    codes = inp.kv_proj_scale.view(torch.uint8)
    assert int(codes.min()) == 0 and int(codes.max()) == 254  # never the NaN code
    assert inp.k_prefix.shape[0] == 4
