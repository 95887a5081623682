"""Optimizer updates: the write ops ``sgd``, ``adam`` and ``adamw_fused`` and their ggml node builders.

Each update is an op of kind ``"writes"`` (:func:`.registry.define_write`): it writes a
parameter and its state in place, queued through :func:`.registry.write` inside
``ENGINE.exclusive`` (the only place where in-place writes are allowed). A target group
is ``(param, grad, hparams, *state)``; the hyperparameters are a small F32 tensor, so
changing ``lr`` (or any other value in it) needs no new graph. The helpers below take the
node context and ggml node pointers and return ggml node pointers; nothing is computed here.

Hyperparameter tensors are 1-D F32; ``scalar(ctx, hp, i)`` is a one-element view
of entry ``i`` that ggml's binary ops broadcast over a whole tensor.
"""
from __future__ import annotations

from .._ggml import clear_param_flag, consts, lib, node_ne
from ..engine import float32
from . import fast_math
from .registry import define_write

_F32 = consts.TYPE_F32

# Layout of the Adam/AdamW hyperparameter vector. The first 7 entries are exactly
# what ggml_opt_step_adamw reads (alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t)).
ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_DECOUPLED_WD, ADAM_BC1_INV, ADAM_BC2_INV = range(7)
ADAM_L2_WD, ADAM_ONE_MINUS_BETA1, ADAM_ONE_MINUS_BETA2, ADAM_KEEP = 7, 8, 9, 10
ADAM_HPARAMS = 11

# Layout of the SGD hyperparameter vector.
SGD_LR, SGD_WD, SGD_MOMENTUM, SGD_DAMP = range(4)
SGD_HPARAMS = 4


def scalar(ctx: int, hp: int, i: int) -> int:
    """A one-element view of ``hp[i]`` (broadcasts in ggml_add/mul/div)."""
    return lib.view_1d(ctx, hp, 1, 4 * i)


def row(ctx: int, hp: int, i: int, like: int) -> int:
    """``hp[i]`` repeated along ``like``'s first ggml axis, to broadcast over ``like``.

    ggml's CPU binary ops run a vectorised loop per row when the broadcast operand has the whole
    row length, and a per-element loop with a modulo for a 1-element one: an Adam update composed
    from 1-element views took 7.5 ms for 200k parameters.
    """
    return lib.repeat_4d(ctx, scalar(ctx, hp, i), node_ne(like)[0], 1, 1, 1)


def as_f32(ctx: int, node: int, ggml_type: int) -> int:
    return node if ggml_type == _F32 else lib.cast(ctx, node, _F32)


def effective_grad(ctx: int, grad: int, param: int, hp: int, wd_index: int | None, maximize: bool) -> int:
    """``(-grad if maximize else grad) + wd * param`` (the L2 term only when ``wd_index`` is given)."""
    g = lib.neg(ctx, grad) if maximize else grad
    if wd_index is not None:
        g = lib.add(ctx, g, lib.mul(ctx, param, row(ctx, hp, wd_index, param)))
    return g


def sgd_update(ctx: int, param: int, grad: int, buf: int | None, hp: int, nesterov: bool) -> tuple[int, int | None]:
    """PyTorch's SGD on an already weight-decayed/maximized ``grad`` (all F32 nodes).

    buf' = momentum * buf + damp * grad   (damp = 1 on a parameter's first step, else 1 - dampening)
    d    = grad + momentum * buf' (nesterov) | buf' | grad (no momentum)
    p'   = p - lr * d
    Returns (p', buf') with buf' None without momentum.
    """
    s = lambda i: row(ctx, hp, i, param)  # noqa: E731
    new_buf = None
    d = grad
    if buf is not None:
        new_buf = lib.add(ctx, lib.mul(ctx, buf, s(SGD_MOMENTUM)), lib.mul(ctx, grad, s(SGD_DAMP)))
        d = lib.add(ctx, grad, lib.mul(ctx, new_buf, s(SGD_MOMENTUM))) if nesterov else new_buf
    return lib.sub(ctx, param, lib.mul(ctx, d, s(SGD_LR))), new_buf


