"""Logical and bitwise methods of a Tensor (``&``, ``|``, ``~``, ``isnan``, ``any``, ``masked_fill``)."""
from __future__ import annotations

from . import bool_ops


class LogicalMethods:
    """Logical, bitwise and NaN/inf tests on tensors, through tensor/bool_ops.py."""

    __slots__ = ()

    # ------------------------------------------------------------- logical / bitwise (tensor/bool_ops.py)
    def __and__(self, o):
        return bool_ops.bitwise("and", self, o)

    def __or__(self, o):
        return bool_ops.bitwise("or", self, o)

    def __xor__(self, o):
        return bool_ops.bitwise("xor", self, o)

    def __rand__(self, o):
        return bool_ops.bitwise("and", o, self)

    def __ror__(self, o):
        return bool_ops.bitwise("or", o, self)

    def __rxor__(self, o):
        return bool_ops.bitwise("xor", o, self)

    def __invert__(self):
        return bool_ops.invert(self)

    def logical_and(self, o):
        return bool_ops.logical_and(self, o)

    def logical_or(self, o):
        return bool_ops.logical_or(self, o)

    def logical_xor(self, o):
        return bool_ops.logical_xor(self, o)

    def logical_not(self):
        return bool_ops.logical_not(self)

    def isnan(self):
        return bool_ops.isnan(self)

    def isinf(self):
        return bool_ops.isinf(self)

    def isfinite(self):
        return bool_ops.isfinite(self)

    def any(self, dim=None, keepdim: bool = False):
        """True where any element (along ``dim``) is non-zero (bool)."""
        return bool_ops.to_bool(self).amax(dim, keepdim) if self.numel_ else bool_ops.empty_reduce(self, dim, False)

    def all(self, dim=None, keepdim: bool = False):
        """True where every element (along ``dim``) is non-zero (bool)."""
        return bool_ops.to_bool(self).amin(dim, keepdim) if self.numel_ else bool_ops.empty_reduce(self, dim, True)

    def masked_fill(self, mask, value):
        """``value`` where the bool ``mask`` is True, else this tensor (torch.Tensor.masked_fill)."""
        return bool_ops.masked_fill(self, mask, value)

    def masked_fill_(self, mask, value):
        bool_ops.check_mask("masked_fill_", self, mask)
        return self._write("masked_fill_", lambda: bool_ops.masked_fill(self, mask, value))
