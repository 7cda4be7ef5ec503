"""Matrix decompositions and solvers of ``torch.linalg``: ``linalg_inv``, ``linalg_det``,
``linalg_slogdet``, ``linalg_solve``, ``linalg_cholesky``, ``linalg_qr``, ``linalg_svd``,
``linalg_eigh``, ``linalg_eig``; the triangular solve, the LU, LDLᵀ and info-reporting
Cholesky factorizations, and the rest of ``torch.linalg`` and PyTorch's top-level names
written with them (``linalg_lu_solve``, ``linalg_inv_ex``, ``linalg_cond``,
``cholesky_solve`` ...).  Real and complex dtypes alike (the formulas take conjugate
transposes), but for the LDLᴴ of complex Hermitian matrices, which is refused.

Kernels are NumPy's LAPACK wrappers, batched over the leading dims in one call; the
factorizations NumPy does not wrap (LU, LDLᵀ, Cholesky with its info) are LAPACK's
algorithms written out in NumPy, a Python step per column over the whole batch.
Derivatives are PyTorch's (FunctionsManual.cpp), written in microtensor ops so that they
are themselves differentiable.  Multi-output ops return plain tuples; ``microtensor.linalg``
gives them PyTorch's named fields.  ``cholesky`` and ``eigh`` read one triangle of their input
only; their gradients are PyTorch's: symmetric (Hermitian), the derivative along symmetric (Hermitian) directions
(the inputs they are meant for), as users of PyTorch expect.
"""
import math
from collections import namedtuple

import numpy as np

from microtensor._C.meta import broadcast_shapes as _broadcast_shapes, contiguous_format
from microtensor._C.tensor import bool_, complex64, complex128, float32, float64, int32
from microtensor.ops.arguments import int_arg
from microtensor.ops.factory import eye
from microtensor.ops.loops import (_type_name, array_module, from_numpy_result, owned,
                                   refuse_integral)
from microtensor.ops.registry import REGISTRY, Sample, op
from microtensor.vmap.helpers import (BatchedTensor, batch_size, call, front_or_expanded, wrap,
                                      wrap_result)


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
    """PyTorch's checks of a (batch of) matrix argument: floating or complex dtype (not
    float16 or bfloat16), 2+ dims, square."""
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    if A._dtype not in (float32, float64, complex64, complex128):
        if A._dtype.is_floating_point:   # float16, bfloat16: PyTorch has no CPU kernel
            raise NotImplementedError(f"\"{fn}\" not implemented for "
                                      f"'{_type_name(A._dtype)}'")
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. "
                           f"Got {_type_name(A._dtype)}")
    if A._dtype.is_complex and fn.partition("(")[0] not in COMPLEX_FUNCTIONS:
        raise NotImplementedError(f"{fn}: complex tensors are not supported by microtensor "
                                  f"for this function. Got {_type_name(A._dtype)}")
    if square and A._sizes[-1] != A._sizes[-2]:
        raise RuntimeError(f"{fn}: A must be batches of square matrices, but they are "
                           f"{A._sizes[-2]} by {A._sizes[-1]} matrices")


# the functions whose formulas (kernels and derivatives) are written for complex tensors
COMPLEX_FUNCTIONS = {
    "linalg.eig", "linalg.eigvals", "linalg.solve", "linalg.solve_ex", "linalg.inv",
    "linalg.inv_ex", "linalg.det", "linalg.slogdet", "linalg.cholesky", "linalg.eigh",
    "linalg.qr", "linalg.svd", "linalg.pinv", "linalg.lstsq", "linalg.cond",
    "linalg.matrix_exp", "linalg.lu_solve", "cholesky_inverse", "torch.linalg.ldl_factor_ex",
    "torch.linalg.ldl_solve"}


def _real_of(dtype):
    """The real dtype of ``dtype`` (itself when real): that of singular values, norms..."""
    return {complex64: float32, complex128: float64}.get(dtype, dtype)


def _array(t):
    # NumPy's linalg functions reach CuPy's through __array_function__: no conversion here
    return t._array()


def _result(arr, like):
    return from_numpy_result(arr, like._dtype)


def _column_major(t):
    """``t`` (a fresh result) with each matrix stored column-major, as LAPACK writes it and
    PyTorch returns it (batch dims outermost): a tensor of its own, not a view, its history
    kept (composites call it too)."""
    return t if t.dim() < 2 else owned(t.mT.contiguous().mT)


def _transposed_alias(stored):
    """The matrices of ``stored`` (row-major) read transposed: a column-major tensor of
    its own over the same memory."""
    def swapped(values):
        return values[:-2] + (values[-1], values[-2])
    return stored._make_alias_unchecked(swapped(stored._sizes), swapped(stored._strides),
                                        stored._offset)


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


def _hermitian_from_lower(a):
    """The symmetric (Hermitian) matrices whose lower triangles the array ``a`` holds."""
    return np.tril(a) + np.conj(np.swapaxes(np.tril(a, -1), -1, -2))


def _spd(make, *batch, n=3):
    B = make(*batch, n, n)
    return (B @ B.mH + _eye_like(B, n) * n).detach()


def _complex(make):
    """``make`` for complex128 tensors: the complex samples of the linear algebra."""
    return lambda *shape: make(*shape, dtype=complex128)


def _square_samples(make):
    return [Sample(_spd(make) - make(3, 3) * 0.5), Sample(_spd(make, 2) + make(2, 3, 3) * 0.3),
            Sample(_spd(make, n=1)),
            Sample(_spd(_complex(make)) - _complex(make)(3, 3) * 0.5)]


# --------------------------------------------------------------------------- inv, det

