"""Reshape, transpose/permute (results are contiguous copies, not aliases)."""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .build import permute, reshape
from .registry import define, op
from .shapes import check_ndim, numel


def _resolve_shape(a, shape) -> tuple:
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        rest = numel(tuple(s for s in shape if s != -1))
        if rest == 0 or numel(a.shape) % rest:
            raise ValueError(f"reshape: cannot reshape {a.shape} into {shape}")
        shape = tuple(numel(a.shape) // rest if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or numel(shape) != numel(a.shape):
        raise ValueError(f"reshape: cannot reshape {a.shape} ({numel(a.shape)} elements) into {shape}")
    check_ndim("reshape", shape)
    return shape


@define("reshape", infer=lambda a, shape: (_resolve_shape(a, shape), a.dtype),
        backward=lambda g, n: op.reshape(g, shape=n.inputs[0].shape))
def _reshape(ctx, nodes, inputs, out, shape):
    return lib.cont(ctx, reshape(ctx, nodes[0], out.shape))


def _infer_permute(a, axes):
    axes = tuple(axes)
    nd = a.ndim
    norm = [x % nd if isinstance(x, int) and not isinstance(x, bool) and -nd <= x < nd else -1 for x in axes] if nd else []
    if len(axes) != nd or sorted(norm) != list(range(nd)):
        raise ValueError(f"permute: axes {axes} are not a permutation of the {nd} dimensions of {a.shape}")
    axes = tuple(norm)
    return tuple(a.shape[i] for i in axes), a.dtype


def _inverse(axes):
    inv = [0] * len(axes)
    for i, x in enumerate(axes):
        inv[x % len(axes)] = i
    return tuple(inv)


@define("permute", infer=_infer_permute, backward=lambda g, n: op.permute(g, axes=_inverse(n.params["axes"])))
def _permute(ctx, nodes, inputs, out, axes):
    nd = inputs[0].ndim
    return lib.cont(ctx, permute(ctx, nodes[0], tuple(x % nd for x in axes)))


_ = float32
