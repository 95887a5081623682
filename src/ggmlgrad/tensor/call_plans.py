"""Call plans: a repeated eager call runs its op plan straight from its signature, and a repeated
graph-mode call appends its records straight from its signature.

An eager ``a + b`` goes through the front end (scalar, int32 and bool dispatch), the op's
inference, the tensor's creation, the record, the drain's op-plan key and the plan's run. When
the same call comes again (same entry point, same argument signature, same modes) everything
but the tensor's creation and the run decides the same way again. So the public entry points
that may do this (the op surfaces generated from ``expose``, and the ``public(call_plan=True)``
front ends: arithmetic, comparisons, matmul, clamp, ...) look their call's signature up first:

- **key**: per argument, for a tensor (``Tensor``, or a type :func:`register_tensor_type` adds)
  its shape, dtype, device and ``requires_grad`` (the type too for a registered subclass); for anything
  else its exact type and value (``0.0`` and ``-0.0``, ``1``, ``1.0`` and ``True`` differ; an
  argument left at its default is a marker; NaN, arrays, lists and other objects make no key), and
  which of the first three arguments are the same object; plus grad mode and the matmul precision.
  A call autograd records (an input requires grad, grad mode on) makes no key at all. The state the
  key leaves out is checked on every hit (``engine/call_plans.py``): eager mode, no capture, the trace
  cache and its op plan still there, an empty queue, no hold, no armed fault or injected failure,
  inputs computed in plain (not strided) memory on the learned device.
- **learning**: a call without a plan runs the ordinary way while the drainer notes what it ran;
  it gets a plan only when it made exactly one eager op-plan run and nothing else the engine
  counts (no other drain or compute, no transfer, no failure), returned that run's result (a plain
  tensor without a tape node), left its tensor arguments' versions alone, and that op's inputs are
  tensor arguments among the first three. The second call of a signature normally learns (the op
  plan is made on its second use), the third runs the plan.
- **hit**: :func:`..engine.call_plans.run_call_plan`: the result made like any op's result
  (``Tensor._blank``), the same counters (drains, computes, node counts; plus ``call_plan_hits``),
  the same compute (``Drainer.run``) and failure route as the drain of the op's record.

**Graph mode** (``engine/graph_call_plans.py``): the same entry points, and op calls from the layers
above (:func:`graph_planned_apply`), keep a second table of graph call plans under the same keys. A call
that appended records and nothing else, whose result is its last record's, is learned as those
records (each input the argument it read, or an earlier record of the call); a hit appends them
again with a new result tensor, without the front end or the ops' inference, and counts
``graph_call_plan_hits``. Check mode and captures record the ordinary way.

``GGMLGRAD_CALL_PLANS=0`` turns both off (every call the ordinary way); :func:`set_enabled` too.
A front end may take part only when its result follows from its arguments and the state above
alone: no random draws, no host reads of values, no warnings (``public(call_plan=True)`` says so).

>>> import ggmlgrad as gg
>>> a = gg.ones(2, 2)
>>> before = gg.counters()["call_plan_hits"]
>>> with gg.graph_mode(False):
...     for _ in range(3):
...         b = a + a
>>> gg.counters()["call_plan_hits"] > before   # the third call (at the latest) ran its call plan
True
"""
from __future__ import annotations

import contextlib
import inspect
import math
import os
from typing import Callable

from ..engine.call_plans import CallPlan, abort_learning, begin_learning, end_learning, run_call_plan
from ..engine.context import current
from ..engine import graph_call_plans as _graph_call_plans
from ..engine.graph_call_plans import abort_watching, begin_watching, end_watching, run_graph_call_plan
from ..engine.plans import freeze_params
from ..ops.reduce import axis_first_args, dim_first_args, var_args
from .grad_mode import _enabled

__all__ = ["set_enabled", "enabled", "register_tensor_type", "wrap", "stats", "clear"]

# Entries per entry point (a call signature each); the oldest goes first when one is full.
CAPACITY = 128
# Signatures that failed to learn this often wait RETRY_FIRST calls before the next try, and twice
# as long after each further failure (up to RETRY_MAX): a composite of several ops never learns,
# and should cost its learning only now and then.
ATTEMPTS = 3
RETRY_FIRST = 16
RETRY_MAX = 4096
# How many leading arguments may be the op's inputs (and whose identities are part of the key).
LEADING = 3

