"""The half-normal distribution: ``|X|`` for ``X ~ Normal(0, scale)``."""
import math

from microtensor.distributions.folded import FoldedAtZero
from microtensor.distributions.normal import Normal

__all__ = ["HalfNormal"]


class HalfNormal(FoldedAtZero):
    """``|X|`` for ``X ~ Normal(0, scale)``."""

    base = Normal

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)
