"""Timing on the live GPU: one launch's device time with a flushed L2 (``measure``), the
same launch replayed from a CUDA graph (``graphed``), and rotation over input sets.

Every timing keeps its spread: a ``Timing`` is the median of ``reps`` repetitions with the
quartiles beside it, so a shorter timing says how much it can be trusted.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# Milliseconds of warm-up and of timed repetitions. ``FULL`` is the timing a target is
# scored on; ``SHORT`` serves rows a figure only draws beside the targets (portable
# designs, torch paths): the perf notes compare the two on one point.
FULL = (25, 100)
SHORT = (10, 25)


@dataclass(frozen=True)
class Timing:
    """The median of ``reps`` timed repetitions and the quartiles around it, in us."""

    median_us: float
    reps: int
    q1_us: float
    q3_us: float

    def scaled(self, factor: float) -> Timing:
        """The same timing per call of ``1 / factor`` calls (e.g. one of 8 in a graph)."""
        return Timing(self.median_us * factor, self.reps, self.q1_us * factor,
                      self.q3_us * factor)


NOT_TIMED = Timing(float("nan"), 0, float("nan"), float("nan"))


def summary(times_us: Sequence[float]) -> Timing:
    """Median and quartiles of a list of repetitions (in us)."""
    ts = sorted(float(t) for t in times_us)
    if len(ts) == 1:
        return Timing(ts[0], 1, ts[0], ts[0])
    q1, med, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    return Timing(statistics.median(ts), len(ts), q1, q3)


def measure(fn: Callable[[], object], budget: tuple[int, int] = FULL) -> Timing:
    """``fn``'s time per call with the L2 flushed before each repetition
    (``triton.testing.do_bench``), over ``budget`` = (warm-up ms, repetition ms)."""
    import triton.testing

    warmup, rep = budget
    times = triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="all")
    return summary([t * 1e3 for t in times])


# Bytes a flush reads: more than any L2 here (50 MB on the H100 and H200).
FLUSH_BYTES = 256 * 2**20


def measure_clean(fn: Callable[[], object], budget: tuple[int, int] = FULL) -> Timing:
    """``fn``'s time per call with the L2 flushed by a read before each repetition, so it
    holds no dirty line: ``measure``'s flush writes a buffer larger than the L2, whose last
    lines a timed call then writes back to memory as it evicts them (for a call that
    streams from memory, up to the L2's size in writes beside its own traffic)."""
    flush = torch.ones(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once() -> float:
        flush.sum()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    warmup, rep = budget
    first = [once() for _ in range(5)]
    per_ms = max(statistics.median(first) / 1e3, 1e-3)
    for _ in range(max(1, int(warmup / per_ms))):
        once()
    return summary([once() for _ in range(min(1000, max(5, int(rep / per_ms))))])


def median_us(fn: Callable[[], object], budget: tuple[int, int] = FULL) -> float:
    """``measure(fn, budget).median_us``: for the diagnostics that report one number."""
    return measure(fn, budget).median_us


def graphed(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` captured once in a CUDA graph (after a warm-up call outside the capture), as
    the graph's replay: the device's time of the launch without the host's."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def rotating(fns: Sequence[Callable[[], None]]) -> Callable[[], None]:
    """One call of each of ``fns`` in turn, a call at a time (input sets whose bytes together
    exceed the L2, so no call finds its inputs cached)."""
    state = {"i": 0}

    def run() -> None:
        fns[state["i"] % len(fns)]()
        state["i"] += 1
    return run
