"""Reductions over all or given axes, with keepdim."""
from __future__ import annotations

from .._ggml import consts, lib
from ..engine import float32, int32
from . import fast_math
from .build import expand, owned, permute, repeat_one, reshape, shape_only, sum_to
from .elementwise import FLT_MAX, _cmp_from_diff, branch_parts, is_number01, select_node
from .decl import expose
from .registry import define, float_compute, op, same_float
from .shapes import norm_axes, norm_axis, numel
from ..engine.errors import DTypeError, ShapeError

_SURFACES = ("method", "function")


# ---------------------------------------------------------------- public arguments of the reductions
def axis_of(axis, dim):
    """torch's ``dim`` or NumPy's ``axis`` (not both); a list of axes as a tuple."""
    if dim is not None:
        if axis is not None:
            raise TypeError("pass either axis or dim, not both")
        axis = dim
    return tuple(axis) if isinstance(axis, list) else axis


def keepdim_of(keepdim, keepdims):
    """torch's ``keepdim=`` or NumPy's ``keepdims=`` (not both)."""
    if keepdims is None:
        return keepdim
    if keepdim:
        raise TypeError("pass either keepdim or keepdims, not both")
    return keepdims


def correction_of(correction, unbiased) -> int | float:
    """var/std's ``correction`` (default 1, Bessel's) or torch's older ``unbiased`` (not both)."""
    if correction is not None and unbiased is not None:
        raise TypeError("var/std: pass either correction or unbiased, not both")
    if unbiased is not None:
        return 1 if unbiased else 0
    return 1 if correction is None else correction


def axis_first_args(axis=None, keepdim=False, dim=None, *, keepdims=None) -> dict:
    """sum/mean's public arguments: NumPy's order (axis first), torch's ``dim`` as a keyword."""
    if dim is None and keepdims is None and type(axis) is not list:   # the usual call: no helper calls
        return {"axis": axis, "keepdim": keepdim}
    return {"axis": axis_of(axis, dim), "keepdim": keepdim_of(keepdim, keepdims)}


def dim_first_args(dim=None, keepdim=False, *, axis=None, keepdims=None) -> dict:
    """amax/amin/argmax/argmin/logsumexp's public arguments: torch's order (dim first)."""
    if axis is None and keepdims is None and type(dim) is not list:   # the usual call: no helper calls
        return {"axis": dim, "keepdim": keepdim}
    return {"axis": axis_of(axis, dim), "keepdim": keepdim_of(keepdim, keepdims)}


def var_args(dim=None, *, correction=None, keepdim=False, unbiased=None, axis=None, keepdims=None) -> dict:
    """var's public arguments (torch.var's, with NumPy's ``axis``/``keepdims`` spellings)."""
    return {"axis": axis_of(axis, dim), "correction": correction_of(correction, unbiased),
            "keepdim": keepdim_of(keepdim, keepdims)}


def _axes_of(opname: str, axis, ndim: int) -> tuple:
    """Normalized reduction axes; a 0-d tensor accepts axis 0/-1 (as torch) and reduces nothing."""
    axes = norm_axes(opname, axis, ndim)
    return axes if ndim else ()


def _kept(shape: tuple, axes: tuple) -> tuple:
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def sum_kept(ctx, node, shape: tuple, kept: tuple):
    """Sum a contiguous ``node`` down to ``kept`` (same ndim, 1 on reduced axes) as a kept-shape node.
    Trailing-axis reductions run on ggml_sum_rows: ggml_repeat_back (sum_to) is ~10x slower there."""
    nd = len(shape)
    t = nd
    while t > 0 and kept[t - 1] == 1:
        t -= 1
    if t == nd or any(kept[i] != shape[i] for i in range(t)):
        r = sum_to(ctx, node, shape, kept)
        return reshape(ctx, r, kept) if r is not node and all(k == 1 for k in kept) else r
    r, k = numel(shape[t:]), numel(shape[:t])
    return reshape(ctx, lib.sum_rows(ctx, lib.reshape_2d(ctx, node, r, k)), kept)


