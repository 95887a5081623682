"""gradcheck: the graph backward against float64 finite differences.

The function runs in float32 (ggmlgrad's compute dtype); the finite differences
are accumulated in float64 on the host, and each step is divided by the
difference of the float32 inputs actually used (``x + eps`` rounded to float32
is not ``x + eps``), so the only float32 error left is the rounding of the
outputs themselves.

Tolerances. With outputs of size ~1 the float32 output rounding is ~6e-8, so a
central difference with step ``eps`` carries an error of about ``6e-8 / eps``
(6e-5 at the default ``eps=1e-3``); the truncation error is ``O(eps**2)``
(~1e-6 for smooth functions). The defaults ``atol=1e-3, rtol=1e-2`` sit well
above both and well below any real mistake in a backward rule (a wrong rule is
typically off by O(1)). Functions with kinks (relu, abs, clamp, max) need
inputs kept at least ``eps`` away from the kinks.

Non-scalar outputs are reduced with a fixed random cotangent ``v``: the check
compares ``J^T v`` from backward with the finite difference of ``sum(f(x) * v)``,
which catches a wrong Jacobian with probability one at the cost of one backward.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .grad_mode import no_grad
from .tensor import Tensor, tensor


class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` when an analytic gradient disagrees with finite differences."""


def _as_outputs(out) -> list[Tensor]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"gradcheck: fn must return a Tensor or a tuple of Tensors, got {type(o).__name__}")
    return outs


def gradcheck(fn: Callable[..., Tensor], inputs: Sequence, eps: float = 1e-3, atol: float = 1e-3,
              rtol: float = 1e-2, seed: int = 0, raise_exception: bool = True) -> bool:
    """Check ``fn``'s backward against central finite differences in float64.

    ``inputs`` are Tensors (those with ``requires_grad=True`` are checked; the
    others are passed through unchanged) or arrays (converted to float32
    tensors that require grad). Returns True, or raises :class:`GradcheckError`
    naming the input, the worst element and both values (returns False instead
    when ``raise_exception=False``). Runs in the current mode (eager or graph).

    >>> import ggmlgrad as gg
    >>> x = gg.tensor([0.5, 1.5, 2.0], requires_grad=True)
    >>> gg.gradcheck(lambda t: (t * t).exp().sum(), [x])
    True
    """
    if not (isinstance(eps, (int, float)) and eps > 0):
        raise ValueError(f"gradcheck: eps must be a positive number, got {eps!r}")
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    xs: list = []
    for x in inputs:
        if isinstance(x, Tensor):
            xs.append(x)
        elif isinstance(x, (np.ndarray, list, float, int)):
            xs.append(tensor(np.asarray(x, dtype=np.float32), requires_grad=True))
        else:
            xs.append(x)  # a non-tensor argument, passed as is
    checked = [i for i, x in enumerate(xs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad")

    # Analytic: one backward of sum(f(x) * v) on fresh leaves (the user's .grad stays untouched).
    leaves = list(xs)
    for i in checked:
        leaves[i] = xs[i].detach().requires_grad_(True)
    outs = _as_outputs(fn(*leaves))
    rng = np.random.default_rng(seed)
    cot = [rng.uniform(0.5, 1.5, o.shape) * rng.choice([-1.0, 1.0], o.shape) for o in outs]
    loss = None
    for o, v in zip(outs, cot):
        term = (o * tensor(v.astype(np.float32))).sum()
        loss = term if loss is None else loss + term
    if not loss.requires_grad:
        raise GradcheckError("gradcheck: the output does not depend on any input that requires grad")
    loss.backward()
    analytic = {i: (leaves[i].grad.numpy().astype(np.float64) if leaves[i].grad is not None
                    else np.zeros(xs[i].shape)) for i in checked}
    cot32 = [v.astype(np.float32).astype(np.float64) for v in cot]

    def objective(args) -> float:
        with no_grad():
            res = _as_outputs(fn(*args))
            return float(sum(np.sum(r.detach().numpy().astype(np.float64) * v) for r, v in zip(res, cot32)))

    ok = True
    messages = []
    for i in checked:
        base = xs[i].detach().numpy().astype(np.float32)
        num = np.zeros(base.shape, dtype=np.float64)
        flat = base.reshape(-1)
        for k in range(flat.size):
            plus, minus = flat.copy(), flat.copy()
            plus[k] = np.float32(flat[k] + eps)
            minus[k] = np.float32(flat[k] - eps)
            step = float(plus[k]) - float(minus[k])  # the step actually taken in float32
            args = list(xs)
            args[i] = tensor(plus.reshape(base.shape))
            f_plus = objective(args)
            args[i] = tensor(minus.reshape(base.shape))
            f_minus = objective(args)
            num.reshape(-1)[k] = (f_plus - f_minus) / step
        a = analytic[i]
        err = np.abs(a - num)
        bad = err > atol + rtol * np.abs(num)
        if bad.any():
            ok = False
            k = np.unravel_index(int(np.argmax(err - rtol * np.abs(num))), num.shape) if num.ndim else ()
            messages.append(f"input {i} (shape {xs[i].shape}): {int(bad.sum())} of {num.size} elements differ; "
                            f"worst at {tuple(int(j) for j in k)}: analytic {a[k]:.6g}, numeric {num[k]:.6g} "
                            f"(atol={atol}, rtol={rtol}, eps={eps})")
    if not ok and raise_exception:
        raise GradcheckError("gradcheck: backward disagrees with finite differences:\n  " + "\n  ".join(messages))
    return ok
