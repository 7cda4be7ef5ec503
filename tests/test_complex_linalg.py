"""``microtensor.linalg`` on complex tensors and ``linalg.eig``/``eigvals`` against
``torch.linalg``: values (through invariants where vectors are defined up to a phase),
result dtypes, gradients on the same seeded upstream gradients (PyTorch's conjugate
Wirtinger convention), gradcheck in complex128, PyTorch's errors, and vmap (one call,
never the fallback)."""
import contextlib
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.testing import seed_for

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


@pytest.fixture(autouse=True)
def _own_random_stream(request):
    """Each test draws from its own stream, whatever ran before it."""
    global RNG
    RNG = np.random.default_rng(seed_for(request.node.nodeid))


@contextlib.contextmanager
def no_fallback():
    """vmap's per-sample fallback (which warns) fails the test inside."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


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
    with no_fallback():
        L, V = mt.vmap(mt.linalg.eig)(A)
        L2 = mt.vmap(mt.linalg.eigvals, in_dims=1)(A.movedim(0, 1))
    for i in range(4):
        Li, Vi = mt.linalg.eig(A[i])
        close(L[i], arr(Li), 0, 0)
        close(V[i], arr(Vi), 0, 0)
        close(L2[i], arr(Li), 0, 0)


def test_eig_errors_match_torch():
    # (an integer matrix is left out: PyTorch's message is "Unknown Complex ScalarType for
    # Long", ours check_matrix's)
    for v in (values(2, 3), values(3), np.array([[np.nan, 1.0], [0.0, 1.0]])):
        with pytest.raises(RuntimeError) as theirs:
            torch.linalg.eig(torch.tensor(v))
        with pytest.raises(RuntimeError) as ours:
            mt.linalg.eig(mt.tensor(v))
        assert str(ours.value) == str(theirs.value)


# --------------------------------------------------------------------------- refusals

def test_complex_hermitian_ldl_is_refused_saying_so():
    A = mt.tensor(hermitian_pd(3, 3))
    message = "complex Hermitian matrices \\(hermitian=True\\) are not supported by microtensor"
    with pytest.raises(NotImplementedError, match="torch.linalg.ldl_factor_ex: " + message):
        mt.linalg.ldl_factor(A, hermitian=True)
    LD, pivots = mt.linalg.ldl_factor(A)
    with pytest.raises(NotImplementedError, match="torch.linalg.ldl_solve: " + message):
        mt.linalg.ldl_solve(LD, pivots, A, hermitian=True)
    with pytest.raises(RuntimeError, match="linalg.inv: Expected a floating point or complex "
                       "tensor as input. Got Long"):
        mt.linalg.inv(mt.ones(2, 2, dtype=mt.int64))


@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 2)])
def test_complex_symmetric_ldl_matches_torch(shape):
    a = values(*shape)
    a = a + np.swapaxes(a, -1, -2)                  # symmetric, not Hermitian
    b = values(*shape[:-1], 2)
    A, tA = pair(a)
    LD, pivots, info = mt.linalg.ldl_factor_ex(A)
    tLD, tpivots, tinfo = torch.linalg.ldl_factor_ex(tA)
    close(LD, tLD, 1e-10, 1e-12)
    assert pivots.tolist() == tpivots.tolist() and info.tolist() == tinfo.tolist()
    X = mt.linalg.ldl_solve(LD, pivots, mt.tensor(b))
    close(X, torch.linalg.ldl_solve(tLD, tpivots, torch.tensor(b)), 1e-10, 1e-12)
    np.testing.assert_allclose(a @ arr(X), b, atol=1e-10)


# --------------------------------------------------------------------------- complex inputs

def well_conditioned(*shape, dtype=np.complex128):
    return values(*shape, dtype=dtype) * 0.5 + 2 * np.eye(shape[-1])


def hermitian_pd(*shape, dtype=np.complex128):
    b = values(*shape, dtype=dtype)
    return b @ np.conj(np.swapaxes(b, -1, -2)) + shape[-1] * np.eye(shape[-1])


def triangular(*shape, upper=True):
    t = well_conditioned(*shape)
    return np.triu(t) if upper else np.tril(t)


def phase_free(lib, vectors_at):
    """Outputs with the vectors at positions ``vectors_at`` replaced by their absolute
    values: a loss of those does not depend on each vector's phase."""
    return lambda out: tuple(o.abs() if i in vectors_at else o for i, o in enumerate(out))