def adamw_fused(ctx: int, param: int, grad: int, m: int, v: int, hp: int) -> int:
    """ggml_opt_step_adamw: updates ``param``, ``m``, ``v`` in place; returns the node to queue as an effect.

    ggml's rule (CPU and CUDA):  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
    p = p (1 - lr wd) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
    which is PyTorch's AdamW (eps outside the square root, decay applied to the old p).
    ``param`` must be a leaf of F32 storage; ggml requires its PARAM flag.
    """
    params7 = lib.view_1d(ctx, hp, 7, 0)
    node = fast_math.adamw(ctx, param, grad, m, v, params7)   # the same rule, vectorised (fast build)
    if node:
        return node
    lib.set_param(param)
    node = lib.opt_step_adamw(ctx, param, grad, m, v, params7)
    # The flag only satisfies the builder's assertion; left on a reused leaf header it would turn
    # the parameter into a graph node in every later graph.
    clear_param_flag(param)
    return node


def adam_composed(ctx: int, param: int, grad: int, m: int, v: int, hp: int) -> tuple[int, int, int]:
    """The same update as :func:`adamw_fused` from elementary ops (all F32 nodes).

    Used for float16/bfloat16 parameters (ggml's fused op is F32 only) and for ``fused=False``.
    Returns (p', m', v').
    """
    s = lambda i: row(ctx, hp, i, param)  # noqa: E731
    new_m = lib.add(ctx, lib.mul(ctx, m, s(ADAM_BETA1)), lib.mul(ctx, grad, s(ADAM_ONE_MINUS_BETA1)))
    new_v = lib.add(ctx, lib.mul(ctx, v, s(ADAM_BETA2)), lib.mul(ctx, lib.sqr(ctx, grad), s(ADAM_ONE_MINUS_BETA2)))
    m_hat = lib.mul(ctx, new_m, s(ADAM_BC1_INV))
    denom = lib.add(ctx, lib.sqrt(ctx, lib.mul(ctx, new_v, s(ADAM_BC2_INV))), s(ADAM_EPS))
    step = lib.mul(ctx, lib.div(ctx, m_hat, denom), s(ADAM_LR))
    new_p = lib.sub(ctx, lib.mul(ctx, param, s(ADAM_KEEP)), step)
    return new_p, new_m, new_v


# ---------------------------------------------------------------------- the write ops
# The validations run on every step (an optimizer step is one write op for all its parameters):
# each reads every attribute once and checks a parameter group's shared hparams tensor once.
def _check_hparams(name: str, hp, want: tuple) -> None:
    if hp.shape != want or hp.dtype is not float32:
        raise ValueError(f"{name}: hyperparameter tensor {hp.shape}:{hp.dtype.name}, expected {want}:float32")


def _shape_error(name: str, what: str, got: tuple, shape: tuple) -> ValueError:
    return ValueError(f"{name}: {what} shape {got} does not match its parameter's shape {shape}")


def _check_sgd(name: str, inputs, parts) -> None:
    """Per target group (param, grad, hparams[, momentum_buffer]): the gradient and the buffer have
    the parameter's shape, the hyperparameters are a float32 vector of SGD_HPARAMS (a mismatch
    would reach ggml's shape assertions)."""
    at = 0
    seen_hp = None
    for part in parts:
        count = part[0]
        if count != 3 and count != 4:
            raise ValueError(f"{name}: a target group is (param, grad, hparams[, momentum_buffer]), got {count} inputs")
        p, g, hp = inputs[at], inputs[at + 1], inputs[at + 2]
        shape = p.shape
        if g.shape != shape:
            raise _shape_error(name, "gradient", g.shape, shape)
        if count == 4 and inputs[at + 3].shape != shape:
            raise _shape_error(name, "momentum buffer", inputs[at + 3].shape, shape)
        if hp is not seen_hp:
            _check_hparams(name, hp, (SGD_HPARAMS,))
            seen_hp = hp
        at += count


