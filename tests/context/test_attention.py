"""Prefix attention over expanded K/V and the merge by log-sum-exp, against the float32
reference (computed over the keys in chunks), under the interpreter on a CPU and compiled
on a GPU. Queries and keys are random draws, never zeros; outputs poisoned with NaN."""

import math

import pytest
import torch

from mla_kernels.context import attention, attention_reference, merge_attention, prefix_attention
from mla_kernels.context.attention import (
    LONG_KEYS,
    Blocking,
    expanded_blocking,
    fewest_waves,
    keys_per_split,
    split_by_waves,
    split_count,
)
from mla_kernels.context.merge import merge_parts
from mla_kernels.lab.context_checks import attention_errors, judge

FP8 = torch.float8_e4m3fn


def draw(seed, n, h, c, device, dk=192, dv=128, spare=5):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, h, dk, generator=g) * 1.5
    k = torch.randn(c + spare, h, dk, generator=g)
    v = torch.randn(c + spare, h, dv, generator=g) * 3
    return q.bfloat16().to(device), k.bfloat16().to(device), v.bfloat16().to(device)


def poisoned(n, h, d, device, dtype=torch.bfloat16):
    return (torch.full((n, h, d), float("nan"), dtype=dtype, device=device),
            torch.full((n, h), float("nan"), device=device))


@pytest.mark.parametrize(("n", "c", "splits"), [(5, 150, 1), (5, 150, 3), (70, 97, 2),
                                                (16, 300, None)])
def test_bf16_matches_reference(n, c, splits, device, seed):
    # n = 5 pads a 16-row tile, 70 spans two 64-row tiles; C no multiple of a key tile;
    # three splits of 150 keys leave the last one short; k and v hold rows past C.
    q, k, v = draw(seed, n, 2, c, device)
    out, lse = poisoned(n, 2, 128, device)
    prefix_attention(q, k, v, n_keys=c, num_splits=splits, out=out, lse=lse)
    ref = attention_reference(q, k, v, n_keys=c, chunk=64)
    errs = attention_errors(out, lse, ref)
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize(("c", "splits"), [(256, 2), (250, 3)])
def test_head_dims_padded_to_a_power_of_two(c, splits, device, seed):
    # Dk = 72 loads as 64 + 8 (padded to 16), Dv = 40 padded to 64: the padded columns are
    # masked both in whole key tiles (256 keys) and in a split's partial tile (250).
    q, k, v = draw(seed, 9, 2, c, device, dk=72, dv=40)
    out, lse = poisoned(9, 2, 40, device)
    prefix_attention(q, k, v, n_keys=c, num_splits=splits, out=out, lse=lse)
    errs = attention_errors(out, lse, attention_reference(q, k, v, n_keys=c, chunk=64))
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize(("n", "c", "splits", "tiles"),
                         [(5, 150, 3, Blocking(16, 32, 4, 2, tma=True)),
                          (70, 97, 1, Blocking(64, 64, 4, 3, tma=True)),
                          (9, 300, 4, Blocking(16, 16, 4, 3, tma=True))])
def test_tiles_through_descriptors(n, c, splits, tiles, device, seed):
    # K and V read through tensor descriptors over the first C rows: the rows past C are
    # NaN, so a tile that read them (the last split's partial one) would show; the splits'
    # bounds fall inside tiles' reach of the next split's real keys, which are masked.
    q, k, v = draw(seed, n, 2, c, device, spare=40)
    k[c:], v[c:] = float("nan"), float("nan")
    assert attention.tma_allowed(q, k, v)
    out, lse = poisoned(n, 2, 128, device)
    part_o = torch.full((splits, n, 2, 128), float("nan"), device=device)
    part_lse = torch.full((splits, n, 2), float("nan"), device=device)
    attention.launch_prefix(q, k, v, None, None, c, 192 ** -0.5, splits, part_o, part_lse,
                            tiles)
    merge_parts(part_o, part_lse, splits, out, lse)
    errs = attention_errors(out, lse, attention_reference(q, k, v, n_keys=c, chunk=64))
    assert judge(errs, "bf16"), errs


