"""Bad input: a ValueError naming the argument, the expected and the actual value, and
outputs left exactly as they were; contents validated before the launch when asked (by
default under the interpreter); the public kernel's conventions."""

import os
import stat

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mla_kernels as mk
from mla_kernels import api
from mla_kernels.core.shapes import MLAShape
from mla_kernels.designs.tiled import TiledConfig
from mla_kernels.lab.checks import TOLERANCES, check_outputs
from mla_kernels.lab.measurements import write_csv_atomic

pytestmark = pytest.mark.smoke  # in the GPU run's quick tier

SMALL = MLAShape("test-2h", num_heads=2)
SENTINEL = 7.0
NAMES = ["k_buffer", "k_scale", "kv_indptr", "kv_indices", "kv_prefix_sum_context_lens",
         "kv_proj_weight", "kv_proj_scale", "k_prefix", "v_prefix", "k_out_scale", "v_out_scale"]


def fresh(device, seed=0, contexts=(20, 9), **kw):
    args = dict(block_size=16, cache_dtype="fp8", weight_format="fp8_row", device=device,
                seed=seed)
    args.update(kw)
    inp = mk.build_inputs(SMALL, list(contexts), **args)
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    return inp


def call_with(inp, **replace):
    args = dict(zip(NAMES, inp.args(), strict=True))
    kw = {k: replace.pop(k) for k in ("variant", "max_context_len", "config", "validate", "debug")
          if k in replace}
    args.update(replace)
    mk.gather_kv_b_proj(*args.values(), **kw)


def assert_untouched(inp):
    assert bool((inp.k_prefix == SENTINEL).all()) and bool((inp.v_prefix == SENTINEL).all())


def _overlap_v_with_k(i):
    flat = i.k_prefix.view(-1)
    n = i.v_prefix.numel()
    return {"v_prefix": flat[flat.numel() - n:].view(i.v_prefix.shape)}


def _k_out_in_cache(i):
    # k_prefix's bytes inside k_buffer's: the cache would be overwritten.
    rows, heads, d = i.k_prefix.shape
    store = torch.zeros(i.k_buffer.numel() + rows * heads * d * 2, dtype=torch.uint8,
                        device=i.k_buffer.device)
    kb = store[: i.k_buffer.numel()].view(i.k_buffer.dtype).view(i.k_buffer.shape)
    kb.copy_(i.k_buffer)
    k_out = store[64: 64 + rows * heads * d * 2].view(torch.bfloat16).view(rows, heads, d)
    return {"k_buffer": kb, "k_prefix": k_out}


def _v_out_on_weight(i):
    w = i.kv_proj_weight
    rows, heads, d = i.v_prefix.shape
    store = torch.zeros(max(w.numel(), rows * heads * d * 2), dtype=torch.uint8,
                        device=w.device)
    w2 = store[: w.numel()].view(w.dtype).view(w.shape)
    w2.copy_(w)
    return {"kv_proj_weight": w2,
            "v_prefix": store[: rows * heads * d * 2].view(torch.bfloat16).view(rows, heads, d)}


