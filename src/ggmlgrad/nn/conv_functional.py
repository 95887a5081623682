"""``gg.nn.functional`` convolution, pooling, padding and resampling (torch's names and signatures).

Front ends over the ops in ``ops/conv.py`` and ``ops/pool.py``: they normalise torch's arguments
(ints or tuples, ``"same"``/``"valid"`` padding, unbatched inputs, 1-D forms as 2-D with height 1)
and raise torch's errors in Python. Everything runs as graph ops (no host computation), so the
same call works in eager mode, graph mode and inside a capture.

>>> import ggmlgrad as gg
>>> import ggmlgrad.nn.functional as F
>>> F.conv2d(gg.ones(1, 1, 4, 4), gg.ones(2, 1, 3, 3), padding="same").shape
(1, 2, 4, 4)
"""
from __future__ import annotations

import math

from ..ops import op
from ..ops.conv import check_groups
from ..ops.decl import public
from ..tensor import Tensor
from ..tensor.functional_shape import cat

# ---------------------------------------------------------------- argument helpers


def _tuple(name: str, key: str, v, n: int, minimum: int) -> tuple:
    """``v`` (an int or a sequence of ``n`` ints) as an ``n``-tuple of ints >= ``minimum``."""
    items = (v,) * n if isinstance(v, int) and not isinstance(v, bool) else v
    if not isinstance(items, (tuple, list)) or len(items) != n or any(
            isinstance(a, bool) or not isinstance(a, int) for a in items):
        raise TypeError(f"{name}: {key} must be an int or a tuple of {n} ints, got {v!r}")
    if any(a < minimum for a in items):
        raise ValueError(f"{name}: {key} must be >= {minimum}, got {v!r}")
    return tuple(int(a) for a in items)


def _batched(name: str, x, ndim: int):
    """(x with a batch axis, whether one was added): torch's unbatched inputs have ndim - 1 axes."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor input, got {type(x).__name__}")
    if x.ndim == ndim:
        return x, False
    if x.ndim == ndim - 1:
        return x.unsqueeze(0), True
    raise ValueError(f"{name}: expected a {ndim - 1}-D (unbatched) or {ndim}-D (batched) input, got shape {x.shape}")


def _unbatch(y, added: bool):
    return y.squeeze(0) if added else y


def same_padding(name: str, kernel: tuple, dilation: tuple, stride: tuple) -> tuple[tuple, tuple]:
    """torch's ``padding="same"``: (left pads, right pads) per spatial axis (the odd one goes right)."""
    if any(s != 1 for s in stride):
        raise ValueError(f"{name}: padding='same' is not supported for strided convolutions")
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)


def _conv_padding(name: str, padding, kernel: tuple, dilation: tuple, stride: tuple):
    """(symmetric padding, extra right padding or None) for an int/tuple/"same"/"valid" padding."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * n, None
        if padding == "same":
            left, right = same_padding(name, kernel, dilation, stride)
            extra = tuple(r - l for l, r in zip(left, right))
            return left, (extra if any(extra) else None)
        raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    return _tuple(name, "padding", padding, n, 0), None


# ---------------------------------------------------------------- convolutions
@public(functional="conv2d")
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation) of (N, C, H, W) or (C, H, W) with (O, C/groups, kH, kW),
    as ``torch.nn.functional.conv2d``; ``padding`` an int, a pair, ``"same"`` or ``"valid"`` (zeros).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.conv2d(gg.ones(1, 1, 3, 3), gg.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    x, added = _batched("conv2d", input, 4)
    if not isinstance(weight, Tensor) or weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be a 4-D Tensor (out_channels, in_channels/groups, kH, kW), "
                         f"got {getattr(weight, 'shape', type(weight).__name__)}")
    stride_ = _tuple("conv2d", "stride", stride, 2, 1)
    dilation_ = _tuple("conv2d", "dilation", dilation, 2, 1)
    pad, extra = _conv_padding("conv2d", padding, tuple(weight.shape[2:]), dilation_, stride_)
    if extra is not None:   # "same" with an even dilated kernel: one more zero on the right/bottom
        x = op.pad_constant(x, pads=(0, extra[1], 0, extra[0]), value=0.0)
    args = (x, weight) if bias is None else (x, weight, bias)
    y = op.conv2d(*args, stride=stride_, padding=pad, dilation=dilation_, groups=check_groups("conv2d", groups))
    return _unbatch(y, added)


def _as_2d_weight(name: str, weight) -> Tensor:
    if not isinstance(weight, Tensor) or weight.ndim != 3:
        raise ValueError(f"{name}: weight must be a 3-D Tensor, got {getattr(weight, 'shape', type(weight).__name__)}")
    return weight.unsqueeze(2)


@public(functional="conv1d")
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-D convolution of (N, C, L) or (C, L) with (O, C/groups, k): a 2-D convolution of height 1.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.conv1d(gg.ones(1, 1, 4), gg.ones(1, 1, 2)).tolist()
    [[[2.0, 2.0, 2.0]]]
    """
    x, added = _batched("conv1d", input, 3)
    w = _as_2d_weight("conv1d", weight)
    s = _tuple("conv1d", "stride", stride, 1, 1)
    d = _tuple("conv1d", "dilation", dilation, 1, 1)
    p = padding if isinstance(padding, str) else (0, _tuple("conv1d", "padding", padding, 1, 0)[0])
    y = conv2d(x.unsqueeze(2), w, bias, (1, s[0]), p, (1, d[0]), groups)
    return _unbatch(y.squeeze(2), added)


