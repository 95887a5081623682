"""The op registry: one definition per op, iterated by the tests.

An :class:`OpDef` holds, for one op:
- ``infer(*inputs, **params) -> (shape, dtype)``: validation and shape inference
  in Python; it raises ``ValueError``/``TypeError`` naming the op, so bad input
  never reaches ggml (a ggml assertion aborts the whole process);
- ``forward(ctx, nodes, inputs, out, **params) -> node``: the ggml node builder;
- ``backward(g, saved) -> grads``: the gradient rule, itself built from ops, so
  gradients are ggml nodes in the same queue. Grads may come back in the
  broadcast shape; autograd reduces them to each input's shape.

``op.NAME(...)`` dispatches through the autograd layer, which registers its entry point
with :func:`register_dispatch` when it is imported (``ggmlgrad.tensor``): that is how backward
rules call other ops without this layer importing the one above it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .._ggml import consts, lib
from ..runtime import DeviceError   # ValueError and RuntimeError (torch's class for mixed devices)
from ..engine import ENGINE, Array, DType, float32, int32
from ..engine.dtypes import bool_
from .build import row_merged
from .decl import Expose
from ..engine.errors import DTypeError


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
    # Which inputs the backward reads (an in-place write to one of them after the op makes backward
    # raise, as torch's saved tensors): None every input; else ints (always read) and (i, j) pairs
    # (input i is read only when input j requires grad, e.g. mul's other operand).
    saves: tuple | None = None

    def __post_init__(self) -> None:
        self.saved_always, self.saved_if = _resolve_saves(self.name, self.saves)


def _resolve_saves(name: str, saves) -> tuple:
    """``saves`` as (frozenset of always-read inputs or None for all, {i: (j, ...)}), computed once
    per op so the version check at backward does no parsing."""
    if saves is None:
        return None, {}
    always, cond = set(), {}
    for s in saves:
        if isinstance(s, int):
            always.add(s)
        elif isinstance(s, tuple) and len(s) == 2 and all(isinstance(k, int) for k in s):
            cond.setdefault(s[0], []).append(s[1])
        else:
            raise ValueError(f"op {name!r}: saves entries are input indices or (input, if_requires_grad) pairs, "
                             f"got {s!r}")
    return frozenset(always), {i: tuple(js) for i, js in cond.items() if i not in always}


REGISTRY: dict[str, OpDef] = {}


def define(name: str, *, infer, backward=None, work=None, save_output=False, differentiable=True, doc="",
           elementwise=False, expose: Expose | None = None, saves: tuple | None = None, promotes: bool = False):
    """Decorator registering ``forward`` under ``name``.

    ``expose``: the op's public names and arguments (:class:`.decl.Expose`); the tensor layer
    generates its ``Tensor`` method, ``gg.*`` function and ``nn.functional`` entry from it.

    ``elementwise``: the builder treats every element alike once its tensor inputs have the
    result's shape, so such calls are built on merged rows (:func:`.build.row_merged`). The
    decorated function itself stays as written (other builders call it directly).

    ``saves``: the inputs ``backward`` reads (see :attr:`OpDef.saves`); default every input. Only
    these raise at backward when written in place after the op (torch's saved-tensor check).

    ``promotes``: the op's ``infer`` admits int32 and bool inputs (:func:`float_compute`,
    :func:`promote_types`): the builder is given those int32 inputs cast to float32 and its result is
    cast to int32 when ``infer`` says the result is int32 (:func:`promoted`)."""
    def deco(forward):
        if name in REGISTRY:
            raise RuntimeError(f"op {name!r} defined twice")
        built = promoted(forward) if promotes else forward
        REGISTRY[name] = OpDef(name, infer, row_merged(built) if elementwise else built, backward, work,
                               save_output, differentiable=differentiable, doc=doc or (forward.__doc__ or ""),
                               expose=expose, saves=saves)
        return forward
    return deco


# The autograd layer's apply(opdef, inputs, params), set by register_dispatch; None until then.
_apply: Callable[..., Any] | None = None


def register_dispatch(apply: Callable[..., Any]) -> None:
    """Route ``op.NAME(*inputs, **params)`` to ``apply(REGISTRY[NAME], inputs, params)``.

    The autograd layer (``tensor/__init__.py``) registers ``tape.apply`` here when it is imported:
    the layer above joins this one through this function, and this layer never imports it.

    >>> from ggmlgrad.ops.registry import op, register_dispatch
    >>> from ggmlgrad.tensor import tape
    >>> register_dispatch(tape.apply)   # what importing ggmlgrad.tensor did
    """
    global _apply
    _apply = apply
    op.__dict__.clear()  # calls cached with an earlier entry point are made again


class _Dispatcher:
    """``op.add(a, b)`` → the autograd layer's apply(REGISTRY['add'], a, b) (see :func:`register_dispatch`)."""

    def __getattr__(self, name: str):
        opdef = REGISTRY.get(name)
        if opdef is None:
            raise AttributeError(f"no op named {name!r}")
        apply = _apply
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
            raise DTypeError(f"{opname}: expected float32 tensors, got {shapes} "
                            f"(cast with .float() / .to('float32'))")
    return float32


