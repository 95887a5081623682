"""``gg.autograd.function`` (torch.autograd.function's path): ``Function``, ``FunctionCtx``,
``once_differentiable``.

>>> import ggmlgrad as gg
>>> gg.autograd.function.Function is gg.autograd.Function
True
"""
from ..tensor.autograd_api import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
