"""Bad FP8-output arguments (the scales ``k_out_scale`` / ``v_out_scale`` and the outputs'
dtypes) on every entry: the call, the custom op eagerly, and the op in a compiled graph.
Each ends in a ValueError naming the argument, what it expects and what it got (a traced
graph reports it through torch's own exception: docs/contract.md), with every tensor's
bytes as they were.
"""

import pytest
import torch
from test_bad_input import _op  # the op on the call's arguments
from test_bad_input import fresh as bad_input_fresh

import mla_kernels as mk
from mla_kernels.core.shapes import MLAShape

pytestmark = pytest.mark.smoke  # in the GPU run's quick tier

FP8 = torch.float8_e4m3fn
SMALL = MLAShape("test-2h", num_heads=2)
SENTINEL = 7.0  # exact in e4m3 and bf16


def fresh(device, seed, out_dtype=FP8, **kw):
    """test_bad_input's inputs over an fp8 cache, FP8 outputs unless asked otherwise."""
    return bad_input_fresh(device, seed, **{"cache_dtype": "fp8", "out_dtype": out_dtype, **kw})


def _bytes(t):
    return t.resolve_neg().contiguous().view(-1).view(torch.uint8)


def _snapshot(args):
    """Every tensor argument's bytes (a negative view's values; a meta tensor has none)."""
    return [None if not isinstance(t, torch.Tensor) or t.device.type == "meta"
            else _bytes(t).clone() for t in args]


def _assert_unchanged(args, before):
    for name, t, b in zip(args._fields, args, before, strict=True):
        if b is not None:
            assert torch.equal(_bytes(t), b), f"{name} changed"


def _scale_inside(scale: str, out: str):
    """``scale`` a float32 view of the first 4 bytes of the output ``out`` (whose bytes,
    SENTINEL codes, read as a finite float32 > 0)."""
    def replace(i):
        raw = getattr(i, out).view(-1).view(torch.uint8)
        return {scale: raw[:4].view(torch.float32)}
    return replace


def _scale(i, value):
    return i.k_out_scale.clone().fill_(value)


def _bf16(t):
    return torch.full(t.shape, SENTINEL, dtype=torch.bfloat16, device=t.device)


def _fp8(t):
    return torch.full(t.shape, SENTINEL, dtype=FP8, device=t.device)


