"""Logical and bitwise front ends of a Tensor (``&``, ``|``, ``~``, ``isnan``, ``any``, ``masked_fill``).

Their code is in tensor/bool_ops.py; each public name is declared here once (ops/decl.py: public),
and tensor/surfaces.py installs the ``Tensor`` methods and operators and the ``gg.*`` functions.

>>> import ggmlgrad as gg
>>> (gg.tensor([True, False]) & gg.tensor([True, True])).tolist()
[True, False]
"""
from __future__ import annotations

import operator as _operator

from ..ops.decl import public
from . import bool_ops
from .tensor import Tensor

for _name in ("logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf", "isfinite"):
    public(method=_name, function=_name)(getattr(bool_ops, _name))
public(dunder="__invert__", call_plan=True)(bool_ops.invert)
public(method="masked_fill", call_plan=True)(bool_ops.masked_fill)


def _declare_bitwise(kind: str, symbol: str) -> None:
    """``__<kind>__`` and its reflection ``__r<kind>__``: ``bool_ops.bitwise(kind, ...)``."""
    def bitwise(input, other):
        return bool_ops.bitwise(kind, input, other)
    bitwise.__name__ = bitwise.__qualname__ = f"__{kind}__"
    bitwise.__doc__ = (f"``input {symbol} other``: {bool_ops.bitwise.__doc__}\n\n>>> import ggmlgrad as gg\n"
                       f">>> (gg.tensor([True, False]) {symbol} True).tolist()\n"
                       f"{[getattr(_operator, kind if kind == 'xor' else kind + '_')(v, True) for v in (True, False)]}")
    public(dunder=f"__{kind}__", reflected=f"__r{kind}__")(bitwise)


for _kind, _symbol in (("and", "&"), ("or", "|"), ("xor", "^")):
    _declare_bitwise(_kind, _symbol)


@public(method="any", function="any")
def any(input, dim=None, keepdim: bool = False):  # noqa: A001  (torch's name)
    """True where any element (along ``dim``) is non-zero (bool).

    >>> import ggmlgrad as gg
    >>> gg.tensor([[0.0, 2.0], [0.0, 0.0]]).any(1).tolist()
    [True, False]
    """
    return bool_ops.to_bool(input).amax(dim, keepdim) if input.numel_ else bool_ops.empty_reduce(input, dim, False)


@public(method="all", function="all")
def all(input, dim=None, keepdim: bool = False):  # noqa: A001  (torch's name)
    """True where every element (along ``dim``) is non-zero (bool).

    >>> import ggmlgrad as gg
    >>> gg.tensor([[1.0, 2.0], [0.0, 1.0]]).all(1).tolist()
    [True, False]
    """
    return bool_ops.to_bool(input).amin(dim, keepdim) if input.numel_ else bool_ops.empty_reduce(input, dim, True)


@public(method="masked_fill_")
def masked_fill_(input, mask, value):
    """In-place ``masked_fill`` (a write: version bump, reaches views, refused where torch refuses).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([1.0, 2.0])
    >>> x.masked_fill_(gg.tensor([True, False]), 5.0).tolist()
    [5.0, 2.0]
    """
    bool_ops.check_mask("masked_fill_", input, mask)
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s)")
    # on the tape when grad is on and something requires grad (torch's masked_fill_ is differentiable)
    return input._inplace("masked_fill_", value if isinstance(value, Tensor) else None,
                          lambda old, _: bool_ops.masked_fill(old, mask, value), cast_ok=True)
