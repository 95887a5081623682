"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's rules)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..engine import graph_mode
from ..ops import optim_ops as oo
from ..tensor import Tensor, no_grad
from .optimizer import Optimizer, _zeros_f32


class SGD(Optimizer):
    """``torch.optim.SGD``: for each parameter with a gradient ``g``

        g = -g if maximize;  g = g + weight_decay * p
        buf = g (first step) | momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov) | buf
        p = p - lr * g

    All parameters update in ONE graph compute; every number above is read from a
    per-group hyperparameter tensor, so changing ``lr`` or ``momentum`` needs no new graph.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, -1.0], requires_grad=True)
    >>> opt = gg.optim.SGD([w], lr=0.5, momentum=0.9)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()
    [0.0, 0.0]
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        for k in ("momentum", "dampening", "weight_decay"):
            v = group[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"Invalid {k} value: {v!r}")
        for k in ("nesterov", "maximize"):
            if not isinstance(group[k], bool):
                raise TypeError(f"SGD: {k} must be a bool, got {group[k]!r}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _before_step(self) -> None:
        # A scheduler (CyclicLR) or the user may turn momentum on after construction. Runs every
        # step: the states by id (no _State call per parameter), the modes only when a buffer is new.
        states = self.state._d
        missing = [p for g in self.param_groups if g["momentum"] != 0 for p in g["params"]
                   if "momentum_buffer" not in states[id(p)][1]]
        if missing:
            with no_grad(), graph_mode(True):   # new buffers fill in one graph
                for p in missing:
                    self.state[p]["momentum_buffer"] = _zeros_f32(p)

    def _group_structure(self, group: dict) -> tuple:
        return (group["momentum"] != 0, group["nesterov"], group["maximize"], group["weight_decay"] != 0)

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        hp = np.empty(oo.SGD_HPARAMS, np.float64)
        hp[oo.SGD_LR] = group["lr"]
        hp[oo.SGD_WD] = group["weight_decay"]
        hp[oo.SGD_MOMENTUM] = group["momentum"]
        hp[oo.SGD_DAMP] = 1.0 if step == 1 else 1.0 - group["dampening"]
        return hp.astype(np.float32)

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        buf = state.get("momentum_buffer") if group["momentum"] != 0 else None
        if group["momentum"] != 0 and buf is None:
            raise RuntimeError("SGD: momentum buffer missing (call step(), which creates it)")
        options = {"weight_decay": group["weight_decay"] != 0, "maximize": group["maximize"],
                   "nesterov": group["nesterov"]}
        return "sgd", (buf,) if buf is not None else (), options
