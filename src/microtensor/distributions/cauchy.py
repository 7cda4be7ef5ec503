"""The Cauchy (Lorentz) distribution with location ``loc`` and scale ``scale``."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import batch_shape_of, broadcast_all

__all__ = ["Cauchy"]


class Cauchy(Distribution):
    """The ratio of two independent standard normals, shifted and scaled: no mean, no
    variance."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = batch_shape_of((loc, scale), self.loc)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Cauchy, batch_shape, _instance, ("loc", "scale"))

    @property
    def mean(self):
        return mt.full(self._extended_shape(), math.nan, dtype=self.loc.dtype,
                       device=self.loc.device)

    @property
    def mode(self):
        return self.loc

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
