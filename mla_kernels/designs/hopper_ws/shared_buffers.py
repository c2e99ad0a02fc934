"""What the partitions share, bundled: the weight ring, the latent tile, the outputs, the
dynamic tail's claims, and all of it in one ``Handles`` that every partition takes; and the
hand-over of a written slot.

Bundles are Gluon aggregates (``compat.bundle``). This module keeps its annotations evaluated
(no ``from __future__ import annotations``): triton 3.6 checks each field against them.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from ..jit import load_out_inverse
from .compat import Buffer, Descriptor, bundle, partition_sync, tma_io
from .config import CLAIM_SLOTS, CLAIM_WIDTH, TAIL_LEAD
from .conversions import ring_as_bf16
from .schedule import Cache, Items


@gluon.jit
def ring_phase(n, DEPTH: gl.constexpr):
    """The phase of the ``n``-th use of a ring of DEPTH slots at its slot's barriers: which
    pass over the ring it is, mod 2."""
    return (n // DEPTH) & 1


@gluon.jit
def slot_free(empty, n, DEPTH: gl.constexpr):
    """The slot of the ``n``-th use of a ring of DEPTH slots, once its reader has released the
    use before (``empty``: the slots' empty barriers). A slot's first fill waits on the phase
    before the barrier's first, which passes."""
    s = n % DEPTH
    mbarrier.wait(empty.index(s), ring_phase(n, DEPTH) ^ 1)
    return s


@gluon.jit
def slot_full(ready, n, DEPTH: gl.constexpr):
    """The slot of the ``n``-th use of a ring of DEPTH slots, once it has been filled."""
    s = n % DEPTH
    mbarrier.wait(ready.index(s), ring_phase(n, DEPTH))
    return s


@gluon.jit
def publish_slot(bar):
    """Hand a slot written by this partition's threads to the MMA warps: each thread's
    stores made visible to the async proxy (wgmma), all threads done, one arrival."""
    fence_async_shared()
    partition_sync()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def publish_slots(bar0, bar1):
    """``publish_slot`` for two slots at once (one fence and one barrier)."""
    publish_slot(bar0)
    mbarrier.arrive(bar1, count=1)


@bundle
class WeightRing:
    """The weight ring: STAGES slots of 128 rows x 128 bytes, a ready and an empty barrier
    a slot, and MXFP4's ``info`` ring (each item's route and row factors; a stand-in
    otherwise). Chunk ``c`` of a program's stream takes slot c % STAGES. SPLIT: MXFP4's
    copy widened once a call, whose items may take the split route (config.MX_SPLIT_SPAN)."""

    slots: Buffer
    ready: Buffer
    empty: Buffer
    info: Buffer
    STAGES: gl.constexpr
    SPLIT: gl.constexpr

    @gluon.jit
    def wait_free(self, c):
        """The slot of chunk ``c``, once its last reader has released it."""
        return slot_free(self.empty, c, self.STAGES)

    @gluon.jit
    def wait_full(self, c):
        """The slot of chunk ``c``, once the chunk has landed in it."""
        return slot_full(self.ready, c, self.STAGES)

    @gluon.jit
    def release(self, c):
        """Chunk ``c`` is read: its slot may be refilled (one arrival of the MMA group's)."""
        mbarrier.arrive(self.empty.index(c % self.STAGES), count=1)

    @gluon.jit
    def fill(self, desc, s, row, col):
        """Slot ``s`` filled by TMA with the block of ``desc`` at (row, col); it lands on the
        slot's ready barrier."""
        mbarrier.expect(self.ready.index(s), desc.block_type.nbytes)
        tma_io.load(desc, [row, col], self.ready.index(s), self.slots.index(s))

    @gluon.jit
    def publish(self, s):
        """Slot ``s``, written by this partition's threads, to the MMA warps."""
        publish_slot(self.ready.index(s))

    @gluon.jit
    def publish2(self, s0, s1):
        """Slots ``s0`` and ``s1`` to the MMA warps in one hand-over."""
        publish_slots(self.ready.index(s0), self.ready.index(s1))

    @gluon.jit
    def as_bf16(self):
        """The same ring with its slots viewed as [128 x 64] bf16 chunks."""
        return WeightRing(ring_as_bf16(self.slots), self.ready, self.empty, self.info, self.STAGES,
                          self.SPLIT)


@bundle
class PackedRing:
    """MXFP4's weight on its way to the widener (over an fp8 cache; stand-ins otherwise):
    PK slots of one K chunk's packed e2m1 bytes, [128 x 64] (TMA, 64-byte swizzled), and
    CODE slots of one item's e8m0 codes, [128 x CODES] bytes (the packed loader's stores), a
    ready and an empty barrier each. The ``n``-th chunk (item) of the run takes slot n % PK
    (n % CODE)."""

    slots: Buffer
    ready: Buffer
    empty: Buffer
    codes: Buffer
    codes_ready: Buffer
    codes_empty: Buffer
    PK: gl.constexpr
    CODE: gl.constexpr

    @gluon.jit
    def wait_free(self, n):
        """The packed slot of chunk ``n``, once the widener has read the chunk before it."""
        return slot_free(self.empty, n, self.PK)

    @gluon.jit
    def wait_full(self, n):
        """The packed slot of chunk ``n``, once the chunk has landed in it."""
        return slot_full(self.ready, n, self.PK)

    @gluon.jit
    def codes_free(self, q):
        """The codes slot of item ``q`` of the run, once the widener has read item q - CODE."""
        return slot_free(self.codes_empty, q, self.CODE)

    @gluon.jit
    def codes_full(self, q):
        """The codes slot of item ``q`` of the run, once its codes are stored."""
        return slot_full(self.codes_ready, q, self.CODE)


@bundle
class LatentTile:
    """The latent of the run's token tiles in shared memory: ``bufs``, SLOTS fp8 K chunk
    slots [128 x 128], or with LAT16 (a bf16 weight) 2 NK bf16 K slices [128 x 64]; ``pe``,
    the rope's fp8 rows (a stand-in with LAT16, whose rope skips shared memory); a ready and
    an empty barrier per slot and a last pair for the rope. A slot is refilled once the last
    reader of its chunk has released it.

    With SLOTS = NK (a tile's chunks) each tile reuses the slots of the one before, chunk kb
    in slot kb. With spare slots (SLOTS > NK) the chunks of the run's tiles, in order, take
    the slots as a ring, so the next tile's first chunks land while the last items of this
    one still read its chunks."""

    bufs: Buffer
    pe: Buffer
    ready: Buffer
    empty: Buffer
    LAT16: gl.constexpr
    NK: gl.constexpr  # K chunks a tile
    SLOTS: gl.constexpr  # chunk slots: NK, or more with spare ones

    @gluon.jit
    def slot(self, n, kb: gl.constexpr):
        """The slot of K chunk ``kb`` of the run's ``n``-th tile (from 0)."""
        if self.SLOTS == self.NK:
            return kb
        else:
            return (n * self.NK + kb) % self.SLOTS

    @gluon.jit
    def phase(self, n, kb: gl.constexpr):
        """The phase of that chunk's use of its slot at the slot's barriers."""
        if self.SLOTS == self.NK:
            return n & 1
        else:
            return ring_phase(n * self.NK + kb, self.SLOTS)

    @gluon.jit
    def wait_chunk(self, n, kb: gl.constexpr):
        """Wait until chunk ``kb`` of the ``n``-th tile has landed; returns its slot."""
        s = self.slot(n, kb)
        mbarrier.wait(self.ready.index(s), self.phase(n, kb))
        return s

    @gluon.jit
    def wait_free(self, n, kb: gl.constexpr, free_phase):
        """Wait until the slot of chunk ``kb`` of the ``n``-th tile is released by the
        readers of its previous chunk (a slot's first fill passes); returns the slot.
        ``free_phase``: ``(n & 1) ^ 1``, the phase every slot waits on where a tile reuses
        the slots of the one before, computed once a tile by the caller (so the kernel
        compiles as it did before spare slots); spare slots' phases follow the ring."""
        s = self.slot(n, kb)
        if self.SLOTS == self.NK:
            mbarrier.wait(self.empty.index(s), free_phase)
        else:
            mbarrier.wait(self.empty.index(s), self.phase(n, kb) ^ 1)
        return s

    @gluon.jit
    def release(self, n, kb: gl.constexpr):
        """This reader is done with chunk ``kb`` of the ``n``-th tile."""
        mbarrier.arrive(self.empty.index(self.slot(n, kb)), count=1)

    @gluon.jit
    def rope_ready(self):
        return self.ready.index(self.SLOTS)

    @gluon.jit
    def rope_empty(self):
        return self.empty.index(self.SLOTS)


@bundle
class Claims:
    """The dynamic tail's claims (``Items.tail_of``), from the gatherer, which makes them, to
    the weight loader and the MMA warps, which run the items claimed: CLAIM_SLOTS entries of
    one int32 (repeated CLAIM_WIDTH times), a ready and an empty barrier each (the empty one
    counts the loader's and each MMA group's arrivals), and ``asked``, where the first MMA
    group asks for each claim (``ask``). The ``j``-th claim of a program (from 0) takes entry
    j % CLAIM_SLOTS. Stand-ins without a tail, never used."""

    slots: Buffer
    ready: Buffer
    empty: Buffer
    asked: Buffer

    @gluon.jit
    def ask(self, it, start, end):
        """The first MMA group, at item ``it`` of its current run [start, end): asks for the
        next claim TAIL_LEAD items before the run's end (at its first item if it is shorter;
        ``asked_now`` for an empty run)."""
        if it == gl.maximum(start, end - TAIL_LEAD):
            mbarrier.arrive(self.asked.index(0), count=1)

    @gluon.jit
    def asked_now(self):
        mbarrier.arrive(self.asked.index(0), count=1)

    @gluon.jit
    def claim(self, items, total, j, layout: gl.constexpr):
        """The gatherer's ``j``-th claim: the next claim of the call's counter, handed to the
        other partitions; returns its items [start, end) (``Items.claimed``). Every program
        makes one claim past the tail's last and then stops, so the call's last claim of all
        is the counter's value n_claims + programs - 1: that claim sets the counter back to 0
        for the next call, which reads it only after this one has ended (stream order, or an
        overlapped launch's wait). Made once the MMA warps have asked for it (``ask``)."""
        mbarrier.wait(self.asked.index(0), j & 1)
        chunk = gl.atomic_add(items.counter_ptr, 1)
        _, _, n_claims = items.tail_of(total)
        if chunk == n_claims + gl.num_programs(0) - 1:
            gl.atomic_xchg(items.counter_ptr, 0)
        s = slot_free(self.empty, j, CLAIM_SLOTS)
        self.slots.index(s).store(gl.full([CLAIM_WIDTH], 0, gl.int32, layout) + chunk)
        partition_sync()  # every thread's store before the one arrival
        mbarrier.arrive(self.ready.index(s), count=1)
        return items.claimed(total, chunk)

    @gluon.jit
    def take(self, items, total, j, layout: gl.constexpr):
        """A reader's ``j``-th claim, once the gatherer has made it, its entry released: its
        items [start, end) (``Items.claimed``)."""
        s = slot_full(self.ready, j, CLAIM_SLOTS)
        chunk = gl.max(self.slots.index(s).load(layout), axis=0)
        partition_sync()  # every thread's load before the release
        mbarrier.arrive(self.empty.index(s), count=1)
        return items.claimed(total, chunk)


@bundle
class Outputs:
    """k_out and v_out: their pointers and TMA descriptors (K-nope blocks, the rope, V
    blocks), the shared buffers items are staged in (one or two, and the rope's), with
    FP8 outputs their scales' pointers (stand-ins otherwise, never read), and ROPE_AHEAD:
    whether a full tile's rope is stored at its start rather than with each K-nope item."""

    k_ptr: gl.tensor
    v_ptr: gl.tensor
    k_desc: Descriptor
    pe_desc: Descriptor
    v_desc: Descriptor
    bufs: Buffer
    pe: Buffer
    k_scale_ptr: gl.tensor
    v_scale_ptr: gl.tensor
    FP8: gl.constexpr
    ROPE_AHEAD: gl.constexpr

    @gluon.jit
    def k_inverse(self):
        """What K's values are multiplied by before they are stored (the portable designs'
        ``load_out_inverse``): 1 / k_out_scale for FP8 outputs, else 1."""
        return load_out_inverse(self.k_scale_ptr, self.FP8)

    @gluon.jit
    def v_inverse(self):
        """``k_inverse`` for V."""
        return load_out_inverse(self.v_scale_ptr, self.FP8)


@bundle
class Handles:
    """Everything a partition reads: the schedule, the cache, the weight (its descriptor
    or pointers, its scale, how it is chunked), the ring, MXFP4's packed ring, the latent
    tile, the outputs, the ping-pong groups' turn barriers (a stand-in without PAIRS) and the
    dynamic tail's claims (stand-ins without one). A
    partition that leaves a handle unused does not capture it."""

    items: Items
    cache: Cache
    w_desc: Descriptor
    w_ptr: gl.tensor
    ws_ptr: gl.tensor
    WK: gl.constexpr  # K of a weight chunk: 128 fp8 values or 64 bf16 ones
    SCALE: gl.constexpr  # how the weight's scale applies (config.SCALE_*)
    WS_LD: gl.constexpr  # the scale's row stride (block and e8m0 scales)
    ring: WeightRing
    packed: PackedRing
    tile: LatentTile
    out: Outputs
    turns: Buffer
    claims: Claims