_NO = object()        # an argument value no key describes (an array, a list, a float32 scalar...)
_DEFAULT = object()   # an argument left at its default (the same object as the default)
_NEG_ZERO = object()  # -0.0 (equal to 0.0, and so indistinguishable in a dict key)

#: args functions (ops/decl.py Expose.args) whose result follows from their arguments and that warn of
#: nothing: a hit need not call them (others, such as softmax's, which warns without ``dim``, run on every call)
PURE_ARGS = {axis_first_args, dim_first_args, var_args}

_NAMESPACES: list[dict] = []   # the generated entry points' globals (the switch and the Tensor class)
_TABLES: list["_Table"] = []
_TENSOR_TYPES: set = set()     # registered Tensor subclasses keyed like tensors (nn.Parameter)
_STATE = {"on": os.environ.get("GGMLGRAD_CALL_PLANS", "1").strip().lower() not in ("0", "false", "no", "off"),
          "tensor": None}


def enabled() -> bool:
    """Whether eager call plans are used."""
    return _STATE["on"]


def set_enabled(on: bool) -> bool:
    """Use call plans (True) or run every call the ordinary way (False); returns the old setting."""
    old = _STATE["on"]
    _STATE["on"] = bool(on)
    for ns in _NAMESPACES:
        ns["_ON"] = _STATE["on"]
    return old


@contextlib.contextmanager
def switched(on: bool):
    """Call plans on (True) or off (False) inside a ``with`` block, then as before (tests, A/B timing)."""
    old = set_enabled(on)
    try:
        yield
    finally:
        set_enabled(old)


def register_tensor_type(cls: type) -> None:
    """Key arguments of the Tensor subclass ``cls`` like tensors (its type is part of the key)."""
    _TENSOR_TYPES.add(cls)
    for ns in _NAMESPACES:
        ns["_TT"] = frozenset(_TENSOR_TYPES)


def set_tensor_class(cls: type) -> None:
    """Called once the Tensor class exists (the generated surfaces are made before it)."""
    _STATE["tensor"] = cls
    _graph_call_plans.set_tensor_class(cls)
    for ns in _NAMESPACES:
        ns["_T"] = cls
        ns["_blank"] = cls._blank


def stats() -> dict:
    """name → (call plans, signatures not planned now) of every entry point's table (for tests and tuning)."""
    return {t.name: (sum(1 for e in t.entries.values() if e), sum(1 for e in t.entries.values() if not e))
            for t in _TABLES}


def clear() -> None:
    """Forget every call plan (they are learned again)."""
    for t in _TABLES:
        t.entries.clear()
        t.attempts.clear()


def value_key(v):
    """The key of a non-tensor argument: its exact type and value, or ``_NO`` (no call plan)."""
    t = type(v)
    if t is float:
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return (t, _NEG_ZERO)
        if v != v:
            return _NO   # NaN equals nothing, not even itself: no key finds it again
        return (t, v)
    if t is int or t is bool or v is None or t is str:
        return (t, v)
    if t is tuple:
        for e in v:
            if type(e) is not int:
                return _NO
        return (t, v)
    return _NO


class _Table:
    """One entry point's call plans: key → :class:`CallPlan`, or False (not planned: the ordinary
    path without trying again); ``attempts``: failed learnings by key."""

    __slots__ = ("name", "entries", "attempts")

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: dict = {}
        self.attempts: dict = {}
        _TABLES.append(self)

    def put(self, key, value) -> None:
        entries = self.entries
        if len(entries) >= CAPACITY and key not in entries:
            entries.pop(next(iter(entries)))
        entries[key] = value

    def failed(self, key) -> None:
        entry = self.entries.get(key)
        if entry:
            return   # a plan that is only stale (or not usable now) stays until a learning replaces it
        if _NO in key:
            self.put(key, False)   # no key tells such calls apart: never planned
            return
        if type(entry) is Retry:   # failed again after a wait: wait twice as long
            self.put(key, Retry(min(2 * entry.wait, RETRY_MAX)))
            return
        n = self.attempts.get(key, 0) + 1
        if n >= ATTEMPTS:
            self.attempts.pop(key, None)
            self.put(key, Retry(RETRY_FIRST))
        else:
            if len(self.attempts) >= 4 * CAPACITY:
                self.attempts.clear()
            self.attempts[key] = n