@op(out=True, inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_inv(A):
    """The inverse of each square matrix of ``A``."""
    check_matrix(A, "linalg.inv")
    return _column_major(_result(_lapack("linalg.inv", np.linalg.inv, _array(A)), A))


@linalg_inv.def_derivative("A")
def linalg_inv(grad, result):
    return -(result.mH @ grad @ result.mH)


@op(out=True, inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_det(A):
    """The determinant of each square matrix of ``A``."""
    check_matrix(A, "linalg.det")
    return _result(np.linalg.det(_array(A)), A)


@linalg_det.def_derivative("A")
def linalg_det(grad, A, result):
    # the cofactor matrix: det(A) A^-T where A is invertible; with a singular matrix in the
    # batch, from the SVD for every matrix, as PyTorch (continuous, no inverse needed)
    if (_physical_array(result) == 0).any():
        U, S, Vh = linalg_svd(A, False)
        sign = (linalg_det(U) * linalg_det(Vh)).conj()
        return (U * _products_of_others(S) * (grad * sign).unsqueeze(-1).unsqueeze(-1)) @ Vh
    return (grad * result.conj()).unsqueeze(-1).unsqueeze(-1) * linalg_inv(A).mH


def _products_of_others(S):
    """``prod_{j != i} S_j`` for each ``i`` of the last dim, without dividing (zeros
    allowed): the products before ``i`` times those after, ``(..., 1, n)``."""
    ones = S.new_ones(tuple(S.shape[:-1]) + (1,))
    cat = REGISTRY["cat"]
    before = cat([ones, S[..., :-1]], -1).cumprod(-1)
    after = cat([ones, S[..., 1:].flip(-1)], -1).cumprod(-1).flip(-1)
    return (before * after).unsqueeze(-2)


@op(out=True, inputs=("A",), method=False, function=False, samples=_square_samples)
def linalg_slogdet(A):
    """``(sign, logabsdet)`` of each square matrix of ``A``."""
    check_matrix(A, "linalg.slogdet")
    sign, logabsdet = np.linalg.slogdet(_array(A))
    return _result(sign, A), from_numpy_result(logabsdet, _real_of(A._dtype))


@linalg_slogdet.def_derivative("A")
def linalg_slogdet(grad, A, result0):
    # a real sign is piecewise constant; a complex one, exp(i Im(log det)), adds
    # i Im(gsign conj(sign)) to logabsdet's gradient (PyTorch's slogdet_backward)
    gsign, g = grad
    if A._dtype.is_complex and gsign is not None:
        phase = (gsign * result0.conj()).imag * 1j
        g = phase if g is None else g + phase
    if g is None:
        return None
    # g A^-H as PyTorch computes it, through the LU factors of A^H: at a singular matrix
    # the triangular solves give its infinities and NaNs (an inverse would raise)
    LU, pivots, _ = linalg_lu_factor_ex(A.mH)
    identity = eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return linalg_lu_solve(LU, pivots, g.unsqueeze(-1).unsqueeze(-1) * identity)


# --------------------------------------------------------------------------- solve

def _vector_rhs(A, B):
    """Whether ``B`` is a (batch of) vector(s), as PyTorch decides."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and B._sizes == A._sizes[:-1])


def _solve_samples(make):
    return [Sample(_square_samples(make)[0].args[0], make(3, 2)),
            Sample(_square_samples(make)[1].args[0], make(2, 3, 1)),
            Sample(_square_samples(make)[1].args[0], make(2, 3)),
            Sample(_square_samples(make)[0].args[0], make(3)),
            Sample(_square_samples(make)[-1].args[0], _complex(make)(3, 2))]


@op(out=True, inputs=("A", "B"), method=False, function=False, samples=_solve_samples)
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
        return _result(x[..., 0], A)
    if not left:   # (the solution of the transposed system, transposed back: row-major)
        return _result(np.swapaxes(x, -1, -2), A)
    return _column_major(_result(x, A))


@linalg_solve.def_joint_derivative     # A's gradient is made from B's
def linalg_solve(grad, A, B, left, result):
    vector = _vector_rhs(A, B)
    X, g = (result.unsqueeze(-1), grad.unsqueeze(-1)) if vector else (result, grad)
    if left:
        gB = linalg_solve(A.mH, g)
        gA = -(gB @ X.mH)
    else:
        gB = linalg_solve(A.mH, g, left=False)
        gA = -(X.mH @ gB)
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
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(_spd(make), upper=True),
            Sample(_spd(_complex(make), 2))]


@op(out=True, inputs=("A",), method=False, function=False, samples=_spd_samples)
def linalg_cholesky(A, *, upper=False):
    """The Cholesky factor (lower, or upper with ``upper=True``) of each Hermitian
    positive-definite matrix of ``A``; only the lower triangle is read."""
    check_matrix(A, "linalg.cholesky")
    a = _array(A)
    L = _lapack("linalg.cholesky", np.linalg.cholesky, _hermitian_from_lower(a))
    return _column_major(_result(np.conj(np.swapaxes(L, -1, -2)) if upper else L, A))


@linalg_cholesky.def_derivative("A")
def linalg_cholesky(grad, upper, result):
    L, gL = (result.mH, grad.mH) if upper else (result, grad)
    gA = (L.mH @ gL).tril()
    gA = 0.5 * (gA + gA.tril(-1).mH)
    gA = linalg_solve(L.mH, gA)
    return linalg_solve(L, gA, left=False)


# --------------------------------------------------------------------------- eigh

def _eigh_samples(make):
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(_spd(make), UPLO="U"),
            Sample(_spd(_complex(make)), UPLO="U")]


def _check_uplo(UPLO):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")


@op(out=True, inputs=("A",), method=False, function=False, samples=_eigh_samples)
def linalg_eigh(A, UPLO="L"):
    """Eigenvalues (ascending, real) and eigenvectors of each Hermitian matrix of ``A``,
    read from its ``UPLO`` triangle."""
    refuse_integral(A._dtype, "linalg_eigh_cpu")
    check_matrix(A, "linalg.eigh")
    _check_uplo(UPLO)
    w, v = _lapack("linalg.eigh", np.linalg.eigh, _array(A), UPLO)
    return from_numpy_result(w, _real_of(A._dtype)), _column_major(_result(v, A))


@linalg_eigh.def_derivative("A")
def linalg_eigh(grad, result0, result1):
    gL, gV = grad
    L, V = result0, result1
    n = L.shape[-1]
    if gV is None:
        inner = _diag_embed(gL).to(V.dtype)
    else:
        VhgV = V.mH @ gV
        if V._dtype.is_complex:
            _check_phase_invariant(VhgV.diagonal(0, -2, -1), "linalg_eigh_backward")
        VhgV = 0.5 * (VhgV - VhgV.mH)
        eye = _eye_like(L, n)
        E = L.unsqueeze(-2) - L.unsqueeze(-1) + eye
        inner = VhgV / E * (1 - eye)
        if gL is not None:
            inner = inner + _diag_embed(gL)
    return V @ inner @ V.mH


# --------------------------------------------------------------------------- qr

def _qr_samples(make):
    # mode="r" has no derivative (tests/test_linalg_ops.py covers it)
    return [Sample(make(4, 3)), Sample(make(2, 3, 3)), Sample(make(3, 3), mode="complete"),
            Sample(_complex(make)(4, 3))]


@op(out=True, inputs=("A",), method=False, function=False, samples=_qr_samples)
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
        return _result(empty, A), _column_major(_result(np.linalg.qr(a, mode="r"), A))
    q, r = np.linalg.qr(a, mode=mode)
    return _column_major(_result(q, A)), _column_major(_result(r, A))


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
        M = gR @ R.mH
    elif gR is None:
        M = -(Q.mH @ gQ)
    else:
        M = gR @ R.mH - Q.mH @ gQ
    M = M.triu()
    gA = Q @ (M + M.mH - _diag_embed(M.diagonal(0, -2, -1).real))
    if gQ is not None:
        gA = gA + gQ
    return linalg_solve(R.mH, gA, left=False)


# --------------------------------------------------------------------------- svd

def _svd_samples(make):
    return [Sample(make(4, 3), full_matrices=False), Sample(make(2, 3, 3)),
            Sample(make(2, 4), full_matrices=False), Sample(make(3, 2), full_matrices=False),
            Sample(_complex(make)(2, 4, 3), full_matrices=False)]


@op(out=True, inputs=("A",), method=False, function=False, samples=_svd_samples)
def linalg_svd(A, full_matrices=True):
    """``U, S, Vh`` of each matrix of ``A`` (S descending)."""
    check_matrix(A, "linalg.svd", square=False)
    u, s, vh = _lapack("linalg.svd", np.linalg.svd, _array(A), full_matrices)
    return (_column_major(_result(u, A)), from_numpy_result(s, _real_of(A._dtype)),
            _column_major(_result(vh, A)))


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
    inner = UhgU = VhgV = None
    if gU is not None:
        UhgU = U.mH @ gU
        UhgU = UhgU - UhgU.mH
        inner = UhgU * S.unsqueeze(-2)
    if gVh is not None:
        V, gV = Vh.mH, gVh.mH
        VhgV = V.mH @ gV
        VhgV = VhgV - VhgV.mH
        term = S.unsqueeze(-1) * VhgV
        inner = term if inner is None else inner + term
    if U._dtype.is_complex:
        # the loss may not depend on the phases of the pairs of singular vectors
        _check_svd_phase_invariant(UhgU, VhgV)
    gA = inner / E * (1 - eye)
    if gS is not None:
        gA = gA + _diag_embed(gS)
    if UhgU is not None and VhgV is not None and U._dtype.is_complex:
        gA = gA + _diag_embed(UhgU.diagonal(0, -2, -1) / (2 * S))
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / S.unsqueeze(-2)
        gA = (gA + gUSinv - U @ (U.mH @ gUSinv)) @ Vh
    elif m < n and gVh is not None:
        gA = gA @ Vh
        gVSinv = gVh.mH / S.unsqueeze(-2)
        gA = U @ (gA + gVSinv.mH - (gVSinv.mH @ Vh.mH) @ Vh)
    else:
        gA = U @ gA @ Vh
    return gA


def _check_svd_phase_invariant(UhgU, VhgV):
    """PyTorch's refusal of a loss that depends on the phases of the singular vectors:
    Im diag(Uᴴ gU - gUᴴ U) must equal -Im diag(Vᴴ gV - gVᴴ V)."""
    total = sum(X.diagonal(0, -2, -1).imag for X in (UhgU, VhgV) if X is not None)
    if not np.all(np.abs(_physical_array(total.detach())) <= 1e-2):
        raise RuntimeError("svd_backward: The singular vectors in the complex case are "
                           "specified up to multiplication by e^{i phi}. The specified loss "
                           "function depends on this phase term, making it ill-defined.")


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
__all__ += ["linalg_multi_dot", "linalg_vecdot", "linalg_vander", "linalg_matrix_rank",
            "linalg_cond", "linalg_solve_triangular", "triangular_solve", "cholesky_solve",
            "cholesky_inverse", "linalg_lu_factor_ex", "_lu_unpack", "lu_unpack", "linalg_lu",
            "linalg_lu_solve", "linalg_solve_ex", "linalg_inv_ex", "linalg_cholesky_ex",
            "linalg_householder_product", "orgqr", "linalg_tensorinv", "linalg_tensorsolve",
            "lu", "lu_solve", "qr", "raise_for_info", "linalg_ldl_factor_ex",
            "linalg_ldl_factor", "linalg_ldl_solve", "geqrf", "ormqr"]
__all__ += ["linalg_eig", "linalg_eigvals"]
__all__ += ["linalg_pinv"]


# --------------------------------------------------------------------------- PyTorch's
# top-level linear-algebra names: composites over the ops above (and ``microtensor.linalg``)

SlogdetTuple = _named("slogdet", ("sign", "logabsdet"))
SvdTuple = _named("svd", ("U", "S", "V"))


@op(kind="composite", inputs=("self",), samples=_square_samples)
def det(self):
    return linalg_det(self)


@op(out=True, kind="composite", inputs=("self",), samples=_square_samples)
def inverse(self):
    return linalg_inv(self)


@op(out=True, kind="composite", inputs=("self",), samples=_square_samples)
def slogdet(self):
    return SlogdetTuple(*linalg_slogdet(self))


def _logdet_samples(make):
    return [Sample(_spd(make)), Sample(_spd(make, 2)), Sample(-_spd(make, n=2))]


@op(kind="composite", inputs=("self",), samples=_logdet_samples)
def logdet(self):
    """log(det): NaN for a negative determinant, -inf for a zero one (complex: the
    principal logarithm)."""
    sign, logabsdet = linalg_slogdet(self)
    if self._dtype.is_complex:
        return sign.log() + logabsdet
    return REGISTRY["where"](sign < 0, logabsdet.new_full((), float("nan")), logabsdet)


def _svd_tuple_samples(make):
    return [Sample(make(4, 3)), Sample(make(2, 3, 3), some=False),
            Sample(make(2, 4), compute_uv=False),
            Sample(_complex(make)(3, 2))]


@op(out=True, kind="composite", inputs=("self",), samples=_svd_tuple_samples)
def svd(self, some=True, compute_uv=True):
    """``U, S, V`` with ``self = U diag(S) Vᵀ`` (``V``, not ``linalg.svd``'s ``Vh``);
    without ``compute_uv``, ``U`` and ``V`` are zero-filled square matrices."""
    if not compute_uv:
        S = linalg_svd(self, False)[1]
        m, n = self.shape[-2:]
        batch = tuple(self.shape[:-2])
        return SvdTuple(self.new_zeros(batch + (m, m)), S, self.new_zeros(batch + (n, n)))
    U, S, Vh = linalg_svd(self, not some)
    return SvdTuple(U, S, Vh.mH)


@op(out=True, out_casting=True, out_layout="contiguous", kind="composite", inputs=("self",),
    samples=lambda make: [Sample(_spd(make)),
                                                              Sample(_spd(make, 2), True)])
def cholesky(self, upper=False):
    refuse_integral(self._dtype, "cholesky_cpu")
    return linalg_cholesky(self, upper=upper)


def _matrix_power_samples(make):
    return [Sample(make(3, 3), 3), Sample(make(2, 2, 2), 0), Sample(make(2, 2), 1),
            Sample(_spd(make), -2), Sample(make(2, 3, 3), 6),
            Sample(_complex(make)(3, 3), 3)]


@op(out=True, kind="composite", inputs=("self",), samples=_matrix_power_samples)
def matrix_power(self, n):
    """``self`` multiplied by itself ``n`` times (``n < 0``: of its inverse; 0: the
    identity), by repeated squaring."""
    if self.dim() < 2:
        raise RuntimeError("linalg.matrix_power: The input tensor A must have at least 2 "
                           "dimensions.")
    if self.shape[-1] != self.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but "
                           f"they are {self.shape[-2]} by {self.shape[-1]} matrices")
    n = int_arg(n, "n")
    if n == 0:    # written over a copy of self, as PyTorch: self gets a zero gradient
        return self.clone(memory_format=contiguous_format).copy_(
            _eye_like(self, self.shape[-1]).expand(self.shape))
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
            Sample(make(0, 2, 2)),
            Sample(_complex(make)(3, 3))]


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
    # the Fréchet derivative of exp at Aᴴ in the direction grad: the upper right block of
    # exp([[Aᴴ, grad], [0, Aᴴ]])
    n = A.shape[-1]
    cat = REGISTRY["cat"]
    top = cat((A.mH, grad), -1)
    bottom = cat((A.new_zeros(A.shape), A.mH), -1)
    block = linalg_matrix_exp(cat((top, bottom), -2))
    return block[..., :n, n:]


linalg_matrix_exp.def_batch_rule(one_matrix_batch_rule)


@op(kind="composite", inputs=("self",), samples=lambda make: [Sample(make(3, 3))])
def matrix_exp(self):
    return linalg_matrix_exp(self)


# =========================================================================== the rest of
# torch.linalg: products, ranks and condition numbers, triangular solves,
# LU, Cholesky and inverse with ``info``, Householder products, tensor inverses; and
# PyTorch's top-level names for them (cholesky_solve, triangular_solve, lu, ...)

LUFactorResult = _named("linalg_lu_factor", ("LU", "pivots"))
LUFactorExResult = _named("linalg_lu_factor_ex", ("LU", "pivots", "info"))
LUResult = _named("linalg_lu", ("P", "L", "U"))
LUUnpackResult = _named("lu_unpack", ("P", "L", "U"))
LUWithInfo = _named("_lu_with_info", ("LU", "pivots", "info"))
SolveExResult = _named("linalg_solve_ex", ("result", "info"))
InvExResult = _named("linalg_inv_ex", ("inverse", "info"))
CholeskyExResult = _named("linalg_cholesky_ex", ("L", "info"))
TriangularSolveResult = _named("triangular_solve", ("solution", "cloned_coefficient"))
QRTuple = _named("qr", ("Q", "R"))
LDLFactorResult = _named("linalg_ldl_factor", ("LD", "pivots"))
LDLFactorExResult = _named("linalg_ldl_factor_ex", ("LD", "pivots", "info"))


def _host_array(arr):
    """``arr`` as a NumPy array (a device array copied to the host): the kernels written
    out in NumPy below run on the host."""
    return arr.get() if hasattr(arr, "get") else np.asarray(arr)


def _host(t):
    return _host_array(t._array())


def _on_device_of(like, arr, dtype=None):
    """A host array computed for the tensor ``like``, as a tensor on its device."""
    return from_numpy_result(array_module(like._array()).asarray(arr),
                             like._dtype if dtype is None else dtype)


def _physical_array(t):
    """The values of ``t`` (an array, or a tensor under any vmap levels: a check reads
    every sample) as a flat NumPy array."""
    while isinstance(t, BatchedTensor):
        t = t._value
    return (_host(t) if hasattr(t, "_array") else _host_array(t)).reshape(-1)


def raise_for_info(info, fn, kind, batched):
    """PyTorch's error for the first nonzero ``info`` of a factorization (``kind``: 'lu',
    'inv', 'solve', 'cholesky' or 'ldl'), naming the batch element when ``batched``."""
    values = _physical_array(info)
    failed = np.flatnonzero(values > 0)
    if not failed.size:
        return
    where = f"(Batch element {failed[0]}): " if batched else ""
    k = int(values[failed[0]])
    if kind == "lu":
        raise RuntimeError(f"{fn}: {where}U[{k},{k}] is zero and using it on lu_solve would "
                           "result in a division by zero. If you still want to perform the "
                           "factorization, consider calling linalg.lu(A, pivot) or "
                           "linalg.lu_factor_ex(A, pivot)")
    if kind == "inv":
        raise LinAlgError(f"{fn}: {where}The diagonal element {k} is zero, the inversion "
                          "could not be completed because the input matrix is singular.")
    if kind == "solve":
        raise LinAlgError(f"{fn}: {where}The solver failed because the input matrix is "
                          "singular.")
    if kind == "ldl":
        # PyTorch's fails an internal assertion here: the message is LAPACK's meaning
        raise LinAlgError(f"{fn}: {where}The factorization could not be completed because "
                          f"the block diagonal matrix D is singular (D[{k},{k}] is zero).")
    raise LinAlgError(f"{fn}: {where}The factorization could not be completed because the "
                      f"input is not positive-definite (the leading minor of order {k} is "
                      "not positive-definite).")


def _in_front(t, level, size, core, batch_dims):
    """``t`` (``core`` dims per matrix or vector) physically with the vmap dim first and
    ``batch_dims`` leading dims after it (singletons inserted where it has fewer)."""
    physical = front_or_expanded(t, level, size)
    for _ in range(batch_dims - (t.dim() - core)):
        physical = physical.unsqueeze(1)
    return physical


def two_matrix_batch_rule(op, level, args, kwargs):
    """Ops whose first two parameters are (batches of) matrices broadcast over the leading
    dims: both get the vmap dim in front (expanded where unbatched) and their leading dims
    aligned after it, one call."""
    bound = op.bind(args, kwargs)
    A, B = (bound.pop(name) for name in op.params[:2])
    size, batch_dims = batch_size(level), max(A.dim(), B.dim()) - 2
    return _wrap_all(call(op, (_in_front(A, level, size, 2, batch_dims),
                               _in_front(B, level, size, 2, batch_dims)), bound), level)


def _check_same_dtype(fn, a_name, A, b_name, B, end=" instead"):
    """PyTorch's refusal of two dtypes (``fn`` None: a message that names no function)."""
    if A._dtype is not B._dtype:
        raise RuntimeError(f"{fn + ': ' if fn else ''}Expected {a_name} and {b_name} to have "
                           f"the same dtype, but found {a_name} of type "
                           f"{_type_name(A._dtype)} and {b_name} of type "
                           f"{_type_name(B._dtype)}{end}")


def _triangular(make, *batch, n=3, upper=False, unit=False):
    """A well-conditioned triangular matrix (unit diagonal if ``unit``)."""
    T = make(*batch, n, n)
    T = T * 0.3 + _eye_like(T, n) * (1.0 if unit else 2.0)
    return (T.triu() if upper else T.tril()).detach()


# --------------------------------------------------------------------------- products

def _multi_dot_samples(make):
    return [Sample([make(2, 3), make(3, 4)]), Sample([make(3), make(3, 4), make(4, 2)]),
            Sample([make(2, 3), make(3, 4), make(4, 2), make(2)]),
            Sample([make(3), make(3)]),
            Sample([_complex(make)(2, 3), _complex(make)(3, 4), _complex(make)(4)])]


def _chain_order(dims):
    """The cheapest parenthesisation of a product of matrices of sizes ``dims[i] x
    dims[i+1]``: ``split[i][j]`` is where the product of matrices i..j splits."""
    count = len(dims) - 1
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j], split[i][j] = min(
                (cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                for k in range(i, j))
    return split


@op(out=True, kind="composite", inputs=("tensors",), method=False, function=False,
    samples=_multi_dot_samples)
def linalg_multi_dot(tensors):
    """The product of the matrices ``tensors`` in the order of fewest multiplications (a
    1-D first or last tensor is a row or column vector, dropped from the result)."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    for position, t in (("first", tensors[0]), ("last", tensors[-1])):
        if t.dim() not in (1, 2):
            raise RuntimeError(f"multi_dot(): the {position} tensor must be 1D or 2D but got "
                               f"{t.dim()}D")
    for i, t in enumerate(tensors[1:-1], 1):
        if t.dim() != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.dim()}D")
    for i, t in enumerate(tensors[1:], 1):
        if t._dtype is not tensors[0]._dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but "
                               f"tensor 0 is {_type_name(tensors[0]._dtype).lower()} and "
                               f"tensor {i} {_type_name(t._dtype).lower()}")
    row, column = tensors[0].dim() == 1, tensors[-1].dim() == 1
    if row:
        tensors[0] = tensors[0].unsqueeze(0)
    if column:
        tensors[-1] = tensors[-1].unsqueeze(-1)
    for i in range(len(tensors) - 1):
        if tensors[i].shape[1] != tensors[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes "
                               f"{list(tensors[i].shape)} and {list(tensors[i + 1].shape)} "
                               "cannot be multiplied")
    split = _chain_order([t.shape[0] for t in tensors] + [tensors[-1].shape[1]])

    def product(i, j):
        if i == j:
            return tensors[i]
        return product(i, split[i][j]) @ product(split[i][j] + 1, j)
    result = product(0, len(tensors) - 1)
    if row:
        result = result.squeeze(0)
    if column:
        result = result.squeeze(-1)
    return result


def _vecdot_samples(make):
    return [Sample(make(2, 3), make(3)), Sample(make(3, 4), make(3, 4), dim=0),
            Sample(make(4), make(4)), Sample(_complex(make)(2, 3), _complex(make)(3))]


@op(out=True, kind="composite", inputs=("x", "y"), method=False, function=False,
    samples=_vecdot_samples)
def linalg_vecdot(x, y, *, dim=-1):
    """The dot products of the vectors of ``x`` and ``y`` (broadcast) along ``dim``, ``x``
    conjugated."""
    _check_same_dtype("linalg.vecdot", "x", x, "y", y)
    if x._dtype.kind < 2:     # (neither floating nor complex)
        raise RuntimeError(f"linalg.vecdot: Expected a floating point or complex tensor as "
                           f"input. Got {_type_name(x._dtype)}")
    return (x.conj() * y).sum(dim)


def _vander_samples(make):
    return [Sample(make(3)), Sample(make(2, 3), N=4), Sample(make(4), N=2)]


@op(kind="composite", inputs=("x",), method=False, function=False, samples=_vander_samples)
def linalg_vander(x, *, N=None):
    """The Vandermonde matrices of the vectors of ``x``: increasing powers 0 .. N-1 (``N``
    defaults to the vectors' length)."""
    if x._dtype is bool_:
        raise RuntimeError("linalg.vander supports floating point, complex, and integer "
                           "tensors, but got Bool")
    if x.dim() == 0:
        x = x.unsqueeze(0)
    count = x.shape[-1] if N is None else N
    if count <= 1:
        raise RuntimeError("N must be greater than 1.")
    column = x.unsqueeze(-1)
    # cumulative products, not powers: their derivative is finite at 0
    powers = column.expand(tuple(x.shape) + (count - 1,)).cumprod(-1)
    return REGISTRY["cat"]((REGISTRY["ones_like"](column), powers), -1)


# --------------------------------------------------------------------------- rank, cond

def _tolerance_samples(make):
    low_rank = make(4, 2) @ make(2, 3)
    return [Sample(make(3, 3)), Sample(low_rank), Sample(low_rank, rtol=0.9),
            Sample(make(2, 3, 4), atol=1.0), Sample(_spd(make, 2), hermitian=True),
            Sample(low_rank, atol=0.5, rtol=0.1), Sample(_complex(make)(3, 4)),
            Sample(_spd(_complex(make)), hermitian=True)]


def singular_value_cutoff(A, S, atol, rtol):
    """``max(atol, rtol * largest singular value)`` per matrix (tensors or numbers), with
    PyTorch's default: ``rtol = eps * max(m, n)`` unless a positive ``atol`` is given."""
    largest = S.amax(-1) if S.shape[-1] else S.new_zeros(S.shape[:-1])
    default = float(np.finfo(A._dtype.np).eps) * max(A.shape[-2], A.shape[-1])
    if rtol is None:
        if atol is None:
            rtol = default
        elif hasattr(atol, "_sizes"):
            rtol = REGISTRY["where"](atol > 0, 0.0, default)
        else:
            rtol = 0.0 if atol > 0 else default
    cutoff = largest * rtol
    return cutoff if atol is None else REGISTRY["maximum"](cutoff, cutoff.new_tensor(atol)
                                                          if not hasattr(atol, "_sizes")
                                                          else atol.to(cutoff.dtype))


@op(out=True, out_casting=True, kind="composite", inputs=("A",), method=False, function=False,
    differentiable=False,
    samples=_tolerance_samples)
def linalg_matrix_rank(A, *, atol=None, rtol=None, hermitian=False):
    """The number of singular values (absolute eigenvalues, ``hermitian``) of each matrix
    of ``A`` above ``max(atol, rtol * largest)``."""
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at "
                           "least 2 dimensions.")
    if A._dtype not in (float32, float64, complex64, complex128) and \
            not A._dtype.is_floating_point:   # (half types: the decomposition refuses them)
        raise RuntimeError("This function doesn't handle types other than float and double")
    S = linalg_eigh(A)[0].abs() if hermitian else linalg_svd(A, False)[1]
    cutoff = singular_value_cutoff(A, S, atol, rtol)
    return (S > cutoff.unsqueeze(-1)).sum(-1)


_COND_ORDERS = (None, 2, -2, "fro", "nuc", math.inf, -math.inf, 1, -1)


def _cond_samples(make):
    return [Sample(_spd(make) - make(3, 3))] + [
        Sample(_square_samples(make)[1].args[0], p) for p in _COND_ORDERS[1:]] + [
        Sample(make(4, 3)), Sample(make(2, 4), -2),
        Sample(_square_samples(make)[-1].args[0]),
        Sample(_square_samples(make)[-1].args[0], "fro")]


@op(out=True, out_casting=True, kind="composite", inputs=("A",), method=False, function=False,
    samples=_cond_samples)
def linalg_cond(A, p=None):
    """The condition number of each matrix of ``A`` in the ``p``-norm: ``norm(A) *
    norm(inv(A))``; through the singular values for ``p`` None, 2, -2 (any shape), else
    square matrices, infinite when singular."""
    if isinstance(p, bool) or p not in _COND_ORDERS:
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if A.dim() < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    through_svd = p in (None, 2, -2)
    if not through_svd:
        check_matrix(A, f"linalg.cond(ord={p})")
    if 0 in A.shape[-2:]:
        return A.new_zeros(A.shape[:-2])          # PyTorch's value for empty matrices
    if through_svd:
        S = linalg_svd(A, False)[1]
        largest, smallest = S.amax(-1), S.amin(-1)
        return smallest / largest if p == -2 else largest / smallest
    from microtensor import linalg
    inverse, info = linalg_inv_ex(A)
    singular = info > 0
    # a singular matrix's inverse (infinities) is left out of the norm: its result is inf
    inverse = REGISTRY["where"](singular.unsqueeze(-1).unsqueeze(-1), A.new_zeros(()),
                                inverse)
    value = linalg.matrix_norm(A, p) * linalg.matrix_norm(inverse, p)
    return REGISTRY["where"](singular, value.new_full((), math.inf), value)


# --------------------------------------------------------------------------- triangular

def _solve_upper(a, b):
    """``x`` with ``a @ x = b`` for upper triangular ``a`` (batch dims broadcast).  LAPACK's
    LU of an upper triangular matrix finds every pivot on the diagonal and eliminates
    nothing, so ``np.linalg.solve`` is back substitution; with a zero on a diagonal it
    refuses, and the substitution is written out, giving PyTorch's infinities."""
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if np.all(np.diagonal(a, 0, -2, -1) != 0):
        return np.linalg.solve(a, b)
    x = np.zeros(b.shape, np.result_type(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in reversed(range(a.shape[-1])):
            known = (a[..., i:i + 1, i + 1:] @ x[..., i + 1:, :])[..., 0, :]
            x[..., i, :] = (b[..., i, :] - known) / a[..., i, i, None]
    return x


def solve_triangular_array(a, b, upper, left=True, unitriangular=False):
    """The triangular solve on arrays: only the ``upper`` (or lower) triangle of ``a`` is
    read, its diagonal taken as ones when ``unitriangular``."""
    a = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        index = np.arange(a.shape[-1])
        a[..., index, index] = 1
    if not left:
        a, b, upper = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), not upper
    if not upper:
        # reversing rows and columns makes a lower triangular matrix upper triangular
        a, b = a[..., ::-1, ::-1], b[..., ::-1, :]
    x = _solve_upper(a, b)
    if not upper:
        x = x[..., ::-1, :]
    return np.swapaxes(x, -1, -2) if not left else x


def _solve_triangular_samples(make):
    return [Sample(_triangular(make, upper=True), make(3, 2), upper=True),
            Sample(_triangular(make, 2), make(2, 3, 1), upper=False),
            Sample(_triangular(make, 2, upper=True), make(4, 3), upper=True, left=False),
            Sample(_triangular(make, unit=True), make(2, 1, 3, 2), upper=False,
                   unitriangular=True),
            Sample(_triangular(make, upper=True, unit=True) + make(3, 3).tril(-1), make(2, 3),
                   upper=True, left=False, unitriangular=True),
            Sample(_triangular(_complex(make), upper=True), _complex(make)(3, 2), upper=True)]


def _triangle(G, upper, unitriangular):
    """``G`` on the entries a triangular solve reads."""
    diagonal = 1 if unitriangular else 0
    return G.triu(diagonal) if upper else G.tril(-diagonal)


@op(out=True, inputs=("A", "B"), method=False, function=False, samples=_solve_triangular_samples)
def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """``X`` with ``A @ X = B`` (``left=False``: ``X @ A = B``) for triangular ``A``: only
    its ``upper`` (or lower) triangle is read (without the diagonal if
    ``unitriangular``); batch dims broadcast."""
    fn = "linalg.solve_triangular"
    if B.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor B must have at least 2 dimensions.")
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    if A._sizes[-1] != A._sizes[-2]:
        raise RuntimeError(f"{fn}: A must be batches of square matrices, but they are "
                           f"{A._sizes[-2]} by {A._sizes[-1]} matrices")
    if A._dtype not in (float32, float64, complex64, complex128):
        raise NotImplementedError(f"\"triangular_solve_cpu\" not implemented for "
                                  f"'{_type_name(A._dtype)}'")
    _check_same_dtype(fn, "A", A, "B", B)
    n = A._sizes[-1]
    rows, columns = B._sizes[-2:]
    if (rows if left else columns) != n:
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {rows}x{columns})")
    _broadcast_shapes(B._sizes[:-2], A._sizes[:-2])     # PyTorch's error when they do not
    return _column_major(_on_device_of(A, solve_triangular_array(_host(A), _host(B), upper,
                                                                 left, unitriangular)))


@linalg_solve_triangular.def_joint_derivative
def linalg_solve_triangular(grad, A, upper, left, unitriangular, result, A_shape, B_shape):
    gB = linalg_solve_triangular(A.mH, grad, upper=not upper, left=left,
                                 unitriangular=unitriangular)
    gA = -(gB @ result.mH) if left else -(result.mH @ gB)
    return (_triangle(gA, upper, unitriangular).sum_to_size(A_shape),
            gB.sum_to_size(B_shape))


linalg_solve_triangular.def_batch_rule(two_matrix_batch_rule)


def _triangular_solve_samples(make):
    return [Sample(make(3, 2), _triangular(make, upper=True)),
            Sample(make(2, 3, 2), _triangular(make), False),
            Sample(make(3, 1), _triangular(make, 2, upper=True), True, True),
            Sample(make(3, 2), _triangular(make, unit=True), False, False, True)]


@op(out=True, out_layout="column-major", kind="composite", inputs=("self", "A"),
    samples=_triangular_solve_samples)
def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
    """``(solution, cloned_coefficient)``: ``X`` with ``op(A) @ X = self`` (``op``: the
    transpose when ``transpose``), and a copy of ``A`` broadcast to the batch shape."""
    if self.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected b to have at least 2 "
                           f"dimensions, but it has {self.dim()} dimensions instead")
    if A.dim() < 2:
        raise RuntimeError(f"torch.triangular_solve: Expected A to have at least 2 "
                           f"dimensions, but it has {A.dim()} dimensions instead")
    _check_same_dtype(None, "b", self, "A", A, end=" instead.")
    solution = linalg_solve_triangular(A.mT if transpose else A, self,
                                       upper=upper != transpose, unitriangular=unitriangular)
    batch = tuple(solution.shape[:-2])
    return TriangularSolveResult(solution, A.expand(batch + tuple(A.shape[-2:])).clone())


@op(out=True, out_casting=True, out_layout="contiguous", inputs=("self", "input2"),
    samples=lambda make: [Sample(make(3, 2), _triangular(make)),
                          Sample(make(2, 3, 1), _triangular(make, upper=True), True),
                          Sample(make(3, 2), _triangular(make, 2))])
def cholesky_solve(self, input2, upper=False):
    """``X`` with ``A @ X = self`` for ``A = L Lᴴ`` given its Cholesky factor ``input2``
    (``Uᴴ U`` when ``upper``), of which only that triangle is read (two triangular
    solves).  The gradient is PyTorch's: that of ``(L Lᴴ)⁻¹ self`` with the factor read
    whole."""
    if self.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {self.dim()} "
                           "dimensions instead")
    if input2.dim() < 2:
        raise RuntimeError(f"u should have at least 2 dimensions, but has {input2.dim()} "
                           "dimensions instead")
    _check_same_dtype(None, "b", self, "A", input2, end=" instead.")
    n = input2.shape[-1]
    if input2.shape[-2] != n:
        raise RuntimeError(f"A must be batches of square matrices, but they are "
                           f"{input2.shape[-2]} by {n} matrices")
    if self.shape[-2] != n:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is "
                           f"{n} by {n} but each b matrix is {self.shape[-2]} by "
                           f"{self.shape[-1]}")
    lower = input2.mH if upper else input2
    half = linalg_solve_triangular(lower, self, upper=False)
    return linalg_solve_triangular(lower.mH, half, upper=True)


