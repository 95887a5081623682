"""What an op declares about its public surfaces: the names it is exposed under and their arguments.

An op is declared once, in its ``ops/*.py`` file, with :func:`.registry.define`: its name, its
validation and shape/dtype inference (``infer``: the dtype policy lives there), its ggml forward
builder, its backward (written with ops), and, for a public op, an :class:`Expose`:

- ``method``: the ``Tensor`` method name (``x.gelu()``),
- ``function``: the ``gg.*`` function name (``gg.gelu(x)``),
- ``functional``: the ``gg.nn.functional`` name (``F.gelu(input)``),
- ``args``: the public keyword arguments, as a plain function returning the op's parameters
  (``None``: the builder's own keyword parameters, same names and defaults),
- ``host_int32``: the int32 policy of the reductions: an int32 tensor is reduced exactly on the
  host (``tensor/int_reduce.py``, under the op's name) instead of by the op,
- ``doc`` and ``example``: the docstring of every surface (the example as a doctest).

The tensor layer generates the three surfaces from the registry when it is imported
(``tensor/surfaces.py``): each is a plain function that calls the autograd layer's ``apply``
directly, with the public signature written out (no ``*args`` wrapper on the hot path).

>>> from ggmlgrad.ops.registry import REGISTRY
>>> REGISTRY["gelu"].expose.functional
'gelu'
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Callable

#: The first parameter's name on each surface (``torch.nn.functional`` calls it ``input``).
FIRST_ARG = {"method": "self", "function": "x", "functional": "input"}


@dataclasses.dataclass(frozen=True)
class Expose:
    """The public names of one op (see the module docstring)."""

    method: str | None = None
    function: str | None = None
    functional: str | None = None
    args: Callable[..., dict] | None = None
    doc: str = ""
    example: str = ""
    host_int32: bool = False

    def names(self) -> dict[str, str]:
        """surface kind → public name, for the surfaces this op has."""
        return {k: v for k, v in (("method", self.method), ("function", self.function),
                                  ("functional", self.functional)) if v}


def expose(name: str, *surfaces: str, args: Callable[..., dict] | None = None, doc: str = "",
           example: str = "", host_int32: bool = False) -> Expose:
    """An :class:`Expose` giving ``name`` on each of ``surfaces`` ("method", "function",
    "nn.functional"), as most ops are named alike everywhere (``relu``, ``x.relu()``, ``F.relu``)."""
    kinds = {"method", "function", "nn.functional"}
    unknown = set(surfaces) - kinds
    if unknown:
        raise ValueError(f"expose {name!r}: unknown surfaces {sorted(unknown)} (known: {sorted(kinds)})")
    return Expose(method=name if "method" in surfaces else None,
                  function=name if "function" in surfaces else None,
                  functional=name if "nn.functional" in surfaces else None,
                  args=args, doc=doc, example=example, host_int32=host_int32)


def public_parameters(forward: Callable, args: Callable | None) -> list[inspect.Parameter]:
    """The public keyword parameters of an op: those of ``args`` when given, else the forward
    builder's parameters after ``(ctx, nodes, inputs, out)`` (a builder wrapped for merged rows
    is read through ``__wrapped__``)."""
    if args is not None:
        return list(inspect.signature(args).parameters.values())
    fn = getattr(forward, "__wrapped__", forward)
    params = list(inspect.signature(fn).parameters.values())
    return params[4:]
