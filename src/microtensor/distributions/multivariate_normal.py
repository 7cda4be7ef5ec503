"""The multivariate normal distribution, parameterised by a covariance matrix, a
precision matrix or a lower-triangular scale (Cholesky factor of the covariance)."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import lazy_property

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    return mt.matmul(bmat, bvec.unsqueeze(-1)).squeeze(-1)


def _tril_solve(L, b):
    """``L^-1 b`` for lower-triangular ``L`` (batch dims broadcast). Only the lower
    triangle is read (``tril``), so no gradient reaches the upper one, as with PyTorch's
    triangular solve."""
    return mt.linalg.solve(L.tril(), b)


def _batch_mahalanobis(L, x):
    """The squared Mahalanobis distance ``x^T (L L^T)^-1 x`` over the last dim of ``x``,
    ``L``'s batch dims broadcasting against ``x``'s."""
    return _tril_solve(L, x.unsqueeze(-1)).squeeze(-1).pow(2).sum(-1)


def _cholesky(A):
    """The Cholesky factor of the symmetric ``A``, read from both triangles: the gradient
    towards ``A`` comes out symmetric, as PyTorch's."""
    return mt.linalg.cholesky((A + A.mT) / 2)


def _precision_to_scale_tril(P):
    # the Cholesky factor of the flipped precision gives that of the covariance
    Lf = _cholesky(mt.flip(P, (-2, -1)))
    L_inv = mt.transpose(mt.flip(Lf, (-2, -1)), -2, -1)
    return _tril_solve(L_inv, mt.eye(P.shape[-1], dtype=P.dtype, device=P.device))


class MultivariateNormal(Distribution):
    """A normal distribution over vectors with mean ``loc`` and exactly one of
    ``covariance_matrix``, ``precision_matrix``, ``scale_tril``."""

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [(name, m) for name, m in (("scale_tril", scale_tril),
                                            ("covariance_matrix", covariance_matrix),
                                            ("precision_matrix", precision_matrix))
                 if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        ((name, matrix),) = given
        if matrix.dim() < 2:
            subject = "scale_tril matrix" if name == "scale_tril" else name
            raise ValueError(f"{subject} must be at least two-dimensional, with optional "
                             f"leading batch dimensions")
        batch_shape = mt.broadcast_shapes(matrix.shape[:-2], loc.shape[:-1])
        setattr(self, name, matrix.expand(tuple(batch_shape) + (-1, -1)))
        self.loc = loc.expand(tuple(batch_shape) + (-1,))
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = matrix
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = _cholesky(matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(MultivariateNormal, batch_shape, _instance,
                             ("covariance_matrix", "scale_tril", "precision_matrix"),
                             self.event_shape + self.event_shape)
        new.loc = self.loc.expand(tuple(batch_shape) + tuple(self.event_shape))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        return new

    def _matrix_shape(self):
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return mt.matmul(L, L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        L_inv = _tril_solve(L, mt.eye(L.shape[-1], dtype=L.dtype, device=L.device))
        return mt.matmul(L_inv.mT, L_inv).expand(self._matrix_shape())

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        eps = mt.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return (-0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M)
                - self._half_log_det())

    def entropy(self):
        H = (0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi))
             + self._half_log_det())
        if len(self._batch_shape) == 0:
            return H
        return H.expand(self._batch_shape)
