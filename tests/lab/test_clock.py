"""The SM-clock log the timings read their rows' clock from (no GPU: its parsing, windows,
and what it gives where no clock is reported)."""

import math
import time

from mla_kernels.lab import clock


def test_samples_parse_and_other_lines_do_not():
    t, mhz = clock.parse_sample("2026/12/02 07:40:01.250, 1755\n")
    assert mhz == 1755.0 and math.isclose(t % 1, 0.25, abs_tol=1e-6)
    for line in ("timestamp, clocks.current.sm [MHz]", "2026/12/02 07:40:01.250, [N/A]", "",
                 "No devices were found"):
        assert clock.parse_sample(line) is None


def test_a_window_reads_the_median_of_its_samples_only():
    log = clock.ClockLog(enabled=False)
    log.samples = [(10.0, 1980.0), (11.0, 1755.0), (12.0, 1740.0), (13.0, 1770.0),
                   (20.0, 1200.0)]
    assert log.median_mhz(10.5, 13.5) == 1755.0
    assert math.isnan(log.median_mhz(14.0, 19.0))


def test_no_clock_reported_reads_nan(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    with clock.ClockLog() as log, log.window() as w:
        time.sleep(0.01)
    assert math.isnan(w.mhz)
    with clock.ClockLog(enabled=False) as log, log.window() as w:
        pass
    assert math.isnan(w.mhz) and log.samples == []
