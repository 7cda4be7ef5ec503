"""The LKJ distribution over Cholesky factors of correlation matrices (Lewandowski,
Kurowicka and Joe, 2009), sampled by the onion method."""
import math

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.beta import Beta
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.utils import broadcast_all

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """Lower-Cholesky factors ``L`` of ``dim x dim`` correlation matrices ``L @ L.mT``,
    with density proportional to ``det(L @ L.mT)^(concentration - 1)`` on the
    correlation matrices."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        # the onion method: the squared norm of row i's off-diagonal part is Beta
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = mt.arange(self.dim - 1, dtype=self.concentration.dtype,
                           device=self.concentration.device)
        offset = mt.cat([offset.new_zeros((1,)), offset])
        self._beta = Beta(offset + 0.5, marginal_conc.unsqueeze(-1) - 0.5 * offset)
        super().__init__(self.concentration.size(), mt.Size((dim, dim)), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expanded(LKJCholesky, batch_shape, _instance, ("concentration",))
        new.dim = self.dim
        new._beta = self._beta.expand(tuple(batch_shape) + (self.dim,))
        return new

    def sample(self, sample_shape=mt.Size()):
        y = self._beta.sample(sample_shape).unsqueeze(-1)
        u_normal = mt.randn(self._extended_shape(sample_shape), dtype=y.dtype,
                            device=y.device).tril(-1)
        # rows as directions on the hypersphere; row 0 has no off-diagonal part
        norm = u_normal.norm(dim=-1, keepdim=True)
        u_hypersphere = u_normal / mt.where(norm == 0, 1.0, norm)
        w = mt.sqrt(y) * u_hypersphere
        eps = mt.finfo(w.dtype).tiny
        diag_elems = mt.clamp(1 - mt.sum(w ** 2, dim=-1), min=eps).sqrt()
        return w + mt.diag_embed(diag_elems)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = mt.arange(2, self.dim + 1, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = mt.sum(order * diag_elems.log(), dim=-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = mt.lgamma(alpha) * dm1
        numerator = mt.mvlgamma(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized_log_pdf - (pi_constant + numerator - denominator)
