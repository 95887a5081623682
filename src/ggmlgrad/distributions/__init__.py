"""``gg.distributions``: torch.distributions' names and semantics for the distributions that RL and
latent-variable code uses.

Noise comes from the seeded generator through :func:`ggmlgrad.distributions.noise.draw_noise`,
as a tensor (so a capture can make it an input of a recording): Normal, Uniform, Laplace,
Bernoulli, Categorical, OneHotCategorical, MultivariateNormal and transforms of them sample inside
``gg.capture``. Gamma, Beta and Dirichlet draw on the host (a sync point; refused in a capture).

Arguments are not validated against the supports (that would read every value back on the host):
each distribution behaves as torch's with ``validate_args=False`` (a value outside the support gives
``-inf`` or NaN instead of torch's default ``ValueError``); ``validate_args=True`` is refused.

>>> import ggmlgrad as gg
>>> gg.manual_seed(0)
>>> d = gg.distributions.Categorical(logits=gg.zeros(4, 3))
>>> d.sample().shape, d.log_prob(gg.tensor([0, 1, 2, 0])).shape
((4,), (4,))
"""
from . import transforms
from .bernoulli import Bernoulli
from .categorical import Categorical
from .distribution import Distribution
from .gamma import Beta, Dirichlet, Gamma
from .independent import Independent
from .kl import kl_divergence, register_kl
from .laplace import Laplace
from .multivariate_normal import MultivariateNormal
from .noise import NoiseRequest, draw_noise, set_noise_hook
from .normal import Normal
from .one_hot_categorical import OneHotCategorical
from .transformed_distribution import TransformedDistribution
from .uniform import Uniform

__all__ = ["Distribution", "Categorical", "Normal", "Bernoulli", "Uniform", "Laplace", "Gamma", "Beta",
           "Dirichlet", "Independent", "OneHotCategorical", "MultivariateNormal", "TransformedDistribution",
           "kl_divergence", "register_kl", "transforms", "draw_noise", "set_noise_hook", "NoiseRequest"]