def first(lib):
    return lambda out: out[0]


def lu_factors(lib, A):
    return lib.linalg.lu_factor(A)


def cholesky_factor(*shape):
    return np.linalg.cholesky(hermitian_pd(*shape))


# The functions that read one triangle of a Hermitian matrix, or a triangular factor,
# have PyTorch's gradients: the derivative along Hermitian (lower triangular) directions,
# which gradcheck checks through that projection of the input; TORCH_FAILS: PyTorch's own
# backward fails (an in-place write in its cond's graph), so gradcheck alone checks ours
HERMITIAN = {0: lambda A: (A + A.mH) / 2}
TRIL = {1: lambda L: L.tril()}
TORCH_FAILS = "torch fails"

# (id, function of (lib, *inputs), input arrays, output processing or None, gradient view)
CASES = [
    ("inv", lambda lib, A: lib.linalg.inv(A), [well_conditioned(3, 3)], None, None),
    ("inv_batched", lambda lib, A: lib.linalg.inv(A), [well_conditioned(2, 3, 3)], None, None),
    ("inv_ex", lambda lib, A: lib.linalg.inv_ex(A), [well_conditioned(3, 3)], first, None),
    ("det", lambda lib, A: lib.linalg.det(A), [well_conditioned(2, 3, 3)], None, None),
    ("slogdet", lambda lib, A: tuple(lib.linalg.slogdet(A)), [well_conditioned(2, 3, 3)],
     None, None),
    ("logabsdet", lambda lib, A: lib.linalg.slogdet(A)[1], [well_conditioned(3, 3)], None,
     None),
    ("logdet", lambda lib, A: lib.logdet(A), [well_conditioned(3, 3)], None, None),
    ("solve", lambda lib, A, B: lib.linalg.solve(A, B),
     [well_conditioned(2, 3, 3), values(2, 3, 2)], None, None),
    ("solve_vector", lambda lib, A, B: lib.linalg.solve(A, B),
     [well_conditioned(3, 3), values(3)], None, None),
    ("solve_right", lambda lib, A, B: lib.linalg.solve(A, B, left=False),
     [well_conditioned(3, 3), values(2, 3)], None, None),
    ("solve_ex", lambda lib, A, B: lib.linalg.solve_ex(A, B),
     [well_conditioned(3, 3), values(3, 2)], first, None),
    ("cholesky", lambda lib, A: lib.linalg.cholesky(A), [hermitian_pd(2, 3, 3)], None, HERMITIAN),
    ("cholesky_upper", lambda lib, A: lib.linalg.cholesky(A, upper=True),
     [hermitian_pd(3, 3)], None, HERMITIAN),
    ("cholesky_ex", lambda lib, A: lib.linalg.cholesky_ex(A), [hermitian_pd(3, 3)], first,
     HERMITIAN),
    ("qr", lambda lib, A: tuple(lib.linalg.qr(A)), [values(4, 3)], None, None),
    ("qr_complete", lambda lib, A: tuple(lib.linalg.qr(A, mode="complete")),
     [values(2, 3, 3)], None, None),
    ("svd", lambda lib, A: tuple(lib.linalg.svd(A, full_matrices=False)), [values(4, 3)],
     lambda lib: phase_free(lib, (0, 2)), None),
    ("svd_wide", lambda lib, A: tuple(lib.linalg.svd(A, full_matrices=False)),
     [values(2, 2, 4)], lambda lib: phase_free(lib, (0, 2)), None),
    ("svdvals", lambda lib, A: lib.linalg.svdvals(A), [values(3, 4)], None, None),
    ("eigh", lambda lib, A: tuple(lib.linalg.eigh(A)), [hermitian_pd(2, 3, 3)],
     lambda lib: phase_free(lib, (1,)), HERMITIAN),
    ("eigvalsh", lambda lib, A: lib.linalg.eigvalsh(A), [hermitian_pd(3, 3)], None, HERMITIAN),
    ("eigvalsh_upper", lambda lib, A: lib.linalg.eigvalsh(A, UPLO="U"), [hermitian_pd(3, 3)],
     None, HERMITIAN),
    ("pinv", lambda lib, A: lib.linalg.pinv(A), [values(4, 3)], None, None),
    ("pinv_hermitian", lambda lib, A: lib.linalg.pinv(A, hermitian=True),
     [hermitian_pd(3, 3)], None, HERMITIAN),
    ("lstsq", lambda lib, A, B: lib.linalg.lstsq(A, B).solution,
     [values(4, 3), values(4, 2)], None, None),
    ("matrix_norm_fro", lambda lib, A: lib.linalg.matrix_norm(A), [values(2, 3, 4)], None,
     None),
    ("matrix_norm_nuc", lambda lib, A: lib.linalg.matrix_norm(A, "nuc"), [values(3, 4)],
     None, None),
    ("matrix_norm_2", lambda lib, A: lib.linalg.matrix_norm(A, 2), [values(3, 4)], None,
     None),
    ("matrix_norm_1", lambda lib, A: lib.linalg.matrix_norm(A, 1), [values(3, 4)], None,
     None),
    ("matrix_norm_inf", lambda lib, A: lib.linalg.matrix_norm(A, float("inf")),
     [values(3, 4)], None, None),
    ("norm", lambda lib, A: lib.linalg.norm(A), [values(3, 4)], None, None),
    ("vector_norm", lambda lib, x: lib.linalg.vector_norm(x, 3, dim=-1), [values(3, 4)],
     None, None),
    ("cond", lambda lib, A: lib.linalg.cond(A), [well_conditioned(3, 3)], None, None),
    ("cond_fro", lambda lib, A: lib.linalg.cond(A, "fro"), [well_conditioned(2, 3, 3)], None,
     TORCH_FAILS),
    ("cond_1", lambda lib, A: lib.linalg.cond(A, 1), [well_conditioned(3, 3)], None,
     TORCH_FAILS),
    ("matrix_exp", lambda lib, A: lib.linalg.matrix_exp(A), [values(2, 3, 3)], None, None),
    ("matrix_power", lambda lib, A: lib.linalg.matrix_power(A, 3), [values(3, 3)], None,
     None),
    ("matrix_power_negative", lambda lib, A: lib.linalg.matrix_power(A, -2),
     [well_conditioned(3, 3)], None, None),
    ("multi_dot", lambda lib, A, B, C: lib.linalg.multi_dot([A, B, C]),
     [values(2, 3), values(3, 4), values(4)], None, None),
    ("vecdot", lambda lib, x, y: lib.linalg.vecdot(x, y), [values(2, 3), values(3)], None,
     None),
    ("solve_triangular", lambda lib, A, B: lib.linalg.solve_triangular(A, B, upper=True),
     [triangular(3, 3), values(2, 3, 2)], None, None),
    ("solve_triangular_right_unit",
     lambda lib, A, B: lib.linalg.solve_triangular(A, B, upper=False, left=False,
                                                   unitriangular=True),
     [triangular(3, 3, upper=False), values(2, 3)], None, None),
    ("lu_factor", lambda lib, A: tuple(lib.linalg.lu_factor(A)), [values(2, 3, 3)], first,
     None),
    ("lu", lambda lib, A: tuple(lib.linalg.lu(A)), [values(4, 3)],
     lambda lib: (lambda out: out[1:]), None),
    ("lu_solve", lambda lib, A, B: lib.linalg.lu_solve(*lu_factors(lib, A), B),
     [well_conditioned(3, 3), values(3, 2)], None, None),
    ("lu_solve_adjoint", lambda lib, A, B: lib.linalg.lu_solve(*lu_factors(lib, A), B,
                                                               adjoint=True),
     [well_conditioned(3, 3), values(3, 2)], None, None),
    ("lu_solve_right_adjoint",
     lambda lib, A, B: lib.linalg.lu_solve(*lu_factors(lib, A), B, left=False, adjoint=True),
     [well_conditioned(3, 3), values(2, 3)], None, None),
    ("householder_product", lambda lib, A, tau: lib.linalg.householder_product(A, tau),
     [values(4, 3), values(2)], None, None),
    ("tensorinv", lambda lib, A: lib.linalg.tensorinv(A, 1),
     [well_conditioned(6, 6).reshape(6, 2, 3)], None, None),
    ("tensorsolve", lambda lib, A, B: lib.linalg.tensorsolve(A, B),
     [well_conditioned(6, 6).reshape(2, 3, 6), values(2, 3)], None, None),
    ("cross", lambda lib, x, y: lib.linalg.cross(x, y), [values(2, 3), values(1, 3)], None,
     None),
    ("cholesky_solve", lambda lib, B, L: lib.cholesky_solve(B, L),
     [values(3, 2), cholesky_factor(3, 3)], None, TRIL),
    ("cholesky_inverse", lambda lib, L: lib.cholesky_inverse(L), [cholesky_factor(3, 3)],
     None, {0: lambda L: L.tril()}),
    ("svd_top_level", lambda lib, A: tuple(lib.svd(A)), [values(4, 3)],
     lambda lib: phase_free(lib, (0, 2)), None),
]