def _reduced_shape(shape, axes, keepdim):
    return _kept(shape, axes) if keepdim else tuple(s for i, s in enumerate(shape) if i not in axes)


def _infer_reduce(name):
    policy = float_compute if name == "logsumexp" else same_float   # torch: logsumexp of int32/bool is float32
    def infer(a, axis=None, keepdim=False):
        if axis is None and keepdim is False and a.dtype is float32:
            return (), float32  # the whole-tensor reduction of a float32 tensor: every check below passes
        if name == "mean" and a.dtype is int32:   # torch's rule and words
            raise DTypeError("mean(): could not infer output dtype. Input dtype must be either a floating "
                            "point or complex dtype. Got: int32 (cast with .float())")
        policy(name, a)
        if not isinstance(keepdim, bool):
            raise TypeError(f"{name}: keepdim must be a bool, got {keepdim!r}")
        axes = _axes_of(name, axis, a.ndim)
        shape = _reduced_shape(a.shape, axes, keepdim)
        return shape, float32
    return infer


def _sum_node(ctx, node, shape, axes, out_shape):
    r = sum_kept(ctx, node, shape, _kept(shape, axes)) if axes else node
    if r == node:  # nothing summed (no axes, or only size-1 axes): copy the input
        return lib.cont(ctx, reshape(ctx, node, out_shape))
    return owned(ctx, r, out_shape)


def _grad_expand(g, n):
    """Gradient of a reduction broadcast back to the input's shape."""
    x = n.inputs[0]
    axes = _axes_of("", n.params.get("axis"), x.ndim)
    return op.expand_as(op.reshape(g, shape=_kept(x.shape, axes)), x)


@define("sum", saves=(), infer=_infer_reduce("sum"), backward=_grad_expand,
        expose=expose("sum", *_SURFACES, args=axis_first_args, host_int32=True,
                      doc="Sum over all or given axes; ``keepdims`` is NumPy's spelling of ``keepdim``. An int32 "
                      "tensor sums exactly (on the host; a sum outside int32's range raises).",
                      example=">>> gg.sum(gg.ones(2, 3), axis=0, keepdims=True).shape\n(1, 3)"))
def _sum(ctx, nodes, inputs, out, axis=None, keepdim=False):
    a = inputs[0]
    return _sum_node(ctx, nodes[0], a.shape, _axes_of("sum", axis, a.ndim), out.shape)


def _mean_backward(g, n):
    x = n.inputs[0]
    axes = _axes_of("", n.params.get("axis"), x.ndim)
    cnt = numel(tuple(x.shape[i] for i in axes))
    return op.scale(_grad_expand(g, n), c=1.0 / max(cnt, 1))


@define("mean", saves=(), infer=_infer_reduce("mean"), backward=_mean_backward,
        expose=expose("mean", *_SURFACES, args=axis_first_args,
                      doc="Mean over all or given axes (NaN over no elements, as torch).",
                      example=">>> gg.mean(gg.tensor([[1.0, 3.0]]), dim=1).tolist()\n[2.0]"))
def _mean(ctx, nodes, inputs, out, axis=None, keepdim=False):
    a = inputs[0]
    axes = _axes_of("mean", axis, a.ndim)
    cnt = numel(tuple(a.shape[i] for i in axes))
    if cnt == 0:  # the mean of nothing is NaN, as in NumPy and PyTorch
        return lib.fill(ctx, shape_only(ctx, out.shape), float("nan"))
    s = sum_kept(ctx, nodes[0], a.shape, _kept(a.shape, axes)) if axes else nodes[0]
    return owned(ctx, lib.scale(ctx, s, 1.0 / cnt), out.shape)


