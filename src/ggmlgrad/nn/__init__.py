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
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d,
                      AvgPool2d, CircularPad1d, CircularPad2d, ConstantPad1d, ConstantPad2d, Fold, MaxPool1d,
                      MaxPool2d, PixelShuffle, PixelUnshuffle, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d,
                      ReplicationPad2d, Unflatten, Unfold, Upsample, ZeroPad1d, ZeroPad2d)
from .layers import (ELU, GELU, Dropout, Embedding, Flatten, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax,
                     ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh)
from .losses import BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, MSELoss, NLLLoss, SmoothL1Loss, L1Loss
from .module import Module, Parameter
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d, RMSNorm
from .activations_extra import (GLU, AlphaDropout, Dropout1d, Dropout2d, Hardsigmoid, Hardswish, Hardtanh, LogSigmoid,
                                Mish, PReLU, ReLU6, Softsign, Tanhshrink)
from .losses_extra import (BCELoss, CosineEmbeddingLoss, GaussianNLLLoss, KLDivLoss, MarginRankingLoss, PoissonNLLLoss,
                           TripletMarginLoss)
from .parameter_containers import ParameterDict, ParameterList
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)

from . import utils  # noqa: F401  (clip_grad_norm_, clip_grad_value_: written with the optimizers)
import sys as _sys  # noqa: E402
_sys.modules.setdefault(__name__ + ".utils.clip_grad", utils)   # torch's path torch.nn.utils.clip_grad: the same module
utils.clip_grad = utils

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "AvgPool1d",
           "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
           "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d",
           "ReplicationPad1d", "ReplicationPad2d", "CircularPad1d", "CircularPad2d", "Upsample", "PixelShuffle",
           "PixelUnshuffle", "Unflatten", "Unfold", "Fold",
           "Module", "Parameter", "Linear", "Sequential", "ModuleList", "ModuleDict", "Embedding", "LayerNorm",
           "Dropout", "MultiheadAttention", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "Softmax", "LogSoftmax",
           "LeakyReLU", "Softplus", "ELU", "Flatten", "Identity", "MSELoss", "CrossEntropyLoss", "NLLLoss",
           "BCEWithLogitsLoss", "HuberLoss", "SmoothL1Loss", "L1Loss", "functional", "init", "utils",
           "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer"]
__all__ += ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "RMSNorm", "PReLU", "Mish",
            "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "LogSigmoid", "GLU", "Softsign", "Tanhshrink",
            "Dropout1d", "Dropout2d", "AlphaDropout", "ParameterList", "ParameterDict", "BCELoss", "KLDivLoss",
            "CosineEmbeddingLoss", "MarginRankingLoss", "TripletMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss"]
