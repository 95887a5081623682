"""Learning-rate schedulers (PyTorch's names, arguments and lr sequences).

A scheduler writes ``group["lr"]`` of its optimizer's parameter groups; the
optimizer reads it into its hyperparameter tensor at the next step, so a schedule
never rebuilds a graph (and never re-records a captured step).

Every scheduler here computes the lr in closed form from ``last_epoch`` and the
groups' ``initial_lr`` (PyTorch mixes closed and recursive forms; they agree
unless something else edits ``group["lr"]`` between steps, which a closed form
ignores: the schedule owns the lr).

>>> import ggmlgrad as gg
>>> w = gg.tensor([1.0], requires_grad=True)
>>> opt = gg.optim.SGD([w], lr=1.0)
>>> warmup = gg.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
>>> cosine = gg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
>>> sched = gg.optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[2])
>>> lrs = []
>>> for _ in range(6):
...     lrs.append(round(sched.get_last_lr()[0], 4)); opt.step(); sched.step()
>>> lrs
[0.1, 0.55, 1.0, 0.8536, 0.5, 0.1464]
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Sequence

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR", "LinearLR",
           "OneCycleLR", "CyclicLR", "SequentialLR", "ConstantLR", "PolynomialLR", "CosineAnnealingWarmRestarts",
           "ReduceLROnPlateau", "MultiplicativeLR", "ChainedScheduler"]


class LRScheduler:
    """Base class: ``step()`` advances ``last_epoch`` and sets every group's lr to ``_lr_at(last_epoch)``."""

    def __init__(self, optimizer, last_epoch: int = -1):
        from .optimizer import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                                   f"an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = [g["lr"] for g in optimizer.param_groups]
        self.step()

    # --- to define in subclasses
    def _lr_at(self, epoch: int) -> list[float]:
        raise NotImplementedError

    def _apply_extra(self, epoch: int) -> None:
        """Hook for schedulers that also set momentum (OneCycleLR, CyclicLR)."""

    # --- public API
    def get_lr(self) -> list[float]:
        return self._lr_at(self.last_epoch)

    def get_last_lr(self) -> list[float]:
        """The lr of each group as set by the last ``step()``."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and write the new lr into the groups."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self._lr_at(self.last_epoch)
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._apply_extra(self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Everything but the optimizer (and lambda functions, which cannot be saved)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)
                and not (isinstance(v, list) and v and all(callable(f) for f in v))}

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict):
            raise TypeError(f"{type(self).__name__}.load_state_dict: expected a dict")
        unknown = [k for k in state_dict if k not in self.__dict__]
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unexpected keys {unknown}")
        self.__dict__.update(state_dict)
        self._restore_groups()

    def _restore_groups(self) -> None:
        """Put the restored schedule's lr (and momentum) back into the groups, so the order of
        ``optimizer.load_state_dict`` and scheduler construction does not matter (the schedule owns lr)."""
        for g, lr in zip(self.optimizer.param_groups, self._last_lr):
            g["lr"] = lr
        if self.last_epoch >= 0:
            self._apply_extra(self.last_epoch)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, last_lr={self._last_lr})"


# PyTorch's older name
_LRScheduler = LRScheduler


def _per_group(name: str, optimizer, value) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"expected {len(optimizer.param_groups)} values for {name}, got {len(value)}")
        return list(value)
    return [value] * len(optimizer.param_groups)


class StepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if not isinstance(step_size, int) or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [b * self.gamma ** (epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (number of milestones <= epoch)``."""

    def __init__(self, optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [b * self.gamma ** bisect.bisect_right(self.milestones, epoch) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = initial_lr * gamma ** epoch``."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [b * self.gamma ** epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2`` (SGDR without restarts)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if not T_max > 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        c = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)`` (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
        fns = _per_group("lr_lambda", optimizer, lr_lambda)
        if not all(callable(f) for f in fns):
            raise TypeError("LambdaLR: lr_lambda must be callable (or a list of callables)")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        return [b * f(epoch) for b, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self) -> dict:
        d = super().state_dict()
        d.pop("lr_lambdas", None)
        return d


class LinearLR(LRScheduler):
    """Factor goes linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs, then stays."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        if not isinstance(total_iters, int) or total_iters < 0:
            raise ValueError(f"LinearLR: total_iters must be a non-negative int, got {total_iters!r}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        frac = 1.0 if self.total_iters == 0 else min(self.total_iters, epoch) / self.total_iters
        f = self.start_factor + (self.end_factor - self.start_factor) * frac
        return [b * f for b in self.base_lrs]


def _momentum_key(optimizer, who: str) -> str:
    if "momentum" in optimizer.defaults:
        return "momentum"
    if "betas" in optimizer.defaults:
        return "betas"
    raise ValueError(f"{who}: optimizer must support momentum or beta1 with `cycle_momentum` enabled")


def _set_momentum(group: dict, key: str, m: float) -> None:
    if key == "betas":
        group["betas"] = (m, *group["betas"][1:])
    else:
        group["momentum"] = m


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), PyTorch's phases and defaults.

    Two phases (default): ``initial_lr = max_lr / div_factor`` up to ``max_lr`` over
    ``pct_start * total_steps - 1`` steps, then down to ``initial_lr / final_div_factor``
    at step ``total_steps - 1``; ``three_phase=True`` adds PyTorch's symmetric third phase.
    Momentum (or Adam's beta1) cycles inversely between ``max_momentum`` and ``base_momentum``.
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False, last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"OneCycleLR: total_steps must be a positive int, got {total_steps!r}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        self.cycle_momentum = cycle_momentum
        if three_phase:
            self._phases = [(float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                            (total_steps - 1.0, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(float(pct_start * total_steps) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1.0, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        max_lrs = _per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, max_lrs):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        if cycle_momentum:
            self._mkey = _momentum_key(optimizer, "OneCycleLR")
            bases = _per_group("base_momentum", optimizer, base_momentum)
            maxes = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for g, lo, hi in zip(optimizer.param_groups, bases, maxes):
                    _set_momentum(g, self._mkey, hi)
                    g["max_momentum"], g["base_momentum"] = hi, lo
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _phase_values(self, group: dict, step: int) -> tuple[float, float | None]:
        start_step = 0.0
        for i, (end_step, lr_a, lr_b, m_a, m_b) in enumerate(self._phases):
            if step <= end_step or i == len(self._phases) - 1:
                pct = (step - start_step) / (end_step - start_step) if end_step != start_step else 1.0
                lr = self._anneal(group[lr_a], group[lr_b], pct)
                mom = self._anneal(group[m_a], group[m_b], pct) if self.cycle_momentum else None
                return lr, mom
            start_step = end_step
        raise AssertionError("unreachable")

    def _check(self, step: int) -> None:
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; total_steps is {self.total_steps}")

    def _lr_at(self, epoch):
        self._check(epoch)
        return [self._phase_values(g, epoch)[0] for g in self.optimizer.param_groups]

    def _apply_extra(self, epoch: int) -> None:
        if self.cycle_momentum:
            for g in self.optimizer.param_groups:
                _set_momentum(g, self._mkey, self._phase_values(g, epoch)[1])


class CyclicLR(LRScheduler):
    """Cyclical learning rate (Smith 2017), PyTorch's modes: ``triangular``, ``triangular2``,
    ``exp_range`` or a custom ``scale_fn``; momentum cycles inversely when ``cycle_momentum``."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000, step_size_down: int | None = None,
                 mode: str = "triangular", gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9,
                 last_epoch: int = -1):
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        self._cyclic_base = [float(b) for b in base_lrs]
        if last_epoch == -1:
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr
        self.max_lrs = [float(m) for m in _per_group("max_lr", optimizer, max_lr)]
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down < 0:
            raise ValueError("CyclicLR: step sizes must be positive")
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else (
            "iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._mkey = _momentum_key(optimizer, "CyclicLR")
            self.base_momentums = [float(m) for m in _per_group("base_momentum", optimizer, base_momentum)]
            self.max_momentums = [float(m) for m in _per_group("max_momentum", optimizer, max_momentum)]
            if last_epoch == -1:
                for g, m in zip(optimizer.param_groups, self.max_momentums):
                    _set_momentum(g, self._mkey, m)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = [float(b) for b in base_lrs]
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _scale(self, x: float) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def _factors(self, epoch: int) -> tuple[float, float]:
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        s = self._scale(cycle if self.scale_mode == "cycle" else epoch)
        return scale_factor, s

    def _lr_at(self, epoch):
        f, s = self._factors(epoch)
        return [b + (m - b) * f * s for b, m in zip(self._cyclic_base, self.max_lrs)]

    def _apply_extra(self, epoch: int) -> None:
        if self.cycle_momentum:
            f, s = self._factors(epoch)
            for g, lo, hi in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                _set_momentum(g, self._mkey, hi - (hi - lo) * f * s)

    def state_dict(self) -> dict:
        d = super().state_dict()
        d.pop("_scale_fn_custom", None)
        return d


class SequentialLR(LRScheduler):
    """Run ``schedulers[i]`` from ``milestones[i-1]`` on (each restarted at its epoch 0):
    e.g. ``LinearLR`` warmup for 5 epochs, then ``CosineAnnealingLR``, with ``milestones=[5]``."""

    def __init__(self, optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        if len(schedulers) < 1:
            raise ValueError("SequentialLR: expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler):
                raise TypeError(f"SequentialLR: schedulers[{i}] is not a scheduler")
            if s.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: schedulers[{i}] belongs to a different optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: expected {len(schedulers) - 1} milestones, got {len(milestones)}")
        self._schedulers = list(schedulers)
        self._milestones = [int(m) for m in milestones]
        super().__init__(optimizer, last_epoch)

    def _active(self, epoch: int) -> tuple[LRScheduler, int]:
        idx = bisect.bisect_right(self._milestones, epoch)
        start = self._milestones[idx - 1] if idx > 0 else 0
        return self._schedulers[idx], epoch - start

    def _lr_at(self, epoch):
        sched, local = self._active(epoch)
        return sched._lr_at(local)

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        sched, local = self._active(self.last_epoch)
        sched.step(local)           # the active scheduler writes the groups (and momentum)
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        d["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return d

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers", None)
        if subs is None or len(subs) != len(self._schedulers):
            raise ValueError("SequentialLR.load_state_dict: scheduler states missing or of the wrong number")
        for s, d in zip(self._schedulers, subs):
            s.load_state_dict(d)
        super().load_state_dict(state_dict)     # last: the active schedule's lr wins


class ConstantLR(LRScheduler):
    """``lr = initial_lr * factor`` for the first ``total_iters`` epochs, then ``initial_lr``."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor, self.total_iters = factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        f = self.factor if epoch < self.total_iters else 1.0
        return [b * f for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """``lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) ** power``."""

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        if not isinstance(total_iters, int) or total_iters <= 0:
            raise ValueError(f"PolynomialLR: total_iters must be a positive int, got {total_iters!r}")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        f = (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power
        return [b * f for b in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: cosine from ``initial_lr`` to ``eta_min`` over ``T_0`` epochs, restarting, each cycle
    ``T_mult`` times longer than the previous one."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int, got {T_0!r}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_mult must be an int >= 1, got {T_mult!r}")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def _position(self, epoch: int) -> tuple[int, int]:
        """(epochs into the current cycle, the cycle's length), by exact integer arithmetic."""
        t_i, t_cur = self.T_0, epoch
        while t_cur >= t_i:
            t_cur -= t_i
            t_i *= self.T_mult
        return t_cur, t_i

    def _lr_at(self, epoch):
        t_cur, t_i = self._position(max(epoch, 0))
        c = (1 + math.cos(math.pi * t_cur / t_i)) / 2
        return [self.eta_min + (b - self.eta_min) * c for b in self.base_lrs]


class ReduceLROnPlateau:
    """Multiply the lr by ``factor`` once a metric has stopped improving for ``patience`` epochs
    (PyTorch's rules: ``mode`` min/max, ``threshold_mode`` rel/abs, ``cooldown``, ``min_lr``, ``eps``).
    ``step(metric)`` takes a number or a one-element tensor (read back to the host).

    >>> import ggmlgrad as gg
    >>> opt = gg.optim.SGD([gg.tensor([1.0], requires_grad=True)], lr=1.0)
    >>> sched = gg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    >>> for loss in [1.0, 1.0, 1.0, 0.5]:
    ...     sched.step(loss)
    >>> sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr=0.0,
                 eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau: factor should be < 1.0")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode {mode!r} is unknown")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown")
        self.optimizer = optimizer
        self.min_lrs = [float(m) for m in _per_group("min_lr", optimizer, min_lr)]
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (1 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics) -> None:
        current = float(metrics)
        self.last_epoch += 1
        if self._better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for g, lo in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(g["lr"] * self.factor, lo)
                if g["lr"] - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        unknown = [k for k in state_dict if k not in self.__dict__]
        if unknown:
            raise ValueError(f"ReduceLROnPlateau.load_state_dict: unexpected keys {unknown}")
        self.__dict__.update(state_dict)
        for g, lr in zip(self.optimizer.param_groups, self._last_lr):
            g["lr"] = lr


class MultiplicativeLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(1) * ... * lr_lambda(epoch)`` (torch multiplies the current lr by
    ``lr_lambda(epoch)`` at each step after the first; one function, or one per group).

    >>> import ggmlgrad as gg
    >>> opt = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = MultiplicativeLR(opt, lr_lambda=lambda epoch: 0.5)
    >>> sched.step(); sched.step(); sched.get_last_lr()
    [0.25]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        fns = _per_group("lr_lambda", optimizer, lr_lambda)
        if not all(callable(f) for f in fns):
            raise TypeError("MultiplicativeLR: lr_lambda must be callable (or a list of callables)")
        self.lr_lambdas = fns
        self._products: tuple[int, list[float]] = (0, [1.0] * len(fns))   # (epoch, running products)
        super().__init__(optimizer, last_epoch)

    def _lr_at(self, epoch):
        at, prods = self._products
        if epoch < at:                     # a jump back (step(epoch=...)): start over
            at, prods = 0, [1.0] * len(self.lr_lambdas)
        for k in range(at + 1, epoch + 1):
            prods = [p * f(k) for p, f in zip(prods, self.lr_lambdas)]
        self._products = (max(epoch, 0), prods)
        return [b * p for b, p in zip(self.base_lrs, prods)]

    def state_dict(self) -> dict:
        d = super().state_dict()
        d.pop("lr_lambdas", None)
        return d


#: Schedulers whose torch (recursive) form multiplies the current lr by a factor, so a chain of them
#: is the product of their factors (torch's recursive cosine turns additive past T_max: not here).
_CHAINABLE = (StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, MultiplicativeLR)


class ChainedScheduler(LRScheduler):
    """Several schedulers stepped together; the lr is ``initial_lr`` times the product of each one's
    factor, as torch's chain of multiplicative schedulers gives. Schedulers that set the lr outright
    (LambdaLR, CyclicLR, OneCycleLR, the cosine schedules) are refused.

    >>> import ggmlgrad as gg
    >>> opt = gg.optim.SGD([gg.zeros(1, requires_grad=True)], lr=1.0)
    >>> s = ChainedScheduler([ConstantLR(opt, factor=0.1, total_iters=2), ExponentialLR(opt, gamma=0.9)])
    >>> lrs = []
    >>> for _ in range(3):
    ...     lrs.append(round(s.get_last_lr()[0], 4)); opt.step(); s.step()
    >>> lrs
    [0.1, 0.09, 0.81]
    """

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer=None):
        self._schedulers = list(schedulers)
        if not self._schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler")
        for i, s in enumerate(self._schedulers):
            if not isinstance(s, _CHAINABLE):
                raise ValueError(f"ChainedScheduler: scheduler {i} ({type(s).__name__}) sets the lr outright "
                                 f"instead of scaling it, so it cannot be chained; chain "
                                 f"{', '.join(c.__name__ for c in _CHAINABLE)}")
        self.optimizer = optimizer if optimizer is not None else self._schedulers[0].optimizer
        if any(s.optimizer is not self.optimizer for s in self._schedulers):
            raise ValueError("ChainedScheduler expects all schedulers to belong to the same optimizer")
        self.base_lrs = [g["initial_lr"] for g in self.optimizer.param_groups]
        self.last_epoch = self._schedulers[0].last_epoch
        self._write()

    def _write(self) -> None:
        lrs = list(self.base_lrs)
        for s in self._schedulers:
            lrs = [lr * (mine / b if b else 0.0) for lr, mine, b in zip(lrs, s._lr_at(s.last_epoch), s.base_lrs)]
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = lrs

    def step(self, epoch: int | None = None) -> None:
        for s in self._schedulers:
            s.step()
        self.last_epoch += 1
        self._write()

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "_last_lr": list(self._last_lr),
                "_schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict) -> None:
        for s, sd in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(sd)
        self.last_epoch = state_dict["last_epoch"]
        self._write()
