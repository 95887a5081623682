"""In-place writes on a Tensor (``add_``, ``x += y``, ``copy_``, ``fill_``, ``.data = t``) and torch's rules for them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..engine import (COMPUTED, ENGINE, PENDING, CaptureError, DType, active_observer, context, float32, host_array,
                      int32, upload_into, user_site)
from ..ops import op
from ..ops.writes import write_value
from . import bool_ops, tape, views
from .grad_mode import is_grad_enabled, no_grad
from ..engine.errors import ShapeError

if TYPE_CHECKING:
    from .tensor import Tensor


class InplaceMethods:
    """Writes a tensor's own memory in place, bumping its version counter, with torch's rules."""

    __slots__ = ()

    # ------------------------------------------------------------- in-place (version counter)
    def _check_inplace(self, name: str) -> None:
        """The rule of writes that do not record on the tape (``x[k] = v``, ``fill_``, host ``copy_``)."""
        if self.requires_grad and is_grad_enabled():
            if self.grad_fn is None:
                raise RuntimeError(_leaf_inplace_message(name))
            raise RuntimeError(f"{name}: in-place operation on a tensor that is part of the autograd graph; "
                               f"wrap it in gg.no_grad() or use the out-of-place op")

    def _write(self, name: str, make_value) -> "Tensor":
        """Overwrite this tensor's storage with ``make_value()`` (built from its current value)."""
        rec = _recorder()
        grad_on = is_grad_enabled()
        if views.has_views(self):  # a view, or a tensor with live views: they see the write
            views.check_view_write(self, name, differentiable=False)
            self._check_inplace(name)
            return views.write(self, name, lambda old, _: make_value(), None, record=False)
        self._check_inplace(name)
        with _write_block(rec):
            _check_has_value(self, name, rec)
            with no_grad():
                v = make_value()
                if v.shape != self.shape:
                    v = op.expand_as(v, self)
                if v.dtype is not self.dtype:
                    v = op.cast(v, dtype=self.dtype)
                _put(rec, self, v, name, grad_on)  # the copy_ write op (a capture recording: a rebinding)
                del v  # dead before the drain: its value lives only in the graph arena
        self._version += 1
        return self

    def _inplace(self, name: str, other, compute, closed: bool = True, cast_ok: bool = False) -> "Tensor":
        """``self ← compute(self, other)`` in this tensor's own memory, with torch's rules.

        The result must have ``self``'s shape (``other`` broadcasts to it) and, unless ``cast_ok``
        (copy_), an integer tensor only takes integer results (``closed``: the op keeps integers
        integers; true division does not). With grad on, a leaf that requires grad is refused and
        any other tensor is rebased (as in torch): its ``grad_fn`` becomes the op's node, fed by a
        copy of the old value, so gradients flow through the in-place op.
        """
        _check_inplace_operand(self, name, other, closed, cast_ok)
        if views.has_views(self):
            return self._inplace_with_views(name, other, compute)
        if not (is_grad_enabled() and (self.requires_grad or getattr(other, "requires_grad", False))):
            return self._write(name, lambda: compute(self, other))
        return _inplace_recorded(self, name, other, compute)

    def _inplace_with_views(self, name: str, other, compute) -> "Tensor":
        """``_inplace`` for a view or a tensor with live views (tensor/views.py keeps them in step)."""
        root = views.record_of(self).root if "_view" in self.__dict__ else self
        record = is_grad_enabled() and (self.requires_grad or root.requires_grad
                                        or getattr(other, "requires_grad", False))
        views.check_view_write(self, name, differentiable=True)
        if record and self.requires_grad and self.grad_fn is None:
            raise RuntimeError(_leaf_inplace_message(name))
        return views.write(self, name, compute, other, record)

    def _rebase(self, v: "Tensor") -> None:
        """Make ``self`` (now holding ``v``'s value) the output of ``v``'s tape node."""
        node = v.grad_fn
        tape.remember_edge(self)  # nodes recorded before this write keep their edge to the old grad_fn
        self.grad_fn, self.requires_grad = node, v.requires_grad
        if node is not None and node.out_ref is not None:
            # The node reads its output in backward: keep v's value (an alias without history,
            # so no reference cycle) rather than ``self``, whose later writes bump its version.
            saved = v.detach()
            node.out_ref = lambda: saved

    def copy_(self, src) -> "Tensor":
        """Overwrite with ``src`` (tensor, array or scalar; broadcast to this shape; cast to this
        dtype). A tensor ``src`` that requires grad passes its gradient on, as in torch."""
        if isinstance(src, _t.Tensor):
            if src.device is not self.device:
                src = src.to(device=self.device)
            return self._inplace("copy_", src, _copy_value, cast_ok=True)
        if isinstance(src, (bool, int, float)) and _recorder() is not None:
            # A Python number is a constant of the recording (as fill_'s value), not host data to upload.
            return self._write("copy_", lambda: op.fill_like(self, c=float(src)))
        return _copy_from_host(self, src)

    def add_(self, other, alpha: float = 1.0) -> "Tensor":
        """``self += alpha * other`` in place (torch.Tensor.add_)."""
        if alpha != 1:
            _check_alpha("add_", self, alpha)
            return self._inplace("add_", other, lambda b, o: b + o * alpha, closed=not isinstance(alpha, float))
        return self._inplace("add_", other, _t.add)

    def sub_(self, other, alpha: float = 1.0) -> "Tensor":
        if alpha != 1:
            _check_alpha("sub_", self, alpha)
            return self._inplace("sub_", other, lambda b, o: b - o * alpha, closed=not isinstance(alpha, float))
        return self._inplace("sub_", other, _t.sub)

    def mul_(self, other) -> "Tensor":
        return self._inplace("mul_", other, _t.mul)

    def div_(self, other) -> "Tensor":
        return self._inplace("div_", other, _t.div, closed=False)

    def pow_(self, exponent) -> "Tensor":
        return self._inplace("pow_", exponent, _t.pow)

    def clamp_(self, min=None, max=None) -> "Tensor":  # noqa: A002  (torch names)
        return self._inplace("clamp_", None, lambda b, _: b.clamp(min, max))

    def fill_(self, value: float) -> "Tensor":
        return self._write("fill_", lambda: op.fill_like(self, c=float(value)))

    def zero_(self) -> "Tensor":
        return self.fill_(0.0)

    # Augmented assignment writes in place, as torch's (``p -= lr * p.grad`` under no_grad
    # updates ``p`` and every alias of its memory). torch.Tensor has no ``__imatmul__``:
    # ``a @= b`` rebinds ``a`` to a new tensor there, and so it does here.
    def __iadd__(self, o):
        return self._inplace("add_", o, _t.add)

    def __isub__(self, o):
        return self._inplace("sub_", o, _t.sub)

    def __imul__(self, o):
        return self._inplace("mul_", o, _t.mul)

    def __itruediv__(self, o):
        return self._inplace("div_", o, _t.div, closed=False)

    def __ipow__(self, o):
        return self._inplace("pow_", o, _t.pow)

    def __ifloordiv__(self, o):
        return self._inplace("floor_divide_", o, _t.floor_divide)

    def __imod__(self, o):
        return self._inplace("remainder_", o, _t.remainder)

    # Bitwise/logical in place: bool tensors (torch also does integers bitwise: ggmlgrad raises there).
    def __iand__(self, o):
        return self._inplace("bitwise_and_", o, lambda b, x: bool_ops.bitwise("and", b, x))

    def __ior__(self, o):
        return self._inplace("bitwise_or_", o, lambda b, x: bool_ops.bitwise("or", b, x))

    def __ixor__(self, o):
        return self._inplace("bitwise_xor_", o, lambda b, x: bool_ops.bitwise("xor", b, x))

    bitwise_and_, bitwise_or_, bitwise_xor_ = __iand__, __ior__, __ixor__

    def logical_and_(self, o):
        """``self ← logical_and(self, o)`` in this tensor's dtype (torch.Tensor.logical_and_)."""
        return self._inplace("logical_and_", o, bool_ops.logical_and, cast_ok=True)

    def logical_or_(self, o):
        """``self ← logical_or(self, o)`` in this tensor's dtype."""
        return self._inplace("logical_or_", o, bool_ops.logical_or, cast_ok=True)

    def logical_xor_(self, o):
        """``self ← logical_xor(self, o)`` in this tensor's dtype."""
        return self._inplace("logical_xor_", o, bool_ops.logical_xor, cast_ok=True)

    # ------------------------------------------------------------- .data
    @property
    def data(self) -> "Tensor":
        """This tensor's value without history: an alias of the same memory (``requires_grad``
        False, no ``grad_fn``). Writes through it change this tensor and its views. As in torch it
        has its own version counter: backward's saved-tensor check does not see those writes.

        >>> import ggmlgrad as gg
        >>> p = gg.tensor([1.0, 2.0], requires_grad=True)
        >>> _ = p.data.mul_(2); p.tolist()
        [2.0, 4.0]
        """
        t = self.detach()
        views.data_alias(self, t)
        return t

    @data.setter
    def data(self, value: "Tensor") -> None:
        """``p.data = t``: ``p`` takes ``t``'s memory (shared from now on), shape and dtype, keeping
        its identity, ``requires_grad`` and ``.grad`` (as torch's ``set_data``)."""
        _set_data(self, value)

