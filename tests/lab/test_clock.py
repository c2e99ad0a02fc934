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


def test_points_timed_one_after_another_share_one_sampler(monkeypatch):
    # Each ClockLog starts its own nvidia-smi; the matrix times point after point, each
    # call's rows reading the one log it is given.
    from mla_kernels.lab import bench

    opened, given = [], []

    class Counted(clock.ClockLog):
        def __enter__(self):
            opened.append(self)
            return self

    def fake_point(pt, prov, ceilings, log, **kw):
        given.append(log)
        return [({"pt": pt}, (1.0, 2.0))]

    monkeypatch.setattr(bench, "ClockLog", Counted)
    monkeypatch.setattr(bench, "_time_point", fake_point)
    monkeypatch.setattr(bench, "provenance", dict)
    monkeypatch.setattr(bench, "measurement_row", lambda pt, sm_clock_mhz: sm_clock_mhz)
    shared = clock.ClockLog(enabled=False)
    shared.samples = [(1.5, 1980.0)]
    for pt in ("a", "b"):
        assert bench.run_points([pt], ceilings={"x": 1.0}, progress=False,
                                clock=shared) == [1980.0]
    assert opened == [] and given == [shared, shared]
    # Without one, a call opens its own, as before.
    assert math.isnan(bench.run_points(["c"], ceilings={"x": 1.0}, progress=False,
                                       sm_clock=False)[0])
    assert len(opened) == 1 and given[-1] is opened[0]


def test_the_matrix_script_opens_one_sampler_for_every_point():
    import ast
    from pathlib import Path

    src = (Path(__file__).resolve().parents[2] / "scripts" / "perf_matrix.py").read_text()
    tree = ast.parse(src)
    withs = [n for n in ast.walk(tree) if isinstance(n, ast.With)
             and "ClockLog" in ast.unparse(n.items[0].context_expr)]
    assert len(withs) == 1
    loops = [n for n in ast.walk(withs[0]) if isinstance(n, ast.For)]
    calls = [c for c in ast.walk(loops[0]) if isinstance(c, ast.Call)
             and ast.unparse(c.func) == "bench.run_points"]
    assert calls and all(any(k.arg == "clock" for k in c.keywords) for c in calls)
