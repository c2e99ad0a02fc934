"""Bad input: a ValueError naming the argument, the expected and the actual value, and
outputs left exactly as they were."""

import pytest
import torch

import mla_kernels as mk
from mla_kernels.shapes import MLAShape

SMALL = MLAShape("test-2h", num_heads=2)
SENTINEL = 7.0


def fresh(device, seed=0, **kw):
    args = dict(block_size=16, cache_dtype="fp8", weight_format="fp8_row", device=device,
                seed=seed)
    args.update(kw)
    inp = mk.build_inputs(SMALL, [20, 9], **args)
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    return inp


def call_with(inp, **replace):
    names = ["k_buffer", "k_scale", "kv_indptr", "kv_indices", "kv_prefix_sum_context_lens",
             "kv_proj_weight", "kv_proj_scale", "k_prefix", "v_prefix"]
    args = dict(zip(names, inp.args(), strict=True))
    kw = {k: replace.pop(k) for k in ("variant", "max_context_len") if k in replace}
    args.update(replace)
    mk.gather_kv_b_proj(*args.values(), **kw)


def assert_untouched(inp):
    assert bool((inp.k_prefix == SENTINEL).all()) and bool((inp.v_prefix == SENTINEL).all())


CASES = [
    # (name, build kwargs, replacement builder, expected substrings)
    ("k_buffer dims", {}, lambda i: {"k_buffer": i.k_buffer[0]}, ["k_buffer", "3 dimensions"]),
    ("k_buffer dtype", {}, lambda i: {"k_buffer": i.k_buffer.float()}, ["k_buffer", "float32"]),
    ("k_buffer width", {}, lambda i: {"k_buffer": i.k_buffer[..., :-1].contiguous()},
     ["k_buffer", "575"]),
    ("k_buffer strided", {}, lambda i: {"k_buffer": i.k_buffer.transpose(0, 1)},
     ["k_buffer", "contiguous"]),
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
    ("block scale shape", {"weight_format": "fp8_block"},
     lambda i: {"kv_proj_scale": i.kv_proj_scale[:, :-1].contiguous()},
     ["kv_proj_scale", "[4, 4]", "(4, 3)"]),
    ("mx scale shape", {"weight_format": "mxfp4"},
     lambda i: {"kv_proj_scale": i.kv_proj_scale[:, :-1].contiguous()},
     ["kv_proj_scale", "[512, 16]"]),
    ("bf16 with scale", {"weight_format": "bf16"},
     lambda i: {"kv_proj_scale": torch.ones(512, device=i.k_buffer.device)},
     ["kv_proj_scale", "None for a bf16 weight"]),
    ("weight dtype", {"weight_format": "bf16"},
     lambda i: {"kv_proj_weight": i.kv_proj_weight.half()}, ["kv_proj_weight", "float16"]),
    ("fnuz cache", {}, lambda i: {"k_buffer": i.k_buffer.view(torch.float8_e4m3fnuz)},
     ["k_buffer", "float8_e4m3fnuz"]),
    ("variant", {}, lambda i: {"variant": "fastest"}, ["variant", "serial", "chunked", "fastest"]),
    ("hint", {}, lambda i: {"max_context_len": -1}, ["max_context_len", "-1"]),
]


@pytest.mark.parametrize(("name", "build", "replace", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_argument_raises_and_writes_nothing(name, build, replace, words, device):
    inp = fresh(device, **build)
    with pytest.raises(ValueError) as err:
        call_with(inp, **replace(inp))
    msg = str(err.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert "expected" in msg and "got" in msg
    assert_untouched(inp)


def test_device_mismatch(device):
    if device == "cpu":
        pytest.skip("needs a second device")
    inp = fresh(device)
    with pytest.raises(ValueError, match="kv_indices.*device"):
        call_with(inp, kv_indices=inp.kv_indices.cpu())
    assert_untouched(inp)


# ------------------------------------------------ contents: validate_inputs
def test_validate_inputs_accepts_good_inputs(device):
    inp = fresh(device)
    mk.validate_inputs(*inp.args())
    mk.validate_inputs(*inp.args(), max_context_len=20)


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda i: i.kv_indptr.__setitem__(1, 5), ["kv_indptr", "sequence 0"]),
    (lambda i: i.kv_indptr.__setitem__(2, 1), ["kv_indptr", "sequence 1"]),
    (lambda i: i.kv_indices.__setitem__(1, 10_000), ["kv_indices", "sequence 0", "10000"]),
    (lambda i: i.kv_indices.__setitem__(2, -1), ["kv_indices", "sequence 1"]),
    (lambda i: i.kv_indptr.__setitem__(0, 1), ["kv_indptr[0] == 0"]),
])
def test_validate_inputs_names_first_bad_sequence(mutate, words, device):
    inp = fresh(device)
    mutate(inp)
    with pytest.raises(ValueError) as err:
        mk.validate_inputs(*inp.args())
    for w in words:
        assert w in str(err.value), f"{w!r} not in {str(err.value)!r}"


def test_validate_inputs_checks_hint(device):
    inp = fresh(device)
    with pytest.raises(ValueError, match="max_context_len.*sequence 0 has 20"):
        mk.validate_inputs(*inp.args(), max_context_len=19)


def test_validate_inputs_checks_output_rows(device):
    inp = fresh(device)
    args = list(inp.args())
    args[7], args[8] = inp.k_prefix[:28], inp.v_prefix[:28]  # 29 tokens
    with pytest.raises(ValueError, match="k_prefix: expected at least 29 rows"):
        mk.validate_inputs(*args)


def test_grid_too_large_for_serial_raises_before_writing(device, seed):
    n = 65536
    inp = mk.build_inputs(SMALL, [0] * n + [3], block_size=16, device=device, spare_blocks=1,
                          seed=seed)
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    with pytest.raises(ValueError, match="kv_indptr: expected .* at most 65535 .* got 65537"):
        mk.gather_kv_b_proj(*inp.args(), variant="serial")
    assert_untouched(inp)
