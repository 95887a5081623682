"""``gg.autograd``: ``grad``, ``backward``, custom ``Function`` and tensor hooks, on the tape.

``grad(outputs, inputs)`` runs the reverse pass from ``outputs`` and returns the gradients of
``inputs`` without touching any ``.grad``; with ``create_graph=True`` the pass records its own
ops, so its results can be differentiated again (a WGAN-GP gradient penalty, Hessian-vector
products). Every gradient rule written with differentiable ops gets a second derivative this way;
the fused gradient kernels have theirs in :mod:`..ops.higher_order`, and any other raises naming it.

>>> import ggmlgrad as gg
>>> x = gg.tensor([1.0, 2.0], requires_grad=True)
>>> (g,) = gg.autograd.grad((x ** 3).sum(), x, create_graph=True)
>>> g.tolist()
[3.0, 12.0]
>>> (h,) = gg.autograd.grad(g.sum(), x)
>>> h.tolist()
[6.0, 12.0]
"""
from __future__ import annotations

import collections
import itertools
import math
from typing import Any, Sequence

from ..engine import ENGINE
from ..ops.registry import OpDef
from . import tape
from .grad_mode import is_grad_enabled, no_grad
from .tensor import Tensor, as_tensor

__all__ = ["grad", "backward", "Function", "FunctionCtx", "RemovableHandle", "once_differentiable"]


class RemovableHandle:
    """What ``register_*hook`` returns: ``remove()`` unregisters the hook (twice is harmless)."""

    _ids = itertools.count()

    def __init__(self, hooks: dict, on_remove=None) -> None:
        self.hooks = hooks
        self.id = next(self._ids)
        self.on_remove = on_remove

    def remove(self) -> None:
        if self.hooks.pop(self.id, None) is not None and self.on_remove is not None:
            self.on_remove()

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_tensor_hook(t: Tensor, hook) -> RemovableHandle:
    """``Tensor.register_hook``: a leaf's hooks live on the tensor, a non-leaf's on its tape node."""
    if not callable(hook):
        raise TypeError(f"register_hook: expected a callable, got {type(hook).__name__}")
    if not t.requires_grad:
        raise RuntimeError("register_hook: cannot register a hook on a tensor that doesn't require gradient")
    if t.grad_fn is None:
        hooks = t.__dict__.setdefault("_grad_hooks", collections.OrderedDict())
    else:
        hooks = tape.HOOKS.by_node.get(t.grad_fn)
        if hooks is None:
            hooks = tape.HOOKS.by_node[t.grad_fn] = collections.OrderedDict()
    tape.HOOKS.live += 1
    tape.HOOKS.used = True
    handle = RemovableHandle(hooks, _tensor_hook_removed)
    hooks[handle.id] = hook
    return handle


def _tensor_hook_removed() -> None:
    # with no tensor hook left, backward passes are cached again (a hook must run at every pass)
    tape.HOOKS.live -= 1
    tape.HOOKS.used = tape.HOOKS.live > 0


# ---------------------------------------------------------------- grad / backward
def _as_seq(name: str, xs) -> list:
    if isinstance(xs, Tensor):
        return [xs]
    if isinstance(xs, (list, tuple)):
        return list(xs)
    raise TypeError(f"autograd.{name}: expected a Tensor or a sequence of Tensors, got {type(xs).__name__}")


