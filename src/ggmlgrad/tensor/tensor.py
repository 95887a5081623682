"""The user-facing Tensor."""
from __future__ import annotations

import numbers
from math import prod as _prod
from typing import Any, Sequence

import numpy as np

from ..engine import COMPUTED, ENGINE, FAILED, PENDING, Array, DType, dtypes, float32, host_array, int32, new_from_host
from ..ops import op
from ..ops.decl import public
from ..ops.indexing import check_int_divisor
from ..ops.registry import REGISTRY
from ..ops.shapes import check_ndim
from ..runtime import Device, resolve_device
from . import bool_ops, call_plans, tape, views
from .conversion import ConversionMethods
from .new_methods import TypeMethods
from .grad_mode import is_grad_enabled, no_grad
from .inplace import InplaceMethods, _check_int_range
from .inplace import _refuse_while_recording  # noqa: F401  (nn/module.py and optim import it from here)
from .int_reduce import int_reduce, is_int
from .surfaces import OpMethods
from ..engine.errors import DTypeError


class Tensor(InplaceMethods, ConversionMethods, TypeMethods, OpMethods, Array):
    """An n-d array (at most 4-D) on a ggml device, with autograd. Its op methods (``x.relu()``,
    ``x.softmax(dim)``, ...) come from the op declarations (:class:`.surfaces.OpMethods`); its
    operators and front-end methods (``a + b``, ``x.max(dim)``, ``x.view(...)``, ``x & y``) are
    installed from their ``public()`` declarations (tensor/tensor.py, functional.py, shape_methods.py,
    logical.py); in-place writes and host conversions come from the mixins of tensor/inplace.py and
    tensor/conversion.py.

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
        t = object.__new__(cls)     # not cls.__new__: Tensor(...) is torch's legacy float constructor
        # Array._init_array, inlined (every op makes one; tests/test_tensor_blank.py checks both set
        # the same fields to the same values)
        t.shape = shape
        t.dtype = dtype
        t.device = device
        t.numel_ = _prod(shape)
        t._storage = None
        t._node = 0
        t._epoch = -1
        t._status = COMPUTED
        t._leaf = 0
        t._leaf_epoch = -1
        t._error = None
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
        """Made by :meth:`__new__` (or ``_blank``): nothing left to set."""

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
    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None) -> None:
        """Queue the gradient nodes; ``.grad`` of each leaf accumulates (graph mode: computed later).

        ``create_graph=True`` records the gradient computation itself, so the ``.grad`` tensors can
        be differentiated again (``retain_graph`` then defaults to True, as in torch). ``inputs``:
        accumulate into these tensors' ``.grad`` only."""
        if inputs is not None:
            from .autograd_api import backward_into  # same layer
            backward_into(self, gradient, retain_graph, create_graph, inputs)
            return
        if retain_graph is None:
            retain_graph = create_graph
        if not self.requires_grad:
            raise RuntimeError("backward: tensor does not require grad (no input had requires_grad=True)")
        if gradient is None:
            if self.numel_ != 1:
                raise RuntimeError(f"backward: gradient can be implicit only for scalar outputs, got shape {self.shape}")
        else:
            gradient = as_tensor(gradient, device=self.device)
            if gradient.shape != self.shape:
                raise ValueError(f"backward: gradient shape {gradient.shape} does not match tensor shape {self.shape}")
        tape.run_backward(self, gradient, bool(retain_graph), bool(create_graph))

    def register_hook(self, hook) -> "RemovableHandle":
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it.

        >>> import ggmlgrad as gg
        >>> x = gg.tensor([1.0, 2.0], requires_grad=True)
        >>> h = x.register_hook(lambda g: g * 2)
        >>> (x * 3).sum().backward()
        >>> x.grad.tolist()
        [6.0, 6.0]
        >>> h.remove()
        """
        from .autograd_api import register_tensor_hook  # same layer
        return register_tensor_hook(self, hook)

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
            raise DTypeError(f"requires_grad_: only float tensors can require grad, got {self.dtype.name}")
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

    # Operators, arithmetic, comparisons, clamp, max/min, where, reshape/view/permute and the other
    # op front ends are installed from their declarations (ops/decl.py: public; tensor/surfaces.py).
    __hash__ = object.__hash__


call_plans.set_tensor_class(Tensor)   # the entry points' call plans make their results with Tensor._blank


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


_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


def tensor(data: Any, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (array, nested lists, scalar or Tensor).

    Floats become float32 (float64 data is rounded to float32), integers int32 (int64 data
    must fit: a value outside int32's range raises ValueError), unless ``dtype`` says otherwise.

    >>> import ggmlgrad as gg
    >>> gg.tensor([[1, 2], [3, 4]], dtype=gg.float32).shape
    (2, 2)
    """
    dev = resolve_device(device)
    if (type(data) is np.ndarray and (dtype is None or dtype is float32) and data.dtype is _F32 and 0 < data.ndim <= 4
            and data.flags.c_contiguous):
        # An observation (``torch.Tensor(obs)`` per environment step): float32 bytes as they are, the
        # same storage and upload as the general path below, without its conversions.
        t = Tensor._blank(data.shape, float32, dev)
        new_from_host(t, data, "tensor()")
        return t.requires_grad_(True) if requires_grad else t
    if (type(data) is np.ndarray and 0 < data.ndim <= 4 and (data.dtype is _F64 and (dtype is None or dtype is float32)
                                                             or data.dtype is _BOOL and dtype is float32)):
        # A reward or done array (float64, or bool into ``gg.Tensor``) per environment step: rounded to
        # float32 as the general path's conversion rounds it (NumPy's cast), without its checks.
        t = Tensor._blank(data.shape, float32, dev)
        new_from_host(t, np.ascontiguousarray(data, dtype=np.float32), "tensor()")
        return t.requires_grad_(True) if requires_grad else t
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

        def fn(input, other):
            # The common case first (two float32 tensors): straight to the op.
            if (opdef is not None and isinstance(input, Tensor) and isinstance(other, Tensor)
                    and input.dtype is float32 and other.dtype is float32):
                return tape.apply(opdef, (input, other), {})
            if isinstance(input, Tensor):
                if input.dtype is float32 and not isinstance(other, Tensor):
                    return float_fn(input, other)  # (x * 2.0: no int32 or bool operand, as the checks below find)
            elif isinstance(other, Tensor) and other.dtype is float32:
                return float_fn(input, other)  # (1.0 - x, reflected: likewise)
            if ((isinstance(input, Tensor) and input.dtype.is_bool)
                    or (isinstance(other, Tensor) and other.dtype.is_bool)):
                return bool_ops.arithmetic(name, input, other, fn)   # torch's bool promotion (tensor/bool_ops.py)
            a_int = isinstance(input, Tensor) and input.dtype is int32
            b_int = isinstance(other, Tensor) and other.dtype is int32
            if not (a_int or b_int):
                return float_fn(input, other)
            both_int = all((isinstance(x, Tensor) and x.dtype is int32)
                           or (isinstance(x, numbers.Integral) and not isinstance(x, bool)) for x in (input, other))
            if both_int and name in ("floor_divide", "remainder"):
                check_int_divisor(name, other)     # torch raises; float32 division would give garbage
            r = float_fn(op.cast(input, dtype=float32) if a_int else input,
                         op.cast(other, dtype=float32) if b_int else other)
            if closed and both_int:   # pow goes through exp(p log|x|): 7 ** 1 is 6.9999995 there, so round first
                return op.cast(op.round(r) if name == "pow" else r, dtype=int32)
            return r
        fn.__name__, fn.__doc__ = float_fn.__name__, float_fn.__doc__
        return fn
    return deco