def _inplace_recorded(t: "Tensor", name: str, other, compute) -> "Tensor":
    """``_inplace`` with grad on and an operand that requires grad: the op is recorded on the tape
    over a copy of the old value, and ``t`` is rebased onto its node (torch's rule)."""
    if t.requires_grad and t.grad_fn is None:
        raise RuntimeError(_leaf_inplace_message(name))
    rec = _recorder()
    with _write_block(rec):
        _check_has_value(t, name, rec)
        with no_grad():
            base = op.clone(t)  # the old value, in memory the write does not touch
        base.requires_grad, base.grad_fn = t.requires_grad, t.grad_fn
        v = compute(base, other)  # recorded on the tape (grad is on)
        if v.shape != t.shape:
            v = op.expand_as(v, base)  # not t: the node would see t's version change
        if v.dtype is not t.dtype:
            v = op.cast(v, dtype=t.dtype)
        _put(rec, t, v, name, True)
    t._version += 1
    t._rebase(v)
    return t


def _copy_from_host(t: "Tensor", src) -> "Tensor":
    """``t.copy_(src)`` for host data (array, list, NumPy scalar): checked, then uploaded into
    ``t``'s memory after the queue ran (queued nodes may read it)."""
    arr = np.asarray(src)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"copy_: cannot copy from {type(src).__name__} of dtype {arr.dtype}")
    if _broadcastable(arr.shape, t.shape) and np.broadcast_shapes(arr.shape, t.shape) != t.shape:
        raise RuntimeError(f"copy_: output with shape {list(t.shape)} doesn't match the broadcast "
                           f"shape {list(np.broadcast_shapes(arr.shape, t.shape))}")
    try:
        arr = np.broadcast_to(arr, t.shape)
    except ValueError:
        raise ShapeError(f"copy_: source shape {arr.shape} cannot be broadcast to {t.shape}") from None
    _check_int_range("copy_", arr, t.dtype)
    _refuse_while_recording("copy_ from host data", "its values would be frozen into every replay; pass the "
                            "data as an argument of the captured function and copy_ from that tensor")
    if "_view" in t.__dict__:  # through the view's write path, as a tensor source
        return t.copy_(_t.tensor(arr, dtype=t.dtype, device=t.device))
    t._check_inplace("copy_")
    with ENGINE.lock:
        ENGINE.drain("inplace")  # queued nodes may read this storage: they run first
        if t._status != COMPUTED:
            raise RuntimeError("copy_: this tensor has no value (its graph failed)")
        upload_into(t, host_array(arr, t.dtype), "copy_()")
    t._version += 1
    views.refresh_views(t)
    return t


