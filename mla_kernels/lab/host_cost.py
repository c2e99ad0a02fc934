"""Host cost of the eager call on the live GPU: host time per cached call beside an empty
Triton launch and a torch op (interleaved round by round, so the host's drift hits all
alike), where that time goes (cProfile), and a model's layers of eager calls against the
same calls replayed from one CUDA graph. ``scripts/host_cost.py`` writes all three."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from ..api import gather_kv_b_proj
from .inputs import build_inputs
from .provenance import provenance


@triton.jit
def empty_kernel(p0, p1, p2, p3, p4, p5, p6, p7, p8, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9,
                 i10, C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr, C3: tl.constexpr):
    """The host-cost anchor: a launch with this operation's argument count and no work."""
    pass


def empty_launch(first_int: int = 0) -> Callable[[], None]:
    """``empty_kernel`` on 132 programs with 9 small tensors and the ints first_int,
    first_int + 1, ... (11 of them), as a call."""
    t = [torch.empty(16, device="cuda") for _ in range(9)]
    ints = range(first_int, first_int + 11)
    return lambda: empty_kernel[(132,)](*t, *ints, C0=1, C1=2, C2=3, C3=4)


def _host_round(fn: Callable[[], object], reps: int) -> float:
    """Host time per call of ``reps`` back-to-back calls (the GPU runs behind), in us."""
    import time

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def host_cost(variants: Sequence[str], contexts: Sequence[int] = (256, 4096),
              shape: str = "kimi-k3-tp8", reps: int = 200, rounds: int = 7,
              trees: dict[str, Callable] | None = None) -> list[dict]:
    """Host time per call (``host_us``) of each variant at each context, beside two anchors:
    ``empty_triton_launch`` (an empty @triton.jit kernel with 9 tensors, 11 ints and 4
    constants, grid 132) and ``torch_add`` (``x.add_(1)``).

    Every round times the anchors and then every (tree, context, variant) once, so the
    host's drift (up to 1.5x from one run to the next on the H200) hits all alike; ``host_us`` is the
    median over rounds and ``x_empty_launch`` the median of each round's ratio to that
    round's anchor. ``trees`` maps a label (the commit) to the ``gather_kv_b_proj`` it
    times, for a before/after in one process; by default this tree's, as its commit."""
    import statistics

    prov = provenance()
    trees = trees or {prov["commit"]: gather_kv_b_proj}
    x = torch.zeros(16, device="cuda")
    entries: list[tuple[dict, Callable[[], object]]] = [
        ({"ctx": 0, "variant": "empty_triton_launch", "tree": ""}, empty_launch(1)),
        ({"ctx": 0, "variant": "torch_add", "tree": ""}, lambda: x.add_(1))]
    for ctx in contexts:
        args = build_inputs(shape, [ctx], device="cuda", spare_indices=0, spare_rows=0,
                            spare_blocks=0).args()
        for label, call in trees.items():
            for v in variants:
                entries.append(({"ctx": ctx, "variant": v, "tree": label},
                                lambda v=v, a=args, call=call: call(*a, variant=v)))
    for _, fn in entries:  # compile, plan, warm
        for _ in range(20):
            fn()
    times: list[list[float]] = [[] for _ in entries]
    for _ in range(rounds):
        for i, (_, fn) in enumerate(entries):
            times[i].append(_host_round(fn, reps))
    torch.cuda.synchronize()
    anchor = times[0]
    return [{**prov, "model": shape, **key, "host_us": statistics.median(ts),
             "x_empty_launch": statistics.median(a / b for a, b in zip(ts, anchor, strict=True))}
            for (key, _), ts in zip(entries, times, strict=True)]


def host_profile(variant: str, ctx: int, shape: str = "kimi-k3-tp8", calls: int = 2000,
                 call: Callable | None = None, top: int = 10) -> str:
    """Where one cached call's host time goes: cProfile over ``calls`` calls, the ``top``
    functions by own time (Triton's C launch entry shows as one built-in)."""
    import cProfile
    import io
    import pstats

    call = call or gather_kv_b_proj
    args = build_inputs(shape, [ctx], device="cuda", spare_indices=0, spare_rows=0,
                        spare_blocks=0).args()
    for _ in range(20):
        call(*args, variant=variant)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call(*args, variant=variant)
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def eager_layers(variants: Sequence[str], contexts: Sequence[int], shape: str = "kimi-k3-tp8",
                 layers: int = 61) -> list[dict]:
    """Wall time per call of ``layers`` back-to-back eager calls (each writing its own
    outputs, no L2 flush, one synchronise at the end) and of the same calls replayed from
    one CUDA graph: a prefill's pass over a model's layers, eager against captured."""
    import time

    prov = provenance()
    rows = []
    for ctx in contexts:
        inp = build_inputs(shape, [ctx], device="cuda", spare_indices=0, spare_rows=0,
                           spare_blocks=0)
        outs = [(torch.empty_like(inp.k_prefix), torch.empty_like(inp.v_prefix))
                for _ in range(layers)]
        for v in variants:
            calls = [inp.args()._replace(k_prefix=k, v_prefix=o) for k, o in outs]

            def run(calls=calls, v=v) -> None:
                for a in calls:
                    gather_kv_b_proj(*a, variant=v)
            run()  # warm up: compile, plan
            torch.cuda.synchronize()
            eager = []
            for _ in range(5):
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize()
                eager.append((time.perf_counter() - t0) / layers * 1e6)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            graph.replay()
            torch.cuda.synchronize()
            replay = []
            for _ in range(5):
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize()
                replay.append((time.perf_counter() - t0) / layers * 1e6)
            del graph
            rows.append({**prov, "model": shape, "ctx": ctx, "variant": v,
                         "eager_us": sorted(eager)[2], "graph_us": sorted(replay)[2]})
        del outs, inp
        torch.cuda.empty_cache()
    return rows
