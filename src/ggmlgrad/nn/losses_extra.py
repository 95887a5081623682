"""Loss modules over ``functional_loss`` and ``F.binary_cross_entropy``: ``BCELoss``, ``KLDivLoss``,
``CosineEmbeddingLoss``, ``MarginRankingLoss``, ``TripletMarginLoss``, ``PoissonNLLLoss``,
``GaussianNLLLoss`` (torch's constructor arguments; the legacy ``size_average``/``reduce`` map to
``reduction`` as in torch).

>>> import ggmlgrad as gg
>>> gg.nn.MarginRankingLoss(margin=0.5)(gg.tensor([1.0]), gg.tensor([1.0]), gg.tensor([1.0])).item()
0.5
"""
from __future__ import annotations

from ..tensor import Tensor
from . import functional as F
from .functional_loss import legacy_reduction
from .losses import _Loss


class _LegacyLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(legacy_reduction(size_average, reduce, reduction))


class BCELoss(_LegacyLoss):
    """Binary cross-entropy of probabilities (``F.binary_cross_entropy``; logs clamped at -100).

    >>> import ggmlgrad as gg
    >>> round(gg.nn.BCELoss()(gg.tensor([0.5]), gg.tensor([1.0])).item(), 4)
    0.6931
    """

    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, self.reduction)


class KLDivLoss(_Loss):
    """``F.kl_div``; ``reduction="batchmean"`` divides the sum by the batch size.

    >>> import ggmlgrad as gg
    >>> gg.nn.KLDivLoss(reduction="batchmean", log_target=True)
    KLDivLoss(reduction='batchmean', log_target=True)
    """

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False) -> None:
        reduction = legacy_reduction(size_average, reduce, reduction)
        super().__init__("mean" if reduction == "batchmean" else reduction)
        self.reduction = reduction
        self.log_target = bool(log_target)

    def forward(self, input: Tensor, target) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)

    def extra_repr(self) -> str:
        parts = [super().extra_repr()] if self.reduction != "mean" else []
        return ", ".join(parts + (["log_target=True"] if self.log_target else []))


class _MarginLoss(_LegacyLoss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = float(margin)


class CosineEmbeddingLoss(_MarginLoss):
    """``F.cosine_embedding_loss``: ``1 - cos`` for target 1, ``max(0, cos - margin)`` for -1.

    >>> import ggmlgrad as gg
    >>> gg.nn.CosineEmbeddingLoss()(gg.tensor([[1.0, 0.0]]), gg.tensor([[1.0, 0.0]]), gg.tensor([1])).item()
    0.0
    """

    def forward(self, input1: Tensor, input2: Tensor, target) -> Tensor:
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class MarginRankingLoss(_MarginLoss):
    """``F.margin_ranking_loss``: ``max(0, -target * (x1 - x2) + margin)``.

    >>> import ggmlgrad as gg
    >>> gg.nn.MarginRankingLoss()(gg.tensor([2.0]), gg.tensor([1.0]), gg.tensor([-1.0])).item()
    1.0
    """

    def forward(self, input1: Tensor, input2: Tensor, target) -> Tensor:
        return F.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_LegacyLoss):
    """``F.triplet_margin_loss`` with ``margin``, norm degree ``p``, ``eps`` and ``swap``.

    >>> import ggmlgrad as gg
    >>> gg.nn.TripletMarginLoss(margin=0.5, swap=True).swap
    True
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = float(margin), float(p), float(eps), bool(swap)

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                     reduction=self.reduction)


class PoissonNLLLoss(_LegacyLoss):
    """``F.poisson_nll_loss`` with ``log_input``, ``full`` and ``eps``.

    >>> import ggmlgrad as gg
    >>> gg.nn.PoissonNLLLoss()(gg.tensor([0.0]), gg.tensor([2.0])).item()
    1.0
    """

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = bool(log_input), bool(full), float(eps)

    def forward(self, log_input: Tensor, target) -> Tensor:
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """``F.gaussian_nll_loss(input, target, var)`` with ``full`` and ``eps`` (keyword-only, as torch).

    >>> import ggmlgrad as gg
    >>> gg.nn.GaussianNLLLoss()(gg.tensor([0.0]), gg.tensor([0.0]), gg.tensor([1.0])).item()
    0.0
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.full, self.eps = bool(full), float(eps)

    def forward(self, input: Tensor, target, var) -> Tensor:
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)
