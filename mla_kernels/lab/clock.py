"""The SM clock while something is timed: ``nvidia-smi`` samples it in a child process for
as long as a ``ClockLog`` is open, each sample stamped with the device's own wall time, and
``median_mhz(t0, t1)`` gives the median of the samples in a window of ``time.time()``.

A child process rather than a thread polling the driver: sampling then costs the timed
process no interpreter time, which a plain call's timing (host cost included) would see.
Where ``nvidia-smi`` is absent or reports no clock (another vendor, a machine with no GPU),
every window reads NaN.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from datetime import datetime

NAN = float("nan")


def _device_index() -> str:
    """The GPU the timing process uses, as nvidia-smi numbers it: the first index of
    CUDA_VISIBLE_DEVICES where it holds indices, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return first if first.isdigit() else "0"


def parse_sample(line: str) -> tuple[float, float] | None:
    """``"2026/12/02 07:40:01.123, 1755"`` -> (seconds since the epoch, MHz); None for a
    line that is not a sample (a header, "[N/A]", a message)."""
    try:
        stamp, mhz = (p.strip() for p in line.split(","))
        t = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return t, float(mhz.split()[0])
    except (ValueError, IndexError):
        return None


class ClockLog:
    """SM-clock samples every ``interval_ms`` while open (a context manager); with
    ``enabled`` false it samples nothing (every window NaN)."""

    def __init__(self, interval_ms: int = 25, enabled: bool = True):
        self.interval_ms, self.enabled = interval_ms, enabled
        self.samples: list[tuple[float, float]] = []
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> ClockLog:
        if not self.enabled:
            return self
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", "-i", _device_index(), "--query-gpu=timestamp,clocks.sm",
                 "--format=csv,noheader,nounits", "-lms", str(self.interval_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        threading.Thread(target=self._read, daemon=True).start()
        # nvidia-smi takes a few hundred ms to start: a window opened before its first
        # sample would read the clock of whatever ran after the window began.
        deadline = time.time() + 3.0
        while not self.samples and time.time() < deadline and self._proc.poll() is None:
            time.sleep(self.interval_ms / 1e3)
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            s = parse_sample(line)
            if s is not None:
                with self._lock:
                    self.samples.append(s)

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait()
            self._proc = None

    def median_mhz(self, t0: float, t1: float) -> float:
        """The median clock sampled in [t0, t1] (``time.time()``), waiting up to a second
        for the window's last sample to arrive; NaN if none lies in it."""
        if self._proc is not None:
            deadline = time.time() + 1.0
            while time.time() < deadline:
                with self._lock:
                    if self.samples and self.samples[-1][0] >= t1:
                        break
                time.sleep(self.interval_ms / 1e3)
        with self._lock:
            inside = [mhz for t, mhz in self.samples if t0 <= t <= t1]
        return statistics.median(inside) if inside else NAN

    def window(self):
        """A context manager timing a block: its ``mhz`` after the block is the median
        clock during it."""
        return _Window(self)


class _Window:
    def __init__(self, log: ClockLog):
        self.log, self.mhz = log, NAN

    def __enter__(self) -> _Window:
        self.t0 = time.time()
        return self

    def __exit__(self, *exc) -> None:
        self.mhz = self.log.median_mhz(self.t0, time.time())
