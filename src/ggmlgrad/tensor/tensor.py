"""The user-facing Tensor."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from ..engine import (COMPUTED, ENGINE, FAILED, PENDING, Array, CaptureError, DType, download, dtypes, float32,
                      active_observer, host_array, int32, new_from_host, upload_into, user_site)
from ..ops import op
from ..ops.reduce import axis_of as _axis, keepdim_of as _keepdim
from ..ops.registry import REGISTRY
from ..ops.shapes import check_ndim
from ..ops.writes import write_value
from ..runtime import Device, resolve_device
from . import bool_ops, interop, tape, views
from .grad_mode import is_grad_enabled, no_grad
from .int_reduce import int_reduce, is_int
from .surfaces import OpMethods


class Tensor(OpMethods, Array):
    """An n-d array (at most 4-D) on a ggml device, with autograd. Its op methods (``x.relu()``,
    ``x.softmax(dim)``, ...) come from the op declarations (:class:`.surfaces.OpMethods`).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([[1.0, 2.0]], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.tolist()
    [[2.0, 4.0]]
    """

    __slots__ = ("requires_grad", "grad", "grad_fn", "_vcell", "_retains_grad", "__dict__")
    __array_priority__ = 1000  # NumPy defers `ndarray op Tensor` to our reflected operators

    @classmethod
    def _blank(cls, shape: tuple, dtype: DType, device: Device) -> "Tensor":
        t = cls.__new__(cls)
        t._init_array(shape, dtype, device)
        t.requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._vcell = [0]
        t._retains_grad = False
        return t

    @property
    def _version(self) -> int:
        """In-place write counter, shared by every tensor aliasing this memory (``detach()``),
        so a write through an alias is seen by backward's saved-tensor check (as in PyTorch)."""
        return self._vcell[0]

    @_version.setter
    def _version(self, v: int) -> None:
        try:
            self._vcell[0] = v
        except AttributeError:  # made without _blank (e.g. nn.Parameter.__new__)
            self._vcell = [v]

    def __init__(self, *args, **kwargs):
        raise TypeError("use gg.tensor(data) or a factory such as gg.zeros(shape) to make a Tensor")

    # ------------------------------------------------------------- properties
    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":
        out = op.transpose_last(self)
        axes = tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2)
        return views.permute_view(out, self, axes)

    @property
    def is_pending(self) -> bool:
        return self._status == PENDING

    def numel(self) -> int:
        return self.numel_

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------- host reads (sync points)
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The value as NumPy (drains the queue if this tensor is pending). A float32, float16 or int32
        tensor on a host device gives a view of its memory, as torch: writes to either side show in
        the other (tensor/interop.py has the rule); other dtypes and GPU tensors give a copy. A tensor
        that requires grad (torch raises) gives a copy, or a view with ``force=True``."""
        return interop.numpy(self, force)

    def __array__(self, dtype=None, copy=None):
        """NumPy 2's protocol: a view of host memory where possible (as ``numpy()``); ``copy=True``
        a new array; ``copy=False`` raises ValueError when a copy cannot be avoided."""
        return interop.array(self, dtype, copy)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The DLPack protocol (host memory only; see tensor/interop.py)."""
        return interop.to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return interop.dlpack_device(self)

    def item(self) -> float | int:
        if self.numel_ != 1:
            raise ValueError(f"item(): only one-element tensors can be converted, got shape {self.shape}")
        return download(self, "item()").reshape(()).item()

    def tolist(self):
        return download(self, "tolist()").tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype is not int32:
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel_ != 1:
            raise ValueError(f"the truth value of a tensor with {self.numel_} elements is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        if self._status == FAILED:
            return f"tensor(<failed: no value>, shape={self.shape})"
        body = np.array2string(download(self, "repr"), separator=", ", prefix="tensor(")
        extra = []
        if self.dtype is not float32 and not self.dtype.is_bool:
            extra.append(f"dtype={self.dtype.name}")
        if self.device.kind != "cpu":
            extra.append(f"device='{self.device.name}'")
        if self.grad_fn is not None:
            extra.append(f"grad_fn=<{self.grad_fn.name}Backward>")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extra) + ")"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if self.numel_ == 1 and spec:
            return format(self.item(), spec)
        return repr(self)

    # ------------------------------------------------------------- autograd
    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool = False) -> None:
        """Queue the gradient nodes; ``.grad`` of each leaf accumulates (graph mode: computed later)."""
        if not self.requires_grad:
            raise RuntimeError("backward: tensor does not require grad (no input had requires_grad=True)")
        if gradient is None:
            if self.numel_ != 1:
                raise RuntimeError(f"backward: gradient can be implicit only for scalar outputs, got shape {self.shape}")
        else:
            gradient = as_tensor(gradient, device=self.device)
            if gradient.shape != self.shape:
                raise ValueError(f"backward: gradient shape {gradient.shape} does not match tensor shape {self.shape}")
        tape.run_backward(self, gradient, retain_graph)

    def detach(self) -> "Tensor":
        """The same value without history (shares nothing with the tape)."""
        t = Tensor._blank(self.shape, self.dtype, self.device)
        t._storage, t._node, t._epoch, t._status, t._error = self._storage, self._node, self._epoch, self._status, self._error
        if self._status == PENDING:
            # Same node: the drain gives both tensors the same memory (an alias, as in eager).
            ENGINE.alias_pending(t, self)
        t._vcell = self._vcell  # same memory, same version counter
        if "_view" in self.__dict__:
            views.alias_view(self, t)  # the same view of the same base
        return t

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not isinstance(requires_grad, bool):
            raise TypeError("requires_grad_: expected a bool")
        if requires_grad and not self.dtype.is_float:
            raise TypeError(f"requires_grad_: only float tensors can require grad, got {self.dtype.name}")
        if self.grad_fn is not None and not requires_grad:
            raise RuntimeError("requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        self._retains_grad = True

    # ------------------------------------------------------------- dtype / device
    def to(self, target=None, dtype=None, device=None) -> "Tensor":
        """``t.to("float16")``, ``t.to(gg.int32)``, ``t.to("cpu")``, ``t.to(device=..., dtype=...)``."""
        if target is not None:
            try:
                dtype = dtypes.from_any(target)
            except TypeError:
                device = target
        t = self
        if device is not None and resolve_device(device) is not t.device:
            d = resolve_device(device)
            # Cross-device copies go through the host; no gradient flows across.
            t = _from_numpy(download(t, "to(device)"), t.dtype, d, requires_grad=False)
        if dtype is not None:
            d = dtypes.from_any(dtype)
            if d is not t.dtype:
                t = op.cast(t, dtype=d)
        return t

    def float(self) -> "Tensor":
        return self.to(float32)

    def int(self) -> "Tensor":
        return self.to(int32)

    def long(self) -> "Tensor":
        """int64 in torch; int32 storage here (``gg.int64 is gg.int32``, see engine/dtypes.py)."""
        return self.to(int32)

    def double(self) -> "Tensor":
        """float64 in torch; float32 here (``gg.float64 is gg.float32``: no double precision)."""
        return self.to(float32)

    def bool(self) -> "Tensor":
        """torch.bool: non-zero (NaN too) → True."""
        return self.to(dtypes.bool_)

    def half(self) -> "Tensor":
        return self.to(dtypes.float16)

    def cpu(self) -> "Tensor":
        return self.to(device="cpu")

    def __deepcopy__(self, memo) -> "Tensor":
        """A leaf copy with its own memory (``.grad`` copied too), as ``torch`` does."""
        if self.grad_fn is not None:
            raise RuntimeError("deepcopy: only leaf tensors (created by the user, not by an op) can be "
                               "deep-copied; detach() first")
        with no_grad():
            t = self.clone()
        t.requires_grad = self.requires_grad
        memo[id(self)] = t
        if self.grad is not None:
            t.grad = self.grad.__deepcopy__(memo)
        return t

    def __reduce_ex__(self, protocol):
        """Pickle by value (the device memory itself cannot travel)."""
        if self.grad_fn is not None:
            raise RuntimeError("pickle: only leaf tensors can be pickled; detach() first")
        return (_rebuild_tensor, (download(self, "pickle"), self.dtype.name, self.requires_grad))

    def contiguous(self) -> "Tensor":
        """``self`` when its layout is contiguous, else a contiguous copy (torch's rule)."""
        return self if views.is_contiguous(self) else views.copy_of(self)

    def is_contiguous(self) -> bool:
        return views.is_contiguous(self)

    def stride(self, dim: int | None = None):
        """Strides in elements, as torch reports them (a view's are its base's memory layout)."""
        strides = views.layout(self)[1]
        return strides if dim is None else strides[dim]

    def storage_offset(self) -> int:
        return views.layout(self)[0]

    def data_ptr(self) -> int:
        """Address of the first element (a view: inside its base's memory, as in torch)."""
        return views.data_ptr(self)

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
        _refuse_while_recording(name)
        if views.has_views(self):  # a view, or a tensor with live views: they see the write
            views.check_view_write(self, name, differentiable=False)
            self._check_inplace(name)
            return views.write(self, name, lambda old, _: make_value(), None, record=False)
        self._check_inplace(name)
        with ENGINE.exclusive("inplace"):
            if self._status != COMPUTED:
                raise RuntimeError(f"{name}: this tensor has no value (its graph failed)")
            with no_grad():
                v = make_value()
                if v.shape != self.shape:
                    v = op.expand_as(v, self)
                if v.dtype is not self.dtype:
                    v = op.cast(v, dtype=self.dtype)
                write_value(self, v, name)  # the copy_ write op
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
        _refuse_while_recording(name)
        _check_inplace_operand(self, name, other, closed, cast_ok)
        if views.has_views(self):
            return self._inplace_with_views(name, other, compute)
        if not (is_grad_enabled() and (self.requires_grad or getattr(other, "requires_grad", False))):
            return self._write(name, lambda: compute(self, other))
        if self.requires_grad and self.grad_fn is None:
            raise RuntimeError(_leaf_inplace_message(name))
        with ENGINE.exclusive("inplace"):
            if self._status != COMPUTED:
                raise RuntimeError(f"{name}: this tensor has no value (its graph failed)")
            with no_grad():
                base = op.clone(self)  # the old value, in memory the write does not touch
            base.requires_grad, base.grad_fn = self.requires_grad, self.grad_fn
            v = compute(base, other)  # recorded on the tape (grad is on)
            if v.shape != self.shape:
                v = op.expand_as(v, base)  # not self: the node would see self's version change
            if v.dtype is not self.dtype:
                v = op.cast(v, dtype=self.dtype)
            write_value(self, v, name)
        self._version += 1
        self._rebase(v)
        return self

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
        self.grad_fn, self.requires_grad = node, v.requires_grad
        if node is not None and node.out_ref is not None:
            # The node reads its output in backward: keep v's value (an alias without history,
            # so no reference cycle) rather than ``self``, whose later writes bump its version.
            saved = v.detach()
            node.out_ref = lambda: saved

    def copy_(self, src) -> "Tensor":
        """Overwrite with ``src`` (tensor, array or scalar; broadcast to this shape; cast to this
        dtype). A tensor ``src`` that requires grad passes its gradient on, as in torch."""
        if isinstance(src, Tensor):
            if src.device is not self.device:
                src = src.to(device=self.device)
            return self._inplace("copy_", src, _copy_value, cast_ok=True)
        arr = np.asarray(src)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"copy_: cannot copy from {type(src).__name__} of dtype {arr.dtype}")
        if _broadcastable(arr.shape, self.shape) and np.broadcast_shapes(arr.shape, self.shape) != self.shape:
            raise RuntimeError(f"copy_: output with shape {list(self.shape)} doesn't match the broadcast "
                               f"shape {list(np.broadcast_shapes(arr.shape, self.shape))}")
        try:
            arr = np.broadcast_to(arr, self.shape)
        except ValueError:
            raise ValueError(f"copy_: source shape {arr.shape} cannot be broadcast to {self.shape}") from None
        _check_int_range("copy_", arr, self.dtype)
        _refuse_while_recording("copy_")
        if "_view" in self.__dict__:  # through the view's write path, as a tensor source
            return self.copy_(tensor(arr, dtype=self.dtype, device=self.device))
        self._check_inplace("copy_")
        with ENGINE.lock:
            ENGINE.drain("inplace")  # queued nodes may read this storage: they run first
            if self._status != COMPUTED:
                raise RuntimeError("copy_: this tensor has no value (its graph failed)")
            upload_into(self, host_array(arr, self.dtype), "copy_()")
        self._version += 1
        views.refresh_views(self)
        return self

    def add_(self, other, alpha: float = 1.0) -> "Tensor":
        """``self += alpha * other`` in place (torch.Tensor.add_)."""
        if alpha != 1:
            _check_alpha("add_", self, alpha)
            return self._inplace("add_", other, lambda b, o: b + o * alpha, closed=not isinstance(alpha, float))
        return self._inplace("add_", other, add)

    def sub_(self, other, alpha: float = 1.0) -> "Tensor":
        if alpha != 1:
            _check_alpha("sub_", self, alpha)
            return self._inplace("sub_", other, lambda b, o: b - o * alpha, closed=not isinstance(alpha, float))
        return self._inplace("sub_", other, sub)

    def mul_(self, other) -> "Tensor":
        return self._inplace("mul_", other, mul)

    def div_(self, other) -> "Tensor":
        return self._inplace("div_", other, div, closed=False)

    def pow_(self, exponent) -> "Tensor":
        return self._inplace("pow_", exponent, pow)

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
        return self._inplace("add_", o, add)

    def __isub__(self, o):
        return self._inplace("sub_", o, sub)

    def __imul__(self, o):
        return self._inplace("mul_", o, mul)

    def __itruediv__(self, o):
        return self._inplace("div_", o, div, closed=False)

    def __ipow__(self, o):
        return self._inplace("pow_", o, pow)

    def __ifloordiv__(self, o):
        return self._inplace("floor_divide_", o, floor_divide)

    def __imod__(self, o):
        return self._inplace("remainder_", o, remainder)

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
        if not isinstance(value, Tensor):
            raise TypeError(f"data: expected a Tensor, got {type(value).__name__}")
        if self.requires_grad and not value.dtype.is_float:
            raise RuntimeError(f"data: data set to a tensor that requires gradients must be floating point "
                               f"(got {value.dtype.name})")
        if self.grad is not None and (value.shape != self.shape or value.dtype is not self.dtype):
            raise RuntimeError(f"data: the new value ({value.shape}, {value.dtype.name}) does not match "
                               f".grad ({self.grad.shape}, {self.grad.dtype.name}); set .grad = None first")
        _refuse_while_recording("data assignment")
        with ENGINE.lock:
            ENGINE.drain("inplace")  # queued nodes read the old memory, and value gets its own
            if value._status != COMPUTED:
                raise RuntimeError("data: the new value has no value (its graph failed)")
            views.detach_views(self)  # its views keep the old memory's values
            self._init_array(value.shape, value.dtype, value.device)
            self._storage, self._error = value._storage, value._error
        self._version += 1  # nodes that saved this tensor hold the old value: they raise at backward

    # ------------------------------------------------------------- operators
    def __add__(self, o):
        return add(self, o)

    def __radd__(self, o):
        return add(o, self)

    def __sub__(self, o):
        return sub(self, o)

    def __rsub__(self, o):
        return sub(o, self)

    def __mul__(self, o):
        return mul(self, o)

    def __rmul__(self, o):
        return mul(o, self)

    def __truediv__(self, o):
        return div(self, o)

    def __rtruediv__(self, o):
        return div(o, self)

    def __matmul__(self, o):
        return op.matmul(self, as_tensor(o, device=self.device))

    def __rmatmul__(self, o):
        return op.matmul(as_tensor(o, device=self.device), self)

    def __pow__(self, o):
        return pow(self, o)

    def __rpow__(self, o):
        return pow(o, self)

    def __floordiv__(self, o):
        return floor_divide(self, o)

    def __rfloordiv__(self, o):
        return floor_divide(o, self)

    def __mod__(self, o):
        return remainder(self, o)

    def __rmod__(self, o):
        return remainder(o, self)

    def __neg__(self):
        if self.dtype.is_bool:
            return bool_ops.negate(self)
        if self.dtype is int32:
            return mul(self, -1)
        return op.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return op.abs(self)

    __hash__ = object.__hash__

    # ------------------------------------------------------------- methods
    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        out = op.reshape(self, shape=tuple(shape))
        return views.reshape_view(out, self, out.shape, "reshape", must_view=False)

    def view(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        out = op.reshape(self, shape=tuple(shape))
        return views.reshape_view(out, self, out.shape, "view", must_view=True)

    def permute(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return views.permute_view(op.permute(self, axes=tuple(axes)), self, tuple(axes))

    def pow(self, exponent):
        return pow(self, exponent)

    # ------------------------------------------------------------- comparisons (bool results, no grad)
    def __lt__(self, o):
        return compare(self, o, "lt")

    def __le__(self, o):
        return compare(self, o, "le")

    def __gt__(self, o):
        return compare(self, o, "gt")

    def __ge__(self, o):
        return compare(self, o, "ge")

    def __eq__(self, o):  # type: ignore[override]
        return compare(self, o, "eq")

    def __ne__(self, o):  # type: ignore[override]
        return compare(self, o, "ne")

    lt, le, gt, ge, eq, ne = __lt__, __le__, __gt__, __ge__, __eq__, __ne__

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

    # ------------------------------------------------------------- math (function forms in functional.py)
    def clamp(self, min=None, max=None):  # noqa: A002  (torch names)
        """Limit to [min, max]; either side optional; bounds may be numbers or tensors."""
        return clamp(self, min, max)

    clip = clamp

    def maximum(self, other):
        return binary_extreme(self, other, "maximum")

    def minimum(self, other):
        return binary_extreme(self, other, "minimum")

    def where(self, condition, other):
        """``self`` where ``condition`` is non-zero, else ``other`` (torch.Tensor.where)."""
        return where(condition, self, other)

    def max(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        """torch semantics: ``t.max()`` the largest value; ``t.max(dim)`` a (values, indices) pair;
        ``t.max(other)`` elementwise maximum. For values over several axes use ``amax``."""
        return extreme(self, _axis(axis, dim), _keepdim(keepdim, keepdims), "max")

    def min(self, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
        return extreme(self, _axis(axis, dim), _keepdim(keepdim, keepdims), "min")

    def std(self, dim=None, *, correction=None, keepdim: bool = False, unbiased=None, axis=None, keepdims=None):
        return op.sqrt(self.var(dim, correction=correction, keepdim=_keepdim(keepdim, keepdims),
                                unbiased=unbiased, axis=axis))




# ---------------------------------------------------------------------- in-place rules (torch's)
def _refuse_while_recording(name: str) -> None:
    """A captured function cannot write in place: the replay could not order the write after
    the graph's reads of the old value (capture_step runs the optimizer's update as its own graph)."""
    if active_observer() is not None:
        raise CaptureError(
            f"capture: the in-place op {name} at {user_site()} ran while a captured function was recording; "
            f"a captured function cannot write tensors in place. Return the new value as an output and "
            f"write it outside (e.g. p.copy_(out)), or use gg.capture_step(loss_fn, optimizer) for "
            f"parameter updates.")


def _leaf_inplace_message(name: str) -> str:
    return (f"{name}: a leaf Variable that requires grad is being used in an in-place operation; wrap "
            f"it in gg.no_grad() (e.g. a manual parameter update) or use the out-of-place op")


def _is_float_operand(o) -> bool:
    if isinstance(o, Tensor):
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
    shape = other.shape if isinstance(other, Tensor) else None if _scalar(other) else np.shape(other)
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


# ---------------------------------------------------------------------- conversion helpers
def _rebuild_tensor(values: np.ndarray, dtype_name: str, requires_grad: bool) -> Tensor:
    return tensor(values, dtype=dtype_name, requires_grad=requires_grad)


def _from_numpy(arr: np.ndarray, dtype: DType, device: Device, requires_grad: bool) -> Tensor:
    shape = tuple(int(s) for s in arr.shape)
    check_ndim("tensor", shape)
    t = Tensor._blank(shape, dtype, device)
    new_from_host(t, host_array(arr, dtype), "tensor()")
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data: Any, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (array, nested lists, scalar or Tensor).

    Floats become float32 (float64 data is rounded to float32), integers int32 (int64 data
    must fit: a value outside int32's range raises ValueError), unless ``dtype`` says otherwise.

    >>> import ggmlgrad as gg
    >>> gg.tensor([[1, 2], [3, 4]], dtype=gg.float32).shape
    (2, 2)
    """
    dev = resolve_device(device)
    if isinstance(data, Tensor):
        t = data.detach().to(device=dev)
        if dtype is not None:
            t = t.to(dtype)
        if t is data or (t._storage is not None and t._storage is data._storage):
            t = t.clone()  # a copy, never an alias of data's memory
        t.requires_grad = False
        return t.requires_grad_(requires_grad) if requires_grad else t
    arr = np.asarray(data)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} (dtype {arr.dtype})")
    if dtype is None:
        d = float32 if arr.dtype.kind in "fb" or arr.dtype.kind == "f" else int32
        if arr.dtype == np.float16:
            d = dtypes.float16
        if arr.dtype.kind == "b":
            d = dtypes.bool_
    else:
        d = dtypes.from_any(dtype)
    _check_int_range("tensor", arr, d)
    return _from_numpy(arr, d, dev, requires_grad)


def as_tensor(x, device=None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return tensor(x, dtype=float32 if not isinstance(x, np.ndarray) or x.dtype.kind in "fb" else None, device=device)


_SCALAR_TYPES = (int, float, bool, np.bool_)


def _scalar(x) -> bool:
    # The exact types first: an ABC isinstance (numbers.Real) costs ~0.3 µs on every operator call.
    if type(x) in _SCALAR_TYPES:
        return True
    if isinstance(x, Array):
        return False
    return isinstance(x, numbers.Real) and not isinstance(x, bool) or isinstance(x, (bool, np.bool_))


# ---------------------------------------------------------------------- arithmetic with scalars
def _integer_arithmetic(name: str, closed: bool):
    """Let int32 tensors take part in ``name``: computed in float32 (exact below 2**24, like
    index arithmetic needs) and cast back to int32 when every operand is an integer and the
    op is closed over the integers (``+ - * // %``); true division gives float32, as in torch."""
    def deco(float_fn):
        opdef = REGISTRY.get(name)

        def fn(a, b):
            # The common case first (two float32 tensors): straight to the op.
            if (opdef is not None and isinstance(a, Tensor) and isinstance(b, Tensor)
                    and a.dtype is float32 and b.dtype is float32):
                return tape.apply(opdef, (a, b), {})
            if (isinstance(a, Tensor) and a.dtype.is_bool) or (isinstance(b, Tensor) and b.dtype.is_bool):
                return bool_ops.arithmetic(name, a, b, fn)   # torch's bool promotion (tensor/bool_ops.py)
            a_int = isinstance(a, Tensor) and a.dtype is int32
            b_int = isinstance(b, Tensor) and b.dtype is int32
            if not (a_int or b_int):
                return float_fn(a, b)
            both_int = all((isinstance(x, Tensor) and x.dtype is int32)
                           or (isinstance(x, numbers.Integral) and not isinstance(x, bool)) for x in (a, b))
            r = float_fn(op.cast(a, dtype=float32) if a_int else a, op.cast(b, dtype=float32) if b_int else b)
            return op.cast(r, dtype=int32) if closed and both_int else r
        fn.__name__, fn.__doc__ = float_fn.__name__, float_fn.__doc__
        return fn
    return deco


@_integer_arithmetic("add", closed=True)
def add(a, b) -> Tensor:
    """a + b with NumPy broadcasting; Python scalars become op parameters (no upload)."""
    if isinstance(a, Tensor) and _scalar(b):
        return op.add_scalar(a, c=float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.add_scalar(b, c=float(a))
    a, b = _pair(a, b)
    return op.add(a, b)


@_integer_arithmetic("sub", closed=True)
def sub(a, b) -> Tensor:
    if isinstance(a, Tensor) and _scalar(b):
        return op.add_scalar(a, c=-float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.add_scalar(op.neg(b), c=float(a))
    a, b = _pair(a, b)
    return op.sub(a, b)


@_integer_arithmetic("mul", closed=True)
def mul(a, b) -> Tensor:
    if isinstance(a, Tensor) and _scalar(b):
        return op.scale(a, c=float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.scale(b, c=float(a))
    a, b = _pair(a, b)
    return op.mul(a, b)


_RECIPROCAL_OVERFLOWS = 1.0 / float(np.finfo(np.float32).max)   # |c| below this: 1/c is inf in float32


@_integer_arithmetic("div", closed=False)
def div(a, b) -> Tensor:
    if isinstance(a, Tensor) and _scalar(b):
        fb = float(b)
        if 0 < abs(fb) < _RECIPROCAL_OVERFLOWS:
            # 1/c overflows float32 for a subnormal c: scale by 1/(c 2**64), then by 2**64
            return op.scale(op.scale(a, c=1.0 / (fb * 2.0 ** 64)), c=2.0 ** 64)
        return op.scale(a, c=1.0 / fb if fb != 0 else np.copysign(np.inf, fb))
    if isinstance(b, Tensor) and _scalar(a):
        return op.rdiv_scalar(b, c=float(a))
    a, b = _pair(a, b)
    return op.div(a, b)


@_integer_arithmetic("pow", closed=True)
def _pow(a, b) -> Tensor:
    if isinstance(a, Tensor) and _scalar(b):
        return op.pow_scalar(a, p=float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.exp(op.scale(b, c=float(np.log(float(a)))))
    a, b = _pair(a, b)
    return op.pow(a, b)


@_integer_arithmetic("floor_divide", closed=True)
def floor_divide(a, b) -> Tensor:
    """``a // b`` rounded toward -inf (Python's and torch's rule)."""
    return op.floor(div(a, b))


@_integer_arithmetic("remainder", closed=True)
def remainder(a, b) -> Tensor:
    """``a % b`` with the sign of ``b`` (Python's and torch's rule)."""
    return sub(a, mul(op.floor(div(a, b)), b))


def pow(a, b) -> Tensor:
    """``a ** b`` with broadcasting; an int32 base takes no negative integer exponent (torch)."""
    if (isinstance(a, Tensor) and a.dtype is int32 and isinstance(b, (int, np.integer))
            and not isinstance(b, bool) and b < 0):
        raise RuntimeError("pow: integers to negative integer powers are not allowed")
    return _pow(a, b)


# ---------------------------------------------------------------------- comparisons, clamp, max/min, where
class MaxMin(tuple):
    """``(values, indices)`` from ``t.max(dim)`` / ``t.min(dim)``, like torch.return_types.max."""

    __slots__ = ()

    def __new__(cls, values: Tensor, indices: Tensor):
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def compare(a, b, kind: str):
    """``a <kind> b`` (kind: lt, le, gt, ge, eq, ne) as a bool tensor; scalars are op params."""
    if isinstance(a, Tensor) and _scalar(b):
        return op.compare_scalar(a, kind=kind, c=float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.compare_scalar(b, kind=_FLIPPED[kind], c=float(a))
    if not isinstance(a, (Tensor, np.ndarray, list, tuple)) or not isinstance(b, (Tensor, np.ndarray, list, tuple)):
        return NotImplemented
    a, b = _pair(a, b)
    return getattr(op, kind)(a, b)


_FLIPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def clamp(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    """torch.clamp: numbers become op params; tensor bounds go through maximum/minimum."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    lo = None if min is None or isinstance(min, Tensor) else float(min)
    hi = None if max is None or isinstance(max, Tensor) else float(max)
    if lo is not None or hi is not None:
        x = op.clamp(x, lo=lo, hi=hi)
    if isinstance(min, Tensor):
        x = op.maximum(x, min)
    if isinstance(max, Tensor):
        x = op.minimum(x, max)
    return x


def binary_extreme(a, b, name: str) -> Tensor:
    """maximum/minimum of tensors (or a tensor and a number: that is a one-sided clamp)."""
    if isinstance(a, Tensor) and _scalar(b):
        return op.clamp(a, **{"lo" if name == "maximum" else "hi": float(b)})
    if isinstance(b, Tensor) and _scalar(a):
        return op.clamp(b, **{"lo" if name == "maximum" else "hi": float(a)})
    a, b = _pair(a, b)
    return getattr(op, name)(a, b)


def extreme(x: Tensor, dim, keepdim: bool, kind: str):
    if isinstance(dim, Tensor):
        return binary_extreme(x, dim, "maximum" if kind == "max" else "minimum")
    if dim is None:
        if is_int(x):
            return x.amax(keepdim=keepdim) if kind == "max" else x.amin(keepdim=keepdim)
        # torch's max()/min(): a NaN result shares the gradient between the NaNs (amax: NaN gradients)
        reduce = op.amax if kind == "max" else op.amin
        return reduce(x, keepdim=keepdim, nan_shares=True)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{kind}: dim must be an int (use amax/amin for several axes), got {dim!r}")
    if is_int(x):
        return MaxMin(int_reduce("a" + kind, x, dim, keepdim), int_reduce("arg" + kind, x, dim, keepdim, bool_indices=True))
    values = op.extreme_dim(x, axis=dim, keepdim=keepdim, negate=kind == "min")   # grad to the first extreme
    indices = op.argmax(x, axis=dim, keepdim=keepdim) if kind == "max" else op.argmin(x, axis=dim, keepdim=keepdim)
    return MaxMin(values, indices)


def where(condition, a, b) -> Tensor:
    """``a`` where ``condition`` is non-zero, else ``b``; numbers allowed for a and b (no upload).

    An inf or NaN in the branch not taken never leaks into the result (``where(x > 0, x.log(), 0.0)``
    is safe). A NaN condition counts as false.

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([-1.0, 2.0])
    >>> gg.where(x > 0, x, 0.0).tolist()
    [0.0, 2.0]
    """
    like = next((t for t in (condition, a, b) if isinstance(t, Tensor)), None)
    if like is None:
        raise TypeError("where: expected at least one Tensor")
    if isinstance(a, Tensor) and a.dtype.is_bool and isinstance(b, Tensor) and b.dtype.is_bool:
        return bool_ops.retag_bool(where(condition, bool_ops.as_float(a), bool_ops.as_float(b)))   # 0/1 stays 0/1
    condition = as_tensor(condition, device=like.device)
    if _scalar(a) and _scalar(b):
        b = op.fill_like(condition, c=float(b))
    if _scalar(b):
        return op.where_scalar(condition, as_tensor(a, device=like.device), c=float(b))
    if _scalar(a):
        return op.where_scalar(condition, as_tensor(b, device=like.device), c=float(a), tensor_if_true=False)
    return op.where(condition, as_tensor(a, device=like.device), as_tensor(b, device=like.device))


def _pair(a, b) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, as_tensor(b, device=a.device)
    if isinstance(b, Tensor):
        return as_tensor(a, device=b.device), b
    raise TypeError(f"expected at least one Tensor, got {type(a).__name__} and {type(b).__name__}")


_ = (Sequence, tape, FAILED)