@public(function="add", dunder="__add__", reflected="__radd__", call_plan=True)
@_integer_arithmetic("add", closed=True)
def add(input, other) -> Tensor:
    """``input + other`` with NumPy broadcasting; Python scalars become op parameters (no upload).

    >>> import ggmlgrad as gg
    >>> gg.add(gg.tensor([1.0, 2.0]), 0.5).tolist()
    [1.5, 2.5]
    """
    if isinstance(input, Tensor) and _scalar(other):
        return op.add_scalar(input, c=float(other))
    if isinstance(other, Tensor) and _scalar(input):
        return op.add_scalar(other, c=float(input))
    a, b = _pair(input, other)
    return op.add(a, b)


@public(function="sub", dunder="__sub__", reflected="__rsub__", call_plan=True)
@_integer_arithmetic("sub", closed=True)
def sub(input, other) -> Tensor:
    """``input - other`` with NumPy broadcasting (int32 stays int32, as in torch).

    >>> import ggmlgrad as gg
    >>> gg.sub(1.0, gg.tensor([1.0, 3.0])).tolist()
    [0.0, -2.0]
    """
    if isinstance(input, Tensor) and _scalar(other):
        return op.add_scalar(input, c=-float(other))
    if isinstance(other, Tensor) and _scalar(input):
        if other.dtype is float32:
            return op.rsub_scalar(other, c=float(input))  # one op: (-x) + c's bits
        return op.add_scalar(op.neg(other), c=float(input))
    a, b = _pair(input, other)
    return op.sub(a, b)


