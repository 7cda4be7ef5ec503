"""``microtensor.linalg`` against ``torch.linalg``: the norms' dispatch and orders, the
decompositions through gauge-invariant quantities (reconstructions, projectors, singular
values; their vectors are defined up to sign), gradients of gauge-invariant functions,
PyTorch's errors (LinAlgError on singular and indefinite inputs), named results, and vmap
(one call, never the fallback)."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

RNG = np.random.default_rng(11)


def arr(t):
    return np.array(t.detach()._array())


def tarr(t):
    return t.detach().numpy()


def pair(values, grad=True):
    """The same float64 values as a microtensor and a torch leaf."""
    values = np.asarray(values, dtype=np.float64)
    return (mt.tensor(values, requires_grad=grad),
            torch.tensor(values, requires_grad=grad))


def close(a, b, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(arr(a) if isinstance(a, mt.Tensor) else a,
                               tarr(b) if isinstance(b, torch.Tensor) else b,
                               rtol=rtol, atol=atol)


def spd(*shape):
    n = shape[-1]
    b = RNG.standard_normal(shape)
    return b @ np.swapaxes(b, -1, -2) + n * np.eye(n)


def grads_match(fn_mt, fn_torch, *values, rtol=1e-6, atol=1e-8):
    """Values and input gradients of ``sum(fn(...) * w)`` agree with PyTorch's."""
    ours, theirs = zip(*(pair(v) for v in values))
    out, expected = fn_mt(*ours), fn_torch(*theirs)
    close(out, expected, rtol, atol)
    w = RNG.standard_normal(tuple(expected.shape))
    (out * mt.tensor(w)).sum().backward()
    (expected * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs):
        close(a.grad, b.grad, rtol, atol)


# --------------------------------------------------------------------------- norms

