"""L-BFGS (torch.optim.LBFGS): closure-based, with an optional strong-Wolfe line search.

The vectors (gradients, directions, the curvature history) are tensors, so their arithmetic runs as
ggml nodes; the scalars the algorithm branches on (dot products, the step length) are read on the
host as float32, as torch's are float32 tensors. In graph mode each such read is a sync point.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import numpy as np

from ..tensor import Tensor, no_grad
from ..tensor.grad_mode import enable_grad
from .optimizer import Optimizer

F32 = np.float32


def _dot(a: Tensor, b: Tensor) -> np.float32:
    return F32((a * b).sum().item())


def _abs_max(a: Tensor) -> np.float32:
    return F32(a.abs().max().item())


def cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimiser of the cubic through two points with values ``f`` and slopes ``g``, clamped to
    ``bounds`` (default: the interval between the points); the midpoint when the cubic has none."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = float(np.sqrt(disc))
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


@dataclasses.dataclass
class _Point:
    """One trial of the line search: step ``t``, loss ``f``, flat gradient ``g``, slope ``gtd``."""
    t: float
    f: float
    g: Tensor
    gtd: float


def strong_wolfe(evaluate: Callable, t: float, d: Tensor, f: float, g: Tensor, gtd: float, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25):
    """A step length satisfying the strong Wolfe conditions along ``d`` (bracketing, then zoom by cubic
    interpolation). ``evaluate(t)`` returns (loss, flat gradient) at ``x + t d``. Returns
    (loss, flat gradient, t, evaluations)."""
    d_norm = float(_abs_max(d))
    start = _Point(0.0, f, g, gtd)
    prev = start
    f_new, g_new = evaluate(t)
    evals, it = 1, 0
    new = _Point(t, f_new, g_new, float(_dot(g_new, d)))
    bracket: list[_Point] | None = None
    done = False
    while it < max_ls:
        if new.f > f + c1 * new.t * gtd or (it > 1 and new.f >= prev.f):   # no sufficient decrease
            bracket = [prev, new]
            break
        if abs(new.gtd) <= -c2 * gtd:                                     # curvature condition: done
            bracket, done = [new], True
            break
        if new.gtd >= 0:                                                  # passed a minimum
            bracket = [prev, new]
            break
        t_next = cubic_minimum(prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd,
                               bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev = new
        f_new, g_new = evaluate(t_next)
        evals, it = evals + 1, it + 1
        new = _Point(t_next, f_new, g_new, float(_dot(g_new, d)))
    if bracket is None:                      # max_ls trials without a bracket
        bracket = [start, new]
    insufficient = False
    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    while not done and it < max_ls:
        a, b = bracket
        if abs(b.t - a.t) * d_norm < tolerance_change:
            break
        t = cubic_minimum(a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        top, bottom = max(a.t, b.t), min(a.t, b.t)
        eps = 0.1 * (top - bottom)
        if min(top - t, t - bottom) < eps:    # too close to an end: move inside, or note slow progress
            if insufficient or t >= top or t <= bottom:
                t = top - eps if abs(t - top) < abs(t - bottom) else bottom + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = evaluate(t)
        evals, it = evals + 1, it + 1
        trial = _Point(t, f_new, g_new, float(_dot(g_new, d)))
        if trial.f > f + c1 * t * gtd or trial.f >= bracket[low].f:
            bracket[high] = trial
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
        else:
            if abs(trial.gtd) <= -c2 * gtd:
                done = True
            elif trial.gtd * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = trial
    best = bracket[low] if len(bracket) > 1 else bracket[0]
    return best.f, best.g, best.t, evals


class LBFGS(Optimizer):
    """``torch.optim.LBFGS``: ``step(closure)`` runs up to ``max_iter`` quasi-Newton iterations, each
    a two-loop recursion over the last ``history_size`` curvature pairs, with a fixed step ``lr`` or a
    ``line_search_fn="strong_wolfe"`` search. One parameter group (as torch).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([3.0, -2.0], requires_grad=True)
    >>> opt = gg.optim.LBFGS([w], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((w - 1.0) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> _ = opt.step(closure)
    >>> [round(x, 4) for x in w.tolist()]
    [1.0, 1.0]
    """

    def __init__(self, params: Iterable, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._memory: dict = {"func_evals": 0, "n_iter": 0}

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ()

    def add_param_group(self, param_group: dict) -> None:
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(param_group)

    # ------------------------------------------------------------------ flat vectors
    def _flat_grad(self) -> Tensor:
        from ..tensor.functional_shape import cat
        parts = [p.grad.reshape(-1) if p.grad is not None else p.detach().reshape(-1) * 0.0 for p in self._params]
        return cat(parts, 0) if len(parts) > 1 else parts[0].clone()

    def _add_to_params(self, t: float, d: Tensor) -> None:
        at = 0
        with no_grad():
            for p in self._params:
                n = p.numel()
                p.add_(d[at:at + n].reshape(p.shape), alpha=float(t))
                at += n

    def _evaluate_at(self, closure: Callable, start: list[Tensor], t: float, d: Tensor):
        self._add_to_params(t, d)
        with enable_grad():
            loss = float(closure())
        flat = self._flat_grad()
        with no_grad():
            for p, x in zip(self._params, start):
                p.copy_(x)
        return loss, flat

    # ------------------------------------------------------------------ the step
    def _direction(self, mem: dict, flat_grad: Tensor, history: int) -> Tensor:
        """The two-loop recursion: ``-H g`` from the stored curvature pairs (updated first)."""
        if mem["n_iter"] == 1:
            mem.update(old_dirs=[], old_stps=[], ro=[], H_diag=F32(1.0))
            return -flat_grad
        y = flat_grad - mem["prev_flat_grad"]
        s = mem["d"] * float(mem["t"])
        ys = _dot(y, s)
        if ys > 1e-10:
            if len(mem["old_dirs"]) == history:
                for k in ("old_dirs", "old_stps", "ro"):
                    mem[k].pop(0)
            mem["old_dirs"].append(y)
            mem["old_stps"].append(s)
            mem["ro"].append(F32(1.0) / ys)
            mem["H_diag"] = ys / _dot(y, y)
        dirs, stps, ro = mem["old_dirs"], mem["old_stps"], mem["ro"]
        alphas = [F32(0.0)] * len(dirs)
        q = -flat_grad
        for i in range(len(dirs) - 1, -1, -1):
            alphas[i] = _dot(stps[i], q) * ro[i]
            q = q - dirs[i] * float(alphas[i])
        r = q * float(mem["H_diag"])
        for i in range(len(dirs)):
            beta = _dot(dirs[i], r) * ro[i]
            r = r + stps[i] * float(alphas[i] - beta)
        return r

    def step(self, closure: Callable | None = None):
        """Run the iterations; ``closure`` re-evaluates the model and returns the loss (required)."""
        if closure is None:
            raise RuntimeError("LBFGS.step needs a closure that re-evaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        mem = self._memory
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        evals = 1
        mem["func_evals"] += 1
        flat_grad = self._flat_grad()
        if _abs_max(flat_grad) <= tol_grad:
            return orig_loss
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            mem["n_iter"] += 1
            d = self._direction(mem, flat_grad, group["history_size"])
            mem["prev_flat_grad"], prev_loss = flat_grad, loss
            t = float(min(F32(1.0), F32(1.0) / F32(flat_grad.abs().sum().item())) * F32(lr)) \
                if mem["n_iter"] == 1 else lr
            gtd = float(_dot(flat_grad, d))
            if gtd > -tol_change:
                break
            ls_evals = 0
            if group["line_search_fn"] not in (None, "strong_wolfe"):
                raise RuntimeError("only 'strong_wolfe' is supported")   # where torch checks (not at construction)
            if group["line_search_fn"] == "strong_wolfe":
                start = [p.detach().clone() for p in self._params]
                loss, flat_grad, t, ls_evals = strong_wolfe(
                    lambda step: self._evaluate_at(closure, start, step, d), t, d, loss, flat_grad, gtd,
                    max_ls=max_eval - evals)
                self._add_to_params(t, d)
            else:
                self._add_to_params(t, d)
                if n_iter != max_iter:
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._flat_grad()
                    ls_evals = 1
            mem["d"], mem["t"] = d, t
            evals += ls_evals
            mem["func_evals"] += ls_evals
            if n_iter == max_iter or evals >= max_eval or _abs_max(flat_grad) <= tol_grad:
                break
            if _abs_max(d) * abs(t) <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        for p in self._params:
            self.state[p]["step"] = self.state[p].get("step", 0) + 1
        return orig_loss

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        raise RuntimeError("LBFGS has no fused update: call step(closure); gg.capture_step cannot record it")

    def capture_update(self):
        raise RuntimeError("LBFGS runs its closure many times per step, so gg.capture_step cannot record it: "
                           "call opt.step(closure) (it runs in eager and graph mode)")