CASES = [
    # (name, build kwargs, replacement builder, expected substrings)
    ("k_buffer dims", {}, lambda i: {"k_buffer": i.k_buffer[0]}, ["k_buffer", "3 dimensions"]),
    ("k_buffer dtype", {}, lambda i: {"k_buffer": i.k_buffer.float()}, ["k_buffer", "float32"]),
    ("k_buffer width", {}, lambda i: {"k_buffer": i.k_buffer[..., :-1].contiguous()},
     ["k_buffer", "575"]),
    ("k_buffer strided", {}, lambda i: {"k_buffer": i.k_buffer.transpose(0, 1)},
     ["k_buffer", "contiguous"]),
    ("k_buffer not a tensor", {}, lambda i: {"k_buffer": "cache"},
     ["k_buffer", "torch.Tensor", "str"]),
    ("k_scale missing", {}, lambda i: {"k_scale": None}, ["k_scale", "fp8 cache"]),
    ("k_scale shape", {}, lambda i: {"k_scale": i.k_scale.repeat(2)}, ["k_scale", "[1]"]),
    ("k_scale dtype", {}, lambda i: {"k_scale": i.k_scale.double()}, ["k_scale", "float64"]),
    ("indptr dtype", {}, lambda i: {"kv_indptr": i.kv_indptr.long()}, ["kv_indptr", "int64"]),
    ("indices dtype", {}, lambda i: {"kv_indices": i.kv_indices.long()}, ["kv_indices"]),
    ("prefix length", {}, lambda i: {"kv_prefix_sum_context_lens":
                                     i.kv_prefix_sum_context_lens[:-1].contiguous()},
     ["kv_prefix_sum_context_lens", "[3]"]),
    ("head count", {}, lambda i: {"k_prefix": torch.full((i.k_prefix.shape[0], 3, 192), 7.0,
                                                         dtype=torch.bfloat16,
                                                         device=i.k_prefix.device),
                                  "v_prefix": torch.full((i.v_prefix.shape[0], 3, 128), 7.0,
                                                         dtype=torch.bfloat16,
                                                         device=i.v_prefix.device)},
     ["kv_proj_weight", "3 heads"]),
    ("v rows", {}, lambda i: {"v_prefix": i.v_prefix[:-1]}, ["v_prefix", "rows and heads"]),
    ("out dtype", {}, lambda i: {"v_prefix": i.v_prefix.to(torch.int32)}, ["v_prefix", "int32"]),
    ("k width", {}, lambda i: {"k_prefix": i.k_prefix[..., :-1].contiguous()},
     ["k_buffer", "512 + 63"]),
    ("row scale shape", {}, lambda i: {"kv_proj_scale": i.kv_proj_scale[:-1].contiguous()},
     ["kv_proj_scale", "[512]"]),
    ("row scale missing", {}, lambda i: {"kv_proj_scale": None}, ["kv_proj_scale", "fp8"]),
    ("row scale float16", {}, lambda i: {"kv_proj_scale": i.kv_proj_scale.half()},
     ["kv_proj_scale", "float16"]),
    ("block scale shape", {"weight_format": "fp8_block"},
     lambda i: {"kv_proj_scale": i.kv_proj_scale[:, :-1].contiguous()},
     ["kv_proj_scale", "[4, 4]", "(4, 3)"]),
    ("mx scale shape", {"weight_format": "mxfp4"},
     lambda i: {"kv_proj_scale": i.kv_proj_scale[:, :-1].contiguous()},
     ["kv_proj_scale", "[512, 16]"]),
    ("bf16 scale shape", {"weight_format": "bf16"},
     lambda i: {"kv_proj_scale": torch.ones(511, device=i.k_buffer.device)},
     ["kv_proj_scale", "[512]", "(511,)"]),
    ("fp8 weight as uint8", {},
     lambda i: {"kv_proj_weight": i.kv_proj_weight.view(torch.uint8)},
     ["kv_proj_weight", "float8_e4m3fn for an fp8 weight", "uint8 with a torch.float32 scale"]),
    ("weight dtype", {"weight_format": "bf16"},
     lambda i: {"kv_proj_weight": i.kv_proj_weight.half()}, ["kv_proj_weight", "float16"]),
    ("fnuz cache", {}, lambda i: {"k_buffer": i.k_buffer.view(torch.float8_e4m3fnuz)},
     ["k_buffer", "float8_e4m3fnuz"]),
    ("device", {}, lambda i: {"kv_indices": i.kv_indices.to("meta")},
     ["kv_indices", "device", "meta"]),
    ("variant", {}, lambda i: {"variant": "fastest"}, ["variant", "serial", "chunked", "fastest"]),
    ("variant list", {}, lambda i: {"variant": ["tiled"]}, ["variant", "str", "['tiled']"]),
    ("variant none", {}, lambda i: {"variant": None}, ["variant", "str", "None"]),
    ("config str", {}, lambda i: {"variant": "tiled", "config": "fast"}, ["config", "'fast'"]),
    ("config field", {}, lambda i: {"variant": "tiled", "config": {"block_m": 3}},
     ["config.block_m", "16, 32, 64, 128", "3"]),
    ("config type", {}, lambda i: {"variant": "tiled", "config": {"tile": 64}},
     ["config", "TiledConfig", "tile"]),
    ("config keys of mixed types", {}, lambda i: {"variant": "tiled", "config": {"x": 1, 2: 3}},
     ["config", "TiledConfig", "'x'", "2"]),
    ("config repr of another design", {}, lambda i: {"variant": "tiled",
                                                     "config": "ChunkConfig(chunk=32)"},
     ["config", "TiledConfig", "ChunkConfig"]),
    # Negative views hold their values unnegated: read raw, the result's sign would be wrong.
    ("negative weight view", {}, lambda i: {"kv_proj_weight": torch._neg_view(i.kv_proj_weight)},
     ["kv_proj_weight", "negation", "is_neg"]),
    ("negative bf16 cache view", {"cache_dtype": "bf16"},
     lambda i: {"k_buffer": torch._neg_view(i.k_buffer)}, ["k_buffer", "negation"]),
    ("negative output view", {}, lambda i: {"k_prefix": torch._neg_view(i.k_prefix)},
     ["k_prefix", "negation"]),
    ("negative scale view", {}, lambda i: {"kv_proj_scale": torch._neg_view(i.kv_proj_scale)},
     ["kv_proj_scale", "negation"]),
    ("page size 0", {}, lambda i: {"k_buffer": i.k_buffer[:, :0]},
     ["k_buffer", "page size", ", 0, 576)"]),
    ("scale as numpy", {}, lambda i: {"kv_proj_scale": i.kv_proj_scale.cpu().numpy()},
     ["kv_proj_scale", "torch.Tensor", "ndarray"]),
    ("scale as list", {}, lambda i: {"kv_proj_scale": [1.0] * 512},
     ["kv_proj_scale", "torch.Tensor", "list"]),
    ("every tensor on meta", {}, lambda i: {n: t.to("meta") for n, t in zip(NAMES, i.args(),
                                                                             strict=True)
                                            if t is not None},
     ["k_buffer", "device meta"]),
    ("validate not a bool", {}, lambda i: {"validate": "no"}, ["validate", "True or False", "'no'"]),
    ("hint negative", {}, lambda i: {"max_context_len": -1}, ["max_context_len", "-1"]),
    ("hint bool", {}, lambda i: {"max_context_len": True}, ["max_context_len", "True"]),
    ("hint huge", {}, lambda i: {"max_context_len": 2**40}, ["max_context_len", "2147483648"]),
    ("hint float", {}, lambda i: {"max_context_len": 20.0}, ["max_context_len", "20.0"]),
    ("hint str", {}, lambda i: {"max_context_len": "20"}, ["max_context_len", "'20'"]),
    ("outputs overlap", {}, _overlap_v_with_k, ["v_prefix", "k_prefix", "overlaps"]),
    ("output on the cache", {}, _k_out_in_cache, ["k_prefix", "k_buffer", "overlaps"]),
    ("output on the weight", {}, _v_out_on_weight, ["v_prefix", "kv_proj_weight", "overlaps"]),
]


