"""``gg.backends``: torch.backends' switches that a ported program sets (``cudnn``, ``mps``).

>>> import ggmlgrad as gg
>>> gg.backends.cudnn.deterministic = True
"""
from . import cudnn, mps

__all__ = ["cudnn", "mps"]
