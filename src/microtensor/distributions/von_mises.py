"""The von Mises distribution: a circular normal on angles, with location ``loc`` and
concentration ``concentration``."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import (broadcast_all, from_numpy_like, lazy_property,
                                             numpy_rng)

__all__ = ["VonMises"]


def _eval_poly(y, coef):
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


# Polynomial approximations of the modified Bessel functions I0 and I1, below and above
# x = 3.75 (Abramowitz and Stegun 9.8.1-9.8.4), as PyTorch's: they keep log(I(x)) finite
# for large x where I(x) itself overflows.
_COEF_SMALL = [[1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813],
               [0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411]]
_COEF_LARGE = [[0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
                0.02635537, -0.01647633, 0.00392377],
               [0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
                -0.02895312, 0.01787654, -0.00420059]]


def _log_modified_bessel_fn(x, order=0):
    """``log(I_order(x))`` for ``x > 0`` and order 0 or 1."""
    y = (x / 3.75) ** 2
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    x_large = x.clamp(min=3.75)   # the large-x form only where it applies (no log of < 0)
    large = x_large - 0.5 * x_large.log() + _eval_poly(3.75 / x_large, _COEF_LARGE[order]).log()
    return mt.where(x < 3.75, small.log(), large)


class VonMises(Distribution):
    """Density ``exp(concentration * cos(x - loc)) / (2 pi I0(concentration))``; samples
    lie in ``[-pi, pi)``."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, mt.Size(), validate_args)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (self.concentration * mt.cos(value - self.loc) - math.log(2 * math.pi)
                - _log_modified_bessel_fn(self.concentration, order=0))

    def sample(self, sample_shape=mt.Size()):
        rng = numpy_rng("VonMises.sample")
        shape = self._extended_shape(sample_shape)
        with mt.no_grad():
            loc = self.loc.to(mt.float64).expand(shape).numpy()
            concentration = self.concentration.to(mt.float64).expand(shape).numpy()
            return from_numpy_like(rng.vonmises(loc, concentration), self.loc)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(VonMises, batch_shape, _instance, ("loc", "concentration"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        """The circular variance ``1 - I1(k) / I0(k)``."""
        return 1 - (_log_modified_bessel_fn(self.concentration, order=1)
                    - _log_modified_bessel_fn(self.concentration, order=0)).exp()
