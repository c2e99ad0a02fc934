"""Registry of MLA model shapes: the one place tests, benchmarks and notebooks take them from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MLAShape:
    """Per-device (tensor-parallel local) dimensions of one MLA layer."""

    name: str
    num_heads: int
    kv_c_dim: int = 512
    kv_pe_dim: int = 64
    qk_nope_dim: int = 128
    v_head_dim: int = 128

    @property
    def latent_dim(self) -> int:
        """Width of one cached latent row: compressed values then rope values."""
        return self.kv_c_dim + self.kv_pe_dim

    @property
    def head_cols(self) -> int:
        """Rows of the kv_b_proj weight that one head owns (K-nope then V)."""
        return self.qk_nope_dim + self.v_head_dim

    @property
    def weight_rows(self) -> int:
        return self.num_heads * self.head_cols

    @property
    def k_head_dim(self) -> int:
        return self.qk_nope_dim + self.kv_pe_dim


SHAPES: dict[str, MLAShape] = {
    s.name: s
    for s in (
        MLAShape("kimi-k3-tp8", num_heads=12),
        MLAShape("deepseek-v3-tp8", num_heads=16),
        MLAShape("deepseek-v3-tp1", num_heads=128),
        # GLM-5-style heads as the public kernel's tests use them: wider K-nope and V.
        MLAShape("glm-5-style", num_heads=32, qk_nope_dim=192, v_head_dim=256),
    )
}


def get_shape(shape: str | MLAShape) -> MLAShape:
    """Look a shape up by registry name (an MLAShape passes through)."""
    if isinstance(shape, MLAShape):
        return shape
    try:
        return SHAPES[shape]
    except (KeyError, TypeError):  # not a name, or not hashable
        raise ValueError(f"shape: expected one of {sorted(SHAPES)}, got {shape!r}") from None
