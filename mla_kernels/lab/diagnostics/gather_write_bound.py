"""What gathering a call's latent rows and writing its outputs costs with no matrix work: a
lower bound for any design of the operation, since every output byte depends on a gathered
row (measured on 2026-12-01: docs/log/2026-12-01-gather-write-bound.md).

``gather_write`` does the call's index work (the row-to-sequence search, ``kv_indptr``, the
block ids, as the designs do), gathers each row's 576 cache bytes and writes every output
byte of the call, in its layout, from them: a head's K-nope and V are two of the four
128-column slices of the latent (dequantised by ``k_scale``, bf16), its rope the row's rope.
With ``GATHER=False`` the same grid writes values from the row index alone (no loads): the
write path of this kernel beside ``fill_``. Each config's output is checked, bit for bit,
against the same placeholder computed by torch, after the outputs were poisoned.

On the H200, one process, at each token count: for both kernels (with and without the
gather), a search over rows a program (BM), heads a program (HG) and warps, then the
fastest made persistent (132 to 1056 programs), graph rows; then, twice in turn, ``fill_``
of a float32 buffer of the output bytes, the fastest of each kernel and ``auto`` (the real
call, checked against the reference), each as a plain call and replayed from a CUDA graph,
L2 flushed. Kimi-K3 TP8, fp8 cache, page 1. (The first run, at 5660a94, searched the
gather kernel's grids only, and filled a uint8 buffer.)

Usage on the H200: python3 -m mla_kernels.lab.diagnostics.gather_write_bound [--out FOLDER]
[tokens ...] (rows to FOLDER/gather_write_bound.csv; FOLDER defaults to reports/diag/, which
git ignores). Off the GPU: TRITON_INTERPRET=1 python3 -m mla_kernels.lab.diagnostics.gather_write_bound
--check (small problems, every config shape, on the CPU; nothing is written).
"""
from __future__ import annotations

import functools
import itertools
from pathlib import Path

import torch
import triton
import triton.language as tl

from ...core.reference import token_rows
from ...designs.jit import (
    cast_out,
    find_sequence,
    gather_row_offsets,
    load_rope,
    search_steps,
)
from ..inputs import GatherInputs, build_inputs
from ..roofline import output_bytes
from .command_line import check_or_measure, write_rows


@triton.jit
def gather_write_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, k_out_ptr, v_out_ptr,
    batch, total, stride_block, stride_slot, num_blocks, sk_row, sk_head, sv_row, sv_head,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    HG: tl.constexpr, BM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    SEARCH_STEPS: tl.constexpr, GATHER: tl.constexpr,
):
    # Programs along axis 0 take row tiles pid, pid + programs, ...: one each unless the grid
    # is persistent (fewer programs than tiles).
    for m in range(tl.program_id(0), tl.cdiv(total, BM), tl.num_programs(0)):
        _gather_write_tile(
            m, k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, k_out_ptr,
            v_out_ptr, batch, total, stride_block, stride_slot, num_blocks, sk_row, sk_head,
            sv_row, sv_head, KV_C, PE, NOPE, V, HG, BM, BLOCK_SIZE, SEARCH_STEPS, GATHER)