class Retry:
    """A signature that failed to learn: the ordinary path for ``wait`` calls, then one more try
    (its op plan may be made by then: a cache that was thrashing makes plans again). Falsy, as
    "no plan" is."""

    __slots__ = ("wait", "left")

    def __init__(self, wait: int) -> None:
        self.wait = self.left = wait

    def __bool__(self) -> bool:
        return False


class _Seen:
    """A graph-mode signature seen once: the next call learns it (a signature seen once only, such as
    a scalar that changes every step, costs no learning). Falsy, as "no plan" is."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False


SEEN = _Seen()


def due(entry) -> bool:
    """For a falsy table entry: whether this call learns (no entry yet, seen once, or a :class:`Retry`
    whose wait is over)."""
    if entry is None or entry is SEEN:
        return True
    if entry is False:
        return False
    entry.left -= 1
    return entry.left <= 0


def stale(entry: CallPlan) -> bool:
    """Whether ``entry``'s op plan may be gone from its cache (learn the call again)."""
    cache = entry.cache
    return cache.removed != entry.removed or cache.plans is not entry.plans


def learned(table: _Table, key, token, out, args: tuple, versions: tuple) -> None:
    """End the learning of one call (``args``: its leading arguments; ``versions``: their version
    counters before the call): store its plan when it qualifies, else count the failure."""
    note = end_learning(token)
    plan = None
    if note is not None and _NO not in key:
        plan = _plan_of(note, out, args, versions)
    if plan is None:
        table.failed(key)
    else:
        table.attempts.pop(key, None)
        table.put(key, plan)


def _plan_of(note, out, args: tuple, versions: tuple) -> CallPlan | None:
    r_out, inputs, plan, label, work, cache, ctx = note
    T = _STATE["tensor"]
    if r_out is not out or type(out) is not T or out.requires_grad or out.grad_fn is not None or out.__dict__:
        return None   # not the op's own result (a view of it, a tuple...), or on the tape
    if _versions(args) != versions:
        return None   # an argument was written in place
    sel = []
    for k, x in enumerate(inputs):
        if k < len(args) and args[k] is x:   # the argument at the same place (``a + a``: no copy of the tuple)
            sel.append(k)
            continue
        for i, a in enumerate(args):
            if a is x:
                sel.append(i)
                break
        else:
            return None   # an input the call made or found elsewhere
    sel = None if tuple(sel) == tuple(range(len(args))) else tuple(sel)
    return CallPlan(plan, cache, ctx, out, work, label, sel)


def _versions(args: tuple) -> tuple:
    return tuple([a._vcell[0] if hasattr(a, "_vcell") else None for a in args])


def begin(args: tuple):
    """(learning token, the leading arguments' versions), or None: the state learns nothing now."""
    token = begin_learning()
    if token is None:
        return None
    return token, _versions(args)


def begin_graph(args: tuple):
    """(watching token, the leading arguments' versions) for a graph-mode call, or None."""
    token = begin_watching()
    if token is None:
        return None
    return token, _versions(args)


def learned_graph(table: _Table, key, tok, out, args: tuple, taped: bool = False) -> None:
    """End the watching of one graph-mode call: store its graph call plan when it qualifies (a plain
    result, arguments not written, the records the engine's learning accepts), else count the failure.
    ``taped``: the result may be on the tape (an op call, whose hits put theirs on it again)."""
    plan = None
    if _NO not in key:
        T = _STATE["tensor"]
        plain = type(out) is T and not out.__dict__ and (taped or (not out.requires_grad and out.grad_fn is None))
        if plain and _versions(args) == tok[1]:
            plan = end_watching(tok[0], out, args)
        else:
            abort_watching(tok[0])
    else:
        abort_watching(tok[0])
    if plan is None:
        table.failed(key)
    else:
        table.attempts.pop(key, None)
        table.put(key, plan)


# ---------------------------------------------------------------------- op calls (``op.<name>(...)``)
_OP_TABLES: dict[str, _Table] = {}   # op name -> its table (OpDef, a dataclass, is not hashable)


