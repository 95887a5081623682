"""Indexing with int32 index tensors: index_select, gather, embedding, and their scatter-add backwards.

Index values live on the device, so Python cannot see them without a read. ggml's
get_rows asserts (aborting the process) on an out-of-range row, so every index goes
through :func:`_safe_index` before it reaches get_rows: cast to float, clamped to the
valid range, cast back — graph nodes, no host round trip. The clamp only keeps the
process alive; an out-of-range value is always an ``IndexError`` naming the op and the
value (:func:`check_values`):

- eager mode and graph check mode: the index tensor is already computed, so the op reads
  it back (a counted download) and raises at its own call;
- graph mode and capture: the op also queues ``index_check``, a one-value node (the first
  bad value), which the engine verifies after the compute (``engine/checks.py``): the
  error comes at the sync point, and the drain's results fail; a captured replay checks
  before any update.

Gradients scatter-add with ``ggml_get_rows_back``: repeated indices accumulate.
"""
from __future__ import annotations

from .._ggml import consts, lib
from ..runtime import DeviceError   # ValueError and RuntimeError (torch's class for mixed devices)
from ..engine import (COMPUTED, ENGINE, Array, active_observer, check_enabled, count_download, download, float32,
                      graph_enabled, host_value,
                      int32, user_site)
from ..engine import checks as _checks
from ..engine.errors import IndexValueError
from ..engine.records import phase
from .build import owned, permute, reshape, shape_only
from .registry import define, op, same_float
from .shape_ops import _zeros_of
from .shapes import check_ndim, norm_axis, numel
from ..engine.errors import IndexRangeError, ShapeError

# get_rows runs on float row numbers while offsets are added: exact up to 2**24.
_EXACT_F32 = 2 ** 24


# ---------------------------------------------------------------- value checks
def check_values(opname: str, index, lo: int, hi: int, message: str, ignore: int | None = None) -> bool:
    """Refuse values of the int32 tensor ``index`` outside ``[lo, hi]`` (``ignore`` is allowed too)
    with an ``IndexError``: ``message.format(first bad value)``, the same text in every mode.

    A computed index outside graph mode is read now (eager and check mode: the error comes at
    this call). Otherwise (graph mode, a capture recording) a check node is queued and verified
    after the compute. Returns True in that case: the caller's graph must clamp the indices,
    since they reach ggml unchecked (get_rows aborts on a bad row).

    >>> import ggmlgrad as gg
    >>> check_values("demo", gg.tensor([0, 2]), 0, 2, "demo: index {} is out of range")
    False
    """
    if numel(index.shape) == 0 or phase() is not None:
        return False  # nothing to check; or a backward pass, whose indices the forward checked
    if index._status == COMPUTED and active_observer() is None and (check_enabled() or not graph_enabled()):
        values = host_value(index)   # host memory: read where it lies (counted as the download it replaces)
        if values is None or not count_download(f"{opname} index check", values.nbytes):
            values = download(index, f"{opname} index check")
        bad = _checks.first_bad(values, lo, hi, ignore)
        if bad is not None:
            raise IndexValueError(message.format(bad))
        return False
    # Recorded straight on the engine (no autograd, no Tensor): an engine-internal one-value result.
    params = {"lo": lo, "hi": hi, "ignore": ignore if ignore is not None and not lo <= ignore <= hi else None}
    c = Array()
    c._init_array((1,), int32, index.device)
    ENGINE.record(c, "index_check", _index_check, (index,), 8.0 * index.numel_, params)
    _checks.register(ENGINE, _checks.IndexCheck(c, lo, hi, ignore, message, user_site()))
    return True


