"""OpInfo entries for convolution, pooling, padding and resampling (ops/conv.py, ops/pool.py and
their ``gg.nn.functional`` front ends), with NumPy float64 references written from the definitions
(loops over kernel taps and windows, ``np.pad``), never from the code under test."""
from __future__ import annotations

import math

import numpy as np

import ggmlgrad.nn.functional as F
from ..ops import op
from .opinfo import INTERNAL_OPS, OpInfo, Sample, bad, errors, register

V, T = ValueError, TypeError


# ---------------------------------------------------------------- references
def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _taps(xp, i, j, d, s, oh, ow):
    """x[..., i*d0 + s0*a, j*d1 + s1*b] for a < oh, b < ow."""
    return xp[..., i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0], j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]]


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", _taps(xs, i, j, d, s, oh, ow),
                                                         w[g * og:(g + 1) * og, :, i, j])
    return out if b is None else out + b[None, :, None, None]


def ref_conv2d_weight_grad(g, x, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """dL/dW of conv2d for the output gradient g: per group sum over images and positions of g x windows."""
    o, cg, kh, kw = weight_shape
    u = ref_unfold(x, (kh, kw), dilation, padding, stride)            # (N, C*kh*kw, L)
    gg_ = g.reshape(g.shape[0], o, -1)                                 # (N, O, L)
    og, ck = o // groups, cg * kh * kw
    parts = [np.einsum("nol,nkl->ok", gg_[:, i * og:(i + 1) * og], u[:, i * ck:(i + 1) * ck]) for i in range(groups)]
    return np.concatenate(parts, axis=0).reshape(weight_shape)


def ref_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    s, p, op_, d = _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation)
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    size = [(h - 1) * s[0] + d[0] * (kh - 1) + 1 + op_[0], (wd - 1) * s[1] + d[1] * (kw - 1) + 1 + op_[1]]
    full = np.zeros((n, cog * groups, size[0], size[1]))
    cig = ci // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", x[:, g * cig:(g + 1) * cig], w[g * cig:(g + 1) * cig, :, i, j])
                full[:, g * cog:(g + 1) * cog, i * d[0]: i * d[0] + s[0] * (h - 1) + 1: s[0],
                     j * d[1]: j * d[1] + s[1] * (wd - 1) + 1: s[1]] += contrib
    out_h = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op_[0] + 1
    out_w = (wd - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op_[1] + 1
    out = full[:, :, p[0]:p[0] + out_h, p[1]:p[1] + out_w]
    return out if b is None else out + b[None, :, None, None]


def ref_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    k, d, p, s = _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride)
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    rows = [_taps(xp[:, ch], i, j, d, s, oh, ow).reshape(n, oh * ow)
            for ch in range(c) for i in range(k[0]) for j in range(k[1])]
    return np.stack(rows, axis=1)


