"""The ops' public surfaces, generated from their declarations (``ops/decl.py``) at import.

For every registered op with an ``expose``, this module writes out, once:

- a ``Tensor`` method on :class:`OpMethods` (the mixin ``Tensor`` derives from),
- a ``gg.*`` function (:func:`functions`, star-imported by ``tensor/functional.py``),
- a ``gg.nn.functional`` entry (:func:`functional_entries`, used by ``nn/functional.py``).

Each is a real Python function with the public signature spelled out, calling the autograd
layer's ``apply`` directly: ``x.relu()`` costs one call less than a hand-written method that
went through ``op.relu``. Adding an op with an ``expose`` to any ``ops/*.py`` file is all it
takes to get its surfaces.

>>> import ggmlgrad as gg
>>> import inspect
>>> str(inspect.signature(gg.Tensor.softplus))
'(self, beta=1.0, threshold=20.0)'
"""
from __future__ import annotations

import inspect
import linecache
import os
from typing import Callable

from ..engine import int32
from ..ops.decl import FIRST_ARG, public_parameters
from ..ops.registry import REGISTRY, OpDef
from .int_reduce import int_reduce
from .tape import apply

_MODULES = {"method": "ggmlgrad.tensor.tensor", "function": "ggmlgrad", "functional": "ggmlgrad.nn.functional"}
_PREFIX = {"method": "Tensor.", "function": "", "functional": ""}


def _signature_source(params: list[inspect.Parameter]) -> tuple[str, str, dict]:
    """(parameter list after the tensor, the call's argument list, the defaults by global name)."""
    sig, call, defaults = [], [], {}
    star = False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star:
            sig.append("*")
            star = True
        text = p.name
        if p.default is not p.empty:
            defaults[f"_default_{p.name}"] = p.default
            text += f"=_default_{p.name}"
        sig.append(text)
        call.append(f"{p.name}={p.name}" if p.kind is p.KEYWORD_ONLY else p.name)
    return "".join(", " + s for s in sig), ", ".join(call), defaults


def _docstring(opdef: OpDef, kind: str) -> str:
    e = opdef.expose
    doc = e.doc or f"The {opdef.name} op."
    if e.example:
        doc += "\n\n>>> import ggmlgrad as gg\n" + e.example.strip()
    if kind == "method" and e.function:
        doc = f"Method form of ``gg.{e.function}``. " + doc
    return doc


def compile_function(source: str, name: str, namespace: dict, tag: str) -> Callable:
    """The function ``name`` defined by ``source`` with globals ``namespace``. Its file name lies inside
    the package, so error sites (engine user_site) skip its frames like any ggmlgrad frame, and
    linecache holds the source, so tracebacks show the generated line."""
    filename = os.path.join(os.path.dirname(__file__), f"<{tag}>")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[name]


def make_surface(opdef: OpDef, kind: str, name: str) -> Callable:
    """The ``kind`` surface ("method", "function" or "functional") of ``opdef``, named ``name``."""
    first = FIRST_ARG[kind]
    params = public_parameters(opdef.forward, opdef.expose.args)
    sig, call, defaults = _signature_source(params)
    if opdef.expose.args is not None:
        params_expr = f"_args({call})"
    else:
        params_expr = f"{{{', '.join(repr(p.name) + ': ' + p.name for p in params)}}}"
    if opdef.expose.host_int32:   # int32 exactly on the host, bool on the device (tensor/int_reduce.py)
        source = (f"def {name}({first}{sig}):\n    params = {params_expr}\n"
                  f"    if {first}.dtype is _int32 or {first}.dtype.is_bool:\n"
                  f"        return _int_reduce({opdef.name!r}, {first}, params['axis'], params['keepdim'])\n"
                  f"    return _apply(_opdef, ({first},), params)\n")
    else:
        source = f"def {name}({first}{sig}):\n    return _apply(_opdef, ({first},), {params_expr})\n"
    namespace = {"_apply": apply, "_opdef": opdef, "_args": opdef.expose.args, "_int32": int32,
                 "_int_reduce": int_reduce, **defaults}
    fn = compile_function(source, name, namespace, f"surface {kind} {name}")
    fn.__doc__ = _docstring(opdef, kind)
    fn.__module__ = _MODULES[kind]
    fn.__qualname__ = _PREFIX[kind] + name
    return fn


def surfaces(kind: str) -> dict[str, Callable]:
    """name → generated function, for every registered op exposed on ``kind``."""
    out: dict[str, Callable] = {}
    owner: dict[str, str] = {}
    for opdef in REGISTRY.values():
        name = opdef.expose.names().get(kind) if opdef.expose is not None else None
        if name is None:
            continue
        if name in out:
            raise RuntimeError(f"ops {owner[name]!r} and {opdef.name!r} both expose {kind} {name!r}")
        out[name], owner[name] = make_surface(opdef, kind, name), opdef.name
    return out


def _op_methods() -> type:
    """The mixin holding every op's generated ``Tensor`` method (no slots of its own)."""
    namespace = {"__slots__": (), "__module__": __name__,
                 "__doc__": "Tensor methods generated from the op declarations (ops/decl.py)."}
    namespace.update(surfaces("method"))
    return type("OpMethods", (), namespace)


OpMethods = _op_methods()


def functions() -> dict[str, Callable]:
    """The generated ``gg.*`` functions."""
    return surfaces("function")


def functional_entries() -> dict[str, Callable]:
    """The generated ``gg.nn.functional`` entries."""
    return surfaces("functional")
