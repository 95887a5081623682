"""torch's structural ops as composites of ops: ``flip``, ``roll``, ``tril``/``triu``, ``diag``, ``diagonal``,
``trace``, ``outer``, ``kron``, ``tensordot``, ``meshgrid``, ``take``, ``mm``, ``bmm``, ``repeat_interleave``
(``einsum`` is in ``tensor/einsum.py``).

Each is written with ops (``ops/shape_extra.py`` for flip, roll and the in-graph index constants),
so gradients come from the ops' backward rules and every mode (eager, graph, check, capture) runs
the same graph. Index constants are built on the device (``op.iota``), never uploaded: these ops
work inside ``gg.capture``. The exceptions read data on the host (a sync point in graph mode, a
``CaptureError`` in a capture), as torch's result shape depends on it: ``repeat_interleave`` with
a tensor of repeats.

Integer and bool inputs keep their dtype; where an op selects with ``where`` (tril/triu, diag) an
int32 tensor goes through float32 and back, exact within the documented ±2**24 rule.

>>> import ggmlgrad as gg
>>> x = gg.arange(9.0).reshape(3, 3)
>>> gg.tril(x).tolist()
[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [6.0, 7.0, 8.0]]
>>> x.diagonal().tolist(), gg.trace(x).item()
([0.0, 4.0, 8.0], 12.0)
"""
from __future__ import annotations

import numpy as np

from ..engine import float32, int32
from ..engine.dtypes import bool_
from ..ops import op
from ..ops.decl import public
from ..ops.shape_extra import TRI_KINDS
from ..ops.shapes import check_ndim
from . import views
from .bool_ops import as_float
from .functional_shape import _dim, _slice_axis, tile
from .tensor import Tensor, tensor


# ---------------------------------------------------------------- helpers
def _check_tensor(opname: str, x) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{opname}: expected a Tensor, got {type(x).__name__} (convert it with gg.tensor(x))")
    return x


def _float(x: Tensor) -> Tensor:
    """``x`` as float32 for an op that computes in float32 (bool: its 0/1 memory; int32: exact within 2**24)."""
    if x.dtype is float32:
        return x
    if x.dtype is bool_:
        return as_float(x)
    return op.cast(x, dtype=float32)


def _as(y: Tensor, dtype) -> Tensor:
    """A float32 result back in ``dtype`` (the input's)."""
    return y if dtype is float32 else op.cast(y, dtype=dtype)


def _sizes(args: tuple) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


def _int(opname: str, name: str, v) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{opname}: {name} must be an int, got {v!r}")
    return int(v)


# ---------------------------------------------------------------- flip / roll
@public(method="flip", function="flip")
def flip(input: Tensor, *dims, **kwargs) -> Tensor:
    """``input`` reversed along ``dims`` (torch.flip; ``x.flip(0, 1)`` or ``gg.flip(x, dims=(0, 1))``).
    A copy, as in torch.

    >>> import ggmlgrad as gg
    >>> gg.flip(gg.tensor([[1.0, 2.0], [3.0, 4.0]]), dims=(1,)).tolist()
    [[2.0, 1.0], [4.0, 3.0]]
    """
    _check_tensor("flip", input)
    if set(kwargs) - {"dims"}:
        raise TypeError(f"flip() got an unexpected keyword argument {sorted(set(kwargs) - {'dims'})[0]!r}")
    if "dims" in kwargs:
        if dims:
            raise TypeError("flip() got multiple values for argument 'dims'")
        dims = (kwargs["dims"],)
    if not dims:
        raise TypeError("flip() missing 1 required positional argument: 'dims'")
    dims = _sizes(dims)
    return op.flip(input, dims=tuple(_dim("flip", _int("flip", "dims", d), input.ndim) for d in dims))


@public(method="fliplr", function="fliplr")
def fliplr(input: Tensor) -> Tensor:
    """``input`` reversed left/right (dimension 1; at least 2-D), torch.fliplr.

    >>> import ggmlgrad as gg
    >>> gg.fliplr(gg.tensor([[1.0, 2.0]])).tolist()
    [[2.0, 1.0]]
    """
    if _check_tensor("fliplr", input).ndim < 2:
        raise RuntimeError("fliplr: input tensor must be >= 2-d")
    return op.flip(input, dims=(1,))


