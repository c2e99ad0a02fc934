"""The dynamic tail's work counters (``HopperWSConfig.tail_items``): an int32 in global memory
per device and stream, zero between calls.

A call with a tail hands its last items out from its counter, and the call's last claim sets
the counter back to zero (``shared_buffers.Claims.claim``). So a counter serves one call at a
time: calls on one stream never overlap, and each stream has a counter of its own. A CUDA
graph keeps the counter of the stream it was captured on (docs/contract.md).

A device's counters are zeroed once, when its block is made, and the host waits for that
before any kernel can read them. No block is made while a CUDA graph is being captured (the
zeroing would be captured, not run): a call made then, or on a stream past the block's
STREAMS, runs without its tail, as correct, its runs static.
"""

from __future__ import annotations

import threading

import torch

from .config import TAIL_COUNTER_STRIDE

STREAMS = 64  # counters a device: streams that may call with a tail

_blocks: dict[int, torch.Tensor] = {}
_counters: dict[tuple[int, int], tuple[torch.Tensor, int]] = {}
_lock = threading.Lock()  # calls from several threads: one slot a stream, one block a device


def stream_counter(device: int) -> tuple[torch.Tensor, int] | None:
    """The current stream's counter on ``device`` (a CUDA device index): a one-element view
    and its address, or None where there is none (see above)."""
    key = (device, torch._C._cuda_getCurrentRawStream(device))
    got = _counters.get(key)
    if got is not None:
        return got
    with _lock:
        return _new_counter(device, key)


def _new_counter(device: int, key: tuple[int, int]) -> tuple[torch.Tensor, int] | None:
    got = _counters.get(key)
    if got is not None:
        return got
    block = _blocks.get(device)
    if block is None:
        with torch.cuda.device(device):  # the capture, if any, is on that device's stream
            if torch.cuda.is_current_stream_capturing():
                return None
        block = torch.zeros(STREAMS * TAIL_COUNTER_STRIDE, dtype=torch.int32,
                            device=torch.device("cuda", device))
        # Zeroed on this stream; another stream's first call must not overtake it.
        torch.cuda.synchronize(device)
        _blocks[device] = block
    taken = sum(1 for d, _ in _counters if d == device)
    if taken == STREAMS:
        return None
    view = block[taken * TAIL_COUNTER_STRIDE:taken * TAIL_COUNTER_STRIDE + 1]
    got = _counters[key] = (view, view.data_ptr())
    return got
