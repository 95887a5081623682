"""Pooling, constant padding and resampling matrices as ggml graph nodes (NCHW, torch's semantics).

- ``max_pool2d``: ggml's one-pass ``pool_2d``/``pool_2d_back`` where their geometry is torch's (no
  dilation, no ceil_mode window past the padding), with torch's NaN and -inf rules restored around
  them (ggml's max drops NaN and starts from float32's lowest value): a NaN flag pool in the
  forward, a second ``pool_2d_back`` pass for windows holding NaN (torch: the last NaN gets the
  gradient) or only -inf (the first element). Otherwise the windows are copied into rows by
  ``ggml_im2col`` (threaded over channels; stride, dilation and ceil_mode's extra windows are its
  geometry), reduced by ``argmax`` + ``get_rows`` plus a NaN term per row as ``amax`` does, and the
  gradient goes back through ``ggml_im2col_back`` (col2im). Padding is -inf (never taken).
- ``avg_pool2d``: ggml's ``pool_2d``/``pool_2d_back`` (AVG) where torch's divisor is kH*kW
  (``count_include_pad``, no ceil_mode overhang, no ``divisor_override``); else the window rows,
  zero padding and torch's divisors counted by pooling a plane of ones.
- ``pad_constant``: ``ggml_pad_ext`` (zeros) plus the fill value on the border.
- ``resample_matrix``: the (out, in) matrix of nearest/linear interpolation or adaptive average
  pooling along one axis, built on the device from ``arange``; interpolation is then two products.
"""
from __future__ import annotations

import math

from .._ggml import consts, lib
from ..engine import float32, int32
from .build import owned, reshape, shape_only
from .conv import _contiguous, _image, _no_empty, int_pair, unwindows, windows
from .elementwise import is_number01
from .nn_ops import one_hot_rows
from .reduce import _row_max, row_nan
from .registry import define, op, same_float
from .shapes import numel


# ---------------------------------------------------------------- geometry
def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output size (the last window must start inside the input or its left padding)."""
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_args(name, x, kernel_size, stride, padding, dilation, ceil_mode):
    """(k, s, p, d, (OH, OW), right pads) of a 2-D pooling of ``x``; bad arguments raise."""
    same_float(name, x)
    _image(name, x)
    _no_empty(name, x)
    k = int_pair(name, "kernel_size", kernel_size, 1)
    s = k if stride is None or stride == () or stride == [] else int_pair(name, "stride", stride, 1)
    p = int_pair(name, "padding", padding, 0)
    d = int_pair(name, "dilation", dilation, 1)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"{name}: ceil_mode must be a bool, got {ceil_mode!r}")
    if any(p[i] > k[i] // 2 for i in range(2)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, but got pad={p}, "
                         f"kernel_size={k}")
    size = x.shape[2:]
    out = tuple(pool_out_size(size[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2))
    if min(out) < 1:
        raise ValueError(f"{name}: given input size {tuple(size)} (padding {p}, kernel {k}, dilation {d}), "
                         f"the calculated output size {out} is too small")
    right = tuple(max((out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - size[i] - p[i], 0) for i in range(2))
    return k, s, p, d, out, right


def _padded(ctx, x: int, shape: tuple, p, right, border: float) -> int:
    """The image ``x`` (NCHW ``shape``) padded by ``p`` before and ``right`` after each spatial axis,
    with zeros (``border`` 0) or -inf (``border`` -inf: log of a 0/1 mask, so values stay exact)."""
    if not (p[0] or p[1] or right[0] or right[1]):
        return _contiguous(ctx, x)
    r = lib.pad_ext(ctx, x, p[1], right[1], p[0], right[0], 0, 0, 0, 0)
    if border == 0.0:
        return r
    ones = lib.fill(ctx, shape_only(ctx, (1, 1) + tuple(shape[2:])), 1.0)
    mask = lib.pad_ext(ctx, ones, p[1], right[1], p[0], right[0], 0, 0, 0, 0)
    return lib.add(ctx, r, lib.log(ctx, mask))          # 0 inside, -inf on the border


def _rows_to_nchw(ctx, rows: int, c: int, oh: int, ow: int, n: int) -> int:
    """One value per window, in im2col's order [C, OW, OH, N], as a contiguous NCHW node."""
    return lib.cont(ctx, lib.permute(ctx, lib.reshape_4d(ctx, rows, c, ow, oh, n), 2, 0, 1, 3))


