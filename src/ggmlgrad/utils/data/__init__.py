"""``ggmlgrad.utils.data``: torch.utils.data's path to ``gg.data`` (the same objects).

>>> import ggmlgrad as gg
>>> from ggmlgrad.utils.data import DataLoader
>>> DataLoader is gg.data.DataLoader
True
"""
from ...data import DataLoader, Dataset, TensorDataset
from . import dataloader, dataset

__all__ = ["DataLoader", "Dataset", "TensorDataset", "dataloader", "dataset"]
