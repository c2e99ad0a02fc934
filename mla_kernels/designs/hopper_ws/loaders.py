"""The weight partitions: the TMA loader, and MXFP4's widener in its place."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .compat import tma_io
from .config import BK, MX_BIAS, WIDEN_WARPS
from .conversions import _as_bf16, _as_words, _halves, _mx_chunk, _mx_item, _widen_bf16, _widen_e4m3
from .ring import _publish, _publish2
from .schedule import _item_range, _item_weight_row


@gluon.jit
def _weight_loader(w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                   NOPE: gl.constexpr, V: gl.constexpr, KV_C: gl.constexpr,
                   ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr, WK: gl.constexpr):
    _, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    c = 0
    for it in range(start, end):
        w_row = _item_weight_row(it, NOPE, V, ITEMS_PER_TILE)
        for kb in gl.static_range(KV_C // WK):
            s = c % STAGES
            # A slot's first fill waits on the phase before the barrier's first: it passes.
            mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(w_ready.index(s), w_desc.block_type.nbytes)
            tma_io.load(w_desc, [w_row, kb * WK], w_ready.index(s), w_ring.index(s))
            c += 1


@gluon.jit
def _mx_widener(w_ptr, ws_ptr, w_ring, info, w_ready, w_empty, cs_ptr, batch,
                NOPE: gl.constexpr, V: gl.constexpr, KV_C: gl.constexpr,
                ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr, WS_LD: gl.constexpr):
    """MXFP4's weight partition (in place of the TMA loader): reads the packed e2m1 bytes and
    e8m0 scales of each item's 128 weight rows from global memory and writes them into the
    ring widened, as [128 x 128] e4m3 chunks when every row fits, else as [128 x 64] bf16
    chunks, with one factor 2^F a row (undone in the epilogue). The item's F and route go
    to ``info`` before its first chunk is published."""
    NK: gl.constexpr = KV_C // BK
    info_layout: gl.constexpr = gl.BlockedLayout([1], [32], [WIDEN_WARPS], [0])
    w32_ptr = w_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    _, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    c = 0
    for it in range(start, end):
        w_row = _item_weight_row(it, NOPE, V, ITEMS_PER_TILE)
        # Every load of the item at once. Each chunk's hand-over fences shared memory for
        # wgmma (fence.proxy.async: MEMBAR.ALL.CTA), which also waits for every load in
        # flight: loads issued chunk by chunk would each wait out L2's latency there.
        words, packed, top, fits = _mx_item(w32_ptr, ws_ptr, w_row, KV_C, WS_LD)
        # An info entry is rewritten STAGES + 1 items later: by then the MMA warps have
        # released this item's first slot and so read the entry (they read it first).
        mbarrier.wait(w_empty.index(c % STAGES), ((c // STAGES) & 1) ^ 1)
        info.index((it - start) % (STAGES + 1)).store(
            gl.convert_layout((top - MX_BIAS) * 2 + (1 - fits.to(gl.int32)), info_layout))
        # Chunks are handed over two at a time: one fence and one barrier for two slots. The
        # first is held while the second's slot frees, which takes the MMA warps' next
        # chunk only with three slots or more (WIDEN_MIN_STAGES).
        if fits:
            for kb in gl.static_range(0, NK, 2):
                chunk, d = _mx_chunk(words, packed, top, kb)
                e4m3 = _widen_e4m3(chunk, d)
                s = c % STAGES
                mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
                _as_words(w_ring.index(s)).store(e4m3)
                if kb + 1 < NK:
                    chunk, d = _mx_chunk(words, packed, top, kb + 1)
                    e4m3 = _widen_e4m3(chunk, d)
                    s1 = (c + 1) % STAGES
                    mbarrier.wait(w_empty.index(s1), (((c + 1) // STAGES) & 1) ^ 1)
                    _as_words(w_ring.index(s1)).store(e4m3)
                    _publish2(w_ready.index(s), w_ready.index(s1))
                    c += 2
                else:
                    _publish(w_ready.index(s))
                    c += 1
        else:
            ring16 = _as_bf16(w_ring)
            for kb in gl.static_range(NK):
                chunk, d = _mx_chunk(words, packed, top, kb)
                w_lo, d_lo, w_hi, d_hi = _halves(chunk, d)
                s = c % STAGES
                mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
                ring16.index(s).store(_widen_bf16(w_lo, d_lo))
                s1 = (c + 1) % STAGES
                mbarrier.wait(w_empty.index(s1), (((c + 1) // STAGES) & 1) ^ 1)
                ring16.index(s1).store(_widen_bf16(w_hi, d_hi))
                _publish2(w_ready.index(s), w_ready.index(s1))
                c += 2