def test_descriptors_only_where_the_tensors_allow(device, seed):
    q, k, v = draw(seed, 4, 2, 64, device)
    assert attention.tma_allowed(q, k, v)
    assert not attention.tma_allowed(q, k.to(FP8), v.to(FP8))  # widened in registers
    q72, k72, v40 = draw(seed, 4, 2, 64, device, dk=72, dv=40)
    assert not attention.tma_allowed(q72, k72, v40)  # parts of 8 and 40 columns
    wide = torch.zeros(k.shape[0], 2, 193, dtype=k.dtype, device=device)[:, :, :192]
    assert not attention.tma_allowed(q, wide, v)  # heads not packed in a row
    # A blocking asking for descriptors where the tensors refuse them reads by pointers.
    out, lse = poisoned(4, 2, 40, device)
    part_o = torch.full((2, 4, 2, 40), float("nan"), device=device)
    part_lse = torch.full((2, 4, 2), float("nan"), device=device)
    attention.launch_prefix(q72, k72, v40, None, None, 64, 72 ** -0.5, 2, part_o, part_lse,
                            Blocking(16, 32, 4, 2, tma=True))
    merge_parts(part_o, part_lse, 2, out, lse)
    errs = attention_errors(out, lse, attention_reference(q72, k72, v40, n_keys=64))
    assert judge(errs, "bf16"), errs


def test_fp8_kv_with_scales(device, seed):
    q, k, v = draw(seed, 9, 2, 200, device)
    ks = torch.tensor([k.float().abs().amax() / 448 * 3], device=device)  # scales far from 1
    vs = torch.tensor([v.float().abs().amax() / 448 * 1.7], device=device)  # none saturates
    k8 = (k.float() / ks).clamp(-448, 448).to(FP8)
    v8 = (v.float() / vs).clamp(-448, 448).to(FP8)
    out, lse = poisoned(9, 2, 128, device)
    prefix_attention(q, k8, v8, k_scale=ks, v_scale=vs, n_keys=200, num_splits=2, out=out,
                     lse=lse)
    own = attention_reference(q, k8, v8, n_keys=200, k_scale=ks, v_scale=vs)
    errs = attention_errors(out, lse, own)
    assert judge(errs, "bf16"), errs  # the dequantised FP8 K/V, as exactly as bf16 ones
    truth = attention_reference(q, k, v, n_keys=200)
    errs = attention_errors(out, lse, truth)
    assert judge(errs, "fp8"), errs
    # A scale left out is no small error: the LSE moves by far more than the tolerance.
    wrong, wrong_lse = prefix_attention(q, k8, v8, k_scale=ks * 2, v_scale=vs, n_keys=200)
    assert not judge(attention_errors(wrong, wrong_lse, own), "bf16")


def test_splits_agree(device, seed):
    q, k, v = draw(seed, 7, 1, 260, device)
    one = prefix_attention(q, k, v, n_keys=260, num_splits=1)
    for s in (2, 5, 9):  # nine splits of 260 keys: the last ones see no key at all
        many = prefix_attention(q, k, v, n_keys=260, num_splits=s)
        assert (many[0].float() - one[0].float()).abs().max() <= 2e-2
        assert (many[1] - one[1]).abs().max() <= 1e-4


def test_merge_of_prefix_and_new_tokens_is_the_whole_attention(device, seed):
    # The cached prefix's attention merged with the new tokens' own causal attention equals
    # attention over both at once.
    n, h, c = 12, 2, 90
    q, k, v = draw(seed, n, h, c, device, spare=0)
    g = torch.Generator().manual_seed(seed + 7)
    k_new = torch.randn(n, h, 192, generator=g).bfloat16().to(device)
    v_new = torch.randn(n, h, 128, generator=g).bfloat16().to(device)
    o_pre, lse_pre = prefix_attention(q, k, v)
    scale = 192 ** -0.5
    s = torch.einsum("nhd,mhd->nhm", q.float(), k_new.float()) * scale
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=device).triu(1)[:, None], -math.inf)
    o_new = torch.einsum("nhm,mhd->nhd", s.softmax(-1), v_new.float()).contiguous()
    lse_new = s.logsumexp(-1).contiguous()
    out, out_lse = poisoned(n, h, 128, device, torch.float32)
    merge_attention(o_pre, lse_pre, o_new, lse_new, out=out, out_lse=out_lse)
    s_all = torch.cat((torch.einsum("nhd,chd->nhc", q.float(), k.float()) * scale, s), -1)
    v_all = torch.cat((v.float(), v_new.float()))
    ref_out = torch.einsum("nhc,chd->nhd", s_all.softmax(-1), v_all)
    ref_lse = s_all.logsumexp(-1)
    assert (out_lse - ref_lse).abs().max() <= 2e-2
    assert ((out - ref_out).norm() / ref_out.norm()) <= 1e-2


