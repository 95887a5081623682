"""``ggmlgrad.utils.data.dataset``: torch's module path to ``gg.data``'s datasets."""
from ...data import Dataset, TensorDataset

__all__ = ["Dataset", "TensorDataset"]
