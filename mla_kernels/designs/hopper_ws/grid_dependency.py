"""Programmatic dependent launch (Hopper's grid dependency control), for a kernel launched
with ``launch_pdl``: it may start while the kernel before it on the stream still runs, and
must wait before reading anything that kernel may write. Both instructions do nothing in a
kernel launched without the attribute."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def wait_for_previous_grid():
    """Block until the previous grid on the stream has finished and its writes are visible."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def allow_next_grid():
    """Let the next grid on the stream launch now (it still waits for this one's writes
    before its own first read: ``wait_for_previous_grid``)."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)
