"""The README's snippet runs as written, here (under the interpreter on a machine with no GPU)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_using_it_snippet_runs_as_written(tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text.split("## Using it", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    k_err, v_err = (float(x) for x in out.stdout.split())
    assert 0 <= k_err < 1e-2 and 0 <= v_err < 1e-2  # the fp8 tolerance
