"""``ggmlgrad.utils.data.dataloader``: torch's module path to ``gg.data.DataLoader`` and its collate."""
from ...data import DataLoader, default_collate, default_convert, get_worker_info

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]
