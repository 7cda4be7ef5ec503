"""Relaxed (Concrete / Gumbel-softmax) distributions: continuous, reparameterizable
stand-ins for Bernoulli and one-hot categorical samples at temperature ``temperature``.
``LogitRelaxedBernoulli`` and ``ExpRelaxedCategorical`` are their base distributions in
logit / log space."""
import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.categorical import Categorical
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.transformed_distribution import TransformedDistribution
from microtensor.distributions.transforms import ExpTransform, SigmoidTransform
from microtensor.distributions.utils import (BinaryProbsLogits, broadcast_all, clamp_probs,
                                             probs_or_logits)

__all__ = ["ExpRelaxedCategorical", "LogitRelaxedBernoulli", "RelaxedBernoulli",
           "RelaxedOneHotCategorical"]


class LogitRelaxedBernoulli(BinaryProbsLogits, Distribution):
    """The logit of a ``RelaxedBernoulli`` sample."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        self._param, name, is_scalar = probs_or_logits(probs, logits)
        setattr(self, name, self._param)
        batch_shape = mt.Size() if is_scalar else self._param.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(LogitRelaxedBernoulli, batch_shape, _instance,
                             ("probs", "logits"))
        new.temperature = self.temperature
        return new

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(mt.rand(shape, dtype=probs.dtype, device=probs.device))
        return ((uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p())
                / self.temperature)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value.mul(self.temperature)
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class _Relaxed(TransformedDistribution):
    """A relaxed distribution as a transform of its log-space base: the base's
    ``temperature``, ``logits`` and ``probs``."""

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class RelaxedBernoulli(_Relaxed):
    """``sigmoid`` of a ``LogitRelaxedBernoulli`` sample: values in (0, 1) that approach
    Bernoulli samples as the temperature goes to 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)


class ExpRelaxedCategorical(Distribution):
    """The log of a ``RelaxedOneHotCategorical`` sample."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        uniforms = clamp_probs(mt.rand(shape, dtype=self.logits.dtype, device=self.logits.device))
        gumbels = -(-uniforms.log()).log()
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value):
        K = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_scale = (mt.full_like(self.temperature, float(K)).lgamma()
                     - self.temperature.log().mul(-(K - 1)))
        score = logits - value.mul(self.temperature)
        score = (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(_Relaxed):
    """``exp`` of an ``ExpRelaxedCategorical`` sample: points of the simplex that approach
    one-hot vectors as the temperature goes to 0 (the Gumbel-softmax)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base_dist = ExpRelaxedCategorical(temperature, probs, logits,
                                          validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)