def ref_fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    size, k, d, p, s = _pair(output_size), _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride)
    n, ck, _ = cols.shape
    c = ck // (k[0] * k[1])
    oh = (size[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (size[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    full = np.zeros((n, c, size[0] + 2 * p[0], size[1] + 2 * p[1]))
    r = 0
    for ch in range(c):
        for i in range(k[0]):
            for j in range(k[1]):
                _taps(full[:, ch], i, j, d, s, oh, ow)[...] += cols[:, r].reshape(n, oh, ow)
                r += 1
    return full[:, :, p[0]:p[0] + size[0], p[1]:p[1] + size[1]]


def _pool_size(size, k, s, p, d, ceil_mode):
    out = (size + 2 * p - d * (k - 1) - 1 + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _windows(x, k, s, p, d, ceil_mode, fill):
    """(windows (N, C, kH*kW, OH, OW) of x padded with ``fill``, (OH, OW))."""
    h, w = x.shape[2:]
    oh, ow = _pool_size(h, k[0], s[0], p[0], d[0], ceil_mode), _pool_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    extra = [max((o - 1) * st + dd * (kk - 1) + 1 - sz - pp, 0) for o, st, dd, kk, sz, pp in
             ((oh, s[0], d[0], k[0], h, p[0]), (ow, s[1], d[1], k[1], w, p[1]))]
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], extra[0]), (p[1], extra[1])), constant_values=fill)
    taps = [_taps(xp, i, j, d, s, oh, ow) for i in range(k[0]) for j in range(k[1])]
    return np.stack(taps, axis=2), (oh, ow)


def ref_max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    win, _ = _windows(x, k, s, _pair(padding), _pair(dilation), ceil_mode, -np.inf)
    return win.max(axis=2)


def ref_max_pool2d_indices(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    k, p, d = _pair(kernel_size), _pair(padding), _pair(dilation)
    s = k if stride is None else _pair(stride)
    win, (oh, ow) = _windows(x, k, s, p, d, ceil_mode, -np.inf)
    at = np.argmax(win, axis=2)                                # first maximum
    kh, kw = at // k[1], at % k[1]
    rows = np.arange(oh)[:, None] * s[0] - p[0] + kh * d[0]
    cols = np.arange(ow)[None, :] * s[1] - p[1] + kw * d[1]
    return (rows * x.shape[3] + cols).astype(np.float64)


def ref_avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    k, p = _pair(kernel_size), _pair(padding)
    s = k if stride is None else _pair(stride)
    h, w = x.shape[2:]
    win, (oh, ow) = _windows(x, k, s, p, (1, 1), ceil_mode, 0.0)
    total = win.sum(axis=2)
    div = np.zeros((oh, ow))
    for a in range(oh):
        for b in range(ow):
            hs, ws = a * s[0] - p[0], b * s[1] - p[1]
            he, we = min(hs + k[0], h + p[0]), min(ws + k[1], w + p[1])
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            div[a, b] = divisor_override or (size if count_include_pad else (he - hs) * (we - ws))
    return total / div


def ref_pad(x, pad, mode="constant", value=None):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    if mode == "constant":
        return np.pad(x, widths, constant_values=0.0 if value is None else value)
    return np.pad(x, widths, mode=np_mode)


def _src_index(i, n, size, mode, scale):
    ratio = scale if scale is not None else n / size
    if mode == "nearest":
        return np.minimum(np.floor(np.float32(i * np.float32(ratio))), n - 1)
    if mode == "linear_align":
        return i * ((n - 1) / (size - 1) if size > 1 else 0.0)
    return np.maximum(ratio * (i + 0.5) - 0.5, 0.0)


def ref_resample_matrix(x, axis, size, mode, scale=None):
    n = x.shape[axis]
    m = np.zeros((size, n))
    for i in range(size):
        if mode == "adaptive_avg":
            a, b = (i * n) // size, -((-(i + 1) * n) // size)
            m[i, a:b] = 1.0 / (b - a)
            continue
        src = _src_index(i, n, size, mode, scale)
        i0 = int(np.floor(src))
        if mode == "nearest":
            m[i, i0] = 1.0
            continue
        i0 = min(i0, n - 1)
        lam = src - i0
        i1 = min(i0 + 1, n - 1)
        m[i, i0] += 1.0 - lam
        m[i, i1] += lam
    return m


def ref_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    spatial = x.shape[2:]
    if size is None:
        fs = (scale_factor,) * len(spatial) if np.isscalar(scale_factor) else scale_factor
        size = tuple(int(math.floor(s * f)) for s, f in zip(spatial, fs))
        scales = tuple(1.0 / f for f in fs)
    else:
        size = (size,) * len(spatial) if isinstance(size, int) else size
        scales = (None,) * len(spatial)
    kind = "nearest" if mode == "nearest" else ("linear_align" if align_corners else "linear")
    if kind == "linear_align":
        scales = (None,) * len(spatial)
    y = x
    for j, (sz, sc) in enumerate(zip(size, scales)):
        axis = x.ndim - len(spatial) + j
        m = ref_resample_matrix(x, axis, sz, kind, sc)
        y = np.moveaxis(np.tensordot(m, np.moveaxis(y, axis, 0), axes=(1, 0)), 0, axis)
    return y


def ref_adaptive_max_pool2d(x, output_size):
    oh, ow = _pair(output_size)
    h, w = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for a in range(oh):
        hs, he = (a * h) // oh, -((-(a + 1) * h) // oh)
        for b in range(ow):
            ws, we = (b * w) // ow, -((-(b + 1) * w) // ow)
            out[:, :, a, b] = x[:, :, hs:he, ws:we].max(axis=(2, 3))
    return out


def ref_adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair(output_size)
    y = ref_resample_matrix(x, 2, oh, "adaptive_avg") @ x
    return y @ ref_resample_matrix(x, 3, ow, "adaptive_avg").T


def ref_pixel_shuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def ref_pixel_unshuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4).reshape(n, c * r * r, h // r, w // r)


# ---------------------------------------------------------------- samples
def _conv_samples(r):
    g = r.standard_normal
    return [Sample((g((2, 3, 6, 5)), g((4, 3, 3, 2)), g(4)), {}),
            Sample((g((1, 4, 7, 6)), g((6, 2, 3, 3))), {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1),
                                                         "groups": 2}),
            Sample((g((2, 3, 5, 5)), g((3, 1, 3, 3)), g(3)), {"stride": 2, "padding": 1, "groups": 3}),   # depthwise
            Sample((g((1, 2, 4, 4)), g((3, 2, 1, 1))), {})]


def _conv_t_samples(r):
    g = r.standard_normal
    return [Sample((g((2, 3, 3, 4)), g((3, 2, 3, 2)), g(2)), {"stride": (2, 3), "padding": (1, 0),
                                                              "output_padding": (1, 0), "dilation": (1, 2)}),
            Sample((g((1, 4, 3, 3)), g((4, 2, 2, 3))), {"stride": 2, "groups": 2, "output_padding": 1}),
            Sample((g((1, 2, 4, 3)), g((2, 3, 3, 3)), g(3)), {"padding": 1})]


def _pool_samples(r):
    g = r.standard_normal
    return [Sample((g((2, 3, 6, 6)),), {"kernel_size": 2}),
            Sample((g((1, 2, 7, 8)),), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1)}),
            Sample((g((1, 2, 7, 6)),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
            Sample((g((1, 1, 5, 5)),), {"kernel_size": 2, "stride": 2, "ceil_mode": True})]


def _max_pool_samples(r):
    g = r.standard_normal
    return _pool_samples(r) + [Sample((g((1, 2, 7, 7)),), {"kernel_size": 2, "stride": 2, "dilation": 2})]


def _avg_pool_samples(r):
    g = r.standard_normal
    return _pool_samples(r) + [
        Sample((g((1, 2, 7, 6)),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                    "count_include_pad": False}),
        Sample((g((1, 2, 5, 6)),), {"kernel_size": (2, 3), "padding": 1, "divisor_override": 4})]


def _nonfinite_pool(r):
    x = r.standard_normal((1, 2, 4, 4))
    x[0, 0, 0, 1], x[0, 0, 3, 3], x[0, 1, 2, 2], x[0, 1, 0, 0] = np.nan, np.inf, -np.inf, np.nan
    return [Sample((x,), {"kernel_size": 2}), Sample((x,), {"kernel_size": 3, "stride": 1, "padding": 1})]


def _pad_samples(r):
    g = r.standard_normal
    return [Sample((g((2, 3, 4)), (1, 2)), {}, tensor_args=(0,)),
            Sample((g((2, 3, 4)), (1, 2, 0, 3)), {"value": 1.5}, tensor_args=(0,)),
            Sample((g((1, 2, 4, 5)), (2, 1, 1, 3)), {"mode": "reflect"}, tensor_args=(0,)),
            Sample((g((1, 2, 4, 5)), (2, 1, 1, 3)), {"mode": "replicate"}, tensor_args=(0,)),
            Sample((g((1, 2, 4, 5)), (2, 1, 1, 3)), {"mode": "circular"}, tensor_args=(0,)),
            Sample((g((2, 5)), (3, 1)), {"mode": "reflect"}, tensor_args=(0,))]


def _interp_samples(r):
    g = r.standard_normal
    return [Sample((g((1, 2, 3, 4)),), {"scale_factor": 2}),
            Sample((g((1, 2, 3, 4)),), {"size": (5, 7), "mode": "bilinear", "align_corners": False}),
            Sample((g((1, 2, 3, 4)),), {"size": (6, 3), "mode": "bilinear", "align_corners": True}),
            Sample((g((1, 2, 4, 6)),), {"size": (2, 3)}),
            Sample((g((2, 3, 5)),), {"scale_factor": 1.5, "mode": "linear", "align_corners": False})]


register(
    OpInfo("conv2d", ("conv2d", "conv2d_weight_grad", "conv_transpose2d"),
           lambda x, w, *b, **k: F.conv2d(x, w, *b, **k), ref_conv2d, _conv_samples, atol=1e-4),
    # the weight gradient as an op of its own: its gradients (double backward through a convolution)
    OpInfo("conv2d_weight_grad", ("conv2d_weight_grad", "conv2d", "conv_transpose2d"),
           lambda g, x, **k: op.conv2d_weight_grad(g, x, **k), ref_conv2d_weight_grad,
           lambda r: [Sample((r.standard_normal((2, 4, 3, 4)), r.standard_normal((2, 3, 5, 6))),
                             {"weight_shape": (4, 3, 3, 3)}),
                      Sample((r.standard_normal((1, 6, 4, 4)), r.standard_normal((1, 4, 7, 6))),
                             {"weight_shape": (6, 2, 3, 2), "stride": (2, 1), "padding": (1, 0), "dilation": (1, 2),
                              "groups": 2})], atol=1e-4),
    OpInfo("conv_transpose2d", ("conv_transpose2d", "conv2d", "conv2d_weight_grad"),
           lambda x, w, *b, **k: F.conv_transpose2d(x, w, *b, **k), ref_conv_transpose2d, _conv_t_samples, atol=1e-4),
    # (every sample below passes its parameters as keyword arguments: the program fuzzer fuzzes only
    # entries of bare arrays, with random shapes these layers refuse)
    OpInfo("conv2d_same_reflect", ("conv2d", "concat", "slice"),
           lambda x, w, pads: F.conv2d(F.pad(x, pads, mode="reflect"), w),
           lambda x, w, pads: ref_conv2d(ref_pad(x, pads, mode="reflect"), w),
           lambda r: [Sample((r.standard_normal((1, 2, 4, 5)), r.standard_normal((3, 2, 2, 4))),
                             {"pads": (1, 2, 0, 1)})], atol=1e-4),
    OpInfo("conv2d_padding_same_even_kernel", ("conv2d", "pad_constant"),
           lambda x, w, padding: F.conv2d(x, w, padding=padding),
           lambda x, w, padding: ref_conv2d(np.pad(x, ((0, 0), (0, 0), (0, 1), (1, 1))), w),
           lambda r: [Sample((r.standard_normal((1, 2, 5, 5)), r.standard_normal((3, 2, 2, 3))), {"padding": "same"})],
           atol=1e-4),
    OpInfo("conv1d", ("conv2d",), lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
           lambda x, w, b: ref_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), (0, 1), (1, 2))[:, :, 0],
           lambda r: [Sample((r.standard_normal((2, 3, 9)), r.standard_normal((4, 3, 3)), r.standard_normal(4)))],
           atol=1e-4),
    OpInfo("conv_transpose1d", ("conv_transpose2d",), lambda x, w, **k: F.conv_transpose1d(x, w, **k),
           lambda x, w, stride, output_padding: ref_conv_transpose2d(x[:, :, None], w[:, :, None], None, (1, stride), 0,
                                                                     (0, output_padding))[:, :, 0],
           lambda r: [Sample((r.standard_normal((2, 3, 4)), r.standard_normal((3, 2, 3))),
                             {"stride": 2, "output_padding": 1})], atol=1e-4),
    OpInfo("unfold_fn", ("unfold", "fold"), lambda x, **k: F.unfold(x, **k), ref_unfold,
           lambda r: [Sample((r.standard_normal((2, 3, 5, 4)),), {"kernel_size": (2, 3), "padding": (1, 0),
                                                                  "stride": (2, 1), "dilation": 1}),
                      Sample((r.standard_normal((1, 2, 6, 6)),), {"kernel_size": 2, "dilation": 2})]),
    OpInfo("fold_fn", ("fold", "unfold"), lambda c, **k: F.fold(c, **k), ref_fold,
           lambda r: [Sample((r.standard_normal((2, 12, 6)),), {"output_size": (4, 5), "kernel_size": (2, 3),
                                                                "padding": (0, 1), "stride": (2, 2)})]),
    OpInfo("max_pool2d", ("max_pool2d", "max_pool2d_backward"), lambda x, **k: F.max_pool2d(x, **k),
           ref_max_pool2d, _max_pool_samples, nonfinite=_nonfinite_pool),
    OpInfo("max_pool2d_indices", ("max_pool2d_indices",), lambda x, **k: F.max_pool2d(x, return_indices=True, **k)[1],
           ref_max_pool2d_indices, _max_pool_samples, grad=False),
    OpInfo("max_pool1d", ("max_pool2d",), lambda x, **k: F.max_pool1d(x, **k),
           lambda x, kernel_size, stride, padding: ref_max_pool2d(x[:, :, None], (1, kernel_size), (1, stride),
                                                                  (0, padding))[:, :, 0],
           lambda r: [Sample((r.standard_normal((2, 3, 9)),), {"kernel_size": 3, "stride": 2, "padding": 1})]),
    OpInfo("avg_pool2d", ("avg_pool2d", "avg_pool2d_backward"), lambda x, **k: F.avg_pool2d(x, **k),
           ref_avg_pool2d, _avg_pool_samples),
    OpInfo("avg_pool1d", ("avg_pool2d",), lambda x, **k: F.avg_pool1d(x, 3, 2, 1, **k),
           lambda x, count_include_pad: ref_avg_pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1),
                                                       count_include_pad=count_include_pad)[:, :, 0],
           lambda r: [Sample((r.standard_normal((2, 3, 8)),), {"count_include_pad": False})]),
    OpInfo("pad", ("pad_constant", "concat", "slice"), lambda x, p, **k: F.pad(x, p, **k), ref_pad, _pad_samples,
           nonfinite=lambda r: [Sample((r.standard_normal((2, 3)), (1, 1)), {"value": v}, tensor_args=(0,))
                                for v in (np.inf, -np.inf, np.nan)]),
    OpInfo("pad_negative", ("pad_constant",), lambda x, pad: F.pad(x, pad),
           lambda x, pad: np.pad(x[:, :-2, 1:], ((0, 0), (1, 0), (0, 2))),
           lambda r: [Sample((r.standard_normal((2, 4, 5)),), {"pad": (-1, 2, 1, -2)})]),
    OpInfo("interpolate", ("resample_matrix", "linear", "matmul"), lambda x, **k: F.interpolate(x, **k),
           ref_interpolate, _interp_samples),
    OpInfo("resample_matrix", ("resample_matrix",), lambda x, **k: op.resample_matrix(x, **k), ref_resample_matrix,
           lambda r: [Sample((r.standard_normal((2, 5)),), {"axis": 1, "size": s, "mode": m})
                      for s in (3, 7) for m in ("nearest", "linear", "linear_align", "adaptive_avg")], grad=False),
    OpInfo("adaptive_avg_pool2d", ("avg_pool2d", "resample_matrix"), lambda x, s: F.adaptive_avg_pool2d(x, s),
           ref_adaptive_avg_pool2d,
           lambda r: [Sample((r.standard_normal((1, 2, 6, 4)), (3, 2)), tensor_args=(0,)),
                      Sample((r.standard_normal((1, 2, 5, 7)), (3, 4)), tensor_args=(0,)),
                      Sample((r.standard_normal((2, 3, 5, 7)), 1), tensor_args=(0,))]),
    OpInfo("adaptive_max_pool2d", ("max_pool2d", "extreme_dim"), lambda x, s: F.adaptive_max_pool2d(x, s),
           ref_adaptive_max_pool2d,
           lambda r: [Sample((r.standard_normal((1, 2, 6, 4)), (3, 2)), tensor_args=(0,)),
                      Sample((r.standard_normal((1, 2, 5, 7)), (3, 4)), tensor_args=(0,))]),
    OpInfo("pixel_shuffle", ("reshape", "permute"), lambda x, r: F.pixel_shuffle(x, r), ref_pixel_shuffle,
           lambda r: [Sample((r.standard_normal((2, 8, 3, 2)),), {"r": 2})]),
    OpInfo("pixel_unshuffle", ("reshape", "permute"), lambda x, r: F.pixel_unshuffle(x, r), ref_pixel_unshuffle,
           lambda r: [Sample((r.standard_normal((2, 2, 4, 6)),), {"r": 2})]),
)