def _infer_expand_as(a, like):
    if len(a.shape) > len(like.shape) or any(s not in (1, d) for s, d in zip(a.shape[::-1], like.shape[::-1])):
        raise ShapeError(f"expand_as: shape {a.shape} cannot be broadcast to {like.shape}")
    return like.shape, a.dtype


@define("expand_as", saves=(), infer=_infer_expand_as,
        backward=lambda g, n: (op.sum_to_shape(g, shape=n.inputs[0].shape), None))
def _expand_as(ctx, nodes, inputs, out):
    a = inputs[0]
    src = nodes[0]
    if numel(a.shape) == 1 and numel(out.shape) > 1:
        r = repeat_one(ctx, reshape(ctx, src, ()), out.shape)
        if r is not None:
            return r
    if len(a.shape) != len(out.shape):
        src = reshape(ctx, src, (1,) * (len(out.shape) - len(a.shape)) + tuple(a.shape))
    r = expand(ctx, src, out.shape if a.shape == out.shape else (0,), out.shape)
    return lib.cont(ctx, r) if r is src or r is nodes[0] else r


def _infer_sum_to(a, shape):
    shape = tuple(shape)
    if len(shape) > a.ndim or any(s not in (1, d) for s, d in zip(shape[::-1], a.shape[::-1])):
        raise ShapeError(f"sum_to_shape: cannot reduce {a.shape} to {shape}")
    return shape, a.dtype


@define("sum_to_shape", saves=(), infer=_infer_sum_to, backward=lambda g, n: op.expand_as(g, n.inputs[0]))
def _sum_to_shape(ctx, nodes, inputs, out, shape):
    a = inputs[0]
    full = (1,) * (a.ndim - len(shape)) + tuple(shape)
    if tuple(a.shape) == full:  # nothing to sum: copy the input
        return lib.cont(ctx, reshape(ctx, nodes[0], tuple(shape)))
    return owned(ctx, sum_to(ctx, nodes[0], a.shape, full), tuple(shape))


# ---------------------------------------------------------------- max/min, argmax/argmin, var, logsumexp
_MAX_EXACT_ROW = 2 ** 22   # argmax ranks (up to 3x the row length) run in float32: exact below 2^24


def _rows_last(ctx, node, shape: tuple, axes: tuple):
    """(node, R, K): ``node`` with the reduced ``axes`` moved last and flattened, as a contiguous
    ggml matrix of K rows of R elements (rows in the order of the kept axes)."""
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    perm = kept + tuple(axes)
    if perm != tuple(range(len(shape))):
        node = lib.cont(ctx, permute(ctx, node, perm))
    r = numel(tuple(shape[i] for i in axes))
    k = numel(tuple(shape[i] for i in kept))
    return lib.reshape_2d(ctx, node, r, k), r, k


def _row_max(ctx, mat, r: int, k: int):
    """Max of each row of a contiguous [K rows x R] matrix, as a [1, 1, K] node (exact, -inf safe)."""
    idx = lib.argmax(ctx, mat)                                   # I32 [K], any maximal position
    return lib.get_rows(ctx, lib.reshape_3d(ctx, mat, 1, r, k), lib.reshape_2d(ctx, idx, 1, k))


def _infer_extreme(name):
    def infer(a, axis=None, keepdim=False, nan_shares=False):
        if not isinstance(nan_shares, bool):
            raise TypeError(f"{name}: nan_shares must be a bool, got {nan_shares!r}")
        shape, dtype = _infer_reduce(name)(a, axis=axis, keepdim=keepdim)
        if numel(a.shape) == 0:
            raise ValueError(f"{name}: cannot reduce an empty tensor of shape {a.shape}")
        return shape, dtype
    return infer


