"""Standard gamma samples in the graph: Marsaglia and Tsang's method with a fixed number of
proposals, so sampling needs no host read and draws anew on every capture replay.

For ``alpha >= 1`` each proposal ``x = d v``, ``v = (1 + c z)^3`` (``d = alpha - 1/3``,
``c = 1 / sqrt(9 d)``, ``z`` standard normal) is accepted when ``v > 0`` and
``log u < z^2 / 2 + d - d v + d log v``; a proposal is accepted with probability at least 0.95, so
of ``PROPOSALS`` = 12 the first accepted one is taken (all 12 rejected: probability below 1e-15; the
sample is then ``d``). ``alpha < 1`` samples ``alpha + 1`` and multiplies by ``u^(1 / alpha)``.
The noise comes from the seeded generator (:func:`~ggmlgrad.distributions.noise.draw_noise`), so a
seeded run gives the same samples in every mode.
"""
from __future__ import annotations

import numpy as np

from ..ops import op
from ..tensor import Tensor, is_grad_enabled, no_grad, tensor
from ..tensor.functional_shape import cat
from ..tensor.reductions_extra import cumprod
from ..tensor.tensor import where
from .noise import draw_noise
from .special import standard_gamma_grad

PROPOSALS = 12
_TINY = float(np.finfo(np.float32).tiny)


def _first_accepted(x: Tensor, accept: Tensor, fallback: Tensor) -> Tensor:
    """Along dim 0: the ``x`` of the first accepted proposal, else ``fallback``."""
    rejected = cumprod(1.0 - accept, 0)                                      # all rejected up to k
    none_before = cat([op.fill_like(rejected[:1], c=1.0), rejected[:-1]], 0)
    weight = accept * none_before                                            # one 1 per column at most
    picked = (where(weight > 0.0, x, 0.0)).sum(0)
    return where(rejected[-1] > 0.0, fallback, picked)


def sample_standard_gamma(alpha: Tensor, shape: tuple) -> Tensor:
    """``Gamma(alpha, 1)`` samples of ``shape`` (``alpha`` broadcast to it), no gradient."""
    if len(shape) > 3:
        raise ValueError(f"gamma sampling: sample shape {shape} has more than 3 dimensions (the proposals take "
                         f"a 4th)")
    with no_grad():
        a = alpha.detach()
        a = a if tuple(a.shape) == tuple(shape) else op.broadcast_to(a, shape=tuple(shape))
        boost = a < 1.0
        d = where(boost, a + 1.0, a) - 1.0 / 3.0
        c = (d * 9.0).sqrt().reciprocal()
        z = draw_noise("normal", (PROPOSALS,) + tuple(shape), device=a.device)
        u = draw_noise("uniform", (PROPOSALS,) + tuple(shape), device=a.device)
        v = (1.0 + c * z) ** 3
        positive = v > 0.0
        log_v = where(positive, v, 1.0).log()
        accept = (positive & (u.log() < 0.5 * z * z + d - d * v + d * log_v)).float()
        x = _first_accepted(d * v, accept, d)
        ub = draw_noise("uniform", tuple(shape), device=a.device)
        x = where(boost, x * ub ** a.reciprocal(), x)
        return x.clamp(min=_TINY)


def standard_gamma(alpha: Tensor, shape: tuple) -> Tensor:
    """Samples as :func:`sample_standard_gamma`; when ``alpha`` requires grad, differentiable through
    the implicit reparameterisation gradient, computed on the host from the samples (a sync point
    in graph mode; inside ``gg.capture`` it is refused, sample() is not)."""
    x = sample_standard_gamma(alpha, shape)
    if not (alpha.requires_grad and is_grad_enabled()):
        return x
    a64 = np.broadcast_to(alpha.detach().numpy().astype(np.float64), tuple(shape))
    dx = standard_gamma_grad(a64, x.numpy())
    return x + (alpha - alpha.detach()) * tensor(dx, device=alpha.device)   # the value is x; the gradient dx/dalpha
