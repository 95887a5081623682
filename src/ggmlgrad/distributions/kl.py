"""``kl_divergence(p, q)`` for the pairs torch registers among ggmlgrad's distributions, and
``register_kl`` to add more."""
from __future__ import annotations

import math
from typing import Callable

from ..tensor import Tensor
from .bernoulli import Bernoulli
from .categorical import Categorical
from .gamma import Beta, Dirichlet, Gamma
from .independent import Independent, sum_rightmost
from .laplace import Laplace
from .multivariate_normal import MultivariateNormal, diagonal, solve_lower
from .normal import Normal
from .one_hot_categorical import OneHotCategorical
from .special import digamma, lgamma
from .transformed_distribution import TransformedDistribution
from .uniform import Uniform

_KL: dict[tuple[type, type], Callable] = {}


def register_kl(type_p: type, type_q: type):
    """Decorator registering ``fn(p, q)`` as the KL divergence of a ``type_p`` from a ``type_q``."""
    def deco(fn):
        _KL[(type_p, type_q)] = fn
        return fn
    return deco


def kl_divergence(p, q) -> Tensor:
    """KL(p || q), batched (torch's registered closed forms; the most specific match by type).

    >>> import ggmlgrad as gg
    >>> p = gg.distributions.Normal(gg.tensor([0.0]), gg.tensor([1.0]))
    >>> q = gg.distributions.Normal(gg.tensor([1.0]), gg.tensor([2.0]))
    >>> round(gg.distributions.kl_divergence(p, q).item(), 4)
    0.4431
    """
    for tp in type(p).__mro__:
        for tq in type(q).__mro__:
            fn = _KL.get((tp, tq))
            if fn is not None:
                return fn(p, q)
    raise NotImplementedError(f"No KL(p || q) is implemented for p type {type(p).__name__} and q type "
                              f"{type(q).__name__}")


@register_kl(Normal, Normal)
def _kl_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1.0 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli(p, q):
    from ..nn import functional as F
    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t2 = (1.0 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical(p, q):
    return (p.probs * (p.logits - q.logits)).sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_one_hot(p, q):
    return _kl_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform(p, q):
    inside = (q.low <= p.low).float() * (q.high >= p.high).float()
    return ((q.high - q.low) / (p.high - p.low)).log() - inside.log()


@register_kl(Laplace, Laplace)
def _kl_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1.0


@register_kl(Gamma, Gamma)
def _kl_gamma(p, q):
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = lgamma(q.concentration) - lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Beta, Beta)
def _kl_beta(p, q):
    s1 = p.concentration1 + p.concentration0
    t1 = lgamma(q.concentration1) + lgamma(q.concentration0) + lgamma(s1)
    t2 = lgamma(p.concentration1) + lgamma(p.concentration0) + lgamma(q.concentration1 + q.concentration0)
    t3 = (p.concentration1 - q.concentration1) * digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * digamma(p.concentration0)
    t5 = (q.concentration1 + q.concentration0 - s1) * digamma(s1)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet(p, q):
    a, b = p.concentration, q.concentration
    a0 = a.sum(-1)
    t1 = lgamma(a0) - lgamma(b.sum(-1))
    t2 = (lgamma(a) - lgamma(b)).sum(-1)
    t3 = ((a - b) * (digamma(a) - digamma(a0.unsqueeze(-1)))).sum(-1)
    return t1 - t2 + t3


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn(p, q):
    k = p.event_shape[0]
    lp, lq = p.scale_tril, q.scale_tril
    half_term1 = diagonal(lq).log().sum(-1) - diagonal(lp).log().sum(-1)
    # tr(Sq^-1 Sp) = ||Lq^-1 Lp||_F^2, column by column; Mahalanobis term of the means
    cols = [solve_lower(lq, lp[..., :, j]) for j in range(k)]
    term2 = sum((c * c).sum(-1) for c in cols)
    z = solve_lower(lq, q.loc - p.loc)
    term3 = (z * z).sum(-1)
    return half_term1 + 0.5 * (term2 + term3 - k)


@register_kl(Independent, Independent)
def _kl_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independents with different reinterpreted_batch_ndims")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


__all__ = ["kl_divergence", "register_kl", "math"]


# ---------------------------------------------------------------------- pairs of different families
def _infinite_like(t: Tensor) -> Tensor:
    return t * 0.0 + math.inf


def _inf_where(mask: Tensor, result: Tensor) -> Tensor:
    """``result`` with +inf where ``mask`` holds (the support of p is not inside q's)."""
    from ..tensor.tensor import where
    return where(mask, math.inf, result)