MATRIX_ORDS = ["fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2]


@pytest.mark.parametrize("ord", MATRIX_ORDS)
@pytest.mark.parametrize("dim, keepdim", [((-2, -1), False), ((0, 2), True), ((2, 0), False)])
def test_matrix_norm_matches_torch(ord, dim, keepdim):
    values = RNG.standard_normal((3, 2, 4))
    grads_match(lambda a: mt.linalg.matrix_norm(a, ord, dim, keepdim),
                lambda a: torch.linalg.matrix_norm(a, ord, dim, keepdim), values)


@pytest.mark.parametrize("shape, kwargs", [
    ((4,), {}), ((3, 4), {}), ((3, 4), {"ord": "fro"}), ((3, 4), {"ord": "nuc"}),
    ((3, 4), {"ord": 2}), ((3, 4), {"ord": -1}), ((2, 3, 4), {"dim": (0, 2), "ord": math.inf}),
    ((2, 3, 4), {"dim": 1, "ord": 3}), ((2, 3, 4), {"dim": (1, 2)}), ((4,), {"ord": 1}),
    ((2, 3, 4), {"dim": -1, "keepdim": True}), ((3, 4), {"ord": 2, "dim": (1, 0)})])
def test_norm_dispatches_as_torch(shape, kwargs):
    values = RNG.standard_normal(shape)
    grads_match(lambda a: mt.linalg.norm(a, **kwargs), lambda a: torch.linalg.norm(a, **kwargs),
                values)


@pytest.mark.parametrize("call", [
    lambda m, a: m.linalg.norm(a, 2),                         # ord with a 3-D input, no dim
    lambda m, a: m.linalg.matrix_norm(a, 3),
    lambda m, a: m.linalg.matrix_norm(a, "fro", (1, 1)),
    lambda m, a: m.linalg.matrix_norm(a[0, 0]),
])
def test_norm_errors_as_torch(call):
    ours, theirs = pair(RNG.standard_normal((2, 3, 4)), grad=False)
    with pytest.raises(RuntimeError) as expected:
        call(torch, theirs)
    with pytest.raises(type(expected.value)):
        call(mt, ours)


# --------------------------------------------------------------------------- inv, det, solve

def test_inv_det_slogdet_match_torch():
    values = spd(2, 3, 3) - RNG.standard_normal((2, 3, 3))
    grads_match(mt.linalg.inv, torch.linalg.inv, values)
    grads_match(mt.linalg.det, torch.linalg.det, values)
    grads_match(lambda a: mt.linalg.slogdet(a).logabsdet,
                lambda a: torch.linalg.slogdet(a).logabsdet, values)
    result = mt.linalg.slogdet(mt.tensor(-np.eye(3)))
    assert type(result).__name__ == "linalg_slogdet"
    assert result.sign.item() == -1.0 and result.logabsdet.item() == 0.0


@pytest.mark.parametrize("a_shape, b_shape, left", [
    ((3, 3), (3, 2), True), ((2, 3, 3), (3,), True), ((2, 3, 3), (2, 3), True),
    ((3, 3), (2, 3), False), ((2, 3, 3), (3, 4), True)])
def test_solve_matches_torch(a_shape, b_shape, left):
    a = spd(*a_shape) + RNG.standard_normal(a_shape)
    grads_match(lambda x, y: mt.linalg.solve(x, y, left=left),
                lambda x, y: torch.linalg.solve(x, y, left=left), a,
                RNG.standard_normal(b_shape))


@pytest.mark.parametrize("fn", ["inv", "solve", "cholesky"])
def test_singular_and_indefinite_inputs_raise_linalg_error(fn):
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    args = {"inv": (singular,), "solve": (singular, np.ones((2, 1))),
            "cholesky": (-np.eye(2),)}[fn]
    with pytest.raises(torch.linalg.LinAlgError, match=fn):
        getattr(torch.linalg, fn)(*[torch.tensor(a) for a in args])
    with pytest.raises(mt.linalg.LinAlgError, match=f"linalg.{fn}"):
        getattr(mt.linalg, fn)(*[mt.tensor(a) for a in args])
    assert issubclass(mt.linalg.LinAlgError, RuntimeError)


@pytest.mark.parametrize("fn", ["inv", "det", "slogdet", "cholesky", "eigh"])
def test_non_square_input_refused_as_torch(fn):
    with pytest.raises(RuntimeError, match="square matrices, but they are 2 by 3") as e:
        getattr(torch.linalg, fn)(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=str(e.value).split(": ")[-1]):
        getattr(mt.linalg, fn)(mt.ones(2, 3, dtype=mt.float64))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        getattr(mt.linalg, fn)(mt.ones(3, dtype=mt.float64))


# --------------------------------------------------------------------------- cholesky, eigh

@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch_with_gradients_through_a_symmetric_input(upper):
    x = RNG.standard_normal((2, 3, 3))
    grads_match(lambda b: mt.linalg.cholesky(b @ b.mT + 3 * mt.eye(3, dtype=mt.float64),
                                             upper=upper),
                lambda b: torch.linalg.cholesky(b @ b.mT + 3 * torch.eye(3, dtype=b.dtype),
                                                upper=upper), x)


def test_cholesky_and_eigh_read_one_triangle():
    a = spd(3, 3)
    junk = a + np.triu(RNG.standard_normal((3, 3)), 1)
    close(mt.linalg.cholesky(mt.tensor(junk)), torch.linalg.cholesky(torch.tensor(a)))
    close(mt.linalg.eigvalsh(mt.tensor(junk)), torch.linalg.eigvalsh(torch.tensor(a)))
    close(mt.linalg.eigvalsh(mt.tensor(junk.T), UPLO="U"),
          torch.linalg.eigvalsh(torch.tensor(a)))


@pytest.mark.parametrize("UPLO", ["L", "U"])
def test_eigh_invariants_and_gradients_match_torch(UPLO):
    x = RNG.standard_normal((2, 3, 3))

    def invariant(lib):
        def f(b):
            L, V = lib.linalg.eigh(b + b.mT, UPLO=UPLO)
            # eigenvalues and V diag(f(L)) V^T do not depend on the eigenvectors' signs
            return (V * L.exp().unsqueeze(-2)) @ V.mT + L.unsqueeze(-1)
        return f
    grads_match(invariant(mt), invariant(torch), x)
    result = mt.linalg.eigh(mt.tensor(spd(3, 3)))
    assert tuple(result._fields) == ("eigenvalues", "eigenvectors")
    # whichever triangle is read, the gradient is PyTorch's: symmetric
    a, t = pair(spd(2, 3, 3))
    w = RNG.standard_normal(3)
    (mt.linalg.eigvalsh(a, UPLO=UPLO) * mt.tensor(w)).sum().backward()
    (torch.linalg.eigvalsh(t, UPLO=UPLO) * torch.tensor(w)).sum().backward()
    assert np.abs(tarr(t.grad) - np.swapaxes(tarr(t.grad), -1, -2)).max() < 1e-12
    assert np.abs(np.triu(tarr(t.grad), 1)).max() > 1e-3
    close(a.grad, t.grad)


# --------------------------------------------------------------------------- qr, svd

@pytest.mark.parametrize("shape, mode", [((4, 3), "reduced"), ((2, 3, 3), "complete"),
                                         ((3, 3), "reduced"), ((5, 2), "complete")])
def test_qr_reconstructs_and_matches_torch_up_to_signs(shape, mode):
    values = RNG.standard_normal(shape)
    Q, R = mt.linalg.qr(mt.tensor(values), mode=mode)
    tQ, tR = torch.linalg.qr(torch.tensor(values), mode=mode)
    assert tuple(Q.shape) == tuple(tQ.shape) and tuple(R.shape) == tuple(tR.shape)
    close(Q @ R, values)
    close(Q.mT @ Q, np.broadcast_to(np.eye(Q.shape[-1]), Q.mT.shape[:-1] + (Q.shape[-1],)))
    close(R.abs(), tR.abs())
    assert not np.tril(arr(R), -1).any()
    _, r_only = mt.linalg.qr(mt.tensor(values), mode="r")
    close(r_only.abs(), torch.linalg.qr(torch.tensor(values), mode="r").R.abs())


def test_qr_gradients_of_invariants_match_torch():
    def invariant(lib):
        def f(a):
            Q, R = lib.linalg.qr(a)
            # Q diag(R) and diag(R) R are sign-free
            d = R.diagonal(0, -2, -1)
            return (Q * d.unsqueeze(-2)) @ (R * d.unsqueeze(-1))
        return f
    grads_match(invariant(mt), invariant(torch), RNG.standard_normal((2, 4, 3)))


def test_qr_mode_r_has_no_derivative_and_bad_mode_is_refused():
    a = mt.tensor(RNG.standard_normal((3, 3)), requires_grad=True)
    Q, R = mt.linalg.qr(a, mode="r")
    assert tuple(Q.shape) == (0,)
    with pytest.raises(RuntimeError, match="mode='r'"):
        R.sum().backward()
    with pytest.raises(RuntimeError, match="unrecognized mode"):
        mt.linalg.qr(a, mode="full")


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_reconstructs_and_matches_torch(shape, full_matrices):
    values = RNG.standard_normal(shape)
    U, S, Vh = mt.linalg.svd(mt.tensor(values), full_matrices=full_matrices)
    tU, tS, tVh = torch.linalg.svd(torch.tensor(values), full_matrices=full_matrices)
    for ours, theirs in ((U, tU), (S, tS), (Vh, tVh)):
        assert tuple(ours.shape) == tuple(theirs.shape)
    close(S, tS)
    k = S.shape[-1]
    close((U[..., :k] * S.unsqueeze(-2)) @ Vh[..., :k, :], values)
    close(mt.linalg.svdvals(mt.tensor(values)), torch.linalg.svdvals(torch.tensor(values)))

    def invariant(lib):
        def f(a):
            U, S, Vh = lib.linalg.svd(a, full_matrices=full_matrices)
            # u_i v_i^T is sign-free; its weights other than S test the vectors' gradients
            weights = lib.arange(1, k + 1, dtype=a.dtype)
            return (U[..., :k] * (S + weights).unsqueeze(-2)) @ Vh[..., :k, :]
        return f
    grads_match(invariant(mt), invariant(torch), values)


# --------------------------------------------------------------------------- pinv, lstsq

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (3, 3)])
def test_pinv_matches_torch(shape):
    grads_match(mt.linalg.pinv, torch.linalg.pinv, RNG.standard_normal(shape))


