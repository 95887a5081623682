"""Reductions over all or given axes, with keepdim."""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .build import expand, reshape, sum_to
from .registry import define, op, same_float
from .shapes import norm_axes, numel


def _kept(shape: tuple, axes: tuple) -> tuple:
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _reduced_shape(shape, axes, keepdim):
    return _kept(shape, axes) if keepdim else tuple(s for i, s in enumerate(shape) if i not in axes)


def _infer_reduce(name):
    def infer(a, axis=None, keepdim=False):
        same_float(name, a)
        if not isinstance(keepdim, bool):
            raise TypeError(f"{name}: keepdim must be a bool, got {keepdim!r}")
        axes = norm_axes(name, axis, a.ndim)
        if numel(a.shape) == 0 and name in ("max", "min"):
            raise ValueError(f"{name}: cannot reduce an empty tensor of shape {a.shape}")
        return _reduced_shape(a.shape, axes, keepdim), float32
    return infer


def _sum_node(ctx, node, shape, axes, out_shape):
    r = sum_to(ctx, node, shape, _kept(shape, axes))
    return lib.cont(ctx, reshape(ctx, r, out_shape)) if r is not node else lib.cont(ctx, node)


def _grad_expand(g, n):
    """Gradient of a reduction broadcast back to the input's shape."""
    x = n.inputs[0]
    axes = norm_axes("", n.params.get("axis"), x.ndim)
    return op.expand_as(op.reshape(g, shape=_kept(x.shape, axes)), x)


@define("sum", infer=_infer_reduce("sum"), backward=_grad_expand)
def _sum(ctx, nodes, inputs, out, axis=None, keepdim=False):
    a = inputs[0]
    return _sum_node(ctx, nodes[0], a.shape, norm_axes("sum", axis, a.ndim), out.shape)


def _mean_backward(g, n):
    x = n.inputs[0]
    axes = norm_axes("", n.params.get("axis"), x.ndim)
    cnt = numel(tuple(x.shape[i] for i in axes))
    return op.scale(_grad_expand(g, n), c=1.0 / max(cnt, 1))


@define("mean", infer=_infer_reduce("mean"), backward=_mean_backward)
def _mean(ctx, nodes, inputs, out, axis=None, keepdim=False):
    a = inputs[0]
    axes = norm_axes("mean", axis, a.ndim)
    cnt = numel(tuple(a.shape[i] for i in axes))
    s = sum_to(ctx, nodes[0], a.shape, _kept(a.shape, axes))
    return lib.cont(ctx, reshape(ctx, lib.scale(ctx, s, 1.0 / max(cnt, 1)), out.shape))


@define("expand_as", infer=lambda a, like: (like.shape, a.dtype),
        backward=lambda g, n: (op.sum_to_shape(g, shape=n.inputs[0].shape), None))
def _expand_as(ctx, nodes, inputs, out):
    a = inputs[0]
    src = nodes[0]
    if len(a.shape) != len(out.shape):
        src = reshape(ctx, src, (1,) * (len(out.shape) - len(a.shape)) + tuple(a.shape))
    r = expand(ctx, src, out.shape if a.shape == out.shape else (0,), out.shape)
    return lib.cont(ctx, r) if r is src or r is nodes[0] else r


def _infer_sum_to(a, shape):
    shape = tuple(shape)
    if len(shape) > a.ndim or any(s not in (1, d) for s, d in zip(shape[::-1], a.shape[::-1])):
        raise ValueError(f"sum_to_shape: cannot reduce {a.shape} to {shape}")
    return shape, a.dtype


@define("sum_to_shape", infer=_infer_sum_to, backward=lambda g, n: op.expand_as(g, n.inputs[0]))
def _sum_to_shape(ctx, nodes, inputs, out, shape):
    a = inputs[0]
    full = (1,) * (a.ndim - len(shape)) + tuple(shape)
    r = sum_to(ctx, nodes[0], a.shape, full)
    return lib.cont(ctx, reshape(ctx, r, tuple(shape)))