def _seeds(name: str, outputs: list, grad_outputs) -> list:
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    else:
        grad_outputs = _as_seq(name, grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"autograd.{name}: got {len(outputs)} outputs and {len(grad_outputs)} grad_outputs")
    seeds = []
    for o, go in zip(outputs, grad_outputs):
        if not isinstance(o, Tensor):
            raise TypeError(f"autograd.{name}: outputs must be Tensors, got {type(o).__name__}")
        if not o.requires_grad:
            raise RuntimeError(f"autograd.{name}: an output (shape {o.shape}) does not require grad and has no grad_fn")
        if go is None:
            if o.numel_ != 1:
                raise RuntimeError(f"autograd.{name}: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {o.shape}")
        else:
            go = as_tensor(go, device=o.device)
            if go.shape != o.shape:
                raise ValueError(f"autograd.{name}: grad_output shape {go.shape} does not match output shape {o.shape}")
        seeds.append((o, go))
    return seeds


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused: bool | None = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple:
    """The gradients of ``outputs`` (weighted by ``grad_outputs``) with respect to ``inputs``.

    No ``.grad`` is written. ``create_graph=True`` makes the results differentiable (and
    ``retain_graph`` then defaults to True); an input the outputs do not depend on raises unless
    ``allow_unused=True`` (it is None then, or zeros with ``materialize_grads=True``).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([2.0], requires_grad=True)
    >>> gg.autograd.grad((w * w).sum(), [w])[0].tolist()
    [4.0]
    """
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched is not supported")
    outputs = _as_seq("grad", outputs)
    inputs_seq = _as_seq("grad", inputs)
    if not inputs_seq:
        raise ValueError("autograd.grad: inputs is empty")
    for x in inputs_seq:
        if not isinstance(x, Tensor):
            raise TypeError(f"autograd.grad: inputs must be Tensors, got {type(x).__name__}")
        if not x.requires_grad:
            raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (shape {x.shape}) does not require grad")
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    seeds = _seeds("grad", outputs, grad_outputs)
    capture = {id(x): [x, None] for x in inputs_seq}
    with ENGINE.lock:
        _run(seeds, capture, bool(retain_graph), bool(create_graph))
    out = []
    for x in inputs_seq:
        g = capture[id(x)][1]
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (shape {x.shape}) appears to "
                                   f"not have been used in the graph. Set allow_unused=True if this is the desired "
                                   f"behavior.")
            if materialize_grads:
                from .creation import zeros_like  # same layer
                g = zeros_like(x)
        elif g is capture[id(x)][0] or any(g is y for y in outputs):
            g = g.clone()  # never hand back a seed object itself
        out.append(g)
    return tuple(out)


def _run(seeds: list, capture: dict, retain_graph: bool, create_graph: bool) -> None:
    """One reverse pass that fills ``capture`` (id → [tensor, gradient]) and writes no ``.grad``."""
    rooted = []
    for o, go in seeds:
        slot = capture.get(id(o))
        if slot is not None:  # an output that is itself an input: its gradient includes the seed
            g = go if go is not None else tape._seed(o)
            slot[1] = g if slot[1] is None else tape._add_grads(slot[1], g)
        if o.grad_fn is not None:
            rooted.append((o, go))
    if not rooted:
        return
    fns = [o.grad_fn for o, _ in rooted]
    order = tape._topo(fns[0], tuple(fns[1:]))
    needed: set[int] = set()
    for n in order:  # inputs' nodes come first: a node is needed when a gradient it gives reaches a target
        for x in n.inputs:
            fn = x.grad_fn
            if id(x) in capture or (fn is not None and id(fn) in needed):
                needed.add(id(n))
                break
    tape._run_pass(rooted, order, retain_graph, create_graph, capture=capture, needed=needed)
    if tape.HOOKS.used:
        for slot in capture.values():
            if slot[1] is not None and slot[0].grad_fn is None:
                slot[1] = tape._leaf_hooks(slot[0], slot[1])


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs=None) -> None:
    """Accumulate the gradients of ``tensors`` into the leaves' ``.grad`` (torch.autograd.backward).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([1.0, 2.0], requires_grad=True)
    >>> gg.autograd.backward([(x * x).sum()])
    >>> x.grad.tolist()
    [2.0, 4.0]
    """
    tensors = _as_seq("backward", tensors)
    seeds = _seeds("backward", tensors, grad_tensors)
    if inputs is not None:
        _accumulate(seeds, _as_seq("backward", inputs), retain_graph, create_graph)
        return
    if len(seeds) == 1:
        o, go = seeds[0]
        o.backward(go, retain_graph=retain_graph, create_graph=create_graph)
        return
    if retain_graph is None:
        retain_graph = create_graph
    assigned: set = set()
    for o, go in seeds:   # outputs that are leaves themselves: their seed is their gradient
        if o.grad_fn is None:
            tape._accumulate_leaf(o, go if go is not None else tape._seed(o), assigned)
    rooted = [(o, go) for o, go in seeds if o.grad_fn is not None]
    if rooted:   # one pass from every root: shared parts of the graph run once
        fns = [o.grad_fn for o, _ in rooted]
        with ENGINE.lock:
            tape._run_pass(rooted, tape._topo(fns[0], tuple(fns[1:])), bool(retain_graph), bool(create_graph))