def test_merge_in_place_and_with_an_empty_side(device, seed):
    g = torch.Generator().manual_seed(seed)
    o_a = torch.randn(4, 3, 128, generator=g).to(device)
    lse_a = torch.randn(4, 3, generator=g).to(device)
    o_b = torch.randn(4, 3, 128, generator=g).to(device)
    lse_b = torch.full((4, 3), -math.inf, device=device)
    lse_b[0] = 0.5  # one row seen by both sides
    expect_o = o_a.clone()
    w_a, w_b = torch.exp(lse_a[0] - torch.maximum(lse_a[0], lse_b[0])), torch.exp(
        lse_b[0] - torch.maximum(lse_a[0], lse_b[0]))
    expect_o[0] = (w_a[:, None] * o_a[0] + w_b[:, None] * o_b[0]) / (w_a + w_b)[:, None]
    expect_lse = lse_a.clone()
    expect_lse[0] = torch.logaddexp(lse_a[0], lse_b[0])
    merge_attention(o_a, lse_a, o_b, lse_b, out=o_a, out_lse=lse_a)  # in place
    assert torch.allclose(o_a, expect_o, atol=1e-5) and torch.allclose(lse_a, expect_lse, atol=1e-5)
    # Both sides empty: 0 and -inf, never NaN.
    none = torch.full((4, 3), -math.inf, device=device)
    o, lse = merge_attention(o_b, none, o_b, none)
    assert bool((o == 0).all()) and bool((lse == -math.inf).all())


def test_split_rule():
    # Few programs over many keys: split until the device is full, tiles of keys a split.
    assert split_count(12, 109440, 64, 132) == 22
    assert split_count(12 * 128, 109440, 64, 132) == 1
    assert split_count(1, 100, 64, 132) == 1  # too few keys to split
    assert split_count(1, 10 ** 7, 64, 132) == 64  # at most MAX_SPLITS
    assert keys_per_split(150, 3, 64) == 64 and keys_per_split(260, 9, 64) == 64


@pytest.mark.parametrize(("programs", "keys", "want"), [
    (12, 32000, 11),   # 132 programs: one wave; 22 splits would take two of half the keys
    (48, 32000, 8),    # 3 waves of 63 tiles (+10) beat 1 of 250 and 2 of 100
    (48, 4096, 2),     # over 64 tiles, a second wave costs more than it saves
    (192, 32000, 2),   # 1 split: 2 waves of 500 tiles; 2: 3 waves of 250
    (768, 32000, 1),   # already 6 waves
    (12, 100, 1),      # two tiles: too few to split
    (1, 10 ** 7, 64),  # at most MAX_SPLITS
])
def test_split_by_waves_counts_a_wave_s_overhead(programs, keys, want):
    # One program an SM: each wave costs its split's key tiles and 10 tiles more.
    assert split_by_waves(programs, keys, 64, 132, 10) == want
    # With no overhead, more splits never cost more waves' keys: at least as many splits.
    assert split_by_waves(programs, keys, 64, 132, 0) >= want


@pytest.mark.parametrize(("n", "wide"), [(1, False), (128, False), (511, False), (512, True),
                                         (8192, True)])
def test_hopper_schedule_follows_the_queries(n, wide):
    # The expanded plan's Gluon schedule: from 512 queries up, where the dots hold the
    # kernel, 128-key tiles with the overlap and K and V freed apart; the default below.
    from mla_kernels.context import attention_hopper as ah

    assert ah.WIDE_SCHEDULE == ah.Schedule(2, True, 128, apart=True)
    assert ah.schedule_for(n) == (ah.WIDE_SCHEDULE if wide else ah.DEFAULT_SCHEDULE)


def test_tiles_follow_the_queries_and_the_keys():
    # 128 queries take 128-row tiles over many keys only; 256 and more always do.
    assert expanded_blocking(128, LONG_KEYS) == Blocking(128, 32, 4, 3)
    assert expanded_blocking(255, 10 ** 6) == Blocking(128, 32, 4, 3)
    assert expanded_blocking(128, LONG_KEYS - 1) == Blocking(64, 32, 4, 3)
    assert expanded_blocking(127, 10 ** 6) == Blocking(64, 32, 4, 3)
    assert expanded_blocking(256, 100) == Blocking(128, 64, 8, 3)
    assert expanded_blocking(63, 10 ** 6).block_m == 16


