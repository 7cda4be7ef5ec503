"""The Poisson distribution with rate ``rate``."""
from numbers import Number

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.utils import broadcast_all, from_numpy_like, numpy_rng

__all__ = ["Poisson"]


class Poisson(ExponentialFamily):
    """``P(k) = rate^k exp(-rate) / k!`` for ``k = 0, 1, 2, ...``."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        batch_shape = mt.Size() if isinstance(rate, Number) else self.rate.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Poisson, batch_shape, _instance, ("rate",))

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        rng = numpy_rng("Poisson.sample")
        rate = self.rate.detach().expand(shape).numpy()
        return from_numpy_like(rng.poisson(rate), self.rate)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return value.xlogy(rate) - rate - (value + 1).lgamma()

    @property
    def _natural_params(self):
        return (mt.log(self.rate),)

    def _log_normalizer(self, x):
        return mt.exp(x)