@public(functional="conv_transpose2d")
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution (the gradient of conv2d) of (N, C, H, W) with (C, O/groups, kH, kW),
    as ``torch.nn.functional.conv_transpose2d`` (note torch's order: ``groups`` before ``dilation``).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.conv_transpose2d(gg.ones(1, 1, 2, 2), gg.ones(1, 1, 2, 2)).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    x, added = _batched("conv_transpose2d", input, 4)
    if not isinstance(weight, Tensor) or weight.ndim != 4:
        raise ValueError("conv_transpose2d: weight must be a 4-D Tensor (in_channels, out_channels/groups, kH, kW)")
    args = (x, weight) if bias is None else (x, weight, bias)
    y = op.conv_transpose2d(*args, stride=_tuple("conv_transpose2d", "stride", stride, 2, 1),
                            padding=_tuple("conv_transpose2d", "padding", padding, 2, 0),
                            output_padding=_tuple("conv_transpose2d", "output_padding", output_padding, 2, 0),
                            dilation=_tuple("conv_transpose2d", "dilation", dilation, 2, 1),
                            groups=check_groups("conv_transpose2d", groups))
    return _unbatch(y, added)


@public(functional="conv_transpose1d")
def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 1-D convolution of (N, C, L) with (C, O/groups, k): the 2-D form with height 1.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.conv_transpose1d(gg.ones(1, 1, 2), gg.ones(1, 1, 2)).tolist()
    [[[1.0, 2.0, 1.0]]]
    """
    x, added = _batched("conv_transpose1d", input, 3)
    w = _as_2d_weight("conv_transpose1d", weight)
    one = lambda key, v, m: (m, _tuple("conv_transpose1d", key, v, 1, m)[0])   # noqa: E731
    y = conv_transpose2d(x.unsqueeze(2), w, bias, one("stride", stride, 1), one("padding", padding, 0),
                         one("output_padding", output_padding, 0), groups, one("dilation", dilation, 1))
    return _unbatch(y.squeeze(2), added)


# ---------------------------------------------------------------- pooling
def _pool_stride(name: str, stride, kernel: tuple, n: int):
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        return kernel
    return _tuple(name, "stride", stride, n, 1)


@public(functional="max_pool2d")
def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max over windows of (N, C, H, W) or (C, H, W), as ``torch.nn.functional.max_pool2d`` (padding
    is -inf; NaN propagates; the gradient goes to each window's first maximum). ``return_indices``:
    also the flat index h * W + w of each maximum in its plane (int32; torch: int64).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.max_pool2d(gg.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    x, added = _batched("max_pool2d", input, 4)
    k = _tuple("max_pool2d", "kernel_size", kernel_size, 2, 1)
    geo = dict(kernel_size=k, stride=_pool_stride("max_pool2d", stride, k, 2),
               padding=_tuple("max_pool2d", "padding", padding, 2, 0),
               dilation=_tuple("max_pool2d", "dilation", dilation, 2, 1), ceil_mode=ceil_mode)
    y = _unbatch(op.max_pool2d(x, **geo), added)
    if not return_indices:
        return y
    return y, _unbatch(op.max_pool2d_indices(x.detach(), **geo), added)


@public(functional="max_pool1d")
def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max over windows of (N, C, L) or (C, L): the 2-D form with height 1.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.max_pool1d(gg.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
    [[[3.0, 2.0]]]
    """
    x, added = _batched("max_pool1d", input, 3)
    k = _tuple("max_pool1d", "kernel_size", kernel_size, 1, 1)
    s = _pool_stride("max_pool1d", stride, k, 1)
    r = max_pool2d(x.unsqueeze(2), (1, k[0]), (1, s[0]), (0, _tuple("max_pool1d", "padding", padding, 1, 0)[0]),
                   (1, _tuple("max_pool1d", "dilation", dilation, 1, 1)[0]), ceil_mode, return_indices)
    if return_indices:
        return _unbatch(r[0].squeeze(2), added), _unbatch(r[1].squeeze(2), added)
    return _unbatch(r.squeeze(2), added)


@public(functional="avg_pool2d")
def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over windows of (N, C, H, W) or (C, H, W), as ``torch.nn.functional.avg_pool2d``.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.avg_pool2d(gg.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    x, added = _batched("avg_pool2d", input, 4)
    k = _tuple("avg_pool2d", "kernel_size", kernel_size, 2, 1)
    y = op.avg_pool2d(x, kernel_size=k, stride=_pool_stride("avg_pool2d", stride, k, 2),
                      padding=_tuple("avg_pool2d", "padding", padding, 2, 0), ceil_mode=ceil_mode,
                      count_include_pad=count_include_pad, divisor_override=divisor_override)
    return _unbatch(y, added)


@public(functional="avg_pool1d")
def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over windows of (N, C, L) or (C, L).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.avg_pool1d(gg.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
    [[[2.0, 1.0]]]
    """
    x, added = _batched("avg_pool1d", input, 3)
    k = _tuple("avg_pool1d", "kernel_size", kernel_size, 1, 1)
    s = _pool_stride("avg_pool1d", stride, k, 1)
    y = avg_pool2d(x.unsqueeze(2), (1, k[0]), (1, s[0]), (0, _tuple("avg_pool1d", "padding", padding, 1, 0)[0]),
                   ceil_mode, count_include_pad)
    return _unbatch(y.squeeze(2), added)


def _adaptive_size(name: str, output_size, spatial: tuple) -> tuple:
    n = len(spatial)
    items = (output_size,) * n if output_size is None or (isinstance(output_size, int)
                                                          and not isinstance(output_size, bool)) else output_size
    if not isinstance(items, (tuple, list)) or len(items) != n:
        raise TypeError(f"{name}: output_size must be an int, None or a tuple of {n}, got {output_size!r}")
    out = []
    for o, s in zip(items, spatial):
        if o is None:
            o = s
        if isinstance(o, bool) or not isinstance(o, int) or o < 1:
            raise ValueError(f"{name}: output_size entries must be positive ints (or None), got {output_size!r}")
        out.append(int(o))
    return tuple(out)


def _resample(x, sizes: tuple, mode: str, scales: tuple) -> Tensor:
    """Resample the trailing ``len(sizes)`` axes of ``x`` by products with resample_matrix
    (``M_h @ x`` for the height, ``x @ M_w^T`` for the width): gradients flow through the products."""
    y = x
    for j, (size, scale) in enumerate(zip(sizes, scales)):
        axis = x.ndim - len(sizes) + j
        if mode == "adaptive_avg" and size == x.shape[axis]:
            continue
        m = op.resample_matrix(x.detach(), axis=axis, size=size, mode=mode, scale=scale)
        y = op.linear(y, m) if axis == x.ndim - 1 else m @ y
    return y


@public(functional="adaptive_avg_pool2d")
def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over torch's adaptive windows ``[floor(i*H/OH), ceil((i+1)*H/OH))``: avg_pool2d when the
    sizes divide, else products with the (out, in) averaging matrices (built on the device).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.adaptive_avg_pool2d(gg.arange(16.0).reshape(1, 1, 4, 4), 1).tolist()
    [[[[7.5]]]]
    """
    x, added = _batched("adaptive_avg_pool2d", input, 4)
    out = _adaptive_size("adaptive_avg_pool2d", output_size, tuple(x.shape[2:]))
    h, w = x.shape[2:]
    if h % out[0] == 0 and w % out[1] == 0:
        k = (h // out[0], w // out[1])
        y = x if k == (1, 1) else op.avg_pool2d(x, kernel_size=k, stride=k)
    else:
        y = _resample(x, out, "adaptive_avg", (None, None))
    return _unbatch(y, added)


@public(functional="adaptive_avg_pool1d")
def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Mean over torch's adaptive windows of (N, C, L) or (C, L).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.adaptive_avg_pool1d(gg.tensor([[[1.0, 3.0, 2.0]]]), 2).tolist()
    [[[2.0, 2.5]]]
    """
    x, added = _batched("adaptive_avg_pool1d", input, 3)
    out = _adaptive_size("adaptive_avg_pool1d", output_size, tuple(x.shape[2:]))
    y = adaptive_avg_pool2d(x.unsqueeze(2), (1, out[0])).squeeze(2)
    return _unbatch(y, added)


def _adaptive_max_axis(x, axis: int, out: int):
    """Max over torch's adaptive windows along ``axis`` (-1 or -2), one slice per output: the
    gradient goes to each window's first maximum (max(dim)), as torch."""
    n = x.shape[axis]
    parts = []
    for i in range(out):
        a, b = (i * n) // out, -((-(i + 1) * n) // out)
        parts.append(x.narrow(axis, a, b - a).max(dim=axis, keepdim=True)[0])
    return cat(parts, dim=axis)


@public(functional="adaptive_max_pool2d")
def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Max over torch's adaptive windows of (N, C, H, W) or (C, H, W): max_pool2d when the sizes
    divide (indices too), else a max per output row and column (rows first: the same first maximum
    as torch's row-major scan). ``return_indices`` needs dividing sizes.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.adaptive_max_pool2d(gg.arange(16.0).reshape(1, 1, 4, 4), (1, 2)).tolist()
    [[[[13.0, 15.0]]]]
    """
    x, added = _batched("adaptive_max_pool2d", input, 4)
    out = _adaptive_size("adaptive_max_pool2d", output_size, tuple(x.shape[2:]))
    h, w = x.shape[2:]
    if h % out[0] == 0 and w % out[1] == 0:
        k = (h // out[0], w // out[1])
        r = max_pool2d(x, k, k, 0, 1, False, return_indices)
        return (_unbatch(r[0], added), _unbatch(r[1], added)) if return_indices else _unbatch(r, added)
    if return_indices:
        raise NotImplementedError(f"adaptive_max_pool2d: return_indices=True needs output sizes that divide the "
                                  f"input sizes (got input {(h, w)}, output {out})")
    if not isinstance(return_indices, bool):
        raise TypeError(f"adaptive_max_pool2d: return_indices must be a bool, got {return_indices!r}")
    y = _adaptive_max_axis(_adaptive_max_axis(x, -1, out[1]), -2, out[0])
    return _unbatch(y, added)


@public(functional="adaptive_max_pool1d")
def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """Max over torch's adaptive windows of (N, C, L) or (C, L).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.adaptive_max_pool1d(gg.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
    [[[3.0, 2.0]]]
    """
    x, added = _batched("adaptive_max_pool1d", input, 3)
    out = _adaptive_size("adaptive_max_pool1d", output_size, tuple(x.shape[2:]))
    r = adaptive_max_pool2d(x.unsqueeze(2), (1, out[0]), return_indices)
    if return_indices:
        return _unbatch(r[0].squeeze(2), added), _unbatch(r[1].squeeze(2), added)
    return _unbatch(r.squeeze(2), added)


# ---------------------------------------------------------------- padding
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _edge_parts(x, axis: int, before: int, after: int, mode: str) -> Tensor:
    """``x`` padded along ``axis`` by ``before``/``after`` in a non-constant mode (slices + cat)."""
    n = x.shape[axis]
    name = "pad"
    if mode == "reflect" and (before >= n or after >= n):
        raise ValueError(f"{name}: padding size should be less than the corresponding input dimension, but got: "
                         f"padding ({before}, {after}) at dimension {axis % x.ndim} of input {x.shape}")
    if mode == "circular" and (before > n or after > n):
        raise ValueError(f"{name}: padding value ({before}, {after}) must be at most the size {n} of dimension "
                         f"{axis % x.ndim} (circular)")
    parts_before, parts_after = [], []
    if mode == "reflect":
        parts_before = [x.narrow(axis, i, 1) for i in range(before, 0, -1)]
        parts_after = [x.narrow(axis, n - 1 - i, 1) for i in range(1, after + 1)]
    elif mode == "replicate":
        edge = list(x.shape)
        if before:
            edge[axis] = before
            parts_before = [x.narrow(axis, 0, 1).expand(*edge)]
        if after:
            edge[axis] = after
            parts_after = [x.narrow(axis, n - 1, 1).expand(*edge)]
    else:   # circular
        parts_before = [x.narrow(axis, n - before, before)] if before else []
        parts_after = [x.narrow(axis, 0, after)] if after else []
    if not parts_before and not parts_after:
        return x
    return cat(parts_before + [x] + parts_after, dim=axis)


@public(functional="pad")
def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the trailing dimensions, as ``torch.nn.functional.pad``: ``pad`` lists (before, after)
    pairs from the last dimension backwards; modes constant (``value``, default 0; negative pads
    crop), reflect, replicate and circular (the last 1-3 dimensions of a 2-D to 4-D input).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.pad(gg.tensor([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect").tolist()
    [[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"pad: expected a Tensor input, got {type(input).__name__}")
    pads = tuple(pad) if isinstance(pad, (tuple, list)) else pad
    if not isinstance(pads, tuple) or any(isinstance(p, bool) or not isinstance(p, int) for p in pads):
        raise TypeError(f"pad: pad must be a tuple of ints, got {pad!r}")
    if len(pads) % 2:
        raise ValueError(f"pad: padding length must be divisible by 2, got {len(pads)}")
    if len(pads) // 2 > input.ndim:
        raise ValueError(f"pad: padding length {len(pads)} is too large for an input of {input.ndim} dimensions")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: mode must be one of {_PAD_MODES}, got {mode!r}")
    if mode == "constant":
        return _pad_constant(input, pads, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    dims = len(pads) // 2
    if not (1 <= dims <= 3 and dims + 1 <= input.ndim <= dims + 2):
        raise NotImplementedError(f"pad: {mode} padding of {dims} dimension(s) needs a {dims + 1}-D or "
                                  f"{dims + 2}-D input, got shape {input.shape}")
    if any(p < 0 for p in pads):
        raise ValueError(f"pad: negative padding {pads} is only supported in constant mode here")
    y = input
    for i in range(dims):
        y = _edge_parts(y, input.ndim - 1 - i, pads[2 * i], pads[2 * i + 1], mode)
    return y


def _pad_constant(x, pads: tuple, value) -> Tensor:
    """Constant padding; negative entries crop first (as torch)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"pad: value must be a real number, got {value!r}")
    if any(p < 0 for p in pads):
        for i in range(len(pads) // 2):
            axis = x.ndim - 1 - i
            lo, hi = max(-pads[2 * i], 0), max(-pads[2 * i + 1], 0)
            if lo + hi > x.shape[axis]:
                raise ValueError(f"pad: negative padding {pads} removes more than dimension {axis} of {x.shape}")
            if lo or hi:
                x = x.narrow(axis, lo, x.shape[axis] - lo - hi)
        pads = tuple(max(p, 0) for p in pads)
    return op.pad_constant(x, pads=pads, value=float(value))


# ---------------------------------------------------------------- unfold / fold
@public(functional="unfold")
def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding windows of (N, C, H, W) as columns (N, C*kH*kW, L) (im2col), as torch's F.unfold.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.unfold(gg.ones(1, 2, 3, 3), 2).shape
    (1, 8, 4)
    """
    x, added = _batched("unfold", input, 4)
    y = op.unfold(x, kernel_size=_tuple("unfold", "kernel_size", kernel_size, 2, 1),
                  dilation=_tuple("unfold", "dilation", dilation, 2, 1),
                  padding=_tuple("unfold", "padding", padding, 2, 0), stride=_tuple("unfold", "stride", stride, 2, 1))
    return _unbatch(y, added)


@public(functional="fold")
def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Columns (N, C*kH*kW, L) summed back into (N, C, H, W) (col2im), as torch's F.fold.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.fold(gg.ones(1, 4, 4), (3, 3), 2).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    x, added = _batched("fold", input, 3)
    y = op.fold(x, output_size=_tuple("fold", "output_size", output_size, 2, 1),
                kernel_size=_tuple("fold", "kernel_size", kernel_size, 2, 1),
                dilation=_tuple("fold", "dilation", dilation, 2, 1),
                padding=_tuple("fold", "padding", padding, 2, 0), stride=_tuple("fold", "stride", stride, 2, 1))
    return _unbatch(y, added)


# ---------------------------------------------------------------- interpolate, pixel shuffle
_INTERP = {("nearest", 3): "nearest", ("nearest", 4): "nearest", ("linear", 3): "linear",
           ("bilinear", 4): "linear"}


@public(functional="interpolate")
def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """Resize (N, C, L) or (N, C, H, W), as ``torch.nn.functional.interpolate``: modes ``nearest``,
    ``linear`` (3-D) and ``bilinear`` (4-D), ``align_corners``, ``size`` or ``scale_factor``.
    Computed as products with (out, in) interpolation matrices built on the device.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.interpolate(gg.tensor([[[1.0, 2.0]]]), scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: expected a Tensor input, got {type(input).__name__}")
    if (mode, input.ndim) not in _INTERP:
        if input.ndim not in (3, 4):
            raise NotImplementedError(f"interpolate: input of {input.ndim} dimensions is not supported "
                                      f"(3-D and 4-D are)")
        raise NotImplementedError(f"interpolate: mode {mode!r} with a {input.ndim}-D input is not supported "
                                  f"(nearest, linear (3-D), bilinear (4-D))")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    spatial = tuple(input.shape[2:])
    n = len(spatial)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: only one of size or scale_factor should be defined")
    scales = (None,) * n
    if size is not None:
        out = _adaptive_size("interpolate", size, spatial)
    else:
        factors = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(factors) != n or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0
                                    for f in factors):
            raise ValueError(f"interpolate: scale_factor must be a positive number or {n} of them, got {scale_factor!r}")
        out = tuple(int(math.floor(s * float(f))) for s, f in zip(spatial, factors))
        if min(out) < 1:
            raise ValueError(f"interpolate: the output size {out} is not positive")
        if not recompute_scale_factor:
            scales = tuple(1.0 / float(f) for f in factors)
    kind = _INTERP[(mode, input.ndim)]
    if kind == "linear" and align_corners:
        kind, scales = "linear_align", (None,) * n
    return _resample(input, out, kind, scales)


@public(functional="pixel_shuffle")
def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(N, C*r*r, H, W) → (N, C, H*r, W*r), as torch (reshapes and permutes within 4-D).

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.pixel_shuffle(gg.arange(4.0).reshape(1, 4, 1, 1), 2).tolist()
    [[[[0.0, 1.0], [2.0, 3.0]]]]
    """
    x, added = _batched("pixel_shuffle", input, 4)
    r = _positive("pixel_shuffle", "upscale_factor", upscale_factor)
    n, crr, h, w = x.shape
    if crr % (r * r):
        raise ValueError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                         f"upscale_factor, but input.size(-3)={crr} is not divisible by {r * r}")
    c = crr // (r * r)
    t = x.reshape(n * c * r, r, h, w).permute(0, 2, 3, 1).reshape(n * c, r, h, w * r)   # [.., r1, h, (w, r2)]
    y = t.permute(0, 2, 1, 3).reshape(n, c, h * r, w * r)                                 # [.., h, r1, (w, r2)]
    return _unbatch(y, added)


@public(functional="pixel_unshuffle")
def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(N, C, H*r, W*r) → (N, C*r*r, H, W): the inverse of pixel_shuffle.

    >>> import ggmlgrad as gg
    >>> gg.nn.functional.pixel_unshuffle(gg.arange(4.0).reshape(1, 1, 2, 2), 2).reshape(-1).tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    x, added = _batched("pixel_unshuffle", input, 4)
    r = _positive("pixel_unshuffle", "downscale_factor", downscale_factor)
    n, c, hr, wr = x.shape
    if hr % r or wr % r:
        raise ValueError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, got "
                         f"{(hr, wr)} and {r}")
    h, w = hr // r, wr // r
    t = x.reshape(n * c, h, r, w * r).permute(0, 2, 1, 3).reshape(n * c * r, h, w, r)     # [.., r1, h, w, r2]
    y = t.permute(0, 3, 1, 2).reshape(n, c * r * r, h, w)
    return _unbatch(y, added)


def _positive(name: str, key: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}: {key} must be a positive int, got {v!r}")
    return v

