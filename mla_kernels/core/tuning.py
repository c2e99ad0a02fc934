"""What variant="auto" runs: a committed table of the best measured design and launch config
per (device, weight format, cache dtype, page size), one a head shape, and the portable
fallback.

Data only: entries name a design and its config fields; ``designs.resolve`` turns them into
a design and its typed config (and falls back where the named design cannot run the
problem: hopper_ws off an sm_90 GPU, or outside its shapes). Importing nothing from the
designs keeps the two free of a cycle. An entry is one (design, fields) pair, or a list of
(minimum output rows, design, fields), largest minimum first, where the best design changes
with the context.

Source: the performance matrix of the committed run data/h200/2026-11-30-e3b5fbb6f059/
(perf_matrix_a.csv, perf_matrix_b.csv; Kimi-K3 TP8, single sequences 4096 to 109440 tokens,
every weight format on fp8 and bf16 caches, fp8 per-row at pages 1 to 128), scored on one
launch replayed from a CUDA graph. The tiled configs with 128-row tiles and 8 warps come
from data/exploration/h200/tune_2026-11-29.csv (32000 tokens). MXFP4 on an fp8 cache,
served by hopper_ws since, from the MXFP4 matrix of a later commit
(data/exploration/h200/mxfp4/2026-11-30-*/perf_matrix_mxfp4.csv). The bf16-cache entries
from the run data/h200/2026-11-30-b3ba14ac1f0b/ (hopper_ws on bf16 caches, fp8 and MXFP4
weights widened to a bf16 copy first: fastest at every length). fp8 per row over an fp8
cache from 16384 rows: hopper_ws with two MMA groups, a 6-deep ring and the latent in
registers, from the rounds in data/exploration/h200/2026-12-01-hopper-ws-fp8-row-rounds/ (timed at 4096,
32000, 109440 tokens, 64 x 4096 and DeepSeek-V3 TP1; nothing between 4096 and 32000) and
checked by the run data/h200/2026-12-01-4db5f2888635/, where auto runs it; from 4097 rows
with the weight's prefetch, from H100 rounds of 2026-12-06. The prefetches below from
an H100's rounds (2026-12-05 and 2026-12-06, named at the entries). tests/designs/test_tuning.py
asserts that at every point of the latest committed run (now that one) and of the MXFP4
runs, what this table picks is within 5% of the best design timed there.
"""

from __future__ import annotations

ANY = "*"
_TILED_128_8 = {"block_m": 128, "num_warps": 8, "num_stages": 2}