def check_int_divisor(opname: str, divisor) -> None:
    """torch's ``RuntimeError: ZeroDivisionError`` for an int32 ``//`` or ``%`` by zero: a Python 0 at
    once; a zero in an int32 tensor divisor as an index check does (at this call in eager and check
    mode, at the sync point in graph mode and capture; :func:`check_values`), never a garbage result.

    >>> import ggmlgrad as gg
    >>> check_int_divisor("floor_divide", gg.tensor([1, -2]))
    """
    message = f"{opname}: ZeroDivisionError (integer division by zero)"
    if not isinstance(divisor, Array):
        if divisor == 0:
            raise RuntimeError(message)
        return
    zero = op.cast(op.compare_scalar(divisor, kind="eq", c=0.0), dtype=int32)    # 1 where 0
    check_values(opname, zero, 0, 0, message.replace("{", "{{").replace("}", "}}"))


def _infer_index_check(index, lo: int, hi: int, ignore: int | None = None):
    if index.dtype is not int32:
        raise TypeError(f"index_check: index must be int32, got {index.dtype.name}")
    if numel(index.shape) == 0:
        raise ValueError("index_check: empty index")
    for k, v in (("lo", lo), ("hi", hi), ("ignore", ignore)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"index_check: {k} must be an int, got {v!r}")
    if lo > hi:
        raise ValueError(f"index_check: empty range [{lo}, {hi}]")
    return (1,), int32


@define("index_check", infer=_infer_index_check, differentiable=False,
        work=lambda index, **p: 8.0 * numel(index.shape))
def _index_check(ctx, nodes, inputs, out, lo, hi, ignore=None):
    """The first value of ``index`` (flat order) outside ``[lo, hi]`` and not ``ignore``; when
    every value is valid, some valid value. Exact int32 (read with get_rows, not through float)."""
    n = numel(inputs[0].shape)
    flat = lib.reshape_1d(ctx, nodes[0], n)
    f = lib.cast(ctx, flat, consts.TYPE_F32)      # exact below 2**24; larger values stay out of range
    below = lib.step(ctx, lib.scale_bias(ctx, f, -1.0, lo - 0.5))       # 1 where value < lo
    above = lib.step(ctx, lib.scale_bias(ctx, f, 1.0, -(hi + 0.5)))     # 1 where value > hi
    bad = lib.add(ctx, below, above)
    if ignore is not None:  # 1 - (value == ignore)
        same = lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, lib.scale_bias(ctx, f, 1.0, -float(ignore))),
                                            -1.0, 0.5))
        bad = lib.mul(ctx, bad, lib.scale_bias(ctx, same, -1.0, 1.0))
    rank = lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(n), 1.0), -1.0, float(n))   # n .. 1: first wins
    pos = lib.argmax(ctx, lib.reshape_2d(ctx, lib.mul(ctx, bad, rank), n, 1))
    return lib.get_rows(ctx, lib.reshape_2d(ctx, flat, 1, n), pos)     # n rows of one value: ne [1, 1] = (1,)


# ---------------------------------------------------------------- validation
def _check_index(opname: str, index, size: int, *, wrap: bool = False, what: str = "") -> None:
    if index.dtype is not int32:
        raise TypeError(f"{opname}: index must be an int32 tensor, got {index.dtype.name} {index.shape}")
    if numel(index.shape) == 0:
        return
    if size == 0:
        raise IndexError(f"{opname}: cannot index into an empty dimension{what}")
    if size > _EXACT_F32:
        raise ValueError(f"{opname}: indexing a dimension of size {size} is not supported (indices are "
                         f"clamped in float32, exact up to {_EXACT_F32}){what}")
    check_values(opname, index, -size if wrap else 0, size - 1,
                 f"{opname}: index {{}} is out of range for size {size}{what}")


def _safe_index(ctx: int, node: int, size: int, wrap: bool = False, offsets: int | None = None) -> int:
    """int32 index node → int32 node clamped to [0, size) (negative wrapped first when ``wrap``).

    ``offsets`` (float, broadcastable) is added after clamping (flat indices for gather).
    """
    f = lib.cast(ctx, node, consts.TYPE_F32)
    if wrap:
        neg = lib.step(ctx, lib.neg(ctx, f))           # 1 where index < 0
        f = lib.add(ctx, f, lib.scale(ctx, neg, float(size)))
    f = lib.clamp(ctx, f, 0.0, float(size - 1))
    if offsets is not None:
        f = lib.add(ctx, f, offsets)
    return lib.cast(ctx, f, consts.TYPE_I32)


