"""The Bernoulli distribution, parameterised by ``probs`` or ``logits``."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.utils import (BinaryProbsLogits, broadcast_all, probs_or_logits)
from microtensor.nn.functional import binary_cross_entropy_with_logits

__all__ = ["Bernoulli"]


class Bernoulli(BinaryProbsLogits, ExponentialFamily):
    """1 with probability ``probs`` (or ``sigmoid(logits)``), else 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._param, name, is_scalar = probs_or_logits(probs, logits)
        setattr(self, name, self._param)
        batch_shape = mt.Size() if is_scalar else self._param.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Bernoulli, batch_shape, _instance, ("probs", "logits"))

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs)
        return mt.where(self.probs == 0.5, math.nan, mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        with mt.no_grad():
            probs = self.probs.expand(shape)
            return (mt.rand(shape, dtype=probs.dtype, device=probs.device) < probs).to(probs)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = mt.arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values

    @property
    def _natural_params(self):
        return (mt.logit(self.probs),)

    def _log_normalizer(self, x):
        return mt.log1p(mt.exp(x))
