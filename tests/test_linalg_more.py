"""The rest of ``torch.linalg`` for real dtypes and PyTorch's top-level names for it
(cholesky_solve, cholesky_inverse, triangular_solve, lu, lu_unpack, lu_solve, qr, orgqr),
against PyTorch: values, pivots and ``info``, gradients, named results, errors (types and
messages), and vmap against torch.func.vmap.  The registry sweeps run gradcheck,
gradgradcheck and vmap-against-the-loop on every op's samples."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

RNG = np.random.default_rng(23)


def arr(t):
    return np.array(t.detach()._array())


def both(values, grad=False, dtype=np.float64):
    values = np.asarray(values, dtype=dtype)
    return (mt.tensor(values, requires_grad=grad), torch.tensor(values, requires_grad=grad))


def close(ours, theirs, rtol=1e-7, atol=1e-9):
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            close(a, b, rtol, atol)
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(arr(ours), theirs.detach().numpy(), rtol=rtol, atol=atol)


def random(*shape):
    return RNG.standard_normal(shape)


def well_conditioned(*shape):
    n = shape[-1]
    return random(*shape) * 0.5 + 2 * np.eye(n)


def spd(*shape):
    b = random(*shape)
    return b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1])


def grads_match(fn_mt, fn_torch, *values, rtol=1e-6, atol=1e-8):
    """Values and gradients of ``sum(fn(...) * w)`` agree with PyTorch's."""
    ours, theirs = zip(*(both(v, grad=True) for v in values))
    out, expected = fn_mt(*ours), fn_torch(*theirs)
    close(out, expected, rtol, atol)
    w = random(*expected.shape)
    (out * mt.tensor(w)).sum().backward()
    (expected * torch.tensor(w)).sum().backward()
    for a, b in zip(ours, theirs):
        close(a.grad, b.grad, rtol, atol)