def _extreme_backward(g, n):
    # Gradient to every maximal position, shared evenly between ties (torch.amax: a NaN extreme
    # matches nothing, so NaN everywhere). nan_shares: torch's max()/min() without dim, whose
    # NaN result shares the gradient between the NaN positions.
    kind = "max_all" if n.params.get("nan_shares") else "amax"
    return op.reduce_backward(g, n.inputs[0], n.output, kind=kind, axis=n.params.get("axis"))


def row_nan(ctx, mat):
    """0 for each row of a [K rows x R] matrix without NaN, NaN for a row with one, as a [1, K] node:
    sqrt of the row sum of (number01 - 1), i.e. sqrt(-count of NaN)."""
    return lib.sqrt(ctx, lib.sum_rows(ctx, lib.scale_bias(ctx, is_number01(ctx, mat), 1.0, -1.0)))


def _extreme_builder(name, negate: bool):
    def forward(ctx, nodes, inputs, out, axis=None, keepdim=False, nan_shares=False):
        a = inputs[0]
        x = lib.neg(ctx, nodes[0]) if negate else nodes[0]
        mat, r, k = _rows_last(ctx, x, a.shape, _axes_of(name, axis, a.ndim))
        # ggml_argmax skips NaN (its MAX drops it): a row holding one gives NaN, as torch. The NaN term is
        # -0.0 for other rows (x + -0.0 is x for every x; + 0.0 would turn a -0.0 extreme into 0.0, and
        # amin's negation then gives min([0.0, 3.0]) as -0.0: 1 / min was -inf, torch's +inf).
        nan_term = lib.neg(ctx, row_nan(ctx, mat))
        m = lib.add(ctx, lib.reshape_1d(ctx, _row_max(ctx, mat, r, k), k), lib.reshape_1d(ctx, nan_term, k))
        return lib.neg(ctx, reshape(ctx, m, out.shape)) if negate else owned(ctx, m, out.shape)
    return forward


define("amax", saves=(0,), infer=_infer_extreme("amax"), backward=_extreme_backward, save_output=True,
       doc="max over all or given axes (values only, like torch.amax)",
       expose=expose("amax", *_SURFACES, args=dim_first_args, host_int32=True,
                     doc="Max over all or given axes (values only); ties share the gradient evenly.",
                     example=">>> gg.amax(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=0).tolist()\n[7.0, 5.0]"),
       )(_extreme_builder("amax", False))
define("amin", saves=(0,), infer=_infer_extreme("amin"), backward=_extreme_backward, save_output=True,
       doc="min over all or given axes (values only, like torch.amin)",
       expose=expose("amin", *_SURFACES, args=dim_first_args, host_int32=True,
                     doc="Min over all or given axes (values only); ties share the gradient evenly.",
                     example=">>> gg.amin(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).tolist()\n[1.0, 2.0]"),
       )(_extreme_builder("amin", True))


# torch's max(dim)/min(dim) values route the gradient to the index it returns (the first
# extreme), not shared between ties like amax: a twin op that takes those indices as an input and
# saves only them, as torch (an in-place write to the input after max(dim) does not spoil backward).
def _infer_extreme_dim(a, indices, axis, keepdim=False, negate=False):
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"max/min: dim must be an int, got {axis!r}")
    shape, dtype = _infer_extreme("max" if not negate else "min")(a, axis=axis, keepdim=keepdim)
    if indices.dtype is not int32 or tuple(indices.shape) != tuple(shape):
        raise ValueError(f"extreme_dim: indices must be int32 of shape {shape}, got "
                         f"{indices.dtype.name} {indices.shape}")
    return shape, dtype


def _extreme_dim_backward(g, n):
    """g scattered to the saved indices along the axis (torch's value_selecting_reduction_backward)."""
    x, indices = n.inputs
    if x.ndim == 0:                      # 0-d: the value itself is the extreme
        return g, None
    ax = norm_axis("max", n.params["axis"], x.ndim)
    kept = _kept(x.shape, (ax,))
    if g.shape != kept:
        g, indices = op.reshape(g, shape=kept), op.reshape(indices, shape=kept)
    return op.gather_backward(g, indices, shape=x.shape, axis=ax), None


