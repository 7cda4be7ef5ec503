"""The multinomial distribution: counts of ``total_count`` categorical draws."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.binomial import Binomial
from microtensor.distributions.categorical import Categorical
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import broadcast_all

__all__ = ["Multinomial"]


class Multinomial(Distribution):
    """Counts per category (the event dimension) of ``total_count`` draws with
    probabilities ``probs`` (or ``softmax(logits)``)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = Binomial(total_count=self.total_count, probs=new.probs)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=mt.Size()):
        sample_shape = tuple(sample_shape)
        samples = self._categorical.sample((self.total_count,) + sample_shape)
        samples = samples.movedim(0, -1)    # the draws last
        counts = mt.zeros(self._extended_shape(sample_shape), dtype=samples.dtype)
        counts = counts.scatter_add(-1, samples, mt.ones_like(samples))
        return counts.type_as(self.probs)

    def entropy(self):
        n = mt.tensor(float(self.total_count), dtype=self.probs.dtype)
        term1 = n * self._categorical.entropy() - mt.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = mt.exp(self._binomial.log_prob(support))
        weights = mt.lgamma(support + 1)
        return term1 + (binomial_probs * weights).sum([0, -1])

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = mt.lgamma(value.sum(-1) + 1)
        log_factorial_xs = mt.lgamma(value + 1).sum(-1)
        # a category of probability 0 drawn 0 times adds nothing (not 0 * -inf)
        logits = mt.where((value == 0) & (logits == -math.inf), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)
