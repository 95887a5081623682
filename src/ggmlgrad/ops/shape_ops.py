"""Shape ops: reshape, permute, broadcast_to, slice/slice_backward (the core of basic
indexing), slice_set (``t[key] = v``), concat (also stack), tile.

Results are contiguous copies, never aliases of their input. Slices are strided ggml
views made contiguous; a step along the innermost axis takes a first pass of its own,
because ggml views keep the innermost stride at one element. Empty results are built
from a 0-element view of an input: ggml's allocator aborts on 0-byte tensors it must
allocate itself."""
from __future__ import annotations

from .._ggml import consts, lib, node_type
from ..runtime import DeviceError   # ValueError and RuntimeError (torch's class for mixed devices)
from ..engine import float32
from .build import expand, permute, reshape, shape_only
from .registry import define, op, same_float
from .shapes import check_ndim, int_sizes, ne as _ne, norm_axis, numel
from ..engine.errors import DTypeError, IndexRangeError, ShapeError


def _resolve_shape(a, shape) -> tuple:
    shape = int_sizes("reshape", shape, "shape")
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        rest = numel(tuple(s for s in shape if s != -1))
        if rest == 0 or numel(a.shape) % rest:
            raise ShapeError(f"reshape: cannot reshape {a.shape} into {shape}")
        shape = tuple(numel(a.shape) // rest if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or numel(shape) != numel(a.shape):
        raise ShapeError(f"reshape: cannot reshape {a.shape} ({numel(a.shape)} elements) into {shape}")
    check_ndim("reshape", shape)
    return shape


@define("reshape", saves=(), infer=lambda a, shape: (_resolve_shape(a, shape), a.dtype),
        backward=lambda g, n: op.reshape(g, shape=n.inputs[0].shape))
def _reshape(ctx, nodes, inputs, out, shape):
    return lib.cont(ctx, reshape(ctx, nodes[0], out.shape))


def _infer_permute(a, axes):
    axes = int_sizes("permute", axes, "dims")
    nd = a.ndim
    norm = [x % nd if isinstance(x, int) and not isinstance(x, bool) and -nd <= x < nd else -1 for x in axes] if nd else []
    if len(axes) == nd and -1 in norm:          # torch: IndexError for a dim out of range (RuntimeError otherwise)
        bad = next(x for x, n in zip(axes, norm) if n == -1)
        raise IndexRangeError(f"permute: dim {bad} is out of range for a tensor with {nd} dimensions {a.shape}")
    if len(axes) != nd or sorted(norm) != list(range(nd)):
        raise ShapeError(f"permute: axes {axes} are not a permutation of the {nd} dimensions of {a.shape}")
    axes = tuple(norm)
    return tuple(a.shape[i] for i in axes), a.dtype


def _inverse(axes):
    inv = [0] * len(axes)
    for i, x in enumerate(axes):
        inv[x % len(axes)] = i
    return tuple(inv)


@define("permute", saves=(), infer=_infer_permute, backward=lambda g, n: op.permute(g, axes=_inverse(n.params["axes"])))
def _permute(ctx, nodes, inputs, out, axes):
    nd = inputs[0].ndim
    return lib.cont(ctx, permute(ctx, nodes[0], tuple(x % nd for x in axes)))


_ = float32


# ---------------------------------------------------------------- broadcast_to
def _infer_broadcast_to(a, shape):
    shape = int_sizes("broadcast_to", shape, "shape")
    check_ndim("broadcast_to", shape)
    if len(shape) < a.ndim:
        raise ShapeError(f"broadcast_to: cannot broadcast {a.shape} to {shape} (fewer dimensions)")
    lead = len(shape) - a.ndim
    out = []
    for i, s in enumerate(shape):
        src = a.shape[i - lead] if i >= lead else None
        if s == -1:
            if src is None:
                raise ValueError(f"broadcast_to: -1 is not allowed for the new leading dimension {i} "
                                 f"(broadcasting {a.shape} to {shape})")
            s = src
        if s < 0:
            raise ValueError(f"broadcast_to: negative size {s} in {shape}")
        if src is not None and src != s and src != 1:
            raise ShapeError(f"broadcast_to: cannot broadcast {a.shape} to {shape} "
                             f"(dimension {i}: {src} vs {s})")
        out.append(s)
    return tuple(out), a.dtype


@define("broadcast_to", saves=(), infer=_infer_broadcast_to,
        backward=lambda g, n: op.sum_to_shape(g, shape=n.inputs[0].shape))
def _broadcast_to(ctx, nodes, inputs, out, shape):
    """Repeat size-1 (and new leading) dimensions to ``out.shape``."""
    a = inputs[0]
    src = nodes[0]
    if numel(out.shape) == 0:
        return _zeros_of(ctx, out.shape, out.dtype, src)
    if a.shape == out.shape:
        return lib.cont(ctx, src)
    full = (1,) * (len(out.shape) - a.ndim) + tuple(a.shape)
    if full == out.shape:  # only new size-1 leading dims: a reshape of the input, so copy it (own memory)
        return lib.cont(ctx, reshape(ctx, src, out.shape))
    if full != a.shape:
        src = reshape(ctx, src, full)
    return expand(ctx, src, full, out.shape)


# ---------------------------------------------------------------- slice (basic indexing core)
def _sliced_shape(opname, in_shape, start, stop, step) -> tuple:
    nd = len(in_shape)
    if not (len(start) == len(stop) == len(step) == nd):
        raise ValueError(f"{opname}: need one start/stop/step per dimension of {in_shape}, "
                         f"got {start}, {stop}, {step}")
    shape = []
    for i, (b, e, s, d) in enumerate(zip(start, stop, step, in_shape)):
        if s < 1:
            raise ValueError(f"{opname}: step must be positive, got {s} on dimension {i} of {in_shape}")
        if not (0 <= b <= d and 0 <= e <= d):
            raise IndexError(f"{opname}: [{b}:{e}] is out of bounds for dimension {i} of size {d} ({in_shape})")
        shape.append(len(range(b, e, s)))
    return tuple(shape)


def _lens(start, stop, step) -> tuple:
    """The sliced shape of already validated start/stop/step (builder fast path)."""
    return tuple((e - b + s - 1) // s if e > b else 0 for b, e, s in zip(start, stop, step))


def _final_shape(opname, sliced: tuple, shape) -> tuple:
    """``shape``: the sliced shape with size-1 dims dropped or inserted (ints, None, newaxis)."""
    if shape is None or shape == sliced:
        return sliced
    shape = tuple(int(d) for d in shape)
    check_ndim(opname, shape)
    if tuple(d for d in shape if d != 1) != tuple(d for d in sliced if d != 1):
        raise ValueError(f"{opname}: result shape {shape} is not the sliced shape {sliced} with size-1 "
                         f"dimensions dropped or added")
    return shape


def _infer_slice(a, start, stop, step, shape=None):
    """``start/stop/step``: one normalised entry per axis (0 <= start, stop <= size, step >= 1)."""
    sliced = _sliced_shape("slice", a.shape, start, stop, step)
    return _final_shape("slice", sliced, shape), a.dtype


def _strides(shape: tuple) -> list[int]:
    st = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        st[i] = st[i + 1] * shape[i + 1]
    return st


def _inner_stage(shape, step, sliced) -> bool:
    """A step along the innermost axis needs its own pass (ggml views keep nb0 = element size)."""
    return bool(shape) and step[-1] != 1 and sliced[-1] > 1


def _view_layout(shape, start, step, sliced, es):
    """(ne, nb, offset) of the strided view ``x[start::step]`` (inner step 1, or unused)."""
    st = _strides(shape)
    nd = len(shape)
    ne = list(reversed(sliced)) + [1] * (4 - nd)
    nb = [es, 0, 0, 0]
    for k in range(1, 4):
        if k < nd:
            nb[k] = st[nd - 1 - k] * step[nd - 1 - k] * es
        else:   # padded dims: size 1, stride past the previous dim
            nb[k] = nb[k - 1] * max(ne[k - 1], 1)
    offset = sum(b * s for b, s in zip(start, st)) * es if numel(sliced) else 0
    return ne, nb, offset


def _contiguous_block(shape, start, step, sliced):
    """Element offset of the slice when it is one contiguous run of memory, else None."""
    k = len(shape) - 1
    while k >= 0 and start[k] == 0 and sliced[k] == shape[k]:   # trailing full axes
        k -= 1
    if k >= 0 and step[k] != 1 and sliced[k] > 1:
        return None
    if any(n != 1 for n in sliced[:k]):
        return None
    offset, stride = 0, 1
    for i in range(len(shape) - 1, -1, -1):
        offset += start[i] * stride
        stride *= shape[i]
    return offset


def _cont_as(ctx, node, shape):
    """One copy: a contiguous non-view node of NumPy ``shape`` (same element count)."""
    n = _ne(shape)
    return lib.cont_4d(ctx, node, n[0], n[1], n[2], n[3])


def _slice_view(ctx, node, in_shape, start, step, sliced, final, es):
    """Contiguous ``x[start::step]`` (stops implied by ``sliced``) laid out as ``final``."""
    shape, start, step = tuple(in_shape), tuple(start), tuple(step)
    if not shape:                                   # 0-d input: only size-1 dims can be added
        return _cont_as(ctx, node, final)
    if numel(sliced) == 0:
        return empty_node(ctx, node, final, node_type(node))
    block = _contiguous_block(shape, start, step, sliced)
    if block is not None:   # x[i], x[a:b], x[i, a:b], ...: one run of memory (cheapest view)
        n = _ne(final)
        return lib.cont_4d(ctx, lib.view_1d(ctx, node, numel(sliced), block * es), n[0], n[1], n[2], n[3])
    if _inner_stage(shape, step, sliced):
        rows, L, n = numel(shape[:-1]), shape[-1], sliced[-1]
        v = lib.view_3d(ctx, node, 1, n, rows, step[-1] * es, L * es, start[-1] * es)
        node = lib.cont(ctx, v)
        shape = shape[:-1] + (n,)
        start, step = start[:-1] + (0,), step[:-1] + (1,)
    ne, nb, offset = _view_layout(shape, start, step, sliced, es)
    v = lib.view_4d(ctx, node, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset)
    return _cont_as(ctx, v, final)


@define("slice", saves=(), infer=_infer_slice,
        backward=lambda g, n: op.slice_backward(g, shape=n.inputs[0].shape, start=n.params["start"],
                                                stop=n.params["stop"], step=n.params["step"]))
def _slice(ctx, nodes, inputs, out, start, stop, step, shape=None):
    """x[b0:e0:s0, b1:e1:s1, ...] as strided ggml views made contiguous, laid out as ``out.shape``
    (so ``x[i]`` and ``x[None, ...]`` need no separate reshape)."""
    a = inputs[0]
    sliced = _lens(start, stop, step)
    return _slice_view(ctx, nodes[0], a.shape, start, step, sliced, tuple(out.shape), a.dtype.itemsize)


def _infer_slice_backward(g, shape, start, stop, step):
    same_float("slice_backward", g)
    shape = tuple(shape)
    sliced = _sliced_shape("slice_backward", shape, start, stop, step)
    _final_shape("slice_backward", sliced, g.shape)
    return shape, g.dtype


def _zeros(ctx, shape):
    """Zeros of a NON-EMPTY ``shape`` (for empty results use :func:`empty_node`)."""
    return lib.fill(ctx, shape_only(ctx, shape), 0.0)


def empty_node(ctx, src, shape, ggml_type):
    """An op output with no elements, made from a 0-element view of the input node ``src``.

    Not from a data-less leaf: the scheduler would have to allocate a 0-byte tensor, which
    leaves it with a NULL data pointer and trips ggml_backend_tensor_alloc's assert (abort).
    """
    n = _ne(shape)
    es = lib.type_size(node_type(src))
    v = lib.view_4d(ctx, src, n[0], n[1], n[2], n[3], es * max(n[0], 1), es * max(n[0] * n[1], 1),
                    es * max(n[0] * n[1] * n[2], 1), 0)
    if node_type(src) == ggml_type:
        return lib.cont(ctx, v)
    return lib.cast(ctx, v, ggml_type)


@define("slice_backward", saves=(), infer=_infer_slice_backward,
        backward=lambda g, n: op.slice(g, start=n.params["start"], stop=n.params["stop"], step=n.params["step"],
                                       shape=n.inputs[0].shape))
def _slice_backward(ctx, nodes, inputs, out, shape, start, stop, step):
    """Zeros of ``shape`` with the gradient added at the slice's positions (ggml_acc)."""
    g = inputs[0]
    es = g.dtype.itemsize
    shape, start, step = tuple(shape), tuple(start), tuple(step)
    sliced = _lens(start, stop, step)
    if numel(sliced) == 0:
        return _zeros_of(ctx, shape, g.dtype, nodes[0])
    if not shape:
        return lib.cont(ctx, nodes[0])
    src = reshape(ctx, nodes[0], sliced)           # g is contiguous: a free relabelling
    inner = _inner_stage(shape, step, sliced)
    mid = shape[:-1] + (sliced[-1],) if inner else shape
    mstart = start[:-1] + (0,) if inner else start
    mstep = step[:-1] + (1,) if inner else step
    _, nb, offset = _view_layout(mid, mstart, mstep, sliced, es)
    node = lib.acc(ctx, _zeros(ctx, mid), src, nb[1], nb[2], nb[3], offset)
    if inner:
        rows, L, n = numel(shape[:-1]), shape[-1], sliced[-1]
        src = lib.reshape_3d(ctx, node, 1, n, rows)
        node = lib.acc(ctx, _zeros(ctx, shape), src, step[-1] * es, L * es, rows * L * es, start[-1] * es)
    return node


# ---------------------------------------------------------------- concat / stack
MAX_CONCAT_INPUTS = 32   # one op builder may create ~96 ggml tensors (engine headroom); gg.cat groups


def _infer_concat(*xs, axis, stack=False):
    name = "stack" if stack else "concat"
    if not xs:
        raise ValueError(f"{name}: expected a non-empty sequence of tensors")
    if len(xs) > MAX_CONCAT_INPUTS:
        raise ValueError(f"{name}: at most {MAX_CONCAT_INPUTS} tensors per op, got {len(xs)} "
                         f"(gg.cat / gg.stack group longer lists)")
    first = xs[0]
    if first.ndim == 0 and not stack:
        raise ShapeError("concat: zero-dimensional tensors cannot be concatenated (use stack)")
    ax = norm_axis(name, axis, first.ndim + (1 if stack else 0))
    for x in xs[1:]:
        if x.device is not first.device:
            raise DeviceError(f"{name}: tensors are on different devices ({first.device.name} and {x.device.name})")
        if x.dtype is not first.dtype:
            raise DTypeError(f"{name}: dtypes differ ({first.dtype.name} and {x.dtype.name})")
        if stack and x.shape != first.shape:
            raise ShapeError(f"stack: all tensors must have the same shape, got "
                             f"{', '.join(str(y.shape) for y in xs)}")
        if x.ndim != first.ndim or any(s != t for i, (s, t) in enumerate(zip(x.shape, first.shape)) if i != ax):
            raise ShapeError(f"concat: shapes {', '.join(str(y.shape) for y in xs)} differ outside "
                             f"dimension {axis}")
    if stack:
        shape = first.shape[:ax] + (len(xs),) + first.shape[ax:]
        check_ndim("stack", shape)
        return shape, first.dtype
    size = sum(x.shape[ax] for x in xs)
    return first.shape[:ax] + (size,) + first.shape[ax + 1:], first.dtype


def _concat_backward(g, n):
    stack = n.params.get("stack", False)
    ax = norm_axis("concat", n.params["axis"], g.ndim)
    grads, pos = [], 0
    for x in n.inputs:
        k = 1 if stack else x.shape[ax]
        if x.requires_grad:
            start = tuple(pos if i == ax else 0 for i in range(g.ndim))
            stop = tuple(pos + k if i == ax else s for i, s in enumerate(g.shape))
            grads.append(op.slice(g, start=start, stop=stop, step=(1,) * g.ndim, shape=x.shape))
        else:
            grads.append(None)
        pos += k
    return tuple(grads)


@define("concat", saves=(), infer=_infer_concat, backward=_concat_backward)
def _concat(ctx, nodes, inputs, out, axis, stack=False):
    """Join along ``axis`` (``stack=True``: along a new axis). ggml_concat joins two at a
    time: pairs are joined level by level (a balanced tree, not a growing chain)."""
    ax = norm_axis("concat", axis, out.ndim)
    dim = out.ndim - 1 - ax
    if numel(out.shape) == 0:   # no 0-byte intermediates (the scheduler cannot allocate them)
        return empty_node(ctx, nodes[0], out.shape, out.dtype.ggml_type)
    if stack:   # each input viewed with a size-1 dim at `ax` (contiguous: a free relabelling)
        one = out.shape[:ax] + (1,) + out.shape[ax + 1:]
        nodes = [reshape(ctx, nd, one) for nd in nodes]
        parts = list(nodes)
    else:
        parts = [nd for nd, x in zip(nodes, inputs) if x.shape[ax] > 0] or [nodes[0]]
    if len(parts) == 1:
        return _cont_as(ctx, parts[0], out.shape)
    while len(parts) > 1:
        joined = [lib.concat(ctx, parts[i], parts[i + 1], dim) for i in range(0, len(parts) - 1, 2)]
        parts = joined + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


# ---------------------------------------------------------------- slice_set (t[key] = v)
def _infer_slice_set(x, *v, start, stop, step, fill=None):
    name = "slice_set"
    if x.dtype.name not in ("float32", "int32", "bool", "float16", "bfloat16"):
        raise TypeError(f"{name}: only float32, float16, bfloat16, int32 and bool tensors can be assigned into, "
                        f"got {x.dtype.name} (convert with .to(...) first)")
    sliced = _sliced_shape(name, x.shape, start, stop, step)
    if len(v) > 1 or (not v and fill is None) or (v and fill is not None):
        raise ValueError(f"{name}: give exactly one of a value tensor or `fill`")
    if v:
        if v[0].shape != sliced:
            raise ShapeError(f"{name}: value shape {v[0].shape} does not match the slice shape {sliced} of {x.shape}")
        if v[0].dtype is not x.dtype:
            raise DTypeError(f"{name}: value dtype {v[0].dtype.name} differs from {x.dtype.name}")
        if v[0].device is not x.device:
            raise DeviceError(f"{name}: tensors are on different devices")
    elif isinstance(fill, bool) or not isinstance(fill, (int, float)):
        raise TypeError(f"{name}: fill must be a real number, got {fill!r}")
    return x.shape, x.dtype


def _slice_set_backward(g, n):
    p = n.params
    key = dict(start=p["start"], stop=p["stop"], step=p["step"])
    gx = op.slice_set(g, fill=0.0, **key) if n.inputs[0].requires_grad else None
    if len(n.inputs) == 1:
        return gx
    gv = op.slice(g, **key) if n.inputs[1].requires_grad else None
    return gx, gv


@define("slice_set", saves=(), infer=_infer_slice_set, backward=_slice_set_backward)
def _slice_set(ctx, nodes, inputs, out, start, stop, step, fill=None):
    """A copy of ``x`` with ``x[start:stop:step]`` replaced by ``v`` (or the constant ``fill``), via ggml_set."""
    x = inputs[0]
    shape, start, step = tuple(x.shape), tuple(start), tuple(step)
    sliced = _lens(start, stop, step)
    if numel(sliced) == 0:
        return lib.cont(ctx, nodes[0])
    if x.dtype.name in ("float16", "bfloat16"):
        # ggml_set has no float16/bfloat16 kernel: set in float32 (exact both ways) and cast back
        f32 = [lib.cast(ctx, nd, consts.TYPE_F32) for nd in nodes]
        return lib.cast(ctx, _set_region(ctx, f32, shape, start, stop, step, sliced, fill, "float32", 4),
                        x.dtype.ggml_type)
    return _set_region(ctx, nodes, shape, start, stop, step, sliced, fill, x.dtype.name, x.dtype.itemsize)


def _set_region(ctx, nodes, shape, start, stop, step, sliced, fill, dtype_name: str, es: int):
    """``nodes[0]`` with the region ``start:stop:step`` replaced by ``nodes[1]`` or ``fill`` (ggml_set)."""
    if len(nodes) > 1:
        src = reshape(ctx, nodes[1], sliced)
    else:
        src = lib.fill(ctx, shape_only(ctx, sliced), float(fill) if dtype_name != "bool" else float(fill != 0))
        if dtype_name == "int32":     # bool: float32 0/1 storage
            src = lib.cast(ctx, src, consts.TYPE_I32)
    if not shape:
        return lib.cont(ctx, src)
    if not _inner_stage(shape, step, sliced):
        _, nb, offset = _view_layout(shape, start, step, sliced, es)
        return lib.set(ctx, nodes[0], src, nb[1], nb[2], nb[3], offset)
    # Inner step: set the strided columns in a copy of the selected rows, then set those rows.
    L, n = shape[-1], sliced[-1]
    mid = sliced[:-1] + (L,)
    ostart, ostep = start[:-1] + (0,), step[:-1] + (1,)
    ne, nb, offset = _view_layout(shape, ostart, ostep, mid, es)
    rows_view = lib.view_4d(ctx, nodes[0], ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset)
    rows = numel(mid[:-1])
    block = lib.set(ctx, lib.cont(ctx, rows_view), lib.reshape_3d(ctx, src, 1, n, rows),
                    step[-1] * es, L * es, rows * L * es, start[-1] * es)
    return lib.set(ctx, nodes[0], block, nb[1], nb[2], nb[3], offset)


# ---------------------------------------------------------------- tile (Tensor.repeat / np.tile)
def _infer_tile(a, reps):
    reps = int_sizes("tile", reps, "reps")
    if len(reps) < a.ndim:
        raise ShapeError(f"tile: need at least one repeat count per dimension of {a.shape}, got {reps}")
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: repeat counts must be non-negative, got {reps}")   # torch: RuntimeError
    full = (1,) * (len(reps) - a.ndim) + tuple(a.shape)
    shape = tuple(s * r for s, r in zip(full, reps))
    check_ndim("tile", shape)
    return shape, a.dtype


def _tile_padded(a_shape, reps):
    return (1,) * (len(reps) - len(a_shape)) + tuple(a_shape)


@define("tile", saves=(), infer=_infer_tile,
        backward=lambda g, n: op.tile_backward(g, shape=n.inputs[0].shape, reps=n.params["reps"]))
def _tile(ctx, nodes, inputs, out, reps):
    """The whole tensor repeated ``reps[i]`` times along each dim (ggml_repeat tiles)."""
    full = _tile_padded(inputs[0].shape, reps)
    if numel(out.shape) == 0 or full == out.shape:
        return _cont_as(ctx, nodes[0], out.shape) if numel(out.shape) else _zeros_of(ctx, out.shape, out.dtype, nodes[0])
    n = _ne(out.shape)
    return lib.repeat_4d(ctx, reshape(ctx, nodes[0], full), n[0], n[1], n[2], n[3])


def _zeros_of(ctx, shape, dtype, src):
    """Zeros of ``shape`` and ``dtype``; ``src`` (an input node) backs an empty result."""
    if numel(shape) == 0:
        return empty_node(ctx, src, shape, dtype.ggml_type)
    z = _zeros(ctx, shape)
    return lib.cast(ctx, z, dtype.ggml_type) if dtype.name != "float32" else z


def _infer_tile_backward(g, shape, reps):
    same_float("tile_backward", g)
    shape = tuple(shape)
    if _infer_tile(_Shape(shape, g.dtype), reps)[0] != g.shape:
        raise ValueError(f"tile_backward: gradient {g.shape} is not {shape} tiled {reps}")
    return shape, g.dtype


class _Shape:
    """Just enough of a tensor for shape validators."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)


@define("tile_backward", saves=(), infer=_infer_tile_backward,
        backward=lambda g, n: op.tile(g, reps=n.params["reps"]))
def _tile_backward(ctx, nodes, inputs, out, shape, reps):
    """Sum of the tiles (ggml_repeat_back)."""
    full = _tile_padded(shape, reps)
    if numel(full) == 0 or numel(inputs[0].shape) == 0:
        return _zeros_of(ctx, tuple(shape), inputs[0].dtype, nodes[0])
    if full == inputs[0].shape:
        return _cont_as(ctx, nodes[0], tuple(shape))
    r = lib.repeat_back(ctx, nodes[0], shape_only(ctx, full))
    return _cont_as(ctx, r, tuple(shape))