def _set_data(t: "Tensor", value: "Tensor") -> None:
    """``t.data = value``: ``t`` takes ``value``'s memory, shape and dtype (torch's ``set_data``)."""
    if not isinstance(value, _t.Tensor):
        raise TypeError(f"data: expected a Tensor, got {type(value).__name__}")
    if t.requires_grad and not value.dtype.is_float:
        raise RuntimeError(f"data: data set to a tensor that requires gradients must be floating point "
                           f"(got {value.dtype.name})")
    if t.grad is not None and (value.shape != t.shape or value.dtype is not t.dtype):
        raise RuntimeError(f"data: the new value ({value.shape}, {value.dtype.name}) does not match "
                           f".grad ({t.grad.shape}, {t.grad.dtype.name}); set .grad = None first")
    _refuse_while_recording("data assignment", "it gives the tensor other memory, which a replay cannot "
                            "follow; write the value in place instead (p.data.copy_(t) or p.copy_(t))")
    with ENGINE.lock:
        ENGINE.drain("inplace")  # queued nodes read the old memory, and value gets its own
        if value._status != COMPUTED:
            raise RuntimeError("data: the new value has no value (its graph failed)")
        views.detach_views(t)  # its views keep the old memory's values
        if "_view" in value.__dict__:
            views.share_memory(value)  # a view's memory is its base's, as in torch (not a copy of it)
        t._init_array(value.shape, value.dtype, value.device)
        t._storage, t._error = value._storage, value._error
    t._version += 1  # nodes that saved this tensor hold the old value: they raise at backward


def _refuse_while_recording(name: str, why: str = "") -> None:
    """Writes a captured function cannot record: an optimizer step (capture_step runs the update as a
    graph of its own), ``load_state_dict``, host data copied in, ``.data`` assignment. In-place ops
    on tensors are recorded (see capture/writes.py)."""
    if active_observer() is not None:
        raise CaptureError(
            f"capture: {name} at {user_site()} ran while a captured function was recording; it cannot be "
            f"recorded: " + (why or "use gg.capture_step(loss_fn, optimizer) for optimizer updates, and "
                                    "load state outside the captured function") + ".")


