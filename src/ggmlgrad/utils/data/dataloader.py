"""``ggmlgrad.utils.data.dataloader``: torch's module path to ``gg.data.DataLoader``."""
from ...data import DataLoader

__all__ = ["DataLoader"]
