"""Normalisation layers: ``BatchNorm1d``, ``BatchNorm2d``, ``InstanceNorm1d``, ``InstanceNorm2d``,
``GroupNorm``, ``RMSNorm``, with torch's constructor arguments, parameter and buffer names
(``weight``, ``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked``), so a torch
``state_dict`` loads into them.

In training mode a batch norm updates its running statistics in place, in the same graph as its
forward inside a capture (capture/writes.py): a captured training step with batch norm computes
as many graphs as one without. ``num_batches_tracked`` is int32 (torch: int64; the dtype rule).

>>> import ggmlgrad as gg
>>> bn = gg.nn.BatchNorm2d(3)
>>> y = bn(gg.randn(4, 3, 5, 5))
>>> bn.num_batches_tracked.item(), [n for n, _ in bn.named_buffers()]
(1, ['running_mean', 'running_var', 'num_batches_tracked'])
"""
from __future__ import annotations

from ..engine import int32
from ..tensor import Tensor, no_grad
from ..tensor.creation import ones, zeros
from . import functional as F
from .functional_norm import batch_norm_impl, normalized_dims
from .layers import _float32_only, _positive_int
from .module import Module, Parameter


def _momentum(cls: str, momentum, allow_none: bool):
    if momentum is None and allow_none:
        return None
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"{cls}: momentum must be a number{' or None' if allow_none else ''}, got {momentum!r}")
    return float(momentum)


class _NormBase(Module):
    """What batch and instance norm share: the affine parameters and the running buffers."""

    _allow_none_momentum = True

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        cls = type(self).__name__
        _float32_only(cls, dtype)
        self.num_features = _positive_int(cls, "num_features", num_features)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
            raise ValueError(f"{cls}: eps must be a number >= 0, got {eps!r}")
        self.eps = float(eps)
        self.momentum = _momentum(cls, momentum, self._allow_none_momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        n = self.num_features
        if self.affine:
            self.weight = Parameter(ones(n, device=device))
            if bias:
                self.bias = Parameter(zeros(n, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", zeros(n, device=device))
            self.register_buffer("running_var", ones(n, device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype=int32, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Running statistics reset; weight 1 and bias 0."""
        self.reset_running_stats()
        with no_grad():
            if self.weight is not None:
                self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    """Batch norm over axis 1: batch statistics in training (running buffers updated), running
    statistics in eval mode (batch statistics when ``track_running_stats=False``), as torch."""

    _dims: tuple = ()

    def _check_input_dim(self, input: Tensor) -> None:
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"expected {want} input (got {input.ndim}D input)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        tracking = self.training and self.track_running_stats
        factor = 0.0 if self.momentum is None else self.momentum
        nbt = self.num_batches_tracked if tracking else None
        if tracking and self.momentum is None:
            with no_grad():   # the cumulative average: 1 / (batches so far, this one included), in the graph
                factor = 1.0 / (nbt.float() + 1.0)
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        return batch_norm_impl(input, self.running_mean if keep else None, self.running_var if keep else None,
                               self.weight, self.bias, use_batch, factor, self.eps, nbt,
                               fn=type(self).__name__)


class BatchNorm1d(_BatchNorm):
    """Batch norm of (N, C) or (N, C, L) inputs (torch.nn.BatchNorm1d).

    >>> import ggmlgrad as gg
    >>> gg.nn.BatchNorm1d(4)
    BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm of (N, C, H, W) inputs (torch.nn.BatchNorm2d).

    >>> import ggmlgrad as gg
    >>> gg.nn.BatchNorm2d(8, momentum=None).momentum is None
    True
    """

    _dims = (4,)


class _InstanceNorm(_NormBase):
    """Instance norm: each (sample, channel) plane normalised on its own; an unbatched input
    (one axis fewer) is taken as a batch of one, as torch."""

    _allow_none_momentum = True
    _spatial = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def _check_input_dim(self, input: Tensor) -> None:
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__}: input must be a Tensor, got {type(input).__name__}")
        dims = (self._spatial + 1, self._spatial + 2)
        if input.ndim not in dims:
            raise ValueError(f"expected {dims[0]}D or {dims[1]}D input (got {input.ndim}D input)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        unbatched = input.ndim == self._spatial + 1
        feature_dim = input.ndim - self._spatial - 1
        if input.shape[feature_dim] != self.num_features and self.affine:
            raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                             f"({self.num_features}), but got: {input.shape[feature_dim]}.")
        x = input.unsqueeze(0) if unbatched else input
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            self.momentum if self.momentum is not None else 0.0, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance norm of (N, C, L) or (C, L) inputs (torch.nn.InstanceNorm1d).

    >>> import ggmlgrad as gg
    >>> gg.nn.InstanceNorm1d(3)(gg.randn(2, 3, 5)).shape
    (2, 3, 5)
    """

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance norm of (N, C, H, W) or (C, H, W) inputs (torch.nn.InstanceNorm2d).

    >>> import ggmlgrad as gg
    >>> gg.nn.InstanceNorm2d(3, affine=True)(gg.randn(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """

    _spatial = 2


class GroupNorm(Module):
    """Normalise groups of channels of every sample, then a per-channel affine (torch.nn.GroupNorm).

    >>> import ggmlgrad as gg
    >>> gg.nn.GroupNorm(2, 4)
    GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        _float32_only("GroupNorm", dtype)
        self.num_groups = _positive_int("GroupNorm", "num_groups", num_groups)
        self.num_channels = _positive_int("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.eps = float(eps)
        self.affine = bool(affine)
        if self.affine:
            self.weight = Parameter(ones(num_channels, device=device))
            if bias:
                self.bias = Parameter(zeros(num_channels, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` axes
    (torch.nn.RMSNorm; ``eps=None``: float32's machine epsilon), on ggml's rms_norm kernel.

    >>> import ggmlgrad as gg
    >>> gg.nn.RMSNorm([3, 4])
    RMSNorm((3, 4), eps=None, elementwise_affine=True)
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        _float32_only("RMSNorm", dtype)
        self.normalized_shape = normalized_dims("RMSNorm", normalized_shape)
        if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0):
            raise ValueError(f"RMSNorm: eps must be None or a number >= 0, got {eps!r}")
        self.eps = None if eps is None else float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        if self.elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, device=device))
        else:
            self.register_parameter("weight", None)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

