"""``ggmlgrad.utils``: torch.utils' module paths (``utils.data``, ``utils.tensorboard``), so that
``from torch.utils.data import DataLoader`` ports as ``from ggmlgrad.utils.data import DataLoader``.
The names are the same objects as ``gg.data``'s (aliases, not copies)."""
from . import data

__all__ = ["data"]
