"""The write ops of torch's other optimizers: RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam and
Adam/AdamW with ``amsgrad``, as elementwise ggml nodes (see :mod:`.optim_ops` for the conventions: a
target group is ``(param, grad, hparams, *state)``, the hyperparameters are a float32 vector read with
:func:`.optim_ops.row`, so changing them needs no new graph).

Every step-dependent number (bias corrections, NAdam's momentum products, RAdam's rectification and
its branch) is computed on the host in float64 by the optimizer and arrives in the vector, so one
graph serves every step (and a capture replay only refills the vector).
"""
from __future__ import annotations

from .._ggml import lib
from ..engine import float32
from .elementwise import minmax_node
from .optim_ops import as_f32, effective_grad, row
from .registry import define_write

# Hyperparameter layouts (index constants are shared with the optimizer classes in optim/).
RMSPROP = ("lr", "alpha", "one_minus_alpha", "eps", "wd", "momentum")
ADAGRAD = ("clr", "wd", "eps")
ADADELTA = ("lr", "rho", "one_minus_rho", "eps", "wd")
ADAMAX = ("clr", "beta1", "one_minus_beta1", "beta2", "eps", "wd")
NADAM = ("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps", "wd", "keep", "bc2_inv",
         "c_grad", "c_avg")
RADAM = ("beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps", "wd", "keep", "step_size",
         "adaptive", "plain")
AMSGRAD = ("lr", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "eps", "wd", "keep",
           "bc1_inv", "bc2_sqrt_inv")


def index(layout: tuple, name: str) -> int:
    """Position of ``name`` in a hyperparameter layout."""
    return layout.index(name)


def _checker(layout: tuple):
    """Per target group (param, grad, hparams, *state): every tensor but the hyperparameters has the
    parameter's shape and the hyperparameters are a float32 vector of ``len(layout)`` (a mismatch
    would reach ggml's shape assertions)."""
    want = (len(layout),)

    def check(name: str, inputs, parts) -> None:
        at = 0
        for part in parts:
            count = part[0]
            if count < 3:
                raise ValueError(f"{name}: a target group is (param, grad, hparams, *state), got {count} inputs")
            group = inputs[at:at + count]
            shape = group[0].shape
            for what, t in [("gradient", group[1])] + [(f"state {i}", s) for i, s in enumerate(group[3:])]:
                if t.shape != shape:
                    raise ValueError(f"{name}: {what} shape {t.shape} does not match its parameter's shape {shape}")
            hp = group[2]
            if hp.shape != want or hp.dtype is not float32:
                raise ValueError(f"{name}: hyperparameter tensor {hp.shape}:{hp.dtype.name}, expected {want}:float32")
            at += count
    return check


def _start(ctx, nodes, inputs, layout: tuple, l2: bool, maximize: bool):
    """(param as F32, effective gradient, ``s(name)``: a hyperparameter broadcast over the param)."""
    pf = as_f32(ctx, nodes[0], inputs[0].dtype.ggml_type)
    hp = nodes[2]
    g = effective_grad(ctx, as_f32(ctx, nodes[1], inputs[1].dtype.ggml_type), pf, hp,
                       index(layout, "wd") if l2 else None, maximize)
    return pf, g, (lambda name: row(ctx, hp, index(layout, name), pf))


def _ema(ctx, avg, x, s, keep: str, take: str):
    """``keep * avg + take * x`` (torch's ``mul_(keep).add_(x, alpha=take)``)."""
    return lib.add(ctx, lib.mul(ctx, avg, s(keep)), lib.mul(ctx, x, s(take)))


def _maximum(ctx, a, b):
    """torch.maximum of two same-shape F32 nodes (exact; NaN propagates)."""
    return minmax_node(ctx, a, b)


@define_write("rmsprop", check=_checker(RMSPROP), tensors=40)
def rmsprop(ctx, nodes, inputs, *, l2: bool, maximize: bool, momentum: bool, centered: bool) -> list:
    """torch.optim.RMSprop: state (square_avg[, momentum_buffer][, grad_avg])."""
    p, g, s = _start(ctx, nodes, inputs, RMSPROP, l2, maximize)
    square_avg = _ema(ctx, nodes[3], lib.sqr(ctx, g), s, "alpha", "one_minus_alpha")
    writes = [(3, square_avg)]
    at = 4
    buf_at = None
    if momentum:
        buf_at, at = at, at + 1
    if centered:
        grad_avg = _ema(ctx, nodes[at], g, s, "alpha", "one_minus_alpha")
        writes.append((at, grad_avg))
        var = lib.sub(ctx, square_avg, lib.sqr(ctx, grad_avg))
        avg = lib.add(ctx, lib.sqrt(ctx, var), s("eps"))
    else:
        avg = lib.add(ctx, lib.sqrt(ctx, square_avg), s("eps"))
    direction = lib.div(ctx, g, avg)
    if momentum:
        buf = lib.add(ctx, lib.mul(ctx, nodes[buf_at], s("momentum")), direction)
        writes.append((buf_at, buf))
        direction = buf
    writes.append((0, lib.sub(ctx, p, lib.mul(ctx, direction, s("lr")))))
    return writes