#: The dtypes torch promotes to float32 in a float-only op (``torch.sqrt(int_tensor)`` is float32).
_PROMOTED = (int32, bool_)


def float_compute(opname: str, *xs) -> DType:
    """The dtype policy of a float-only op (torch's type promotion): float32, int32 and bool
    tensors are read, the op computes in float32 and returns float32; float16/bfloat16 inputs (and
    non-tensors) raise :func:`same_float`'s TypeError naming the op."""
    for x in xs:
        if x.dtype is not float32 and getattr(x, "dtype", None) not in _PROMOTED:
            same_float(opname, *xs)
    return float32


def promote_types(opname: str, *xs) -> DType:
    """The dtype policy of an op torch keeps integral (maximum, clamp with integer bounds, ceil):
    float32 if any input is float32, else int32 if any is int32, else bool (all bool). float16 and
    bfloat16 raise as :func:`same_float`. An int32 result is computed in float32 (exact below 2**24)."""
    has_float = has_int = False  # (flags, not a set of the dtypes: this runs on every comparison and clamp)
    for x in xs:
        d = getattr(x, "dtype", None)
        if d is float32:
            has_float = True
        elif d is int32:
            has_int = True
        elif d is not bool_:
            same_float(opname, *xs)  # raises its TypeError
    return float32 if has_float else int32 if has_int else bool_


def promoted(forward):
    """``forward`` given its int32 inputs as float32 nodes (bool is float32 0/1 storage already),
    its result cast to int32 when the op's result is int32 (see :func:`define`'s ``promotes``)."""
    def build(ctx, nodes, inputs, out, **params):
        nodes = [lib.cast(ctx, n, consts.TYPE_F32) if x.dtype is int32 else n for n, x in zip(nodes, inputs)]
        r = forward(ctx, nodes, inputs, out, **params)
        return lib.cast(ctx, r, consts.TYPE_I32) if out.dtype is int32 else r
    build.__doc__ = forward.__doc__
    build.__wrapped__ = getattr(forward, "__wrapped__", forward)
    return build


def same_device(opname: str, *xs) -> None:
    d = xs[0].device
    for x in xs:  # (the first compares with itself: cheaper than slicing the rest off)
        if x.device is not d:
            err = _non_tensor(opname, xs)
            if err is not None:
                raise err
            raise DeviceError(f"{opname}: tensors are on different devices ({d.name} and {x.device.name})")


# ---------------------------------------------------------------------- ops of kind "writes"
# In-place writes (optimizer updates, copy_, load_state_dict) write into their own inputs instead
# of making a result. They are declared and dispatched here like any op, but queued through
# ENGINE.record_update inside ENGINE.exclusive (which drains first: no queued read can see a
# half-written tensor). They have no backward and no result, so they live in their own table.
WRITE_KIND = "writes"
# Most ggml tensors one engine record may build (the engine guarantees this much room per
# record, its _OP_HEADROOM): a batched write is split into records that fit.
_RECORD_TENSORS = 96


