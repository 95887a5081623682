"""``gg.utils`` (torch.utils's paths): ``checkpoint`` (activation recomputation) and ``data`` (the
data pipeline, :mod:`ggmlgrad.data`, under torch's name).

>>> import ggmlgrad as gg
>>> gg.utils.data.TensorDataset is gg.data.TensorDataset
True
"""
from .. import data  # noqa: F401  (gg.utils.data: torch.utils.data's path to gg.data)
from . import checkpoint  # noqa: F401
