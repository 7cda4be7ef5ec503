"""Matrix decompositions and solvers of ``torch.linalg``: ``linalg_inv``, ``linalg_det``,
``linalg_slogdet``, ``linalg_solve``, ``linalg_cholesky``, ``linalg_qr``, ``linalg_svd``,
``linalg_eigh``.

Kernels are NumPy's LAPACK wrappers, batched over the leading dims in one call.
Derivatives are PyTorch's (FunctionsManual.cpp), written in microtensor ops so that they
are themselves differentiable.  Multi-output ops return plain tuples; ``microtensor.linalg``
gives them PyTorch's named fields.  ``cholesky`` and ``eigh`` read one triangle of their input
only; their derivatives are those of that function (PyTorch's symmetric gradient folded
onto the triangle read), so that they agree with finite differences on any input and with
PyTorch's along every symmetric direction.
"""
from collections import namedtuple

import numpy as np

from microtensor._C.tensor import float32, float64
from microtensor.ops.factory import eye
from microtensor.ops.loops import _type_name, array_module, from_numpy_result
from microtensor.ops.registry import REGISTRY, Sample, op
from microtensor.vmap.helpers import batch_size, call, front_or_expanded, wrap


class LinAlgError(RuntimeError):
    """A linear-algebra routine failed on its input (as ``torch.linalg.LinAlgError``)."""


LinAlgError.__module__ = "microtensor.linalg"


def _named(name, fields):
    t = namedtuple(name, fields)
    t.__module__ = "microtensor.return_types"
    return t


SlogdetResult = _named("linalg_slogdet", ("sign", "logabsdet"))
QRResult = _named("linalg_qr", ("Q", "R"))
SVDResult = _named("linalg_svd", ("U", "S", "Vh"))
EighResult = _named("linalg_eigh", ("eigenvalues", "eigenvectors"))


# --------------------------------------------------------------------------- checks

def check_matrix(A, fn, square=True):
    """PyTorch's checks of a (batch of) matrix argument: floating dtype, 2+ dims, square."""
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    if A._dtype not in (float32, float64):
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. "
                           f"Got {_type_name(A._dtype)}")
    if square and A._sizes[-1] != A._sizes[-2]:
        raise RuntimeError(f"{fn}: A must be batches of square matrices, but they are "
                           f"{A._sizes[-2]} by {A._sizes[-1]} matrices")


def _array(t):
    # NumPy's linalg functions reach CuPy's through __array_function__: no conversion here
    return t._array()


def _result(arr, like):
    return from_numpy_result(arr, like._dtype)


def _lapack(fn, call, *arrays):
    """``call(*arrays)`` with NumPy's LinAlgError as ours (PyTorch's message)."""
    try:
        return call(*arrays)
    except np.linalg.LinAlgError as e:
        if "definite" in str(e):
            raise LinAlgError(f"{fn}: The factorization could not be completed because the "
                              "input is not positive-definite.") from None
        # NumPy does not say which pivot vanished (PyTorch names it): the message leaves
        # the number out rather than guess it
        raise LinAlgError(f"{fn}: A diagonal element is zero, the inversion could not be "
                          "completed because the input matrix is singular.") from None


def _eye_like(t, n):
    return eye(n, dtype=t.dtype, device=t.device)


def _diag_embed(v):
    return v.unsqueeze(-1) * _eye_like(v, v.shape[-1])


def _fold_lower(G):
    """The gradient of a function of the lower triangle read as a symmetric matrix, from
    the symmetric gradient ``G``: off-diagonal entries count twice."""
    return (G + G.mT).tril(-1) + _diag_embed(G.diagonal(0, -2, -1))


def _fold(G, upper):
    return _fold_lower(G.mT).mT if upper else _fold_lower(G)


def _spd(make, *batch, n=3):
    B = make(*batch, n, n)
    return (B @ B.mT + _eye_like(B, n) * n).detach()


def _square_samples(make):
    return [Sample(_spd(make) - make(3, 3) * 0.5), Sample(_spd(make, 2) + make(2, 3, 3) * 0.3),
            Sample(_spd(make, n=1))]


# --------------------------------------------------------------------------- inv, det