def _op_table(name: str) -> _Table:
    table = _OP_TABLES[name] = _Table("op:" + name)
    return table


def planned_apply(opdef, inputs: tuple, params: dict, c, ordinary: Callable):
    """An op call from the layers above (``op.add(a, b)`` in a composite, a loss, a distribution)
    with call plans, in eager mode (``c``: the current context, neither graph mode nor a capture);
    ``ordinary(opdef, inputs, params)`` runs it the ordinary way (tape.apply's body).

    Keyed by the op, each input's shape, dtype and device and the op's parameters (the op plan's own
    key, less its result, which these fix), it runs the op plan the call's one-record drain would
    run, without the op's inference or the record. A call autograd records (an input requires grad,
    grad mode on) is never planned; one the ordinary path would hand to ``create_graph``'s recorder
    is not either (the caller checks)."""
    key = [None]
    grad = taped = False
    try:
        for x in inputs:
            if x.requires_grad:
                if not grad:
                    grad, taped = True, _enabled.get()
                if taped:
                    break   # the tape records it
            key.append(x.shape)
            key.append(x.dtype)
            key.append(x.device.dev_ptr)
        else:
            key[0] = freeze_params(params) if params else ()
            key = tuple(key)
            table = _OP_TABLES.get(opdef.name) or _op_table(opdef.name)
            e = table.entries.get(key)
    except (AttributeError, TypeError):   # not a tensor (the ordinary path says so), an unhashable parameter
        taped = True
    if taped:   # (outside the try: an error of the ordinary path itself is never caught here)
        return ordinary(opdef, inputs, params)
    if e:
        out = run_call_plan(e, inputs, _STATE["tensor"]._blank, c)
        if out is not None:
            return out
        learn = stale(e)
    else:
        learn = e is None or (e is not False and due(e))
    if learn:
        tok = begin(inputs)
        if tok is not None:
            out = _watched(ordinary, opdef, inputs, params, abort_learning, tok[0])
            learned(table, key, tok[0], out, inputs, tok[1])
            return out
    return ordinary(opdef, inputs, params)


_OP_GRAPH_TABLES: dict[str, _Table] = {}   # op name -> its graph-mode table


def graph_planned_apply(opdef, inputs: tuple, params: dict, c, ordinary: Callable, taped: Callable):
    """:func:`planned_apply`'s graph-mode twin: an op call from the layers above (``c``: the
    current context, graph mode without check mode or a capture) appends its one record from a
    graph call plan keyed by the op, its parameters, each input's shape, dtype and device, which
    inputs are one tensor and the matmul precision, without the op's inference or ``record``;
    ``ordinary`` records it the ordinary way. The record does not depend on autograd, so a call it
    records is planned too: ``taped(opdef, inputs, params, out)`` puts a planned result on the tape
    as the ordinary path does."""
    key = [None, c.precision]
    try:
        for x in inputs:
            key.append(x.shape)
            key.append(x.dtype)
            key.append(x.device.dev_ptr)
        key[0] = freeze_params(params) if params else ()
        if len(inputs) > 1:   # which inputs are one tensor (a plan reads its arguments by place)
            key.append(_same_inputs(inputs))
        key = tuple(key)
        table = _OP_GRAPH_TABLES.get(opdef.name) or _op_graph_table(opdef.name)
        e = table.entries.get(key)
    except (AttributeError, TypeError):   # not a tensor (the ordinary path says so), an unhashable parameter
        return ordinary(opdef, inputs, params)
    if e:
        out = run_graph_call_plan(e, inputs, _STATE["tensor"]._blank, c)
        if out is not None:
            return taped(opdef, inputs, params, out)
    elif e is None:
        table.put(key, SEEN)
    elif e is not False and due(e):
        tok = begin_graph(inputs)
        if tok is not None:
            out = _watched(ordinary, opdef, inputs, params, abort_watching, tok[0])
            learned_graph(table, key, tok, out, inputs, taped=True)
            return out
    return ordinary(opdef, inputs, params)


def _watched(ordinary: Callable, opdef, inputs: tuple, params: dict, abort: Callable, token):
    """``ordinary(opdef, inputs, params)`` while a learning watches it (``abort(token)`` if it raises)."""
    try:
        return ordinary(opdef, inputs, params)
    except BaseException:
        abort(token)
        raise


