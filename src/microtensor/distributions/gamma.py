"""The Gamma distribution, and the reparameterized standard Gamma draw that ``Gamma``,
``Dirichlet`` and ``Beta`` sample with.

A Gamma draw has no explicit reparameterization; its gradient with respect to the
concentration is the implicit one, ``dx/dalpha = -(dF/dalpha)(x; alpha) / f(x; alpha)``
(``F``/``f`` the standard Gamma cdf/density), as PyTorch's. ``dF/dalpha`` comes from the
series ``F(x; a) = sum_n x^(a+n) e^-x / Gamma(a+n+1)`` differentiated term by term, in
float64 microtensor ops (its terms by running products and sums over ``n``)."""
import math
from numbers import Number

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.utils import broadcast_all, from_numpy_like, numpy_rng

__all__ = ["Gamma"]


def _standard_gamma_grad(alpha, x):
    """``dx/dalpha`` of standard Gamma draws ``x`` of concentrations ``alpha``."""
    alpha64, x64 = alpha.to(mt.float64).unsqueeze(-1), x.to(mt.float64).unsqueeze(-1)
    largest = float(x64.max()) if x64.numel() else 0.0
    # the terms grow up to n ~ x - alpha, then fall geometrically: enough of them for
    # the tail beyond that to be negligible in float64
    k = mt.arange(int(largest + 10 * math.sqrt(largest) + 40), dtype=mt.float64)
    log_x = x64.log()
    # term n of F over the density f is prod_{k<=n} x / (alpha + k), and
    # digamma(alpha + n + 1) = digamma(alpha) + sum_{k<=n} 1 / (alpha + k)
    log_ratio = (log_x - (alpha64 + k).log()).cumsum(-1)
    digammas = mt.digamma(alpha64) + (alpha64 + k).reciprocal().cumsum(-1)
    dF_over_f = (mt.exp(log_ratio) * (log_x - digammas)).sum(-1)
    return (-dF_over_f).to(x.dtype)


def standard_gamma_rsample(concentration):
    """Standard Gamma draws of shape ``concentration.shape`` (NumPy's sampler on
    microtensor's generator) that carry the implicit gradient to ``concentration``."""
    rng = numpy_rng("a Gamma, Beta or Dirichlet sample")
    with mt.no_grad():
        alpha = concentration.detach()
        x = from_numpy_like(rng.standard_gamma(alpha.numpy()), alpha)
        x = x.clamp(min=mt.finfo(x.dtype).tiny)
    if not (concentration.requires_grad and mt.is_grad_enabled()):
        return x
    # value x, gradient dx/dalpha towards concentration
    return x + _standard_gamma_grad(alpha, x) * (concentration - alpha)


class Gamma(ExponentialFamily):
    """Density ``rate^c x^(c-1) exp(-rate x) / Gamma(c)`` with ``c = concentration``."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        if isinstance(concentration, Number) and isinstance(rate, Number):
            batch_shape = mt.Size()
        else:
            batch_shape = self.concentration.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Gamma, batch_shape, _instance, ("concentration", "rate"))

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=mt.Size()):
        shape = self._extended_shape(sample_shape)
        value = standard_gamma_rsample(self.concentration.expand(shape)) / self.rate.expand(shape)
        return value.clamp(min=mt.finfo(value.dtype).tiny)

    def log_prob(self, value):
        value = mt.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return (mt.xlogy(self.concentration, self.rate)
                + mt.xlogy(self.concentration - 1, value)
                - self.rate * value - mt.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - mt.log(self.rate) + mt.lgamma(self.concentration)
                + (1.0 - self.concentration) * mt.digamma(self.concentration))

    @property
    def _natural_params(self):
        return self.concentration - 1, -self.rate

    def _log_normalizer(self, x, y):
        return mt.lgamma(x + 1) + (x + 1) * mt.log(-y.reciprocal())