INTERNAL_OPS.update({
    "max_pool2d_backward": "max_pool2d's gradient (opinfo_conv max_pool2d rows)",
    "avg_pool2d_backward": "avg_pool2d's gradient (opinfo_conv avg_pool2d rows)",
})

_X = np.ones((1, 3, 5, 5))
_W = np.ones((4, 3, 3, 3))
errors("conv2d",
       bad(V, "channels", _X, np.ones((4, 2, 3, 3))),
       bad(V, "groups", _X, np.ones((4, 1, 3, 3)), groups=2),
       bad(V, "divisible by groups", np.ones((1, 4, 5, 5)), np.ones((3, 2, 3, 3)), groups=2),
       bad(V, "smaller than", _X, np.ones((4, 3, 7, 3))),
       bad(V, "stride", _X, _W, stride=0),
       bad(V, "padding", _X, _W, padding=-1),
       bad(V, "strided", _X, _W, padding="same", stride=2),
       bad(V, "padding string", _X, _W, padding="full"),
       bad(V, "bias", _X, _W, np.ones(3)),
       bad(V, "conv2d", np.ones((3, 5)), _W),
       bad(T, "float32", np.ones((1, 3, 5, 5), dtype=np.int32), _W))
errors("conv_transpose2d",
       bad(V, "channels", _X, np.ones((4, 2, 3, 3))),
       bad(V, "output_padding", _X, np.ones((3, 2, 3, 3)), stride=2, output_padding=2),
       bad(V, "not positive", np.ones((1, 3, 1, 1)), np.ones((3, 2, 1, 1)), padding=1))