@define("extreme_dim", saves=(1,), infer=_infer_extreme_dim, backward=_extreme_dim_backward,
        doc="values of torch's max(dim) / min(dim) (negate=True) given its indices: gradient to those indices")
def _extreme_dim(ctx, nodes, inputs, out, axis, keepdim=False, negate=False):
    return _extreme_builder("extreme_dim", negate)(ctx, nodes[:1], inputs[:1], out, axis=axis, keepdim=keepdim)


def _first_extreme_key(ctx, mat, r: int, k: int):
    """Per row of a [K rows x R] matrix, a key whose unique maximum sits at torch's argmax: the first
    NaN if the row has one, else the first maximum. Maximal positions get rank r - i (1..r), NaNs
    2(r - i) + r (> r); the rest 0. ggml_argmax returns the LAST maximum, hence the ranks."""
    m = lib.reshape_2d(ctx, _row_max(ctx, mat, r, k), 1, k)
    is_max = lib.scale_bias(ctx, lib.step(ctx, lib.neg(ctx, lib.sub(ctx, mat, m))), -1.0, 1.0)   # 1 at NaN too
    rank = lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(r), 1.0), -1.0, float(r))   # r, r-1, ..., 1
    nan01 = lib.scale_bias(ctx, is_number01(ctx, mat), -1.0, 1.0)
    return lib.add(ctx, lib.mul(ctx, is_max, rank), lib.mul(ctx, nan01, lib.scale_bias(ctx, rank, 1.0, float(r))))


def _infer_arg(name):
    def infer(a, axis=None, keepdim=False):
        if a.dtype is not float32 and a.dtype is not int32:
            raise DTypeError(f"{name}: expected a float32 or int32 tensor, got {a.dtype.name}")
        if not isinstance(keepdim, bool):
            raise TypeError(f"{name}: keepdim must be a bool, got {keepdim!r}")
        if axis is not None and not (isinstance(axis, int) and not isinstance(axis, bool)):
            raise TypeError(f"{name}: axis must be an int or None, got {axis!r}")
        axes = _axes_of(name, axis, a.ndim)
        r = numel(tuple(a.shape[i] for i in axes))
        if numel(a.shape) == 0:
            raise ValueError(f"{name}: cannot reduce an empty tensor of shape {a.shape}")
        if r > _MAX_EXACT_ROW:
            raise ValueError(f"{name}: reducing {r} elements at once is not supported (at most {_MAX_EXACT_ROW})")
        if axis is None:
            return ((1,) * a.ndim if keepdim else ()), int32
        return _reduced_shape(a.shape, axes, keepdim), int32
    return infer


def _arg_builder(name, negate: bool):
    def forward(ctx, nodes, inputs, out, axis=None, keepdim=False):
        a = inputs[0]
        x = nodes[0] if a.dtype is float32 else lib.cast(ctx, nodes[0], consts.TYPE_F32)
        if negate:
            x = lib.neg(ctx, x)
        mat, r, k = _rows_last(ctx, x, a.shape, _axes_of(name, axis, a.ndim))
        first = lib.argmax(ctx, _first_extreme_key(ctx, mat, r, k))
        return owned(ctx, first, out.shape)
    return forward


define("argmax", infer=_infer_arg("argmax"), differentiable=False,
       doc="index of the first maximum along an axis (or of the flattened tensor); int32",
       expose=expose("argmax", *_SURFACES, args=dim_first_args, host_int32=True,
                     doc="Index (int32) of the first maximum along ``dim``, or in the flattened tensor.",
                     example=">>> gg.argmax(gg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1).tolist()\n[1, 0]"),
       )(_arg_builder("argmax", False))