@triton.jit
def _gather_write_tile(
    m, k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, k_out_ptr, v_out_ptr,
    batch, total, stride_block, stride_slot, num_blocks, sk_row, sk_head, sv_row, sv_head,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    HG: tl.constexpr, BM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    SEARCH_STEPS: tl.constexpr, GATHER: tl.constexpr,
):
    r = m * BM + tl.arange(0, BM)
    rmask = r < total
    h0 = tl.program_id(1) * HG
    n = tl.arange(0, NOPE)
    p = tl.arange(0, PE)
    out_r = r.to(tl.int64)[:, None]
    if GATHER:
        seq = find_sequence(cs_ptr, r, batch, SEARCH_STEPS)
        first = tl.load(kv_indptr_ptr + seq, mask=rmask, other=0)
        t = r - tl.load(cs_ptr + seq, mask=rmask, other=0)
        rows = gather_row_offsets(kv_indices_ptr + first, t, rmask, stride_block, stride_slot,
                                  num_blocks, BLOCK_SIZE)
        ks = tl.load(k_scale_ptr)
        pe = load_rope(k_buffer_ptr, rows, rmask, ks, KV_C, PE, PE)
    else:
        pe = (r[:, None] + p[None, :]).to(tl.float32)
    for hh in tl.static_range(HG):
        h = h0 + hh
        # Heads alternate between slices (0, 1) and (2, 3), so every latent column is read.
        ck = ((2 * h) % (KV_C // NOPE)) * NOPE
        cv = ((2 * h + 1) % (KV_C // V)) * V
        if GATHER:
            xk = tl.load(k_buffer_ptr + rows[:, None] + ck + n[None, :], mask=rmask[:, None],
                         other=0.0).to(tl.float32) * ks
            xv = tl.load(k_buffer_ptr + rows[:, None] + cv + n[None, :], mask=rmask[:, None],
                         other=0.0).to(tl.float32) * ks
        else:
            xk = (r[:, None] + n[None, :] + ck).to(tl.float32)
            xv = (r[:, None] + n[None, :] + cv).to(tl.float32)
        kb = k_out_ptr + out_r * sk_row + h * sk_head
        tl.store(kb + n[None, :], cast_out(xk, k_out_ptr.dtype.element_ty), mask=rmask[:, None])
        tl.store(kb + NOPE + p[None, :], cast_out(pe, k_out_ptr.dtype.element_ty), mask=rmask[:, None])
        tl.store(v_out_ptr + out_r * sv_row + h * sv_head + n[None, :],
                 cast_out(xv, v_out_ptr.dtype.element_ty), mask=rmask[:, None])


def launcher(inp: GatherInputs, bm: int, hg: int, warps: int, gather: bool = True,
             programs: int = 0):
    """A call of gather_write_kernel on ``inp``'s arguments and outputs: a program per row
    tile and head group, or, with ``programs``, about that many in all (persistent)."""
    s, kb = inp.shape, inp.k_buffer
    total = inp.total_tokens
    ko, vo = inp.k_prefix, inp.v_prefix
    groups = s.num_heads // hg
    tiles = triton.cdiv(total, bm)
    grid = (max(1, min(tiles, programs // groups)) if programs else max(tiles, 1), groups)
    args = (kb, inp.k_scale, inp.kv_indptr, inp.kv_indices, inp.kv_prefix_sum_context_lens,
            ko, vo, len(inp.contexts), total, kb.stride(0), kb.stride(1), kb.shape[0],
            ko.stride(0), ko.stride(1), vo.stride(0), vo.stride(1))
    consts = dict(KV_C=s.kv_c_dim, PE=s.kv_pe_dim, NOPE=s.qk_nope_dim, V=s.v_head_dim, HG=hg,
                  BM=bm, BLOCK_SIZE=inp.block_size, SEARCH_STEPS=search_steps(len(inp.contexts)),
                  GATHER=gather, num_warps=warps)
    return lambda: gather_write_kernel[grid](*args, **consts)


def placeholder(inp: GatherInputs, gather: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """What gather_write_kernel writes (bf16 K and V of the call's rows), by torch."""
    s = inp.shape
    total, slices = inp.total_tokens, s.kv_c_dim // s.qk_nope_dim
    nope, pe_dim = s.qk_nope_dim, s.kv_pe_dim
    if gather:
        blocks, slots = token_rows(inp.kv_indptr, inp.kv_indices,
                                   inp.kv_prefix_sum_context_lens, inp.block_size)
        lat = inp.k_buffer[blocks, slots].float() * inp.k_scale.float()
        col = [lat[:, c * nope:(c + 1) * nope] for c in range(slices)]
        pe = lat[:, s.kv_c_dim:]
    else:
        r = torch.arange(total, device=inp.k_buffer.device, dtype=torch.float32)[:, None]
        col = [r + torch.arange(nope, device=r.device) + c * nope for c in range(slices)]
        pe = r + torch.arange(pe_dim, device=r.device)
    k = torch.stack([torch.cat((col[(2 * h) % slices], pe), 1) for h in range(s.num_heads)], 1)
    v = torch.stack([col[(2 * h + 1) % slices] for h in range(s.num_heads)], 1)
    return k.to(inp.k_prefix.dtype), v.to(inp.v_prefix.dtype)


def written_exactly(inp: GatherInputs, fn, expected: tuple[torch.Tensor, torch.Tensor]
                    ) -> bool:
    """Poison the outputs, run ``fn`` once, compare every row with ``expected``
    (``placeholder``'s K and V)."""
    inp.poison_outputs()
    fn()
    k, v = expected
    t = inp.total_tokens
    return bool(torch.equal(inp.k_prefix[:t], k) and torch.equal(inp.v_prefix[:t], v))


CONFIGS = list(itertools.product((16, 32, 64, 128), (1, 3, 12), (4, 8)))  # BM, HG, warps
WHAT = {True: "gather_write", False: "write_only"}


def check_on_cpu() -> None:
    """Every config shape on small ragged and paged problems, under the interpreter."""
    for ctx, page, seed in (((37, 0, 70), 1, 11), ((130,), 16, 12)):
        inp = build_inputs("kimi-k3-tp8", ctx, block_size=page, seed=seed)
        for (bm, hg, warps), programs in [(c, 0) for c in CONFIGS[::3] + [CONFIGS[-1]]] + [
                ((16, 3, 4), 4), ((16, 12, 4), 3)]:
            for gather in (True, False):
                fn = launcher(inp, bm, hg, warps, gather, programs)
                ok = written_exactly(inp, fn, placeholder(inp, gather))
                print(f"contexts {ctx} page {page} seed {seed} BM {bm} HG {hg} programs "
                      f"{programs} gather {gather}:", "ok" if ok else "WRONG")
                assert ok


def search(inp: GatherInputs, gather: bool, add) -> tuple[str, tuple]:
    """Graph time of every config in CONFIGS, then of the fastest made persistent (1, 2, 4
    and 8 programs an SM of 132); the fastest correct one's (label, launcher arguments)."""
    t, best = inp.total_tokens, (float("inf"), "", ())
    expected = placeholder(inp, gather)
    for programs in (0, 132, 264, 528, 1056):
        for bm, hg, warps in CONFIGS if programs == 0 else [best[2][:3]]:
            label = f"BM{bm} HG{hg} w{warps}" + (f" p{programs}" if programs else "")
            fn = launcher(inp, bm, hg, warps, gather, programs)
            us = add(WHAT[gather], t, label, fn, written_exactly(inp, fn, expected), ("graph",))
            if us < best[0]:
                best = (us, label, (bm, hg, warps, gather, programs))
    return best[1], best[2]


def measure(out: Path, tokens: list[int]) -> None:
    import pandas as pd

    from ...api import gather_kv_b_proj
    from .. import host_cost
    from ..checks import check_outputs, expected
    from ..provenance import provenance
    from ..timing import graphed, median_us

    prov, rows = provenance(), []

    def add(what: str, t: int, config: str, fn, correct: bool, timings=("graph", "flushed")
            ) -> float:
        for timing in timings:
            us = median_us(graphed(fn) if timing == "graph" else fn)
            rows.append(dict(prov, what=what, tokens=t, config=config, timing=timing,
                             median_us=us, correct=correct))
            print(f"{what:>17} {t:>6} {config:>23} {timing:>7} {us:8.2f} us"
                  f"{'' if correct else '  WRONG'}", flush=True)
        return us if correct else float("inf")

    for t in tokens:
        inp = build_inputs("kimi-k3-tp8", (t,), device="cuda", seed=t, spare_indices=0,
                           spare_rows=0, spare_blocks=0)
        best = {gather: search(inp, gather, add) for gather in (True, False)}
        ref = expected(inp)
        buf = torch.empty(output_bytes(inp.shape, t) // 4, dtype=torch.float32, device="cuda")
        placeholders = {gather: placeholder(inp, gather) for gather in (False, True)}
        call = functools.partial(gather_kv_b_proj, *inp.args(), variant="auto")
        for _ in range(2):
            add("fill_f32", t, "", lambda b=buf: b.fill_(7.0), True)
            for gather in (False, True):
                label, a = best[gather]
                fn = launcher(inp, *a)
                add(WHAT[gather] + "_best", t, label, fn,
                    written_exactly(inp, fn, placeholders[gather]))
            inp.poison_outputs()
            call()
            add("auto", t, "", call, bool(check_outputs(inp, ref)["correct"]))
        del inp, ref, buf, call, placeholders
        torch.cuda.empty_cache()
    add("empty launch", 0, "", host_cost.empty_launch(), True)
    df = pd.DataFrame(rows)
    df["out_bytes"] = [output_bytes("kimi-k3-tp8", t) for t in df.tokens]
    write_rows(df, out, "gather_write_bound.csv")


if __name__ == "__main__":
    check_or_measure(
        __doc__, "gather_write_bound.csv", check_on_cpu, lambda a: measure(a.out, a.tokens),
        "check every config shape on small problems under the interpreter",
        add=lambda ap: ap.add_argument("tokens", nargs="*", type=int, default=[4096, 32000],
                                       help="tokens of one sequence (default 4096 32000)"))
