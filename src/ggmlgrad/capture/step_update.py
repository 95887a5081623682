"""The parts of a captured training step (``gg.capture_step``) besides the recording itself: the
optimizer's side of a recording (:class:`StepUpdate`) and the traced pieces of a step (the loss and
its gradients, clipping, the norm's check), which :class:`~ggmlgrad.capture.api.CapturedStep` composes.
"""
from __future__ import annotations

import math
import operator
from typing import Callable

from ..engine import CaptureError, float32
from ..ops import op
from ..tensor import Tensor, no_grad
from ..tensor.views import refresh_views_of

_REQUIRES_GRAD = operator.attrgetter("requires_grad")


class StepUpdate:
    """The optimizer's side of one recording of a training step: its ``CaptureUpdate`` (``update``),
    the parameters it writes, the gradients the recording made for them, the hyperparameter and
    clip-limit slots a replay fills, and the staleness checks of all of these.

    A replay calls :meth:`stage` before its upload, :meth:`give_grads` once the gradients are
    computed, and :meth:`finish` after the update ran.
    """

    __slots__ = ("update", "params", "grad_flags", "grads", "hparam_views", "clip_slot")

    def __init__(self, update, grads: list, hparam_slots: list, clip_slot) -> None:
        self.update = update
        self.params = update.params
        self.grad_flags = tuple(map(_REQUIRES_GRAD, self.params))  # a frozen parameter gets no gradient
        self.grads = grads
        self.hparam_views = [memoryview(s.view).cast("B") for s in hparam_slots]  # float32: row bytes copy in
        self.clip_slot = clip_slot

    def stale(self) -> str | None:
        """Why the recorded update no longer fits: parameters, structure, state or requires_grad."""
        if self.update.changed():
            return "the optimizer's parameter set, update structure or state tensors changed"
        if tuple(map(_REQUIRES_GRAD, self.params)) != self.grad_flags:
            changed = [p.shape for p, f in zip(self.params, self.grad_flags) if p.requires_grad != f]
            return f"requires_grad of {len(changed)} optimizer parameter(s) changed (shapes {changed[:3]})"
        return None

    def stage(self, max_grad_norm: float | None) -> None:
        """Fill the replay's inputs of the update: this step's hyperparameters, the clip limit."""
        self.update.write_hparams(self.hparam_views)
        if self.clip_slot is not None:
            self.clip_slot.view[...] = max_grad_norm

    def give_grads(self) -> None:
        """The parameters' ``.grad`` are the recording's gradients (also after ``zero_grad()`` set
        them to None or zeros)."""
        for p, g in zip(self.params, self.grads):
            if p.grad is not g:
                p.grad = g

    def finish(self) -> None:
        """After the update ran: the step counters of the parameters it wrote advance, and their live
        views show the new values (a length check each when there are none)."""
        self.update.advance()
        refresh_views_of(self.params)


def loss_and_grads(fn: Callable, args: tuple, kwargs: dict, params: list) -> tuple:
    """``(fn's output, the gradients of its loss for params)``, traced inside a recording; the
    parameters' ``.grad`` are None before and after."""
    for p in params:
        p.grad = None
    out = fn(*args, **kwargs)
    pick_loss(out).backward()
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    if all(g is None for g in grads):
        raise CaptureError("capture_step: the loss does not depend on any optimizer parameter")
    return out, grads


def clip_grads(recorder, grads: list) -> tuple[list, Tensor]:
    """``(grads scaled to the total norm limit, their total norm)``; the limit is a recorder input."""
    with no_grad():
        limit = recorder.input("clip", "max_grad_norm", (), float32)
        norm = op.capture_grad_norm(*[g for g in grads if g is not None])
        scale = op.capture_clip_scale(norm, limit)
        return [op.mul(g, scale) if g is not None else None for g in grads], norm


def finite_norm(value) -> float:
    """The downloaded total gradient norm, refused when not finite (the update is then skipped)."""
    norm = float(value)
    if not math.isfinite(norm):
        raise RuntimeError(
            f"capture_step: the total gradient norm is {norm}; the update was skipped (weights, "
            f"optimizer moments and step counters are unchanged). Lower the learning rate or check "
            f"the loss for inf/nan.")
    return norm


def pick_loss(out) -> Tensor:
    """The loss of a loss function's output: the output, its first entry, or its ``"loss"`` entry."""
    loss = out
    if isinstance(out, (tuple, list)) and out:
        loss = out[0]
    elif isinstance(out, dict):
        if "loss" not in out:
            raise CaptureError("capture_step: the loss function returned a dict without a 'loss' entry")
        loss = out["loss"]
    if not isinstance(loss, Tensor):
        raise CaptureError(f"capture_step: the loss function must return a scalar Tensor (or a tuple/dict "
                           f"whose first/'loss' entry is one), got {type(loss).__name__}")
    if loss.numel_ != 1:
        raise CaptureError(f"capture_step: the loss must have one element, got shape {loss.shape}")
    if not loss.requires_grad:
        raise CaptureError("capture_step: the loss does not require grad (no parameter reached it)")
    return loss


def check_norm(v):
    """``max_grad_norm`` checked: None or a positive float."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"capture_step: max_grad_norm must be a positive number or None, got {v!r}")
    return float(v)
