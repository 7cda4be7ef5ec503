"""Probability distributions (PyTorch's ``torch.distributions``), written in microtensor
ops: sampling (``rsample`` where a reparameterization exists), log densities, entropies,
moments, KL divergences; gradients, ``vmap`` and per-sample gradients flow through them.
"""
from microtensor.distributions import constraints
from microtensor.distributions.bernoulli import Bernoulli
from microtensor.distributions.categorical import Categorical
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.kl import kl_divergence, register_kl
from microtensor.distributions.normal import Normal
from microtensor.distributions.uniform import Uniform

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal", "Uniform", "constraints",
           "kl_divergence", "register_kl"]