@cholesky_solve.def_joint_derivative     # the factor's gradient is made from self's
def cholesky_solve(grad, input2, upper, result):
    g_self = cholesky_solve(grad, input2, upper)
    common = g_self @ result.mH
    common = common + common.mH
    return g_self, -(input2 @ common) if upper else -(common @ input2)


cholesky_solve.def_batch_rule(two_matrix_batch_rule)


@op(out=True, out_casting=True, out_layout="lapack", kind="composite",
    samples=lambda make: [Sample(_triangular(make)),
                                             Sample(_triangular(make, 2, upper=True), True)])
def cholesky_inverse(self, upper=False):
    """The inverse of ``A = L Lᴴ`` (``Uᴴ U`` when ``upper``) from its Cholesky factor."""
    check_matrix(self, "cholesky_inverse")
    zero = self.diagonal(0, -2, -1) == 0
    # LAPACK's potri reports the first zero on each diagonal, counted from 1 (0: none)
    info = (zero.long().argmax(-1) + 1) * zero.any(-1)
    raise_for_info(info, "cholesky_inverse", "inv", self.dim() > 2)
    identity = _eye_like(self, self.shape[-1]).expand(tuple(self.shape))
    return cholesky_solve(identity, self, upper)


# --------------------------------------------------------------------------- LU