@op(inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_inv(A):
    """The inverse of each square matrix of ``A``."""
    check_matrix(A, "linalg.inv")
    return _result(_lapack("linalg.inv", np.linalg.inv, _array(A)), A)


@linalg_inv.def_derivative("A")
def linalg_inv(grad, result):
    return -(result.mT @ grad @ result.mT)


@op(inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_det(A):
    """The determinant of each square matrix of ``A``."""
    check_matrix(A, "linalg.det")
    return _result(np.linalg.det(_array(A)), A)


@linalg_det.def_derivative("A")
def linalg_det(grad, A, result):
    return (grad * result).unsqueeze(-1).unsqueeze(-1) * linalg_inv(A).mT


@op(inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_slogdet(A):
    """``(sign, logabsdet)`` of each square matrix of ``A``."""
    check_matrix(A, "linalg.slogdet")
    sign, logabsdet = np.linalg.slogdet(_array(A))
    return _result(sign, A), _result(logabsdet, A)


@linalg_slogdet.def_derivative("A")
def linalg_slogdet(grad, A):
    # the sign is piecewise constant: only logabsdet carries a gradient
    g = grad[1]
    if g is None:
        return None
    return g.unsqueeze(-1).unsqueeze(-1) * linalg_inv(A).mT


# --------------------------------------------------------------------------- solve

def _vector_rhs(A, B):
    """Whether ``B`` is a (batch of) vector(s), as PyTorch decides."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and B._sizes == A._sizes[:-1])


def _solve_samples(make):
    return [Sample(_square_samples(make)[0].args[0], make(3, 2)),
            Sample(_square_samples(make)[1].args[0], make(2, 3, 1)),
            Sample(_square_samples(make)[1].args[0], make(2, 3)),
            Sample(_square_samples(make)[0].args[0], make(3))]


@op(inputs=("A", "B"), method=False, function=False, samples=_solve_samples)
def linalg_solve(A, B, *, left=True):
    """``X`` with ``A @ X = B`` (``left=False``: ``X @ A = B``)."""
    check_matrix(A, "linalg.solve")
    if A._dtype is not B._dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but "
                           f"found A of type {_type_name(A._dtype)} and B of type "
                           f"{_type_name(B._dtype)} instead")
    a, b = _array(A), _array(B)
    if not left:
        a, b = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
    vector = _vector_rhs(A, B)
    if vector:
        b = b[..., None]
    if b.shape[-2] != a.shape[-1]:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({a.shape[-2]}x{a.shape[-1]} "
                           f"and {b.shape[-2]}x{b.shape[-1]})")
    x = _lapack("linalg.solve", np.linalg.solve, a, b)
    if vector:
        x = x[..., 0]
    elif not left:
        x = np.swapaxes(x, -1, -2)
    return _result(x, A)


@linalg_solve.def_joint_derivative     # A's gradient is made from B's
def linalg_solve(grad, A, B, left, result):
    vector = _vector_rhs(A, B)
    X, g = (result.unsqueeze(-1), grad.unsqueeze(-1)) if vector else (result, grad)
    if left:
        gB = linalg_solve(A.mT, g)
        gA = -(gB @ X.mT)
    else:
        gB = linalg_solve(A.mT, g, left=False)
        gA = -(X.mT @ gB)
    return gA, gB.squeeze(-1) if vector else gB


@linalg_solve.def_batch_rule
def linalg_solve(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    A, B = bound["A"], bound["B"]
    size = batch_size(level)
    vector = _vector_rhs(A, B)
    a = front_or_expanded(A, level, size)
    # a vector right-hand side per sample stays one after the batch dim is added
    b = front_or_expanded(B.unsqueeze(-1) if vector else B, level, size)
    result = call(op, (a, b), {"left": bound["left"]})
    return wrap(result.squeeze(-1) if vector else result, 0, level)


# --------------------------------------------------------------------------- cholesky

def _spd_samples(make):
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(_spd(make), upper=True)]


@op(inputs=("A",), method=False, function=False, samples=_spd_samples)
def linalg_cholesky(A, *, upper=False):
    """The Cholesky factor (lower, or upper with ``upper=True``) of each symmetric
    positive-definite matrix of ``A``; only the lower triangle is read."""
    check_matrix(A, "linalg.cholesky")
    a = _array(A)
    L = _lapack("linalg.cholesky", np.linalg.cholesky, np.tril(a) + np.swapaxes(
        np.tril(a, -1), -1, -2))
    return _result(np.swapaxes(L, -1, -2) if upper else L, A)


@linalg_cholesky.def_derivative("A")
def linalg_cholesky(grad, upper, result):
    L, gL = (result.mT, grad.mT) if upper else (result, grad)
    gA = (L.mT @ gL).tril()
    gA = 0.5 * (gA + gA.tril(-1).mT)
    gA = linalg_solve(L.mT, gA)
    gA = linalg_solve(L, gA, left=False)
    return _fold_lower(gA)


# --------------------------------------------------------------------------- eigh

def _eigh_samples(make):
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(_spd(make), UPLO="U")]


def _check_uplo(UPLO):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")


@op(inputs=("A",), method=False, function=False, samples=_eigh_samples)
def linalg_eigh(A, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of each symmetric matrix of ``A``, read
    from its ``UPLO`` triangle."""
    check_matrix(A, "linalg.eigh")
    _check_uplo(UPLO)
    w, v = _lapack("linalg.eigh", np.linalg.eigh, _array(A), UPLO)
    return _result(w, A), _result(v, A)


@linalg_eigh.def_derivative("A")
def linalg_eigh(grad, UPLO, result0, result1):
    gL, gV = grad
    L, V = result0, result1
    n = L.shape[-1]
    if gV is None:
        inner = _diag_embed(gL)
    else:
        VhgV = V.mT @ gV
        VhgV = 0.5 * (VhgV - VhgV.mT)
        eye = _eye_like(L, n)
        E = L.unsqueeze(-2) - L.unsqueeze(-1) + eye
        inner = VhgV / E * (1 - eye)
        if gL is not None:
            inner = inner + _diag_embed(gL)
    return _fold(V @ inner @ V.mT, UPLO == "U")


# --------------------------------------------------------------------------- qr

def _qr_samples(make):
    # mode="r" has no derivative (tests/test_linalg_ops.py covers it)
    return [Sample(make(4, 3)), Sample(make(2, 3, 3)), Sample(make(3, 3), mode="complete")]


@op(inputs=("A",), method=False, function=False, samples=_qr_samples)
def linalg_qr(A, mode="reduced"):
    """``Q, R`` of each matrix of ``A`` (``mode``: 'reduced', 'complete' or 'r', where Q
    is empty)."""
    check_matrix(A, "linalg.qr", square=False)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    a = _array(A)
    if mode == "r":
        empty = array_module(a).empty((0,), a.dtype)
        return _result(empty, A), _result(np.linalg.qr(a, mode="r"), A)
    q, r = np.linalg.qr(a, mode=mode)
    return _result(q, A), _result(r, A)


@linalg_qr.def_derivative("A")
def linalg_qr(grad, A_shape, mode, result0, result1):
    gQ, gR = grad
    Q, R = result0, result1
    m, n = A_shape[-2], A_shape[-1]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed "
                           "when mode='r'. Please use linalg.qr(A, mode='reduced') if you "
                           "are going to differentiate through linalg.qr.")
    if mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' "
                           "and nrows > ncols.")
    if m < n:
        raise NotImplementedError("linalg.qr: the derivative for more columns than rows is "
                                  "not implemented")
    if gQ is None:
        M = gR @ R.mT
    elif gR is None:
        M = -(Q.mT @ gQ)
    else:
        M = gR @ R.mT - Q.mT @ gQ
    M = M.triu()
    gA = Q @ (M + M.mT - _diag_embed(M.diagonal(0, -2, -1)))
    if gQ is not None:
        gA = gA + gQ
    return linalg_solve(R.mT, gA, left=False)


# --------------------------------------------------------------------------- svd

def _svd_samples(make):
    return [Sample(make(4, 3), full_matrices=False), Sample(make(2, 3, 3)),
            Sample(make(2, 4), full_matrices=False), Sample(make(3, 2), full_matrices=False)]


@op(inputs=("A",), method=False, function=False, samples=_svd_samples)
def linalg_svd(A, full_matrices=True):
    """``U, S, Vh`` of each matrix of ``A`` (S descending)."""
    check_matrix(A, "linalg.svd", square=False)
    u, s, vh = _lapack("linalg.svd", np.linalg.svd, _array(A), full_matrices)
    return _result(u, A), _result(s, A), _result(vh, A)


@linalg_svd.def_derivative("A")
def linalg_svd(grad, A_shape, full_matrices, result0, result1, result2):
    gU, gS, gVh = grad
    U, S, Vh = result0, result1, result2
    m, n = A_shape[-2], A_shape[-1]
    k = min(m, n)
    if full_matrices and m != n:
        # the extra columns of U (rows of Vh) are not determined by A: left out, as PyTorch
        U, Vh = U[..., :k], Vh[..., :k, :]
        gU = None if gU is None else gU[..., :k]
        gVh = None if gVh is None else gVh[..., :k, :]
    if gU is None and gVh is None:
        return U @ (gS.unsqueeze(-1) * Vh)
    eye = _eye_like(S, k)
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1) + eye
    inner = None
    if gU is not None:
        UhgU = U.mT @ gU
        inner = (UhgU - UhgU.mT) * S.unsqueeze(-2)
    if gVh is not None:
        V, gV = Vh.mT, gVh.mT
        VhgV = V.mT @ gV
        term = S.unsqueeze(-1) * (VhgV - VhgV.mT)
        inner = term if inner is None else inner + term
    gA = inner / E * (1 - eye)
    if gS is not None:
        gA = gA + _diag_embed(gS)
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / S.unsqueeze(-2)
        gA = (gA + gUSinv - U @ (U.mT @ gUSinv)) @ Vh
    elif m < n and gVh is not None:
        gA = gA @ Vh
        gVSinv = gVh.mT / S.unsqueeze(-2)
        gA = U @ (gA + gVSinv.mT - (gVSinv.mT @ Vh.mT) @ Vh)
    else:
        gA = U @ gA @ Vh
    return gA


