"""Convolutions as ggml graph nodes: conv2d, conv_transpose2d, the weight gradient, and torch's
``unfold``/``fold`` (im2col / col2im). NCHW tensors and torch's weight layouts throughout:
conv2d ``(out, in/groups, kH, kW)``, conv_transpose2d ``(in, out/groups, kH, kW)``.

Routes (ggml 0.20.2's CPU kernels, read in its source):
- ``ggml_im2col`` copies the windows into rows of ``C*kH*kW`` (channel-major, torch's unfold order);
  zero padding, stride and dilation are its own parameters. It splits its work over input channels.
- the windows times the weight is one ``ggml_mul_mat`` (BLAS on the fast build), batched over
  groups; ``ggml_conv_2d_direct`` (its own tiled im2col + gemm) is used instead where it measured
  faster (see :data:`DIRECT_CONV`).
- ``ggml_im2col_back`` sums window rows back into an image: conv2d's input gradient, conv_transpose2d's
  forward and ``fold``. NOTE: its C kernel reads ``src[0]`` as the window gradient and ``src[1]``
  as the kernel (ggml.h's comments name them the other way round); the kernel is read for its shape only.
- the weight gradient is one ``ggml_out_prod`` of the windows and the output gradient.

conv2d's input gradient is conv_transpose2d and conv_transpose2d's is conv2d, and the weight
gradient's own gradients are conv2d and conv_transpose2d again, so convolutions differentiate to any
order (``create_graph=True``).
"""
from __future__ import annotations

from .._ggml import consts, lib
from .._ggml.api import im2col_back
from ..engine import float32
from ..runtime.device import ACCELERATORS
from . import fast_math
from .build import owned, reshape, shape_only
from .registry import define, op, same_device, same_float
from .shapes import numel

#: Use ggml_conv_2d_direct for groups == 1 forwards of at least this many output elements (0: never).
#: Measured on the 2-core VM (1 thread, CPU time, 64x1x28x28 -> 32 and 64x32x13x13 -> 64, 3x3): the
#: same time as im2col + product within the noise, so the im2col route (groups, one code path) is used.
DIRECT_CONV = 0


# ---------------------------------------------------------------- argument checks (shared with pool.py)
def int_pair(name: str, key: str, v, minimum: int) -> tuple[int, int]:
    """``v`` (an int or a pair of ints) as a pair, each at least ``minimum``; else a ValueError/TypeError."""
    pair = (v, v) if isinstance(v, int) and not isinstance(v, bool) else v
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or any(
            isinstance(a, bool) or not isinstance(a, int) for a in pair):
        raise TypeError(f"{name}: {key} must be an int or a pair of ints, got {v!r}")
    if any(a < minimum for a in pair):
        raise ValueError(f"{name}: {key} must be >= {minimum}, got {v!r}")
    return int(pair[0]), int(pair[1])


def check_groups(name: str, groups) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive int, got {groups!r}")
    return groups


def conv_out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _no_empty(name: str, *xs) -> None:
    for x in xs:
        if numel(x.shape) == 0:
            raise ValueError(f"{name}: empty tensors are not supported (got shape {x.shape})")


def _image(name: str, x, what: str = "input") -> None:
    if x.ndim != 4:
        raise ValueError(f"{name}: expected a 4-D {what} (N, C, H, W), got shape {x.shape}")