# (name, outputs' dtype, replacement builder, words the message holds)
CASES = [
    ("k_out_scale missing", FP8, lambda i: {"k_out_scale": None},
     ["k_out_scale", "float32 [1] tensor", "k_prefix is torch.float8_e4m3fn", "got None"]),
    ("v_out_scale missing", FP8, lambda i: {"v_out_scale": None},
     ["v_out_scale", "float32 [1] tensor", "v_prefix is torch.float8_e4m3fn", "got None"]),
    ("k_out_scale with bf16 outputs", torch.bfloat16,
     lambda i: {"k_out_scale": torch.ones(1, device=i.k_buffer.device)},
     ["k_out_scale", "None", "k_prefix is torch.bfloat16", "Tensor"]),
    ("v_out_scale with float32 outputs", torch.float32,
     lambda i: {"v_out_scale": torch.ones(1, device=i.k_buffer.device)},
     ["v_out_scale", "None", "v_prefix is torch.float32", "Tensor"]),
    ("k_out_scale float16", FP8, lambda i: {"k_out_scale": i.k_out_scale.half()},
     ["k_out_scale", "float32", "torch.float16"]),
    ("v_out_scale bfloat16", FP8, lambda i: {"v_out_scale": i.v_out_scale.bfloat16()},
     ["v_out_scale", "float32", "torch.bfloat16"]),
    ("k_out_scale float64", FP8, lambda i: {"k_out_scale": i.k_out_scale.double()},
     ["k_out_scale", "torch.float64"]),
    ("k_out_scale shape [2]", FP8, lambda i: {"k_out_scale": i.k_out_scale.repeat(2)},
     ["k_out_scale", "shape [1]", "(2,)"]),
    ("v_out_scale shape [1, 1]", FP8, lambda i: {"v_out_scale": i.v_out_scale.view(1, 1)},
     ["v_out_scale", "1 dimensions", "(1, 1)"]),
    ("k_out_scale empty", FP8, lambda i: {"k_out_scale": i.k_out_scale[:0]},
     ["k_out_scale", "shape [1]", "(0,)"]),
    # A [1] tensor is contiguous whatever its stride: a strided one needs two elements.
    ("k_out_scale strided", FP8, lambda i: {"k_out_scale": i.k_out_scale.repeat(4)[::2]},
     ["k_out_scale", "contiguous", "strides (2,)"]),
    ("v_out_scale on meta", FP8, lambda i: {"v_out_scale": i.v_out_scale.to("meta")},
     ["v_out_scale", "device", "meta"]),
    ("k_out_scale a negative view", FP8, lambda i: {"k_out_scale": torch._neg_view(i.k_out_scale)},
     ["k_out_scale", "negation", "is_neg"]),
    ("v_prefix bf16 beside fp8 k_prefix", FP8, lambda i: {"v_prefix": _bf16(i.v_prefix)},
     ["v_prefix", "dtype torch.float8_e4m3fn (that of k_prefix)", "torch.bfloat16"]),
    ("v_prefix fp8 beside bf16 k_prefix", torch.bfloat16, lambda i: {"v_prefix": _fp8(i.v_prefix)},
     ["v_prefix", "dtype torch.bfloat16 (that of k_prefix)", "torch.float8_e4m3fn"]),
    ("k_out_scale inside k_prefix", FP8, _scale_inside("k_out_scale", "k_prefix"),
     ["k_prefix", "overlaps no other argument", "k_out_scale holds bytes"]),
    ("v_out_scale inside v_prefix", FP8, _scale_inside("v_out_scale", "v_prefix"),
     ["v_prefix", "overlaps no other argument", "v_out_scale holds bytes"]),
    ("k_out_scale inside v_prefix", FP8, _scale_inside("k_out_scale", "v_prefix"),
     ["v_prefix", "overlaps no other argument", "k_out_scale holds bytes"]),
]

def test_a_scale_that_is_no_tensor(device, seed):
    # The call names it; the op's schema (Tensor?) is torch's dispatcher's to refuse
    # (a RuntimeError before the op runs: docs/contract.md).
    inp = fresh(device, seed)
    args = inp.args()._replace(k_out_scale=0.5)
    before = _snapshot(args)
    with pytest.raises(ValueError, match="k_out_scale: expected a torch.Tensor, got float"):
        mk.gather_kv_b_proj(*args, variant="tiled")
    with pytest.raises(RuntimeError, match="k_out_scale"):
        _op(*args, variant="tiled")
    _assert_unchanged(args, before)


# Contents, read by validate_inputs (validate=True; the default under the interpreter).
VALUE_CASES = [
    ("k_out_scale 0", lambda i: {"k_out_scale": _scale(i, 0.0)},
     ["k_out_scale", "a finite value >= 2^-126", "got 0.0"]),
    ("v_out_scale negative", lambda i: {"v_out_scale": _scale(i, -0.25)},
     ["v_out_scale", "a finite value >= 2^-126", "got -0.25"]),
    ("k_out_scale inf", lambda i: {"k_out_scale": _scale(i, float("inf"))},
     ["k_out_scale", "a finite value >= 2^-126", "got inf"]),
    ("v_out_scale nan", lambda i: {"v_out_scale": _scale(i, float("nan"))},
     ["v_out_scale", "a finite value >= 2^-126", "got nan"]),
    ("k_out_scale -0", lambda i: {"k_out_scale": _scale(i, -0.0)},
     ["k_out_scale", "a finite value >= 2^-126", "got -0.0"]),
]

ENTRIES = ["call", "call after a good call", "op"]