def _x_log_x(t: Tensor) -> Tensor:
    """x log x, 0 at x = 0 (torch's xlogy(x, x))."""
    from ..tensor.tensor import where
    return where(t == 0.0, 0.0, t * t.log())


@register_kl(Gamma, Beta)
@register_kl(Gamma, Uniform)
def _kl_gamma_infinity(p, q):
    return _infinite_like(p.concentration)


@register_kl(Laplace, Beta)
@register_kl(Laplace, Gamma)
@register_kl(Laplace, Uniform)
@register_kl(Normal, Beta)
@register_kl(Normal, Gamma)
@register_kl(Normal, Uniform)
def _kl_real_line_infinity(p, q):
    return _infinite_like(p.loc + p.scale * 0.0)


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (q.concentration - 1.0) * (digamma(p.concentration1) - digamma(p.concentration1 + p.concentration0))
    t4 = q.rate * p.concentration1 / (p.concentration1 + p.concentration0)
    return -p.entropy() + t2 - t3 + t4


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    total = p.concentration1 + p.concentration0
    e_beta = p.concentration1 / total
    var_normal = q.scale * q.scale
    t2 = 0.5 * (var_normal * (2 * math.pi)).log()
    t3 = (e_beta * (1.0 - e_beta) / (total + 1.0) + e_beta * e_beta) * 0.5
    return -p.entropy() + t2 + (t3 - q.loc * e_beta + q.loc * q.loc * 0.5) / var_normal


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _inf_where((q.low > 0.0) | (q.high < 1.0), result)


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    var_normal = q.scale * q.scale
    beta_sqr = p.rate * p.rate
    a = p.concentration
    t1 = 0.5 * (beta_sqr * var_normal * (2 * math.pi)).log() - a - lgamma(a)
    t2 = 0.5 * (a * a + a) / beta_sqr
    t3 = q.loc * a / p.rate
    t4 = 0.5 * q.loc * q.loc
    return t1 + (a - 1.0) * digamma(a) + (t2 - t3 + t4) / var_normal


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale * q.scale
    ratio = p.scale * p.scale / var_normal
    t1 = 0.5 * (2.0 * ratio / math.pi).log()
    t2 = 0.5 * p.loc * p.loc
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc * q.loc
    return -t1 + ratio + (t2 - t3 + t4) / var_normal - 1.0


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    from ..tensor import functional as TF
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    z = loc_diff / p.scale
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * z * z).exp()
    t3 = loc_diff * TF.erf(math.sqrt(0.5) * z)
    return -scale_ratio.log() + (t2 + t3) / q.scale - 0.5 * (1 + math.log(0.5 * math.pi))


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    width = p.high - p.low
    t2 = (q.concentration1 - 1.0) * (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    t3 = (q.concentration0 - 1.0) * (_x_log_x(1.0 - p.high) - _x_log_x(1.0 - p.low) + width) / width
    t4 = lgamma(q.concentration1) + lgamma(q.concentration0) - lgamma(q.concentration1 + q.concentration0)
    result = t3 + t4 - width.log() - t2
    return _inf_where((p.high > 1.0) | (p.low < 0.0), result)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    width = p.high - p.low
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1.0 - q.concentration) * (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    t4 = q.rate * (p.high + p.low) / 2.0
    return _inf_where(p.low < 0.0, -width.log() + t2 + t3 + t4)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    width = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / width).log()
    t2 = width * width / 12.0
    mid = (p.high + p.low - 2.0 * q.loc) / 2.0
    return t1 + 0.5 * (t2 + mid * mid) / (q.scale * q.scale)


def _same_transform(a, b) -> bool:
    """Transforms of one type with the same parameters (the same objects, or equal numbers)."""
    if type(a) is not type(b) or getattr(a, "event_dim", 0) != getattr(b, "event_dim", 0):
        return False
    for name in ("loc", "scale"):
        x, y = getattr(a, name, None), getattr(b, name, None)
        if x is not y and not (isinstance(x, (int, float)) and isinstance(y, (int, float)) and x == y):
            return False
    return True


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed(p, q):
    if len(p.transforms) != len(q.transforms) or not all(map(_same_transform, p.transforms, q.transforms)):
        raise NotImplementedError("KL between TransformedDistributions needs the same transforms")
    if p.event_shape != q.event_shape:
        raise NotImplementedError("KL between TransformedDistributions needs the same event shape")
    return kl_divergence(p.base_dist, q.base_dist)
