"""Adamax, NAdam and RAdam (torch's update rules, one graph compute per step). Every number that
depends on the step (bias corrections, NAdam's momentum schedule, RAdam's rectification) is
computed here in float64 and passed in the hyperparameter vector."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..ops import optim_extra as ox
from ..tensor import Tensor
from .optimizer import Optimizer
from .rules import check_betas, check_flags, check_nonneg, pack


class _Moments(Optimizer):
    """Shared validation of the Adam family's options (betas, eps, weight decay, maximize)."""

    _state_keys: tuple[str, ...] = ("exp_avg", "exp_avg_sq")

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        check_betas(group)
        check_nonneg(group, "eps", "weight_decay")
        check_flags(type(self).__name__, group, "maximize", *(["decoupled_weight_decay"]
                                                               if "decoupled_weight_decay" in group else []))

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return self._state_keys

    def _l2(self, group: dict) -> bool:
        return group["weight_decay"] != 0 and not group.get("decoupled_weight_decay", False)

    def _group_structure(self, group: dict) -> tuple:
        return (self._l2(group), group["maximize"], group.get("decoupled_weight_decay", False))

    def _decay(self, group: dict) -> tuple[float, float]:
        """(L2 coefficient added to the gradient, decoupled factor 1 - lr wd applied to the parameter)."""
        wd = group["weight_decay"]
        if group.get("decoupled_weight_decay", False):
            return 0.0, 1.0 - group["lr"] * wd
        return wd, 1.0


class Adamax(_Moments):
    """``torch.optim.Adamax``: ``m = b1 m + (1 - b1) g``; ``u = max(b2 u, |g| + eps)``;
    ``p -= lr / (1 - b1^t) m / u``.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.Adamax([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)
    0.9
    """

    _state_keys = ("exp_avg", "exp_inf")

    def __init__(self, params: Iterable, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        b1, b2 = group["betas"]
        return pack(ox.ADAMAX, clr=group["lr"] / (1.0 - b1 ** step), beta1=b1, one_minus_beta1=1.0 - b1, beta2=b2,
                    eps=group["eps"], wd=group["weight_decay"])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        return "adamax", (state["exp_avg"], state["exp_inf"]), dict(l2=self._l2(group), maximize=group["maximize"])


class NAdam(_Moments):
    """``torch.optim.NAdam``: Adam with Nesterov momentum and the momentum schedule
    ``mu_t = b1 (1 - 0.5 * 0.96^(t momentum_decay))``.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.NAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)
    0.8944
    """

    def __init__(self, params: Iterable, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        check_nonneg(group, "momentum_decay")

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        b1, b2 = group["betas"]
        lr, md = group["lr"], group["momentum_decay"]
        mu = lambda t: b1 * (1.0 - 0.5 * 0.96 ** (t * md))   # noqa: E731
        mu_product = math.prod(mu(t) for t in range(1, step + 1))
        mu_t, mu_next = mu(step), mu(step + 1)
        l2, keep = self._decay(group)
        return pack(ox.NADAM, beta1=b1, one_minus_beta1=1.0 - b1, beta2=b2, one_minus_beta2=1.0 - b2,
                    eps=group["eps"], wd=l2, keep=keep, bc2_inv=1.0 / (1.0 - b2 ** step),
                    c_grad=lr * (1.0 - mu_t) / (1.0 - mu_product),
                    c_avg=lr * mu_next / (1.0 - mu_product * mu_next))

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        l2, maximize, decoupled = self._group_structure(group)
        return "nadam", (state["exp_avg"], state["exp_avg_sq"]), dict(l2=l2, maximize=maximize,
                                                                      decoupled=decoupled and group["weight_decay"] != 0)


class RAdam(_Moments):
    """``torch.optim.RAdam``: Adam whose adaptive step is rectified, and skipped while the variance
    estimate is not tractable (``rho_t <= 5``: the first steps take a plain momentum step).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.RAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)
    0.8
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        b1, b2 = group["betas"]
        bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * step * b2 ** step / bc2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive, plain = rect * math.sqrt(bc2), 0.0
        else:
            adaptive, plain = 0.0, 1.0
        l2, keep = self._decay(group)
        return pack(ox.RADAM, beta1=b1, one_minus_beta1=1.0 - b1, beta2=b2, one_minus_beta2=1.0 - b2,
                    eps=group["eps"], wd=l2, keep=keep, step_size=group["lr"] / bc1, adaptive=adaptive, plain=plain)

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        l2, maximize, decoupled = self._group_structure(group)
        return "radam", (state["exp_avg"], state["exp_avg_sq"]), dict(l2=l2, maximize=maximize,
                                                                      decoupled=decoupled and group["weight_decay"] != 0)