def _recorder():
    """The capture recorder of this thread / task (None when nothing records): its in-place writes
    queue a rebinding instead of computing (``Recorder.write``)."""
    return context.current().recorder


def _write_block(rec):
    """``ENGINE.exclusive`` (drain, write, drain); while recording, no compute: the lock only."""
    return ENGINE.exclusive("inplace") if rec is None else ENGINE.lock


def _check_has_value(t: "Tensor", name: str, rec) -> None:
    """After the drain a tensor is computed or failed; a recording writes pending ones too."""
    if t._status != COMPUTED and not (rec is not None and t._status == PENDING):
        raise RuntimeError(f"{name}: this tensor has no value (its graph failed)")


def _put(rec, target: "Tensor", value: "Tensor", name: str, grad_on: bool) -> None:
    """``target ← value``: the copy_ write op, or the recorder's rebinding while recording (``grad_on``:
    grad mode at the in-place call, which torch's rules for the written memory depend on)."""
    if rec is None:
        write_value(target, value, name)
    else:
        rec.write(target, value, name, grad_on)


def _leaf_inplace_message(name: str) -> str:
    return (f"{name}: a leaf Variable that requires grad is being used in an in-place operation; wrap "
            f"it in gg.no_grad() (e.g. a manual parameter update) or use the out-of-place op")


def _is_float_operand(o) -> bool:
    if isinstance(o, _t.Tensor):
        return o.dtype.is_float
    if isinstance(o, (bool, np.bool_, int, np.integer)):
        return False
    if isinstance(o, (float, np.floating)):
        return True
    return np.asarray(o).dtype.kind in "fc"


def _broadcastable(a: tuple, b: tuple) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _check_inplace_operand(t: Tensor, name: str, other, closed: bool, cast_ok: bool) -> None:
    """torch's in-place rules, checked before anything is queued: the result keeps ``t``'s
    shape (``other`` may only broadcast up to it) and an integer ``t`` takes no float result."""
    if other is None:
        return
    if not cast_ok and t.dtype.is_bool and bool_ops.result_category(t, other) != 0:
        raise RuntimeError(f"{name}: result type can't be cast to the desired output type Bool (an in-place op "
                           f"keeps the tensor's dtype); use the out-of-place op")
    if not cast_ok and not t.dtype.is_float and (not closed or _is_float_operand(other)):
        raise RuntimeError(f"{name}: result type Float can't be cast to the desired output type Int "
                           f"(an in-place op keeps the tensor's dtype, {t.dtype.name}); use the out-of-place op")
    shape = other.shape if isinstance(other, _t.Tensor) else None if _t._scalar(other) else np.shape(other)
    if shape is not None and shape != t.shape and _broadcastable(shape, t.shape):
        b = np.broadcast_shapes(shape, t.shape)
        if b != t.shape:
            raise RuntimeError(f"{name}: output with shape {list(t.shape)} doesn't match the broadcast "
                               f"shape {list(b)}")


def _check_alpha(name: str, t: Tensor, alpha) -> None:
    if not t.dtype.is_float and not isinstance(alpha, (int, np.integer)):
        raise RuntimeError(f"{name}: for integral input tensors, argument alpha must not be a floating "
                           f"point number, got {alpha!r}")


def _check_int_range(name: str, arr: np.ndarray, dtype: DType) -> None:
    """Host values written into int32 storage (int64 included) must fit: never wrap silently."""
    if dtype is not int32 or not arr.size:
        return
    if arr.dtype.kind in "iu" and (arr.max() > 2**31 - 1 or arr.min() < -2**31):
        raise ValueError(f"{name}: integer values do not fit in int32 (int64 is stored as int32)")
    if arr.dtype.kind == "f" and not (np.isfinite(arr).all() and arr.max() <= 2**31 - 1 and arr.min() >= -2**31):
        raise ValueError(f"{name}: float values are not finite or do not fit in int32")


def _copy_value(old: Tensor, src: Tensor) -> Tensor:
    """copy_'s new value: a node of its own, in ``old``'s dtype (``_inplace`` broadcasts it)."""
    if src.shape != old.shape:
        return src if src.dtype is float32 else op.cast(src, dtype=float32)  # expand_as works in float32
    if src.dtype is not old.dtype:
        return op.cast(src, dtype=old.dtype)
    return op.clone(src)


from . import tensor as _t  # noqa: E402  (tensor.py imports this module for Tensor's bases: bound last)