@pytest.mark.parametrize(("programs", "splits", "want"), [
    (12, 16, 11),  # 192 programs on 132 slots: a second wave under half full; 132 fill one
    (3, 64, 44),   # 192 again; 44 splits of 3 row tiles fill one wave
    (24, 11, 11),  # 264: two whole waves already
    (3, 16, 16),   # 48: one wave, partly filled, and no fewer splits finish sooner
    (96, 3, 3),    # 1, 2 or 3 splits all take a whole context's time: keep 3
    (1536, 1, 1),  # never more splits than given
])
def test_fewest_waves_keeps_the_last_wave_whole(programs, splits, want):
    # One program a slot (the absorbed Gluon kernel's one block an SM): the launch takes
    # ceil(programs x s / slots) waves of 1/s of the keys each.
    got = fewest_waves(programs, splits, 132)
    assert got == want
    assert 1 <= got <= splits
    assert math.ceil(programs * got / 132) / got <= math.ceil(programs * splits / 132) / splits


def merged(part_o: torch.Tensor, part_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The merge's expected output and LSE of parts [parts, rows, d] / [parts, rows], in
    float32 on the CPU (rows no part saw: 0 and -inf)."""
    lse = part_lse.cpu().logsumexp(0)
    w = torch.nan_to_num((part_lse.cpu() - lse).exp())
    return (w[..., None] * part_o.cpu()).sum(0), lse


@pytest.mark.parametrize(("rows", "per"), [(7, 2), (1536, 4), (6145, 16), (24579, 32)])
def test_merge_of_many_parts_at_each_row_tiling(rows, per, device, seed):
    # Merge programs of 2, 4, 16 and 32 rows (``merge_rows``), the last tile short; five
    # parts, one row seen by no part (0 and -inf), the output poisoned.
    from mla_kernels.context.merge import merge_parts, merge_rows

    g = torch.Generator().manual_seed(seed)
    parts, d = 5, 128
    part_o = (torch.randn(parts, rows, d, generator=g) * 2).to(device)
    part_lse = (torch.randn(parts, rows, generator=g) * 3).to(device)
    part_lse[:, rows // 2] = -math.inf
    part_lse[1, :rows // 3] = -math.inf  # a part that saw none of these rows' keys
    out = torch.full((rows, d), float("nan"), device=device)
    out_lse = torch.full((rows,), float("nan"), device=device)
    merge_parts(part_o, part_lse, parts, out, out_lse)
    expect, lse = merged(part_o, part_lse)
    seen = torch.isfinite(lse)
    assert merge_rows(rows) == per
    assert torch.allclose(out.cpu()[seen], expect[seen], atol=1e-4, rtol=1e-4), seed
    assert torch.allclose(out_lse.cpu()[seen], lse[seen], atol=1e-5), seed
    assert bool((out.cpu()[~seen] == 0).all()) and bool((out_lse.cpu()[~seen] == -math.inf).all())


@pytest.mark.parametrize(("parts", "d", "step"), [(37, 128, 16), (11, 512, 8), (3, 128, 4)])
def test_merge_in_steps_of_parts_over_an_earlier_partial(parts, d, step, device, seed):
    # More parts than a program loads a step (``merge_step``), the last step short, merged
    # into an earlier partial in place; LSEs that grow from step to step and one that falls,
    # a row no part but the earlier one saw, a row nothing saw.
    from mla_kernels.context.merge import merge_parts, merge_rows, merge_step

    g = torch.Generator().manual_seed(seed)
    rows = 1536
    part_o = (torch.randn(parts, rows, d, generator=g) * 2).to(device)
    part_lse = (torch.randn(parts, rows, generator=g) * 3
                + torch.linspace(-20, 20, parts)[:, None]).to(device)
    part_lse[:, 7] = part_lse[:, 7].flip(0)
    part_lse[:, 11] = -math.inf
    part_lse[:, 12] = -math.inf
    prev_o = (torch.randn(rows, d, generator=g)).to(device)
    prev_lse = (torch.randn(rows, generator=g) * 3).to(device)
    prev_lse[12] = -math.inf
    expect, lse = merged(torch.cat([prev_o.cpu()[None], part_o.cpu()]),
                         torch.cat([prev_lse.cpu()[None], part_lse.cpu()]))
    merge_parts(part_o, part_lse, parts, prev_o, prev_lse, prev_o, prev_lse)
    assert merge_step(parts, merge_rows(rows), d) == step and merge_rows(rows) == 4
    seen = torch.isfinite(lse)
    assert int((~seen).sum()) == 1 and bool(seen[11])
    assert torch.allclose(prev_o.cpu()[seen], expect[seen], atol=1e-4, rtol=1e-4), seed
    assert torch.allclose(prev_lse.cpu()[seen], lse[seen], atol=1e-4), seed
    assert bool((prev_o.cpu()[~seen] == 0).all()) and float(prev_lse.cpu()[12]) == -math.inf