def _enter(entry, args, validate=None):
    if entry == "op":
        _op(*args, variant="tiled", validate=validate)
    else:  # the scales by keyword, as the call's docstring has them
        mk.gather_kv_b_proj(*args[:9], k_out_scale=args.k_out_scale,
                            v_out_scale=args.v_out_scale, variant="tiled", validate=validate)


def _refused(entry, inp, bad, words, validate=None):
    if entry == "call after a good call":  # a cached plan of the good signature first
        mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=validate)
        inp.k_prefix.fill_(SENTINEL)
        inp.v_prefix.fill_(SENTINEL)
    args = inp.args()._replace(**bad)
    before = _snapshot(args)
    with pytest.raises(ValueError) as err:
        _enter(entry, args, validate)
    msg = str(err.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert "expected" in msg and "got" in msg
    _assert_unchanged(args, before)
    assert bool((inp.k_prefix.float() == SENTINEL).all())
    assert bool((inp.v_prefix.float() == SENTINEL).all())


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("name", "out_dtype", "replace", "words"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_bad_fp8_argument_is_named(name, out_dtype, replace, words, entry, device, seed):
    inp = fresh(device, seed, out_dtype)
    _refused(entry, inp, replace(inp), words)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("name", "replace", "words"), VALUE_CASES,
                         ids=[c[0] for c in VALUE_CASES])
def test_a_bad_scale_value_is_named_when_validating(name, replace, words, entry, device, seed):
    inp = fresh(device, seed)
    bad = replace(inp)
    with pytest.raises(ValueError) as err:
        mk.validate_inputs(*inp.args()._replace(**bad))
    assert all(w in str(err.value) for w in words), str(err.value)
    _refused(entry, inp, bad, words, validate=True)
    if device == "cpu":  # validation is on by default under the interpreter
        _refused(entry, inp, bad, words, validate=None)


# A few through a compiled graph: a case refused while tracing (by the launch's fake
# implementation, inside Dynamo's RuntimeError), an overlap, and a value read at run time.
TRACED = ["k_out_scale missing", "k_out_scale with bf16 outputs", "k_out_scale float16",
          "v_prefix bf16 beside fp8 k_prefix", "k_out_scale inside k_prefix"]


def _compiled():
    def layer(*a):
        _op(*a, variant="tiled")
        return a[7].float().sum()

    torch._dynamo.reset()
    return torch.compile(layer, fullgraph=True, backend="aot_eager")


@pytest.mark.parametrize("name", TRACED)
def test_a_compiled_op_names_a_bad_fp8_argument(name, device, seed):
    _, out_dtype, replace, words = next(c for c in CASES if c[0] == name)
    inp = fresh(device, seed, out_dtype)
    args = inp.args()._replace(**replace(inp))
    before = _snapshot(args)
    with pytest.raises((ValueError, RuntimeError)) as err:
        _compiled()(*args)
    msg = str(err.value)
    assert "ValueError" in msg or isinstance(err.value, ValueError), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    _assert_unchanged(args, before)


def test_a_compiled_op_reads_the_scale_s_value_on_every_call(device, seed):
    # The graph traced with a good scale; the same graph, a scale of 0: validation (on by
    # default under the interpreter, asked for here) refuses it at run time.
    inp = fresh(device, seed)

    def layer(*a):
        _op(*a, variant="tiled", validate=True)
        return a[7].float().sum()

    torch._dynamo.reset()
    run = torch.compile(layer, fullgraph=True, backend="aot_eager")
    run(*inp.args())
    inp.k_prefix.fill_(SENTINEL)
    inp.v_prefix.fill_(SENTINEL)
    args = inp.args()._replace(v_out_scale=_scale(inp, 0.0))
    before = _snapshot(args)
    with pytest.raises((ValueError, RuntimeError)) as err:
        run(*args)
    assert ("v_out_scale: expected a finite value >= 2^-126 (a float32 whose reciprocal is "
            "finite), got 0.0") in str(err.value)
    _assert_unchanged(args, before)