def _out_dtype(x):
    """The input's dtype, as torch (bool rows are float32 0/1 storage; float16/bfloat16 are cast back)."""
    return x.dtype


def _as_out(ctx: int, node: int, out) -> int:
    """get_rows gives float32 rows for float16/bfloat16 input: cast back to the input's storage (exact)."""
    if out.dtype.is_float and out.dtype is not float32:
        return lib.cast(ctx, node, out.dtype.ggml_type)
    return node


def _grad_f32(g):
    """A float16/bfloat16 gradient in float32: the scatter-add backwards compute in float32."""
    return g if g.dtype is float32 else op.cast(g, dtype=float32)


def _grad_as(x, grad):
    """``grad`` in the dtype of the input ``x`` it belongs to (float16/bfloat16 inputs get theirs, as torch)."""
    return grad if x.dtype is float32 else op.cast(grad, dtype=x.dtype)


def _zeros_like_shape(ctx: int, shape: tuple, dtype, src: int) -> int:
    """Zeros of ``shape``; ``src`` (an input node) backs an empty result (see shape_ops.empty_node)."""
    return _zeros_of(ctx, shape, dtype, src)


def _axis_first(nd: int, axis: int) -> tuple:
    return (axis,) + tuple(i for i in range(nd) if i != axis)


def _axis_last(nd: int, axis: int) -> tuple:
    return tuple(i for i in range(nd) if i != axis) + (axis,)


def _inverse(perm: tuple) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _permuted(ctx, node, perm):
    """Contiguous copy of ``node`` with NumPy axes permuted (no-op for the identity)."""
    if perm == tuple(range(len(perm))):
        return node
    return lib.cont(ctx, permute(ctx, node, perm))


def _finish(ctx, node, shape_before_perm, inv):
    """Reshape to ``shape_before_perm``, undo the permutation, return a contiguous non-view."""
    node = reshape(ctx, node, shape_before_perm)
    if inv != tuple(range(len(inv))):
        node = permute(ctx, node, inv)
    return lib.cont(ctx, node)


# ---------------------------------------------------------------- index_select
def _infer_index_select(x, index, axis, wrap=False):
    if x.ndim == 0:
        raise ShapeError(f"index_select: cannot index a 0-d tensor (shape {x.shape})")
    ax = norm_axis("index_select", axis, x.ndim)
    if index.ndim > 1:
        raise IndexRangeError(f"index_select: index must be 1-D, got shape {index.shape}")   # torch: IndexError
    if x.device is not index.device:
        raise DeviceError("index_select: input and index are on different devices")
    # wrap: x[index] (negative indices count from the end), named as PyTorch names it
    _check_index("indexing" if wrap else "index_select", index, x.shape[ax], wrap=wrap,
                 what=f" (dimension {axis} of {x.shape})")
    k = numel(index.shape)
    return x.shape[:ax] + (k,) + x.shape[ax + 1:], _out_dtype(x)


def _index_select_backward(g, n):
    x, index = n.inputs
    return _grad_as(x, op.index_select_backward(_grad_f32(g), index, shape=x.shape, axis=n.params["axis"],
                                                wrap=n.params.get("wrap", False))), None


@define("index_select", saves=(1,), infer=_infer_index_select, backward=_index_select_backward)
def _index_select(ctx, nodes, inputs, out, axis, wrap=False):
    """Rows of ``x`` along ``axis`` picked by a 1-D index (ggml_get_rows)."""
    x, index = inputs
    if numel(out.shape) == 0:
        return _zeros_like_shape(ctx, out.shape, out.dtype, nodes[0])
    ax = norm_axis("index_select", axis, x.ndim)
    perm = _axis_first(x.ndim, ax)
    L, k = x.shape[ax], numel(index.shape)
    rest = tuple(x.shape[i] for i in perm[1:])
    src = reshape(ctx, _permuted(ctx, nodes[0], perm), (L, numel(rest)))
    ids = lib.reshape_1d(ctx, _safe_index(ctx, nodes[1], L, wrap), k)
    rows = lib.get_rows(ctx, src, ids)
    return _as_out(ctx, _finish(ctx, rows, (k,) + rest, _inverse(perm)), out)


