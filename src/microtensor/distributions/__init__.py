"""Probability distributions (PyTorch's ``torch.distributions``), written in microtensor
ops: sampling (``rsample`` where a reparameterization exists), log densities, entropies,
moments, KL divergences, transforms; gradients, ``vmap`` and per-sample gradients flow
through them.
"""
from microtensor.distributions import constraints, transforms
from microtensor.distributions.bernoulli import Bernoulli
from microtensor.distributions.beta import Beta
from microtensor.distributions.binomial import Binomial
from microtensor.distributions.categorical import Categorical
from microtensor.distributions.cauchy import Cauchy
from microtensor.distributions.chi2 import Chi2
from microtensor.distributions.continuous_bernoulli import ContinuousBernoulli
from microtensor.distributions.constraint_registry import biject_to, transform_to
from microtensor.distributions.dirichlet import Dirichlet
from microtensor.distributions.distribution import Distribution
from microtensor.distributions.exp_family import ExponentialFamily
from microtensor.distributions.exponential import Exponential
from microtensor.distributions.gamma import Gamma
from microtensor.distributions.fishersnedecor import FisherSnedecor
from microtensor.distributions.generalized_pareto import GeneralizedPareto
from microtensor.distributions.geometric import Geometric
from microtensor.distributions.gumbel import Gumbel
from microtensor.distributions.half_cauchy import HalfCauchy
from microtensor.distributions.half_normal import HalfNormal
from microtensor.distributions.independent import Independent
from microtensor.distributions.inverse_gamma import InverseGamma
from microtensor.distributions.kl import kl_divergence, register_kl
from microtensor.distributions.kumaraswamy import Kumaraswamy
from microtensor.distributions.laplace import Laplace
from microtensor.distributions.lkj_cholesky import LKJCholesky
from microtensor.distributions.logistic_normal import LogisticNormal
from microtensor.distributions.lowrank_multivariate_normal import LowRankMultivariateNormal
from microtensor.distributions.mixture_same_family import MixtureSameFamily
from microtensor.distributions.multinomial import Multinomial
from microtensor.distributions.multivariate_normal import MultivariateNormal
from microtensor.distributions.negative_binomial import NegativeBinomial
from microtensor.distributions.normal import Normal
from microtensor.distributions.one_hot_categorical import (OneHotCategorical,
                                                           OneHotCategoricalStraightThrough)
from microtensor.distributions.pareto import Pareto
from microtensor.distributions.poisson import Poisson
from microtensor.distributions.relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from microtensor.distributions.studentT import StudentT
from microtensor.distributions.transformed_distribution import (LogNormal,
                                                                TransformedDistribution)
from microtensor.distributions.transforms import (AbsTransform, AffineTransform,
                                                  CatTransform, ComposeTransform,
                                                  CorrCholeskyTransform,
                                                  CumulativeDistributionTransform,
                                                  ExpTransform, IndependentTransform,
                                                  LowerCholeskyTransform,
                                                  PositiveDefiniteTransform, PowerTransform,
                                                  ReshapeTransform, StackTransform,
                                                  SigmoidTransform, SoftmaxTransform,
                                                  SoftplusTransform, StickBreakingTransform,
                                                  TanhTransform, Transform, identity_transform)
from microtensor.distributions.uniform import Uniform
from microtensor.distributions.von_mises import VonMises
from microtensor.distributions.weibull import Weibull
from microtensor.distributions.wishart import Wishart

__all__ = ["AbsTransform", "AffineTransform", "Bernoulli", "Beta", "Binomial", "CatTransform",
           "Categorical", "Cauchy", "Chi2", "ComposeTransform", "ContinuousBernoulli",
           "CorrCholeskyTransform", "CumulativeDistributionTransform", "Dirichlet", "Distribution",
           "ExpTransform", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma",
           "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal", "Independent",
           "IndependentTransform", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace",
           "LogNormal", "LogisticNormal", "LowRankMultivariateNormal", "LowerCholeskyTransform",
           "MixtureSameFamily", "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "Poisson",
           "PositiveDefiniteTransform", "PowerTransform", "RelaxedBernoulli",
           "RelaxedOneHotCategorical", "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform",
           "SoftplusTransform", "StackTransform", "StickBreakingTransform", "StudentT",
           "TanhTransform", "Transform", "TransformedDistribution", "Uniform", "VonMises",
           "Weibull", "Wishart", "biject_to", "constraints", "identity_transform", "kl_divergence",
           "register_kl", "transform_to", "transforms"]
