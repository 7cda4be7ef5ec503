"""Gradients at the edges of an op's domain, against PyTorch.

``slogdet`` at a singular matrix: PyTorch's backward solves with the LU factors of the
matrix and returns the resulting infinities and NaNs (its logabsdet is -inf there, a
value, so its gradient is one too); it must not raise.
"""
import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

SINGULAR = [
    [[1.0, 2.0], [2.0, 4.0]],
    [[0.0, 0.0], [0.0, 0.0]],
    [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]],
    [[2.0, 1.0, 0.0], [4.0, 2.0, 0.0], [1.0, 1.0, 1.0]],
    [[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [2.0, 4.0]]],    # a batch: one invertible
]


def _slogdet_gradient(lib, value, dtype, name):
    A = lib.tensor(value, dtype=getattr(lib, dtype), requires_grad=True)
    sign, logabsdet = getattr(lib.linalg, name)(A) if name == "slogdet" else \
        (None, lib.logdet(A))
    total = logabsdet.sum() + (0 if sign is None else (sign * sign).real.sum())
    return lib.autograd.grad(total, A)[0]


@pytest.mark.parametrize("name", ["slogdet", "logdet"])
@pytest.mark.parametrize("value", SINGULAR)
def test_slogdet_gradient_at_a_singular_matrix(value, name):
    ours = _slogdet_gradient(mt, value, "float64", name)
    theirs = _slogdet_gradient(torch, value, "float64", name)
    np.testing.assert_array_equal(np.asarray(ours._array()), theirs.numpy())


@pytest.mark.parametrize("value", [v for v in SINGULAR if np.shape(v)[-1] == 2])
def test_complex_slogdet_gradient_at_a_singular_matrix(value):
    """The same finite values, and non-finite values at the same places (which of inf and
    NaN a complex division by zero gives differs between NumPy and LAPACK; past 2 x 2 the
    NaNs spread differently through the triangular solves: not compared)."""
    ours = np.asarray(_slogdet_gradient(mt, value, "complex128", "slogdet")._array())
    theirs = _slogdet_gradient(torch, value, "complex128", "slogdet").numpy()
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(theirs))
    np.testing.assert_allclose(ours[np.isfinite(ours)], theirs[np.isfinite(theirs)],
                               rtol=1e-12)