@define_write("adagrad", check=_checker(ADAGRAD), tensors=24)
def adagrad(ctx, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adagrad: state (sum); ``clr`` is lr / (1 + (step - 1) lr_decay)."""
    p, g, s = _start(ctx, nodes, inputs, ADAGRAD, l2, maximize)
    total = lib.add(ctx, nodes[3], lib.sqr(ctx, g))
    std = lib.add(ctx, lib.sqrt(ctx, total), s("eps"))
    return [(3, total), (0, lib.sub(ctx, p, lib.mul(ctx, lib.div(ctx, g, std), s("clr"))))]


@define_write("adadelta", check=_checker(ADADELTA), tensors=32)
def adadelta(ctx, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adadelta: state (square_avg, acc_delta)."""
    p, g, s = _start(ctx, nodes, inputs, ADADELTA, l2, maximize)
    square_avg = _ema(ctx, nodes[3], lib.sqr(ctx, g), s, "rho", "one_minus_rho")
    std = lib.sqrt(ctx, lib.add(ctx, square_avg, s("eps")))
    delta = lib.mul(ctx, lib.div(ctx, lib.sqrt(ctx, lib.add(ctx, nodes[4], s("eps"))), std), g)
    acc_delta = _ema(ctx, nodes[4], lib.sqr(ctx, delta), s, "rho", "one_minus_rho")
    return [(3, square_avg), (4, acc_delta), (0, lib.sub(ctx, p, lib.mul(ctx, delta, s("lr"))))]


@define_write("adamax", check=_checker(ADAMAX), tensors=40)
def adamax(ctx, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adamax: state (exp_avg, exp_inf); ``clr`` is lr / (1 - beta1^t)."""
    p, g, s = _start(ctx, nodes, inputs, ADAMAX, l2, maximize)
    exp_avg = _ema(ctx, nodes[3], g, s, "beta1", "one_minus_beta1")
    exp_inf = _maximum(ctx, lib.mul(ctx, nodes[4], s("beta2")), lib.add(ctx, lib.abs(ctx, g), s("eps")))
    new_p = lib.sub(ctx, p, lib.mul(ctx, lib.div(ctx, exp_avg, exp_inf), s("clr")))
    return [(3, exp_avg), (4, exp_inf), (0, new_p)]


def _moments(ctx, nodes, g, s):
    exp_avg = _ema(ctx, nodes[3], g, s, "beta1", "one_minus_beta1")
    exp_avg_sq = _ema(ctx, nodes[4], lib.sqr(ctx, g), s, "beta2", "one_minus_beta2")
    return exp_avg, exp_avg_sq


@define_write("nadam", check=_checker(NADAM), tensors=40)
def nadam(ctx, nodes, inputs, *, l2: bool, maximize: bool, decoupled: bool) -> list:
    """torch.optim.NAdam: state (exp_avg, exp_avg_sq); ``c_grad`` and ``c_avg`` carry the momentum
    schedule's products (lr (1 - mu) / (1 - prod mu), lr mu' / (1 - prod mu mu'))."""
    p, g, s = _start(ctx, nodes, inputs, NADAM, l2, maximize)
    if decoupled:
        p = lib.mul(ctx, p, s("keep"))
    exp_avg, exp_avg_sq = _moments(ctx, nodes, g, s)
    denom = lib.add(ctx, lib.sqrt(ctx, lib.mul(ctx, exp_avg_sq, s("bc2_inv"))), s("eps"))
    p = lib.sub(ctx, p, lib.mul(ctx, lib.div(ctx, g, denom), s("c_grad")))
    p = lib.sub(ctx, p, lib.mul(ctx, lib.div(ctx, exp_avg, denom), s("c_avg")))
    return [(3, exp_avg), (4, exp_avg_sq), (0, p)]


@define_write("radam", check=_checker(RADAM), tensors=40)
def radam(ctx, nodes, inputs, *, l2: bool, maximize: bool, decoupled: bool) -> list:
    """torch.optim.RAdam: state (exp_avg, exp_avg_sq). Both of torch's branches in one graph:
    ``p -= exp_avg * step_size * (adaptive / (sqrt(v) + eps) + plain)`` with (adaptive, plain) =
    (rect sqrt(1 - beta2^t), 0) once the variance is tractable, else (0, 1). (Hyperparameter rows
    are the right operand of every binary op: ggml broadcasts only that one.)"""
    p, g, s = _start(ctx, nodes, inputs, RADAM, l2, maximize)
    if decoupled:
        p = lib.mul(ctx, p, s("keep"))
    exp_avg, exp_avg_sq = _moments(ctx, nodes, g, s)
    adaptive = lib.div(ctx, lib.mul(ctx, exp_avg, s("adaptive")), lib.add(ctx, lib.sqrt(ctx, exp_avg_sq), s("eps")))
    direction = lib.add(ctx, adaptive, lib.mul(ctx, exp_avg, s("plain")))
    p = lib.sub(ctx, p, lib.mul(ctx, direction, s("step_size")))
    return [(3, exp_avg), (4, exp_avg_sq), (0, p)]


@define_write("adam_amsgrad", check=_checker(AMSGRAD), tensors=48)
def adam_amsgrad(ctx, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adam/AdamW(amsgrad=True): state (exp_avg, exp_avg_sq, max_exp_avg_sq);
    ``keep`` is AdamW's 1 - lr wd (1 for Adam)."""
    p, g, s = _start(ctx, nodes, inputs, AMSGRAD, l2, maximize)
    p = lib.mul(ctx, p, s("keep"))
    exp_avg, exp_avg_sq = _moments(ctx, nodes, g, s)
    max_sq = _maximum(ctx, nodes[5], exp_avg_sq)
    denom = lib.add(ctx, lib.mul(ctx, lib.sqrt(ctx, max_sq), s("bc2_sqrt_inv")), s("eps"))
    step = lib.mul(ctx, lib.div(ctx, exp_avg, denom), lib.mul(ctx, s("lr"), s("bc1_inv")))
    return [(3, exp_avg), (4, exp_avg_sq), (5, max_sq), (0, lib.sub(ctx, p, step))]
