"""The Laplace distribution with location ``loc`` and scale ``scale``."""

import microtensor as mt
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.location_scale import LocationScale

__all__ = ["Laplace"]


class Laplace(LocationScale, Distribution):
    """Density ``exp(-|x - loc| / scale) / (2 * scale)``."""


    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return 2 ** 0.5 * self.scale

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        eps = mt.finfo(self.loc.dtype).eps
        # uniform on (eps - 1, 1): log1p(-|u|) stays finite
        u = mt.rand(shape, dtype=self.loc.dtype, device=self.loc.device) * (2 - eps) + (eps - 1)
        return self.loc - self.scale * u.sign() * mt.log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -mt.log(2 * self.scale) - mt.abs(value - self.loc) / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * mt.expm1(
            -(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * mt.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + mt.log(2 * self.scale)