def _same_inputs(inputs: tuple):
    """Which of an op call's inputs are the same tensor: a bool for two, else per input the place
    of its first occurrence."""
    if len(inputs) == 2:
        return inputs[0] is inputs[1]
    return tuple([next(j for j, y in enumerate(inputs) if y is x) for x in inputs])


def _op_graph_table(name: str) -> _Table:
    table = _OP_GRAPH_TABLES[name] = _Table("op:" + name + " (graph mode)")
    return table


# ---------------------------------------------------------------------- generated entry points
def _namespace(extra: dict) -> dict:
    T = _STATE["tensor"]
    ns = {"_ON": _STATE["on"], "_T": T, "_TT": frozenset(_TENSOR_TYPES), "_blank": T._blank if T else None,
          "_v": value_key, "_D": _DEFAULT, "_run": run_call_plan, "_stale": stale, "_begin": begin,
          "_abort": abort_learning, "_learned": learned, "_due": due, "_SEEN": SEEN, "_grad": _enabled.get, "_ctx": current,
          "_grun": run_graph_call_plan, "_gbegin": begin_graph, "_gabort": abort_watching, "_glearned": learned_graph, **extra}
    _NAMESPACES.append(ns)
    return ns


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line + "\n" if line else "\n" for line in text.splitlines())


def key_source(params: list[inspect.Parameter], tensor_first: bool) -> tuple[str, str, str, str]:
    """(statements reading the arguments, the condition under which the call is recorded by autograd
    (never planned), the expression of the key, the tuple of the leading arguments) for a function
    with ``params`` (defaults bound as ``_default_<name>`` globals).
    ``tensor_first``: the first argument is a tensor (checked by the caller), the others are never
    op inputs."""
    lines, parts, grads = [], [], []
    names = [p.name for p in params]
    lead = names[:1] if tensor_first else names[:LEADING]
    for i, p in enumerate(params):
        n = p.name
        if i == 0 and tensor_first:
            lines += [f"__t = type({n})", f"__r0 = {n}.requires_grad"]
            parts += [f"{n}.shape if __t is _T else (__t, {n}.shape)", f"{n}.dtype", f"{n}.device.dev_ptr", "__r0"]
            grads.append("__r0")
            continue
        default = p.default is not p.empty
        if n in lead:
            # a tensor: shape, dtype, requires_grad; an int, bool or float other than zero and NaN:
            # its value and type (in the dtype's place); anything else: value_key()
            lines += [f"__t = type({n})",
                      f"if __t is _T:",
                      f"    __k{i} = {n}.shape; __d{i} = {n}.dtype; __p{i} = {n}.device.dev_ptr; "
                      f"__r{i} = {n}.requires_grad",
                      f"elif (__t is float and {n} and {n} == {n}) or __t is int or __t is bool:",
                      f"    __k{i} = {n}; __d{i} = __t; __p{i} = __r{i} = None",
                      f"elif __t in _TT:",
                      f"    __k{i} = (__t, {n}.shape); __d{i} = {n}.dtype; __p{i} = {n}.device.dev_ptr; "
                      f"__r{i} = {n}.requires_grad"]
            if default:
                lines += [f"elif {n} is _default_{n}:", f"    __k{i} = _D; __d{i} = __p{i} = __r{i} = None"]
            lines += ["else:", f"    __k{i} = _v({n}); __d{i} = __p{i} = __r{i} = None"]
            parts += [f"__k{i}", f"__d{i}", f"__p{i}", f"__r{i}"]
            grads.append(f"__r{i}")
        elif default:
            parts.append(f"_D if {n} is _default_{n} else _v({n})")
        else:
            parts.append(f"_v({n})")
    for i in range(len(lead)):
        for j in range(i + 1, len(lead)):
            parts.append(f"{lead[i]} is {lead[j]}")
    parts += ["__g", "__c.precision"]
    lines.append("__g = _grad()")
    args = "(" + "".join(f"{n}, " for n in lead) + ")"
    return "\n".join(lines), f"__g and ({' or '.join(grads)})", f"({', '.join(parts)})", args


