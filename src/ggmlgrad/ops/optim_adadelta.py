"""torch.optim.Adadelta's update as the write op ``adadelta`` (see optim_ops.py for the conventions:
a target group is ``(param, grad, hparams, square_avg, acc_delta)``, the hyperparameters a float32
vector, so changing ``lr`` or ``rho`` needs no new graph)."""
from __future__ import annotations

from .._ggml import lib
from .optim_ops import _check_hparams, _shape_error, as_f32, effective_grad, row
from .registry import define_write

ADADELTA_LR, ADADELTA_RHO, ADADELTA_EPS, ADADELTA_WD, ADADELTA_ONE_MINUS_RHO = range(5)
ADADELTA_HPARAMS = 5


def _check(name: str, inputs, parts) -> None:
    """Per target group: the gradient and both state tensors have the parameter's shape; the
    hyperparameters are a float32 vector of ADADELTA_HPARAMS (a mismatch would reach ggml's asserts)."""
    at = 0
    for part in parts:
        if part[0] != 5:
            raise ValueError(f"{name}: a target group is (param, grad, hparams, square_avg, acc_delta), "
                             f"got {part[0]} inputs")
        p, g, hp, sa, ad = inputs[at:at + 5]
        for what, x in (("gradient", g), ("square_avg", sa), ("acc_delta", ad)):
            if x.shape != p.shape:
                raise _shape_error(name, what, x.shape, p.shape)
        _check_hparams(name, hp, (ADADELTA_HPARAMS,))
        at += 5


@define_write("adadelta", check=_check, tensors=48)
def adadelta(ctx: int, nodes, inputs, *, weight_decay: bool, maximize: bool) -> list:
    """torch.optim.Adadelta on one parameter::

        g = -g if maximize;  g = g + weight_decay * p
        square_avg = rho * square_avg + (1 - rho) * g^2
        delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
        acc_delta = rho * acc_delta + (1 - rho) * delta^2
        p = p - lr * delta
    """
    pn, gn, hp, sa, ad = nodes
    pf = as_f32(ctx, pn, inputs[0].dtype.ggml_type)
    gf = effective_grad(ctx, as_f32(ctx, gn, inputs[1].dtype.ggml_type), pf, hp,
                        ADADELTA_WD if weight_decay else None, maximize)

    def h(i: int) -> int:
        return row(ctx, hp, i, pf)
    new_sa = lib.add(ctx, lib.mul(ctx, sa, h(ADADELTA_RHO)), lib.mul(ctx, lib.sqr(ctx, gf), h(ADADELTA_ONE_MINUS_RHO)))
    std = lib.sqrt(ctx, lib.add(ctx, new_sa, h(ADADELTA_EPS)))
    delta = lib.mul(ctx, lib.div(ctx, lib.sqrt(ctx, lib.add(ctx, ad, h(ADADELTA_EPS))), std), gf)
    new_ad = lib.add(ctx, lib.mul(ctx, ad, h(ADADELTA_RHO)), lib.mul(ctx, lib.sqr(ctx, delta), h(ADADELTA_ONE_MINUS_RHO)))
    new_p = lib.sub(ctx, pf, lib.mul(ctx, delta, h(ADADELTA_LR)))
    return [(3, new_sa), (4, new_ad), (0, new_p)]