define("argmin", infer=_infer_arg("argmin"), differentiable=False,
       doc="index of the first minimum along an axis (or of the flattened tensor); int32",
       expose=expose("argmin", *_SURFACES, args=dim_first_args, host_int32=True,
                     doc="Index (int32) of the first minimum along ``dim``, or in the flattened tensor.",
                     example=">>> gg.argmin(gg.tensor([3.0, 1.0, 1.0])).item()\n1"),
       )(_arg_builder("argmin", True))


def _infer_var(a, axis=None, correction=1, keepdim=False):
    shape, dtype = _infer_reduce("var")(a, axis=axis, keepdim=keepdim)
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        raise TypeError(f"var: correction must be a number, got {correction!r}")
    return shape, dtype


def _var_divisor(shape, axes, correction) -> float:
    d = numel(tuple(shape[i] for i in axes)) - correction
    return 1.0 / d if d > 0 else float("inf")   # torch: nan/inf when there are too few elements


def _var_backward(g, n):
    return op.reduce_backward(g, n.inputs[0], kind="var", axis=n.params.get("axis"),
                              correction=n.params.get("correction", 1))


@define("var", saves=(0,), infer=_infer_var, backward=_var_backward,
        expose=expose("var", *_SURFACES, args=var_args,
                      doc="Variance over all or given axes; ``correction`` defaults to 1 (Bessel's, as torch.var).",
                      example=">>> gg.var(gg.tensor([1.0, 3.0])).item()\n2.0"))
def _var(ctx, nodes, inputs, out, axis=None, correction=1, keepdim=False):
    """sum((x - mean)^2) / (N - correction) over all or given axes (torch.var; correction=1 default)."""
    a = inputs[0]
    axes = _axes_of("var", axis, a.ndim)
    kept = _kept(a.shape, axes)
    cnt = numel(tuple(a.shape[i] for i in axes))
    mean = lib.scale(ctx, sum_kept(ctx, nodes[0], a.shape, kept), 1.0 / max(cnt, 1))
    sq = lib.sqr(ctx, lib.sub(ctx, nodes[0], mean))
    v = lib.scale(ctx, sum_kept(ctx, sq, a.shape, kept), _var_divisor(a.shape, axes, correction))
    return owned(ctx, v, out.shape)


def logsumexp_parts(ctx, node, shape: tuple, axes: tuple):
    """(m, log(sum(exp(x - m))), softmax) over ``axes``: m and the log-sum in the kept shape
    (reduced axes as size 1), the softmax as K rows of the R reduced elements.

    m is the row max (argmax + gather). The log-sum comes from ggml_soft_max (vectorised exp):
    at the max position softmax is exactly exp(0)/sum, so log(sum) = -log(softmax[argmax]); a
    value >= 1/R, so the log is well conditioned. log_softmax uses (x - m) - logsum: subtracting
    m first keeps precision for large x. Rows whose max is ±inf give NaN here (see _logsumexp).
    """
    kept = _kept(shape, axes)
    mat, r, k = _rows_last(ctx, node, shape, axes)
    idx = lib.reshape_2d(ctx, lib.argmax(ctx, mat), 1, k)
    m = lib.get_rows(ctx, lib.reshape_3d(ctx, mat, 1, r, k), idx)
    p = lib.soft_max(ctx, mat)
    top = lib.get_rows(ctx, lib.reshape_3d(ctx, p, 1, r, k), idx)
    top = lib.reshape_1d(ctx, top, k)  # k rows of 1 element cost ggml a loop step each
    return reshape(ctx, m, kept), reshape(ctx, lib.neg(ctx, lib.log(ctx, top)), kept), p


def _logsumexp_backward(g, n):
    return op.reduce_backward(g, n.inputs[0], n.output, kind="logsumexp", axis=n.params.get("axis"))


