"""``gg.utils`` (torch.utils's paths): ``checkpoint`` (activation recomputation).

>>> import ggmlgrad.utils.checkpoint
"""
from . import checkpoint  # noqa: F401
