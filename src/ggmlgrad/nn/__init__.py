"""``gg.nn``: modules, layers, ``functional`` (losses and layer functions) and ``init``.

>>> import ggmlgrad as gg
>>> net = gg.nn.Sequential(gg.nn.Linear(4, 8), gg.nn.ReLU(), gg.nn.Linear(8, 2))
>>> loss = gg.nn.functional.cross_entropy(net(gg.ones(3, 4)), gg.tensor([0, 1, 1]))
>>> loss.backward()
>>> net[0].weight.grad.shape
(8, 4)
"""
from . import functional, init
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .layers import (ELU, GELU, Dropout, Embedding, Flatten, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax,
                     ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh)
from .losses import BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, MSELoss, NLLLoss, SmoothL1Loss, L1Loss
from .module import Module, Parameter

from . import utils  # noqa: F401  (clip_grad_norm_, clip_grad_value_: written with the optimizers)
import sys as _sys  # noqa: E402
_sys.modules.setdefault(__name__ + ".utils.clip_grad", utils)   # torch's path torch.nn.utils.clip_grad: the same module
utils.clip_grad = utils

__all__ = ["Module", "Parameter", "Linear", "Sequential", "ModuleList", "ModuleDict", "Embedding", "LayerNorm",
           "Dropout", "MultiheadAttention", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "Softmax", "LogSoftmax",
           "LeakyReLU", "Softplus", "ELU", "Flatten", "Identity", "MSELoss", "CrossEntropyLoss", "NLLLoss",
           "BCEWithLogitsLoss", "HuberLoss", "SmoothL1Loss", "L1Loss", "functional", "init", "utils"]