@dataclasses.dataclass(eq=False)
class WriteDef:
    """One op of kind ``"writes"``.

    - ``check(name, inputs, parts)``: validates a whole record before anything is queued and raises
      ``ValueError``/``TypeError`` naming the op and the shapes (bad input never reaches ggml);
    - ``build(ctx, nodes, inputs, **options) -> [(target, node), ...]`` for ONE target group (e.g.
      one parameter with its gradient, hyperparameters and state): ``node``'s value is copied into
      ``inputs[target]``, or with ``target`` None ``node`` writes in place by itself;
    - ``tensors``: most ggml tensors ``build`` makes for one target group (the records are split
      to stay within the engine's room per record);
    - ``calls``: how many records were queued through :func:`write` (tests count dispatches).
    """
    name: str
    check: Callable[..., None]
    build: Callable[..., list]
    tensors: int
    kind: str = WRITE_KIND
    doc: str = ""
    calls: int = 0


WRITES: dict[str, WriteDef] = {}


def define_write(name: str, *, check, tensors: int, doc: str = ""):
    """Decorator registering ``build`` as the write op ``name`` (see :class:`WriteDef`)."""
    def deco(build):
        if name in WRITES or name in REGISTRY:
            raise RuntimeError(f"op {name!r} defined twice")
        if not 0 < tensors <= _RECORD_TENSORS:
            raise ValueError(f"write op {name!r}: tensors must be in 1..{_RECORD_TENSORS}, got {tensors}")
        WRITES[name] = WriteDef(name, check, build, tensors, doc=doc or (build.__doc__ or ""))
        return build
    return deco


def write(name: str, inputs: tuple, parts: tuple, work: float = 0.0, label: str | None = None) -> None:
    """Queue the write op ``name``: THE one way in-place writes reach the engine.

    ``inputs`` is every target group's inputs, one group after the other; ``parts`` holds per
    group ``(input count, options items[, anything else that keys the plan])`` and must be an
    exact plan key (:class:`..engine.plans.Exact`). Call inside ``ENGINE.exclusive`` (or a
    capture recording's hold). ``label`` names the write in graph errors (default ``name``).

    >>> import ggmlgrad as gg
    >>> from ggmlgrad.engine import ENGINE
    >>> from ggmlgrad.engine.plans import Exact
    >>> dst, src = gg.zeros(2), gg.tensor([1.5, 2.5])
    >>> with ENGINE.exclusive("example"):
    ...     write("copy_", (dst, src), Exact(((2, ()),)))
    >>> dst.tolist()
    [1.5, 2.5]
    """
    wd = WRITES[name]
    wd.check(name, inputs, parts)
    wd.calls += 1
    per_record = _RECORD_TENSORS // wd.tensors
    if len(parts) <= per_record:  # the common case: one record
        ENGINE.record_update(label or name, _build_parts, inputs, {"build": wd.build, "parts": parts}, work)
        return
    label = label or name
    n_inputs = sum(part[0] for part in parts)
    at = 0
    for i in range(0, len(parts), per_record):
        chunk = type(parts)(parts[i:i + per_record])
        count = sum(part[0] for part in chunk)
        ENGINE.record_update(label, _build_parts, inputs[at:at + count], {"build": wd.build, "parts": chunk},
                             work * count / n_inputs)
        at += count


def _build_parts(ctx: int, nodes, inputs, *, build, parts: tuple) -> list:
    """The builder of one write record: ``build`` on each target group's slice of the inputs."""
    writes = []
    at = 0
    for count, options, *_ in parts:
        for target, node in build(ctx, nodes[at:at + count], inputs[at:at + count], **dict(options)):
            writes.append((None if target is None else at + target, node))
        at += count
    return writes
