"""``microtensor.linalg`` on complex tensors and ``linalg.eig``/``eigvals`` against
``torch.linalg``: values (through invariants where vectors are defined up to a phase),
result dtypes, gradients on the same seeded upstream gradients (PyTorch's conjugate
Wirtinger convention), gradcheck in complex128, PyTorch's errors, and vmap (one call,
never the fallback)."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

RNG = np.random.default_rng(2026)
DTYPES = [("float32", np.float32), ("float64", np.float64), ("complex64", np.complex64),
          ("complex128", np.complex128)]


def arr(t):
    return np.array(t.detach()._array())


def tarr(t):
    return t.detach().resolve_conj().numpy()


def values(*shape, dtype=np.complex128):
    v = RNG.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        v = v + 1j * RNG.standard_normal(shape)
    return v.astype(dtype)


def pair(v, grad=False):
    """The same values as a microtensor and a torch tensor (leaves when ``grad``)."""
    return mt.tensor(v, requires_grad=grad), torch.tensor(v, requires_grad=grad)


def close(a, b, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(arr(a) if isinstance(a, mt.Tensor) else a,
                               tarr(b) if isinstance(b, torch.Tensor) else b,
                               rtol=rtol, atol=atol)


def no_fallback():
    """A context in which vmap's per-sample fallback (which warns) fails the test."""
    context = warnings.catch_warnings()
    context.__enter__()
    warnings.simplefilter("error")
    return context


def tolerance(dtype):
    return (2e-4, 2e-4) if dtype in (np.float32, np.complex64) else (1e-9, 1e-10)


# --------------------------------------------------------------------------- eig

def _sorted_pairs(L, V):
    """Eigenvalues in one order (real part, then imaginary) and |V|'s columns with them:
    both are independent of LAPACK's order and of each eigenvector's phase."""
    order = np.lexsort((np.round(L.imag, 6), np.round(L.real, 6)), axis=-1)
    L = np.take_along_axis(L, order, -1)
    V = np.take_along_axis(np.abs(V), order[..., None, :], -1)
    return L, V


@pytest.mark.parametrize("name, dtype", DTYPES)
def test_eig_values_dtypes_and_invariants_match_torch(name, dtype):
    a = values(2, 4, 4, dtype=dtype)
    A, tA = pair(a)
    L, V = mt.linalg.eig(A)
    tL, tV = torch.linalg.eig(tA)
    assert str(L.dtype).split(".")[-1] == str(tL.dtype).split(".")[-1]
    assert V.dtype is L.dtype and tuple(V.shape) == (2, 4, 4)
    rtol, atol = tolerance(dtype)
    # A V = V diag(L), unit columns
    np.testing.assert_allclose(a @ arr(V), arr(V) * arr(L)[..., None, :], rtol=rtol,
                               atol=10 * atol)
    np.testing.assert_allclose(np.linalg.norm(arr(V), axis=-2), 1, rtol=rtol)
    ours, theirs = _sorted_pairs(arr(L), arr(V)), _sorted_pairs(tarr(tL), tarr(tV))
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol, atol=10 * atol)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=rtol, atol=10 * atol)
    close(mt.linalg.eigvals(A), torch.linalg.eigvals(tA), rtol, 10 * atol)
    assert mt.linalg.eig(A)._fields == ("eigenvalues", "eigenvectors")


def test_eigvals_of_a_rotation_are_plus_and_minus_i():
    L = mt.linalg.eigvals(mt.tensor([[0.0, -1.0], [1.0, 0.0]]))
    assert L.dtype is mt.complex64
    assert sorted(L.tolist(), key=lambda z: z.imag) == [-1j, 1j]


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_eig_gradients_of_phase_invariant_losses_match_torch(dtype):
    a = values(2, 3, 3, dtype=dtype)
    wL, wV = values(2, 3), RNG.standard_normal((2, 3, 3))
    (A, tA) = pair(a, grad=True)
    for lib, x in ((mt, A), (torch, tA)):
        L, V = lib.linalg.eig(x)
        loss = (L * lib.tensor(wL)).real.sum() + (V.abs() * lib.tensor(wV)).sum()
        loss.backward()
    assert A.grad.dtype is A.dtype
    close(A.grad, tA.grad, 1e-7, 1e-9)
    A.grad = tA.grad = None
    for lib, x in ((mt, A), (torch, tA)):
        (lib.linalg.eigvals(x) * lib.tensor(wL)).abs().sum().backward()
    close(A.grad, tA.grad, 1e-7, 1e-9)


def test_eig_refuses_a_loss_that_depends_on_the_phase_as_torch():
    A, tA = pair(values(3, 3), grad=True)
    with pytest.raises(RuntimeError) as theirs:
        torch.linalg.eig(tA)[1].real.sum().backward()
    with pytest.raises(RuntimeError) as ours:
        mt.linalg.eig(A)[1].real.sum().backward()
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_eig_gradcheck_and_gradgradcheck(dtype):
    A = mt.tensor(values(3, 3, dtype=dtype), requires_grad=True)

    def f(x):
        L, V = mt.linalg.eig(x)
        return L, V.abs()
    assert gradcheck(f, (A,))
    assert gradgradcheck(f, (A,))


def test_eig_under_vmap_is_one_call_and_matches_the_loop():
    A = mt.tensor(values(4, 3, 3))
    context = no_fallback()
    try:
        L, V = mt.vmap(mt.linalg.eig)(A)
        L2 = mt.vmap(mt.linalg.eigvals, in_dims=1)(A.movedim(0, 1))
    finally:
        context.__exit__(None, None, None)
    for i in range(4):
        Li, Vi = mt.linalg.eig(A[i])
        close(L[i], arr(Li), 0, 0)
        close(V[i], arr(Vi), 0, 0)
        close(L2[i], arr(Li), 0, 0)


def test_eig_errors_match_torch():
    for v in (values(2, 3), values(3)):
        with pytest.raises(RuntimeError) as theirs:
            torch.linalg.eig(torch.tensor(v))
        with pytest.raises(RuntimeError) as ours:
            mt.linalg.eig(mt.tensor(v))
        assert str(ours.value) == str(theirs.value)


# --------------------------------------------------------------------------- refusals

def test_a_function_without_complex_formulas_says_so():
    from microtensor.ops.linalg_decomp import COMPLEX_FUNCTIONS, check_matrix
    A = mt.tensor(values(3, 3))
    assert "linalg.cholesky_inverse_of_nothing" not in COMPLEX_FUNCTIONS
    with pytest.raises(NotImplementedError, match="complex tensors are not supported by "
                       "microtensor for this function. Got ComplexDouble"):
        check_matrix(A, "linalg.cholesky_inverse_of_nothing")
    with pytest.raises(RuntimeError, match="linalg.inv: Expected a floating point or complex "
                       "tensor as input. Got Long"):
        mt.linalg.inv(mt.ones(2, 2, dtype=mt.int64))
