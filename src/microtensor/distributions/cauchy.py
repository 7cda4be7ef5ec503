"""The Cauchy (Lorentz) distribution with location ``loc`` and scale ``scale``."""
import math

import microtensor as mt
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.location_scale import LocationScale

__all__ = ["Cauchy"]


class Cauchy(LocationScale, Distribution):
    """The ratio of two independent standard normals, shifted and scaled: no mean, no
    variance."""


    @property
    def mean(self):
        return mt.full(self._extended_shape(), math.nan, dtype=self.loc.dtype,
                       device=self.loc.device)

    @property
    def variance(self):
        return mt.full(self._extended_shape(), math.inf, dtype=self.loc.dtype,
                       device=self.loc.device)

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        u = mt.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        eps = mt.tan(math.pi * (u - 0.5))   # a standard Cauchy draw (inverse cdf)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (-math.log(math.pi) - self.scale.log()
                - (((value - self.loc) / self.scale) ** 2).log1p())

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return mt.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return mt.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()
