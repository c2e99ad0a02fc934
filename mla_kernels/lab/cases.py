"""One case the lab runs designs on: a random input set, the problem its arguments describe
(checked as the call checks them) and the registry device a call on its tensors runs for,
with what each variant resolves to there. The correctness checks, the occupancy model's
resource reading and the harness all start from it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..api import target_device
from ..core.devices import DeviceSpec
from ..core.problem import Problem, check_arguments
from ..core.shapes import MLAShape
from ..designs import DESIGNS, Design, DesignConfig, resolve
from .inputs import GatherInputs, build_inputs


@dataclass(frozen=True)
class Case:
    """An input set, its checked problem and the device a call on it runs for."""

    inputs: GatherInputs
    problem: Problem
    device: DeviceSpec

    def resolved(self, variants: Sequence[str], configs: dict | None = None
                 ) -> Iterator[tuple[str, Design, DesignConfig]]:
        """(variant, design, config) for each variant, in order: what ``designs.resolve``
        gives for this problem on this device. A design that does not run here (a GPU
        family's design off its GPU) is left out; a name that is no design is a ValueError."""
        for v in variants:
            if v in DESIGNS and not DESIGNS[v].runs(self.problem, self.device):
                continue
            design, cfg = resolve(v, self.problem, self.device, (configs or {}).get(v))
            yield v, design, cfg


def build_case(shape: str | MLAShape, contexts: Sequence[int], *, device: str,
               **inputs) -> Case:
    """``build_inputs(shape, contexts, device=device, **inputs)`` with its problem and the
    device a call on it runs for (the interpreter's under TRITON_INTERPRET=1)."""
    inp = build_inputs(shape, contexts, device=device, **inputs)
    return Case(inp, check_arguments(*inp.args()), target_device(inp.k_buffer.device))
