"""Layer 4: ops — one definition per op (validation, ggml forward builder, backward rule)."""
from .registry import REGISTRY, OpDef, define, op
from . import elementwise, reduce, shape_ops, matmul, activation  # noqa: F401  (registration)
from . import indexing  # noqa: F401  (registration)
from . import nn_ops  # noqa: F401  (registration)
from . import optim_ops, writes  # noqa: F401  (registration of the ops of kind "writes")

__all__ = ["REGISTRY", "OpDef", "define", "op"]
