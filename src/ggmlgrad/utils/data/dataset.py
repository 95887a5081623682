"""``ggmlgrad.utils.data.dataset``: torch's module path to ``gg.data``'s datasets."""
from ...data import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                     random_split)

__all__ = ["Dataset", "TensorDataset", "IterableDataset", "ChainDataset", "ConcatDataset", "Subset", "random_split"]