@public(function="mul", dunder="__mul__", reflected="__rmul__", call_plan=True)
@_integer_arithmetic("mul", closed=True)
def mul(input, other) -> Tensor:
    """``input * other`` with NumPy broadcasting.

    >>> import ggmlgrad as gg
    >>> gg.mul(gg.tensor([1.0, 2.0]), gg.tensor([3.0])).tolist()
    [3.0, 6.0]
    """
    if isinstance(input, Tensor) and _scalar(other):
        return op.scale(input, c=float(other))
    if isinstance(other, Tensor) and _scalar(input):
        return op.scale(other, c=float(input))
    a, b = _pair(input, other)
    return op.mul(a, b)


_RECIPROCAL_OVERFLOWS = 1.0 / float(np.finfo(np.float32).max)   # |c| below this: 1/c is inf in float32


@public(function="div", dunder="__truediv__", reflected="__rtruediv__", call_plan=True)
@_integer_arithmetic("div", closed=False)
def div(input, other) -> Tensor:
    """``input / other`` (true division: int32 operands give float32, as in torch).

    >>> import ggmlgrad as gg
    >>> gg.div(gg.tensor([1, 3]), 2).tolist()
    [0.5, 1.5]
    """
    if isinstance(input, Tensor) and _scalar(other):
        fb = float(other)
        if 0 < abs(fb) < _RECIPROCAL_OVERFLOWS:
            # 1/c overflows float32 for a subnormal c: scale by 1/(c 2**64), then by 2**64
            return op.scale(op.scale(input, c=1.0 / (fb * 2.0 ** 64)), c=2.0 ** 64)
        return op.scale(input, c=1.0 / fb if fb != 0 else np.copysign(np.inf, fb))
    if isinstance(other, Tensor) and _scalar(input):
        return op.scale(op.reciprocal(other), c=float(input))   # torch's reciprocal() * c: same values and saves
    a, b = _pair(input, other)
    return op.div(a, b)


@_integer_arithmetic("pow", closed=True)
def _pow(a, b) -> Tensor:
    if isinstance(a, Tensor) and _scalar(b):
        return op.pow_scalar(a, p=float(b))
    if isinstance(b, Tensor) and _scalar(a):
        return op.rpow_scalar(b, c=float(a))
    a, b = _pair(a, b)
    return op.pow(a, b)


@public(function="floor_divide", dunder="__floordiv__", reflected="__rfloordiv__")
@_integer_arithmetic("floor_divide", closed=True)
def floor_divide(input, other) -> Tensor:
    """``input // other`` rounded toward -inf (Python's and torch's rule, also when the float32
    quotient ``input / other`` rounds up to an integer: ``-1.9946 // -0.39892`` is 4, not 5).

    >>> import ggmlgrad as gg
    >>> gg.floor_divide(gg.tensor([-7, 7]), 2).tolist()
    [-4, 3]
    """
    a, b = _float_operands(input, other)
    return _floor_divmod(a, b)[0]


