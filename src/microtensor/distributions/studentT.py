"""Student's t distribution with ``df`` degrees of freedom, location ``loc`` and scale
``scale``."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.chi2 import Chi2
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import broadcast_all

__all__ = ["StudentT"]


class StudentT(Distribution):
    """``loc + scale * X / sqrt(Z / df)`` for ``X`` standard normal, ``Z ~ Chi2(df)``;
    ``rsample`` goes through ``Chi2``'s (implicit) reparameterization."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(StudentT, batch_shape, _instance, ("df", "loc", "scale"))
        new._chi2 = self._chi2.expand(batch_shape)
        return new

    @property
    def mean(self):
        return mt.where(self.df <= 1, math.nan, self.loc)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        finite = self.scale.pow(2) * self.df / (self.df - 2)
        infinite_or_nan = mt.where(self.df > 1, math.inf, math.nan)
        return mt.where(self.df > 2, finite, infinite_or_nan.to(finite))

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        X = mt.randn(shape, dtype=self.df.dtype, device=self.df.device)
        Z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * X * mt.rsqrt(Z / self.df)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        Z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi)
             + mt.lgamma(0.5 * self.df) - mt.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * mt.log1p(y ** 2.0 / self.df) - Z

    def entropy(self):
        lbeta = (mt.lgamma(0.5 * self.df) + math.lgamma(0.5)
                 - mt.lgamma(0.5 * (self.df + 1)))
        return (self.scale.log()
                + 0.5 * (self.df + 1) * (mt.digamma(0.5 * (self.df + 1))
                                         - mt.digamma(0.5 * self.df))
                + 0.5 * self.df.log() + lbeta)
