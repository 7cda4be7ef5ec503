"""``ExponentialFamily``: the base class of distributions with densities
``exp(<t(x), theta> - F(theta) + k(x))``; from the natural parameters ``theta`` and the
log normalizer ``F`` it gives the entropy, and ``kl_divergence`` a fallback for two
members of the same family (both as Bregman divergences, with autograd)."""
import microtensor as mt
from microtensor.distributions.distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """Subclasses define ``_natural_params``, ``_log_normalizer(*natural_params)`` and
    ``_mean_carrier_measure`` (the expected ``k(x)``)."""

    @property
    def _natural_params(self):
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def entropy(self):
        """``F(theta) - <theta, grad F(theta)> - E[k(x)]``, the gradient by autograd."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = mt.autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for param, g in zip(nparams, gradients):
            result = result - (param * g).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