def plan_source(params: list[inspect.Parameter], tensor_first: bool, body: Callable[[str], str],
                guard: str = "_ON") -> str:
    """The statements of an entry point with call plans: look the call up, run its plan, or learn
    it around ``body(target)`` (the ordinary body, with ``return`` statements written ``target``),
    then the ordinary body. Reads the globals ``_E`` (its :class:`_Table`)."""
    read, taped, key, args = key_source(params, tensor_first)
    learn_body = body("__out = ")
    # Graph mode and capture first: there the ordinary body runs after one context read; then a
    # call autograd records (an input requires grad, grad mode on) before any key is made.
    src = (f"if {guard}:\n"
           f"    __c = _ctx()\n"
           f"    if __c.observer is None and not (__c.graph and __c.check):\n"
           f"{_indent(read, 8)}"
           f"        if not ({taped}):\n"
           f"            __key = {key}\n"
           f"            __args = {args}\n"
           f"            if __c.graph:\n"
           f"                __e = _G.entries.get(__key)\n"
           f"                if __e:\n"
           f"                    __out = _grun(__e, __args, _blank, __c)\n"
           f"                    if __out is not None:\n"
           f"                        return __out\n"
           f"                elif __e is None:\n"
           f"                    _G.put(__key, _SEEN)\n"
           f"                elif __e is not False and _due(__e):\n"
           f"                    __tok = _gbegin(__args)\n"
           f"                    if __tok is not None:\n"
           f"                        try:\n"
           f"{_indent(learn_body, 28)}"
           f"                        except BaseException:\n"
           f"                            _gabort(__tok[0])\n"
           f"                            raise\n"
           f"                        _glearned(_G, __key, __tok, __out, __args)\n"
           f"                        return __out\n"
           f"            else:\n"
           f"                __e = _E.entries.get(__key)\n"
           f"                if __e:\n"
           f"                    __out = _run(__e, __args, _blank, __c)\n"
           f"                    if __out is not None:\n"
           f"                        return __out\n"
           f"                    __learn = _stale(__e)\n"
           f"                else:\n"
           f"                    __learn = __e is None or (__e is not False and _due(__e))\n"
           f"                if __learn:\n"
           f"                    __tok = _begin(__args)\n"
           f"                    if __tok is not None:\n"
           f"                        try:\n"
           f"{_indent(learn_body, 28)}"
           f"                        except BaseException:\n"
           f"                            _abort(__tok[0])\n"
           f"                            raise\n"
           f"                        _learned(_E, __key, __tok[0], __out, __args, __tok[1])\n"
           f"                        return __out\n")
    return src + body("return ")


def surface_namespace(name: str, extra: dict) -> dict:
    """The globals of a generated op surface with call plans (its table is ``_E``)."""
    return _namespace({"_E": _Table(name), "_G": _Table(name + " (graph mode)"), **extra})


def plannable(fn: Callable) -> bool:
    """Whether ``fn``'s parameters can be keyed (no ``*args``/``**kwargs``)."""
    return all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               for p in inspect.signature(fn).parameters.values())


def signature_source(params: list[inspect.Parameter]) -> tuple[str, str, dict]:
    """(the parameter list, each after a ", ", the call's argument list, the defaults by global name)
    of a generated function taking ``params`` (an op surface after its tensor, a call-plan wrapper)."""
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


def wrap(fn: Callable, name: str, compile_function: Callable) -> Callable:
    """``fn`` (a front end declared with ``public(call_plan=True)``) with call plans: the same
    signature, name and docstring; it calls ``fn`` on every call that has no usable plan."""
    params = list(inspect.signature(fn).parameters.values())
    sig, call, defaults = signature_source(params)
    call_expr = f"_fn({call})"
    body = plan_source(params, False, lambda target: f"{target}{call_expr}\n")
    source = f"def {name}({sig[2:]}):\n{_indent(body, 4)}"
    ns = _namespace({"_E": _Table(name), "_G": _Table(name + " (graph mode)"), "_fn": fn, **defaults})
    wrapper = compile_function(source, name, ns, f"call plan {name}")
    wrapper.__doc__ = fn.__doc__
    wrapper.__module__ = fn.__module__
    wrapper.__qualname__ = fn.__qualname__
    wrapper.__wrapped__ = fn
    return wrapper