errors("max_pool2d",
       bad(V, "half of", _X, kernel_size=2, padding=2),
       bad(V, "too small", np.ones((1, 1, 2, 2)), kernel_size=3),
       bad(V, "stride", _X, kernel_size=2, stride=0),
       bad(V, "max_pool2d", np.ones((5, 5)), kernel_size=2))
errors("avg_pool2d",
       bad(V, "divisor", _X, kernel_size=2, divisor_override=0),
       bad(V, "too small", np.ones((1, 1, 2, 2)), kernel_size=3))
errors("pad",
       bad(V, "divisible by 2", np.ones((2, 3)), (1, 2, 3)),
       bad(V, "less than", np.ones((1, 2, 3)), (3, 0), mode="reflect"),
       bad(NotImplementedError, "mode", np.ones((1, 2, 3)), (1, 1), mode="wrap"),
       bad(NotImplementedError, "reflect", np.ones((3,)), (1, 1), mode="reflect"))
errors("interpolate",
       bad(V, "only one of size or scale_factor", np.ones((1, 1, 2, 2))),
       bad(V, "align_corners", np.ones((1, 1, 2, 2)), scale_factor=2, align_corners=True),
       bad(NotImplementedError, "bilinear", np.ones((1, 1, 2)), scale_factor=2, mode="bilinear"))
errors("fold_fn",
       bad(V, "sliding blocks", np.ones((1, 12, 5)), output_size=(4, 5), kernel_size=(2, 3)),
       bad(V, "divisible", np.ones((1, 7, 6)), output_size=(4, 5), kernel_size=(2, 3), stride=2))
errors("pixel_shuffle",
       bad(V, "divisible", np.ones((1, 3, 2, 2)), r=2))
