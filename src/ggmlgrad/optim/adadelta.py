"""torch.optim.Adadelta (one graph compute per step for all parameters, as the other optimizers)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..tensor import Tensor
from .optimizer import Optimizer


class Adadelta(Optimizer):
    """``torch.optim.Adadelta`` (PyTorch's update and defaults: ``lr=1.0, rho=0.9, eps=1e-6``)::

        g = -g if maximize;  g = g + weight_decay * p
        square_avg = rho * square_avg + (1 - rho) * g^2
        delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
        acc_delta = rho * acc_delta + (1 - rho) * delta^2
        p = p - lr * delta

    ``foreach``, ``capturable`` and ``differentiable`` are accepted (torch's execution switches).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = gg.optim.Adadelta([w], lr=1.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(x, 5) for x in w.tolist()]
    [0.99684, -1.99684]
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
        for k in ("eps", "weight_decay"):
            v = group[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"Invalid {k} value: {v!r}")
        if not isinstance(group["maximize"], bool):
            raise TypeError("Adadelta: maximize must be a bool")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("square_avg", "acc_delta")

    def _group_structure(self, group: dict) -> tuple:
        return (group["maximize"], group["weight_decay"] != 0)

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        rho = group["rho"]
        return np.array((group["lr"], rho, group["eps"], group["weight_decay"], 1.0 - rho), np.float32)

    def _hparams_key(self, group: dict) -> tuple:
        return (group["lr"], group["rho"], group["eps"], group["weight_decay"])

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        options = {"weight_decay": group["weight_decay"] != 0, "maximize": group["maximize"]}
        return "adadelta", (state["square_avg"], state["acc_delta"]), options
