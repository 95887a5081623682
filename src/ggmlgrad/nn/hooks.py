"""Module hooks (torch's names): forward pre-hooks, forward hooks and full backward hooks.

Hooks run where the module runs: in eager and graph mode on every call; inside a capture
recording once, when the step is recorded (what a hook returns is part of the recording, a
side effect such as printing is not replayed).

>>> import ggmlgrad as gg
>>> lin = gg.nn.Linear(2, 2)
>>> seen = []
>>> h = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape))
>>> _ = lin(gg.ones(3, 2))
>>> h.remove()
>>> _ = lin(gg.ones(3, 2))
>>> seen
[(3, 2)]
"""
from __future__ import annotations

import collections

from ..tensor import Tensor
from ..tensor.autograd_api import Function, RemovableHandle


# A module keeps its hooks where torch does, in ordered dicts of its own ``__dict__``
# (``_forward_pre_hooks``, ``_forward_hooks``, ``_backward_hooks``, ``_backward_pre_hooks``), made on
# the first registration, which also sets ``_has_hooks``: ``Module.__call__`` tests that one key and
# calls :func:`call_hooked`; a module without hooks pays nothing more.
def register(module, kind: str, hook, prepend: bool, with_kwargs: bool) -> RemovableHandle:
    """Add ``hook`` to ``module``'s ordered dict ``kind``; the handle removes it."""
    if not callable(hook):
        raise TypeError(f"{kind[1:-1]}: expected a callable, got {type(hook).__name__}")
    hooks = module.__dict__.get(kind)
    if hooks is None:
        hooks = module.__dict__[kind] = collections.OrderedDict()
        module.__dict__["_has_hooks"] = True
    handle = RemovableHandle(hooks)
    hooks[handle.id] = (hook, with_kwargs)
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def call_hooked(module, args: tuple, kwargs: dict):
    """``module(*args, **kwargs)`` when any hook was ever registered on it."""
    d = module.__dict__
    for hook, with_kwargs in list(d.get("_forward_pre_hooks", {}).values()):
        if with_kwargs:
            r = hook(module, args, kwargs)
            if r is not None:
                if not (isinstance(r, tuple) and len(r) == 2):
                    raise RuntimeError("forward pre-hook with kwargs must return None or (args, kwargs)")
                args, kwargs = r
        else:
            r = hook(module, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
    bw = list(d.get("_backward_hooks", {}).values())
    pre = list(d.get("_backward_pre_hooks", {}).values())
    state = None
    if bw or pre:
        state = {"module": module, "hooks": [h for h, _ in bw], "pre_hooks": [h for h, _ in pre], "grad_output": None,
                 "inputs_tracked": any(isinstance(a, Tensor) and a.requires_grad for a in args)}
        if state["inputs_tracked"]:
            args = _wrap(_HookInputs, state, args)
    out = module.forward(*args, **kwargs)
    for hook, with_kwargs in list(d.get("_forward_hooks", {}).values()):
        r = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if r is not None:
            out = r
    if state is not None:
        if isinstance(out, Tensor):
            out = _wrap(_HookOutputs, state, (out,))[0]
        elif isinstance(out, tuple):
            out = _wrap(_HookOutputs, state, out)
    return out


def _wrap(fn, state: dict, values: tuple) -> tuple:
    """``values`` with their float tensors passed through the identity Function ``fn``."""
    pos = [i for i, v in enumerate(values) if isinstance(v, Tensor) and v.dtype.is_float]
    if not pos:
        return values
    outs = fn.apply(state, *(values[i] for i in pos))
    outs = outs if isinstance(outs, tuple) else (outs,)
    new = list(values)
    for i, o in zip(pos, outs):
        new[i] = o
    return tuple(new)


def _call_backward_hooks(state: dict, grad_input: tuple) -> tuple:
    grad_output = state["grad_output"] or ()
    for hook in state["hooks"]:
        grad_input = _hook_result(hook(state["module"], grad_input, grad_output), grad_input, "backward hook")
    return grad_input


def _hook_result(r, grads: tuple, what: str) -> tuple:
    """The gradients a backward (pre-)hook leaves: ``grads`` when it returned None, else what it
    returned (one gradient or a sequence), which must have as many entries."""
    if r is None:
        return grads
    r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    if len(r) != len(grads):
        raise RuntimeError(f"{what} returned {len(r)} gradients, expected {len(grads)}")
    return r


class _HookOutputs(Function):
    """Identity on the module's outputs; its backward notes grad_output."""

    @staticmethod
    def forward(ctx, state, *xs):
        ctx.state = state
        return xs if len(xs) > 1 else xs[0]

    @staticmethod
    def backward(ctx, *grads):
        for hook in ctx.state["pre_hooks"]:
            grads = _hook_result(hook(ctx.state["module"], grads), grads, "backward pre-hook")
        ctx.state["grad_output"] = grads
        if not ctx.state["inputs_tracked"] and ctx.state["hooks"]:
            _call_backward_hooks(ctx.state, (None,))
        return (None,) + grads


class _HookInputs(Function):
    """Identity on the module's tensor inputs; its backward calls the full backward hooks."""

    @staticmethod
    def forward(ctx, state, *xs):
        ctx.state = state
        return xs if len(xs) > 1 else xs[0]

    @staticmethod
    def backward(ctx, *grads):
        grads = tuple(g if need else None for g, need in zip(grads, ctx.needs_input_grad[1:]))
        return (None,) + tuple(_call_backward_hooks(ctx.state, grads))
