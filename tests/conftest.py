"""Choose the CPU interpreter or the GPU once per process, before any kernel is decorated.

With no GPU (CI), TRITON_INTERPRET=1 is set here. On a GPU machine run
`TRITON_INTERPRET=0 pytest` to test the compiled kernels.
"""

import os
import random

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU with TRITON_INTERPRET=0")
    for item in items:
        if "gpu" in item.keywords and INTERPRET:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture
def seed(request) -> int:
    """A fresh random seed per test, recorded so a failure prints it (replay one with
    MLA_SEED=<seed> pytest <test id>)."""
    value = int(os.environ.get("MLA_SEED") or random.SystemRandom().randrange(2**31))
    request.node.user_properties.append(("seed", value))
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seeds = [v for k, v in item.user_properties if k == "seed"]
    if report.failed and seeds:
        report.sections.append(("seed", f"MLA_SEED={seeds[0]} pytest '{item.nodeid}'"))
