"""The ops' public surfaces, generated from their declarations (``ops/decl.py``) at import.

For every registered op with an ``expose``, this module writes out, once:

- a ``Tensor`` method on :class:`OpMethods` (the mixin ``Tensor`` derives from),
- a ``gg.*`` function (:func:`functions`, star-imported by ``tensor/functional.py``),
- a ``gg.nn.functional`` entry (:func:`functional_entries`, used by ``nn/functional.py``).

Each is a real Python function with the public signature spelled out, calling the autograd
layer's ``apply`` directly: ``x.relu()`` costs one call less than a hand-written method that
went through ``op.relu``. Adding an op with an ``expose`` to any ``ops/*.py`` file is all it
takes to get its surfaces.

Front ends that dispatch over several ops (``add``: scalar, int32 and bool paths; ``max``: three
call forms; the view-returning shape methods; losses) are declared once with
:func:`..ops.decl.public`; :func:`install` puts each on ``Tensor`` (methods and operators),
``gg`` and ``gg.nn.functional`` under its declared names: the function itself (no wrapper), or
for a reflected operator one generated call (``__radd__(self, other)`` → ``add(other, self)``).
:data:`INSTALLED` records every surface installed, so a test can check that no public name is
written by hand.

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
from ..ops.decl import FIRST_ARG, PUBLIC, Public, public_parameters
from ..ops.registry import REGISTRY, OpDef, _non_tensor
from . import call_plans
from .int_reduce import int_reduce
from .tape import apply

_MODULES = {"method": "ggmlgrad.tensor.tensor", "function": "ggmlgrad", "functional": "ggmlgrad.nn.functional"}
_PREFIX = {"method": "Tensor.", "function": "", "functional": ""}


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


def _indent(text: str) -> str:
    return "".join("    " + line + "\n" for line in text.splitlines())


def refuse_non_tensor(name: str, x) -> None:
    """Raise torch's TypeError when the tensor argument of ``gg.name`` is not a Tensor (an array,
    a list, a number: torch.sum(ndarray) raises TypeError too); return when it is one.

    >>> refuse_non_tensor("sum", [1.0])
    Traceback (most recent call last):
    ...
    TypeError: sum: expected a Tensor, got builtins.list (convert it with gg.tensor(x); as in PyTorch, ops and modules take tensors)
    """
    err = _non_tensor(name, (x,))
    if err is not None:
        raise err


def make_surface(opdef: OpDef, kind: str, name: str) -> Callable:
    """The ``kind`` surface ("method", "function" or "functional") of ``opdef``, named ``name``."""
    first = FIRST_ARG[kind]
    params = public_parameters(opdef.forward, opdef.expose.args)
    sig, call, defaults = call_plans.signature_source(params)
    args_fn = opdef.expose.args
    if args_fn is not None:
        params_expr = f"_args({call})"
    else:
        params_expr = f"{{{', '.join(repr(p.name) + ': ' + p.name for p in params)}}}"
    # An args function that may warn (softmax's without dim) runs on every call, call plan or not.
    head = ""
    if args_fn is not None and args_fn not in call_plans.PURE_ARGS:
        head, params_expr = f"params = {params_expr}\n", "params"

    def body(ret: str) -> str:
        """The ordinary body, its results given to ``ret`` ("return " or an assignment)."""
        if opdef.expose.host_int32:   # int32 exactly on the host, bool on the device (tensor/int_reduce.py)
            text = ((f"params = {params_expr}\n" if params_expr != "params" else "") +
                    f"if {first}.dtype is _int32 or {first}.dtype.is_bool:\n"
                    f"    {ret}_int_reduce({opdef.name!r}, {first}, params['axis'], params['keepdim'])\n"
                    f"else:\n    {ret}_apply(_opdef, ({first},), params)\n")
        else:
            text = f"{ret}_apply(_opdef, ({first},), {params_expr})\n"
        if kind != "method":   # gg.sum([1.0]) / gg.sum(ndarray): torch's TypeError, not an AttributeError (error path only)
            text = (f"try:\n{_indent(text)}except AttributeError:\n"
                    f"    _refuse_non_tensor({name!r}, {first})\n    raise\n")
        return text
    namespace = {"_apply": apply, "_opdef": opdef, "_args": args_fn, "_int32": int32,
                 "_int_reduce": int_reduce, "_refuse_non_tensor": refuse_non_tensor, **defaults}
    if opdef.expose.call_plan:   # eager call plans (tensor/call_plans.py)
        all_params = [inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD)] + params
        text = head + call_plans.plan_source(all_params, True, body,
                                             guard=f"_ON and (type({first}) is _T or type({first}) in _TT)")
        namespace = call_plans.surface_namespace(f"{kind} {name}", namespace)
    else:
        text = head + body("return ")
    source = f"def {name}({first}{sig}):\n{_indent(text)}"
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
        for name in _op_names(opdef, kind):
            if name in out:
                raise RuntimeError(f"ops {owner[name]!r} and {opdef.name!r} both expose {kind} {name!r}")
            out[name], owner[name] = make_surface(opdef, kind, name), opdef.name
    return out


def _op_names(opdef: OpDef, kind: str) -> tuple[str, ...]:
    """The names ``opdef`` is exposed under on ``kind`` (a method's operator aliases included)."""
    e = opdef.expose
    if e is None:
        return ()
    name = e.names().get(kind)
    return ((name,) if name else ()) + (e.dunder if kind == "method" else ())


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


# ---------------------------------------------------------------------- public front ends (ops/decl.py: public)
#: (kind, name) → the installed surface, kind "method" (Tensor methods and operators), "function"
#: (gg.*) or "functional" (gg.nn.functional); every one comes from a declaration.
INSTALLED: dict[tuple[str, str], Callable] = {}


def rebound_method(fn: Callable, name: str, self_at: int) -> Callable:
    """``name(self, <fn's other parameters>)`` calling ``fn`` with self as its parameter number
    ``self_at`` (``__radd__(self, input)`` → ``add(input, self)``; ``where(self, condition, other)``
    → ``where(condition, self, other)``): one generated call, signature spelled out."""
    params = list(inspect.signature(fn).parameters.values())
    if self_at >= len(params) or params[self_at].kind not in (params[self_at].POSITIONAL_ONLY,
                                                              params[self_at].POSITIONAL_OR_KEYWORD):
        raise ValueError(f"{name}: parameter {self_at} of {fn.__qualname__} cannot be self")
    rest = params[:self_at] + params[self_at + 1:]
    sig, _, defaults = call_plans.signature_source(rest)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    positional[self_at] = "self"
    call = positional + [f"{p.name}={p.name}" for p in params if p.kind is p.KEYWORD_ONLY]
    source = f"def {name}(self{sig}):\n    return _fn({', '.join(call)})\n"
    method = compile_function(source, name, {"_fn": fn, **defaults}, f"surface method {name}")
    method.__doc__ = fn.__doc__
    method.__module__ = _MODULES["method"]
    method.__qualname__ = "Tensor." + name
    return method


def public_surfaces(kind: str) -> dict[str, Callable]:
    """name → surface for ``kind`` ("method", "function" or "functional") over every :func:`public`
    declaration made so far; a name declared twice (or also exposed by an op) raises."""
    out: dict[str, Callable] = {}
    registry = {name for o in REGISTRY.values() for name in _op_names(o, kind)}
    for p in PUBLIC:
        for name, fn in _surfaces_of(p, kind):
            if name in out or name in registry:
                raise RuntimeError(f"{kind} {name!r} is declared twice (ops/decl.py: one declaration per name)")
            out[name] = fn
    return out


_PLANNED: dict = {}   # a front end declared with call_plan=True → the one entry point with call plans


def _entry(p: Public) -> Callable:
    """What ``p``'s surfaces call: its function, or with ``call_plan`` that function behind its
    call plans (tensor/call_plans.py; one per declaration, shared by all its surfaces)."""
    if not p.call_plan or not call_plans.plannable(p.fn):
        return p.fn
    fn = _PLANNED.get(p.fn)
    if fn is None:
        fn = _PLANNED[p.fn] = call_plans.wrap(p.fn, p.fn.__name__, compile_function)
        # Named where it is installed (pickle finds a function by its module and qualified name)
        if p.function:
            fn.__module__, fn.__qualname__ = _MODULES["function"], p.function[0]
        elif p.functional:
            fn.__module__, fn.__qualname__ = _MODULES["functional"], p.functional[0]
        elif p.self_at == 0 and p.method + p.dunder:
            fn.__module__, fn.__qualname__ = _MODULES["method"], "Tensor." + (p.method + p.dunder)[0]
    return fn


def _surfaces_of(p: Public, kind: str) -> list[tuple[str, Callable]]:
    fn = _entry(p)
    if kind != "method":
        return [(name, fn) for name in getattr(p, kind)]
    direct = p.method + p.dunder if p.self_at == 0 else p.dunder
    bound = [(name, rebound_method(fn, name, p.self_at)) for name in (p.method if p.self_at else ())]
    return [(name, fn) for name in direct] + bound + [(name, rebound_method(fn, name, 1)) for name in p.reflected]


def install_methods(cls: type) -> None:
    """Put every declared Tensor method and operator on ``cls`` (again: only those not yet there).
    A name that ``cls`` or a mixin already defines by hand is an error: it would be two declarations."""
    for name, fn in public_surfaces("method").items():
        if INSTALLED.get(("method", name)) is not None:
            continue
        owner = next((c for c in cls.__mro__ if name in c.__dict__ and c is not object), None)
        if owner is not None:
            raise RuntimeError(f"Tensor.{name} is declared with ops/decl.py's public() and also written "
                               f"in {owner.__qualname__}")
        setattr(cls, name, fn)
        INSTALLED["method", name] = fn


def install_functions(namespace: dict, kind: str) -> list[str]:
    """Put every declared ``kind`` ("function" or "functional") surface into ``namespace`` (a module's
    globals); returns the names (for ``__all__``). A name the module already binds to something else
    is an error (a hand-written entry under a declared name)."""
    names = []
    for name, fn in public_surfaces(kind).items():
        current = namespace.get(name, fn)
        if current is not fn and INSTALLED.get((kind, name)) is not current:
            raise RuntimeError(f"{kind} {name!r} is declared with ops/decl.py's public() and also bound "
                               f"by hand to {getattr(current, '__qualname__', current)!r}")
        namespace[name] = fn
        INSTALLED[kind, name] = fn
        names.append(name)
    return names
