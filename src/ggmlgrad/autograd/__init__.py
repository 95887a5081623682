"""``gg.autograd`` (torch.autograd's names): ``grad``, ``backward``, ``Function`` and the grad modes.

The machinery lives in the tensor layer (:mod:`ggmlgrad.tensor.autograd_api`, the tape); this
package is its public path, so ``import ggmlgrad.autograd`` works as ``import torch.autograd``.

>>> import ggmlgrad as gg
>>> x = gg.tensor([3.0], requires_grad=True)
>>> gg.autograd.grad((x * x).sum(), x)[0].tolist()
[6.0]
"""
from ..tensor.autograd_api import Function, FunctionCtx, RemovableHandle, backward, grad
from ..tensor.grad_mode import enable_grad, no_grad, set_grad_enabled
from . import function  # noqa: E402  (gg.autograd.function.once_differentiable)

__all__ = ["grad", "backward", "Function", "FunctionCtx", "RemovableHandle", "no_grad", "enable_grad",
           "set_grad_enabled", "function"]