@public(method="flipud", function="flipud")
def flipud(input: Tensor) -> Tensor:
    """``input`` reversed up/down (dimension 0; at least 1-D), torch.flipud.

    >>> import ggmlgrad as gg
    >>> gg.flipud(gg.tensor([1.0, 2.0])).tolist()
    [2.0, 1.0]
    """
    if _check_tensor("flipud", input).ndim < 1:
        raise RuntimeError("flipud: input tensor must be >= 1-d")
    return op.flip(input, dims=(0,))


@public(method="roll", function="roll")
def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """Elements shifted by ``shifts`` along ``dims``, wrapping around (torch.roll; without ``dims`` the
    flattened tensor is rolled and the shape restored). float32/bool use ggml_roll; other dtypes two
    slices joined (exact).

    >>> import ggmlgrad as gg
    >>> gg.roll(gg.tensor([1.0, 2.0, 3.0]), 1).tolist()
    [3.0, 1.0, 2.0]
    """
    _check_tensor("roll", input)
    shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    shifts = tuple(_int("roll", "shifts", s) for s in shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: shifts must have one entry when dims is not given, got {len(shifts)}")
        flat = op.reshape(input, shape=(input.numel_,))
        return op.reshape(roll(flat, shifts, (0,)), shape=input.shape)
    dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    dims = tuple(_dim("roll", d, input.ndim) for d in dims)
    if input.dtype is float32 or input.dtype is bool_:
        return op.roll(input, shifts=shifts, dims=dims)
    out = input
    for s, d in zip(shifts, dims):
        n = input.shape[d]
        k = s % n if n else 0
        if k:
            out = op.concat(_slice_axis(out, d, n - k, n), _slice_axis(out, d, 0, n - k), axis=d)
    return out if out is not input else op.reshape(input, shape=input.shape)


# ---------------------------------------------------------------- triangles and diagonals
def _tri(opname: str, input: Tensor, diagonal: int, lower: bool) -> Tensor:
    _check_tensor(opname, input)
    k = _int(opname, "diagonal", diagonal)
    if input.ndim < 2:
        raise RuntimeError(f"{opname}: input tensor must have at least 2 dimensions, got shape {input.shape}")
    n, m = input.shape[-2:]
    if input.numel_ == 0:
        return op.reshape(input, shape=input.shape)
    if input.dtype is float32 and n == m and (lower, k) in TRI_KINDS:   # ggml's kernel (square, diagonal 0/±1)
        return op.tri(input, lower=lower, diagonal=k)
    cols = op.iota(input, shape=(n, m), axis=1)
    rows = op.iota(input, shape=(n, m), axis=0)
    keep = op.compare_scalar(op.sub(cols, rows), kind="le" if lower else "ge", c=float(k))
    return _as(op.where_scalar(keep, _float(input), c=0.0), input.dtype)


@public(method="tril", function="tril")
def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims: elements with ``col - row <= diagonal`` kept, the rest 0
    (NaN and inf included, as torch.tril).

    >>> import ggmlgrad as gg
    >>> gg.tril(gg.ones(2, 3), diagonal=1).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    return _tri("tril", input, diagonal, True)


@public(method="triu", function="triu")
def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims: elements with ``col - row >= diagonal`` kept, the rest 0.

    >>> import ggmlgrad as gg
    >>> gg.triu(gg.ones(2, 3), diagonal=1).tolist()
    [[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    """
    return _tri("triu", input, diagonal, False)


def _diagonal_layout(bstrides, bshape, offset, d1, d2):
    rest = tuple(s for i, s in enumerate(bstrides) if i not in (d1, d2))
    start = offset * bstrides[d2] if offset >= 0 else -offset * bstrides[d1]
    return start, rest + (bstrides[d1] + bstrides[d2],)


@public(method="diagonal", function="diagonal")
def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the ``(dim1, dim2)`` planes, offset ``offset`` above (below when negative), as
    the last dimension: a view of ``input`` (torch.diagonal; writes through it reach ``input``).

    >>> import ggmlgrad as gg
    >>> gg.arange(6.0).reshape(2, 3).diagonal(1).tolist()
    [1.0, 5.0]
    """
    _check_tensor("diagonal", input)
    off = _int("diagonal", "offset", offset)
    if input.ndim < 2:
        raise RuntimeError(f"diagonal: input must have at least 2 dimensions, got shape {input.shape}")
    d1, d2 = _dim("diagonal", dim1, input.ndim), _dim("diagonal", dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal: diagonal dimensions cannot be identical {dim1}, {dim2}")
    n, m = input.shape[d1], input.shape[d2]
    length = max(0, min(n, m - off) if off >= 0 else min(n + off, m))
    axes = tuple(i for i in range(input.ndim) if i not in (d1, d2)) + (d1, d2)
    rest = tuple(input.shape[i] for i in axes[:-2])
    moved = op.permute(input, axes=axes) if axes != tuple(range(input.ndim)) else input
    flat_shape = rest + (n * m,)
    start = (off if off >= 0 else -off * m) if length else 0
    stop = start + (length - 1) * (m + 1) + 1 if length else 0
    lead = len(rest)
    steps = [("permute", axes)] if moved is not input else []
    steps.append(("reshape", flat_shape))
    key = ((0,) * lead + (start,), tuple(rest) + (stop,), (1,) * lead + (m + 1,))
    flat = op.reshape(moved, shape=flat_shape)
    out = op.slice(flat, start=key[0], stop=key[1], step=key[2], shape=rest + (length,))
    steps.append(("slice",) + key + (out.shape,))
    views.make_view(out, input, steps[0], _diagonal_layout, off, d1, d2)
    out._view.steps = out._view.steps[:-1] + tuple(steps)
    return out


_take_diagonal = diagonal


@public(method="diag", function="diag")
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D ``input``: the square matrix with ``input`` on its ``diagonal``-th diagonal, zeros elsewhere.
    A 2-D ``input``: its ``diagonal``-th diagonal (a copy). As torch.diag.

    >>> import ggmlgrad as gg
    >>> gg.diag(gg.tensor([1.0, 2.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    _check_tensor("diag", input)
    k = _int("diag", "diagonal", diagonal)
    if input.ndim == 2:
        d = _take_diagonal(input, k)
        return op.reshape(d, shape=d.shape)
    if input.ndim != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    n = input.shape[0]
    size = n + abs(k)
    v = _float(input)
    if abs(k):
        v = op.concat(v, op.iota(v, shape=(abs(k),), axis=0, step=0.0), axis=0)
    v = op.reshape(v, shape=(size, 1) if k >= 0 else (1, size))
    cols = op.iota(v, shape=(size, size), axis=1)
    rows = op.iota(v, shape=(size, size), axis=0)
    on = op.compare_scalar(op.sub(cols, rows), kind="eq", c=float(k))
    return _as(op.where_scalar(on, op.broadcast_to(v, shape=(size, size)), c=0.0), input.dtype)


@public(method="trace", function="trace")
def trace(input: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor (torch.trace; int32 stays int32).

    >>> import ggmlgrad as gg
    >>> gg.trace(gg.eye(3)).item()
    3.0
    """
    _check_tensor("trace", input)
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    d = diagonal(input)
    if d.dtype.is_float and d.dtype is not float32:   # float16/bfloat16: summed in float32, as torch accumulates
        return op.cast(op.sum(op.cast(d, dtype=float32)), dtype=d.dtype)
    return d.sum()


# ---------------------------------------------------------------- products
def _same_dtype(opname: str, a: Tensor, b: Tensor) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{opname}: expected m1 and m2 to have the same dtype, but got: {a.dtype.name} != "
                           f"{b.dtype.name}")


def _matmul_any(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` computed in float32, back in the operands' common dtype (int32: exact within 2**24)."""
    from .tensor import matmul
    if a.dtype is bool_ or b.dtype is bool_:
        raise RuntimeError("matmul: bool tensors are not supported (torch: not implemented for 'Bool')")
    dtype = a.dtype if a.dtype is b.dtype else float32
    out = matmul(_float(a), _float(b))
    return out if dtype is float32 else op.cast(out, dtype=dtype)


@public(method="mm", function="mm", call_plan=True)
def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """Matrix product of two 2-D tensors (torch.mm; no broadcasting).

    >>> import ggmlgrad as gg
    >>> gg.mm(gg.ones(2, 3), gg.ones(3, 4)).shape
    (2, 4)
    """
    _check_tensor("mm", input), _check_tensor("mm", mat2)
    if input.ndim != 2:
        raise RuntimeError(f"mm: self must be a matrix, got shape {input.shape}")
    if mat2.ndim != 2:
        raise RuntimeError(f"mm: mat2 must be a matrix, got shape {mat2.shape}")
    if input.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mm: mat1 and mat2 shapes cannot be multiplied ({input.shape[0]}x{input.shape[1]} and "
                           f"{mat2.shape[0]}x{mat2.shape[1]})")
    _same_dtype("mm", input, mat2)
    return _matmul_any(input, mat2)


@public(method="bmm", function="bmm", call_plan=True)
def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of two 3-D tensors with the same batch size (torch.bmm; no broadcasting).

    >>> import ggmlgrad as gg
    >>> gg.bmm(gg.ones(5, 2, 3), gg.ones(5, 3, 4)).shape
    (5, 2, 4)
    """
    _check_tensor("bmm", input), _check_tensor("bmm", mat2)
    if input.ndim != 3:
        raise RuntimeError(f"bmm: batch1 must be a 3D tensor, got shape {input.shape}")
    if mat2.ndim != 3:
        raise RuntimeError(f"bmm: batch2 must be a 3D tensor, got shape {mat2.shape}")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(f"bmm: expected size for the batch and inner dims to match, got {input.shape} and "
                           f"{mat2.shape}")
    _same_dtype("bmm", input, mat2)
    return _matmul_any(input, mat2)


@public(method=("outer", "ger"), function=("outer", "ger"))
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two 1-D tensors: ``out[i, j] = input[i] * vec2[j]`` (torch.outer).

    >>> import ggmlgrad as gg
    >>> gg.outer(gg.tensor([1.0, 2.0]), gg.tensor([3.0, 4.0])).tolist()
    [[3.0, 4.0], [6.0, 8.0]]
    """
    _check_tensor("outer", input), _check_tensor("outer", vec2)
    if input.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, got shapes {input.shape} and {vec2.shape}")
    return op.reshape(input, shape=(input.shape[0], 1)) * op.reshape(vec2, shape=(1, vec2.shape[0]))


@public(method="kron", function="kron")
def kron(input: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product (torch.kron): block ``(i, j, ...)`` is ``input[i, j, ...] * other``; the operand
    with fewer dimensions gets leading size-1 ones. Computed as ``input`` with each element repeated
    ``other.shape`` times (repeat_interleave per dim) times ``other`` tiled ``input.shape`` times.

    >>> import ggmlgrad as gg
    >>> gg.kron(gg.tensor([1.0, 2.0]), gg.tensor([1.0, 10.0])).tolist()
    [1.0, 10.0, 2.0, 20.0]
    """
    _check_tensor("kron", input), _check_tensor("kron", other)
    nd = max(input.ndim, other.ndim)
    a_shape = (1,) * (nd - input.ndim) + input.shape
    b_shape = (1,) * (nd - other.ndim) + other.shape
    check_ndim("kron", a_shape)
    a = op.reshape(input, shape=a_shape) if a_shape != input.shape else input
    b = op.reshape(other, shape=b_shape) if b_shape != other.shape else other
    for k, r in enumerate(b_shape):
        if r != 1:
            a = repeat_interleave(a, r, dim=k)
    if any(n != 1 for n in a_shape):
        b = tile(b, a_shape)
    return a * b


def _tensordot_dims(a: Tensor, b: Tensor, dims) -> tuple[list, list]:
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, (bool, np.bool_)):
        k = int(dims)
        if k < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={k}")
        if k > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={k}")
        return list(range(a.ndim - k, a.ndim)), list(range(k))
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if not isinstance(dims, (list, tuple)) or len(dims) != 2:
        raise TypeError(f"tensordot: dims must be an int or a pair of dimension lists, got {dims!r}")
    da, db = ([d] if isinstance(d, (int, np.integer)) else list(d) for d in dims)
    if len(da) != len(db):
        raise RuntimeError(f"tensordot: both dimension lists should have the same length, got {da} and {db}")
    return [_dim("tensordot", d, a.ndim) for d in da], [_dim("tensordot", d, b.ndim) for d in db]


@public(function="tensordot")
def tensordot(a: Tensor, b: Tensor, dims=2) -> Tensor:
    """Sum of products over the paired dimensions ``dims`` (an int ``k``: ``a``'s last ``k`` with ``b``'s
    first ``k``; or two lists), as torch.tensordot: permutes, reshapes and one matmul.

    >>> import ggmlgrad as gg
    >>> gg.tensordot(gg.ones(2, 3, 4), gg.ones(3, 4, 5), dims=2).shape
    (2, 5)
    """
    _check_tensor("tensordot", a), _check_tensor("tensordot", b)
    da, db = _tensordot_dims(a, b, dims)
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"tensordot: contracted dimensions need to match, but first has size {a.shape[i]} in "
                               f"dim {i} and second has size {b.shape[j]} in dim {j}")
    fa = [i for i in range(a.ndim) if i not in da]
    fb = [j for j in range(b.ndim) if j not in db]
    out_shape = tuple(a.shape[i] for i in fa) + tuple(b.shape[j] for j in fb)
    check_ndim("tensordot", out_shape)
    k = int(np.prod([a.shape[i] for i in da], dtype=np.int64))
    am = op.reshape(op.permute(a, axes=tuple(fa + da)), shape=(int(np.prod([a.shape[i] for i in fa])), k))
    bm = op.reshape(op.permute(b, axes=tuple(db + fb)), shape=(k, int(np.prod([b.shape[j] for j in fb]))))
    if a.dtype is not b.dtype:
        am, bm = _float(am), _float(bm)
    return op.reshape(_matmul_any(am, bm), shape=out_shape)


# ---------------------------------------------------------------- grids and takes
@public(function="meshgrid")
def meshgrid(*tensors, indexing: str = "ij") -> tuple:
    """Coordinate grids of 1-D tensors: result ``i`` varies along dimension ``i`` (``indexing="ij"``; with
    ``"xy"`` the first two dimensions are swapped, as NumPy's default). Views (expanded), as torch.

    >>> import ggmlgrad as gg
    >>> a, b = gg.meshgrid(gg.tensor([1.0, 2.0]), gg.tensor([3.0, 4.0, 5.0]), indexing="ij")
    >>> a.shape, b[0].tolist()
    ((2, 3), [3.0, 4.0, 5.0])
    """
    ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if not ts:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for t in ts:
        if _check_tensor("meshgrid", t).ndim > 1:
            raise RuntimeError(f"meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.shape}")
        if t.dtype is not ts[0].dtype:
            raise RuntimeError("meshgrid: expects all tensors to have the same dtype")
    sizes = [t.numel_ for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        order[0], order[1] = 1, 0
    shape = tuple(sizes[i] for i in order)
    check_ndim("meshgrid", shape)
    out = []
    for i, t in enumerate(ts):
        pos = order.index(i)
        line = op.reshape(t, shape=tuple(sizes[i] if k == pos else 1 for k in range(len(ts))))
        views.make_view(line, t, ("reshape", line.shape), views._reshape_layout, line.shape)
        out.append(views.expand_view(op.broadcast_to(line, shape=shape), line))
    return tuple(out)


@public(method="take", function="take")
def take(input: Tensor, index: Tensor) -> Tensor:
    """``input`` read as 1-D at the int32 ``index`` (any shape; negative values count from the end), in
    ``index``'s shape (torch.take). Out-of-range values raise ``IndexError`` in every mode.

    >>> import ggmlgrad as gg
    >>> gg.take(gg.tensor([[1.0, 2.0], [3.0, 4.0]]), gg.tensor([0, -1])).tolist()
    [1.0, 4.0]
    """
    _check_tensor("take", input)
    if not isinstance(index, Tensor) or index.dtype is not int32:
        raise TypeError(f"take: index must be an int32 tensor, got "
                        f"{index.dtype.name if isinstance(index, Tensor) else type(index).__name__}")
    flat = op.reshape(input, shape=(input.numel_,))
    idx = op.reshape(index, shape=(index.numel_,)) if index.ndim != 1 else index
    out = op.index_select(flat, idx, axis=0, wrap=True)
    return op.reshape(out, shape=index.shape)


@public(method="take_along_dim", function="take_along_dim")
def take_along_dim(input: Tensor, indices: Tensor, dim=None) -> Tensor:
    """``input``'s values at ``indices`` along ``dim``, the other dims of the two broadcast together
    (torch.take_along_dim); without ``dim`` both are flattened. Out-of-range indices raise ``IndexError``.

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([[10.0, 30.0, 20.0], [60.0, 50.0, 40.0]])
    >>> gg.take_along_dim(x, x.argmax(dim=1, keepdim=True), dim=1).tolist()
    [[30.0], [60.0]]
    """
    from .functional_shape import gather
    _check_tensor("take_along_dim", input)
    if not isinstance(indices, Tensor) or indices.dtype is not int32:
        raise RuntimeError("take_along_dim(): dtype of indices should be int32 (torch: Long)")
    if dim is None:
        return gather(op.reshape(input, shape=(input.numel_,)), 0, op.reshape(indices, shape=(indices.numel_,)))
    if input.ndim != indices.ndim:
        raise RuntimeError(f"take_along_dim(): input and indices should have the same number of dimensions, but got "
                           f"{input.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    d = _dim("take_along_dim", dim, input.ndim)
    try:
        common = np.broadcast_shapes(tuple(1 if i == d else n for i, n in enumerate(input.shape)),
                                     tuple(1 if i == d else n for i, n in enumerate(indices.shape)))
    except ValueError:
        raise RuntimeError(f"take_along_dim(): shapes {input.shape} and {indices.shape} do not broadcast outside "
                           f"dim {d}") from None
    xs = tuple(input.shape[d] if i == d else n for i, n in enumerate(common))
    js = tuple(indices.shape[d] if i == d else n for i, n in enumerate(common))
    x = input if input.shape == xs else op.broadcast_to(input, shape=xs)
    idx = indices if indices.shape == js else op.broadcast_to(indices, shape=js)
    return gather(x, d, idx)


# ---------------------------------------------------------------- repeat_interleave
@public(method="repeat_interleave", function="repeat_interleave")
def repeat_interleave(input: Tensor, repeats=None, dim=None, *, output_size=None) -> Tensor:
    """Each element (each slice along ``dim``) repeated ``repeats`` times in place (torch.repeat_interleave).
    ``repeats``: an int, or an int32 tensor of one count per slice (read on the host: the result's shape
    depends on it). Without ``dim`` the flattened input is repeated. ``gg.repeat_interleave(counts)``
    repeats ``arange(len(counts))``.

    >>> import ggmlgrad as gg
    >>> gg.tensor([[1.0, 2.0], [3.0, 4.0]]).repeat_interleave(2, dim=0).tolist()
    [[1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [3.0, 4.0]]
    """
    _check_tensor("repeat_interleave", input)
    if repeats is None:   # torch.repeat_interleave(repeats): arange(len(repeats)) repeated
        if input.ndim != 1 or input.dtype is not int32:
            raise RuntimeError("repeat_interleave: repeats must be a 1-D int32 tensor")
        return repeat_interleave(tensor(np.arange(input.shape[0], dtype=np.int32), device=input.device), input, 0)
    if dim is None:
        input, d = op.reshape(input, shape=(input.numel_,)), 0
    else:
        d = _dim("repeat_interleave", dim, input.ndim)
    if input.ndim == 0:
        input = op.reshape(input, shape=(1,))
    n = input.shape[d]
    if isinstance(repeats, Tensor) and repeats.ndim == 0:
        repeats = repeats.item()
    if isinstance(repeats, Tensor):
        return _repeat_by_tensor(input, repeats, d, output_size)
    r = _int("repeat_interleave", "repeats", repeats)
    if r < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    _check_output_size(output_size, n * r)
    out_shape = input.shape[:d] + (n * r,) + input.shape[d + 1:]
    if input.ndim < 4:   # a new axis of r copies after d, then merged: broadcast_to's backward sums them
        grown = op.reshape(input, shape=input.shape[:d + 1] + (1,) + input.shape[d + 1:])
        wide = op.broadcast_to(grown, shape=input.shape[:d + 1] + (r,) + input.shape[d + 1:])
        return op.reshape(wide, shape=out_shape)
    if r == 0:
        return _slice_axis(input, d, 0, 0)
    # row i of the result is row (i + 0.5) // r: half a step away from every integer, so float32 rounding
    # never moves it across one
    rows = op.cast(op.floor(op.iota(input, shape=(n * r,), axis=0, start=0.5 / r, step=1.0 / r)), dtype=int32)
    return op.index_select(input, rows, axis=d)


def _check_output_size(output_size, total: int) -> None:
    if output_size is not None and output_size != total:
        raise RuntimeError(f"repeat_interleave: allocated size does not match required size ({output_size} vs "
                           f"{total})")


def _repeat_by_tensor(input: Tensor, repeats: Tensor, d: int, output_size) -> Tensor:
    from .mask_index import host_values
    if repeats.dtype is not int32:
        raise RuntimeError(f"repeat_interleave: repeats has to be an int32 tensor, got {repeats.dtype.name}")
    if repeats.ndim != 1:
        raise RuntimeError(f"repeat_interleave: repeats must be 0-dim or 1-dim tensor, got shape {repeats.shape}")
    n = input.shape[d]
    if repeats.shape[0] not in (1, n):
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {repeats.shape[0]} and input.size({d}) = {n}")
    counts = np.broadcast_to(host_values(repeats, "repeat_interleave with a tensor of repeats"), (n,)).astype(np.int64)
    if (counts < 0).any():
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    _check_output_size(output_size, int(counts.sum()))
    rows = np.repeat(np.arange(n, dtype=np.int32), counts)
    return op.index_select(input, tensor(rows, dtype=int32, device=input.device), axis=d)
