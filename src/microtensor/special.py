"""``microtensor.special``: PyTorch's ``torch.special`` namespace.

Names PyTorch also has elsewhere are the same functions as ``microtensor.<name>`` (``expit``
is ``sigmoid``, ``gammaln`` is ``lgamma``, ``psi`` is ``digamma``, ``multigammaln`` is
``mvlgamma``, ``gammainc`` is ``igamma`` ...); the others call the ops of
``microtensor.ops.special`` (``special_<name>`` in the registry).
"""
import microtensor as _mt
from microtensor._tensor import _function
from microtensor.ops.registry import REGISTRY as _REGISTRY

# PyTorch's names for functions microtensor has at top level: the same function objects
_SAME = {"digamma": "digamma", "erf": "erf", "erfc": "erfc", "erfinv": "erfinv",
         "exp2": "exp2", "expit": "sigmoid", "expm1": "expm1", "gammainc": "igamma",
         "gammaincc": "igammac", "gammaln": "lgamma",
         "i0": "i0", "log1p": "log1p", "log_softmax": "log_softmax", "logit": "logit",
         "logsumexp": "logsumexp", "multigammaln": "mvlgamma", "polygamma": "polygamma",
         "psi": "digamma", "round": "round", "sinc": "sinc", "softmax": "softmax",
         "xlogy": "xlogy"}
globals().update({name: getattr(_mt, target) for name, target in _SAME.items()})

_OWN = ("ndtr", "ndtri", "log_ndtr", "erfcx", "i0e", "i1", "i1e", "entr",
        "xlog1py", "zeta", "modified_bessel_i0", "modified_bessel_i1",
        "spherical_bessel_j0", "airy_ai", "bessel_j0", "bessel_j1", "bessel_y0",
        "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
        "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
        "chebyshev_polynomial_t", "chebyshev_polynomial_u",
        "chebyshev_polynomial_v", "chebyshev_polynomial_w",
        "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
        "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w",
        "hermite_polynomial_h", "hermite_polynomial_he",
        "laguerre_polynomial_l", "legendre_polynomial_p")
globals().update({name: _function(_REGISTRY["special_" + name]) for name in _OWN})

__all__ = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
           "chebyshev_polynomial_t", "chebyshev_polynomial_u",
           "chebyshev_polynomial_v", "chebyshev_polynomial_w", "digamma",
           "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammainc", "gammaincc", "gammaln", "hermite_polynomial_h",
           "hermite_polynomial_he", "i0", "i0e", "i1", "i1e",
           "laguerre_polynomial_l", "legendre_polynomial_p", "log1p",
           "log_ndtr", "log_softmax", "logit", "logsumexp",
           "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0",
           "modified_bessel_k1", "multigammaln", "ndtr", "ndtri", "polygamma",
           "psi", "round", "scaled_modified_bessel_k0",
           "scaled_modified_bessel_k1", "shifted_chebyshev_polynomial_t",
           "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
           "shifted_chebyshev_polynomial_w", "sinc", "softmax",
           "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]
