"""The weight partitions: the TMA loader of fp8 and bf16 weights, and MXFP4's widener in its
place. Both fill the weight ring in the order the MMA warps read it: each item of the
program's run, K chunk by K chunk."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .config import BK, MX_BIAS, WIDEN_WARPS
from .conversions import as_words, halves, mx_chunk, mx_item, widen_bf16, widen_e4m3


@gluon.jit
def weight_loader(p):
    """One warp: each item's 128 weight rows by TMA, a [128 x WK] chunk a ring slot."""
    ring = p.ring
    items = p.items
    WK: gl.constexpr = p.WK
    _, start, end = items.run()
    c = 0
    for it in range(start, end):
        w_row = items.weight_row(it)
        for kb in gl.static_range(items.KV_C // WK):
            s = ring.wait_free(c)
            ring.fill(p.w_desc, s, w_row, kb * WK)
            c += 1


@gluon.jit
def mx_widener(p):
    """MXFP4's weight partition (four warps, in place of the TMA loader): reads the packed
    e2m1 bytes and e8m0 scales of each item's 128 weight rows from global memory and writes
    them into the ring widened, as [128 x 128] e4m3 chunks when every row fits (MX_SPAN),
    else as [128 x 64] bf16 chunks, with one factor 2^F a row (undone in the epilogue). The
    item's F and route go to the ring's ``info`` entry before its first chunk is published.
    """
    ring = p.ring
    items = p.items
    KV_C: gl.constexpr = items.KV_C
    STAGES: gl.constexpr = ring.STAGES
    NK: gl.constexpr = KV_C // BK
    info_layout: gl.constexpr = gl.BlockedLayout([1], [32], [WIDEN_WARPS], [0])
    w32_ptr = p.w_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    _, start, end = items.run()
    c = 0
    for it in range(start, end):
        w_row = items.weight_row(it)
        # Every load of the item at once. Each chunk's hand-over fences shared memory for
        # wgmma (fence.proxy.async: MEMBAR.ALL.CTA), which also waits for every load in
        # flight: loads issued chunk by chunk would each wait out L2's latency there.
        words, packed, top, fits = mx_item(w32_ptr, p.ws_ptr, w_row, KV_C, p.WS_LD)
        # An info entry is rewritten STAGES + 1 items later: by then the MMA warps have
        # released this item's first slot and so read the entry (they read it first).
        ring.wait_free(c)
        ring.info.index((it - start) % (STAGES + 1)).store(
            gl.convert_layout((top - MX_BIAS) * 2 + (1 - fits.to(gl.int32)), info_layout))
        # Chunks are handed over two at a time: one fence and one barrier for two slots. The
        # first is held while the second's slot frees, which takes the MMA warps' next
        # chunk only with three slots or more (WIDEN_MIN_STAGES).
        if fits:
            for kb in gl.static_range(0, NK, 2):
                chunk, d = mx_chunk(words, packed, top, kb)
                e4m3 = widen_e4m3(chunk, d)
                s = ring.wait_free(c)
                as_words(ring.slots.index(s)).store(e4m3)
                if kb + 1 < NK:
                    chunk, d = mx_chunk(words, packed, top, kb + 1)
                    e4m3 = widen_e4m3(chunk, d)
                    s1 = ring.wait_free(c + 1)
                    as_words(ring.slots.index(s1)).store(e4m3)
                    ring.publish2(s, s1)
                    c += 2
                else:
                    ring.publish(s)
                    c += 1
        else:
            ring16 = ring.as_bf16()
            for kb in gl.static_range(NK):
                chunk, d = mx_chunk(words, packed, top, kb)
                w_lo, d_lo, w_hi, d_hi = halves(chunk, d)
                s = ring16.wait_free(c)
                ring16.slots.index(s).store(widen_bf16(w_lo, d_lo))
                s1 = ring16.wait_free(c + 1)
                ring16.slots.index(s1).store(widen_bf16(w_hi, d_hi))
                ring16.publish2(s, s1)
                c += 2
