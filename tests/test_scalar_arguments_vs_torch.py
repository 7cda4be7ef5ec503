"""Python numbers given as an op's parameters (``dx``, ``eps``, ``ord``, ``alpha``...) of
the kinds PyTorch treats specially, against PyTorch: a bool where a real number is
wanted, a negative or NaN ``eps``, a complex scale factor, a number the tensor's dtype
cannot hold (PyTorch's "value cannot be converted ... without overflow")."""
import warnings

import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

CALLS = {
    "trapezoid dx=True": lambda L, x: L.trapezoid(x, dx=True),
    "trapezoid dx=1.5j": lambda L, x: L.trapezoid(x, dx=1.5j),
    "cumulative_trapezoid dx=True": lambda L, x: L.cumulative_trapezoid(x, dx=True),
    "cosine_similarity eps=-2": lambda L, x: L.cosine_similarity(x[None], x[None], eps=-2),
    "cosine_similarity eps=nan": lambda L, x: L.cosine_similarity(x[None], x[None],
                                                                  eps=float("nan")),
    "vector_norm ord=True": lambda L, x: L.linalg.vector_norm(x, True),
    "dist p=True": lambda L, x: L.dist(x, x + 1, True),
    "renorm p=True": lambda L, x: L.renorm(x.reshape(2, 2), True, 0, 1.0),
    "add alpha=2.5 complex": lambda L, x: L.add(x.to(L.complex64), x, alpha=2.5),
    "add alpha=1.5j real": lambda L, x: L.add(x, x, alpha=1.5j),
    "addcmul value=1.5j real": lambda L, x: L.addcmul(x, x, x, value=1.5j),
    "special.xlog1py(x, True)": lambda L, x: L.special.xlog1py(x, True),
    "elu alpha=1.5j": lambda L, x: L.nn.functional.elu(x, alpha=1.5j),
    "leaky_relu slope=1.5j": lambda L, x: L.nn.functional.leaky_relu(x, 1.5j),
    "threshold value=1.5j": lambda L, x: L.threshold(x, 2.0, 1.5j),
    "hardtanh min=nan int64": lambda L, x: L.nn.functional.hardtanh(x.long(), float("nan")),
    "addmm beta=nan int64": lambda L, x: L.addmm(x.long().reshape(2, 2), x.long().reshape(
        2, 2), x.long().reshape(2, 2), beta=float("nan")),
    "addcmul value=inf int64": lambda L, x: L.addcmul(x.long(), x.long(), x.long(),
                                                      value=float("inf")),
    "constant_pad_nd value=1e300 int64": lambda L, x: L.constant_pad_nd(x.long(), (1, 1),
                                                                        1e300),
    "histc min=1.5j": lambda L, x: L.histc(x, 4, 1.5j, 3.0),
    "logit eps=1.5j": lambda L, x: L.logit(x / 5, 1.5j),
    "nan_to_num nan=1.5j": lambda L, x: L.nan_to_num(x, 1.5j),
    "rrelu lower=nan": lambda L, x: L.rrelu(x - 2, float("nan"), 0.3),
    "rrelu upper=inf training": lambda L, x: L.rrelu(x - 2, 0.1, float("inf"), True),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_number_parameters_match_torch(name):
    def run(L):
        x = L.tensor([1.0, 2.0, 3.0, 4.0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return CALLS[name](L, x).tolist()
            except Exception as error:   # noqa: BLE001 (compared with PyTorch's)
                return type(error)
    ours, theirs = run(mt), run(torch)
    if isinstance(theirs, type):
        assert ours is theirs
    else:
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)