def _run(lib, fn, process, tensors):
    out = fn(lib, *tensors)
    if process is not None:
        out = process(lib)(out)
    return out if isinstance(out, tuple) else (out,)


def _differentiable(outputs):
    return [o for o in outputs if o.dtype.is_floating_point or o.dtype.is_complex]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_complex_values_dtypes_and_gradients_match_torch(case):
    _, fn, inputs, process, view = case
    ours = [mt.tensor(v, requires_grad=True) for v in inputs]
    theirs = [torch.tensor(v, requires_grad=True) for v in inputs]
    out, expected = _run(mt, fn, process, ours), _run(torch, fn, process, theirs)
    assert len(out) == len(expected)
    for o, e in zip(out, expected):
        assert str(o.dtype).split(".")[-1] == str(e.dtype).split(".")[-1]
        close(o, e, 1e-7, 1e-9)
    # the same seeded upstream gradient on both sides
    out, expected = _differentiable(out), _differentiable(expected)
    upstream = [values(*e.shape, dtype=np.complex128 if e.dtype.is_complex else np.float64)
                for e in expected]
    got = mt.autograd.grad(out, ours, [mt.tensor(u) for u in upstream], allow_unused=True,
                           materialize_grads=True)
    if view == TORCH_FAILS:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(expected, theirs, [torch.tensor(u) for u in upstream])
        return
    want = torch.autograd.grad(expected, theirs, [torch.tensor(u) for u in upstream],
                               allow_unused=True, materialize_grads=True)
    for g, w in zip(got, want):
        close(arr(g), tarr(w), 1e-7, 1e-9)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_complex_gradcheck(case):
    _, fn, inputs, process, view = case
    projections = view if isinstance(view, dict) else {}
    tensors = tuple(mt.tensor(v, requires_grad=True) for v in inputs)

    def projected(*t):
        t = [projections.get(i, lambda x: x)(x) for i, x in enumerate(t)]
        return _differentiable(_run(mt, fn, process, t))
    assert gradcheck(projected, tensors)