def _nchw_to_rows(ctx, g: int, shape: tuple) -> int:
    """The inverse of :func:`_rows_to_nchw`: an NCHW node as [1, C*OW*OH*N] in im2col's window order."""
    n, c, oh, ow = shape
    t = lib.cont(ctx, lib.permute(ctx, lib.reshape_4d(ctx, g, ow, oh, c, n), 1, 2, 0, 3))   # [C, OW, OH, N]
    return lib.reshape_2d(ctx, t, 1, c * ow * oh * n)


# ---------------------------------------------------------------- max_pool2d
def _infer_max_pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    out = _pool_args("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)[4]
    return tuple(x.shape[:2]) + out, float32


def _max_windows(ctx, node, x_shape, kernel_size, stride, padding, dilation, ceil_mode):
    """(window rows [K, C*OW*OH*N], K, row count, geometry) of a max pooling."""
    k, s, p, d, out, right = _pool_args("max_pool2d", _Spec(x_shape), kernel_size, stride, padding, dilation,
                                        ceil_mode)
    n, c = x_shape[:2]
    padded = _padded(ctx, node, x_shape, p, right, float("-inf"))
    cols = windows(ctx, padded, c, k[0], k[1], s, (0, 0), d)
    kk, rows = k[0] * k[1], c * out[0] * out[1] * n
    return lib.reshape_2d(ctx, cols, kk, rows), kk, rows, (k, s, p, d, out)


class _Spec:
    """A float32 tensor's shape, for the shared argument checks."""

    def __init__(self, shape):
        self.shape, self.ndim, self.dtype = tuple(shape), len(shape), float32


#: Use ggml's one-pass pool_2d / pool_2d_back where its geometry fits (no dilation, no ceil_mode
#: overhang): see :func:`_ggml_pool_fits`. False: always the window-row route (exact in every case).
FAST_MAX_POOL = True
_F32_MAX = 3.4028234663852886e38


def _ggml_pool_fits(shape, kernel_size, stride, padding, dilation, ceil_mode) -> bool:
    """ggml_pool_2d computes torch's windows when there is no dilation and ceil_mode adds no window."""
    if not FAST_MAX_POOL:
        return False
    k, s, p, d, out, _ = _pool_args("max_pool2d", _Spec(shape), kernel_size, stride, padding, dilation, ceil_mode)
    floor = tuple((shape[2 + i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(2))
    return d == (1, 1) and out == floor


def _ggml_max_pool(ctx, x: int, k, s, p) -> int:
    """torch's max pooling from ggml_pool_2d (one pass; it starts from float32's lowest value and
    drops NaN): a window of only -inf gets -inf back (log of step(m + FLT_MAX)), a window holding
    NaN gets NaN (the max of its NaN flags, as sqrt(-flag)). One corner differs from torch: a window
    whose largest value is exactly float32's lowest finite value (-3.4028235e38) reads -inf, and its
    gradient goes to its first element."""
    m = lib.pool_2d(ctx, x, consts.POOL_MAX, k[1], k[0], s[1], s[0], float(p[1]), float(p[0]))
    m = lib.add(ctx, m, lib.log(ctx, lib.step(ctx, lib.scale_bias(ctx, m, 1.0, _F32_MAX))))
    nan_flag = lib.scale_bias(ctx, is_number01(ctx, x), -1.0, 1.0)                   # 1 at NaN
    any_nan = lib.pool_2d(ctx, nan_flag, consts.POOL_MAX, k[1], k[0], s[1], s[0], float(p[1]), float(p[0]))
    return lib.add(ctx, m, lib.sqrt(ctx, lib.neg(ctx, any_nan)))


def _ggml_max_pool_backward(ctx, g: int, x: int, shape: tuple, k, s, p) -> int:
    """ggml_pool_2d_back routes each window's gradient to its first strict maximum above float32's
    lowest value: torch's index except in windows holding NaN (torch: the last NaN, its CPU kernel
    takes every NaN it meets) and windows of only -inf (torch: the first element). Those windows'
    gradients take one more pool_2d_back pass on a key whose window maximum is torch's index there:
    HW + i + 1 at a NaN at plane position i, HW - i elsewhere."""
    h, w = shape[2:]

    def back(grad, keys):
        return lib.pool_2d_back(ctx, grad, keys, consts.POOL_MAX, k[1], k[0], s[1], s[0], float(p[1]), float(p[0]))

    def pooled(flags):
        return lib.pool_2d(ctx, flags, consts.POOL_MAX, k[1], k[0], s[1], s[0], float(p[1]), float(p[0]))

    nan_flag = lib.scale_bias(ctx, is_number01(ctx, x), -1.0, 1.0)                       # 1 at NaN
    above = lib.step(ctx, lib.scale_bias(ctx, x, 1.0, _F32_MAX))                         # 1 above -inf (not NaN)
    # one pool of 2 at NaN, 1 above -inf, 0 at -inf: its window max is 1 exactly for the plain windows
    kind = pooled(lib.add(ctx, above, lib.scale(ctx, nan_flag, 2.0)))
    special = lib.abs(ctx, lib.scale_bias(ctx, kind, 1.0, -1.0))                         # NaN or only -inf: 1
    at = lib.reshape_4d(ctx, lib.arange(ctx, 0.0, float(h * w), 1.0), w, h, 1, 1)       # position in the plane
    keys = lib.add(ctx, lib.repeat(ctx, lib.scale_bias(ctx, at, -1.0, float(h * w)), x),
                   lib.mul(ctx, nan_flag, lib.repeat(ctx, lib.scale_bias(ctx, at, 2.0, 1.0), x)))
    plain = back(lib.mul(ctx, g, lib.scale_bias(ctx, special, -1.0, 1.0)), x)
    return lib.add(ctx, plain, back(lib.mul(ctx, g, special), keys))


@define("max_pool2d", saves=(0,), infer=_infer_max_pool,
        backward=lambda g, n: op.max_pool2d_backward(g, n.inputs[0], **n.params),
        work=lambda x, kernel_size, *a, **p: 4.0 * numel(x.shape) * math.prod(int_pair("", "", kernel_size, 1)))
def _max_pool2d(ctx, nodes, inputs, out, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over each window (NaN if the window holds one, as torch)."""
    x = inputs[0]
    if _ggml_pool_fits(x.shape, kernel_size, stride, padding, dilation, ceil_mode):
        k, s, p = (_pool_args("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)[i] for i in range(3))
        return _ggml_max_pool(ctx, _contiguous(ctx, nodes[0]), k, s, p)
    mat, kk, rows, (_, _, _, _, o) = _max_windows(ctx, nodes[0], x.shape, kernel_size, stride, padding, dilation,
                                                  ceil_mode)
    m = lib.add(ctx, lib.reshape_1d(ctx, _row_max(ctx, mat, kk, rows), rows),
                lib.reshape_1d(ctx, row_nan(ctx, mat), rows))
    return _rows_to_nchw(ctx, m, x.shape[1], o[0], o[1], x.shape[0])


def _first_max_index(ctx, mat, kk: int, rows: int) -> int:
    """Per window row, torch's index in the window, I32 [rows]: the first maximum, or the LAST NaN
    (torch's CPU max pooling takes every NaN it meets). Maximal positions get rank kk - i (1..kk),
    NaN positions kk + 1 + i; ggml_argmax then finds the one largest key. The keys are distinct:
    ggml's argmax breaks ties differently per backend (the CPU's takes the last, Vulkan's the first),
    and is_max is 1 at a NaN too (step(NaN) is 0), so that term is kept off the NaN positions."""
    m = lib.reshape_2d(ctx, _row_max(ctx, mat, kk, rows), 1, rows)
    is_max = lib.scale_bias(ctx, lib.step(ctx, lib.neg(ctx, lib.sub(ctx, mat, lib.repeat(ctx, m, mat)))), -1.0, 1.0)
    i = lib.arange(ctx, 0.0, float(kk), 1.0)
    nan01 = lib.scale_bias(ctx, is_number01(ctx, mat), -1.0, 1.0)
    number_max = lib.mul(ctx, is_max, lib.scale_bias(ctx, nan01, -1.0, 1.0))
    key = lib.add(ctx, lib.mul(ctx, number_max, lib.repeat(ctx, lib.scale_bias(ctx, i, -1.0, float(kk)), mat)),
                  lib.mul(ctx, nan01, lib.repeat(ctx, lib.scale_bias(ctx, i, 1.0, float(kk + 1)), mat)))
    return lib.argmax(ctx, key)


def _infer_max_pool_backward(g, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    same_float("max_pool2d_backward", g)
    want, _ = _infer_max_pool(x, kernel_size, stride, padding, dilation, ceil_mode)
    if tuple(g.shape) != want:
        raise ValueError(f"max_pool2d_backward: gradient {g.shape} does not match the pooled shape {want}")
    return tuple(x.shape), float32


@define("max_pool2d_backward", infer=_infer_max_pool_backward, differentiable=False,
        work=lambda g, x, kernel_size, *a, **p: 8.0 * numel(x.shape) * math.prod(int_pair("", "", kernel_size, 1)))
def _max_pool2d_backward(ctx, nodes, inputs, out, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Each window's gradient to torch's index (the first maximum; with NaN the last NaN), summed back
    into the image (col2im); where ggml's pool geometry fits, ggml's one-pass pool_2d_back (see
    :func:`_ggml_max_pool_backward`)."""
    g, x = inputs
    if _ggml_pool_fits(x.shape, kernel_size, stride, padding, dilation, ceil_mode):
        k, s, p = (_pool_args("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)[i] for i in range(3))
        return _ggml_max_pool_backward(ctx, _contiguous(ctx, nodes[0]), _contiguous(ctx, nodes[1]), x.shape, k, s, p)
    mat, kk, rows, (k, s, p, d, _) = _max_windows(ctx, nodes[1], x.shape, kernel_size, stride, padding, dilation,
                                                  ceil_mode)
    hot = lib.reshape_2d(ctx, one_hot_rows(ctx, _first_max_index(ctx, mat, kk, rows), rows, kk), kk, rows)
    gcols = lib.mul(ctx, hot, lib.repeat(ctx, _nchw_to_rows(ctx, nodes[0], g.shape), hot))
    n, c, oh, ow = g.shape
    return unwindows(ctx, lib.reshape_4d(ctx, gcols, c * kk, ow, oh, n), x.shape, k[0], k[1], s, p, d)


def _infer_max_pool_indices(x, **params):
    shape, _ = _infer_max_pool(x, **params)
    if x.shape[2] * x.shape[3] > 2 ** 24:
        raise ValueError(f"max_pool2d: return_indices needs planes of at most 2**24 elements (the indices are "
                         f"computed in float32), got {x.shape[2]}x{x.shape[3]}")
    return shape, int32


@define("max_pool2d_indices", infer=_infer_max_pool_indices, differentiable=False)
def _max_pool2d_indices(ctx, nodes, inputs, out, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """torch's ``return_indices``: per window the flat index (h * W + w) in its input plane of the
    value max_pool2d took, int32 (exact in float32 below 2**24 elements per plane)."""
    x = inputs[0]
    n, c, h, w = x.shape
    mat, kk, rows, (k, s, p, d, o) = _max_windows(ctx, nodes[0], x.shape, kernel_size, stride, padding, dilation,
                                                  ceil_mode)
    at = lib.cast(ctx, _first_max_index(ctx, mat, kk, rows), consts.TYPE_F32)            # window position
    kh = lib.floor(ctx, lib.scale(ctx, lib.scale_bias(ctx, at, 1.0, 0.5), 1.0 / k[1]))     # its row
    kw = lib.sub(ctx, at, lib.scale(ctx, kh, float(k[1])))                                 # its column
    row = lib.reshape_4d(ctx, lib.scale(ctx, kh, float(d[0])), c, o[1], o[0], n)
    col = lib.reshape_4d(ctx, lib.scale(ctx, kw, float(d[1])), c, o[1], o[0], n)
    top = lib.reshape_4d(ctx, lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(o[0]), 1.0), float(s[0]), -float(p[0])),
                         1, 1, o[0], 1)
    left = lib.reshape_4d(ctx, lib.scale_bias(ctx, lib.arange(ctx, 0.0, float(o[1]), 1.0), float(s[1]), -float(p[1])),
                          1, o[1], 1, 1)
    flat = lib.add(ctx, lib.scale(ctx, lib.add(ctx, row, top), float(w)), lib.add(ctx, col, left))
    return lib.cast(ctx, _rows_to_nchw(ctx, flat, c, o[0], o[1], n), consts.TYPE_I32)


# ---------------------------------------------------------------- avg_pool2d
def _avg_args(name, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if not isinstance(count_include_pad, bool):
        raise TypeError(f"{name}: count_include_pad must be a bool, got {count_include_pad!r}")
    if divisor_override is not None and (isinstance(divisor_override, bool) or not isinstance(divisor_override, int)
                                         or divisor_override == 0):
        raise ValueError(f"{name}: divisor must be not zero, got divisor_override={divisor_override!r}")
    return _pool_args(name, x, kernel_size, stride, padding, 1, ceil_mode)


def _infer_avg_pool(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                    divisor_override=None):
    out = _avg_args("avg_pool2d", x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)[4]
    return tuple(x.shape[:2]) + out, float32


def _ggml_avg_fits(shape, k, s, p, out, count_include_pad, divisor_override) -> bool:
    """ggml's pool_2d AVG (one pass; sum / (kH*kW), out-of-range cells skipped) and its pool_2d_back
    are torch's avg pooling when the padding counts and no ceil_mode window hangs past it: every
    window then ends inside input + padding, so torch's divisor is kH*kW too."""
    floor = tuple((shape[2 + i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(2))
    return FAST_AVG_POOL and count_include_pad and divisor_override is None and tuple(out) == floor


#: Use ggml's pool_2d / pool_2d_back (AVG) where they compute torch's average pooling (see above).
FAST_AVG_POOL = True


def _divisors(ctx, shape, k, s, p, out, right, count_include_pad: bool) -> int:
    """torch's divisor of every window as a [1, OW, OH, 1] node: the window's cells inside the
    input (``count_include_pad`` False) or inside the input and its padding, counted by pooling
    a plane of ones the same way."""
    h, w = shape[2:]
    if count_include_pad:   # ones over input + padding, zeros over ceil_mode's overhang beyond it
        inner = (min(right[0], p[0]), min(right[1], p[1]))
        plane = lib.fill(ctx, shape_only(ctx, (1, 1, h + p[0] + inner[0], w + p[1] + inner[1])), 1.0)
        over = (right[0] - inner[0], right[1] - inner[1])
        if over[0] or over[1]:
            plane = lib.pad_ext(ctx, plane, 0, over[1], 0, over[0], 0, 0, 0, 0)
    else:
        plane = lib.pad_ext(ctx, lib.fill(ctx, shape_only(ctx, (1, 1, h, w)), 1.0), p[1], right[1], p[0], right[0],
                            0, 0, 0, 0)
    cols = windows(ctx, plane, 1, k[0], k[1], s, (0, 0), (1, 1))              # [K, OW, OH, 1]
    return lib.reshape_4d(ctx, lib.sum_rows(ctx, cols), 1, out[1], out[0], 1)


def _scale_by_divisor(ctx, node, shape, k, s, p, out, right, count_include_pad, divisor_override, inverse=False):
    """``node`` ([C, OW, OH, N] window values) divided by torch's divisors."""
    if divisor_override is not None:
        return lib.scale(ctx, node, 1.0 / divisor_override)
    div = _divisors(ctx, shape, k, s, p, out, right, count_include_pad)
    return lib.div(ctx, node, lib.repeat(ctx, div, node))


@define("avg_pool2d", saves=(), infer=_infer_avg_pool,
        backward=lambda g, n: op.avg_pool2d_backward(g, input_shape=tuple(n.inputs[0].shape), **n.params),
        work=lambda x, kernel_size, *a, **p: 2.0 * numel(x.shape) * math.prod(int_pair("", "", kernel_size, 1)))
def _avg_pool2d(ctx, nodes, inputs, out, kernel_size, stride=None, padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    """Mean over each window, zero padding, torch's divisors."""
    x = inputs[0]
    n, c = x.shape[:2]
    k, s, p, _, o, right = _avg_args("avg_pool2d", x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                     divisor_override)
    if _ggml_avg_fits(x.shape, k, s, p, o, count_include_pad, divisor_override):
        return lib.pool_2d(ctx, _contiguous(ctx, nodes[0]), consts.POOL_AVG, k[1], k[0], s[1], s[0], float(p[1]),
                           float(p[0]))
    cols = windows(ctx, _padded(ctx, nodes[0], x.shape, p, right, 0.0), c, k[0], k[1], s, (0, 0), (1, 1))
    sums = lib.reshape_4d(ctx, lib.sum_rows(ctx, lib.reshape_2d(ctx, cols, k[0] * k[1], c * o[0] * o[1] * n)),
                          c, o[1], o[0], n)
    mean = _scale_by_divisor(ctx, sums, x.shape, k, s, p, o, right, count_include_pad, divisor_override)
    return _rows_to_nchw(ctx, mean, c, o[0], o[1], n)


def _infer_avg_pool_backward(g, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                             count_include_pad=True, divisor_override=None):
    same_float("avg_pool2d_backward", g)
    spec = _Spec(tuple(input_shape))
    want, _ = _infer_avg_pool(spec, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if tuple(g.shape) != want:
        raise ValueError(f"avg_pool2d_backward: gradient {g.shape} does not match the pooled shape {want}")
    return tuple(input_shape), float32


def _avg_backward_backward(g, n):
    params = {k: v for k, v in n.params.items() if k != "input_shape"}
    return op.avg_pool2d(g, **params)


@define("avg_pool2d_backward", saves=(), infer=_infer_avg_pool_backward, backward=_avg_backward_backward)
def _avg_pool2d_backward(ctx, nodes, inputs, out, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                         count_include_pad=True, divisor_override=None):
    """The window gradients / divisors spread over their windows (col2im); avg_pool2d's adjoint."""
    g = inputs[0]
    n, c, oh, ow = g.shape
    k, s, p, _, o, right = _avg_args("avg_pool2d", _Spec(input_shape), kernel_size, stride, padding, ceil_mode,
                                     count_include_pad, divisor_override)
    if _ggml_avg_fits(tuple(input_shape), k, s, p, o, count_include_pad, divisor_override):
        like = shape_only(ctx, tuple(input_shape))          # pool_2d_back reads only its shape for AVG
        return lib.pool_2d_back(ctx, _contiguous(ctx, nodes[0]), like, consts.POOL_AVG, k[1], k[0], s[1], s[0],
                                float(p[1]), float(p[0]))
    rows = lib.reshape_4d(ctx, _nchw_to_rows(ctx, nodes[0], g.shape), c, ow, oh, n)
    scaled = _scale_by_divisor(ctx, rows, tuple(input_shape), k, s, p, o, right, count_include_pad, divisor_override)
    kk = k[0] * k[1]
    spread = lib.repeat_4d(ctx, lib.reshape_2d(ctx, scaled, 1, c * ow * oh * n), kk, c * ow * oh * n, 1, 1)
    return unwindows(ctx, lib.reshape_4d(ctx, spread, c * kk, ow, oh, n), tuple(input_shape), k[0], k[1], s, p,
                     (1, 1))


# ---------------------------------------------------------------- constant padding
def _infer_pad_constant(x, pads, value=0.0):
    name = "pad"
    same_float(name, x)
    pads = tuple(pads)
    if len(pads) % 2 or len(pads) // 2 > x.ndim or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                                       for v in pads):
        raise ValueError(f"{name}: pads must be pairs of non-negative ints, at most one pair per dimension of "
                         f"{x.shape}, got {pads}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: value must be a real number, got {value!r}")
    shape = list(x.shape)
    for i in range(len(pads) // 2):
        shape[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    if numel(x.shape) == 0 and numel(tuple(shape)) > 0:
        raise ValueError(f"{name}: padding an empty tensor {x.shape} is not supported")
    return tuple(shape), float32


def _pad_backward(g, n):
    x = n.inputs[0]
    pads = n.params["pads"]
    start = [0] * x.ndim
    for i in range(len(pads) // 2):
        start[-1 - i] = pads[2 * i]
    stop = [a + b for a, b in zip(start, x.shape)]
    return op.slice(g, start=tuple(start), stop=tuple(stop), step=(1,) * x.ndim, shape=tuple(x.shape))


@define("pad_constant", saves=(), infer=_infer_pad_constant, backward=_pad_backward)
def _pad_constant(ctx, nodes, inputs, out, pads, value=0.0):
    """``x`` with ``pads`` (torch's order: last dimension first, (before, after) each) of ``value``."""
    x = inputs[0]
    if numel(x.shape) == 0 or not any(pads):
        return lib.cont(ctx, reshape(ctx, nodes[0], out.shape)) if numel(out.shape) else lib.cont(ctx, nodes[0])
    p = list(pads) + [0] * (8 - len(pads))
    src = reshape(ctx, nodes[0], x.shape) if x.ndim else nodes[0]
    r = lib.pad_ext(ctx, src, *p[:8])
    value = float(value)
    if value != 0.0:
        ones = lib.fill(ctx, shape_only(ctx, tuple(x.shape) or (1,)), 1.0)
        mask = lib.pad_ext(ctx, ones, *p[:8])                   # 1 inside, 0 on the border
        if math.isfinite(value):
            r = lib.add(ctx, r, lib.scale_bias(ctx, mask, -value, value))
        else:
            border = lib.log(ctx, mask)                         # 0 inside, -inf on the border
            if math.isnan(value):
                border = lib.scale(ctx, border, 0.0)            # 0 * -inf = NaN on the border only
            elif value > 0:
                border = lib.neg(ctx, border)
            r = lib.add(ctx, r, border)
    return owned(ctx, r, out.shape)


# ---------------------------------------------------------------- resampling matrices
_RESAMPLE_MODES = ("nearest", "linear", "linear_align", "adaptive_avg")


def _infer_resample(x, axis, size, mode, scale=None):
    name = "resample_matrix"
    if mode not in _RESAMPLE_MODES:
        raise ValueError(f"{name}: mode must be one of {_RESAMPLE_MODES}, got {mode!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{name}: axis {axis!r} is out of range for {x.shape}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{name}: size must be a positive int, got {size!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0):
        raise ValueError(f"{name}: scale must be a positive number, got {scale!r}")
    if x.shape[axis] < 1:
        raise ValueError(f"{name}: empty axis in {x.shape}")
    return (size, x.shape[axis]), float32


def _eq(ctx, a: int, b: int) -> int:
    """1.0 where the integer-valued a == b (broadcast b onto a), else 0.0."""
    return lib.step(ctx, lib.scale_bias(ctx, lib.abs(ctx, lib.sub(ctx, a, lib.repeat(ctx, b, a))), -1.0, 0.5))


@define("resample_matrix", saves=(), infer=_infer_resample, differentiable=False)
def _resample_matrix(ctx, nodes, inputs, out, axis, size, mode, scale=None):
    """The (size, n) matrix M with ``M @ v`` resampling a length-n axis to ``size`` as torch's
    interpolate (nearest; linear with ``align_corners`` False or True) or adaptive_avg_pool. Built
    from ``arange`` on the device; ``scale`` is torch's input/output scale when a scale_factor was given."""
    n = inputs[0].shape[axis]
    i = lib.reshape_2d(ctx, lib.arange(ctx, 0.0, float(size), 1.0), 1, size)         # [1, size]: output index
    cols = lib.repeat_4d(ctx, lib.arange(ctx, 0.0, float(n), 1.0), n, size, 1, 1)    # [n, size]: input index
    if mode == "adaptive_avg":   # windows [floor(i n / size), ceil((i + 1) n / size))
        start = lib.floor(ctx, lib.scale(ctx, lib.scale_bias(ctx, i, float(n), 0.5), 1.0 / size))
        end = lib.scale_bias(ctx, lib.floor(ctx, lib.scale(ctx, lib.scale_bias(ctx, i, float(n), float(n) - 0.5),
                                                           1.0 / size)), 1.0, 1.0)
        inside = lib.mul(ctx, lib.step(ctx, lib.scale_bias(ctx, lib.sub(ctx, cols, lib.repeat(ctx, start, cols)), 1.0, 0.5)),
                         lib.step(ctx, lib.scale_bias(ctx, lib.sub(ctx, lib.repeat(ctx, end, cols), cols), 1.0, -0.5)))
        return lib.div(ctx, inside, lib.repeat(ctx, lib.sub(ctx, end, start), inside))
    ratio = float(scale) if scale is not None else n / size
    if mode == "nearest":        # floor(i * scale), at most n - 1 (float32 product, as torch)
        src = lib.clamp(ctx, lib.floor(ctx, lib.scale(ctx, i, ratio)), 0.0, float(n - 1))
        return _eq(ctx, cols, src)
    if mode == "linear_align":
        src = lib.scale(ctx, i, (n - 1) / (size - 1) if size > 1 else 0.0)
    else:                        # half-pixel centres, negative sources clamped to 0
        src = lib.clamp(ctx, lib.scale_bias(ctx, i, ratio, 0.5 * ratio - 0.5), 0.0, float("inf"))
    i0 = lib.clamp(ctx, lib.floor(ctx, src), 0.0, float(n - 1))
    lam = lib.sub(ctx, src, i0)
    i1 = lib.clamp(ctx, lib.scale_bias(ctx, i0, 1.0, 1.0), 0.0, float(n - 1))
    w0 = lib.mul(ctx, _eq(ctx, cols, i0), lib.repeat(ctx, lib.scale_bias(ctx, lam, -1.0, 1.0), cols))
    w1 = lib.mul(ctx, _eq(ctx, cols, i1), lib.repeat(ctx, lam, cols))
    return lib.add(ctx, w0, w1)

