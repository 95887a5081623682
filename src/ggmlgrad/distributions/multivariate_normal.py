"""MultivariateNormal(loc, covariance_matrix= | scale_tril=): the Cholesky factor, triangular
solves and log-determinant composed from graph ops (a loop over the K columns: meant for the small
event sizes of policies and latent spaces)."""
from __future__ import annotations

import math

from ..ops import op
from ..tensor import Tensor, no_grad
from ..tensor.functional_shape import cat, stack
from .distribution import Distribution, _float_tensor
from .noise import draw_noise

_MAX_EVENT = 64

def cholesky(a: Tensor) -> Tensor:
    """Lower Cholesky factor of symmetric positive-definite matrices ``a`` (..., K, K), column by
    column (differentiable; NaN where ``a`` is not positive-definite). It factors ``(a + a^T) / 2``,
    so its gradient is symmetric, as torch's ``cholesky`` backward gives."""
    a = (a + a.transpose(-1, -2)) * 0.5
    k = a.shape[-1]
    cols: list[Tensor] = []
    for j in range(k):
        low = a[..., j:, j]                                                 # rows j.. of column j
        if cols:
            done = stack(cols, -1)                                          # (..., K, j)
            low = low - (done[..., j:, :] * done[..., j:j + 1, :]).sum(-1)
        low = low / low[..., 0:1].sqrt()
        cols.append(cat([op.fill_like(a[..., :j, j], c=0.0), low], -1) if j else low)
    return stack(cols, -1)


def solve_lower(lower: Tensor, b: Tensor) -> Tensor:
    """``z`` with ``lower @ z = b`` for lower-triangular ``lower`` (..., K, K) and ``b`` (..., K)."""
    k = lower.shape[-1]
    z: list[Tensor] = []
    for i in range(k):
        acc = b[..., i:i + 1]
        if z:
            acc = acc - (lower[..., i, :i] * cat(z, -1)).sum(-1, keepdim=True)
        z.append(acc / lower[..., i, i:i + 1])
    return cat(z, -1)


def diagonal(m: Tensor) -> Tensor:
    """The diagonals of matrices (..., K, K) as (..., K)."""
    return stack([m[..., i, i] for i in range(m.shape[-1])], -1)


class MultivariateNormal(Distribution):
    """Multivariate normal distributions with mean ``loc`` (..., K) and either a
    ``covariance_matrix`` or its lower Cholesky factor ``scale_tril`` (..., K, K).

    >>> import ggmlgrad as gg
    >>> d = gg.distributions.MultivariateNormal(gg.zeros(2), covariance_matrix=gg.tensor([[2.0, 0.5], [0.5, 1.0]]))
    >>> round(d.log_prob(gg.tensor([1.0, -1.0])).item(), 4)
    -3.2605
    """

    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        given = [x is not None for x in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if precision_matrix is not None:
            raise NotImplementedError("MultivariateNormal(precision_matrix=...) is not supported: pass "
                                      "covariance_matrix or scale_tril")
        self.loc = _float_tensor(loc)
        if self.loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        matrix = _float_tensor(covariance_matrix if covariance_matrix is not None else scale_tril, self.loc)
        if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2] or matrix.shape[-1] != self.loc.shape[-1]:
            raise ValueError(f"MultivariateNormal: the matrix must be (..., K, K) with K = loc.shape[-1] = "
                             f"{self.loc.shape[-1]}, got {tuple(matrix.shape)}")
        if matrix.shape[-1] > _MAX_EVENT:
            raise ValueError(f"MultivariateNormal: event size {matrix.shape[-1]} is over {_MAX_EVENT} (the "
                             f"factorisation is a loop over columns)")
        self._unbroadcasted_scale_tril = cholesky(matrix) if covariance_matrix is not None else matrix
        self._covariance = matrix if covariance_matrix is not None else None
        from ..ops.shapes import broadcast_shapes
        batch = broadcast_shapes("MultivariateNormal", tuple(self.loc.shape[:-1]), tuple(matrix.shape[:-2]))
        super().__init__(validate_args=validate_args, batch_shape=batch, event_shape=tuple(self.loc.shape[-1:]))

    @property
    def scale_tril(self) -> Tensor:
        return self._unbroadcasted_scale_tril

    @property
    def covariance_matrix(self) -> Tensor:
        if self._covariance is not None:
            return self._covariance
        lower = self._unbroadcasted_scale_tril
        return lower @ lower.transpose(-1, -2)

    def _full(self, t: Tensor) -> Tensor:
        shape = self.batch_shape + self.event_shape
        return t if tuple(t.shape) == shape else t.expand(*shape)

    @property
    def mean(self) -> Tensor:
        return self._full(self.loc)

    @property
    def mode(self) -> Tensor:
        return self.mean

    @property
    def variance(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return self._full((lower * lower).sum(-1))

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = draw_noise("normal", shape, device=self.loc.device)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def _half_log_det(self) -> Tensor:
        return diagonal(self._unbroadcasted_scale_tril).log().sum(-1)

    def log_prob(self, value) -> Tensor:
        diff = _float_tensor(value, self.loc) - self.loc
        lower = self._unbroadcasted_scale_tril
        if tuple(lower.shape[:-2]) != tuple(diff.shape[:-1]):
            lower = lower.expand(*diff.shape[:-1], *lower.shape[-2:])
        z = solve_lower(lower, diff)
        k = self.event_shape[0]
        return -0.5 * (k * math.log(2 * math.pi) + (z * z).sum(-1)) - self._half_log_det()

    def entropy(self) -> Tensor:
        k = self.event_shape[0]
        h = 0.5 * k * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h if tuple(h.shape) == self.batch_shape else h.expand(*self.batch_shape)
