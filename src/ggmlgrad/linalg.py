"""``gg.linalg``: torch.linalg's norms (the toolkit's namespace over the tensor layer's norms).

>>> import ggmlgrad as gg
>>> gg.linalg.vector_norm(gg.tensor([3.0, -4.0]), ord=1).item()
7.0
"""
from __future__ import annotations

from .tensor.reductions_extra import linalg_norm as norm, vector_norm

__all__ = ["norm", "vector_norm"]
