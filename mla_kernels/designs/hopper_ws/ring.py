"""Hand-over of shared buffers between partitions."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from .compat import partition_sync


@gluon.jit
def _publish(bar):
    """Hand a ring slot written by this partition's threads to the MMA warps: each thread's
    stores made visible to the async proxy (wgmma), all threads done, one arrival."""
    fence_async_shared()
    partition_sync()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _publish2(bar0, bar1):
    """``_publish`` for two ring slots at once (one fence and one barrier)."""
    _publish(bar0)
    mbarrier.arrive(bar1, count=1)