def _conv_out_hw(name, h, w, kh, kw, stride, padding, dilation) -> tuple[int, int]:
    oh = conv_out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = conv_out_size(w, kw, stride[1], padding[1], dilation[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"{name}: the padded input ({h + 2 * padding[0]}, {w + 2 * padding[1]}) is smaller than "
                         f"the dilated kernel ({dilation[0] * (kh - 1) + 1}, {dilation[1] * (kw - 1) + 1})")
    return oh, ow


def _geometry(name, stride, padding, dilation):
    return (int_pair(name, "stride", stride, 1), int_pair(name, "padding", padding, 0),
            int_pair(name, "dilation", dilation, 1))


def _check_bias(name: str, bias, channels: int) -> None:
    if bias and tuple(bias[0].shape) != (channels,):
        raise ValueError(f"{name}: bias must have shape ({channels},), got {bias[0].shape}")
    if len(bias) > 1:
        raise TypeError(f"{name}: at most one bias")


# ---------------------------------------------------------------- ggml building blocks
def _contiguous(ctx, node: int) -> int:
    return node if lib.is_contiguous(node) else lib.cont(ctx, node)


def windows(ctx, x: int, c: int, kh: int, kw: int, stride, padding, dilation) -> int:
    """ggml_im2col of the contiguous image ``x`` ([W, H, C, N]): [C*kH*kW, OW, OH, N], float32."""
    kernel = shape_only(ctx, (1, c, kh, kw))          # read for its shape only
    return lib.im2col(ctx, kernel, _contiguous(ctx, x), stride[1], stride[0], padding[1], padding[0],
                      dilation[1], dilation[0], True, consts.TYPE_F32)


def unwindows(ctx, cols: int, image_shape: tuple, kh: int, kw: int, stride, padding, dilation) -> int:
    """ggml_im2col_back: the window rows ``cols`` ([C*kH*kW, OW, OH, N], contiguous) summed into an
    image of NumPy ``image_shape`` (N, C, H, W)."""
    n, c, h, w = image_shape
    kernel = shape_only(ctx, (1, 1, kh, kw))
    return im2col_back(ctx, _contiguous(ctx, cols), kernel, (w, h, c, n), stride[1], stride[0],
                           padding[1], padding[0], dilation[1], dilation[0], True)


def _add_channel_bias(ctx, node: int, bias: int, shape: tuple) -> int:
    """``node`` (NCHW ``shape``) plus one bias value per channel: the bias spread over one image's
    planes first (small), so the add runs on whole rows (a broadcast along rows is ggml's slow path)."""
    n, c, h, w = shape
    planes = lib.repeat_4d(ctx, lib.reshape_2d(ctx, bias, 1, c), h * w, c, 1, 1)        # [H*W, C]
    return lib.add(ctx, lib.reshape_3d(ctx, node, h * w, c, n), planes)


# ---------------------------------------------------------------- conv2d
def _infer_conv2d(x, w, *bias, stride=1, padding=0, dilation=1, groups=1):
    name = "conv2d"
    same_device(name, x, w, *bias)
    same_float(name, x, w, *bias)
    _image(name, x)
    _no_empty(name, x, w)
    shape = conv2d_shape(name, x.shape, w.shape, stride, padding, dilation, groups)
    _check_bias(name, bias, w.shape[0])
    return shape, float32


def conv2d_shape(name: str, xs: tuple, ws: tuple, stride, padding, dilation, groups) -> tuple:
    """conv2d's output shape for input shape ``xs`` and weight shape ``ws``; bad arguments raise."""
    if len(ws) != 4:
        raise ValueError(f"{name}: weight must be 4-D (out_channels, in_channels/groups, kH, kW), got {ws}")
    stride, padding, dilation = _geometry(name, stride, padding, dilation)
    groups = check_groups(name, groups)
    n, c, h, wd = xs
    o, cg, kh, kw = ws
    if c != cg * groups:
        raise ValueError(f"{name}: input {xs} has {c} channels, but weight {ws} with groups={groups} "
                         f"expects {cg * groups}")
    if o % groups:
        raise ValueError(f"{name}: out_channels {o} (weight {ws}) is not divisible by groups={groups}")
    oh, ow = _conv_out_hw(name, h, wd, kh, kw, stride, padding, dilation)
    return (n, o, oh, ow)


def _conv2d_backward(g, n):
    x, w = n.inputs[:2]
    p = n.params
    stride, padding, dilation = _geometry("conv2d", p.get("stride", 1), p.get("padding", 0), p.get("dilation", 1))
    groups = p.get("groups", 1)
    gx = gw = None
    if x.requires_grad:
        natural = [(g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w.shape[2 + i] - 1) + 1
                   for i in range(2)]
        extra = (x.shape[2] - natural[0], x.shape[3] - natural[1])
        gx = op.conv_transpose2d(g, w, stride=stride, padding=padding, output_padding=extra, dilation=dilation,
                                 groups=groups)
    if w.requires_grad:
        gw = op.conv2d_weight_grad(g, x, weight_shape=tuple(w.shape), stride=stride, padding=padding,
                                   dilation=dilation, groups=groups)
    grads = (gx, gw)
    if len(n.inputs) == 3:
        grads += (channel_sums(g) if n.inputs[2].requires_grad else None,)
    return grads


def channel_sums(g):
    """Per channel the sum of an NCHW gradient (the bias gradient): rows of whole planes first,
    then the small (N, C) table (one sum over axes (0, 2, 3) permutes the whole tensor first)."""
    n, c, h, w = g.shape
    return op.sum(op.sum(op.reshape(g, shape=(n, c, h * w)), axis=2), axis=0)


def _conv2d_work(x, w, *bias, stride=1, padding=0, dilation=1, groups=1):
    out, _ = _infer_conv2d(x, w, *bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return 2.0 * numel(out) * numel(w.shape[1:])


@define("conv2d", saves=((0, 1), (1, 0)), infer=_infer_conv2d, backward=_conv2d_backward, work=_conv2d_work)
def _conv2d(ctx, nodes, inputs, out, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of (N, C, H, W) with (O, C/groups, kH, kW), zero padding: im2col + mul_mat."""
    x, w = inputs[:2]
    stride, padding, dilation = _geometry("conv2d", stride, padding, dilation)
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2:]
    if DIRECT_CONV and groups == 1 and numel(out.shape) >= DIRECT_CONV:
        r = lib.conv_2d_direct(ctx, nodes[1], _contiguous(ctx, nodes[0]), stride[1], stride[0], padding[1],
                               padding[0], dilation[1], dilation[0])
    else:
        cols = windows(ctx, nodes[0], c, kh, kw, stride, padding, dilation)      # [C*K, OW, OH, N]
        r = _windows_times_weight(ctx, cols, nodes[1], o, cg * kh * kw, oh * ow, n, groups)
    if len(nodes) == 3:
        r = _add_channel_bias(ctx, r, nodes[2], out.shape)
    return owned(ctx, r, out.shape)


def product(ctx, w: int, x: int, k: int, rows: int) -> int:
    """x @ w^T of 2-D float32 ggml matrices w [k, N], x [k, rows] (ggml_mul_mat(w, x)): linear's small
    product kernels where they apply (ggml's own product calls a dot per output for a short k)."""
    r = fast_math.linear_product(ctx, w, x, k, rows) if fast_math.LINEAR_KERNELS else 0
    return r or lib.mul_mat(ctx, w, x)


def _windows_times_weight(ctx, cols, w, o: int, cgk: int, spots: int, n: int, groups: int) -> int:
    """Per group the windows [cgk, spots] of each image times its weights [cgk, O/groups]: one
    batched mul_mat ([O/g, spots, g, N]) made NCHW ([spots, O, N]) by one permuted copy."""
    og = o // groups
    if groups == 1:
        # the windows as the product's first operand: [spots*N, O], each image's channel planes whole
        # rows, so the NCHW order is one copy of whole rows (ggml copies a transposed tensor element
        # by element: 5 ms for this layer's 1.4M outputs, the product itself ~1 ms)
        r = product(ctx, lib.reshape_2d(ctx, cols, cgk, spots * n), lib.reshape_2d(ctx, w, cgk, o), cgk, o)
        if n == 1:
            return r
        return lib.cont(ctx, lib.permute(ctx, lib.reshape_3d(ctx, r, spots, n, o), 0, 2, 1, 3))    # [spots, O, N]
    cols4 = lib.cont(ctx, lib.permute(ctx, lib.reshape_4d(ctx, cols, cgk, groups, spots, n), 0, 2, 1, 3))
    r = lib.mul_mat(ctx, lib.reshape_4d(ctx, w, cgk, og, groups, 1), cols4)                       # [og, spots, G, N]
    return lib.reshape_3d(ctx, lib.cont(ctx, lib.permute(ctx, r, 1, 0, 2, 3)), spots, o, n)


# ---------------------------------------------------------------- conv2d's weight gradient
def _infer_weight_grad(g, x, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    name = "conv2d_weight_grad"
    same_device(name, g, x)
    same_float(name, g, x)
    _image(name, x)
    _image(name, g, "gradient")
    weight_shape = tuple(int(v) for v in weight_shape)
    want = conv2d_shape(name, tuple(x.shape), weight_shape, stride, padding, dilation, groups)
    if tuple(g.shape) != want:
        raise ValueError(f"{name}: gradient {g.shape} does not match the convolution output {want}")
    return weight_shape, float32


def _weight_grad_backward(gw, n):
    """conv2d_weight_grad is bilinear in (g, x): with G the upstream gradient (weight-shaped),
    d<G, Wg>/dg = conv2d(x, G) and d<G, Wg>/dx = conv_transpose2d(g, G) (what double backward
    through a convolution, e.g. a gradient penalty, needs)."""
    g, x = n.inputs
    p = n.params
    stride, padding, dilation = _geometry("conv2d", p.get("stride", 1), p.get("padding", 0), p.get("dilation", 1))
    groups = p.get("groups", 1)
    dg = op.conv2d(x, gw, stride=stride, padding=padding, dilation=dilation, groups=groups) if g.requires_grad else None
    dx = None
    if x.requires_grad:
        natural = [(g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (gw.shape[2 + i] - 1) + 1
                   for i in range(2)]
        extra = (x.shape[2] - natural[0], x.shape[3] - natural[1])
        dx = op.conv_transpose2d(g, gw, stride=stride, padding=padding, output_padding=extra, dilation=dilation,
                                 groups=groups)
    return dg, dx


@define("conv2d_weight_grad", infer=_infer_weight_grad, backward=_weight_grad_backward,
        work=lambda g, x, weight_shape, **p: 2.0 * numel(g.shape) * numel(tuple(weight_shape)[1:]))
def _conv2d_weight_grad(ctx, nodes, inputs, out, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """dL/dW of conv2d: sum over images and positions of windows x output gradient (one out_prod)."""
    g, x = inputs
    stride, padding, dilation = _geometry("conv2d", stride, padding, dilation)
    n, c = x.shape[:2]
    o, cg, kh, kw = weight_shape
    spots = g.shape[2] * g.shape[3]
    cgk = cg * kh * kw
    cols = windows(ctx, nodes[1], c, kh, kw, stride, padding, dilation)              # [C*K, OW, OH, N]
    if groups == 1:
        # one product summing over every position of every image: both operands with positions
        # innermost (ggml's out_prod over 40k positions ran 20x slower than this mul_mat)
        gt = lib.cont(ctx, lib.permute(ctx, lib.reshape_3d(ctx, nodes[0], spots, o, n), 0, 2, 1, 3))  # [spots, N, O]
        if ACCELERATORS:   # BLAS takes out_prod of a transposed operand (sgemm): 2x the mul_mat route here
            r = lib.out_prod(ctx, lib.reshape_2d(ctx, cols, cgk, spots * n),
                             lib.transpose(ctx, lib.reshape_2d(ctx, gt, spots * n, o)))
        else:
            ct = lib.cont(ctx, lib.transpose(ctx, lib.reshape_2d(ctx, cols, cgk, spots * n)))        # [spots*N, cgk]
            r = lib.mul_mat(ctx, ct, lib.reshape_2d(ctx, gt, spots * n, o))                           # [cgk, O]
    else:
        og = o // groups
        a = lib.cont(ctx, lib.permute(ctx, lib.reshape_4d(ctx, cols, cgk, groups, spots, n), 0, 3, 1, 2))
        b = lib.cont(ctx, lib.permute(ctx, lib.reshape_4d(ctx, nodes[0], spots, og, groups, n), 1, 0, 3, 2))
        r = lib.out_prod(ctx, lib.reshape_3d(ctx, a, cgk, spots * n, groups),
                         lib.reshape_3d(ctx, b, og, spots * n, groups))                  # [cgk, og, G]
    return owned(ctx, r, out.shape)


# ---------------------------------------------------------------- conv_transpose2d
def _infer_conv_transpose2d(x, w, *bias, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    name = "conv_transpose2d"
    same_device(name, x, w, *bias)
    same_float(name, x, w, *bias)
    _image(name, x)
    if w.ndim != 4:
        raise ValueError(f"{name}: weight must be 4-D (in_channels, out_channels/groups, kH, kW), got {w.shape}")
    _no_empty(name, x, w)
    stride, padding, dilation = _geometry(name, stride, padding, dilation)
    extra = int_pair(name, "output_padding", output_padding, 0)
    groups = check_groups(name, groups)
    n, c, h, wd = x.shape
    ci, cog, kh, kw = w.shape
    if c != ci:
        raise ValueError(f"{name}: input {x.shape} has {c} channels, but weight {w.shape} expects {ci}")
    if ci % groups:
        raise ValueError(f"{name}: in_channels {ci} is not divisible by groups={groups}")
    for i in range(2):
        if extra[i] >= stride[i] and extra[i] >= dilation[i]:
            raise ValueError(f"{name}: output_padding {extra} must be smaller than either stride {stride} "
                             f"or dilation {dilation}")
    _check_bias(name, bias, cog * groups)
    size = [(s - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + extra[i] + 1
            for i, (s, k) in enumerate(((h, kh), (wd, kw)))]
    if min(size) < 1:
        raise ValueError(f"{name}: the output size {tuple(size)} is not positive (input {x.shape}, weight {w.shape}, "
                         f"padding {padding})")
    return (n, cog * groups, size[0], size[1]), float32


def _conv_transpose2d_backward(g, n):
    x, w = n.inputs[:2]
    p = n.params
    geo = dict(stride=p.get("stride", 1), padding=p.get("padding", 0), dilation=p.get("dilation", 1),
               groups=p.get("groups", 1))
    gx = op.conv2d(g, w, **geo) if x.requires_grad else None
    gw = op.conv2d_weight_grad(x, g, weight_shape=tuple(w.shape), **geo) if w.requires_grad else None
    grads = (gx, gw)
    if len(n.inputs) == 3:
        grads += (channel_sums(g) if n.inputs[2].requires_grad else None,)
    return grads


@define("conv_transpose2d", saves=((0, 1), (1, 0)), infer=_infer_conv_transpose2d,
        backward=_conv_transpose2d_backward,
        work=lambda x, w, *b, **p: 2.0 * numel(x.shape) * numel(w.shape[1:]))
def _conv_transpose2d(ctx, nodes, inputs, out, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """The adjoint of conv2d: per group the input times the weight ([cog*K, H*W] rows, one out_prod),
    summed into the output image by im2col_back (col2im)."""
    x, w = inputs[:2]
    stride, padding, dilation = _geometry("conv_transpose2d", stride, padding, dilation)
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    spots, cig, cogk = h * wd, ci // groups, cog * kh * kw
    if groups == 1 and ACCELERATORS:   # BLAS out_prod; the input's planes stay whole rows (a row copy)
        xr = lib.cont(ctx, lib.permute(ctx, lib.reshape_3d(ctx, nodes[0], spots, cig, n), 0, 2, 1, 3))  # [spots, N, cig]
        cols = lib.out_prod(ctx, lib.reshape_2d(ctx, nodes[1], cogk, cig), lib.reshape_2d(ctx, xr, spots * n, cig))
        cols = lib.reshape_2d(ctx, cols, cogk, spots * n)                                               # [cogk, spots*N]
    elif groups == 1:   # one product: channels innermost in both operands
        xt = lib.cont(ctx, lib.permute(ctx, lib.reshape_3d(ctx, nodes[0], spots, cig, n), 1, 0, 2, 3))  # [cig, spots, N]
        wt = lib.cont(ctx, lib.transpose(ctx, lib.reshape_2d(ctx, nodes[1], cogk, cig)))                 # [cig, cogk]
        cols = product(ctx, wt, lib.reshape_2d(ctx, xt, cig, spots * n), cig, spots * n)                 # [cogk, spots*N]
    else:
        xs = lib.reshape_4d(ctx, _contiguous(ctx, nodes[0]), spots, cig, groups, n)
        cols = lib.out_prod(ctx, lib.reshape_4d(ctx, nodes[1], cogk, cig, groups, 1), xs)  # [cogk, spots, G, N]
        cols = lib.cont(ctx, lib.permute(ctx, cols, 0, 2, 1, 3))                           # [cogk, G, spots, N]
    cols = lib.reshape_4d(ctx, cols, cogk * groups, wd, h, n)
    r = unwindows(ctx, cols, out.shape, kh, kw, stride, padding, dilation)
    if len(nodes) == 3:
        r = _add_channel_bias(ctx, r, nodes[2], out.shape)
    return owned(ctx, r, out.shape)


# ---------------------------------------------------------------- unfold / fold (torch.nn.functional names)
def _infer_unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    name = "unfold"
    same_float(name, x)
    _image(name, x)
    _no_empty(name, x)
    k = int_pair(name, "kernel_size", kernel_size, 1)
    stride, padding, dilation = _geometry(name, stride, padding, dilation)
    n, c, h, w = x.shape
    oh, ow = _conv_out_hw(name, h, w, k[0], k[1], stride, padding, dilation)
    return (n, c * k[0] * k[1], oh * ow), float32


def _unfold_backward(g, n):
    x = n.inputs[0]
    return op.fold(g, output_size=tuple(x.shape[2:]), **n.params)


@define("unfold", saves=(), infer=_infer_unfold, backward=_unfold_backward)
def _unfold(ctx, nodes, inputs, out, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding windows of (N, C, H, W) as columns (N, C*kH*kW, L): ggml_im2col, transposed."""
    x = inputs[0]
    k = int_pair("unfold", "kernel_size", kernel_size, 1)
    stride, padding, dilation = _geometry("unfold", stride, padding, dilation)
    cols = windows(ctx, nodes[0], x.shape[1], k[0], k[1], stride, padding, dilation)   # [CK, OW, OH, N]
    ck, spots = out.shape[1], out.shape[2]
    return lib.cont(ctx, lib.permute(ctx, lib.reshape_3d(ctx, cols, ck, spots, x.shape[0]), 1, 0, 2, 3))


def _infer_fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
    name = "fold"
    same_float(name, cols)
    if cols.ndim != 3:
        raise ValueError(f"fold: expected a 3-D input (N, C*kH*kW, L), got shape {cols.shape}")
    _no_empty(name, cols)
    size = int_pair(name, "output_size", output_size, 1)
    k = int_pair(name, "kernel_size", kernel_size, 1)
    stride, padding, dilation = _geometry(name, stride, padding, dilation)
    n, ck, spots = cols.shape
    if ck % (k[0] * k[1]):
        raise ValueError(f"fold: expected size of input's dimension 1 ({ck}) to be divisible by the product of "
                         f"kernel_size {k}")
    oh, ow = _conv_out_hw(name, size[0], size[1], k[0], k[1], stride, padding, dilation)
    if oh * ow != spots:
        raise ValueError(f"fold: given output_size={size}, kernel_size={k}, dilation={dilation}, padding={padding}, "
                         f"stride={stride}, expected size of input's dimension 2 to match the calculated number of "
                         f"sliding blocks {oh} * {ow} = {oh * ow}, but got {spots}")
    return (n, ck // (k[0] * k[1]), size[0], size[1]), float32


@define("fold", saves=(), infer=_infer_fold,
        backward=lambda g, n: op.unfold(g, **{k: v for k, v in n.params.items() if k != "output_size"}))
def _fold(ctx, nodes, inputs, out, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Columns (N, C*kH*kW, L) summed back into (N, C, H, W): ggml_im2col_back of the transposed columns."""
    n, ck, spots = inputs[0].shape
    k = int_pair("fold", "kernel_size", kernel_size, 1)
    stride, padding, dilation = _geometry("fold", stride, padding, dilation)
    cols = lib.cont(ctx, lib.permute(ctx, reshape(ctx, nodes[0], (n, ck, spots)), 1, 0, 2, 3))   # [CK, L, N]
    oh, ow = _conv_out_hw("fold", out.shape[2], out.shape[3], k[0], k[1], stride, padding, dilation)
    cols = lib.reshape_4d(ctx, cols, ck, ow, oh, n)
    return unwindows(ctx, cols, out.shape, k[0], k[1], stride, padding, dilation)