def _infer_index_select_backward(g, index, shape, axis, wrap=False):
    same_float("index_select_backward", g)
    shape = tuple(shape)
    ax = norm_axis("index_select_backward", axis, len(shape))
    want = shape[:ax] + (numel(index.shape),) + shape[ax + 1:]
    if g.shape != want or index.dtype is not int32:
        raise ValueError(f"index_select_backward: gradient {g.shape} does not match {want}")
    return shape, float32


@define("index_select_backward", saves=(1,), infer=_infer_index_select_backward,
        backward=lambda g, n: (op.index_select(g, n.inputs[1], axis=n.params["axis"],
                                               wrap=n.params.get("wrap", False)), None))
def _index_select_backward_fwd(ctx, nodes, inputs, out, shape, axis, wrap=False):
    """Zeros of ``shape`` with each gradient row added at its index (repeats accumulate)."""
    g, index = inputs
    shape = tuple(shape)
    if numel(g.shape) == 0 or numel(shape) == 0:
        return _zeros_like_shape(ctx, shape, float32, nodes[0])
    ax = norm_axis("index_select_backward", axis, len(shape))
    perm = _axis_first(len(shape), ax)
    L, k = shape[ax], numel(index.shape)
    rest = tuple(shape[i] for i in perm[1:])
    r = numel(rest)
    gm = reshape(ctx, _permuted(ctx, nodes[0], perm), (k, r))
    ids = lib.reshape_1d(ctx, _safe_index(ctx, nodes[1], L, wrap), k)
    acc = lib.get_rows_back(ctx, gm, ids, shape_only(ctx, (L, r)))
    return _finish(ctx, acc, (L,) + rest, _inverse(perm))


# ---------------------------------------------------------------- gather
def _infer_gather(x, index, axis):
    if x.ndim == 0:
        raise ShapeError(f"gather: cannot gather from a 0-d tensor (shape {x.shape})")
    ax = norm_axis("gather", axis, x.ndim)
    if index.ndim != x.ndim:
        raise ShapeError(f"gather: index must have as many dimensions as the input: "
                         f"input {x.shape}, index {index.shape}")
    for i, (s, t) in enumerate(zip(x.shape, index.shape)):
        if i != ax and s != t:
            raise ShapeError(f"gather: index {index.shape} and input {x.shape} differ in dimension {i} "
                             f"(only dimension {axis} may differ)")
    if x.device is not index.device:
        raise DeviceError("gather: input and index are on different devices")
    if numel(x.shape) > _EXACT_F32 or numel(index.shape) > _EXACT_F32:
        raise ValueError(f"gather: tensors with more than {_EXACT_F32} elements are not supported "
                         f"(input {x.shape}, index {index.shape})")
    _check_index("gather", index, x.shape[ax], what=f" (dimension {axis} of {x.shape})")
    return tuple(index.shape), _out_dtype(x)


def _flat_gather_index(ctx, index_node, index_shape, axis, L):
    """Flat element numbers into the axis-last copy of the input, one per index element."""
    nd = len(index_shape)
    perm = _axis_last(nd, axis)
    k = index_shape[axis]
    b = numel(index_shape) // k
    ip = reshape(ctx, _permuted(ctx, index_node, perm), (b, k))
    offsets = lib.reshape_2d(ctx, lib.arange(ctx, 0.0, float(b * L), float(L)), 1, b)
    flat = _safe_index(ctx, ip, L, offsets=offsets)
    return lib.reshape_1d(ctx, flat, b * k), perm, b


def _gather_backward(g, n):
    x, index = n.inputs
    return _grad_as(x, op.gather_backward(_grad_f32(g), index, shape=x.shape, axis=n.params["axis"])), None


