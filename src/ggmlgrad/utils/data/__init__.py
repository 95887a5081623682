"""``ggmlgrad.utils.data``: torch.utils.data's path to ``gg.data`` (the same objects).

>>> import ggmlgrad as gg
>>> from ggmlgrad.utils.data import DataLoader, RandomSampler
>>> DataLoader is gg.data.DataLoader and RandomSampler is gg.data.RandomSampler
True
"""
from ...data import *  # noqa: F401,F403  (every gg.data name)
from ...data import __all__ as _data_names
from . import dataloader, dataset, sampler

__all__ = list(_data_names) + ["dataloader", "dataset", "sampler"]
