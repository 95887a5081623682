"""The Tensor class for modules that ``tensor.py`` itself imports (so they cannot import it at the top)."""
from __future__ import annotations

_Tensor = None  # found once, at first use


def tensor_class() -> type:
    """The Tensor class. Its first call imports it; later ones read the global (a function-level
    ``from .tensor import Tensor`` costs ~0.6 µs on every call, and its callers run per op).

    >>> from ggmlgrad.tensor.tensor_class import tensor_class
    >>> tensor_class().__name__
    'Tensor'
    """
    global _Tensor
    if _Tensor is None:
        from .tensor import Tensor
        _Tensor = Tensor
    return _Tensor