@pytest.mark.parametrize("fn", [
    lambda lib, A: lib.linalg.svdvals(A), lambda lib, A: lib.linalg.svd(A)[1],
    lambda lib, A: lib.linalg.eigvalsh(A @ A.mH), lambda lib, A: lib.linalg.slogdet(A),
    lambda lib, A: lib.linalg.matrix_norm(A, "nuc"), lambda lib, A: lib.linalg.norm(A),
    lambda lib, A: lib.linalg.cond(A), lambda lib, A: lib.linalg.matrix_rank(A),
    lambda lib, A: lib.linalg.matrix_rank(A @ A.mH, hermitian=True),
    lambda lib, A: lib.linalg.lstsq(A, A, driver="gelsd"),
    lambda lib, A: lib.linalg.eig(A), lambda lib, A: lib.linalg.lu_factor(A)])
def test_complex64_result_dtypes_and_values_match_torch(fn):
    a = well_conditioned(2, 3, 3, dtype=np.complex64)
    out, expected = fn(mt, mt.tensor(a)), fn(torch, torch.tensor(a))
    out, expected = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    for o, e in zip(out, expected):
        assert str(o.dtype).split(".")[-1] == str(e.dtype).split(".")[-1]
        assert tuple(o.shape) == tuple(e.shape)
    for o, e in zip(out, expected):
        close(o, e, 1e-4, 1e-5)


