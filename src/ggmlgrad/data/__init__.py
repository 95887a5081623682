"""Datasets and batching over host arrays, yielding device tensors.

>>> import numpy as np, ggmlgrad as gg
>>> ds = gg.data.TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
>>> loader = gg.data.DataLoader(ds, batch_size=2, shuffle=True, seed=0)
>>> [tuple(x.shape) for x, y in loader]
[(2, 2), (2, 2), (1, 2)]
"""
from .dataset import Dataset, TensorDataset
from .loader import DataLoader

__all__ = ["Dataset", "TensorDataset", "DataLoader"]