@public(function="remainder", dunder="__mod__", reflected="__rmod__")
@_integer_arithmetic("remainder", closed=True)
def remainder(input, other) -> Tensor:
    """``input % other`` with the sign of ``other`` (Python's and torch's rule; exact, like torch's
    fmod-based remainder, while ``|input / other| < 2**24``; a zero result has ``input``'s sign, as torch).

    >>> import ggmlgrad as gg
    >>> gg.remainder(gg.tensor([-7, 7]), 3).tolist()
    [2, 1]
    """
    a, b = _float_operands(input, other)
    q, r = _floor_divmod(a, b)
    if is_grad_enabled() and (a.requires_grad or b.requires_grad):
        # torch's gradient: 1 for input, -floor_divide(input, other) for other (q is constant)
        return op.value_with_grad_of(r, op.sub(a, op.mul(q, b)))
    return r


def _float_operands(input, other) -> tuple[Tensor, Tensor]:
    """Both operands as float32 tensors; a Python number is filled on the device (no upload)."""
    if isinstance(input, Tensor) and _scalar(other):
        return input, op.fill_like(input, c=float(other))
    if isinstance(other, Tensor) and _scalar(input):
        return op.fill_like(other, c=float(input)), other
    return _pair(input, other)


_EXACT_QUOTIENT = float(2 ** 24)     # float32 integers are exact below this


