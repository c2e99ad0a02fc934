import sys
import mla_kernels as mk
from mla_kernels.lab.checks import check_outputs
bad = 0
for shape, ctx, reps in [("kimi-k3-tp8", 109440, 8), ("glm-5-style", 32000, 4), ("kimi-k3-tp8", 32000, 8)]:
    for variant in ("hopper_ws", "auto"):
        inp = mk.build_inputs(shape, [ctx], block_size=1, cache_dtype="fp8", weight_format="mxfp4",
                              device="cuda", seed=0)
        for rep in range(reps):
            inp.poison_outputs()
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
            res = check_outputs(inp)
            print(shape, ctx, variant, rep, res["correct"], f"{res['max_rel_err']:.3g}", flush=True)
            bad += not res["correct"]
print("failures", bad)