def _pivot_magnitude(column):
    """LAPACK's i?amax measure: |x| for real values, |Re x| + |Im x| for complex ones."""
    if np.iscomplexobj(column):
        return np.abs(column.real) + np.abs(column.imag)
    return np.abs(column)


def lu_array(a):
    """LAPACK's getrf on a (batch of) matrix array, as arrays ``(LU, pivots, info)``:
    partial pivoting (the first largest magnitude of the column, as LAPACK's idamax), a
    Python step per column, every matrix of the batch in each; a zero pivot leaves its
    column unscaled and sets ``info`` to its 1-based index (the first such one)."""
    *batch, m, n = a.shape
    k = min(m, n)
    lu = np.array(a, dtype=a.dtype).reshape(math.prod(batch), m, n)   # m or n may be 0
    count = lu.shape[0]
    pivots = np.empty((count, k), np.int32)
    info = np.zeros(count, np.int32)
    every = np.arange(count)
    for j in range(k):
        p = j + np.argmax(_pivot_magnitude(lu[:, j:, j]), axis=-1)
        pivots[:, j] = p + 1
        row = lu[every, j].copy()
        lu[every, j] = lu[every, p]
        lu[every, p] = row
        pivot = lu[:, j, j]
        zero = pivot == 0
        info[(info == 0) & zero] = j + 1
        column = lu[:, j + 1:, j]
        column /= np.where(zero, 1, pivot)[:, None]
        lu[:, j + 1:, j + 1:] -= column[:, :, None] * lu[:, j, None, j + 1:]
    return (lu.reshape(a.shape), pivots.reshape(tuple(batch) + (k,)),
            info.reshape(tuple(batch)))


