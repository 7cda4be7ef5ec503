"""The Wishart distribution over positive definite matrices, with ``df`` degrees of
freedom and a covariance, precision or ``scale_tril`` parameter; samples by the Bartlett
decomposition."""
import math
import warnings
from numbers import Number

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.chi2 import Chi2
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.multivariate_normal import (_cholesky, _precision_to_scale_tril,
                                                           _tril_solve)
from microtensor.distributions.utils import lazy_property

__all__ = ["Wishart"]

_log_2 = math.log(2)


def _mvdigamma(x, p):
    """The multivariate digamma function of dimension ``p``."""
    if not x.gt((p - 1) / 2).all():
        raise AssertionError("Wrong domain for multivariate digamma function.")
    return mt.digamma(x.unsqueeze(-1) - mt.arange(p, dtype=x.dtype, device=x.device) / 2).sum(-1)


def _clamp_above_eps(x):
    return x.clamp(min=mt.finfo(x.dtype).eps)


class Wishart(ExponentialFamily):
    """Positive definite ``p x p`` matrices ``sum_k x_k x_k^T`` for ``df`` normal vectors
    ``x_k`` of covariance ``covariance_matrix`` (``df`` may be real, ``> p - 1``)."""

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        given = [(name, m) for name, m in (("covariance_matrix", covariance_matrix),
                                            ("precision_matrix", precision_matrix),
                                            ("scale_tril", scale_tril)) if m is not None]
        if len(given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or "
                                 "scale_tril may be specified.")
        ((name, param),) = given
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if isinstance(df, Number):
            batch_shape = mt.Size(param.shape[:-2])
            self.df = mt.tensor(df, dtype=param.dtype, device=param.device)
        else:
            batch_shape = mt.broadcast_shapes(param.shape[:-2], df.shape)
            self.df = df.expand(batch_shape)
        event_shape = param.shape[-2:]
        if self.df.le(event_shape[-1] - 1).any():
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = "
                             f"{event_shape[-1] - 1}.")
        setattr(self, name, param.expand(tuple(batch_shape) + (-1, -1)))
        if self.df.lt(event_shape[-1]).any():
            warnings.warn("Low df values detected. Singular samples are highly likely to "
                          "occur for ndim - 1 < df < ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = param
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = _cholesky(param)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(param)
        self._dist_chi2 = self._chi2(batch_shape)

    def _chi2(self, batch_shape):
        """The squared diagonal of the Bartlett factor: Chi2(df - i) for row i."""
        p = self._event_shape[-1]
        offsets = mt.arange(p, dtype=self._unbroadcasted_scale_tril.dtype,
                            device=self._unbroadcasted_scale_tril.device)
        return Chi2(df=self.df.unsqueeze(-1) - offsets.expand(tuple(batch_shape) + (-1,)))

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(Wishart, batch_shape, _instance,
                             ("covariance_matrix", "scale_tril", "precision_matrix"),
                             self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(
            tuple(batch_shape) + tuple(self.event_shape))
        new.df = self.df.expand(batch_shape)
        new._dist_chi2 = new._chi2(batch_shape)
        return new

    def _matrix_shape(self):
        return tuple(self._batch_shape) + tuple(self._event_shape)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return (L @ L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        L_inv = _tril_solve(L, mt.eye(L.shape[-1], dtype=L.dtype, device=L.device))
        return (L_inv.mT @ L_inv).expand(self._matrix_shape())

    def _df_matrix(self, df):
        return df.expand(self._batch_shape).reshape(tuple(self._batch_shape) + (1, 1))

    @property
    def mean(self):
        return self._df_matrix(self.df) * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = mt.where(factor <= 0, math.nan, factor)
        return self._df_matrix(factor) * self.covariance_matrix

    @property
    def variance(self):
        V = self.covariance_matrix
        diag_V = V.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix(self.df) * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape):
        p = self._event_shape[-1]
        diagonal = _clamp_above_eps(self._dist_chi2.rsample(sample_shape).sqrt())
        below = mt.randn(tuple(sample_shape) + tuple(self._batch_shape) + (p, p),
                         dtype=diagonal.dtype, device=diagonal.device).tril(-1)
        chol = self._unbroadcasted_scale_tril @ (below + diagonal.diag_embed(dim1=-2, dim2=-1))
        return chol @ chol.mT

    def rsample(self, sample_shape=mt.Size(), max_try_correction=None):
        """Bartlett samples; a (numerically) singular one is drawn again, up to
        ``max_try_correction`` (10) times."""
        if max_try_correction is None:
            max_try_correction = 10
        sample = self._bartlett_sampling(sample_shape)
        is_singular = ~self.support.check(sample)
        if is_singular.any():
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                mask = is_singular.reshape(tuple(is_singular.shape) + (1, 1))
                sample = mt.where(mask, self._bartlett_sampling(sample_shape), sample)
                is_singular = ~self.support.check(sample)
                if not is_singular.any():
                    break
        return sample

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        # tr(Sigma^-1 value), Sigma = L L^T formed from all of L: its gradient reaches
        # L's upper triangle too, as that of PyTorch's cholesky_solve
        precision_value = mt.linalg.solve(L @ L.mT, value)
        return (-nu * (p * _log_2 / 2 + L.diagonal(dim1=-2, dim2=-1).log().sum(-1))
                - mt.mvlgamma(nu / 2, p=p)
                + (nu - p - 1) / 2 * mt.linalg.slogdet(value).logabsdet
                - precision_value.diagonal(dim1=-2, dim2=-1).sum(dim=-1) / 2)

    def entropy(self):
        nu = self.df
        p = self._event_shape[-1]
        L = self._unbroadcasted_scale_tril
        return ((p + 1) * (p * _log_2 / 2 + L.diagonal(dim1=-2, dim2=-1).log().sum(-1))
                + mt.mvlgamma(nu / 2, p=p) - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p=p)
                + nu * p / 2)

    @property
    def _natural_params(self):
        nu = self.df
        p = self._event_shape[-1]
        return -self.precision_matrix / 2, (nu - p - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-mt.linalg.slogdet(-2 * x).logabsdet + _log_2 * p)
                + mt.mvlgamma(y + (p + 1) / 2, p=p))