def test_pinv_hermitian_and_tolerances_match_torch():
    grads_match(lambda a: mt.linalg.pinv(a + a.mT, hermitian=True),
                lambda a: torch.linalg.pinv(a + a.mT, hermitian=True), spd(2, 3, 3))
    rank_two = RNG.standard_normal((4, 2)) @ RNG.standard_normal((2, 3))
    for kwargs in ({}, {"rtol": 1e-3}, {"atol": 1e-6}, {"atol": 100.0}, {"rtol": 0.5}):
        close(mt.linalg.pinv(mt.tensor(rank_two), **kwargs),
              torch.linalg.pinv(torch.tensor(rank_two), **kwargs))
    sym = spd(3, 3) - 4 * np.eye(3)
    close(mt.linalg.pinv(mt.tensor(sym), hermitian=True, rtol=0.3),
          torch.linalg.pinv(torch.tensor(sym), hermitian=True, rtol=0.3))


@pytest.mark.parametrize("a_shape, b_shape", [((5, 3), (5, 2)), ((2, 4, 3), (2, 4, 1)),
                                              ((3, 3), (3, 2))])
def test_lstsq_solution_matches_torch(a_shape, b_shape):
    grads_match(lambda a, b: mt.linalg.lstsq(a, b).solution,
                lambda a, b: torch.linalg.lstsq(a, b).solution,
                RNG.standard_normal(a_shape), RNG.standard_normal(b_shape))
    result = mt.linalg.lstsq(mt.tensor(RNG.standard_normal(a_shape)),
                             mt.tensor(RNG.standard_normal(b_shape)), driver="gelsd")
    assert result._fields == ("solution", "residuals", "rank", "singular_values")


