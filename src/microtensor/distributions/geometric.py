"""The geometric distribution: the number of failures before the first success of
Bernoulli trials with success probability ``probs`` (or ``sigmoid(logits)``)."""
import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import (broadcast_all, is_all_true, lazy_property,
                                             logits_to_probs, probs_or_logits, probs_to_logits)
from microtensor.nn.functional import binary_cross_entropy_with_logits

__all__ = ["Geometric"]


class Geometric(Distribution):
    """``P(k) = (1 - p)^k p`` for ``k = 0, 1, 2, ...``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        param, name, is_scalar = probs_or_logits(probs, logits)
        setattr(self, name, param)
        super().__init__(mt.Size() if is_scalar else param.size(), validate_args=validate_args)
        if self._validate_args and probs is not None:
            value = self.probs
            valid = value > 0
            if not is_all_true(valid):
                raise ValueError(f"Expected parameter probs ({type(value).__name__} of shape "
                                 f"{tuple(value.shape)}) of distribution {self!r} to be "
                                 f"positive but found invalid values:\n{value.detach()[~valid]}")

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Geometric, batch_shape, _instance, ("probs", "logits"))

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return mt.zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    def sample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        tiny = mt.finfo(self.probs.dtype).tiny
        with mt.no_grad():
            u = mt.rand(shape, dtype=self.probs.dtype, device=self.probs.device).clamp(min=tiny)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        # p = 1 puts all mass on 0: 0 * log(0) is 0 there, not nan
        probs = mt.where((probs == 1) & (value == 0), 0.0, probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return (binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")
                / self.probs)
