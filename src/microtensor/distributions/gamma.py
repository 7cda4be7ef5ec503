"""The Gamma distribution, and the reparameterized standard Gamma draw that ``Gamma``,
``Dirichlet`` and ``Beta`` sample with.

A Gamma draw has no explicit reparameterization; its gradient with respect to the
concentration is the implicit one, ``dx/dalpha = -(dF/dalpha)(x; alpha) / f(x; alpha)``
(``F``/``f`` the standard Gamma cdf/density), as PyTorch's. ``dF/dalpha`` comes from the
series ``F(x; a) = sum_n x^(a+n) e^-x / Gamma(a+n+1)`` differentiated term by term, in
float64 microtensor ops (its terms by running products and sums over ``n``); the same series gives
``Gamma.cdf``."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.utils import (batch_shape_of, broadcast_all, from_numpy_like,
                                             numpy_rng, physical)

__all__ = ["Gamma"]


def _series_terms(alpha, x):
    """``(log x, log r_n, n)`` for the series of the standard Gamma cdf: term n of
    ``F(x; a) = sum_n x^(a+n) e^-x / Gamma(a+n+1)`` divided by the density ``f(x; a)`` is
    ``r_n = prod_{k<=n} x / (a + k)`` (a running product over the last dim).  The terms
    grow up to n ~ x - a, then fall geometrically: enough of them are taken for the tail
    beyond to be negligible in float64."""
    alpha64, x64 = alpha.to(mt.float64).unsqueeze(-1), x.to(mt.float64).unsqueeze(-1)
    largest = float(physical(x64).max()) if x64.numel() else 0.0
    k = mt.arange(int(largest + 10 * math.sqrt(largest) + 40), dtype=mt.float64)
    log_x = x64.log()
    return alpha64, log_x, (log_x - (alpha64 + k).log()).cumsum(-1), k


def _standard_gamma_grad(alpha, x):
    """``dx/dalpha`` of standard Gamma draws ``x`` of concentrations ``alpha``:
    ``-(dF/dalpha) / f``, with ``digamma(a + n + 1) = digamma(a) + sum_{k<=n} 1/(a+k)``."""
    alpha64, log_x, log_ratio, k = _series_terms(alpha, x)
    digammas = mt.digamma(alpha64) + (alpha64 + k).reciprocal().cumsum(-1)
    dF_over_f = (mt.exp(log_ratio) * (log_x - digammas)).sum(-1)
    return (-dF_over_f).to(x.dtype)


def _standard_gamma_cdf(alpha, x):
    """``F(x; alpha)``, the regularized lower incomplete gamma function, differentiable in
    both arguments; 0 at ``x = 0``."""
    x = x.clamp(min=0)
    alpha64, log_x, log_ratio, _ = _series_terms(alpha, x.clamp(min=mt.finfo(x.dtype).tiny))
    log_density = (alpha64 - 1) * log_x - log_x.exp() - mt.lgamma(alpha64)
    cdf = mt.exp(log_ratio + log_density).sum(-1).clamp(max=1)
    return mt.where(x == 0, 0.0, cdf.to(x.dtype))


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
        batch_shape = batch_shape_of((concentration, rate), self.concentration)
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

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _standard_gamma_cdf(*broadcast_all(self.concentration, self.rate * value))

    def entropy(self):
        return (self.concentration - mt.log(self.rate) + mt.lgamma(self.concentration)
                + (1.0 - self.concentration) * mt.digamma(self.concentration))

    @property
    def _natural_params(self):
        return self.concentration - 1, -self.rate

    def _log_normalizer(self, x, y):
        return mt.lgamma(x + 1) + (x + 1) * mt.log(-y.reciprocal())