def _floor_divmod(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(floor_divide, remainder) of float32 tensors as torch computes them (fmod-based, its
    div_floor_floating), not differentiated. floor(a / b) is one too big when a / b rounds up to
    an integer; the exact remainder a - q*b (an error-free product) then has the wrong sign."""
    with no_grad():
        a, b = a.detach(), b.detach()
        q0 = op.floor(op.div(a, b))
        p = op.mul(q0, b)
        r0 = op.sub(op.sub(a, p), _product_error(q0, b, p))   # a - q0*b, rounded once
        small = q0.abs() < _EXACT_QUOTIENT
        wrong = (r0 != 0) & ((r0 < 0) != (b < 0)) & small
        q = op.where(wrong, op.add_scalar(q0, c=-1.0), q0)
        r = op.where(wrong, op.add(r0, b), r0)
        r = op.where(small, r, op.sub(a, p))    # huge quotients: not exact (as before)
        finite_a = a.isfinite()
        binf = b.isinf() & finite_a            # a finite, b infinite: Python's divmod rule
        flip = (a != 0) & ((a < 0) != (b < 0))
        q = op.where(binf, op.where(flip, op.fill_like(q, c=-1.0), q0), q)
        r = op.where(binf, op.where(flip, b, a), r)
        q = op.where(~finite_a & (b != 0), op.fill_like(q, c=float("nan")), q)   # fmod(±inf, b) is NaN
        # signs of zero (where's select does not keep them): a zero quotient has the sign of a / b
        # (torch's copysign), a zero remainder the sign of a (torch's fmod)
        q = _zero_sign_of(q, op.div(a, b))
        r = _zero_sign_of(r, a)
    return q, r


def _zero_sign_of(x: Tensor, like: Tensor) -> Tensor:
    """``x``, except that a zero of ``x`` takes the sign bit of ``like``."""
    flip = (x == 0) & (_signbit(x) != _signbit(like))
    return op.mul(x, op.where(flip, op.fill_like(x, c=-1.0), op.fill_like(x, c=1.0)))


def _signbit(x: Tensor) -> Tensor:
    """NumPy's signbit for float32 (true for -0.0; NaN counts as positive here)."""
    return (x < 0) | ((x == 0) & (op.rdiv_scalar(x, c=1.0) < 0))


def _product_error(x: Tensor, y: Tensor, p: Tensor) -> Tensor:
    """x*y - p exactly, for p = x*y rounded (Dekker's product with Veltkamp splits)."""
    xh, xl = _split(x)
    big = y.abs() > 2.0 ** 100                            # scaled down: 4097*y must not overflow
    yh, yl = _split(op.where(big, op.scale(y, c=2.0 ** -64), y))
    yh = op.where(big, op.scale(yh, c=2.0 ** 64), yh)
    yl = op.where(big, op.scale(yl, c=2.0 ** 64), yl)
    err = op.add(op.add(op.sub(op.mul(xh, yh), p), op.mul(xh, yl)), op.mul(xl, yh))
    return op.add(err, op.mul(xl, yl))


def _split(x: Tensor) -> tuple[Tensor, Tensor]:
    """x = hi + lo exactly, each with at most 12 significant bits (Veltkamp)."""
    c = op.scale(x, c=4097.0)
    hi = op.sub(c, op.sub(c, x))
    return hi, op.sub(x, hi)


@public(method="pow", function="pow", dunder="__pow__", reflected="__rpow__", call_plan=True)
def pow(input, exponent) -> Tensor:
    """``input ** exponent`` with broadcasting; an int32 or bool base takes no negative integer exponent (torch).

    >>> import ggmlgrad as gg
    >>> gg.pow(gg.tensor([2.0, 3.0]), 2).tolist()
    [4.0, 9.0]
    """
    if (isinstance(input, Tensor) and (input.dtype is int32 or input.dtype.is_bool)
            and isinstance(exponent, (int, np.integer))
            and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("pow: integers to negative integer powers are not allowed")
    return _pow(input, exponent)


_MATMUL = REGISTRY["matmul"]


@public(function="matmul", dunder="__matmul__", reflected="__rmatmul__", call_plan=True)
def matmul(input, other) -> Tensor:
    """NumPy ``@`` semantics: 1-D, 2-D and batched with broadcast batch dims; a non-tensor operand
    (array, list) is uploaded on the tensor operand's device.

    >>> import ggmlgrad as gg
    >>> gg.matmul(gg.ones(2, 3), gg.ones(3)).tolist()
    [3.0, 3.0]
    """
    if not isinstance(input, Tensor):
        input = as_tensor(input, device=other.device if isinstance(other, Tensor) else None)
    if not isinstance(other, Tensor):
        other = as_tensor(other, device=input.device)
    return tape.apply(_MATMUL, (input, other), {})


@public(dunder="__neg__", call_plan=True)
def negative(input: Tensor) -> Tensor:
    """``-input``: int32 stays int32 and a bool tensor raises, as in torch (``x.neg()`` is the op).

    >>> import ggmlgrad as gg
    >>> (-gg.tensor([1, -2])).tolist()
    [-1, 2]
    """
    if input.dtype.is_bool:
        return bool_ops.negate(input)
    if input.dtype is int32:
        return mul(input, -1)
    return op.neg(input)


@public(dunder="__pos__")
def positive(input: Tensor) -> Tensor:
    """``+input``: the tensor itself (torch.positive).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([1.0])
    >>> (+x) is x
    True
    """
    return input


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


@public(method=("clamp", "clip"), function=("clamp", "clip"), call_plan=True)
def clamp(input: Tensor, min=None, max=None) -> Tensor:  # noqa: A002  (torch names)
    """Limit to [min, max] (torch.clamp): either side optional; bounds may be numbers (op
    parameters) or tensors (through maximum/minimum).

    >>> import ggmlgrad as gg
    >>> gg.clamp(gg.tensor([-2.0, 0.5, 3.0]), -1.0, 1.0).tolist()
    [-1.0, 0.5, 1.0]
    """
    x = input
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    lo = None if min is None or isinstance(min, Tensor) else _bound(min)
    hi = None if max is None or isinstance(max, Tensor) else _bound(max)
    if lo is not None or hi is not None:
        x = op.clamp(x, lo=lo, hi=hi)
    if isinstance(min, Tensor):
        x = op.maximum(x, min)
    if isinstance(max, Tensor):
        x = op.minimum(x, max)
    return x


def _bound(v):
    """A clamp bound or where branch as an op parameter: an integer stays int (an int32 tensor with
    integer bounds stays int32, torch's promotion), anything else a float."""
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) else float(v)


@public(method="maximum", function="maximum", call_plan=True)
def maximum(input, other) -> Tensor:
    """Elementwise max with broadcasting; equal values share the gradient 0.5/0.5 and a NaN on
    either side propagates (torch).

    >>> import ggmlgrad as gg
    >>> gg.maximum(gg.tensor([1.0, 4.0]), gg.tensor([3.0, 2.0])).tolist()
    [3.0, 4.0]
    """
    return binary_extreme(input, other, "maximum")


@public(method="minimum", function="minimum", call_plan=True)
def minimum(input, other) -> Tensor:
    """Elementwise min with broadcasting (gradients and NaN as :func:`maximum`).

    >>> import ggmlgrad as gg
    >>> gg.minimum(gg.tensor([1.0, 4.0]), 2.0).tolist()
    [1.0, 2.0]
    """
    return binary_extreme(input, other, "minimum")


def binary_extreme(a, b, name: str) -> Tensor:
    """maximum/minimum of tensors (or a tensor and a number: that is a one-sided clamp)."""
    if isinstance(a, Tensor) and _scalar(b):
        return op.clamp(a, **{"lo" if name == "maximum" else "hi": _bound(b)})
    if isinstance(b, Tensor) and _scalar(a):
        return op.clamp(b, **{"lo" if name == "maximum" else "hi": _bound(a)})
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
    indices = op.argmax(x, axis=dim, keepdim=keepdim) if kind == "max" else op.argmin(x, axis=dim, keepdim=keepdim)
    values = op.extreme_dim(x, indices, axis=dim, keepdim=keepdim, negate=kind == "min")   # grad to those indices
    return MaxMin(values, indices)


@public(function="where", method="where", self_at=1, call_plan=True)
def where(condition, input, other) -> Tensor:
    """``input`` where ``condition`` is non-zero, else ``other``; numbers allowed for both (no upload).
    The method ``t.where(condition, other)`` is ``where(condition, t, other)`` (torch).

    An inf or NaN in the branch not taken never leaks into the result (``where(x > 0, x.log(), 0.0)``
    is safe). A float condition (torch takes bool only) means ``condition != 0``, so NaN counts as true,
    as ``condition.bool()`` reads it; no gradient flows into the condition.

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([-1.0, 2.0])
    >>> gg.where(x > 0, x, 0.0).tolist()
    [0.0, 2.0]
    """
    a, b = input, other
    like = next((t for t in (condition, a, b) if isinstance(t, Tensor)), None)
    if like is None:
        raise TypeError("where: expected at least one Tensor")
    if isinstance(a, Tensor) and a.dtype.is_bool and isinstance(b, Tensor) and b.dtype.is_bool:
        return bool_ops.retag_bool(where(condition, bool_ops.as_float(a), bool_ops.as_float(b)))   # 0/1 stays 0/1
    condition = as_tensor(condition, device=like.device)
    if condition.requires_grad:  # a float condition selects: it is not differentiated (nor is torch's bool one)
        condition = condition.detach()
    if _scalar(a) and _scalar(b):
        b = op.fill_like(condition, c=float(b))
    if _scalar(b):
        return op.where_scalar(condition, as_tensor(a, device=like.device), c=_bound(b))
    if _scalar(a):
        return op.where_scalar(condition, as_tensor(b, device=like.device), c=_bound(a), tensor_if_true=False)
    return op.where(condition, as_tensor(a, device=like.device), as_tensor(b, device=like.device))


def _pair(a, b) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, as_tensor(b, device=a.device)
    if isinstance(b, Tensor):
        return as_tensor(a, device=b.device), b
    raise TypeError(f"expected at least one Tensor, got {type(a).__name__} and {type(b).__name__}")


_ = (Sequence, tape, FAILED)