def _lu_samples(make):
    return [Sample(make(3, 3)), Sample(make(2, 3, 3)), Sample(make(4, 2)), Sample(make(2, 4)),
            Sample(make(3, 3), check_errors=True), Sample(_complex(make)(2, 3, 3))]


@op(out=True, inputs=("A",), method=False, function=False, samples=_lu_samples)
def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    """``(LU, pivots, info)``: ``A = P L U`` packed as LAPACK's getrf (``L`` unit lower
    below the diagonal, ``U`` on and above it), 1-based int32 row swaps ``pivots``, and per
    matrix the 1-based index of the first zero pivot (0: none)."""
    fn = "torch.linalg.lu_factor_ex"
    if A.dim() < 2:
        raise RuntimeError(f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got "
                           f"size: {list(A.shape)} instead")
    if A._dtype not in (float32, float64, complex64, complex128):
        raise NotImplementedError(f"\"lu_cpu\" not implemented for '{_type_name(A._dtype)}'")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the "
                           "CPU")
    lu, pivots, info = lu_array(_host(A))
    if check_errors:
        raise_for_info(info, fn, "lu", A.dim() > 2)
    return (_column_major(_on_device_of(A, lu)), _on_device_of(A, pivots, int32),
            _on_device_of(A, info, int32))


def _lu_factor_backward(gLU, P, L, U):
    """The gradient of ``A`` from that of the packed ``LU`` (PyTorch's linalg_lu_backward,
    with the gradients of ``L`` and ``U`` read from the triangles of ``gLU``)."""
    m, n = gLU.shape[-2:]
    k = min(m, n)
    gL, gU = gLU[..., :, :k].tril(-1), gLU[..., :k, :].triu()
    if m <= n:
        # A = P L [U1 U2]: L and U1 are the LU of the first m columns
        inner = (L.mH @ gL - gU @ U.mH).tril(-1)
        inner = linalg_solve_triangular(U[..., :, :m].mH, inner, upper=False, left=False)
        inner = REGISTRY["cat"]((inner + gU[..., :, :m], gU[..., :, m:]), -1)
        gA = linalg_solve_triangular(L.mH, inner, upper=True, unitriangular=True)
    else:
        # A = P [L1; L2] U: L1 and U are the LU of the first n rows
        inner = (gU @ U.mH - L.mH @ gL).triu()
        inner = linalg_solve_triangular(L[..., :n, :].mH, inner, upper=True,
                                        unitriangular=True)
        inner = REGISTRY["cat"]((inner + gL[..., :n, :], gL[..., n:, :]), -2)
        gA = linalg_solve_triangular(U.mH, inner, upper=False, left=False)
    return P @ gA


@linalg_lu_factor_ex.def_derivative("A")
def linalg_lu_factor_ex(grad, result0, result1):
    return _lu_factor_backward(grad[0], *_lu_unpack(result0, result1))


linalg_lu_factor_ex.def_batch_rule(one_matrix_batch_rule)


def permutation_array(pivots, m, dtype):
    """The permutation matrices ``P`` (``A = P L U``) of LAPACK's 1-based row swaps: the
    swaps applied in order to the row indices, a Python step per swap."""
    batch, k = pivots.shape[:-1], pivots.shape[-1]
    count = math.prod(batch)    # not -1 in the reshapes: m or k may be 0
    rows = np.broadcast_to(np.arange(m), batch + (m,)).reshape(count, m).copy()
    swaps = pivots.reshape(count, k).astype(np.int64) - 1
    every = np.arange(rows.shape[0])
    for j in range(k):
        row = rows[:, j].copy()
        rows[:, j] = rows[every, swaps[:, j]]
        rows[every, swaps[:, j]] = row
    # row i of PᵀA is row rows[i] of A: P[rows[i], i] = 1
    return (rows.reshape(batch + (1, m)) == np.arange(m)[:, None]).astype(dtype)


def _lu_unpack_samples(make):
    def factors(*shape):
        return linalg_lu_factor_ex(make(*shape))[:2]
    return [Sample(*factors(3, 3)), Sample(*factors(2, 3, 3)), Sample(*factors(4, 2)),
            Sample(*factors(2, 4)), Sample(*factors(3, 3), unpack_pivots=False),
            Sample(*factors(3, 3), unpack_data=False)]