@pytest.mark.parametrize("name, fn", [
    ("svd", lambda lib, A: lib.linalg.svd(A, full_matrices=False)[0].real.sum()),
    ("eigh", lambda lib, A: lib.linalg.eigh(A @ A.mH)[1].real.sum())])
def test_phase_dependent_losses_are_refused_as_torch(name, fn):
    A, tA = pair(values(3, 3), grad=True)
    with pytest.raises(RuntimeError) as theirs:
        fn(torch, tA).backward()
    with pytest.raises(RuntimeError) as ours:
        fn(mt, A).backward()
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("fn", [
    lambda A: mt.linalg.inv(A), lambda A: mt.linalg.det(A), lambda A: mt.linalg.svdvals(A),
    lambda A: tuple(mt.linalg.slogdet(A)), lambda A: mt.linalg.eigvalsh(A @ A.mH),
    lambda A: tuple(mt.linalg.qr(A)), lambda A: mt.linalg.pinv(A),
    lambda A: mt.linalg.matrix_exp(A), lambda A: mt.linalg.solve(A, A[..., 0]),
    lambda A: mt.linalg.cholesky(A @ A.mH + mt.eye(3)), lambda A: tuple(mt.linalg.lu(A)),
    lambda A: mt.linalg.solve_triangular(A.triu() + 3 * mt.eye(3), A, upper=True),
    lambda A: mt.linalg.householder_product(A, A[..., 0, :2]),
    lambda A: mt.linalg.vecdot(A, A)])
def test_complex_ops_under_vmap_are_one_call_and_match_the_loop(fn):
    A = mt.tensor(well_conditioned(4, 3, 3))
    with no_fallback():
        batched = mt.vmap(fn)(A)
    batched = batched if isinstance(batched, tuple) else (batched,)
    for i in range(4):
        single = fn(A[i])
        single = single if isinstance(single, tuple) else (single,)
        for b, s in zip(batched, single):
            close(b[i], arr(s), 1e-12, 1e-12)


def test_contiguous_copies_of_complex128_views():
    z = mt.tensor(values(3, 4))
    for view in (z.mT, z[:, ::2], z.mH):
        copy = view.contiguous()
        assert copy.is_contiguous() and copy.tolist() == view.tolist()


@pytest.mark.parametrize("loss", [
    lambda A: (mt.linalg.eigvals(A) * mt.tensor([1.0, 2j, -1.0])).abs().sum(),
    lambda A: mt.linalg.eig(A)[1].abs().sum() + mt.linalg.eig(A)[0].real.sum(),
    lambda A: mt.linalg.svdvals(A).sum() + mt.linalg.slogdet(A)[1],
    lambda A: mt.linalg.eigh(A @ A.mH)[1].abs().sum(),
    lambda A: mt.linalg.inv(A).abs().sum() + mt.linalg.det(A).real])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_vmap_of_grad_matches_the_loop(loss, dtype):
    A = mt.tensor(well_conditioned(3, 3, 3, dtype=dtype))
    with no_fallback():
        batched = mt.vmap(mt.func.grad(loss))(A)
    for i in range(3):
        leaf = A[i].clone().requires_grad_()
        loss(leaf).backward()
        close(batched[i], arr(leaf.grad), 1e-10, 1e-12)
