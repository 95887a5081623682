"""Adam and AdamW on ggml's fused ``opt_step_adamw`` (one graph compute per step for all parameters)."""
from __future__ import annotations

from typing import Iterable

import math

import numpy as np

from ..engine import float32
from ..ops import optim_extra as ox
from ..runtime import StridedAlias
from ..runtime.placement import addressable_in_place
from ..tensor import Tensor
from .optimizer import Optimizer
from .rules import check_betas, check_flags, check_nonneg, pack


class Adam(Optimizer):
    """``torch.optim.Adam``. ``weight_decay`` is the L2 form:
    ``weight_decay * p`` is added to the gradient before the moments.

    Update for step ``t`` (PyTorch's, eps outside the square root)::

        m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
        p = p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)

    float32 parameters use ggml's fused ``ggml_opt_step_adamw`` (which implements exactly
    this, plus AdamW's decoupled decay); float16/bfloat16 parameters, or ``fused=False``,
    use the same update composed from elementary ops, with float32 moments. ``amsgrad=True`` keeps
    the running maximum of ``v`` (state ``max_exp_avg_sq``) and divides by its root instead
    (composed ops: ``ops/optim_extra.py``).
    Hyperparameters (lr, betas, eps, decay, bias corrections) are a per-group tensor
    uploaded each step: changing them needs no new graph.

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = gg.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(x, 4) for x in w.tolist()]
    [0.9, -1.9]
    """

    _decoupled = False

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 fused: bool | None = None):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, fused=fused))

    def _validate_group(self, group: dict) -> None:
        super()._validate_group(group)
        check_betas(group)
        check_nonneg(group, "eps", "weight_decay")
        check_flags(type(self).__name__, group, "maximize", "amsgrad")
        if group["amsgrad"] and group.get("fused"):
            raise RuntimeError(f"{type(self).__name__}: fused=True does not support amsgrad (ggml's fused "
                               f"AdamW has no running maximum); use fused=None")
        if group.get("fused") not in (None, True, False):
            raise TypeError(f"{type(self).__name__}: fused must be None, True or False")

    def _state_tensor_keys(self, group: dict) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if group["amsgrad"] else ("exp_avg", "exp_avg_sq")

    def _validate_param(self, p: Tensor, group: dict) -> None:
        self._use_fused(group, p)

    def _use_fused(self, group: dict, p: Tensor) -> bool:
        if group.get("fused") is False or group["amsgrad"]:
            return False
        if type(p._storage) is StridedAlias:  # (fused writes through the node it reads: a contiguous copy)
            if group.get("fused"):
                raise TypeError(f"{type(self).__name__}(fused=True): a parameter whose memory is a non-contiguous "
                                f"view (shape {p.shape}) cannot use ggml's fused AdamW; use fused=None")
            return False
        if not addressable_in_place(p._storage):   # a view at an offset the device's fused kernel cannot address
            if group.get("fused"):
                raise TypeError(f"{type(self).__name__}(fused=True): a parameter that is a view {p._storage.offset} "
                                f"bytes into its base cannot use ggml's fused AdamW on {p.device.name} (its kernel "
                                f"needs {p.device.alignment}-byte aligned memory); use fused=None")
            return False
        if p.dtype is not float32:
            if group.get("fused"):
                raise TypeError(f"{type(self).__name__}(fused=True): ggml's fused AdamW needs float32 "
                                f"parameters, got {p.dtype.name} (shape {p.shape}); use fused=None")
            return False
        return True

    def _group_structure(self, group: dict) -> tuple:
        return (group["maximize"], group["weight_decay"] != 0 and not self._decoupled, group.get("fused"),
                group["amsgrad"])

    def _group_hparams(self, group: dict, step: int) -> np.ndarray:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        decoupled_wd = wd if self._decoupled else 0.0
        if group["amsgrad"]:
            return pack(ox.AMSGRAD, lr=lr, beta1=b1, one_minus_beta1=1.0 - b1, beta2=b2, one_minus_beta2=1.0 - b2,
                        eps=eps, wd=0.0 if self._decoupled else wd, keep=1.0 - lr * decoupled_wd,
                        bc1_inv=1.0 / (1.0 - b1 ** step), bc2_sqrt_inv=1.0 / math.sqrt(1.0 - b2 ** step))
        # In float64 (Python floats), rounded to float32 once; in the order of optim_ops' ADAM_* indices.
        return np.array((lr, b1, b2, eps, decoupled_wd, 1.0 / (1.0 - b1 ** step), 1.0 / (1.0 - b2 ** step),
                         0.0 if self._decoupled else wd, 1.0 - b1, 1.0 - b2, 1.0 - lr * decoupled_wd), np.float32)

    def _hparams_key(self, group: dict) -> tuple:
        return (group["lr"], group["betas"], group["eps"], group["weight_decay"], group["amsgrad"])

    def _hparams_rows(self, group: dict, first_step: int, n: int) -> np.ndarray:
        # _group_hparams for n steps at once; the powers and bias corrections are the same Python
        # float64 operations (NumPy's vectorised pow may round differently), the rest is constant.
        if group["amsgrad"]:
            return super()._hparams_rows(group, first_step, n)
        b1, b2 = group["betas"]
        steps = range(first_step, first_step + n)
        rows = np.empty((n, 11), np.float64)
        rows[:] = self._group_hparams(group, first_step).astype(np.float64)  # the step-free columns
        rows[:, 5] = [1.0 / (1.0 - b1 ** t) for t in steps]
        rows[:, 6] = [1.0 / (1.0 - b2 ** t) for t in steps]
        return rows.astype(np.float32)

    def _update_rule(self, p: Tensor, group: dict, state: dict) -> tuple:
        options = {"l2": group["weight_decay"] != 0 and not self._decoupled, "maximize": group["maximize"]}
        if group["amsgrad"]:
            return "adam_amsgrad", (state["exp_avg"], state["exp_avg_sq"], state["max_exp_avg_sq"]), options
        return ("adamw_fused" if self._use_fused(group, p) else "adam"), (state["exp_avg"], state["exp_avg_sq"]), options


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay, ``p = p (1 - lr wd)`` before the
    Adam step (default ``weight_decay=0.01`` as in PyTorch).

    >>> import ggmlgrad as gg
    >>> w = gg.tensor([1.0], requires_grad=True)
    >>> opt = gg.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 4)       # 1 * (1 - 0.1*0.5) - 0.1
    0.85
    """

    _decoupled = True

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 fused: bool | None = None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, fused=fused)