@pytest.mark.parametrize("driver", [None, "gelsy", "gelsd", "gelss", "gels"])
@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 5, 3), (2, 5, 2)), ((5, 3), (5,)), ((1, 5, 3), (4, 5, 2)), ((3, 5), (3, 2)),
    ((0, 0), (0, 2)), ((2, 0, 0), (2, 0, 1)), ((0, 3), (0, 2))])
def test_lstsq_reports_what_each_driver_reports(driver, a_shape, b_shape):
    """rank, singular values and residuals: their shapes, dtypes and values per driver."""
    for dtype in (np.float64, np.float32):
        a = RNG.standard_normal(a_shape).astype(dtype)
        b = RNG.standard_normal(b_shape).astype(dtype)
        ours = mt.linalg.lstsq(mt.tensor(a), mt.tensor(b), driver=driver)
        theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
        for x, y in zip(ours, theirs):
            assert tuple(x.shape) == tuple(y.shape)
            assert x.dtype.name == str(y.dtype).split(".")[-1]
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("driver", ["gelsy", "gelsd", "gelss"])
def test_lstsq_rank_deficient_batch_reports_ranks_and_no_residuals(driver):
    a = RNG.standard_normal((2, 5, 3))
    a[0, :, 2] = a[0, :, 1]
    b = RNG.standard_normal((2, 5, 2))
    ours = mt.linalg.lstsq(mt.tensor(a), mt.tensor(b), driver=driver)
    theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    assert ours.rank.tolist() == theirs.rank.tolist() == [2, 3]
    assert ours.residuals.shape == theirs.residuals.shape == (0,)
    np.testing.assert_allclose(ours.solution.numpy(), theirs.solution.numpy(), atol=1e-10)



# --------------------------------------------------------------------------- vmap

@pytest.mark.parametrize("fn", [
    lambda lib, a, b: lib.linalg.solve(a, b),
    lambda lib, a, b: lib.linalg.inv(a) @ b,
    lambda lib, a, b: lib.linalg.det(a) * b.sum(),
    lambda lib, a, b: lib.linalg.cholesky(a @ a.mT) @ b,
    lambda lib, a, b: lib.linalg.svdvals(a) + lib.linalg.eigvalsh(a @ a.mT),
    lambda lib, a, b: lib.linalg.pinv(a) @ b + lib.linalg.matrix_norm(a, "nuc"),
    lambda lib, a, b: lib.linalg.qr(a).R.abs() @ b,
])
@pytest.mark.parametrize("in_dims", [(0, 0), (0, None), (None, 1)])
def test_vmap_and_vmap_grad_match_torch_func(fn, in_dims):
    a = spd(2, 3, 3) + RNG.standard_normal((2, 3, 3))
    b = RNG.standard_normal((2, 3, 2))
    a_in = a if in_dims[0] == 0 else a[0]
    b_in = b if in_dims[1] == 0 else (b[0] if in_dims[1] is None else b.transpose(1, 0, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # the loop fallback warns: it must not run
        ours = mt.vmap(lambda x, y: fn(mt, x, y), in_dims=in_dims)(mt.tensor(a_in),
                                                                   mt.tensor(b_in))
        grads = mt.vmap(mt.func.grad(lambda x, y: fn(mt, x, y).sum()), in_dims=in_dims)(
            mt.tensor(a_in), mt.tensor(b_in))
    theirs = torch.func.vmap(lambda x, y: fn(torch, x, y), in_dims=in_dims)(
        torch.tensor(a_in), torch.tensor(b_in))
    expected = torch.func.vmap(torch.func.grad(lambda x, y: fn(torch, x, y).sum()),
                               in_dims=in_dims)(torch.tensor(a_in), torch.tensor(b_in))
    close(ours, theirs, 1e-6, 1e-8)
    close(grads, expected, 1e-6, 1e-8)