# torch's gather saves its input too (not only the index): an in-place write to it raises at backward.
@define("gather", saves=(0, 1), infer=_infer_gather, backward=_gather_backward)
def _gather(ctx, nodes, inputs, out, axis):
    """out[..., j, ...] = x[..., index[..., j, ...], ...] along ``axis`` (PyTorch gather)."""
    x, index = inputs
    if numel(out.shape) == 0:
        return _zeros_like_shape(ctx, out.shape, out.dtype, nodes[0])
    ax = norm_axis("gather", axis, x.ndim)
    L = x.shape[ax]
    flat, perm, b = _flat_gather_index(ctx, nodes[1], index.shape, ax, L)
    src = reshape(ctx, _permuted(ctx, nodes[0], perm), (b * L, 1))   # every element its own row
    picked = lib.get_rows(ctx, src, flat)
    return _as_out(ctx, _finish(ctx, picked, tuple(index.shape[i] for i in perm), _inverse(perm)), out)


def _infer_gather_backward(g, index, shape, axis):
    same_float("gather_backward", g)
    if g.shape != index.shape:
        raise ValueError(f"gather_backward: gradient {g.shape} and index {index.shape} differ")
    return tuple(shape), float32


@define("gather_backward", saves=(1,), infer=_infer_gather_backward,
        backward=lambda g, n: (op.gather(g, n.inputs[1], axis=n.params["axis"]), None))
def _gather_backward_fwd(ctx, nodes, inputs, out, shape, axis):
    """Zeros of ``shape`` with each gradient element added at its gathered position."""
    g, index = inputs
    shape = tuple(shape)
    if numel(g.shape) == 0 or numel(shape) == 0:
        return _zeros_like_shape(ctx, shape, float32, nodes[0])
    ax = norm_axis("gather_backward", axis, len(shape))
    L = shape[ax]
    flat, perm, b = _flat_gather_index(ctx, nodes[1], index.shape, ax, L)
    gm = reshape(ctx, _permuted(ctx, nodes[0], perm), (numel(g.shape), 1))
    acc = lib.get_rows_back(ctx, gm, flat, shape_only(ctx, (b * L, 1)))
    return _finish(ctx, acc, tuple(shape[i] for i in perm), _inverse(perm))


# ---------------------------------------------------------------- embedding
def _infer_embedding(weight, index):
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, dim), got {weight.shape}")
    if index.ndim > 3:
        raise ValueError(f"embedding: index may have at most 3 dimensions, got {index.shape}")
    if weight.device is not index.device:
        raise DeviceError("embedding: weight and index are on different devices")
    _check_index("embedding", index, weight.shape[0], what=f" (weight {weight.shape})")
    shape = tuple(index.shape) + (weight.shape[1],)
    check_ndim("embedding", shape)
    return shape, _out_dtype(weight)


def _embedding_backward(g, n):
    weight, index = n.inputs
    k = numel(index.shape)
    g = _grad_f32(g)
    g2 = op.reshape(g, shape=(k, weight.shape[1])) if g.ndim != 2 else g
    i1 = op.reshape(index, shape=(k,)) if index.ndim != 1 else index
    return _grad_as(weight, op.index_select_backward(g2, i1, shape=weight.shape, axis=0)), None


@define("embedding", saves=(1,), infer=_infer_embedding, backward=_embedding_backward)
def _embedding(ctx, nodes, inputs, out):
    """weight[index]: one row of ``weight`` per index element (ggml_get_rows)."""
    weight, index = inputs
    if numel(out.shape) == 0:
        return _zeros_like_shape(ctx, out.shape, out.dtype, nodes[0])
    k = numel(index.shape)
    ids = lib.reshape_1d(ctx, _safe_index(ctx, nodes[1], weight.shape[0]), k)
    rows = _as_out(ctx, lib.get_rows(ctx, nodes[0], ids), out)
    return rows if index.ndim == 1 else owned(ctx, rows, out.shape)