def raises_as_torch(fn_mt, fn_torch, error=RuntimeError, match=None):
    """Both raise ``error`` (PyTorch: its own LinAlgError for ours) with the same message
    (or ``match`` in ours)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(torch.linalg.LinAlgError if error is mt.linalg.LinAlgError
                           else error) as theirs:
            fn_torch()
    with pytest.raises(error) as ours:
        fn_mt()
    assert str(ours.value) == (match or str(theirs.value)), (str(ours.value),
                                                             str(theirs.value))


# --------------------------------------------------------------------------- coverage

def test_every_linalg_function_of_torch_is_here():
    missing = {n for n in dir(torch.linalg) if not n.startswith("_")} - set(dir(mt.linalg))
    assert missing <= {"common_notes"}, missing


@pytest.mark.parametrize("name", ["cholesky_solve", "cholesky_inverse", "triangular_solve",
                                  "lu", "lu_solve", "qr", "orgqr", "lu_unpack", "geqrf",
                                  "ormqr"])
def test_top_level_names_and_methods(name):
    assert hasattr(mt, name)
    assert hasattr(mt.Tensor, name) == hasattr(torch.Tensor, name)


# --------------------------------------------------------------------------- products

def test_cross_diagonal_matmul_match_torch():
    a, b = random(2, 3), random(1, 3)
    grads_match(mt.linalg.cross, torch.linalg.cross, a, b)
    grads_match(lambda x: mt.linalg.diagonal(x, offset=1), lambda x: torch.linalg.diagonal(
        x, offset=1), random(2, 3, 4))
    grads_match(lambda x: mt.linalg.diagonal(x, dim1=0, dim2=2),
                lambda x: torch.linalg.diagonal(x, dim1=0, dim2=2), random(3, 2, 3))
    grads_match(mt.linalg.matmul, torch.linalg.matmul, random(2, 3, 4), random(4))
    raises_as_torch(lambda: mt.linalg.cross(mt.ones(2, 2), mt.ones(2, 2)),
                    lambda: torch.linalg.cross(torch.ones(2, 2), torch.ones(2, 2)))


@pytest.mark.parametrize("shapes, dim", [(((2, 3), (3,)), -1), (((3, 4), (3, 4)), 0),
                                         (((2, 1, 3), (4, 3)), -1)])
def test_vecdot(shapes, dim):
    grads_match(lambda x, y: mt.linalg.vecdot(x, y, dim=dim),
                lambda x, y: torch.linalg.vecdot(x, y, dim=dim), *(random(*s) for s in shapes))


def test_vecdot_errors():
    raises_as_torch(lambda: mt.linalg.vecdot(mt.ones(2, 3), mt.ones(3, dtype=mt.float64)),
                    lambda: torch.linalg.vecdot(torch.ones(2, 3),
                                                torch.ones(3, dtype=torch.float64)))


@pytest.mark.parametrize("shape, N", [((4,), None), ((2, 3), 5), ((3,), 2)])
def test_vander(shape, N):
    values = random(*shape)
    values.flat[0] = 0.0         # the derivative at 0 is finite
    grads_match(lambda x: mt.linalg.vander(x, N=N), lambda x: torch.linalg.vander(x, N=N),
                values)


def test_vander_integers_and_errors():
    close(mt.linalg.vander(mt.tensor([1, 2, 3])), torch.linalg.vander(torch.tensor([1, 2, 3])))
    for N in (0, 1):
        raises_as_torch(lambda: mt.linalg.vander(mt.ones(3), N=N),
                        lambda: torch.linalg.vander(torch.ones(3), N=N))
    raises_as_torch(lambda: mt.linalg.vander(mt.ones(1)), lambda: torch.linalg.vander(
        torch.ones(1)))


@pytest.mark.parametrize("shapes", [[(2, 3), (3, 4)], [(3,), (3, 5), (5, 2), (2, 4)],
                                    [(10, 2), (2, 8), (8, 3), (3,)], [(3,), (3,)]])
def test_multi_dot(shapes):
    grads_match(lambda *t: mt.linalg.multi_dot(t), lambda *t: torch.linalg.multi_dot(t),
                *(random(*s) for s in shapes))


@pytest.mark.parametrize("tensors", [
    lambda lib: [lib.ones(2, 3)], lambda lib: [],
    lambda lib: [lib.ones(2, 3, 3), lib.ones(3, 2)],
    lambda lib: [lib.ones(2, 3), lib.ones(3, 2, 2)],
    lambda lib: [lib.ones(2, 3), lib.ones(3), lib.ones(2, 2)],
    lambda lib: [lib.ones(2, 3), lib.ones(2, 2)],
    lambda lib: [lib.ones(2, 3), lib.ones(3, 2, dtype=lib.float64)]])
def test_multi_dot_errors(tensors):
    raises_as_torch(lambda: mt.linalg.multi_dot(tensors(mt)),
                    lambda: torch.linalg.multi_dot(tensors(torch)))


def test_matrix_power_and_exp_aliases():
    grads_match(lambda a: mt.linalg.matrix_power(a, -3),
                lambda a: torch.linalg.matrix_power(a, -3), well_conditioned(2, 3, 3))
    grads_match(mt.linalg.matrix_exp, torch.linalg.matrix_exp, random(3, 3))


# --------------------------------------------------------------------------- rank, cond

def _low_rank(*batch):
    return random(*batch, 5, 2) @ random(*batch, 2, 4)


@pytest.mark.parametrize("kwargs", [{}, {"atol": 0.5}, {"rtol": 0.3}, {"atol": 1.0, "rtol": 0.1},
                                    {"atol": 0.0}, {"rtol": 0.0}])
def test_matrix_rank(kwargs):
    values = np.concatenate([_low_rank(2), random(1, 5, 4)])
    ours, theirs = both(values)
    close(mt.linalg.matrix_rank(ours, **kwargs), torch.linalg.matrix_rank(theirs, **kwargs))
    square, theirs_square = both(spd(3, 4, 4) - 5 * np.eye(4))
    close(mt.linalg.matrix_rank(square, hermitian=True, **kwargs),
          torch.linalg.matrix_rank(theirs_square, hermitian=True, **kwargs))


def test_matrix_rank_tensor_tolerances():
    ours, theirs = both(_low_rank(3) * np.array([1e-3, 1.0, 10.0])[:, None, None])
    atol = np.array([0.0, 0.5, 1.0])
    close(mt.linalg.matrix_rank(ours, atol=mt.tensor(atol)),
          torch.linalg.matrix_rank(theirs, atol=torch.tensor(atol)))
    close(mt.linalg.matrix_rank(ours, atol=mt.tensor(atol), rtol=mt.tensor(0.2)),
          torch.linalg.matrix_rank(theirs, atol=torch.tensor(atol), rtol=torch.tensor(0.2)))


def test_matrix_rank_tol_overload():
    ours, theirs = both(_low_rank(3))
    for tol in (1e-30, 0.5, 3.0):
        close(mt.linalg.matrix_rank(ours, tol), torch.linalg.matrix_rank(theirs, tol))
        close(mt.linalg.matrix_rank(ours, tol=mt.tensor(tol)),
              torch.linalg.matrix_rank(theirs, tol=torch.tensor(tol)))
    with pytest.raises(TypeError):
        mt.linalg.matrix_rank(ours, 0.1, atol=0.1)


def test_matrix_rank_errors():
    raises_as_torch(lambda: mt.linalg.matrix_rank(mt.ones(3)),
                    lambda: torch.linalg.matrix_rank(torch.ones(3)))
    raises_as_torch(lambda: mt.linalg.matrix_rank(mt.ones(3, 3, dtype=mt.int64)),
                    lambda: torch.linalg.matrix_rank(torch.ones(3, 3, dtype=torch.long)))
    raises_as_torch(lambda: mt.linalg.matrix_rank(mt.ones(3, 2), hermitian=True),
                    lambda: torch.linalg.matrix_rank(torch.ones(3, 2), hermitian=True))


@pytest.mark.parametrize("p", [None, 2, -2, "nuc"])
def test_cond(p):
    grads_match(lambda a: mt.linalg.cond(a, p), lambda a: torch.linalg.cond(a, p),
                well_conditioned(2, 3, 3), rtol=1e-5)


@pytest.mark.parametrize("p", ["fro", math.inf, -math.inf, 1, -1])
def test_cond_through_the_inverse(p):
    """PyTorch's backward of these orders fails (it writes into the inverse it saved):
    values against its cond, gradients against its definition."""
    values = well_conditioned(2, 3, 3)
    close(mt.linalg.cond(mt.tensor(values), p), torch.linalg.cond(torch.tensor(values), p))
    grads_match(lambda a: mt.linalg.cond(a, p),
                lambda a: torch.linalg.matrix_norm(a, p) * torch.linalg.matrix_norm(
                    torch.linalg.inv(a), p), values, rtol=1e-5)


@pytest.mark.parametrize("p", [None, 2, -2])
def test_cond_rectangular(p):
    grads_match(lambda a: mt.linalg.cond(a, p), lambda a: torch.linalg.cond(a, p),
                random(2, 4, 3), rtol=1e-5)


# PyTorch's nuclear norm of its infinite-filled inverse comes out as NaN or a large finite
# number; here it is inf, as every other order gives
@pytest.mark.parametrize("p", ["fro", math.inf, -math.inf, 1, -1])
def test_cond_of_a_singular_matrix_is_infinite(p):
    ours, theirs = both(np.stack([np.eye(2), [[1.0, 2.0], [2.0, 4.0]], np.zeros((2, 2))]))
    close(mt.linalg.cond(ours, p), torch.linalg.cond(theirs, p))
    assert np.isinf(arr(mt.linalg.cond(ours, p))[1:]).all()
    assert np.isinf(arr(mt.linalg.cond(ours, "nuc"))[1:]).all()


def test_cond_errors():
    raises_as_torch(lambda: mt.linalg.cond(mt.ones(3, 3), 3),
                    lambda: torch.linalg.cond(torch.ones(3, 3), 3))
    raises_as_torch(lambda: mt.linalg.cond(mt.ones(3, 2), 1),
                    lambda: torch.linalg.cond(torch.ones(3, 2), 1))
    raises_as_torch(lambda: mt.linalg.cond(mt.ones(3)), lambda: torch.linalg.cond(torch.ones(3)))


# --------------------------------------------------------------------------- triangular

def triangular(*shape, upper, unit=False):
    t = random(*shape) * 0.3 + (1.0 if unit else 2.0) * np.eye(shape[-1])
    return np.triu(t) if upper else np.tril(t)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unitriangular", [True, False])
def test_solve_triangular(upper, left, unitriangular):
    # the other triangle holds noise, which is not read and gets no gradient
    A = triangular(2, 1, 4, 4, upper=upper, unit=unitriangular) + random(2, 1, 4, 4) * (
        np.tril(np.ones((4, 4)), -1) if upper else np.triu(np.ones((4, 4)), 1))
    B = random(3, 4, 2) if left else random(3, 2, 4)
    grads_match(lambda a, b: mt.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                        unitriangular=unitriangular),
                lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                           unitriangular=unitriangular), A, B)


def test_solve_triangular_zero_diagonal_gives_infinities_as_torch():
    ours, theirs = both([[1.0, 2.0], [0.0, 0.0]])
    b, tb = both(np.ones((2, 1)))
    result = mt.linalg.solve_triangular(ours, b, upper=True)
    expected = torch.linalg.solve_triangular(theirs, tb, upper=True)
    np.testing.assert_array_equal(np.isfinite(arr(result)), np.isfinite(expected.numpy()))
    assert not np.isfinite(arr(result)).any()


def test_solve_triangular_casts_B_to_the_dtype_of_A():
    for a_dtype, b_dtype in (("float64", "float32"), ("float32", "float64")):
        A, B = np.triu(well_conditioned(3, 3)), random(3, 2)
        result = mt.linalg.solve_triangular(mt.tensor(A, dtype=getattr(mt, a_dtype)),
                                            mt.tensor(B, dtype=getattr(mt, b_dtype)),
                                            upper=True)
        expected = torch.linalg.solve_triangular(
            torch.tensor(A, dtype=getattr(torch, a_dtype)),
            torch.tensor(B, dtype=getattr(torch, b_dtype)), upper=True)
        close(result, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("A, B, kwargs", [
    ((3, 3), (3,), {}), ((3, 3), (4, 2), {}), ((3, 3), (2, 4), {"left": False}),
    ((3, 2), (3, 2), {}), ((2, 3, 3), (3, 3, 2), {})])
def test_solve_triangular_errors(A, B, kwargs):
    raises_as_torch(lambda: mt.linalg.solve_triangular(mt.ones(*A), mt.ones(*B), upper=True,
                                                       **kwargs),
                    lambda: torch.linalg.solve_triangular(torch.ones(*A), torch.ones(*B),
                                                          upper=True, **kwargs))
    raises_as_torch(
        lambda: mt.linalg.solve_triangular(mt.ones(3, 3, dtype=mt.int64),
                                           mt.ones(3, 2, dtype=mt.int64), upper=True),
        lambda: torch.linalg.solve_triangular(torch.ones(3, 3, dtype=torch.long),
                                              torch.ones(3, 2, dtype=torch.long), upper=True),
        NotImplementedError)


@pytest.mark.parametrize("upper, transpose, unitriangular", [
    (True, False, False), (False, True, False), (True, True, True), (False, False, True)])
def test_triangular_solve(upper, transpose, unitriangular):
    A, B = triangular(4, 4, upper=upper, unit=unitriangular), random(2, 4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads_match(lambda b, a: mt.triangular_solve(b, a, upper, transpose, unitriangular)[0],
                    lambda b, a: torch.triangular_solve(b, a, upper, transpose,
                                                        unitriangular)[0], B, A)
        ours = mt.triangular_solve(mt.tensor(B), mt.tensor(A), upper)
        theirs = torch.triangular_solve(torch.tensor(B), torch.tensor(A), upper)
    assert ours._fields == ("solution", "cloned_coefficient")
    close(ours.cloned_coefficient, theirs.cloned_coefficient)
    close(ours.solution, theirs.solution)


def test_triangular_solve_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raises_as_torch(lambda: mt.triangular_solve(mt.ones(3), mt.eye(3)),
                        lambda: torch.triangular_solve(torch.ones(3), torch.eye(3)))
        raises_as_torch(lambda: mt.ones(3, 2, dtype=mt.float64).triangular_solve(mt.eye(3)),
                        lambda: torch.ones(3, 2, dtype=torch.float64).triangular_solve(
                            torch.eye(3)))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper):
    factor = np.linalg.cholesky(spd(2, 3, 3))
    if upper:
        factor = np.swapaxes(factor, -1, -2)
    ours, theirs = both(factor)
    b, tb = both(random(2, 3, 2))
    close(mt.cholesky_solve(b, ours, upper), torch.cholesky_solve(tb, theirs, upper))
    close(b.cholesky_solve(ours, upper), tb.cholesky_solve(theirs, upper))
    close(mt.cholesky_inverse(ours, upper), torch.cholesky_inverse(theirs, upper))
    close(ours.cholesky_inverse(upper), theirs.cholesky_inverse(upper))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_gradient_is_torchs(upper):
    """The solve reads one triangle of the factor; its gradient is PyTorch's, which fills
    the other triangle too (the derivative with the factor read whole)."""
    factor = np.linalg.cholesky(spd(3, 3))
    if upper:
        factor = factor.T
    ours, theirs = both(factor, grad=True)
    b, tb = both(random(3, 2), grad=True)
    w = random(3, 2)
    (mt.cholesky_solve(b, ours, upper) * mt.tensor(w)).sum().backward()
    (torch.cholesky_solve(tb, theirs, upper) * torch.tensor(w)).sum().backward()
    unread = np.tril(np.ones((3, 3)), -1) if upper else np.triu(np.ones((3, 3)), 1)
    assert np.abs(theirs.grad.numpy() * unread).max() > 1e-3
    np.testing.assert_allclose(arr(ours.grad), theirs.grad.numpy(), rtol=1e-7, atol=1e-10)
    close(b.grad, tb.grad)


def test_cholesky_solve_and_inverse_errors():
    raises_as_torch(lambda: mt.cholesky_solve(mt.ones(3), mt.eye(3)),
                    lambda: torch.cholesky_solve(torch.ones(3), torch.eye(3)))
    raises_as_torch(lambda: mt.cholesky_solve(mt.ones(4, 2), mt.eye(3)),
                    lambda: torch.cholesky_solve(torch.ones(4, 2), torch.eye(3)))
    raises_as_torch(lambda: mt.cholesky_solve(mt.ones(3, 2, dtype=mt.float64), mt.eye(3)),
                    lambda: torch.cholesky_solve(torch.ones(3, 2, dtype=torch.float64),
                                                 torch.eye(3)))
    raises_as_torch(lambda: mt.cholesky_solve(mt.ones(3, 2), mt.ones(3, 2)),
                    lambda: torch.cholesky_solve(torch.ones(3, 2), torch.ones(3, 2)))
    for shape in ((3, 2), (3,)):
        raises_as_torch(lambda: mt.cholesky_inverse(mt.ones(*shape)),
                        lambda: torch.cholesky_inverse(torch.ones(*shape)))
    raises_as_torch(lambda: mt.cholesky_inverse(mt.zeros(3, 3)),
                    lambda: torch.cholesky_inverse(torch.zeros(3, 3)), mt.linalg.LinAlgError)


# --------------------------------------------------------------------------- LU

@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (5, 3), (2, 3, 5), (0, 3, 3), (1, 1)])
def test_lu_factor_matches_lapack(shape):
    ours, theirs = both(random(*shape))
    LU, pivots = mt.linalg.lu_factor(ours)
    expected = torch.linalg.lu_factor(theirs)
    close(LU, expected.LU)
    np.testing.assert_array_equal(arr(pivots), expected.pivots.numpy())
    assert pivots.dtype is mt.int32
    result = mt.linalg.lu_factor_ex(ours)
    assert result._fields == ("LU", "pivots", "info")
    close(result, torch.linalg.lu_factor_ex(theirs))


def test_lu_factor_pivots_on_the_first_largest_magnitude():
    values = np.array([[1.0, 2.0, 0.0], [-3.0, 1.0, 1.0], [3.0, 0.5, 2.0]])
    ours, theirs = both(values)
    np.testing.assert_array_equal(arr(mt.linalg.lu_factor(ours).pivots),
                                  torch.linalg.lu_factor(theirs).pivots.numpy())


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 3), (3, 5)])
def test_lu_factor_gradient(shape):
    grads_match(lambda a: mt.linalg.lu_factor(a).LU, lambda a: torch.linalg.lu_factor(a).LU,
                random(*shape))


SINGULAR = np.stack([np.eye(3), [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]],
                     np.zeros((3, 3))])


def test_info_of_singular_matrices():
    ours, theirs = both(SINGULAR)
    for fn in ("lu_factor_ex", "inv_ex"):
        np.testing.assert_array_equal(arr(getattr(mt.linalg, fn)(ours).info),
                                      getattr(torch.linalg, fn)(theirs).info.numpy())
    b, tb = both(random(3, 3, 2))
    mine, expected = mt.linalg.solve_ex(ours, b), torch.linalg.solve_ex(theirs, tb)
    assert mine._fields == ("result", "info")
    np.testing.assert_array_equal(arr(mine.info), expected.info.numpy())
    # the regular matrix of the batch is solved; the singular ones give infinities
    close(mine.result[0], expected.result[0])
    assert not np.isfinite(arr(mine.result[1:])).all()


def test_errors_of_singular_matrices_name_the_pivot_and_batch_element():
    ours, theirs = both(SINGULAR)
    b, tb = both(np.ones((3, 3)))
    raises_as_torch(lambda: mt.linalg.lu_factor(ours), lambda: torch.linalg.lu_factor(theirs))
    raises_as_torch(lambda: mt.linalg.lu_factor(ours[2]),
                    lambda: torch.linalg.lu_factor(theirs[2]))
    raises_as_torch(lambda: mt.linalg.lu_factor_ex(ours, check_errors=True),
                    lambda: torch.linalg.lu_factor_ex(theirs, check_errors=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(mt.lu(ours, get_infos=True), torch.lu(theirs, get_infos=True))
        close(mt.lu(ours), torch.lu(theirs))       # torch.lu never raises
    raises_as_torch(lambda: mt.linalg.inv_ex(ours, check_errors=True),
                    lambda: torch.linalg.inv_ex(theirs, check_errors=True),
                    mt.linalg.LinAlgError)
    raises_as_torch(lambda: mt.linalg.solve_ex(ours[1], b, check_errors=True),
                    lambda: torch.linalg.solve_ex(theirs[1], tb, check_errors=True),
                    mt.linalg.LinAlgError)


def test_lu_factor_errors():
    raises_as_torch(lambda: mt.linalg.lu_factor(mt.ones(2)),
                    lambda: torch.linalg.lu_factor(torch.ones(2)))
    raises_as_torch(lambda: mt.linalg.lu_factor(mt.eye(2), pivot=False),
                    lambda: torch.linalg.lu_factor(torch.eye(2), pivot=False))
    raises_as_torch(lambda: mt.linalg.lu_factor(mt.ones(2, 2, dtype=mt.int64)),
                    lambda: torch.linalg.lu_factor(torch.ones(2, 2, dtype=torch.long)),
                    NotImplementedError)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 3), (3, 5)])
def test_lu(shape):
    values = random(*shape)
    ours, theirs = both(values)
    result, expected = mt.linalg.lu(ours), torch.linalg.lu(theirs)
    assert result._fields == ("P", "L", "U")
    close(result, expected)
    for i in (1, 2):             # P is piecewise constant
        grads_match(lambda a: mt.linalg.lu(a)[i], lambda a: torch.linalg.lu(a)[i], values)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 3), (3, 5)])
def test_lu_unpack(shape):
    values = random(*shape)
    LU, pivots = mt.linalg.lu_factor(mt.tensor(values))
    expected_LU, expected_pivots = torch.linalg.lu_factor(torch.tensor(values))
    result = mt.lu_unpack(LU, pivots)
    assert result._fields == ("P", "L", "U")
    close(result, torch.lu_unpack(expected_LU, expected_pivots))
    P, L, U = result
    np.testing.assert_allclose(arr(P @ L @ U), values, atol=1e-12)
    only_p = mt.lu_unpack(LU, pivots, unpack_data=False)
    close(only_p, torch.lu_unpack(expected_LU, expected_pivots, unpack_data=False))
    no_p = mt.lu_unpack(LU, pivots, unpack_pivots=False)
    close(no_p, torch.lu_unpack(expected_LU, expected_pivots, unpack_pivots=False))


def test_lu_unpack_errors():
    raises_as_torch(lambda: mt.lu_unpack(mt.eye(3), mt.ones(3)),
                    lambda: torch.lu_unpack(torch.eye(3), torch.ones(3)))
    raises_as_torch(lambda: mt.lu_unpack(mt.eye(3), mt.zeros(3, dtype=mt.int32)),
                    lambda: torch.lu_unpack(torch.eye(3), torch.zeros(3, dtype=torch.int32)))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
def test_lu_solve(left, adjoint):
    A = well_conditioned(2, 4, 4)
    B = random(3, 1, 4, 2) if left else random(2, 4)

    def ours(a, b):
        LU, pivots = mt.linalg.lu_factor(a)
        return mt.linalg.lu_solve(LU, pivots, b, left=left, adjoint=adjoint)

    def theirs(a, b):
        LU, pivots = torch.linalg.lu_factor(a)
        return torch.linalg.lu_solve(LU, pivots, b, left=left, adjoint=adjoint)
    grads_match(ours, theirs, A, B)


def test_lu_solve_top_level_and_methods():
    A, B = well_conditioned(2, 3, 3), random(2, 3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # PyTorch's deprecation warnings
        LU, pivots = mt.lu(mt.tensor(A))
        expected_LU, expected_pivots = torch.lu(torch.tensor(A))
        close(mt.lu_solve(mt.tensor(B), LU, pivots),
              torch.lu_solve(torch.tensor(B), expected_LU, expected_pivots))
        close(mt.tensor(B).lu_solve(LU, pivots),
              torch.tensor(B).lu_solve(expected_LU, expected_pivots))
        close(mt.tensor(A).lu(get_infos=True), torch.tensor(A).lu(get_infos=True))


@pytest.mark.parametrize("B, pivots, kwargs", [
    ((3,), None, {}), ((4, 2), None, {}), ((2, 4), None, {"left": False}),
    ((3, 2), "float", {}), ((3, 2), "short", {})])
def test_lu_solve_errors(B, pivots, kwargs):
    def args(lib):
        if pivots == "float":
            p = lib.ones(3)
        elif pivots == "short":
            p = lib.ones(2, dtype=lib.int32)
        else:
            p = lib.arange(1, 4, dtype=lib.int32)
        return lib.eye(3), p, lib.ones(*B)
    raises_as_torch(lambda: mt.linalg.lu_solve(*args(mt), **kwargs),
                    lambda: torch.linalg.lu_solve(*args(torch), **kwargs))
    raises_as_torch(lambda: mt.linalg.lu_solve(mt.eye(3), mt.arange(1, 4, dtype=mt.int32),
                                               mt.ones(3, 2, dtype=mt.float64)),
                    lambda: torch.linalg.lu_solve(torch.eye(3),
                                                  torch.arange(1, 4, dtype=torch.int32),
                                                  torch.ones(3, 2, dtype=torch.float64)))


# --------------------------------------------------------------------------- _ex variants

@pytest.mark.parametrize("left, B", [(True, (2, 3, 2)), (True, (3,)), (True, (2, 3)),
                                     (False, (2, 2, 3)), (False, (4, 3))])
def test_solve_ex(left, B):
    grads_match(lambda a, b: mt.linalg.solve_ex(a, b, left=left).result,
                lambda a, b: torch.linalg.solve_ex(a, b, left=left).result,
                well_conditioned(2, 3, 3), random(*B))


def test_solve_ex_errors():
    # a batch of vectors is a batch of columns with left=False too, as in PyTorch
    raises_as_torch(lambda: mt.linalg.solve_ex(mt.ones(2, 3, 3), mt.ones(2, 3), left=False),
                    lambda: torch.linalg.solve_ex(torch.ones(2, 3, 3), torch.ones(2, 3),
                                                  left=False))
    raises_as_torch(lambda: mt.linalg.solve_ex(mt.ones(3, 3), mt.ones(2, 3)),
                    lambda: torch.linalg.solve_ex(torch.ones(3, 3), torch.ones(2, 3)))


def test_inv_ex():
    grads_match(lambda a: mt.linalg.inv_ex(a).inverse,
                lambda a: torch.linalg.inv_ex(a).inverse, well_conditioned(2, 3, 3))
    result = mt.linalg.inv_ex(mt.tensor(well_conditioned(3, 3)))
    assert result._fields == ("inverse", "info") and int(result.info) == 0


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex(upper):
    # along symmetric directions, where PyTorch's symmetric gradient is the derivative
    grads_match(lambda a: mt.linalg.cholesky_ex((a + a.mT) / 2, upper=upper).L,
                lambda a: torch.linalg.cholesky_ex((a + a.mT) / 2, upper=upper).L,
                spd(2, 3, 3))


def test_cholesky_ex_info_and_partial_factor():
    values = np.stack([spd(3, 3), [[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                       -np.eye(3), spd(3, 3)])
    ours, theirs = both(values)
    result, expected = mt.linalg.cholesky_ex(ours), torch.linalg.cholesky_ex(theirs)
    assert result._fields == ("L", "info")
    np.testing.assert_array_equal(arr(result.info), expected.info.numpy())
    close(result.L, expected.L)          # LAPACK's partial factors of the failing ones too
    raises_as_torch(lambda: mt.linalg.cholesky_ex(ours, check_errors=True),
                    lambda: torch.linalg.cholesky_ex(theirs, check_errors=True),
                    mt.linalg.LinAlgError)
    raises_as_torch(lambda: mt.linalg.cholesky_ex(mt.ones(3, 2)),
                    lambda: torch.linalg.cholesky_ex(torch.ones(3, 2)))


# --------------------------------------------------------------------------- Householder

@pytest.mark.parametrize("shape, k", [((4, 3), 3), ((2, 3, 3), 2), ((5, 2), 1), ((3, 3), 0)])
def test_householder_product(shape, k):
    A, tau = random(*shape), random(*shape[:-2], k)
    if k:            # else the result is the identity: no gradient to compare
        grads_match(mt.linalg.householder_product, torch.linalg.householder_product, A, tau)
    close(mt.orgqr(*both(A)[:1], both(tau)[0]), torch.orgqr(torch.tensor(A), torch.tensor(tau)))


def test_householder_product_of_geqrf_is_q():
    A = random(5, 3)
    reflectors, tau = torch.geqrf(torch.tensor(A))
    Q = mt.linalg.householder_product(mt.tensor(reflectors.numpy()), mt.tensor(tau.numpy()))
    close(Q, torch.linalg.qr(torch.tensor(A)).Q)


@pytest.mark.parametrize("A, tau", [((2, 3), (2,)), ((3, 2), (3,)), ((3,), (1,)),
                                    ((2, 3, 2), (3, 2)), ((3, 2), ())])
def test_householder_product_errors(A, tau):
    raises_as_torch(lambda: mt.linalg.householder_product(mt.ones(A), mt.ones(tau)),
                    lambda: torch.linalg.householder_product(torch.ones(A), torch.ones(tau)),
                    IndexError if tau == () else RuntimeError)
    raises_as_torch(
        lambda: mt.linalg.householder_product(mt.ones(3, 2), mt.ones(2, dtype=mt.float64)),
        lambda: torch.linalg.householder_product(torch.ones(3, 2),
                                                 torch.ones(2, dtype=torch.float64)))


def test_qr_top_level():
    values = random(2, 4, 3)
    for some in (True, False):
        result = mt.qr(mt.tensor(values), some)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # PyTorch's deprecation warning
            expected = torch.qr(torch.tensor(values), some)
        assert result._fields == ("Q", "R")
        assert [tuple(r.shape) for r in result] == [tuple(e.shape) for e in expected]
        np.testing.assert_allclose(arr(result.Q @ result.R), values, atol=1e-12)
        np.testing.assert_allclose(np.abs(arr(result.R)), np.abs(expected.R.numpy()),
                                   atol=1e-12)


# --------------------------------------------------------------------------- tensors

def test_tensorinv():
    A = well_conditioned(6, 6)
    grads_match(lambda a: mt.linalg.tensorinv(a, ind=1),
                lambda a: torch.linalg.tensorinv(a, ind=1), A.reshape(6, 2, 3))
    grads_match(mt.linalg.tensorinv, torch.linalg.tensorinv, A.reshape(2, 3, 3, 2))


def test_tensorinv_errors():
    for shape, ind in (((4, 2, 3), 1), ((4, 2, 2), 0)):
        raises_as_torch(lambda: mt.linalg.tensorinv(mt.ones(*shape), ind=ind),
                        lambda: torch.linalg.tensorinv(torch.ones(*shape), ind=ind))


@pytest.mark.parametrize("A, B, dims", [((6, 2, 3), (6,), None), ((2, 3, 2, 3), (2, 3), None),
                                        ((6, 2, 3), (2, 3), (0,)),
                                        ((2, 6, 3), (2, 3), (1,))])
def test_tensorsolve(A, B, dims):
    values = well_conditioned(6, 6).reshape(A)
    grads_match(lambda a, b: mt.linalg.tensorsolve(a, b, dims),
                lambda a, b: torch.linalg.tensorsolve(a, b, dims), values, random(*B))


@pytest.mark.parametrize("A, B, dims", [((2, 3, 6), (2, 4), None), ((6, 4), (6,), None),
                                        ((2, 3, 6), (6, 3), (0,))])
def test_tensorsolve_errors(A, B, dims):
    raises_as_torch(lambda: mt.linalg.tensorsolve(mt.ones(*A), mt.ones(*B), dims),
                    lambda: torch.linalg.tensorsolve(torch.ones(*A), torch.ones(*B), dims))


# --------------------------------------------------------------------------- vmap

FALLBACK = "Batching rule not implemented"


@pytest.mark.parametrize("name, make, in_dims", [
    ("solve_triangular", lambda: (np.triu(well_conditioned(3, 3, 3)), random(3, 2)), (0, None)),
    ("solve_triangular", lambda: (np.triu(well_conditioned(3, 3)), random(3, 2, 3, 2)),
     (None, 0)),
    ("lu_factor", lambda: (random(3, 4, 4),), (0,)),
    ("lu", lambda: (random(4, 3, 3),), (1,)),
    ("cholesky_ex", lambda: (spd(3, 3, 3),), (0,)),
    ("solve_ex", lambda: (well_conditioned(3, 3, 3), random(3, 3)), (0, 0)),
    ("inv_ex", lambda: (well_conditioned(3, 3, 3),), (0,)),
    ("householder_product", lambda: (random(3, 4, 3), random(3, 2)), (0, 0)),
    ("cond", lambda: (well_conditioned(3, 3, 3),), (0,)),
    ("matrix_rank", lambda: (_low_rank(3),), (0,)),
    ("multi_dot", lambda: (random(3, 2, 3), random(3, 4)), (0, None))])
def test_vmap_matches_torch(name, make, in_dims):
    values = make()
    ours_fn, theirs_fn = getattr(mt.linalg, name), getattr(torch.linalg, name)
    if name == "solve_triangular":
        ours_fn = lambda a, b, f=ours_fn: f(a, b, upper=True)   # noqa: E731
        theirs_fn = lambda a, b, f=theirs_fn: f(a, b, upper=True)   # noqa: E731
    if name == "multi_dot":
        ours_fn = lambda *t, f=ours_fn: f(t)   # noqa: E731
        theirs_fn = lambda *t, f=theirs_fn: f(t)   # noqa: E731
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        ours = mt.vmap(ours_fn, in_dims=in_dims)(*(mt.tensor(v) for v in values))
    theirs = torch.func.vmap(theirs_fn, in_dims=in_dims)(*(torch.tensor(v) for v in values))
    close(ours, theirs)


def test_lu_factor_error_under_vmap_reads_every_sample():
    with pytest.raises(RuntimeError, match="is zero and using it on lu_solve"):
        mt.vmap(mt.linalg.lu_factor)(mt.tensor(SINGULAR))


# --------------------------------------------------------------------------- LDLᵀ

def symmetric(*shape):
    values = random(*shape)
    return values + np.swapaxes(values, -1, -2)


@pytest.mark.parametrize("shape", [(3, 3), (40, 6, 6), (2, 1, 1), (0, 3, 3)])
def test_ldl_factor_matches_lapack(shape):
    """Bunch-Kaufman's pivots, 2x2 blocks (negative pivots) among them, and the compact
    factor as LAPACK's sytrf; the solve against PyTorch's."""
    values = symmetric(*shape)
    ours, theirs = both(values)
    result, expected = mt.linalg.ldl_factor_ex(ours), torch.linalg.ldl_factor_ex(theirs)
    assert result._fields == ("LD", "pivots", "info")
    close(result.LD, expected.LD, atol=1e-12)
    np.testing.assert_array_equal(arr(result.pivots), expected.pivots.numpy())
    np.testing.assert_array_equal(arr(result.info), expected.info.numpy())
    if shape[0] == 40:
        assert (arr(result.pivots) < 0).any()            # some 2x2 blocks were taken
    for hermitian in (False, True):
        LD, pivots = mt.linalg.ldl_factor(ours, hermitian=hermitian)
        close(LD, result.LD)
        B = random(*shape[:-1], 2)
        close(mt.linalg.ldl_solve(LD, pivots, mt.tensor(B), hermitian=hermitian),
              torch.linalg.ldl_solve(expected.LD, expected.pivots, torch.tensor(B),
                                     hermitian=hermitian), rtol=1e-6, atol=1e-9)


def test_ldl_reads_the_lower_triangle_and_reports_zero_blocks():
    values = np.stack([np.zeros((3, 3)), [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0],
                                          [0.0, 0.0, 2.0]], np.tril(symmetric(3, 3))])
    ours, theirs = both(values)
    result, expected = mt.linalg.ldl_factor_ex(ours), torch.linalg.ldl_factor_ex(theirs)
    close(result, expected)
    with pytest.raises(mt.linalg.LinAlgError, match=r"\(Batch element 0\).*D\[1,1\] is zero"):
        mt.linalg.ldl_factor(ours)
    with pytest.raises(mt.linalg.LinAlgError, match="torch.linalg.ldl_factor_ex"):
        mt.linalg.ldl_factor_ex(ours, check_errors=True)


def test_ldl_solve_broadcasts():
    values = symmetric(4, 4)
    LD, pivots = mt.linalg.ldl_factor(mt.tensor(values))
    B = random(3, 4, 2)
    np.testing.assert_allclose(arr(mt.linalg.ldl_solve(LD, pivots, mt.tensor(B))),
                               np.linalg.solve(values, B), atol=1e-10)


@pytest.mark.parametrize("LD, pivots, B", [
    ((3, 3), (2,), (3, 2)), ((3, 3), "float", (3, 2)), ((3,), (3,), (3, 2)),
    ((3, 2), (3,), (3, 2)), ((3, 3), (3,), (3,)), ((3, 3), (3,), (4, 2)),
    ((2, 3, 3), (2, 3), (3, 3, 2))])
def test_ldl_errors(LD, pivots, B):
    def args(lib):
        p = lib.ones(3) if pivots == "float" else lib.ones(pivots, dtype=lib.int32)
        return lib.eye(3).expand(LD) if len(LD) == 3 else lib.ones(LD), p, lib.ones(B)
    raises_as_torch(lambda: mt.linalg.ldl_solve(*args(mt)),
                    lambda: torch.linalg.ldl_solve(*args(torch)),
                    IndexError if B == (3,) else RuntimeError)
    raises_as_torch(lambda: mt.linalg.ldl_solve(mt.eye(3), mt.ones(3, dtype=mt.int32),
                                                mt.ones(3, 2, dtype=mt.float64)),
                    lambda: torch.linalg.ldl_solve(torch.eye(3), torch.ones(3, dtype=torch.int32),
                                                   torch.ones(3, 2, dtype=torch.float64)))
    for shape in ((3,), (3, 2)):
        raises_as_torch(lambda: mt.linalg.ldl_factor(mt.ones(shape)),
                        lambda: torch.linalg.ldl_factor(torch.ones(shape)))


def test_ldl_vmap_matches_torch():
    values, B = symmetric(3, 5, 5), random(3, 5, 2)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        ours = mt.vmap(lambda a, b: mt.linalg.ldl_solve(*mt.linalg.ldl_factor(a), b))(
            mt.tensor(values), mt.tensor(B))
    np.testing.assert_allclose(arr(ours), np.linalg.solve(values, B), atol=1e-10)


# --------------------------------------------------------------------------- geqrf, ormqr

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (3, 3)])
def test_geqrf(shape):
    values = random(*shape)
    result, expected = mt.geqrf(mt.tensor(values)), torch.geqrf(torch.tensor(values))
    assert result._fields == ("a", "tau")
    close(result.a, expected.a, atol=1e-12)
    close(result.tau, expected.tau, atol=1e-12)
    close(mt.tensor(values).geqrf().tau, expected.tau, atol=1e-12)
    raises_as_torch(lambda: mt.geqrf(mt.ones(3)), lambda: torch.geqrf(torch.ones(3)))
    raises_as_torch(lambda: mt.geqrf(mt.ones(3, 3, dtype=mt.int64)),
                    lambda: torch.geqrf(torch.ones(3, 3, dtype=torch.long)),
                    NotImplementedError)


@pytest.mark.parametrize("shape, other, left", [((4, 3), (4, 2), True), ((2, 4, 3), (2, 2, 4),
                                                                         False),
                                                ((3, 5), (3, 3), True)])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr(shape, other, left, transpose):
    reflectors, tau = torch.geqrf(torch.tensor(random(*shape)))
    grads_match(lambda a, t, c: mt.ormqr(a, t, c, left, transpose),
                lambda a, t, c: torch.ormqr(a, t, c, left, transpose),
                reflectors.numpy(), tau.numpy(), random(*other))


@pytest.mark.parametrize("A, tau, C, left", [
    ((4, 3), (3,), (3, 2), True), ((4, 3), (5,), (4, 2), True), ((4, 3), (3,), (2, 3), False),
    ((4,), (3,), (4, 2), True), ((4, 3), (3,), (4,), True), ((4, 3), (2, 3), (4, 2), True),
    ((2, 4, 3), (2, 3), (4, 2), True)])
def test_ormqr_errors(A, tau, C, left):
    raises_as_torch(lambda: mt.ormqr(mt.ones(A), mt.ones(tau), mt.ones(C), left),
                    lambda: torch.ormqr(torch.ones(A), torch.ones(tau), torch.ones(C), left))
    raises_as_torch(lambda: mt.ormqr(mt.ones(4, 3), mt.ones(3), mt.ones(4, 2, dtype=mt.float64)),
                    lambda: torch.ormqr(torch.ones(4, 3), torch.ones(3),
                                        torch.ones(4, 2, dtype=torch.float64)))


def test_lstsq_dimension_mismatch_is_torchs_error():
    raises_as_torch(lambda: mt.linalg.lstsq(mt.ones(1, 5, 3), mt.ones(5)),
                    lambda: torch.linalg.lstsq(torch.ones(1, 5, 3), torch.ones(5)))


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3), (3, 0)])
@pytest.mark.parametrize("p", [None, 2, -2, "fro", 1])
def test_cond_of_empty_matrices_is_zero_as_torch(shape, p):
    values = np.zeros(shape)
    if p == 1 and shape[-1] != shape[-2]:
        pytest.skip("PyTorch answers 0 in float64 and refuses in float32: no one rule")
    if p in (None, 2, -2) or shape[-1] == shape[-2]:
        close(mt.linalg.cond(mt.tensor(values), p), torch.linalg.cond(torch.tensor(values), p))
    else:
        raises_as_torch(lambda: mt.linalg.cond(mt.tensor(values), p),
                        lambda: torch.linalg.cond(torch.tensor(values), p))


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0)])
def test_ldl_factor_of_empty_matrices(shape):
    close(mt.linalg.ldl_factor_ex(mt.zeros(*shape, dtype=mt.float64)),
          torch.linalg.ldl_factor_ex(torch.zeros(*shape, dtype=torch.float64)))