def _wrap_all(result, level):
    if isinstance(result, tuple):
        return tuple(wrap(r, 0, level) for r in result)
    return wrap(result, 0, level)


def one_matrix_batch_rule(op, level, args, kwargs):
    """The kernels batch over leading dims: the vmap dim is one more leading dim of one
    call."""
    bound = op.bind(args, kwargs)
    A = bound.pop("A")
    physical = front_or_expanded(A, level, batch_size(level))
    result = call(op, (physical,), bound)
    if op.name == "linalg_qr" and bound["mode"] == "r":
        # Q is an empty placeholder: one per sample
        q, r = result
        result = (q.new_empty((batch_size(level), 0)), r)
    return _wrap_all(result, level)


linalg_inv.def_batch_rule(one_matrix_batch_rule)
linalg_det.def_batch_rule(one_matrix_batch_rule)
linalg_slogdet.def_batch_rule(one_matrix_batch_rule)
linalg_cholesky.def_batch_rule(one_matrix_batch_rule)
linalg_eigh.def_batch_rule(one_matrix_batch_rule)
linalg_qr.def_batch_rule(one_matrix_batch_rule)
linalg_svd.def_batch_rule(one_matrix_batch_rule)


__all__ = ["LinAlgError", "linalg_inv", "linalg_det", "linalg_slogdet", "linalg_solve",
           "linalg_cholesky", "linalg_eigh", "linalg_qr", "linalg_svd", "check_matrix"]
