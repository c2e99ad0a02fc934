"""Holding a program for a set time without touching memory: it reads the global timer
until the time has passed. The sequence diagnostic's gap kernel is one such wait; the
overlapped-launch test's late writer waits so ahead of its stores."""

import triton
import triton.language as tl


@triton.jit
def global_ns():
    """The GPU's global timer, ns."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def wait_ns(NS: tl.constexpr):
    """Spin for NS ns of the global timer; returns the time waited. The timer's reads are not
    pure, so the loop stays whether or not the result is used."""
    t0 = global_ns()
    t = t0
    while t - t0 < NS:
        t = global_ns()
    return t - t0
