"""``|X|`` for ``X`` of a distribution symmetric about 0 with a ``scale``: what
``HalfNormal`` and ``HalfCauchy`` share (density, cdf and entropy from the base's)."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.transformed_distribution import TransformedDistribution
from microtensor.distributions.transforms import AbsTransform

__all__ = ["FoldedAtZero"]


class FoldedAtZero(TransformedDistribution):
    """``|X|`` for ``X ~ base(0, scale)``; a subclass names the ``base`` class."""

    base = None
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        super().__init__(self.base(0, scale, validate_args=False), AbsTransform(),
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mode(self):
        return mt.zeros_like(self.scale)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = mt.as_tensor(value, dtype=self.scale.dtype, device=self.scale.device)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return mt.where(value >= 0, log_prob, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
