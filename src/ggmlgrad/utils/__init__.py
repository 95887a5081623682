"""``gg.utils`` (torch.utils's paths): ``data`` (the data pipeline, :mod:`ggmlgrad.data`, under
torch's module paths, so that ``from torch.utils.data import DataLoader`` ports as
``from ggmlgrad.utils.data import DataLoader``), ``tensorboard`` (``SummaryWriter``) and
``checkpoint`` (activation recomputation).

>>> import ggmlgrad as gg
>>> gg.utils.data.TensorDataset is gg.data.TensorDataset
True
"""
from . import checkpoint, data  # noqa: F401

__all__ = ["checkpoint", "data"]
