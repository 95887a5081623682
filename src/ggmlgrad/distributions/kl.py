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
