"""The generalized Pareto distribution (location ``loc``, scale ``scale``, shape
``concentration``), the limit law of exceedances over a high threshold."""
import math
from numbers import Number

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import broadcast_all

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(Distribution):
    """Survival function ``(1 + c z)^(-1/c)`` with ``z = (x - loc) / scale`` (``exp(-z)``
    at ``c = 0``); ``rsample`` inverts the cdf."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        if all(isinstance(v, Number) for v in (loc, scale, concentration)):
            batch_shape = mt.Size()
        else:
            batch_shape = self.loc.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(GeneralizedPareto, batch_shape, _instance,
                              ("loc", "scale", "concentration"))

    def _safe_concentration(self):
        """``(concentration == 0, concentration with 1 where it is 0)``: the c = 0 limit
        has its own formulas, and the others must not divide by 0 there."""
        eq_zero = mt.isclose(self.concentration, mt.zeros_like(self.concentration))
        return eq_zero, mt.where(eq_zero, mt.ones_like(self.concentration), self.concentration)

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        return self.icdf(mt.rand(shape, dtype=self.loc.dtype, device=self.loc.device))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_concentration()
        y = 1 / safe_conc + mt.ones_like(z)
        where_nonzero = mt.where(y == 0, y, y * mt.log1p(safe_conc * z))
        return -self.scale.log() - mt.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_concentration()
        return mt.where(eq_zero, -z, -mt.log1p(safe_conc * z) / safe_conc)

    def log_cdf(self, value):
        return mt.log1p(-mt.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return mt.exp(self.log_cdf(value))

    def icdf(self, value):
        eq_zero, safe_conc = self._safe_concentration()
        logu = mt.log1p(-value)
        where_nonzero = self.loc + self.scale / safe_conc * mt.expm1(-safe_conc * logu)
        return mt.where(eq_zero, self.loc - self.scale * logu, where_nonzero)

    def _z(self, x):
        return (x - self.loc) / self.scale

    @property
    def mean(self):
        valid = self.concentration < 1
        safe_conc = mt.where(valid, self.concentration, 0.5)
        return mt.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self):
        valid = self.concentration < 0.5
        safe_conc = mt.where(valid, self.concentration, 0.25)
        result = self.scale ** 2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc))
        return mt.where(valid, result, math.nan)

    def entropy(self):
        return mt.broadcast_to(mt.log(self.scale) + self.concentration + 1, self._batch_shape)

    @property
    def mode(self):
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = mt.where(self.concentration < 0, lower - self.scale / self.concentration,
                         math.inf)
        return constraints.interval(lower, upper)