@pytest.mark.parametrize(("name", "build", "replace", "words"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("twice", [False, True], ids=["first call", "after a good call"])
def test_bad_argument_raises_and_writes_nothing(name, build, replace, words, twice, device,
                                                seed):
    # "after a good call": the good call leaves a cached plan; the bad one must still fail.
    inp = fresh(device, seed, **build)
    if twice:
        call_with(inp, variant="tiled" if "config" in name else "auto")
        inp.k_prefix.fill_(SENTINEL)
        inp.v_prefix.fill_(SENTINEL)
    bad = replace(inp)
    with pytest.raises(ValueError) as err:
        call_with(inp, **bad)
    msg = str(err.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert "expected" in msg and "got" in msg
    assert_untouched(inp)
    for k in ("k_prefix", "v_prefix"):  # an output passed in place of the inputs' own
        if (k in bad and isinstance(bad[k], torch.Tensor) and bad[k].dtype == torch.bfloat16
                and bad[k].device.type != "meta"):  # a meta tensor has no values
            assert not bool(torch.isnan(bad[k]).any())


def test_a_plan_misses_when_a_tensor_changes_in_place(device, seed):
    # The cached check is keyed on shape, strides, dtype and device: resize_, as_strided_
    # and set_ on the same tensor objects are seen.
    inp = fresh(device, seed)
    mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    t = inp.total_tokens
    keep = inp.v_prefix.clone()
    inp.kv_proj_scale.resize_(inp.kv_proj_scale.numel() - 1)
    with pytest.raises(ValueError, match="kv_proj_scale"):
        mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    inp = fresh(device, seed)
    mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    inp.k_buffer.as_strided_(inp.k_buffer.shape, (1, inp.k_buffer.shape[0],
                                                  inp.k_buffer.shape[0] * inp.k_buffer.shape[1]))
    with pytest.raises(ValueError, match="k_buffer: expected a contiguous"):
        mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    inp = fresh(device, seed)
    mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    inp.v_prefix.set_(keep[: t - 1])  # fewer rows than k_prefix
    with pytest.raises(ValueError, match="v_prefix"):
        mk.gather_kv_b_proj(*inp.args(), variant="chunked")


# ------------------------------------------------ contents: validate_inputs and validate=
def test_validate_inputs_accepts_good_inputs(device, seed):
    inp = fresh(device, seed)
    mk.validate_inputs(*inp.args())
    mk.validate_inputs(*inp.args(), max_context_len=20)


def _nan_in_used_row(i):
    # fp8 e4m3fn's NaN code, in a row token 3 of sequence 0 reads.
    blk = int(i.kv_indices[0])
    i.k_buffer.view(torch.uint8)[blk, 3, 5] = 0x7F


CONTENT_CASES = [
    ("indptr step", lambda i: i.kv_indptr.__setitem__(1, 5), ["kv_indptr", "sequence 0"]),
    ("indptr order", lambda i: i.kv_indptr.__setitem__(2, 1), ["kv_indptr", "sequence 1"]),
    ("block id huge", lambda i: i.kv_indices.__setitem__(1, 10**6),
     ["kv_indices", "sequence 0", "1000000"]),
    ("block id -1", lambda i: i.kv_indices.__setitem__(2, -1), ["kv_indices", "sequence 1"]),
    ("indptr start", lambda i: i.kv_indptr.__setitem__(0, 1), ["kv_indptr[0] == 0"]),
    ("prefix sums", lambda i: i.kv_prefix_sum_context_lens.__setitem__(2, 45),
     ["kv_indptr", "ceil(25 / 16)"]),
    ("prefix order", lambda i: i.kv_prefix_sum_context_lens.__setitem__(2, 10),
     ["kv_prefix_sum_context_lens", "non-decreasing", "sequence 1"]),
    ("k_scale nan", lambda i: i.k_scale.fill_(float("nan")), ["k_scale", "finite value > 0"]),
    ("k_scale zero", lambda i: i.k_scale.fill_(0.0), ["k_scale", "> 0", "0.0"]),
    ("k_scale negative", lambda i: i.k_scale.fill_(-0.5), ["k_scale", "-0.5"]),
    ("weight scale inf", lambda i: i.kv_proj_scale.__setitem__(3, float("inf")),
     ["kv_proj_scale", "inf", "(3,)"]),
    ("weight scale zero", lambda i: i.kv_proj_scale.__setitem__(7, 0.0),
     ["kv_proj_scale", "0.0 at (7,)"]),
    ("nan in a cache row read", _nan_in_used_row, ["k_buffer", "token 3 of sequence 0"]),
]


@pytest.mark.parametrize(("name", "mutate", "words"), CONTENT_CASES,
                         ids=[c[0] for c in CONTENT_CASES])
def test_validation_names_the_first_bad_value(name, mutate, words, device, seed):
    inp = fresh(device, seed)
    mutate(inp)
    with pytest.raises(ValueError) as err:
        mk.validate_inputs(*inp.args())
    for w in words:
        assert w in str(err.value), f"{w!r} not in {str(err.value)!r}"
    # The call validates first when asked (and by default under the interpreter):
    # a ValueError, the outputs untouched, no out-of-bounds read.
    for flag in ([None, True] if device == "cpu" else [True]):
        with pytest.raises(ValueError):
            call_with(inp, validate=flag)
        assert_untouched(inp)


def test_validation_checks_e8m0_nan(device, seed):
    inp = fresh(device, seed, weight_format="mxfp4")
    inp.kv_proj_scale[5, 2] = 255
    with pytest.raises(ValueError, match=r"kv_proj_scale: expected e8m0 codes below 255.*\(5, 2\)"):
        mk.validate_inputs(*inp.args())


def test_nan_in_a_row_no_token_reads_is_fine(device, seed):
    inp = fresh(device, seed, spare_blocks=3)
    used = set(inp.kv_indices[: int(inp.kv_indptr[-1])].tolist())
    spare = next(b for b in range(inp.k_buffer.shape[0]) if b not in used)
    inp.k_buffer.view(torch.uint8)[spare] = 0x7F
    last = int(inp.kv_indices[int(inp.kv_indptr[1]) - 1])  # sequence 0: 20 tokens, 2 blocks
    inp.k_buffer.view(torch.uint8)[last, 4:] = 0x7F  # its slots 4.. hold no token
    mk.validate_inputs(*inp.args())


def test_validate_inputs_checks_hint(device, seed):
    inp = fresh(device, seed)
    with pytest.raises(ValueError, match="max_context_len.*sequence 0 has 20"):
        mk.validate_inputs(*inp.args(), max_context_len=19)


def test_validate_inputs_checks_output_rows(device, seed):
    inp = fresh(device, seed)
    args = list(inp.args())
    args[7], args[8] = inp.k_prefix[:28], inp.v_prefix[:28]  # 29 tokens
    with pytest.raises(ValueError, match="k_prefix: expected at least 29 rows"):
        mk.validate_inputs(*args)
    if device == "cpu":  # validated by default under the interpreter: no write past row 28
        with pytest.raises(ValueError, match="k_prefix: expected at least 29 rows"):
            mk.gather_kv_b_proj(*args)


def test_validation_is_off_by_default_on_a_gpu(monkeypatch, device, seed):
    if device == "cpu":
        pytest.skip("under the interpreter validation is on by default")
    inp = fresh(device, seed)
    called = []
    monkeypatch.setattr(api, "validate_inputs", lambda *a, **k: called.append(1))
    mk.gather_kv_b_proj(*inp.args())
    assert called == []


def test_grid_too_large_for_serial_raises_before_writing(device, seed):
    n = 65536
    inp = mk.build_inputs(SMALL, [0] * n + [3], block_size=16, device=device, spare_blocks=1,
                          seed=seed)
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    with pytest.raises(ValueError, match="kv_indptr: expected .* at most 65535 .* got 65537"):
        mk.gather_kv_b_proj(*inp.args(), variant="serial", validate=False)
    assert_untouched(inp)


# ------------------------------------------------ the hint
@pytest.mark.parametrize("variant", ["serial", "chunked", "tiled"])
def test_a_short_hint_leaves_later_tokens_unwritten_by_the_chunk_designs(variant, device, seed):
    # The contract: serial and chunked (whose grids the hint sizes) write no token at or
    # past max_context_len in its sequence, compiled or interpreted alike; the tiled
    # designs' grids come from the row count and ignore the hint.
    inp = fresh(device, seed, contexts=(70, 9))
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant, max_context_len=32, validate=False)
    k = inp.k_prefix.float()
    written = ~torch.isnan(k).any(dim=(1, 2))
    if variant == "tiled":
        assert bool(written[:79].all())
    else:
        assert bool(written[:32].all()) and not bool(written[32:70].any())
        assert bool(written[70:79].all())  # sequence 1: 9 tokens, under the hint


def test_a_hint_past_the_rows_is_clamped(device, seed):
    inp = fresh(device, seed)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="chunked", max_context_len=2**31 - 1)
    assert check_outputs(inp)["correct"]


# ------------------------------------------------ the public kernel's conventions
def _run(inp, **kw):
    """The rows holding tokens after a call (spare rows stay NaN, never equal)."""
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="chunked", **kw)
    t = inp.total_tokens
    return inp.k_prefix[:t].clone(), inp.v_prefix[:t].clone()


