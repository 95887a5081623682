"""The write ops ``copy_`` and ``load_state_dict``: ``target ← value`` in the target's own memory.

A target group is ``(target, value)`` with ``value`` already broadcast to the target's shape
(the tensor layer does torch's broadcasting and autograd); the value is cast to the target's
dtype as ``torch.Tensor.copy_`` does (float → int32 truncates toward zero). ``load_state_dict``
is the same write under its own name, so a failed load is named as such in graph errors.
"""
from __future__ import annotations

from .._ggml import consts, lib
from ..engine import float32
from ..engine.plans import Exact
from .registry import define_write, write
from ..engine.errors import ShapeError


def _check_copy(name: str, inputs, parts) -> None:
    """Per (target, value): the same shape and device (ggml's copy asserts on element counts)."""
    at = 0
    for part in parts:
        dst, src = inputs[at], inputs[at + 1]
        if src.shape != dst.shape:
            raise ShapeError(f"{name}: value of shape {src.shape} for a target of shape {dst.shape}")
        if src.device is not dst.device:
            raise ValueError(f"{name}: value on {src.device.name}, target on {dst.device.name}")
        at += part[0]


def _copy(ctx: int, nodes, inputs) -> list:
    """Write ``inputs[1]`` into ``inputs[0]``, converted to its dtype. ggml's CPU copy has no
    direct kernels between half floats and integers (it aborts): those convert through float32."""
    dst, src = inputs[0].dtype, inputs[1].dtype
    node = nodes[1]
    if src is not dst and float32 not in (src, dst) and not (src.is_float and dst.is_float):
        node = lib.cast(ctx, node, consts.TYPE_F32)
    return [(0, node)]


copy_ = define_write("copy_", check=_check_copy, tensors=4)(_copy)
load_state_dict = define_write("load_state_dict", check=_check_copy, tensors=4)(_copy)


_ONE_PAIR = Exact(((2, ()),))


def write_value(target, value, label: str = "copy_") -> None:
    """Queue ``target ← value`` (the ``copy_`` write op; ``value`` has ``target``'s shape) inside
    ``ENGINE.exclusive``. ``label`` names it in graph errors (``add_``, ``fill_`` ...)."""
    write("copy_", (target, value), _ONE_PAIR, label=label)