__all__ += ["det", "inverse", "slogdet", "logdet", "svd", "cholesky", "matrix_power", "pinverse",
            "linalg_matrix_exp", "matrix_exp"]


# --------------------------------------------------------------------------- PyTorch's
# top-level linear-algebra names: composites over the ops above (and ``microtensor.linalg``)

SlogdetTuple = _named("slogdet", ("sign", "logabsdet"))
SvdTuple = _named("svd", ("U", "S", "V"))


@op(kind="composite", inputs=("self",), samples=_square_samples)
def det(self):
    return linalg_det(self)


@op(kind="composite", inputs=("self",), samples=_square_samples)
def inverse(self):
    return linalg_inv(self)


@op(kind="composite", inputs=("self",), samples=_square_samples)
def slogdet(self):
    return SlogdetTuple(*linalg_slogdet(self))


def _logdet_samples(make):
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(-_spd(make, n=2))]


@op(kind="composite", inputs=("self",), samples=_logdet_samples)
def logdet(self):
    """log(det): NaN for a negative determinant, -inf for a zero one."""
    sign, logabsdet = linalg_slogdet(self)
    return REGISTRY["where"](sign < 0, logabsdet.new_full((), float("nan")), logabsdet)


def _svd_tuple_samples(make):
    return [Sample(make(4, 3)), Sample(make(2, 3, 3), some=False),
            Sample(make(2, 4), compute_uv=False)]


@op(kind="composite", inputs=("self",), samples=_svd_tuple_samples)
def svd(self, some=True, compute_uv=True):
    """``U, S, V`` with ``self = U diag(S) Vᵀ`` (``V``, not ``linalg.svd``'s ``Vh``);
    without ``compute_uv``, ``U`` and ``V`` are zero-filled square matrices."""
    if not compute_uv:
        S = linalg_svd(self, False)[1]
        m, n = self.shape[-2:]
        batch = tuple(self.shape[:-2])
        return SvdTuple(self.new_zeros(batch + (m, m)), S, self.new_zeros(batch + (n, n)))
    U, S, Vh = linalg_svd(self, not some)
    return SvdTuple(U, S, Vh.mT)


