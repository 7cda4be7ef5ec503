"""The Normal (Gaussian) distribution."""
import math

import microtensor as mt
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.location_scale import LocationScale

__all__ = ["Normal"]


class Normal(LocationScale, ExponentialFamily):
    """A normal distribution with mean ``loc`` and standard deviation ``scale``."""

    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        eps = mt.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale ** 2
        return (-((value - self.loc) ** 2) / (2 * var) - self.scale.log()
                - math.log(math.sqrt(2 * math.pi)))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + mt.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * mt.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + mt.log(self.scale)

    @property
    def _natural_params(self):
        return self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal()

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * mt.log(-math.pi / y)