def backward_into(root: Tensor, gradient, retain_graph, create_graph: bool, inputs) -> None:
    """``Tensor.backward(inputs=...)``: accumulate only into these tensors' ``.grad``."""
    _accumulate(_seeds("backward", [root], None if gradient is None else [gradient]),
                _as_seq("backward", inputs), retain_graph, create_graph)


def _accumulate(seeds: list, targets: list, retain_graph, create_graph: bool) -> None:
    if retain_graph is None:
        retain_graph = create_graph
    capture = {id(x): [x, None] for x in targets}
    with ENGINE.lock:
        _run(seeds, capture, bool(retain_graph), bool(create_graph))
    for x in targets:
        g = capture[id(x)][1]
        if g is not None:
            x.grad = g if x.grad is None else tape._add_grads(x.grad, g)


# ---------------------------------------------------------------- custom functions
class FunctionCtx:
    """The ``ctx`` of a custom :class:`Function`: what forward leaves for backward."""

    def __init__(self, needs_input_grad: tuple) -> None:
        self.needs_input_grad = needs_input_grad
        self._saved: tuple = ()
        self._saved_versions: tuple = ()
        self.non_differentiable: set[int] = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` (or None) for backward; an in-place change before backward then raises."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward: expected Tensors or None, got {type(t).__name__}")
        self._saved = tensors
        self._saved_versions = tuple(None if t is None else t._version for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        for i, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
            if t is not None and t._version != v:
                raise RuntimeError(f"saved_tensors: saved tensor {i} (shape {t.shape}) was modified in place after "
                                   f"save_for_backward (version {v} → {t._version}); its gradient would be wrong")
        return self._saved

    def mark_non_differentiable(self, *tensors) -> None:
        self.non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        raise NotImplementedError("Function: mark_dirty (in-place custom functions) is not supported")


class Function:
    """A custom differentiable operation: subclass with static ``forward(ctx, *args)`` and
    ``backward(ctx, *grad_outputs)`` and call ``.apply(*args)``. ``backward`` returns one
    gradient (or None) per ``forward`` argument; it runs with grad enabled under
    ``create_graph=True``, so a backward written with tensor ops is itself differentiable.

    >>> import ggmlgrad as gg
    >>> class Cube(gg.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x * x
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return g * 3 * x * x
    >>> x = gg.tensor([2.0], requires_grad=True)
    >>> Cube.apply(x).sum().backward()
    >>> x.grad.tolist()
    [12.0]
    """

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Function subclasses must implement a static forward(ctx, *args)")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("Function subclasses must implement a static backward(ctx, *grad_outputs)")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        ctx = FunctionCtx(tuple(isinstance(a, Tensor) and a.requires_grad for a in args))
        with no_grad():
            outs = cls.forward(ctx, *args, **kwargs)
        if not (is_grad_enabled() and any(ctx.needs_input_grad)):
            return outs
        single = isinstance(outs, Tensor)
        seq = [outs] if single else list(outs) if isinstance(outs, (tuple, list)) else None
        if seq is None:
            raise TypeError(f"{cls.__name__}.forward: expected a Tensor or a tuple of Tensors, got {type(outs).__name__}")
        tracked = [i for i, o in enumerate(seq)
                   if isinstance(o, Tensor) and o.dtype.is_float and id(o) not in ctx.non_differentiable]
        if not tracked:
            return outs
        tensor_pos = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        params = {"ctx": ctx, "cls": cls, "n_args": len(args), "tensor_pos": tensor_pos,
                  "shapes": tuple(seq[i].shape for i in tracked), "n_out": len(seq), "tracked": tuple(tracked)}
        inputs = tuple(args[i] for i in tensor_pos)
        opdef = _function_opdef(cls)
        if len(tracked) == 1:
            out = Tensor.detach(seq[tracked[0]])
            _attach(opdef, inputs, params, out)
            seq[tracked[0]] = out
        else:  # one node for all outputs: backward gets every output's gradient in one call
            from .functional_shape import cat  # same layer
            with no_grad():
                packed = cat([seq[i].reshape(-1) for i in tracked])
            _attach(opdef, inputs, params, packed)
            at = 0
            for i in tracked:
                n = seq[i].numel_
                seq[i] = packed[at:at + n].reshape(seq[i].shape)
                at += n
        return seq[0] if single else type(outs)(seq) if isinstance(outs, tuple) else seq


def once_differentiable(backward):
    """Decorator for a :class:`Function`'s ``backward`` that is not itself differentiable (it may use
    non-differentiable host code): it runs without recording, and differentiating its result
    (``create_graph=True``) raises instead of giving a silent zero.

    >>> import ggmlgrad as gg
    >>> class Twice(gg.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x * 2
    ...     @staticmethod
    ...     @gg.autograd.function.once_differentiable
    ...     def backward(ctx, g):
    ...         return g * 2
    >>> x = gg.tensor([1.0], requires_grad=True)
    >>> Twice.apply(x).sum().backward()
    >>> x.grad.tolist()
    [2.0]
    """
    def wrapper(ctx, *grads):
        with no_grad():
            out = backward(ctx, *grads)
        tracked = [g for g in grads if isinstance(g, Tensor) and g.requires_grad]
        if not (is_grad_enabled() and tracked):
            return out
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        outs = tuple(_DelayedError.apply(o, *tracked) if isinstance(o, Tensor) and o.dtype.is_float else o
                     for o in outs)
        return outs[0] if single else outs
    wrapper.__name__ = getattr(backward, "__name__", "backward")
    wrapper.__doc__ = backward.__doc__
    return wrapper


class _DelayedError(Function):
    """Passes a value through; differentiating it raises (once_differentiable's guard)."""

    @staticmethod
    def forward(ctx, value, *anchors):
        return value

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def _attach(opdef: OpDef, inputs: tuple, params: dict, out: Tensor) -> None:
    out.requires_grad = True
    out.grad_fn = tape.Node(opdef, inputs, params, out)


_FUNCTION_DEFS: dict[type, OpDef] = {}


def _function_opdef(cls: type) -> OpDef:
    d = _FUNCTION_DEFS.get(cls)
    if d is None:
        d = _FUNCTION_DEFS[cls] = OpDef(f"{cls.__name__}Backward", infer=None, forward=None,
                                        backward=_function_backward, saves=())
    return d


def _function_backward(g: Tensor, node) -> tuple:
    p = node.params
    cls, ctx = p["cls"], p["ctx"]
    if len(p["tracked"]) == 1:
        pieces = [g]
    else:
        pieces, at = [], 0
        for shape in p["shapes"]:
            n = math.prod(shape)
            pieces.append(g[at:at + n].reshape(shape))
            at += n
    grad_outputs = [None] * p["n_out"]
    for i, piece in zip(p["tracked"], pieces):
        grad_outputs[i] = piece
    grads = cls.backward(ctx, *grad_outputs)
    if not isinstance(grads, tuple):
        grads = (grads,)
    n_args = p["n_args"]
    if len(grads) < n_args or any(x is not None for x in grads[n_args:]):
        raise RuntimeError(f"{cls.__name__}.backward: returned an incorrect number of gradients "
                           f"(expected {n_args}, got {len(grads)})")
    out = []
    for k, i in enumerate(p["tensor_pos"]):
        gi = grads[i]
        x = node.inputs[k]
        if gi is not None:
            if not isinstance(gi, Tensor):
                raise TypeError(f"{cls.__name__}.backward: gradient {i} must be a Tensor or None, got {type(gi).__name__}")
            if gi.shape != x.shape:
                raise RuntimeError(f"{cls.__name__}.backward: returned an invalid gradient at index {i} - got "
                                   f"{list(gi.shape)} but expected shape {list(x.shape)}")
        out.append(gi)
    return tuple(out)


_ = Sequence