def _infer_reduce_backward(g, x, *out, kind, axis=None, correction=1):
    same_float("reduce_backward", g, x, *out)
    kept = _kept(x.shape, _axes_of("reduce_backward", axis, x.ndim))
    if kind not in ("amax", "max_all", "logsumexp", "var"):
        raise ValueError(f"reduce_backward: unknown kind {kind!r}")
    if numel(g.shape) != numel(kept) or any(numel(o.shape) != numel(kept) for o in out):
        raise ValueError(f"reduce_backward: gradient {g.shape} does not match {x.shape} reduced over {axis}")
    return x.shape, float32


@define("reduce_backward", infer=_infer_reduce_backward, differentiable=False)
def _reduce_backward(ctx, nodes, inputs, out, kind, axis=None, correction=1):
    """Input gradients of amax/amin (ties share), logsumexp and var, each as one node group."""
    x = inputs[1]
    axes = _axes_of("reduce_backward", axis, x.ndim)
    kept = _kept(x.shape, axes)
    g = reshape(ctx, nodes[0], kept)
    nx = nodes[1]
    if kind == "var":
        cnt = numel(tuple(x.shape[i] for i in axes))
        mean = lib.scale(ctx, sum_kept(ctx, nx, x.shape, kept), 1.0 / max(cnt, 1))
        c = 2.0 * _var_divisor(x.shape, axes, correction)
        return lib.scale(ctx, lib.mul(ctx, lib.sub(ctx, nx, mean), g), c)
    d = lib.sub(ctx, nx, reshape(ctx, nodes[2], kept))
    if kind == "logsumexp":
        return lib.mul(ctx, fast_math.exp(ctx, d), g)
    # x == extreme with IEEE equality (inf == inf; a NaN extreme matches nothing: 0/0 = NaN gradients, as torch)
    hit = _cmp_from_diff(ctx, d, lib.add(ctx, nx, reshape(ctx, nodes[2], kept)), "eq")
    if kind == "max_all":   # a NaN result matches the NaN positions (torch's evenly_distribute_backward)
        nan_x = lib.scale_bias(ctx, is_number01(ctx, nx), -1.0, 1.0)
        nan_m = lib.scale_bias(ctx, is_number01(ctx, reshape(ctx, nodes[2], kept)), -1.0, 1.0)
        hit = lib.add(ctx, hit, lib.mul(ctx, nan_x, nan_m))
    count = sum_kept(ctx, hit, x.shape, kept)
    return lib.mul(ctx, hit, lib.div(ctx, g, count))


@define("logsumexp", saves=(0,), infer=_infer_extreme("logsumexp"), backward=_logsumexp_backward, save_output=True,
        promotes=True,
        expose=expose("logsumexp", *_SURFACES, args=dim_first_args,
                      doc="log(sum(exp(x))) over all or given axes, computed stably.",
                      example=">>> round(gg.logsumexp(gg.tensor([0.0, 0.0])).item(), 4)\n0.6931"))
def _logsumexp(ctx, nodes, inputs, out, axis=None, keepdim=False):
    """log(sum(exp(x))) over all or given axes, numerically stable."""
    a = inputs[0]
    axes = _axes_of("logsumexp", axis, a.ndim)
    m, logsum, _ = logsumexp_parts(ctx, nodes[0], a.shape, axes)
    # Rows whose max is ±inf: the result is that max (all -inf → -inf, any +inf → +inf), as torch.
    finite = lib.scale_bias(ctx, lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, m), 1.0, -FLT_MAX)), -1.0, 1.0)
    r = select_node(ctx, finite, branch_parts(ctx, lib.add(ctx, logsum, m)), branch_parts(ctx, m))
    # ggml_argmax skips NaN, so m can miss one: a row holding NaN gives NaN (torch).
    mat, _, k = _rows_last(ctx, nodes[0], a.shape, axes)
    r = lib.add(ctx, lib.reshape_1d(ctx, lib.cont(ctx, r), k), lib.reshape_1d(ctx, row_nan(ctx, mat), k))
    return owned(ctx, r, out.shape)
