"""``gg.distributions``: Categorical and Normal, as policy-gradient code (PPO, SAC) uses them.

Noise comes from the seeded generator through :func:`ggmlgrad.distributions.noise.draw_noise`,
as a tensor (so a capture can make it an input of a recording).

>>> import ggmlgrad as gg
>>> gg.manual_seed(0)
>>> d = gg.distributions.Categorical(logits=gg.zeros(4, 3))
>>> d.sample().shape, d.log_prob(gg.tensor([0, 1, 2, 0])).shape
((4,), (4,))
"""
from .categorical import Categorical
from .distribution import Distribution
from .normal import Normal
from .noise import NoiseRequest, draw_noise, set_noise_hook

__all__ = ["Distribution", "Categorical", "Normal", "draw_noise", "set_noise_hook", "NoiseRequest"]
