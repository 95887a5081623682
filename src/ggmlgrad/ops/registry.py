"""The op registry: one definition per op, iterated by the tests.

An :class:`OpDef` holds, for one op:
- ``infer(*inputs, **params) -> (shape, dtype)``: validation and shape inference
  in Python; it raises ``ValueError``/``TypeError`` naming the op, so bad input
  never reaches ggml (a ggml assertion aborts the whole process);
- ``forward(ctx, nodes, inputs, out, **params) -> node``: the ggml node builder;
- ``backward(g, saved) -> grads``: the gradient rule, itself built from ops, so
  gradients are ggml nodes in the same queue. Grads may come back in the
  broadcast shape; autograd reduces them to each input's shape.

``op.NAME(...)`` dispatches through the autograd layer (installed at import by
``ggmlgrad.autograd``), which is how backward rules call other ops without this
layer importing the one above it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..engine import Array, DType, float32
from .build import row_merged
from .decl import Expose


@dataclasses.dataclass
class OpDef:
    name: str
    infer: Callable[..., tuple[tuple, DType]]
    forward: Callable[..., int]
    backward: Callable[..., tuple] | None = None
    work: Callable[..., float] | None = None       # flops estimate for the thread policy
    save_output: bool = False                       # backward reads the op's output
    n_tensor_inputs: int | None = None              # None: every positional input is a tensor
    differentiable: bool = True
    doc: str = ""
    expose: Expose | None = None                    # its public surfaces (ops/decl.py); None: internal


REGISTRY: dict[str, OpDef] = {}


def define(name: str, *, infer, backward=None, work=None, save_output=False, differentiable=True, doc="",
           elementwise=False, expose: Expose | None = None):
    """Decorator registering ``forward`` under ``name``.

    ``expose``: the op's public names and arguments (:class:`.decl.Expose`); the tensor layer
    generates its ``Tensor`` method, ``gg.*`` function and ``nn.functional`` entry from it.

    ``elementwise``: the builder treats every element alike once its tensor inputs have the
    result's shape, so such calls are built on merged rows (:func:`.build.row_merged`). The
    decorated function itself stays as written (other builders call it directly)."""
    def deco(forward):
        if name in REGISTRY:
            raise RuntimeError(f"op {name!r} defined twice")
        REGISTRY[name] = OpDef(name, infer, row_merged(forward) if elementwise else forward, backward, work,
                               save_output, differentiable=differentiable, doc=doc or (forward.__doc__ or ""),
                               expose=expose)
        return forward
    return deco


class _Dispatcher:
    """``op.add(a, b)`` → the autograd layer's apply(REGISTRY['add'], a, b)."""

    apply: Callable[..., Any] | None = None

    def __getattr__(self, name: str):
        opdef = REGISTRY.get(name)
        if opdef is None:
            raise AttributeError(f"no op named {name!r}")
        apply = type(self).apply
        if apply is None:
            raise RuntimeError("ggmlgrad internal: op dispatch used before the autograd layer was imported")

        def call(*inputs, **params):
            return apply(opdef, inputs, params)
        call.__name__ = name
        self.__dict__[name] = call  # cached: __getattr__ (and a new closure) only on the first use (~1 us/op)
        return call


op = _Dispatcher()


def _non_tensor(opname: str, xs) -> TypeError | None:
    """A clear TypeError when an input is not a tensor (a NumPy array: its ``.dtype``/``.device``
    are NumPy's, ``"cpu"`` a string in NumPy 2). Called on error paths only, never per op."""
    for x in xs:
        if not isinstance(x, Array):
            return TypeError(f"{opname}: expected a Tensor, got {type(x).__module__}.{type(x).__name__} "
                             f"(convert it with gg.tensor(x); as in PyTorch, ops and modules take tensors)")
    return None


def same_float(opname: str, *xs) -> DType:
    """All inputs float32 (the compute dtype) → float32; else a TypeError naming the op."""
    for x in xs:
        if x.dtype is not float32:
            err = _non_tensor(opname, xs)
            if err is not None:
                raise err
            shapes = ", ".join(f"{tuple(y.shape)}:{y.dtype.name}" for y in xs)
            raise TypeError(f"{opname}: expected float32 tensors, got {shapes} "
                            f"(cast with .float() / .to('float32'))")
    return float32


def same_device(opname: str, *xs) -> None:
    d = xs[0].device
    for x in xs[1:]:
        if x.device is not d:
            err = _non_tensor(opname, xs)
            if err is not None:
                raise err
            raise ValueError(f"{opname}: tensors are on different devices ({d.name} and {x.device.name})")