def test_k_scale_with_a_bf16_cache_is_ignored(device, seed):
    inp = fresh(device, seed, cache_dtype="bf16", weight_format="bf16")
    plain = _run(inp)
    inp.k_scale = torch.tensor([0.37], device=device)
    scaled = _run(inp)
    assert torch.equal(plain[0], scaled[0]) and torch.equal(plain[1], scaled[1])
    assert check_outputs(inp)["correct"]  # the reference ignores it too


@pytest.mark.parametrize("shape", ["row", "row2d"])
def test_bf16_per_row_scales_read_as_float32(shape, device, seed):
    inp = fresh(device, seed)
    bf = inp.kv_proj_scale.bfloat16()
    inp.kv_proj_scale = bf.float()  # the same values, bf16-representable
    want = _run(inp)
    inp.kv_proj_scale = bf if shape == "row" else bf[:, None].contiguous()
    got = _run(inp)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert check_outputs(inp)["correct"]


@pytest.mark.parametrize("kind", ["row", "block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_scaled_bf16_weight_applies_its_scale(kind, dtype, device, seed):
    inp = fresh(device, seed, weight_format="bf16")
    plain = _run(inp)
    n, k = inp.kv_proj_weight.shape
    shape = (n,) if kind == "row" else (-(-n // 128), -(-k // 128))
    inp.kv_proj_scale = torch.ones(shape, device=device, dtype=dtype)
    ones = _run(inp)
    if kind == "row":  # applied in the epilogue: a factor of 1 changes no bit
        assert torch.equal(plain[0], ones[0]) and torch.equal(plain[1], ones[1])
    assert check_outputs(inp)["correct"]
    g = torch.Generator().manual_seed(seed)
    inp.kv_proj_scale = (torch.rand(shape, generator=g) * 4 + 0.25).to(dtype).to(device)
    _run(inp)
    res = check_outputs(inp)
    assert res["correct"], res


# ------------------------------------------------ the launch reads no contents
class NoHostReads(TorchDispatchMode):
    """Fails on anything that reads a tensor's contents back to the host."""

    BANNED = ("_local_scalar_dense", "item", "_to_copy", "copy_", "equal", "is_nonzero",
              "nonzero", "tolist")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.BANNED:
            raise AssertionError(f"the launch path ran {func} (reads contents)")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("variant", ["auto", "serial", "chunked", "tiled", "tiled_tma"])
def test_the_launch_path_reads_no_tensor_contents(variant, monkeypatch, device, seed):
    from mla_kernels.designs import launch

    if device == "cpu":  # the interpreter reads everything: stub the kernel launch out
        monkeypatch.setattr(launch.JitLauncher, "__call__", lambda self, *args: None)
    inp = fresh(device, seed)
    api.clear_plans()
    for _ in range(2):  # the checked call, then the cached one
        with NoHostReads():
            mk.gather_kv_b_proj(*inp.args(), variant=variant, validate=False)


def test_the_dispatch_mode_bites():
    with pytest.raises(AssertionError, match="reads contents"), NoHostReads():
        torch.ones(3).sum().item()


# ------------------------------------------------ files
def test_files_get_the_user_s_mode(tmp_path):
    import pandas as pd

    path = write_csv_atomic(pd.DataFrame({"a": [1]}), tmp_path / "x.csv")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_tolerances_are_for_every_format():
    assert set(TOLERANCES) == {"bf16", "fp8_row", "fp8_block", "mxfp4"}
    assert TiledConfig().block_m == 64