# (device, weight format, cache dtype, page size) -> (design, config fields), or a list of
# (minimum output rows, design, config fields), largest minimum first. A weight format may
# name its scale kind ("bf16:none"), an entry matched before the format's own.
TUNED: dict[tuple[str, str, str, object], object] = {
    # An fp8 cache: the warp-specialised design serves fp8 per row, per block and bf16.
    # fp8 per row from 16384 rows: two MMA groups, a 6-deep ring, the latent in registers
    # (data/exploration/h200/2026-12-01-hopper-ws-fp8-row-rounds/: 3-8% under the default from 32000 tokens,
    # 2% over it at 4096; nothing timed between).
    # From 4097 rows to 16384 the same with the weight's prefetch: 0.88-1.00 of one launch of
    # the config below and 0.89-0.95 of a call in a 61-call sequence at 5120-12288 tokens on
    # an H100 (data/exploration/h100/2026-12-06-9db83d80c243-two-groups-short/ and
    # 2026-12-06-e2efdf002fe0-two-groups-4096/); at 4096, 1.01-1.03 of one launch. Of the
    # one-group config's call in the sequence 0.91 at 5000 tokens, 0.92 at 4608 and 0.97-0.98
    # at 4224, one launch within 1% (an H100 again: 2026-12-06-ded01171e1d0-sequence-trace/
    # and 2026-12-06-534717da4fab-tier-4097/). From 4097 rows (33 token tiles) to 5632 every
    # program runs 8 items of one tile, three programs a tile; at 4096, 6 items, four a tile.
    # fp8 per block from 4097 rows: the programs a short context leaves without items
    # prefetch the weight into L2 first, 5-7% off one launch at 4096 tokens on an H100,
    # within 1.5% either way in a 61-call sequence (no program is left over from about
    # 8448 tokens, where it does nothing;
    # data/exploration/h100/2026-12-05-d1fa6daacdf0-prefetch-weight/).
    # Up to 4096 rows, both: the weight's bytes and then the latent rows. In a 61-call
    # sequence 0.94-0.96 of the weight's alone at 4096 tokens (fp8 per row and per block), one
    # launch within 1% of it, on an H100; at 8192 the rows cost one launch 5-6%
    # (data/exploration/h100/2026-12-06-ddf545be20e9-prefetch-order/). From 4097 rows they
    # cost it: fp8 per block's sequence call with the weight alone 0.98 of theirs at 4608
    # and 5000 tokens, one launch within 2% (2026-12-06-534717da4fab-tier-4097/).
    # At 3072 tokens fp8 per row's two groups took 0.95 of this config's sequence call for
    # one launch 1.5-2% slower (2026-12-06-ded01171e1d0-sequence-trace/): kept.
    ("H200", "fp8_row", "fp8", ANY): [
        (16384, "hopper_ws", {"ring_depth": 6, "mma_groups": 2, "latent_in_registers": True}),
        (4097, "hopper_ws", {"ring_depth": 6, "mma_groups": 2, "latent_in_registers": True,
                             "prefetch": "weight"}),
        (0, "hopper_ws", {"ring_depth": 4, "prefetch": "inputs"})],
    ("H200", "fp8_block", "fp8", ANY): [
        (4097, "hopper_ws", {"ring_depth": 4, "prefetch": "weight"}),
        (0, "hopper_ws", {"ring_depth": 4, "prefetch": "inputs"})],
    # An unscaled bf16 weight ("bf16:none"): two groups with the fp8 tile widened into their
    # registers once a tile, a 6-deep ring; 17-22% under the bf16 tile with bf16 outputs on
    # an H100 (data/exploration/h100/2026-12-05-47472d2a5951-bf16-weight-latent-in-registers/)
    # and 16% at 32000 in the committed run data/h200/2026-12-05-4fa78cbe9a1a/. FP8 outputs
    # have an entry of their own below. A scaled bf16 weight keeps the bf16 tile: its scale
    # vector does not fit beside the latent in registers.
    ("H200", "bf16:none", "fp8", ANY): ("hopper_ws", {"ring_depth": 6, "mma_groups": 2,
                                                      "latent_in_registers": True}),
    ("H200", "bf16", "fp8", ANY): ("hopper_ws", {"ring_depth": 4}),
    # MXFP4 on an fp8 cache: the warp-specialised design (data/exploration/h200/mxfp4/;
    # before it, tiled_tma from 16k tokens on and 128-row tiles below), the weight widened
    # once a call (its default), a 4-deep ring: a 6-deep one within 1% of it, two MMA
    # groups 8-14% slower, widening in the kernel 8-17% slower at 32000 and 109440 tokens
    # (data/exploration/h200/2026-12-03-82c6edefe16b-mxfp4-widened-once/).
    ("H200", "mxfp4", "fp8", ANY): ("hopper_ws", {"ring_depth": 4}),
    # A bf16 cache: the warp-specialised design's bf16 latent tile, every weight a bf16
    # one (fp8 and MXFP4 widened to a bf16 copy ahead of the kernel).
    ("H200", "fp8_row", "bf16", ANY): ("hopper_ws", {"ring_depth": 4}),
    ("H200", "fp8_block", "bf16", ANY): ("hopper_ws", {"ring_depth": 4}),
    ("H200", "bf16", "bf16", ANY): ("hopper_ws", {"ring_depth": 4}),
    ("H200", "mxfp4", "bf16", ANY): ("hopper_ws", {"ring_depth": 4}),
}

# FP8 outputs (e4m3fn): entries measured with them, keyed as TUNED and looked up first; a
# class with none here takes TUNED's entry (the epilogue differs, the rest does not).
# fp8 per row and per block over an fp8 cache: the ping-pong schedule with a 6-deep ring,
# 4-13% under the fastest config timed before at 4096, 32000 and 109440 tokens
# (data/exploration/h200/2026-12-02-bb00066240dc-pingpong/), and one spare latent slot, faster
# than none and than two or three beside shallower rings
# (data/exploration/h200/2026-12-03-aa2576556aa4-spare-latent-slots/); a bf16 weight and a
# bf16 cache keep TUNED's (before the schedule, TUNED's configs were as fast as any other
# timed: data/exploration/h200/2026-12-02-0030d2ce6b44-fp8-outputs/).
_PINGPONG = {"ring_depth": 6, "mma_groups": 2, "pingpong": True, "spare_latent_chunks": 1}
TUNED_FP8_OUT: dict[tuple[str, str, str, object], object] = {
    ("H200", "fp8_row", "fp8", ANY): ("hopper_ws", _PINGPONG),
    ("H200", "fp8_block", "fp8", ANY): ("hopper_ws", _PINGPONG),
    # An unscaled bf16 weight: TUNED's two groups with the latent in registers, with one
    # staging buffer and a 7-deep ring, which FP8 staging leaves room for (on an H100,
    # data/exploration/h100/2026-12-05-bd0ea4e703ec-fp8-staging/: 6-9% under ring 6 with two
    # buffers at 4096, 32000 and 109440 tokens). An eighth slot beside the one buffer was 3%
    # slower at 32000 and 2% faster at 109440 (an H100 again:
    # data/exploration/h100/2026-12-05-a7aa3423e576-one-staging-buffer/).
    ("H200", "bf16:none", "fp8", ANY): ("hopper_ws", {"ring_depth": 7, "mma_groups": 2,
                                                      "latent_in_registers": True,
                                                      "staging_buffers": 1}),
    # MXFP4: TUNED's 4-deep ring with one staging buffer where two fit, 7% under two at
    # 32000 tokens, as at a 6-deep ring (the same folder; bf16 outputs the same with either).
    ("H200", "mxfp4", "fp8", ANY): ("hopper_ws", {"ring_depth": 4, "staging_buffers": 1}),
}

