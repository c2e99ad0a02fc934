"""The GPU run's quick tier (``-m smoke``; ``scripts/device_run.sh <commit> tests``): every
design once for each weight format and cache dtype it runs, on this machine's device, and
``auto`` with FP8 outputs once for each, beside the bad-input cases marked ``smoke`` in
their own files (debug-mode asserts, the argument checks). GPU only: on a CPU,
tests/test_kernels.py runs the portable designs under the interpreter; a design skips a
format or cache its device does not run.

A ragged batch at the Kimi-K3 TP8 shape, page 16: an empty sequence, lengths that are no
multiple of a tile or a page, outputs poisoned so an unwritten row shows."""

import pytest
import torch

import mla_kernels as mk
from mla_kernels.api import target_device
from mla_kernels.core.formats import WEIGHT_FORMATS
from mla_kernels.core.problem import check_arguments
from mla_kernels.designs import DESIGNS
from mla_kernels.lab.checks import TOLERANCES, check_outputs

pytestmark = [pytest.mark.gpu, pytest.mark.smoke]
CONTEXTS = [300, 0, 37, 129]


@pytest.mark.parametrize("cache", ["fp8", "bf16"])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("variant", [*DESIGNS, "auto"])
def test_every_design_once_per_format_and_cache(variant, fmt, cache, device, seed):
    inp = mk.build_inputs("kimi-k3-tp8", CONTEXTS, block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed)
    if variant in DESIGNS and not DESIGNS[variant].runs(check_arguments(*inp.args()),
                                                       target_device(torch.device(device))):
        pytest.skip(f"{variant} does not run {fmt} over a {cache} cache on this device")
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant)
    res = check_outputs(inp)
    assert res["spare_rows_untouched"], "a row past the last token was written"
    assert res["correct"], f"max_rel_err {res['max_rel_err']:.3g} > {TOLERANCES[fmt]}"


@pytest.mark.parametrize("cache", ["fp8", "bf16"])
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_auto_with_fp8_outputs_once_per_format_and_cache(fmt, cache, device, seed):
    # auto keys FP8 outputs' configs apart from bf16 ones (core/tuning.py): each once.
    inp = mk.build_inputs("kimi-k3-tp8", CONTEXTS, block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="auto")
    res = check_outputs(inp)
    assert res["spare_rows_untouched"], "a row past the last token was written"
    assert res["correct"], res
