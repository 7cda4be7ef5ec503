"""The Dirichlet distribution over the probability simplex, with concentration
``concentration`` along the last dimension."""
import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.gamma import standard_gamma_rsample
from microtensor.nn.functional import one_hot

__all__ = ["Dirichlet"]


class Dirichlet(ExponentialFamily):
    """Density ``prod(x_i^(a_i - 1)) / B(a)`` on the simplex. ``rsample`` normalises
    reparameterized standard Gamma draws (see ``Gamma``)."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(Dirichlet, batch_shape, _instance, ("concentration",),
                              self.event_shape)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        gammas = standard_gamma_rsample(self.concentration.expand(shape))
        return gammas / gammas.sum(-1, keepdim=True)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (mt.xlogy(self.concentration - 1.0, value).sum(-1)
                + mt.lgamma(self.concentration.sum(-1))
                - mt.lgamma(self.concentration).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        concentrationm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        # every concentration below 1: the mass piles up at a vertex
        vertex = one_hot(mode.argmax(dim=-1), concentrationm1.shape[-1]).to(mode)
        return mt.where((self.concentration < 1).all(dim=-1, keepdim=True), vertex, mode)

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return (mt.lgamma(self.concentration).sum(-1) - mt.lgamma(a0)
                - (k - a0) * mt.digamma(a0)
                - ((self.concentration - 1.0) * mt.digamma(self.concentration)).sum(-1))

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - mt.lgamma(x.sum(-1))