# The tables above were measured on heads of 128 K-nope and 128 V columns (Kimi-K3,
# DeepSeek-V3). Heads of other widths take their own: GLM-5-style heads (192 and 256),
# whose work items mix K-nope and V columns (so no ping-pong schedule), from the rounds in
# data/exploration/h200/2026-12-03-7a07b8a74942-glm5-heads/ (32000 tokens, fp8 per row also
# 109440; nothing shorter timed): fp8 per row over an fp8 cache with two MMA groups, a
# 6-deep ring and the latent in registers (1.4% under the default at 32000, 4.3% at 109440;
# with FP8 outputs as fast as the default), from 16384 rows as for Kimi-K3's heads; MXFP4
# over an fp8 cache (widened once a call) a 6-deep ring, 2.6% under the default at 32000
# (data/exploration/h200/2026-12-03-82c6edefe16b-mxfp4-widened-once/); every other weight and
# cache the default config (a 6-deep ring within 1% of it where it fits).
# Heads with no table here: the portable fallback.
HEADS_128 = (128, 128)
_GLM5_HEADS = {("H200", fmt, cache, ANY): ("hopper_ws", {"ring_depth": 4})
               for fmt in ("fp8_row", "fp8_block", "bf16", "mxfp4") for cache in ("fp8", "bf16")}
_GLM5_HEADS[("H200", "mxfp4", "fp8", ANY)] = ("hopper_ws", {"ring_depth": 6})
_GLM5_HEADS[("H200", "fp8_row", "fp8", ANY)] = [
    (16384, "hopper_ws", {"ring_depth": 6, "mma_groups": 2, "latent_in_registers": True}),
    (0, "hopper_ws", {"ring_depth": 4})]
# (K-nope columns, V columns) -> (table, its FP8-output table), keyed as TUNED.
TUNED_BY_HEADS: dict[tuple[int, int], tuple[dict, dict]] = {
    HEADS_128: (TUNED, TUNED_FP8_OUT),
    (192, 256): (_GLM5_HEADS, {}),
}

# The best portable design on every format measured: tiled, split, 64-row tiles.
FALLBACK: tuple[str, dict] = ("tiled", {"block_m": 64, "num_warps": 4, "split": True})

# A GPU the tables do not name reads the entries of the device named here for its
# architecture. Every sm_90 part (H100, H800, H20, GH200) has the instructions and the
# shared memory the H200's configs were chosen for; its SM count, which the short-context
# schedule reads at run time, and its bandwidth differ. Several entries above were chosen
# on an H100, where one launch of the fallback took 2.3x hopper_ws's time at 32000 tokens
# and 1.6-1.7x at 4096 (fp8 per row: sequence_gaps.csv in
# data/exploration/h100/2026-12-05-652a37059875-short-context-prefetch/, where auto ran the
# fallback, against sequence_gaps.csv and sequence_prefetch.csv in
# data/exploration/h100/2026-12-05-d1fa6daacdf0-prefetch-weight/).
BY_ARCH: dict[str, str] = {"sm_90": "H200"}


def table_device(name: str, arch: str = "") -> str:
    """The device whose entries ``auto`` reads for device ``name`` of compiler target
    ``arch``: its own where a table names it, else its architecture's (BY_ARCH), else
    ``name`` (which then finds none: the fallback)."""
    named = {key[0] for plain, fp8_out in TUNED_BY_HEADS.values()
             for table in (plain, fp8_out) for key in table}
    return name if name in named else BY_ARCH.get(arch, name)


def _entry(table: dict, key: tuple, rows: int) -> tuple[str, dict] | None:
    entry = table.get(key)
    if entry is None or isinstance(entry, tuple):
        return entry
    for min_rows, design, fields in entry:
        if rows >= min_rows:
            return design, fields
    return None


def lookup(device: str, weight_format: str, cache_dtype: str, block_size: int,
           rows: int = 0, out_fp8: bool = False, heads: tuple[int, int] = HEADS_128,
           scale: str | None = None) -> tuple[str, dict]:
    """The most specific entry for this problem class on this device (``rows``: the output
    rows, the call's largest possible token count; ``out_fp8``: e4m3fn outputs, looked up in
    the heads' FP8-output table first; ``heads``: (K-nope, V) columns a head, which pick the
    tables, TUNED_BY_HEADS; ``scale``: the weight's scale kind, which entries keyed
    "format:scale" match before the format's; None matches only the format's), else
    FALLBACK."""
    if heads not in TUNED_BY_HEADS:
        return FALLBACK
    plain, fp8_out = TUNED_BY_HEADS[heads]
    formats = (weight_format,) if scale is None else (f"{weight_format}:{scale}", weight_format)
    keys = tuple((device, f, c, b) for f in formats
                 for c, b in ((cache_dtype, block_size), (cache_dtype, ANY),
                              (ANY, block_size), (ANY, ANY)))
    for table in (fp8_out, plain) if out_fp8 else (plain,):
        for key in keys:
            hit = _entry(table, key, rows)
            if hit is not None:
                return hit
    return FALLBACK