@op(inputs=("LU_data",), method=False, function=False, samples=_lu_unpack_samples)
def _lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` of a packed LU factorization and its pivots (``L``, ``U`` or ``P``
    empty when not unpacked)."""
    if LU_pivots._dtype is not int32:
        raise RuntimeError("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor "
                           "of torch.int32 dtype.\nNote: this function is intended to be "
                           "used with the output produced by torch.linalg.lu_factor")
    m, n = LU_data._sizes[-2:]
    k = min(m, n)
    if LU_pivots._sizes[-1:] != (k,) or LU_pivots._sizes[:-1] != LU_data._sizes[:-2]:
        raise RuntimeError(f"torch.lu_unpack: Expected LU_pivots of shape "
                           f"{list(LU_data._sizes[:-2]) + [k]}, but got "
                           f"{list(LU_pivots._sizes)}")
    empty = _on_device_of(LU_data, np.empty((0,), LU_data._dtype.np))
    a = _host(LU_data)
    if unpack_data:
        L = np.tril(a[..., :, :k], -1) + np.eye(m, k, dtype=a.dtype)
        L, U = _on_device_of(LU_data, L), _on_device_of(LU_data, np.triu(a[..., :k, :]))
    else:
        L = U = empty
    if not unpack_pivots:
        return empty, L, U
    pivots = _host(LU_pivots)
    if pivots.size and (pivots.min() < 1 or pivots.max() > m):
        raise RuntimeError("pivots passed to lu_unpack must be between 1 and LU.size(-2) "
                           "inclusive.Did you properly pass the result of lu_factor?")
    P = permutation_array(pivots, m, a.dtype)
    return _on_device_of(LU_data, P), L, U


@_lu_unpack.def_derivative("LU_data")
def _lu_unpack(grad, LU_data_shape):
    _, gL, gU = grad
    m, n = LU_data_shape[-2:]
    k = min(m, n)
    pad = REGISTRY["pad"]
    gLU = None
    if gL is not None and gL.numel():
        gLU = pad(gL.tril(-1), (0, n - k))
    if gU is not None and gU.numel():
        gU = pad(gU.triu(), (0, 0, 0, m - k))
        gLU = gU if gLU is None else gLU + gU
    return gLU


@_lu_unpack.def_batch_rule
def _lu_unpack(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    size = batch_size(level)
    LU, pivots = (front_or_expanded(bound.pop(name), level, size)
                  for name in ("LU_data", "LU_pivots"))
    result = call(op, (LU, pivots), bound)
    # a factor not unpacked is an empty placeholder: one per sample
    return tuple(wrap(r if r.dim() > 1 else r.new_empty((size, 0)), 0, level)
                 for r in result)


# torch.func.vmap gives one empty placeholder for all samples where a factor is not
# unpacked, the loop one per sample (as here): the composite's samples unpack all three
@op(out=True, kind="composite", inputs=("LU_data",), method=False,
    samples=lambda make: _lu_unpack_samples(make)[:4])
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    return LUUnpackResult(*_permutation_detached(_lu_unpack(LU_data, LU_pivots, unpack_data,
                                                            unpack_pivots)))


def _permutation_detached(factors):
    """``(P, L, U)`` with ``P`` cut from the graph: a permutation has no gradient, and
    PyTorch's does not require grad."""
    P, L, U = factors
    return P.detach(), L, U


@op(out=True, kind="composite", inputs=("A",), method=False, function=False,
    samples=lambda make: _lu_samples(make)[:4])
def linalg_lu(A, *, pivot=True):
    """``(P, L, U)`` with ``A = P L U``."""
    LU, pivots, _ = linalg_lu_factor_ex(A, pivot=pivot)
    return LUResult(*_permutation_detached(_lu_unpack(LU, pivots)))


def _lu_solve_samples(make):
    def factors(*shape):
        return linalg_lu_factor_ex(_square_samples(make)[1].args[0].reshape(shape))[:2]
    return [Sample(*factors(2, 3, 3), make(2, 3, 2)),
            Sample(*factors(2, 3, 3), make(3, 1), adjoint=True),
            Sample(*factors(2, 3, 3), make(2, 3), left=False),
            Sample(*factors(2, 3, 3), make(1, 3), left=False, adjoint=True),
            Sample(*linalg_lu_factor_ex(_square_samples(make)[-1].args[0])[:2],
                   _complex(make)(3, 2), adjoint=True)]


@op(out=True, kind="composite", inputs=("LU", "B"), method=False, function=False,
    samples=_lu_solve_samples)
def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """``X`` with ``A @ X = B`` for ``A = P L U`` given as ``linalg.lu_factor`` returns it
    (``adjoint``: ``Aᵀ``; ``left=False``: ``X @ A = B``); batch dims broadcast."""
    fn = "linalg.lu_solve"
    if B.dim() < 2:
        raise RuntimeError(f"{fn}: The input tensor B must have at least 2 dimensions.")
    check_matrix(LU, fn)
    _check_same_dtype(fn, "LU", LU, "B", B)
    if pivots._dtype is not int32:
        raise RuntimeError(f"{fn}: pivots should be a Tensor of scalar type torch.int32")
    n = LU.shape[-1]
    if pivots.shape[-1] != n:
        raise RuntimeError(f"{fn}: Number of pivots per batch should be same as the "
                           "dimension of the matrix")
    rows, columns = B.shape[-2:]
    if (rows if left else columns) != n:
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({n}x{n} and {rows}x{columns})")
    P = _lu_unpack(LU, pivots, unpack_data=False)[0]

    def solve(A, X, upper, unitriangular=False):
        return linalg_solve_triangular(A, X, upper=upper, left=left,
                                       unitriangular=unitriangular)
    # A = P L U: the triangles of LU are read by the triangular solves
    if left and not adjoint:
        return solve(LU, solve(LU, P.mT @ B, False, True), True)
    # PyTorch's layouts: column-major for left=True, row-major (its transposed solution)
    # for left=False
    if left:
        return _column_major(P @ solve(LU.mH, solve(LU.mH, B, False), True, True))
    if not adjoint:
        return solve(LU, solve(LU, B, True), False, True) @ P.mT
    return solve(LU.mH, solve(LU.mH, B @ P, True, True), False).contiguous()


def _solve_ex_samples(make):
    return _solve_samples(make)[:3] + [Sample(_square_samples(make)[0].args[0], make(2, 3),
                                              left=False)]


@op(out=True, kind="composite", inputs=("A", "B"), method=False, function=False,
    samples=_solve_ex_samples)
def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """``(result, info)``: ``linalg.solve``'s solution through the LU factorization, and
    its ``info`` (a singular matrix gives infinities instead of an error)."""
    check_matrix(A, "linalg.solve_ex")
    _check_same_dtype("linalg.solve", "A", A, "B", B)
    vector = _vector_rhs(A, B)
    rhs = B.unsqueeze(-1) if vector else B
    if rhs.shape[-2 if left else -1] != A.shape[-1]:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{A.shape[-1]} "
                           f"and {rhs.shape[-2]}x{rhs.shape[-1]})")
    LU, pivots, info = linalg_lu_factor_ex(A)
    if check_errors:
        raise_for_info(info, "torch.linalg.solve_ex", "solve", A.dim() > 2)
    result = linalg_lu_solve(LU, pivots, rhs, left=left)
    return SolveExResult(result.squeeze(-1) if vector else result, info)


@op(out=True, kind="composite", inputs=("A",), method=False, function=False,
    samples=_square_samples)
def linalg_inv_ex(A, *, check_errors=False):
    """``(inverse, info)``: the inverse through the LU factorization, and its ``info``
    (a singular matrix gives infinities instead of an error)."""
    check_matrix(A, "linalg.inv_ex")
    LU, pivots, info = linalg_lu_factor_ex(A)
    if check_errors:
        raise_for_info(info, "linalg.inv_ex", "inv", A.dim() > 2)
    identity = _eye_like(A, A.shape[-1]).expand(tuple(A.shape))
    return InvExResult(linalg_lu_solve(LU, pivots, identity), info)


# --------------------------------------------------------------------------- cholesky_ex

def cholesky_array(a):
    """``(L, info)`` of the symmetric matrices whose lower triangles ``a`` holds: NumPy's
    LAPACK when every matrix is positive-definite, else written out a column at a time
    (every matrix in each step) to find each failing matrix's ``info``, the order of its
    first leading minor that is not positive-definite, where LAPACK's potrf stops (its
    partial factor, the failing pivot on the diagonal, is returned)."""
    try:
        return np.linalg.cholesky(_hermitian_from_lower(a)), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        pass
    L = np.tril(a).reshape((-1,) + a.shape[-2:])
    info = np.zeros(L.shape[0], np.int32)
    for j in range(a.shape[-1]):
        going = info == 0
        pivot = L[:, j, j].real - np.einsum("bk,bk->b", L[:, j, :j], L[:, j, :j].conj()).real
        failed = going & ~(pivot > 0)
        info[failed] = j + 1
        going &= ~failed
        L[:, j, j] = np.where(going, np.sqrt(np.where(going, pivot, 1)),
                              np.where(failed, pivot, L[:, j, j]))
        below = (L[:, j + 1:, j] - (L[:, j + 1:, :j] @ L[:, j, :j, None].conj())[..., 0]) / \
            L[:, j, j, None]
        L[:, j + 1:, j] = np.where(going[:, None], below, L[:, j + 1:, j])
    return L.reshape(a.shape), info.reshape(a.shape[:-2])


@op(out=True, inputs=("A",), method=False, function=False,
    samples=lambda make: _spd_samples(make) + [Sample(_spd(make), check_errors=True)])
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """``(L, info)``: ``linalg.cholesky``'s factor, and per matrix the order of the first
    leading minor that is not positive-definite (0: none) instead of an error."""
    check_matrix(A, "linalg.cholesky")
    L, info = cholesky_array(_host(A))
    if check_errors:
        raise_for_info(info, "linalg.cholesky_ex", "cholesky", A.dim() > 2)
    return (_column_major(_on_device_of(A, np.conj(np.swapaxes(L, -1, -2)) if upper else L)),
            _on_device_of(A, info, int32))


@linalg_cholesky_ex.def_derivative("A")
def linalg_cholesky_ex(grad, upper, result0):
    return linalg_cholesky.derivative.functions()[0](grad[0], upper, result0)


linalg_cholesky_ex.def_batch_rule(one_matrix_batch_rule)


# --------------------------------------------------------------------------- Householder

def _householder_samples(make):
    return [Sample(make(4, 3), make(3)), Sample(make(2, 3, 3), make(2, 2)),
            Sample(make(3, 2), make(1)), Sample(_complex(make)(4, 3), _complex(make)(2))]


@op(out=True, out_casting=True, kind="composite", inputs=("A", "tau"), method=False, function=False,
    samples=_householder_samples)
def linalg_householder_product(A, tau):
    """The first ``n`` columns of ``H_1 ... H_k`` (``A``: m x n), ``H_i = I - tau_i v_i
    v_iᴴ`` with ``v_i`` column i of ``A`` below the diagonal and 1 on it (the ``Q`` of
    LAPACK's geqrf reflectors): one product per reflector, every matrix of the batch in
    each."""
    fn = "torch.linalg.householder_product"
    if A.dim() < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    if tau.dim() < 1:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    if m < n:
        raise RuntimeError(f"{fn}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    if n < k:
        raise RuntimeError(f"{fn}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"{fn}: Expected batch dimensions of tau to be equal to "
                           f"input.shape[:-2], but got {list(tau.shape[:-1])}")
    if tau._dtype is not A._dtype:
        raise RuntimeError(f"{fn}: tau dtype {_type_name(tau._dtype)} does not match input "
                           f"dtype {_type_name(A._dtype)}")
    refuse_integral(A._dtype, "orgqr_cpu")
    eye_mk = eye(m, n, dtype=A.dtype, device=A.device)
    reflectors = A.tril(-1) + eye_mk
    Q = eye_mk.expand(tuple(A.shape)).clone()
    for i in reversed(range(k)):
        v = reflectors[..., :, i:i + 1]
        Q = Q - (tau[..., i:i + 1].unsqueeze(-1) * v) @ (v.mH @ Q)
    return _column_major(Q)


@op(out=True, out_casting=True, out_layout="lapack", kind="composite", inputs=("self", "input2"),
    samples=lambda make: _householder_samples(make)[:2])
def orgqr(self, input2):
    """``linalg.householder_product(self, input2)``."""
    return linalg_householder_product(self, input2)


# --------------------------------------------------------------------------- tensors

def _tensorinv_samples(make):
    return [Sample((_spd(make, n=6) - make(6, 6) * 0.3).reshape(6, 2, 3), 1),
            Sample((_spd(make, n=4) + make(4, 4) * 0.3).reshape(2, 2, 2, 2), ind=2),
            Sample((_spd(make, n=6) + make(6, 6) * 0.3).reshape(2, 3, 6), 2)]


@op(out=True, out_casting=True, kind="composite", inputs=("A",), method=False, function=False,
    samples=_tensorinv_samples)
def linalg_tensorinv(A, ind=2):
    """The inverse of ``A`` for ``tensordot(A, X, ind)``: ``A`` read as a square matrix
    of its first ``ind`` dims by the others; the result has shape ``A.shape[ind:] +
    A.shape[:ind]``."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, columns = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    size, other = math.prod(rows), math.prod(columns)
    if size != other:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[ind:]) "
                           f"== prod(self.shape[:ind]), but got {other} != {size}")
    return linalg_inv(A.reshape(size, size)).reshape(columns + rows)


def _tensorsolve_samples(make):
    A = _tensorinv_samples(make)[0].args[0]
    return [Sample(A, make(6)), Sample(A.reshape(2, 3, 2, 3), make(2, 3)),
            Sample(A.reshape(2, 3, 6).movedim(-1, 0), make(2, 3), (0,))]


@op(out=True, out_casting=True, kind="composite", inputs=("A", "B"), method=False, function=False,
    samples=_tensorsolve_samples)
def linalg_tensorsolve(A, B, dims=None):
    """``X`` with ``tensordot(A, X, X.dim()) = B``; ``dims``: dims of ``A`` moved to the
    end first."""
    if dims is not None:
        dims = tuple(dims)
        A = A.movedim(dims, tuple(range(A.dim() - len(dims), A.dim())))
    shape = tuple(A.shape[B.dim():])
    size, other = math.prod(shape), B.numel()
    if size != other:
        raise RuntimeError(f"Expected self to satisfy the requirement prod(self.shape[other."
                           f"ndim:]) == prod(self.shape[:other.ndim]), but got {size} != "
                           f"{other}")
    return linalg_solve(A.reshape(size, size), B.reshape(size)).reshape(shape)


# --------------------------------------------------------------------------- top level

@op(out=True, out_casting=True, out_layout="contiguous", kind="composite", inputs=("A",),
    samples=lambda make: [
    Sample(make(3, 3)), Sample(make(2, 3, 3), get_infos=True), Sample(make(4, 2), True)])
def lu(A, pivot=True, get_infos=False):
    """``(LU, pivots)`` of ``linalg.lu_factor`` (``get_infos``: and ``info``); a zero
    pivot does not raise, as PyTorch's."""
    result = LUWithInfo(*linalg_lu_factor_ex(A, pivot=pivot))
    return result if get_infos else result[:2]


@op(out=True, out_layout="column-major", kind="composite", inputs=("self", "LU_data"),
    samples=lambda make: [
    Sample(s.args[2], *s.args[:2]) for s in _lu_solve_samples(make)[:2]])
def lu_solve(self, LU_data, LU_pivots):
    """``linalg.lu_solve(LU_data, LU_pivots, self)``."""
    return linalg_lu_solve(LU_data, LU_pivots, self)


@op(out=True, kind="composite",
    samples=lambda make: [Sample(make(4, 3)), Sample(make(2, 3, 3), False)])
def qr(self, some=True):
    """``linalg.qr(self, 'reduced' if some else 'complete')``."""
    return QRTuple(*linalg_qr(self, "reduced" if some else "complete"))


# --------------------------------------------------------------------------- LDLᵀ
# LAPACK's sytf2/sytrs for the lower triangle (Bunch-Kaufman pivoting: 1x1 and 2x2 blocks
# of D; negative pivots mark a 2x2 block), written out over the whole batch at once: each
# matrix of the batch keeps its own column pointer, since the block sizes differ.

_BUNCH_KAUFMAN_ALPHA = (1 + math.sqrt(17)) / 8


def _swap_rows(M, first, second, where):
    """Rows ``first[b]`` and ``second[b]`` of each ``M[b]`` swapped where ``where[b, :]``
    (a mask over the columns)."""
    every = np.arange(M.shape[0])
    a, b = M[every, first].copy(), M[every, second].copy()
    M[every, first] = np.where(where, b, a)
    M[every, second] = np.where(where, a, b)


def _refuse_complex_hermitian(A, hermitian, fn):
    """The LDLᴴ of complex Hermitian matrices (LAPACK's hetrf) is not written here."""
    if hermitian and A._dtype.is_complex:
        raise NotImplementedError(f"{fn}: complex Hermitian matrices (hermitian=True) are not "
                                  "supported by microtensor; complex symmetric ones "
                                  "(hermitian=False) are")


def ldl_array(a):
    """``(LD, pivots, info)`` of the symmetric matrices whose lower triangles ``a`` holds:
    LAPACK's sytf2 (``info``: the 1-based index of the first zero of D, 0 if none)."""
    batch, n = a.shape[:-2], a.shape[-1]
    M = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)
    count = math.prod(batch)          # not -1 in the reshape: a 0x0 matrix has no size
    M = M.reshape((count, n, n)).copy()
    every, index = np.arange(count), np.arange(n)
    pivots = np.zeros((count, n), np.int32)
    info = np.zeros(count, np.int32)
    k = np.zeros(count, np.int64)
    while (k < n).any():
        active = k < n
        kc = np.minimum(k, n - 1)
        column = _pivot_magnitude(M[every, :, kc])
        below = np.where(index > kc[:, None], column, -1.0)
        imax = np.argmax(below, -1)                # the first largest, as LAPACK's idamax
        colmax = np.maximum(below.max(-1), 0.0)
        absakk = column[every, kc]
        row = _pivot_magnitude(M[every, imax])
        rowmax = np.where((index >= kc[:, None]) & (index != imax[:, None]), row, 0.0).max(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = (absakk >= _BUNCH_KAUFMAN_ALPHA * colmax) | \
                (absakk >= _BUNCH_KAUFMAN_ALPHA * colmax * (colmax / rowmax))
        zero = active & (np.maximum(absakk, colmax) == 0)
        info[zero & (info == 0)] = (kc + 1)[zero & (info == 0)]
        two = active & ~zero & ~keep & (row[every, imax] < _BUNCH_KAUFMAN_ALPHA * rowmax)
        kp = np.where(zero | keep, kc, imax)
        step = np.where(two, 2, 1)
        kk = np.minimum(kc + step - 1, n - 1)
        # the symmetric interchange of kk and kp in the trailing matrix
        trailing = active[:, None] & (index >= kc[:, None])
        _swap_rows(M, kk, kp, trailing)
        M_t = np.swapaxes(M, -1, -2)
        _swap_rows(M_t, kk, kp, trailing)
        rest = index > kk[:, None]
        block = (active & ~zero)[:, None, None] & rest[:, :, None] & rest[:, None, :]
        x = np.where(rest, M[every, :, kc], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            # one row of D: a 1x1 block
            d = M[every, kc, kc]
            one_step = np.where((active & ~zero & ~two)[:, None], x / np.where(
                d == 0, 1, d)[:, None], 0.0)
            # a 2x2 block [[a, b], [b, c]]: the rows of D⁻¹ applied to columns k, k+1
            k1 = np.minimum(kc + 1, n - 1)
            y = np.where(rest, M[every, :, k1], 0.0)
            b = np.where(two, M[every, k1, kc], 1.0)
            d11, d22 = M[every, k1, k1] / b, M[every, kc, kc] / b
            scale = (1 / (d11 * d22 - 1)) / b
            wk = np.where(two[:, None], scale[:, None] * (d11[:, None] * x - y), 0.0)
            wk1 = np.where(two[:, None], scale[:, None] * (d22[:, None] * y - x), 0.0)
        update = x[:, :, None] * one_step[:, None, :] + x[:, :, None] * wk[:, None, :] + \
            y[:, :, None] * wk1[:, None, :]
        M -= np.where(block, update, 0.0)
        factor = active & ~zero
        M[every, :, kc] = np.where((factor & ~two)[:, None] & rest, one_step, M[every, :, kc])
        M[every, :, kc] = np.where(two[:, None] & rest, wk, M[every, :, kc])
        M[every, :, k1] = np.where(two[:, None] & rest, wk1, M[every, :, k1])
        pivots[every[active], kc[active]] = np.where(two, -(kp + 1), kp + 1)[active]
        pivots[every[two], k1[two]] = -(kp + 1)[two]
        k = np.where(active, k + step, k)
    return (np.tril(M).reshape(a.shape), pivots.reshape(batch + (n,)), info.reshape(batch))


def ldl_solve_array(LD, pivots, B):
    """``X`` with ``A X = B`` for ``A = L D Lᵀ`` packed by ``ldl_array``: LAPACK's sytrs
    (batch dims of ``LD``/``pivots`` and ``B`` broadcast)."""
    n = LD.shape[-1]
    batch = tuple(np.broadcast_shapes(LD.shape[:-2], B.shape[:-2]))
    LD = np.broadcast_to(LD, batch + (n, n)).reshape((-1, n, n))
    pivots = np.broadcast_to(pivots, batch + (n,)).reshape((-1, n)).astype(np.int64)
    X = np.array(np.broadcast_to(B, batch + B.shape[-2:]), dtype=np.result_type(LD, B))
    X = X.reshape((-1,) + B.shape[-2:])
    count = X.shape[0]
    every, index = np.arange(count), np.arange(n)
    columns = np.ones(X.shape[-1], bool)
    # L D Y = B: blocks forward
    k = np.zeros(count, np.int64)
    while (k < n).any():
        active = k < n
        kc = np.minimum(k, n - 1)
        two = active & (pivots[every, kc] < 0)
        k1 = np.minimum(kc + 1, n - 1)
        kk = np.where(two, k1, kc)
        kp = np.abs(pivots[every, kc]) - 1
        _swap_rows(X, kk, np.where(active, kp, kk), active[:, None] & columns)
        rest = index > kk[:, None]
        lk = np.where(rest & active[:, None], LD[every, :, kc], 0.0)
        lk1 = np.where(rest & two[:, None], LD[every, :, k1], 0.0)
        xk, xk1 = X[every, kc].copy(), X[every, k1].copy()
        X -= lk[:, :, None] * xk[:, None, :] + lk1[:, :, None] * xk1[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(two, LD[every, k1, kc], 1.0)[:, None]
            a_, c_ = LD[every, kc, kc][:, None] / b, LD[every, k1, k1][:, None] / b
            denominator = a_ * c_ - 1
            first = (c_ * (xk / b) - xk1 / b) / denominator
            second = (a_ * (xk1 / b) - xk / b) / denominator
            single = xk / LD[every, kc, kc][:, None]
        X[every, kc] = np.where(two[:, None], first, np.where(active[:, None], single, xk))
        X[every, k1] = np.where(two[:, None], second, X[every, k1])
        k = np.where(active, k + np.where(two, 2, 1), k)
    # Lᵀ X = Y: blocks backward
    k = np.full(count, n - 1, np.int64)
    while (k >= 0).any():
        active = k >= 0
        kc = np.maximum(k, 0)
        two = active & (pivots[every, kc] < 0)
        k0 = np.where(two, np.maximum(kc - 1, 0), kc)        # the block's first row
        rest = (index > kc[:, None]) & active[:, None]
        X[every, kc] -= np.einsum("bi,bij->bj", np.where(rest, LD[every, :, kc], 0.0), X)
        X[every, k0] -= np.einsum("bi,bij->bj", np.where(rest & two[:, None],
                                                          LD[every, :, k0], 0.0), X)
        kp = np.abs(pivots[every, kc]) - 1
        _swap_rows(X, kc, np.where(active, kp, kc), active[:, None] & columns)
        k = np.where(active, k - np.where(two, 2, 1), k)
    return X.reshape(batch + B.shape[-2:])


def _ldl_samples(make):
    def symmetric(*shape, make=make):
        M = make(*shape)
        return (M + M.mT).detach()
    return [Sample(symmetric(4, 4)), Sample(symmetric(3, 5, 5)), Sample(make(3, 3)),
            Sample(symmetric(3, 3), hermitian=True), Sample(symmetric(2, 2), check_errors=True),
            Sample(symmetric(3, 3, make=_complex(make)))]


# PyTorch has no derivative of the LDLᵀ factorization or its solve: neither has one here
@op(out=True, inputs=("A",), method=False, function=False, differentiable=False,
    samples=_ldl_samples)
def linalg_ldl_factor_ex(A, *, hermitian=False, check_errors=False):
    """``(LD, pivots, info)``: LAPACK's compact LDLᵀ of each symmetric matrix of ``A``
    (lower triangle read; ``hermitian`` is the same for real dtypes; complex ones are
    factored as symmetric, LAPACK's sytrf), its int32 Bunch-Kaufman pivots (negative for
    a 2x2 block of D) and the index of the first zero of D (0: none)."""
    fn = "torch.linalg.ldl_factor_ex"
    check_matrix(A, fn)
    _refuse_complex_hermitian(A, hermitian, fn)
    LD, pivots, info = ldl_array(_host(A))
    if check_errors:
        raise_for_info(info, fn, "ldl", A.dim() > 2)
    return (_column_major(_on_device_of(A, LD)), _on_device_of(A, pivots, int32),
            _on_device_of(A, info, int32))


linalg_ldl_factor_ex.def_batch_rule(one_matrix_batch_rule)


@op(out=True, kind="composite", inputs=("A",), method=False, function=False, differentiable=False,
    samples=lambda make: _ldl_samples(make)[:4])
def linalg_ldl_factor(A, *, hermitian=False):
    """``(LD, pivots)``; a zero in D raises (``ldl_factor_ex`` reports it instead)."""
    LD, pivots, info = linalg_ldl_factor_ex(A, hermitian=hermitian)
    raise_for_info(info, "torch.linalg.ldl_factor", "ldl", A.dim() > 2)
    return LDLFactorResult(LD, pivots)


def _ldl_solve_samples(make):
    factors = [linalg_ldl_factor_ex(s.args[0])[:2] for s in _ldl_samples(make)[:2]]
    return [Sample(*factors[0], make(4, 2)), Sample(*factors[1], make(3, 5, 1)),
            Sample(*factors[0], make(2, 4, 3), hermitian=True),
            Sample(*linalg_ldl_factor_ex(_ldl_samples(make)[-1].args[0])[:2],
                   _complex(make)(3, 2))]


@op(out=True, inputs=("LD", "B"), method=False, function=False, differentiable=False,
    samples=_ldl_solve_samples)
def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    """``X`` with ``A @ X = B`` for ``A`` factored by ``linalg.ldl_factor`` (batch dims of
    ``B`` broadcast)."""
    fn = "torch.linalg.ldl_solve"
    check_matrix(LD, fn)
    _refuse_complex_hermitian(LD, hermitian, fn)
    if B.dim() < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(B.dim(), 1)}, {max(B.dim(), 1) - 1}], but got -2)")
    n = LD._sizes[-1]
    if B._sizes[-2] != n:
        raise RuntimeError(f"Incompatible matrix sizes for {fn}: each A matrix is {n} by {n} "
                           f"but each b matrix is {B._sizes[-2]} by {B._sizes[-1]}")
    _check_same_dtype(None, "b", B, "A", LD, end=" instead.")
    if pivots._dtype.is_floating_point:
        raise RuntimeError(f"{fn}: Expected pivots to be integers. Got "
                           f"{_type_name(pivots._dtype)}")
    if pivots._sizes != LD._sizes[:-1]:
        raise RuntimeError(f"{fn}: Expected LD.shape[:-1] and pivots.shape to be the same, "
                           f"but got pivots with shape {list(pivots._sizes)} instead")
    _broadcast_shapes(B._sizes[:-2], LD._sizes[:-2])
    return _column_major(_on_device_of(LD, ldl_solve_array(_host(LD), _host(pivots),
                                                           _host(B))))


@linalg_ldl_solve.def_batch_rule
def linalg_ldl_solve(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    LD, pivots, B = (bound.pop(name) for name in ("LD", "pivots", "B"))
    size, batch_dims = batch_size(level), max(LD.dim(), B.dim()) - 2
    physical = (_in_front(LD, level, size, 2, batch_dims),
                _in_front(pivots, level, size, 1, batch_dims),
                _in_front(B, level, size, 2, batch_dims))
    return wrap(call(op, physical, bound), 0, level)


# --------------------------------------------------------------------------- geqrf, ormqr

GeqrfResult = _named("geqrf", ("a", "tau"))


def _geqrf_samples(make):
    return [Sample(make(4, 3)), Sample(make(2, 3, 5)), Sample(make(3, 3)),
            Sample(_complex(make)(4, 3))]


# PyTorch has no derivative of geqrf: none here either
@op(out=True, out_casting=True, out_layout="lapack", differentiable=False, samples=_geqrf_samples)
def geqrf(self):
    """``(a, tau)``: LAPACK's geqrf, the QR factorization of each matrix as ``R`` on and
    above the diagonal of ``a``, Householder reflectors below it, and their scales
    ``tau`` (``linalg.householder_product(a, tau)`` is ``Q``)."""
    if self.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if self._dtype not in (float32, float64, complex64, complex128):
        raise NotImplementedError(f"\"geqrf_cpu\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")
    # NumPy's 'raw' mode gives LAPACK's reflectors in column-major order: transposed
    reflectors, tau = np.linalg.qr(_host(self), mode="raw")
    return GeqrfResult(_transposed_alias(_on_device_of(self, reflectors)),
                       _on_device_of(self, tau))


@geqrf.def_batch_rule
def geqrf(op, level, args, kwargs):
    physical = front_or_expanded(op.bind(args, kwargs)["self"], level, batch_size(level))
    return wrap_result(call(op, (physical,), {}), 0, level)


def _ormqr_samples(make):
    return [Sample(make(4, 3), make(3), make(4, 2)),
            Sample(make(2, 4, 3), make(2, 3), make(2, 2, 4), False, True),
            Sample(make(3, 4), make(3), make(3, 3), True, True),
            Sample(_complex(make)(4, 3), _complex(make)(3), _complex(make)(4, 2), True, True)]


@op(out=True, out_layout="lapack", kind="composite", inputs=("self", "input2", "input3"),
    samples=_ormqr_samples)
def ormqr(self, input2, input3, left=True, transpose=False):
    """``op(Q) @ input3`` (``left=False``: ``input3 @ op(Q)``; ``op``: the transpose when
    ``transpose``) for the full square ``Q`` of the reflectors ``self`` and scales
    ``input2`` that ``geqrf`` gives."""
    fn = "torch.ormqr"
    for name, t in (("input", self), ("other", input3)):
        if t.dim() < 2:
            raise RuntimeError(f"{fn}: {name} must have at least 2 dimensions.")
    if input2.dim() != self.dim() - 1:
        raise RuntimeError(f"{fn}: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {input2.dim()} and input.ndim is equal "
                           f"to {self.dim()}")
    if input3.dim() != self.dim():
        raise RuntimeError(f"{fn}: Expected other to have the same number of dimensions as "
                           f"input, but got other.ndim equal to {input3.dim()} and input.ndim "
                           f"is equal to {self.dim()}")
    refuse_integral(self._dtype, "ormqr_cpu")
    m, columns = self.shape[-2:]
    side = -2 if left else -1
    if input3.shape[side] != m:
        raise RuntimeError(f"{fn}: other.shape[{side}] must be equal to input.shape[-2]")
    k = input2.shape[-1]
    if k != min(m, columns):
        raise RuntimeError(f"{fn}: tau.shape[-1] must be equal to min(other.shape[{side}], "
                           "input.shape[-1])")
    for name, t in (("tau", input2), ("other", input3)):
        if t._dtype is not self._dtype:
            raise RuntimeError(f"{fn}: Expected input and {name} to have the same dtype, but "
                               f"input has dtype{_type_name(self._dtype)} and {name} has "
                               f"dtype {_type_name(t._dtype)}")
    # the k reflectors padded with zero columns: the first m columns of H_1 ... H_k, all of Q
    Q = linalg_householder_product(REGISTRY["pad"](self[..., :, :k], (0, m - k)), input2)
    if transpose:
        Q = Q.mH
    return _column_major(Q @ input3 if left else input3 @ Q)


# =========================================================================== eig: the
# eigendecomposition of general square matrices, whose results are complex

EigResult = _named("linalg_eig", ("eigenvalues", "eigenvectors"))


def _eig_samples(make):
    return [Sample(make(3, 3)), Sample(make(2, 3, 3)), Sample(make(3, 3, dtype=complex128)),
            Sample(make(2, 2, 2, dtype=complex128)), Sample(make(1, 1))]


def _complex_of(dtype):
    return complex64 if dtype in (float32, complex64) else complex128


@op(out=True, out_casting=True, inputs=("A",), method=False, function=False, samples=_eig_samples)
def linalg_eig(A):
    """Eigenvalues and eigenvectors of each square matrix of ``A`` (LAPACK's geev: each
    eigenvector of unit norm, its largest component real), complex whatever ``A``'s
    dtype."""
    check_matrix(A, "linalg.eig")
    a = _array(A)
    if not np.isfinite(a).all():
        raise RuntimeError("torch.linalg.eig: input tensor should not contain infs or NaNs.")
    w, v = _lapack("linalg.eig", np.linalg.eig, a)
    dtype = _complex_of(A._dtype)
    return from_numpy_result(w.astype(dtype.np), dtype), \
        _column_major(from_numpy_result(v.astype(dtype.np), dtype))


def _check_phase_invariant(VhgV_diagonal, fn):
    """PyTorch's refusal of a loss that depends on the eigenvectors' phases: the imaginary
    part of diag(Vᴴ gV) must vanish (checked on every sample under vmap)."""
    imaginary = _physical_array(VhgV_diagonal.imag.detach())
    if not np.all(np.abs(imaginary) <= 1e-2):
        raise RuntimeError(f"{fn}: The eigenvectors in the complex case are specified up to "
                           "multiplication by e^{i phi}. The specified loss function depends "
                           "on this quantity, so it is ill-defined.")


@linalg_eig.def_derivative("A")
def linalg_eig(grad, result0, result1):
    # PyTorch's linalg_eig_backward: V^-H (diag(gL) + (Vᴴ gV, projected onto the unit
    # columns) / conj(L_j - L_i)) Vᴴ; a real A takes the real part (the engine does)
    gL, gV = grad
    L, V = result0, result1
    Vh = V.mH
    if gV is None:
        return linalg_solve(Vh, gL.unsqueeze(-1) * Vh)
    VhgV = Vh @ gV
    diagonal = VhgV.diagonal(0, -2, -1)
    _check_phase_invariant(diagonal, "linalg_eig_backward")
    VhgV = VhgV - Vh @ (V * diagonal.real.unsqueeze(-2))
    eye_ = _eye_like(L, L.shape[-1])
    Lc = L.conj()
    inner = VhgV / (Lc.unsqueeze(-2) - Lc.unsqueeze(-1) + eye_)
    if gL is not None:
        inner = inner * (1 - eye_) + _diag_embed(gL)
    return linalg_solve(Vh, inner @ Vh)


linalg_eig.def_batch_rule(one_matrix_batch_rule)


@op(out=True, out_casting=True, kind="composite", inputs=("A",), method=False, function=False,
    samples=_eig_samples)
def linalg_eigvals(A):
    """The eigenvalues of each square matrix of ``A`` (complex)."""
    check_matrix(A, "linalg.eigvals")
    return linalg_eig(A)[0]


# --------------------------------------------------------------------------- pinv

def _pinv_samples(make):
    return [Sample(make(3, 2)), Sample(make(2, 3, 4)), Sample(_spd(make), hermitian=True),
            Sample(make(3, 3), rtol=1e-3), Sample(make(2, 3), atol=0.5)]


@op(out=True, out_casting=True, inputs=("A",), method=False, function=False, samples=_pinv_samples)
def linalg_pinv(A, atol=None, rtol=None, hermitian=False):
    """``linalg.pinv``'s value (checked there): singular values (absolute eigenvalues with
    ``hermitian``, read from the lower triangle) at or below ``max(atol, rtol * largest)``
    count as zero; with neither tolerance given, ``rtol`` is ``eps * max(m, n)``.  Its
    gradient is PyTorch's formula for a constant rank, which needs no distinct singular
    values (the SVD's or eigh's gradient would divide by their differences)."""
    if hermitian:
        L, V = linalg_eigh(A)
        keep = L.abs() > singular_value_cutoff(A, L.abs(), atol, rtol).unsqueeze(-1)
        inverse = (1 / L.where(keep, L.new_ones(()))).where(keep, L.new_zeros(()))
        return (V * inverse.unsqueeze(-2)) @ V.mH
    U, S, Vh = linalg_svd(A, False)
    keep = S > singular_value_cutoff(A, S, atol, rtol).unsqueeze(-1)
    inverse = (1 / S.where(keep, S.new_ones(()))).where(keep, S.new_zeros(()))
    return (Vh.mH * inverse.unsqueeze(-2)) @ U.mH


@linalg_pinv.def_derivative("A")
def linalg_pinv(grad, A, result):
    # PyTorch's pinv_backward, products of the smallest matrices first
    pinv_h, grad_h = result.mH, grad.mH
    if A.shape[-2] <= A.shape[-1]:
        K = grad_h @ result
        K_pinv_h = K @ pinv_h
        return (-(result @ K).mH + K_pinv_h - (A @ result) @ K_pinv_h +
                (pinv_h @ result) @ (grad_h - K @ A))
    K = result @ grad_h
    pinv_h_K = pinv_h @ K
    return (-(K @ result).mH + pinv_h_K - (pinv_h_K @ result) @ A +
            (grad_h - A @ K) @ result @ pinv_h)


linalg_pinv.def_batch_rule(one_matrix_batch_rule)
