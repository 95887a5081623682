"""``Tensor._blank`` sets the array fields itself (``Array._init_array`` inlined, per op): both must
give a new tensor the same fields with the same values, so a field added to ``Array`` cannot be
forgotten in one of them."""
from __future__ import annotations

import ggmlgrad as gg
from ggmlgrad.engine import Array, float32
from ggmlgrad.tensor.tensor import Tensor


def _fields(a) -> dict:
    return {k: getattr(a, k) for k in Array.__slots__ if k != "__weakref__" and hasattr(a, k)}


def test_blank_sets_every_array_field_as_init_array_does():
    dev = gg.ones(1).device
    blank = Tensor._blank((2, 3), float32, dev)
    ref = object.__new__(Tensor)
    Array._init_array(ref, (2, 3), float32, dev)
    assert set(_fields(blank)) == {k for k in Array.__slots__ if k != "__weakref__"}
    assert _fields(blank) == _fields(ref)
    assert blank.numel_ == 6 and blank.requires_grad is False and blank.grad is None and blank._version == 0
