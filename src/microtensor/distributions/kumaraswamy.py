"""The Kumaraswamy distribution on (0, 1), as ``Uniform`` through power transforms."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.transformed_distribution import TransformedDistribution
from microtensor.distributions.transforms import AffineTransform, PowerTransform
from microtensor.distributions.uniform import Uniform
from microtensor.distributions.utils import broadcast_all, euler_constant

__all__ = ["Kumaraswamy"]


def _moments(a, b, n):
    """The ``n``-th moment of a Kumaraswamy(a, b): ``b B(1 + n/a, b)``."""
    arg1 = 1 + n / a
    log_value = mt.lgamma(arg1) + mt.lgamma(b) - mt.lgamma(arg1 + b)
    return b * mt.exp(log_value)


class Kumaraswamy(TransformedDistribution):
    """``(1 - U^(1/c0))^(1/c1)`` for ``U`` uniform: density ``c1 c0 x^(c1-1)
    (1 - x^c1)^(c0-1)``."""

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(mt.full_like(self.concentration0, 0),
                            mt.full_like(self.concentration0, 1), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()),
                      AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(batch_shape)
        new.concentration0 = self.concentration0.expand(batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        """``((c1 - 1) / (c1 c0 - 1))^(1/c1)``, NaN where a concentration is below 1
        (PyTorch's formula gives NaN everywhere)."""
        undefined = (self.concentration0 < 1) | (self.concentration1 < 1)
        # any valid stand-in where undefined, so that no log of a negative is taken
        c1 = mt.where(undefined, 2.0, self.concentration1)
        c0 = mt.where(undefined, 2.0, self.concentration0)
        log_mode = ((c1 - 1).log() - (c1 * c0 - 1).log()) / c1
        return mt.where(undefined, math.nan, log_mode.exp())

    @property
    def variance(self):
        return _moments(self.concentration1, self.concentration0, 2) - mt.pow(self.mean, 2)

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        H0 = mt.digamma(self.concentration0 + 1) + euler_constant
        return t0 + t1 * H0 - mt.log(self.concentration1) - mt.log(self.concentration0)
