"""Datasets, samplers and batching over host arrays, yielding device tensors (torch's
``torch.utils.data`` names and arguments).

>>> import numpy as np, ggmlgrad as gg
>>> ds = gg.data.TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
>>> loader = gg.data.DataLoader(ds, batch_size=2, shuffle=True, seed=0)
>>> [tuple(x.shape) for x, y in loader]
[(2, 2), (2, 2), (1, 2)]
"""
from .collate import default_collate, default_convert
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                      random_split)
from .loader import DataLoader
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .workers import get_worker_info

__all__ = ["Dataset", "TensorDataset", "IterableDataset", "ChainDataset", "ConcatDataset", "Subset",
           "random_split", "DataLoader", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "default_collate",
           "default_convert", "get_worker_info"]
