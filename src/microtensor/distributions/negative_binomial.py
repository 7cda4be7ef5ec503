"""The negative binomial distribution: failures before ``total_count`` successes of
Bernoulli trials (PyTorch's convention: ``probs`` is the probability of a failure)."""
import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.gamma import Gamma
from microtensor.distributions.utils import (BinaryProbsLogits, count_and_probs_or_logits,
                                             from_numpy_like, lazy_property, numpy_rng)
from microtensor.nn.functional import logsigmoid

__all__ = ["NegativeBinomial"]


class NegativeBinomial(BinaryProbsLogits, Distribution):
    """``P(k) = C(k + r - 1, k) p^k (1 - p)^r`` with ``r = total_count``, ``p = probs``."""

    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        self.total_count, self._param, name = count_and_probs_or_logits(total_count, probs,
                                                                        logits)
        setattr(self, name, self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(NegativeBinomial, batch_shape, _instance,
                              ("total_count", "probs", "logits"))

    @property
    def mean(self):
        return self.total_count * mt.exp(self.logits)

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / mt.sigmoid(-self.logits)

    @lazy_property
    def _gamma(self):
        return Gamma(concentration=self.total_count, rate=mt.exp(-self.logits),
                     validate_args=False)

    def sample(self, sample_shape=mt.Size()):
        # a Poisson draw whose rate is Gamma distributed
        rng = numpy_rng("NegativeBinomial.sample")
        with mt.no_grad():
            rate = self._gamma.sample(sample_shape=sample_shape)
            return from_numpy_like(rng.poisson(rate.numpy()), rate)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = (self.total_count * logsigmoid(-self.logits)
                                 + value * logsigmoid(self.logits))
        log_normalization = (-mt.lgamma(self.total_count + value) + mt.lgamma(1.0 + value)
                             + mt.lgamma(self.total_count))
        # no successes needed and none failed: probability 1
        log_normalization = log_normalization.masked_fill(self.total_count + value == 0.0, 0.0)
        return log_unnormalized_prob - log_normalization