def _check_adam(fused: bool):
    """Per target group (param, grad, hparams, exp_avg, exp_avg_sq): the gradient and moments have
    the parameter's shape, the hyperparameters are a float32 vector of ADAM_HPARAMS; ``fused``: the
    parameter and moments are float32 (ggml's fused AdamW kernel reads nothing else)."""
    want = (ADAM_HPARAMS,)

    def check(name: str, inputs, parts) -> None:
        at = 0
        seen_hp = None
        for part in parts:
            if part[0] != 5:
                raise ValueError(f"{name}: a target group is (param, grad, hparams, exp_avg, exp_avg_sq), "
                                 f"got {part[0]} inputs")
            p, g, hp, m, v = inputs[at:at + 5]
            shape = p.shape
            if g.shape != shape or m.shape != shape or v.shape != shape:
                bad = next((what, x) for what, x in (("gradient", g), ("exp_avg", m), ("exp_avg_sq", v))
                           if x.shape != shape)
                raise _shape_error(name, bad[0], bad[1].shape, shape)
            if hp is not seen_hp:
                _check_hparams(name, hp, want)
                seen_hp = hp
            if fused and (p.dtype is not float32 or m.dtype is not float32 or v.dtype is not float32):
                raise TypeError(f"{name}: ggml's fused AdamW needs float32 parameters and moments, got "
                                f"{p.dtype.name}, {m.dtype.name}, {v.dtype.name} (shape {shape})")
            at += 5
    return check


@define_write("sgd", check=_check_sgd, tensors=24)
def sgd(ctx: int, nodes, inputs, *, weight_decay: bool, maximize: bool, nesterov: bool) -> list:
    """torch.optim.SGD on one parameter: nodes of (p, grad, hparams[, momentum_buffer]); writes
    the buffer (with momentum) and the parameter."""
    p, g = inputs[0], inputs[1]
    hp = nodes[2]
    pn = as_f32(ctx, nodes[0], p.dtype.ggml_type)
    gf = as_f32(ctx, nodes[1], g.dtype.ggml_type)
    gf = effective_grad(ctx, gf, pn, hp, SGD_WD if weight_decay else None, maximize)
    new_p, new_buf = sgd_update(ctx, pn, gf, nodes[3] if len(nodes) > 3 else None, hp, nesterov)
    writes = [(3, new_buf)] if new_buf is not None else []
    writes.append((0, new_p))
    return writes


@define_write("adam", check=_check_adam(fused=False), tensors=48)
def adam(ctx: int, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adam/AdamW on one parameter from elementary ops (any float parameter dtype,
    float32 moments): nodes of (p, grad, hparams, exp_avg, exp_avg_sq); writes all but the grad."""
    pn, gn, hp, mn, vn = nodes
    p, g = inputs[0], inputs[1]
    pf = as_f32(ctx, pn, p.dtype.ggml_type)
    gf = effective_grad(ctx, as_f32(ctx, gn, g.dtype.ggml_type), pf, hp, ADAM_L2_WD if l2 else None, maximize)
    new_p, new_m, new_v = adam_composed(ctx, pf, gf, mn, vn, hp)
    return [(3, new_m), (4, new_v), (0, new_p)]


@define_write("adamw_fused", check=_check_adam(fused=True), tensors=16)
def adamw_fused_update(ctx: int, nodes, inputs, *, l2: bool, maximize: bool) -> list:
    """torch.optim.Adam/AdamW on one float32 parameter with ggml's fused ``opt_step_adamw`` (writes
    p, exp_avg and exp_avg_sq by itself): nodes of (p, grad, hparams, exp_avg, exp_avg_sq)."""
    pn, gn, hp, mn, vn = nodes
    gf = effective_grad(ctx, as_f32(ctx, gn, inputs[1].dtype.ggml_type), pn, hp, ADAM_L2_WD if l2 else None,
                        maximize)
    return [(None, adamw_fused(ctx, pn, gf, mn, vn, hp))]
