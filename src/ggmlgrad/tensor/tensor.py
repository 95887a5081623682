"""The user-facing Tensor."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from ..engine import ENGINE, FAILED, PENDING, Array, DType, dtypes, float32, host_array, int32, new_from_host
from ..ops import op
from ..ops.reduce import axis_of as _axis, keepdim_of as _keepdim
from ..ops.registry import REGISTRY
from ..ops.shapes import check_ndim
from ..runtime import Device, resolve_device
from . import bool_ops, tape, views
from .conversion import ConversionMethods
from .inplace import InplaceMethods, _check_int_range
from .inplace import _refuse_while_recording  # noqa: F401  (nn/module.py and optim import it from here)
from .int_reduce import int_reduce, is_int
from .logical import LogicalMethods
from .surfaces import OpMethods


class Tensor(InplaceMethods, ConversionMethods, LogicalMethods, OpMethods, Array):
    """An n-d array (at most 4-D) on a ggml device, with autograd. Its op methods (``x.relu()``,
    ``x.softmax(dim)``, ...) come from the op declarations (:class:`.surfaces.OpMethods`); in-place
    writes, host conversions and logical methods from the mixins of tensor/inplace.py,
    tensor/conversion.py and tensor/logical.py (listed first: hand-written methods win).

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

    # ------------------------------------------------------------- memory layout
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


# ---------------------------------------------------------------------- conversion helpers
def _rebuild_tensor(values: np.ndarray, dtype_name: str, requires_grad: bool) -> Tensor:
    return tensor(values, dtype=dtype_name, requires_grad=requires_grad)


def _from_numpy(arr: np.ndarray, dtype: DType, device: Device, requires_grad: bool) -> Tensor:
    shape = arr.shape if type(arr) is np.ndarray else tuple(int(s) for s in arr.shape)  # ndarray: Python ints
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
