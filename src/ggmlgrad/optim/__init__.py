"""Optimizers and learning-rate schedulers (PyTorch's names and update rules).

>>> import ggmlgrad as gg
>>> w = gg.tensor([1.0], requires_grad=True)
>>> opt = gg.optim.AdamW([w], lr=1e-2)
>>> sched = gg.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
"""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .adam_variants import Adamax, NAdam, RAdam
from .rmsprop import Adadelta, Adagrad, RMSprop
from .lbfgs import LBFGS
from . import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta",
           "LBFGS", "lr_scheduler"]
