"""Compile a run's kernels ahead of timing it, on every core of the host at once.

Timing a point compiles each kernel it launches on first use, one at a time, which is
about half of a matrix run. Here worker processes, one per core, run each point through
the timing harness itself at a budget of a millisecond (every input set, the plain and
graph timings, the check), and the correctness checks' single calls as those make them,
so every kernel the run will launch is compiled with the run's own specialisations, and
lands in Triton's on-disk cache, where the timing process finds it. A single launch per
design is not enough: the harness's path compiles kernels of its own (seen on the H200).
The torch path's compiled FP8 quantize (the matrix's FP8-output points) is called as the
matrix calls it, so Inductor's on-disk caches hold its graphs (``quantize_job``). A
group's later jobs start once its first job is done (``ready``), not once every group's is.

    python -m mla_kernels.lab.precompile [--workers N] [--points GLOB ...] [--report CONFIG]
        [--host] [--list]

``--points`` the matrix points (all by default; ``--points none`` for none), ``--report``
the points a report configuration measures (its YAML, e.g. configs/h200.yaml), ``--host``
the host-cost script's calls. A job that fails is reported and skipped: the timing step
that launches it then reports the same failure in its row.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .bench import Point


@dataclass(frozen=True)
class Job:
    """A point and its designs, either run through the timing harness as a matrix or
    notebook point times them (``harness``: ``bench.run_points``, inputs without spare
    rows), or each checked once as the notebooks' correctness checks run them
    (``checks.check_variants``, on ``build_inputs``' default inputs)."""

    point: Point
    harness: bool = True
    # The torch path's compiled FP8 quantize (``bench.quantize_outputs``) called at these
    # (tokens, heads, K head dim, V head dim) in turn, as the matrix calls it at its FP8-output
    # points (``quantize_job``); ``point`` then only names the first of them.
    quantize: tuple[tuple[int, int, int, int], ...] = ()

    def group(self) -> tuple:
        """Jobs of one group most likely share their kernels: the first compiles them."""
        p = self.point
        return (p.variants, p.shape, p.weight_format, p.cache_dtype, p.block_size,
                p.weight_draw, p.out_dtype, repr(sorted(p.configs.items())), self.quantize)


def auto_is_another(pt: Point, device=None) -> bool:
    """Whether ``auto`` at ``pt`` resolves to the design and config another of its variants
    runs (``designs.resolve``, on ``device``: the live GPU, else the registry's H200): its
    calls then launch that variant's kernels on the same inputs, which that variant's job
    compiles."""
    from ..core.devices import DEVICES, live_device
    from ..designs import resolve
    from .occupancy import problem_for

    if "auto" not in pt.variants:
        return False
    device = device or live_device() or DEVICES["H200"]
    prob = problem_for(pt.shape, pt.contexts, pt.cache_dtype, pt.weight_format,
                       pt.block_size, pt.out_torch_dtype)
    try:
        design, cfg = resolve("auto", prob, device, pt.configs.get("auto"))
        return any(resolve(v, prob, device, pt.configs.get(v)) == (design, cfg)
                   for v in pt.variants if v != "auto")
    except ValueError:  # a point auto cannot run here: its job reports it
        return False


def matrix_jobs(patterns: Sequence[str] | None = None) -> list[Job]:
    """The matrix points named by ``patterns`` (all for None), through the harness, a job
    per design (so the compiles of one point spread over the workers); none for ``auto``
    where it runs another variant's design and config (``auto_is_another``)."""
    from .matrix import select

    return [Job(replace(pt, variants=(v,),
                        configs={k: c for k, c in pt.configs.items() if k == v}))
            for pt in select(patterns).values() for v in pt.variants
            if not (v == "auto" and auto_is_another(pt))]


def quantize_job(patterns: Sequence[str] | None = None) -> list[Job]:
    """The matrix points' torch paths with FP8 outputs (named by ``patterns``, all for None)
    quantize their bf16 result by one ``torch.compile``d function, compiled in the matrix's
    process: torch compiles it for the first point's shapes, then once more with the
    dimensions that changed left symbolic. One job makes the same calls in the matrix's
    order, so Inductor's on-disk caches hold both graphs and their kernels when the matrix
    compiles them: [] where no point has FP8 outputs."""
    from ..core.shapes import get_shape
    from .matrix import select

    shapes, first = [], None
    for pt in select(patterns).values():
        if pt.out_dtype == "bfloat16":
            continue
        s = get_shape(pt.shape)
        shapes.append((sum(pt.contexts), s.num_heads, s.k_head_dim, s.v_head_dim))
        first = first or pt
    if first is None:
        return []
    return [Job(replace(first, variants=("torch_bf16",), configs={}), harness=False,
                quantize=tuple(shapes))]


def report_jobs(config_path: str | os.PathLike) -> list[Job]:
    """The launches a report configuration measures on a GPU: the context sweep's points
    and its checks (notebook 02), the roofline's points (03), and the resource reads of
    the occupancy notebook (01), as those notebooks build their inputs."""
    import yaml

    cfg = yaml.safe_load(Path(config_path).read_text(encoding="utf-8")) or {}
    shared = cfg.get("parameters") or {}
    jobs: list[Job] = []
    for notebook, own in (cfg.get("notebooks") or {}).items():
        p = {**shared, **(own or {})}
        if p.get("mode") != "measure":
            continue
        key = (p["shape"], p["weight_format"], p["cache_dtype"], int(p["block_size"]))
        variants = list(p.get("variants") or [])

        def add(contexts: Iterable[int], harness: bool, variants=variants, key=key) -> None:
            shape, fmt, cache, page = key
            jobs.append(Job(Point(shape, tuple(contexts), fmt, cache, page, tuple(variants)),
                            harness=harness))
        if notebook.startswith("01"):
            add((256,), False)
        else:
            for c in p.get("contexts") or []:
                add((c,), True)
                if notebook.startswith("02"):  # its bit-identity check at every context
                    add((c,), False)
            if p.get("batch", "single") == "single" and p.get("ragged_contexts"):
                add(p["ragged_contexts"], True)
            for c in p.get("check_contexts") or []:
                add((c,), False)
            if p.get("check_ragged"):
                add(p["check_ragged"], False)
    return jobs


def host_jobs(variants: Sequence[str], contexts: Sequence[int] = (256, 4096),
              layers: Sequence[str] = ("auto", "hopper_ws", "tiled"),
              layer_contexts: Sequence[int] = (4096, 32000, 109440)) -> list[Job]:
    """The calls ``scripts/host_cost.py`` makes: every variant at its host-cost contexts,
    and the eager-layers variants at theirs (Kimi-K3 TP8, fp8 per-row over an fp8 cache,
    page 1, no spare rows: the harness's inputs, timed at no point)."""
    k = ("kimi-k3-tp8", "fp8_row", "fp8", 1)
    return ([Job(Point(k[0], (c,), *k[1:], tuple(variants))) for c in contexts]
            + [Job(Point(k[0], (c,), *k[1:], tuple(layers))) for c in layer_contexts])


def schedule(jobs: Iterable[Job]) -> tuple[list[Job], list[Job]]:
    """(first job of each group, the rest), each slowest-compiling first, duplicates
    dropped. ``auto`` alone waits for the rest: by then what it resolves to is compiled."""
    seen: set[Job] = set()
    first: dict[tuple, Job] = {}
    rest: list[Job] = []
    for j in jobs:
        if j in seen:
            continue
        seen.add(j)
        if j.group() in first or j.point.variants == ("auto",):
            rest.append(j)
        else:
            first[j.group()] = j
    def by_cost(j: Job) -> tuple:  # the Gluon design compiles slowest: its groups first
        v = j.point.variants
        return (not j.quantize, v == ("auto",), "hopper_ws" not in v, -len(v),
                -sum(j.point.contexts))
    return sorted(first.values(), key=by_cost), sorted(rest, key=by_cost)


# The harness needs ceilings for its rows' floors; none is measured here.
_NO_CEILINGS = {"copy_tbps": 1.0, "write_tbps": 1.0, "mm_tflops_bf16": 1.0, "mm_tflops_fp8": 1.0}


def warm(job: Job) -> tuple[Job, float, str]:
    """Run ``job`` (a worker's task): (job, seconds, errors or "")."""
    import torch

    from . import bench
    from .checks import check_variants

    t0 = time.perf_counter()
    errors = []
    try:
        pt = job.point
        if job.quantize:
            warm_quantize(job.quantize)
        elif job.harness:
            # A sequence's calls launch the point's kernels: compiling needs none of its sets.
            rows = bench.run_points([replace(pt, sequence=0)], ceilings=_NO_CEILINGS,
                                    torch_paths=False,
                                    design_graphs=True, progress=False,
                                    budget=lambda _: (0, 1), sm_clock=False)
            errors = [f"{r.variant}: {r.error}" for r in rows if r.error]
        else:
            for v in pt.variants:  # one at a time: a design that fails leaves the others
                try:
                    check_variants(pt.shape, pt.contexts, variants=(v,), device="cuda",
                                   cache_dtype=pt.cache_dtype, weight_format=pt.weight_format,
                                   block_size=pt.block_size)
                except Exception as e:  # a design that cannot run this problem here
                    errors.append(f"{v}: {type(e).__name__}: {str(e)[:120]}")
        torch.cuda.empty_cache()
    except Exception as e:  # reported; the timing step records the same failure in its row
        errors.append(f"{type(e).__name__}: {str(e)[:160]}")
    return job, time.perf_counter() - t0, "; ".join(errors)


def warm_quantize(shapes: Iterable[tuple[int, int, int, int]], device: str = "cuda") -> None:
    """Call the torch path's compiled quantize (``bench.quantize_outputs``) as its FP8-output
    call makes it (``bench.torch_path``: bf16 K and V, their [1] scales, the outputs' first
    ``tokens`` rows) at each of ``shapes`` (tokens, heads, K head dim, V head dim) in turn."""
    import torch

    from . import bench

    quant = bench.quantize_outputs()
    for t, heads, dk, dv in shapes:
        k = torch.zeros((t, heads, dk), dtype=torch.bfloat16, device=device)
        v = torch.zeros((t, heads, dv), dtype=torch.bfloat16, device=device)
        k8 = torch.empty((t, heads, dk), dtype=torch.float8_e4m3fn, device=device)
        v8 = torch.empty((t, heads, dv), dtype=torch.float8_e4m3fn, device=device)
        one = torch.ones(1, dtype=torch.float32, device=device)
        quant(k, v, one, one.clone(), k8[:t], v8[:t])
        del k, v, k8, v8


OOM_WORKERS = 3
MEMORY_SHARE = 0.8  # of the GPU's memory the jobs in flight may take together, by estimate


def memory_gib(job: Job) -> float:
    """A job's GPU memory, estimated high: a GiB of context and kernels, plus its outputs
    three times (one input set's, the reference's float32 copy) and eight more for a point
    that times 8 launches in one graph (each writes its own)."""
    from ..core.shapes import get_shape
    from . import roofline

    p = job.point
    if job.quantize:  # bf16 and fp8 outputs at its largest shape
        return 1.0 + max(3 * t * h * (dk + dv) for t, h, dk, dv in job.quantize) / 2**30
    out = roofline.output_bytes(get_shape(p.shape), sum(p.contexts))
    return 1.0 + (3 + (8 if p.graph8 else 0)) * out / 2**30


def admit(pending: list[Job], in_flight: Sequence[float], slots: int, budget_gib: float
          ) -> list[Job]:
    """The jobs of ``pending`` to start now, in its order, while ``slots`` processes are
    free and the estimates (``memory_gib``) of those in flight and those started fit in
    ``budget_gib``; with nothing in flight the first always starts (it may fit alone)."""
    used, start = sum(in_flight), []
    for j in pending:
        if len(start) >= slots:
            break
        g = memory_gib(j)
        if (not in_flight and not start) or used + g <= budget_gib:
            start.append(j)
            used += g
    return start


def _gpu_gib() -> float:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / 2**30
    except Exception:  # no usable GPU: no bound
        pass
    return float("inf")


def ready(pending: Sequence[Job], firsts: set[Job], open_groups: set[tuple]) -> list[Job]:
    """The jobs of ``pending`` that may start now, in its order: a group's first job
    (``firsts``) at once; ``auto`` alone once no first job is left (``open_groups``: the
    groups whose first job has not finished); any other once its own group's first job has
    finished, whatever the other groups' are doing."""
    out = []
    for j in pending:
        if j in firsts:
            out.append(j)
        elif j.point.variants == ("auto",):
            if not open_groups:
                out.append(j)
        elif j.group() not in open_groups:
            out.append(j)
    return out


def _run_jobs(pool, first: list[Job], rest: list[Job], workers: int, budget_gib: float,
              log, t0: float) -> list[tuple[Job, float, str]]:
    """``warm`` over ``first`` and ``rest`` in ``pool``: each job admitted once it is
    ``ready`` and a process and its memory (``admit``) are free, so a group's later jobs
    start as soon as its first job is done, not once every group's is."""
    from concurrent.futures import FIRST_COMPLETED, wait

    pending, running, out = list(first) + list(rest), {}, []
    firsts, open_groups = set(first), {j.group() for j in first}
    while pending or running:
        start = admit(ready(pending, firsts, open_groups),
                      [g for _, g in running.values()], workers - len(running), budget_gib)
        for j in start:
            pending.remove(j)
            running[pool.submit(warm, j)] = (j, memory_gib(j))
        if not running:  # cannot happen (see ready): never wait on nothing
            raise RuntimeError(f"precompile: {len(pending)} jobs left and none can start")
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for f in finished:
            j, _ = running.pop(f)
            out.append(f.result())
            if j in firsts:
                open_groups.discard(j.group())
                if not open_groups:
                    log(f"precompile: {len(first)} jobs (first of each group) done at "
                        f"{time.perf_counter() - t0:.0f} s", flush=True)
    log(f"precompile: {len(rest)} jobs (the rest) done at {time.perf_counter() - t0:.0f} s",
        flush=True)
    return out


def out_of_memory(error: str) -> bool:
    """Whether a job's errors say the GPU ran out of memory (torch's OutOfMemoryError, or a
    launch the driver refused for it)."""
    return "OutOfMemoryError" in error or "out of memory" in error.lower()


def retry_out_of_memory(done: list[tuple[Job, float, str]], again
                        ) -> tuple[list[tuple[Job, float, str]], int]:
    """``done`` with the jobs that ran out of GPU memory replaced by ``again(those jobs)``'s
    results; and how many there were."""
    short = [j for j, _, e in done if out_of_memory(e)]
    if not short:
        return done, 0
    return [d for d in done if not out_of_memory(d[2])] + list(again(short)), len(short)


def run(jobs: Iterable[Job], workers: int | None = None, log=print) -> list[tuple[Job, float, str]]:
    """Compile every job's kernels in ``workers`` processes (default: the cores but one):
    one job of each group first, each of the rest once its group's first is done (``auto``
    once every group's is: ``ready``), as many at once as processes are free and their
    estimated memory fits in ``MEMORY_SHARE`` of the GPU's; then again,
    ``OOM_WORKERS`` at a time, those that still ran out of GPU memory. Returns each job's
    (job, seconds, error). The workers inherit this process's environment,
    TRITON_INTERPRET included, which the package reads as a worker imports it."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    first, rest = schedule(jobs)
    workers = max(1, min(workers or (os.cpu_count() or 2) - 1, len(first) or 1))
    done: list[tuple[Job, float, str]] = []
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    budget = MEMORY_SHARE * _gpu_gib()
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        done += _run_jobs(pool, first, rest, workers, budget, log, t0)
    # An estimate can be short: jobs that ran out of GPU memory beside the others run again,
    # a few at a time, so their kernels are still compiled before the timing step.
    def again(short: list[Job]) -> list[tuple[Job, float, str]]:
        with ProcessPoolExecutor(min(OOM_WORKERS, len(short)), mp_context=ctx) as pool:
            return list(pool.map(warm, short))
    done, n = retry_out_of_memory(done, again)
    if n:
        log(f"precompile: {n} jobs out of GPU memory, again {OOM_WORKERS} at a time, done "
            f"at {time.perf_counter() - t0:.0f} s", flush=True)
    for job, _, error in done:
        if error:
            p = job.point
            log(f"precompile: {p.shape} {p.weight_format}/{p.cache_dtype}/p{p.block_size} "
                f"{list(p.contexts)[:4]}: {error}", flush=True)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=None, help="processes (default: cores - 1)")
    ap.add_argument("--points", nargs="+", help="matrix point globs ('none': no point)")
    ap.add_argument("--report", help="a report configuration's YAML whose points to compile")
    ap.add_argument("--host", action="store_true", help="also the host-cost script's calls")
    ap.add_argument("--list", action="store_true", help="print the jobs and exit")
    a = ap.parse_args(argv)
    if a.workers is not None and a.workers < 1:
        ap.error(f"--workers: expected a count >= 1, got {a.workers}")
    jobs = [] if a.points == ["none"] else matrix_jobs(a.points) + quantize_job(a.points)
    if a.report:
        if not Path(a.report).is_file():
            ap.error(f"--report: expected a configuration file, got {a.report!r}")
        jobs += report_jobs(a.report)
    if a.host:
        from ..designs import DESIGNS

        jobs += host_jobs(["auto", *DESIGNS])
    first, rest = schedule(jobs)
    if a.list:
        for j in first + rest:
            print(j)
        print(f"{len(first)} groups, {len(first) + len(rest)} jobs")
        return 0
    run(jobs, a.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
