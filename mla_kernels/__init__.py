"""mla_kernels: the cached-prefix gather_kv_b_proj of multi-head latent attention."""

from .api import gather_kv_b_proj
from .core.problem import GatherArgs, validate_inputs
from .core.shapes import SHAPES, MLAShape, get_shape
from .designs import DESIGNS, variant_names
from .lab.inputs import GatherInputs, build_inputs

__all__ = [
    "DESIGNS",
    "SHAPES",
    "GatherArgs",
    "GatherInputs",
    "MLAShape",
    "build_inputs",
    "gather_kv_b_proj",
    "get_shape",
    "validate_inputs",
    "variant_names",
]
__version__ = "0.3.0"
