import sys, torch
from mla_kernels.context import plan_expanded
from mla_kernels.context.attention import Blocking
from mla_kernels.lab.context_inputs import build_context_inputs
c, n = int(sys.argv[1]), int(sys.argv[2])
blk = Blocking(*map(int, sys.argv[3].split(","))) if len(sys.argv) > 3 else None
ci = build_context_inputs("kimi-k3-tp8", c, n, cache_dtype="fp8", weight_format="fp8_row", device="cuda", seed=0)
plan = plan_expanded(*ci.args(), chunk_tokens=32768, blocking=blk)
plan.run(); torch.cuda.synchronize()
plan.attend(); torch.cuda.synchronize()
print("splits", plan.splits)