@op(kind="composite", inputs=("self",), samples=lambda make: [Sample(_spd(make)),
                                                              Sample(_spd(make, 2), True)])
def cholesky(self, upper=False):
    return linalg_cholesky(self, upper=upper)


def _matrix_power_samples(make):
    return [Sample(make(3, 3), 3), Sample(make(2, 2, 2), 0), Sample(make(2, 2), 1),
            Sample(_spd(make), -2), Sample(make(2, 3, 3), 6)]


@op(kind="composite", inputs=("self",), samples=_matrix_power_samples)
def matrix_power(self, n):
    """``self`` multiplied by itself ``n`` times (``n < 0``: of its inverse; 0: the
    identity), by repeated squaring."""
    if self.dim() < 2:
        raise RuntimeError("linalg.matrix_power: The input tensor A must have at least 2 "
                           "dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {self.shape[-2]} by {self.shape[-1]} matrices")
    if n == 0:
        size = self.shape[-1]
        return _eye_like(self, size).expand(self.shape).clone()
    if n < 0:
        self, n = linalg_inv(self), -n
    result, square = None, self
    while n:
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if n:
            square = square @ square
    return result if result is not self else self.clone()


@op(kind="composite", inputs=("self",), samples=lambda make: [Sample(make(4, 3)),
                                                              Sample(make(2, 3, 2), 1e-3)])
def pinverse(self, rcond=1e-15):
    from microtensor import linalg
    return linalg.pinv(self, rtol=rcond)


# Padé [13/13] coefficients of exp and the 1-norm up to which they give double precision
# without scaling (Higham, "The scaling and squaring method for the matrix exponential
# revisited", 2005)
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
           129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
           40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152


def _expm(a):
    """exp of each matrix of the array ``a``: scaled by 2**-s so that its 1-norm is at most
    theta13, Padé [13/13], then squared s times (each matrix its own s)."""
    norms = np.abs(a).sum(-2).max(-1) if a.size else np.zeros(a.shape[:-2])
    with np.errstate(divide="ignore"):
        squarings = np.maximum(0, np.ceil(np.log2(norms / _THETA13))).astype(np.int64)
    a = a / (2.0 ** squarings)[..., None, None].astype(a.dtype)
    b = _PADE13
    eye_ = np.eye(a.shape[-1], dtype=a.dtype)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 +
             b[1] * eye_)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + \
        b[0] * eye_
    result = np.linalg.solve(v - u, v + u)
    for step in range(int(squarings.max()) if squarings.size else 0):
        result = np.where((squarings > step)[..., None, None], result @ result, result)
    return result


def _matrix_exp_samples(make):
    return [Sample(make(3, 3)), Sample(make(2, 2, 2) * 4), Sample(make(1, 1)),
            Sample(make(0, 2, 2))]


@op(inputs=("A",), method=False, function=False, samples=_matrix_exp_samples)
def linalg_matrix_exp(A):
    """The exponential of each square matrix of ``A``."""
    if A.dim() >= 2 and A._dtype.is_floating_point and A._dtype not in (float32, float64):
        # half types: computed in float32, rounded once (PyTorch's CPU runs them)
        return linalg_matrix_exp(A.to(float32)).to(A._dtype)
    check_matrix(A, "linalg.matrix_exp")
    arr = _array(A)
    if hasattr(arr, "get"):       # a device array: computed on the host copy
        return _result(array_module(arr).asarray(_expm(arr.get())), A)
    return _result(_expm(arr), A)


@linalg_matrix_exp.def_derivative("A")
def linalg_matrix_exp(grad, A):
    # the Fréchet derivative of exp at Aᵀ in the direction grad: the upper right block of
    # exp([[Aᵀ, grad], [0, Aᵀ]])
    n = A.shape[-1]
    cat = REGISTRY["cat"]
    top = cat((A.mT, grad), -1)
    bottom = cat((A.new_zeros(A.shape), A.mT), -1)
    block = linalg_matrix_exp(cat((top, bottom), -2))
    return block[..., :n, n:]


linalg_matrix_exp.def_batch_rule(one_matrix_batch_rule)


@op(kind="composite", inputs=("self",), samples=lambda make: [Sample(make(3, 3))])
def matrix_exp(self):
    return linalg_matrix_exp(self)
