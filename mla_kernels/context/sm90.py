"""What the context path's Gluon kernels for Hopper share (``absorbed_hopper.py``,
``attention_hopper.py``): the device they run on, the layout of a warpgroup's wgmma
accumulator, and a key tile's online softmax."""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


def device_reason(device: torch.device) -> str | None:
    """Why a kernel for sm_90 cannot run on ``device`` (None: it can)."""
    if device.type != "cuda" or torch.version.hip:
        return f"a CUDA device, got {device}"
    cap = torch.cuda.get_device_capability(device)
    if cap[0] != 9:
        return f"an sm_90 GPU, got sm_{cap[0]}{cap[1]}"
    return None


@gluon.constexpr_function
def wgmma_acc_layout(num_warps, cols):
    """A warpgroup's [64 x cols] float32 wgmma accumulator (16-bit operands: K 16 an
    instruction)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                     instr_shape=[16, cols, 16])


@gluon.jit
def online_softmax(sc, key_cols, j, k0, k1, qk_scale, m_i, l_i, BN: gl.constexpr):
    """Key tile ``j`` (of BN keys from ``k0``) of a split ending at ``k1``: its raw scores
    ``sc`` (keys past the split's end masked), scaled by ``qk_scale`` (sm_scale x log2(e),
    > 0) into base-2 probabilities. Returns (P, each row's rescale factor, the new running
    max and sum)."""
    if (j + 1) * BN > k1 - k0:  # the split's last tile passes its end
        keys = k0 + j * BN + key_cols
        sc = gl.where((keys < k1)[None, :], sc, float("-inf"))
    # The scale after the row maxima, and in one multiply-add with the shift.
    m_new = gl.maximum(m_i, gl.max(sc, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc * qk_scale - m_new[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)
