"""``gg.utils.checkpoint.checkpoint``: run a block without keeping its activations for backward, and
run it again when its gradient is needed (torch.utils.checkpoint).

The block's forward runs without recording; backward runs it again with recording, on the saved
inputs, and back-propagates through that copy: the inputs get their gradients from the node, the
parameters the block uses accumulate theirs into ``.grad`` as an ordinary backward does. Noise the
first run drew (dropout masks) is reused by the second, so both runs compute the same values, in
eager mode, graph mode and inside a capture. In graph mode the recomputation is queued in the same
graph: ggml frees the first run's intermediates once the forward no longer needs them.

Differences from torch (documented): ``use_reentrant`` is accepted and ignored (the behaviour is
torch's reentrant one: ``autograd.grad`` through a checkpoint raises); a block none of whose
inputs requires grad is run and recorded as usual (the parameters it uses are not known before
backward: torch's reentrant form would give them no gradient); ``context_fn`` is not supported.

>>> import ggmlgrad as gg
>>> from ggmlgrad.utils.checkpoint import checkpoint
>>> lin = gg.nn.Linear(3, 2)
>>> x = gg.ones(4, 3, requires_grad=True)
>>> y = checkpoint(lambda t: lin(t).tanh(), x, use_reentrant=False)
>>> y.sum().backward()
>>> lin.weight.grad.shape
(2, 3)
"""
from __future__ import annotations

from typing import Any, Callable

from ..distributions.noise import set_noise_hook
from ..engine import float32
from ..tensor import Tensor, enable_grad
from ..tensor import tape
from ..tensor.autograd_api import Function, backward as _autograd_backward
from ..tensor.grad_mode import is_grad_enabled
from ..tensor.tensor import _from_numpy

__all__ = ["checkpoint", "checkpoint_sequential"]

def checkpoint(function: Callable, *args: Any, use_reentrant: bool | None = None, context_fn=None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` whose activations are recomputed in backward instead of kept."""
    if context_fn is not None:
        raise NotImplementedError("checkpoint: context_fn is not supported")
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if not is_grad_enabled() or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        # no input needs a gradient: the parameters inside might, so the block records as usual
        return function(*args, **kwargs)
    return _Checkpoint.apply(function, kwargs, *args)


def checkpoint_sequential(functions, segments: int, input: Tensor, use_reentrant: bool | None = None,
                          **kwargs: Any) -> Tensor:
    """Run a Sequential (or list of modules) in ``segments`` checkpointed chunks; the last chunk runs
    normally (torch's rule)."""
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if isinstance(segments, bool) or not isinstance(segments, int) or segments <= 0:
        raise ValueError(f"checkpoint_sequential: segments must be a positive int, got {segments!r}")
    size = max(len(fns) // segments, 1)

    def run(chunk):
        def f(x):
            for m in chunk:
                x = m(x)
            return x
        return f

    end = 0
    for start in range(0, len(fns) - size, size):
        end = start + size
        input = checkpoint(run(fns[start:end]), input)
    return run(fns[end:])(input)


class _Checkpoint(Function):
    @staticmethod
    def forward(ctx, function, kwargs, *args):
        ctx.function, ctx.kwargs, ctx.args = function, kwargs, args
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])   # in-place writes raise at backward
        ctx.noise = []
        prev = set_noise_hook(None)

        def record(req):   # the first run's noise, kept for the recomputation
            t = prev(req) if prev is not None else None
            if t is None:
                t = _from_numpy(req.sample(), float32, req.device, False)
            ctx.noise.append((req.kind, req.shape, t))
            return t
        set_noise_hook(record)
        try:
            return function(*args, **kwargs)
        finally:
            set_noise_hook(prev)

    @staticmethod
    def backward(ctx, *grads):
        if tape.GRAD_ONLY.get():
            raise RuntimeError("checkpoint: not compatible with autograd.grad() (its recomputation accumulates "
                               "into .grad, as torch's reentrant checkpoint); use backward()")
        ctx.saved_tensors   # raises when an input was written in place since the forward
        detached = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) and a.dtype.is_float
                    else a for a in ctx.args]
        queue = list(ctx.noise)

        def replay(req):
            if not queue or queue[0][:2] != (req.kind, req.shape):
                raise RuntimeError("checkpoint: the recomputed forward drew different random noise than the first "
                                   "run (it must run the same ops)")
            return queue.pop(0)[2]
        prev = set_noise_hook(replay)
        try:
            with enable_grad():
                out = ctx.function(*detached, **ctx.kwargs)
        finally:
            set_noise_hook(prev)
        outs = [out] if isinstance(out, Tensor) else list(out)
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:
            # create_graph when this pass records (backward(create_graph=True)): double backward works
            _autograd_backward([o for o, _ in pairs], [g for _, g in pairs], create_graph=is_grad_enabled())
        in_grads = tuple(d.grad if isinstance(d, Tensor) and d.requires_grad else None for d in detached)
        return (None, None) + in_grads
