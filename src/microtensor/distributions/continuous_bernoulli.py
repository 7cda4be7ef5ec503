"""The continuous Bernoulli distribution on [0, 1] (Loaiza-Ganem and Cunningham, 2019),
parameterised by ``probs`` or ``logits``; near ``probs = 0.5`` its normaliser and moments
use Taylor expansions, where the closed forms lose precision."""
import math
from numbers import Number

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.utils import (BinaryProbsLogits, broadcast_all, clamp_probs,
                                             given_probs_or_logits, lazy_property, logits_to_probs)
from microtensor.nn.functional import binary_cross_entropy_with_logits

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(BinaryProbsLogits, ExponentialFamily):
    """Density ``C(p) p^x (1 - p)^(1 - x)`` on ``[0, 1]``; ``lims`` bounds the unstable
    region around ``p = 0.5``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        name, value = given_probs_or_logits(probs, logits)
        (param,) = broadcast_all(value)
        if name == "probs":
            if validate_args is not None and not self.arg_constraints["probs"].check(
                    param).all():
                raise ValueError("The parameter probs has invalid values")
            param = clamp_probs(param)
        self._param = param
        setattr(self, name, param)
        self._lims = lims
        batch_shape = mt.Size() if isinstance(value, Number) else param.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(ContinuousBernoulli, batch_shape, _instance, ("probs", "logits"))
        new._lims = self._lims
        return new

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return mt.where(self._outside_unstable_region(), self.probs,
                        self._lims[0] * mt.ones_like(self.probs))

    def _cont_bern_log_norm(self):
        """The log of the normaliser ``C(p)``."""
        cut_probs = self._cut_probs()
        cut_probs_below_half = mt.where(cut_probs <= 0.5, cut_probs, mt.zeros_like(cut_probs))
        cut_probs_above_half = mt.where(cut_probs >= 0.5, cut_probs, mt.ones_like(cut_probs))
        log_norm = (mt.log(mt.abs(mt.log1p(-cut_probs) - mt.log(cut_probs)))
                    - mt.where(cut_probs <= 0.5, mt.log1p(-2.0 * cut_probs_below_half),
                               mt.log(2.0 * cut_probs_above_half - 1.0)))
        x = mt.pow(self.probs - 0.5, 2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return mt.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut_probs = self._cut_probs()
        mus = (cut_probs / (2.0 * cut_probs - 1.0)
               + 1.0 / (mt.log1p(-cut_probs) - mt.log(cut_probs)))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * mt.pow(x, 2)) * x
        return mt.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return mt.sqrt(self.variance)

    @property
    def variance(self):
        cut_probs = self._cut_probs()
        vars_ = (cut_probs * (cut_probs - 1.0) / mt.pow(1.0 - 2.0 * cut_probs, 2)
                 + 1.0 / mt.pow(mt.log1p(-cut_probs) - mt.log(cut_probs), 2))
        x = mt.pow(self.probs - 0.5, 2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return mt.where(self._outside_unstable_region(), vars_, taylor)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    def sample(self, sample_shape=mt.Size()):
        with mt.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        return self.icdf(mt.rand(shape, dtype=self.probs.dtype, device=self.probs.device))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return (-binary_cross_entropy_with_logits(logits, value, reduction="none")
                + self._cont_bern_log_norm())

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut_probs = self._cut_probs()
        cdfs = ((mt.pow(cut_probs, value) * mt.pow(1.0 - cut_probs, 1.0 - value) + cut_probs
                 - 1.0) / (2.0 * cut_probs - 1.0))
        unbounded_cdfs = mt.where(self._outside_unstable_region(), cdfs, value)
        return mt.where(value <= 0.0, mt.zeros_like(value),
                        mt.where(value >= 1.0, mt.ones_like(value), unbounded_cdfs))

    def icdf(self, value):
        cut_probs = self._cut_probs()
        return mt.where(self._outside_unstable_region(),
                        (mt.log1p(-cut_probs + value * (2.0 * cut_probs - 1.0))
                         - mt.log1p(-cut_probs))
                        / (mt.log(cut_probs) - mt.log1p(-cut_probs)),
                        value)

    def entropy(self):
        log_probs0 = mt.log1p(-self.probs)
        log_probs1 = mt.log(self.probs)
        return (self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm()
                - log_probs0)

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        out_unst_reg = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut_nat_params = mt.where(out_unst_reg, x, (self._lims[0] - 0.5) * mt.ones_like(x))
        log_norm = (mt.log(mt.abs(mt.expm1(cut_nat_params)))
                    - mt.log(mt.abs(cut_nat_params)))
        taylor = 0.5 * x + mt.pow(x, 2) / 24.0 - mt.pow(x, 4) / 2880.0
        return mt.where(out_unst_reg, log_norm, taylor)
