"""The half-Cauchy distribution: ``|X|`` for ``X ~ Cauchy(0, scale)``."""
import math

import microtensor as mt
from microtensor.distributions.cauchy import Cauchy
from microtensor.distributions.folded import FoldedAtZero

__all__ = ["HalfCauchy"]


class HalfCauchy(FoldedAtZero):
    """``|X|`` for ``X ~ Cauchy(0, scale)``."""

    base = Cauchy

    @property
    def mean(self):
        return mt.full(self._extended_shape(), math.inf, dtype=self.scale.dtype,
                       device=self.scale.device)

    @property
    def variance(self):
        return self.base_dist.variance
