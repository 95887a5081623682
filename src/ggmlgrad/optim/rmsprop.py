"""RMSprop, Adagrad and Adadelta (torch's update rules, one graph compute per step)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..ops import optim_extra as ox
from ..tensor import Tensor, no_grad
from .optimizer import Optimizer, _zeros_f32
from .rules import check_flags, check_nonneg, pack


class RMSprop(Optimizer):
    """``torch.optim.RMSprop``: ``v = alpha v + (1 - alpha) g^2``; with ``centered`` the mean gradient
    is subtracted (``v - mean^2``); ``p -= lr g / (sqrt(v) + eps)``, through a momentum buffer when
    ``momentum > 0``.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, -1.0], requires_grad=True)
    >>> opt = gg.optim.RMSprop([w], lr=0.01)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.9, -0.9]
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        check_nonneg(group, "eps", "weight_decay", "momentum", "alpha")
        check_flags("RMSprop", group, "centered", "maximize")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("square_avg",) + (("momentum_buffer",) if group["momentum"] > 0 else ()) + \
            (("grad_avg",) if group["centered"] else ())

    def _before_step(self) -> None:
        _add_missing_state(self)

    def _group_structure(self, group: dict) -> tuple:
        return (group["weight_decay"] != 0, group["maximize"], group["momentum"] > 0, group["centered"])

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        a = group["alpha"]
        return pack(ox.RMSPROP, lr=group["lr"], alpha=a, one_minus_alpha=1.0 - a, eps=group["eps"],
                    wd=group["weight_decay"], momentum=group["momentum"])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        keys = self._state_tensor_keys(group)
        l2, maximize, momentum, centered = self._group_structure(group)
        return "rmsprop", tuple(state[k] for k in keys), dict(l2=l2, maximize=maximize, momentum=momentum,
                                                              centered=centered)


class Adagrad(Optimizer):
    """``torch.optim.Adagrad``: ``sum += g^2``; ``p -= clr g / (sqrt(sum) + eps)`` with
    ``clr = lr / (1 + (step - 1) lr_decay)``; ``sum`` starts at ``initial_accumulator_value``.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.Adagrad([w], lr=0.5)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)
    0.5
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        check_nonneg(group, "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
        check_flags("Adagrad", group, "maximize")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("sum",)

    def _fresh_state(self, p: Tensor, group: dict) -> dict:
        st = super()._fresh_state(p, group)
        if group["initial_accumulator_value"]:
            with no_grad():
                st["sum"] = st["sum"] + float(group["initial_accumulator_value"])
        return st

    def _group_structure(self, group: dict) -> tuple:
        return (group["weight_decay"] != 0, group["maximize"])

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        clr = group["lr"] / (1.0 + (step - 1) * group["lr_decay"])
        return pack(ox.ADAGRAD, clr=clr, wd=group["weight_decay"], eps=group["eps"])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        l2, maximize = self._group_structure(group)
        return "adagrad", (state["sum"],), dict(l2=l2, maximize=maximize)


class Adadelta(Optimizer):
    """``torch.optim.Adadelta``: ``v = rho v + (1 - rho) g^2``;
    ``delta = sqrt(u + eps) / sqrt(v + eps) g``; ``u = rho u + (1 - rho) delta^2``; ``p -= lr delta``.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.Adadelta([w])
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 5)
    0.99684
    """

    def __init__(self, params: Iterable, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        rho = group["rho"]
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho!r}")
        check_nonneg(group, "eps", "weight_decay")
        check_flags("Adadelta", group, "maximize")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("square_avg", "acc_delta")

    def _group_structure(self, group: dict) -> tuple:
        return (group["weight_decay"] != 0, group["maximize"])

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        rho = group["rho"]
        return pack(ox.ADADELTA, lr=group["lr"], rho=rho, one_minus_rho=1.0 - rho, eps=group["eps"],
                    wd=group["weight_decay"])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        l2, maximize = self._group_structure(group)
        return "adadelta", (state["square_avg"], state["acc_delta"]), dict(l2=l2, maximize=maximize)


def _add_missing_state(opt: Optimizer) -> None:
    """State tensors that a group option turned on after construction (a scheduler's momentum)."""
    from ..engine import graph_mode
    states = opt.state._d
    missing = [(p, k) for g in opt.param_groups for k in opt._state_tensor_keys(g) for p in g["params"]
               if k not in states[id(p)][1]]
    if missing:
        with no_grad(), graph_mode(True):
            for p, k in missing:
                opt.state[p][k] = _zeros_f32(p)
