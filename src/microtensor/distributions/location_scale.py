"""The part of the real location-scale distributions (``Normal``, ``Laplace``, ``Cauchy``)
that does not depend on the shape of their density."""
from microtensor.distributions import constraints
from microtensor.distributions.utils import batch_shape_of, broadcast_all

__all__ = ["LocationScale"]


class LocationScale:
    """What the real location-scale distributions (``Normal``, ``Laplace``, ``Cauchy``)
    share, ahead of their ``Distribution`` base: ``loc`` and ``scale`` broadcast together,
    their constraints, ``expand`` and the mode ``loc``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(batch_shape_of((loc, scale), self.loc), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(type(self), batch_shape, _instance, ("loc", "scale"))

    @property
    def mode(self):
        return self.loc
