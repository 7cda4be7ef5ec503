"""``microtensor.linalg``: PyTorch's linear-algebra namespace.

The decompositions and solvers are ops of ``ops.linalg_decomp`` (NumPy's LAPACK, batched
over leading dims); the norms, ``svdvals``, ``eigvalsh``, ``pinv`` and ``lstsq`` are
written with them, so their derivatives and batching rules are those ops'.  Each takes
``out=`` where PyTorch's does (``takes_out``).
"""
import math
import numbers

from microtensor.ops import linalg_decomp as _decomp
from microtensor.ops.dispatch import takes_out
from microtensor.ops.linalg_decomp import LinAlgError, check_matrix as _check_matrix
from microtensor.ops.reduction import norm as _norm

LstsqResult = _decomp._named("linalg_lstsq", ("solution", "residuals", "rank",
                                              "singular_values"))


@takes_out
def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The vector ``ord``-norm of ``x`` over ``dim`` (None: all elements); ``ord`` is any
    number, ``inf`` or ``-inf`` (0 counts the nonzero elements)."""
    if not isinstance(ord, numbers.Real):   # (a bool is 0 or 1, as PyTorch reads it)
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, "
                        f"not {type(ord).__name__}")
    return _norm(x, ord, dim, keepdim, dtype)


@takes_out
def inv(A):
    """The inverse of each square matrix of ``A``; a singular one raises LinAlgError."""
    return _decomp.linalg_inv(A)


@takes_out
def det(A):
    return _decomp.linalg_det(A)


@takes_out
def slogdet(A):
    """``(sign, logabsdet)`` of the determinant of each square matrix of ``A``."""
    return _decomp.SlogdetResult(*_decomp.linalg_slogdet(A))


@takes_out(layout="column-major")
def solve(A, B, *, left=True):
    """``X`` with ``A @ X = B`` (``left=False``: ``X @ A = B``)."""
    return _decomp.linalg_solve(A, B, left=left)


@takes_out
def cholesky(A, *, upper=False):
    return _decomp.linalg_cholesky(A, upper=upper)


@takes_out
def qr(A, mode="reduced"):
    return _decomp.QRResult(*_decomp.linalg_qr(A, mode))


@takes_out
def svd(A, full_matrices=True):
    return _decomp.SVDResult(*_decomp.linalg_svd(A, full_matrices))


@takes_out
def svdvals(A):
    """The singular values of each matrix of ``A``, descending."""
    return _decomp.linalg_svd(A, False)[1]


@takes_out
def eigh(A, UPLO="L"):
    return _decomp.EighResult(*_decomp.linalg_eigh(A, UPLO))


@takes_out
def eigvalsh(A, UPLO="L"):
    return _decomp.linalg_eigh(A, UPLO)[0]


def _dims2(dim, ndim):
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim}")
    d0, d1 = (d % ndim if -ndim <= d < ndim else d for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, "
                           f"{dim[1]})")
    return d0, d1


@takes_out
def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The matrix ``ord``-norm of ``A`` over the two dims ``dim``: 'fro', 'nuc', inf,
    -inf, 1, -1, 2, -2."""
    if A.dim() < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    d0, d1 = _dims2(dim, A.dim())
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord not in ("nuc", math.inf, -math.inf, 1, -1, 2, -2) or isinstance(ord, bool):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if ord in ("nuc", 2, -2):
        s = svdvals(A.movedim((d0, d1), (-2, -1)))
        value = s.sum(-1) if ord == "nuc" else (s.amax(-1) if ord == 2 else s.amin(-1))
        if keepdim:
            value = value.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1))
        return value
    # 1 / inf: largest column / row sum of absolute values (-1 / -inf: smallest)
    summed, other = (d0, d1) if abs(ord) == 1 else (d1, d0)
    sums = A.abs().sum(summed, keepdim=True)
    value = sums.amax(other, keepdim=True) if ord > 0 else sums.amin(other, keepdim=True)
    return value if keepdim else value.squeeze((d0, d1))


@takes_out
def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """``vector_norm`` or ``matrix_norm`` as ``torch.linalg.norm`` dispatches: a 2-tuple
    ``dim`` or a string ``ord`` (or ``ord`` given with a 2-D input and no ``dim``) is a
    matrix norm; ``ord=None`` is the 2-norm of the flattened input (Frobenius)."""
    if dim is not None and isinstance(dim, int):
        dim = (dim,)
    if isinstance(ord, str) or (ord is not None and dim is None and A.dim() == 2) or \
            (dim is not None and len(dim) == 2 and ord is not None):
        if ord is not None and dim is None and A.dim() != 2:
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input "
                               f"must be 1D or 2D. Got {A.dim()}D.")
        return matrix_norm(A, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    if ord is not None and dim is None and A.dim() != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must "
                           f"be 1D or 2D. Got {A.dim()}D.")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)



@takes_out(casting=True)
def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The pseudo-inverse: singular values (or absolute eigenvalues, ``hermitian``) at or
    below ``max(atol, rtol * largest)`` are treated as zero; with neither tolerance given,
    ``rtol`` is ``eps * max(m, n)``."""
    _check_matrix(A, "linalg.pinv", square=hermitian)
    return _decomp.linalg_pinv(A, atol, rtol, hermitian)


def _eps(A):
    import numpy as np
    return float(np.finfo(A.dtype.np).eps)


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of ``A @ X = B``, with what PyTorch's CPU drivers report
    beside it: ``rank`` for 'gelsy' (the default), 'gelsd' and 'gelss'; the
    ``singular_values`` of ``A`` for 'gelsd' and 'gelss'; the squared ``residuals`` of
    each column for every driver but 'gelsy', when ``A`` is tall and every matrix of it
    has full rank; the others are empty.  The solution goes through the pseudo-inverse, so
    every driver gives the minimum-norm solution, as LAPACK's do for a rank decided from
    the singular values ('gels' assumes full rank; 'gelsy' decides the rank from a pivoted
    QR, so with an ``rcond`` that drops a singular value its solution can differ)."""
    _check_matrix(A, "linalg.lstsq", square=False)
    if driver is None:
        driver = "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of "
                           f"(gels, gelsy, gelsd, gelss), but got {driver}")
    if not 0 <= A.dim() - B.dim() <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to "
                           "other.dim() and (input.dim() - other.dim()) <= 1")
    vector = B.dim() == A.dim() - 1
    rhs = B.unsqueeze(-1) if vector else B
    if rhs.shape[-2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    rows, columns = A.shape[-2:]
    if rcond is None:
        rcond = _eps(A) * max(rows, columns)
    solution = pinv(A, rtol=rcond) @ rhs
    empty = A.new_empty((0,), dtype=_decomp._real_of(A.dtype))
    rank = residuals = singular_values = empty
    if driver != "gels":
        singular_values = svdvals(A.detach())
        largest = singular_values[..., :1]
        rank = (singular_values > largest * rcond).sum(-1)
        if driver == "gelsy":
            singular_values = empty
    if driver != "gelsy" and rows > columns and (driver == "gels" or bool((rank == columns).all())):
        residuals = (A @ solution - rhs).abs().square().sum(-2)
    if vector:
        solution = solution.squeeze(-1)
    return LstsqResult(solution, residuals, rank if rank is not empty else empty.long(),
                       singular_values)


__all__ = ["LinAlgError", "vector_norm", "matrix_norm", "norm", "inv", "det", "slogdet",
           "solve", "cholesky", "qr", "svd", "svdvals", "eigh", "eigvalsh", "pinv", "lstsq"]
__all__ += ["cross", "diagonal", "matmul", "vecdot", "vander", "multi_dot", "matrix_power",
            "matrix_exp", "matrix_rank", "cond", "solve_triangular", "solve_ex", "inv_ex",
            "cholesky_ex", "lu_factor", "lu_factor_ex", "lu", "lu_solve",
            "householder_product", "tensorinv", "tensorsolve", "ldl_factor", "ldl_factor_ex",
            "ldl_solve"]
__all__ += ["eig", "eigvals"]


# --------------------------------------------------------------------------- the rest of
# torch.linalg: the ops of ``ops.linalg_decomp`` and aliases of top-level ops

@takes_out
def cross(input, other, *, dim=-1):
    from microtensor import cross as _cross
    return _cross(input, other, dim=dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return A.diagonal(offset, dim1, dim2)


@takes_out
def matmul(input, other):
    return input @ other


@takes_out
def vecdot(x, y, *, dim=-1):
    return _decomp.linalg_vecdot(x, y, dim=dim)


def vander(x, *, N=None):
    return _decomp.linalg_vander(x, N=N)


@takes_out
def multi_dot(tensors):
    return _decomp.linalg_multi_dot(tensors)


@takes_out
def matrix_power(A, n):
    return _decomp.matrix_power(A, n)


def matrix_exp(A):
    return _decomp.linalg_matrix_exp(A)


@takes_out(casting=True)
def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
    """The rank: singular values above ``max(atol, rtol * largest)``; the older ``tol``
    (PyTorch's other overload) is ``atol`` with ``rtol=0``."""
    if tol is not None:
        if atol is not None or rtol is not None:
            raise TypeError("linalg_matrix_rank(): tol cannot be given with atol or rtol")
        atol, rtol = tol, 0.0
    return _decomp.linalg_matrix_rank(A, atol=atol, rtol=rtol, hermitian=hermitian)


@takes_out(casting=True)
def cond(A, p=None):
    return _decomp.linalg_cond(A, p)


@takes_out(layout="column-major")
def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """``X`` with ``A @ X = B`` (``left=False``: ``X @ A = B``) for triangular ``A``;
    ``B`` is cast to ``A``'s dtype, as PyTorch does."""
    if B.dtype is not A.dtype and A.dtype.is_floating_point:
        B = B.to(A.dtype)
    return _decomp.linalg_solve_triangular(A, B, upper=upper, left=left,
                                           unitriangular=unitriangular)


@takes_out(layout="column-major")
def solve_ex(A, B, *, left=True, check_errors=False):
    return _decomp.linalg_solve_ex(A, B, left=left, check_errors=check_errors)


@takes_out
def inv_ex(A, *, check_errors=False):
    return _decomp.linalg_inv_ex(A, check_errors=check_errors)


@takes_out
def cholesky_ex(A, *, upper=False, check_errors=False):
    return _decomp.CholeskyExResult(*_decomp.linalg_cholesky_ex(
        A, upper=upper, check_errors=check_errors))


@takes_out
def lu_factor_ex(A, *, pivot=True, check_errors=False):
    return _decomp.LUFactorExResult(*_decomp.linalg_lu_factor_ex(
        A, pivot=pivot, check_errors=check_errors))


@takes_out
def lu_factor(A, *, pivot=True):
    """``(LU, pivots)``; a zero pivot raises (``lu_factor_ex`` reports it instead)."""
    LU, pivots, info = _decomp.linalg_lu_factor_ex(A, pivot=pivot)
    _decomp.raise_for_info(info, "torch.linalg.lu_factor", "lu", A.dim() > 2)
    return _decomp.LUFactorResult(LU, pivots)


@takes_out
def lu(A, *, pivot=True):
    return _decomp.linalg_lu(A, pivot=pivot)


@takes_out(layout="column-major")
def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    return _decomp.linalg_lu_solve(LU, pivots, B, left=left, adjoint=adjoint)


@takes_out(casting=True, layout="lapack")
def householder_product(A, tau):
    return _decomp.linalg_householder_product(A, tau)


@takes_out(casting=True, layout="contiguous")
def tensorinv(A, ind=2):
    return _decomp.linalg_tensorinv(A, ind)


@takes_out(casting=True)
def tensorsolve(A, B, dims=None):
    return _decomp.linalg_tensorsolve(A, B, dims)


@takes_out
def ldl_factor_ex(A, *, hermitian=False, check_errors=False):
    return _decomp.LDLFactorExResult(*_decomp.linalg_ldl_factor_ex(
        A, hermitian=hermitian, check_errors=check_errors))


@takes_out
def ldl_factor(A, *, hermitian=False):
    return _decomp.linalg_ldl_factor(A, hermitian=hermitian)


@takes_out(layout="column-major")
def ldl_solve(LD, pivots, B, *, hermitian=False):
    return _decomp.linalg_ldl_solve(LD, pivots, B, hermitian=hermitian)


# --------------------------------------------------------------------------- eig

@takes_out(casting=True, layout="lapack")
def eig(A):
    """``(eigenvalues, eigenvectors)`` of each square matrix of ``A``, complex whatever
    ``A``'s dtype (complex64 for float32 and complex64, else complex128); each eigenvector
    has unit norm and is defined up to a phase, so a loss that depends on that phase has
    no gradient (PyTorch's error)."""
    return _decomp.EigResult(*_decomp.linalg_eig(A))


@takes_out(casting=True)
def eigvals(A):
    """The eigenvalues of each square matrix of ``A`` (complex)."""
    return _decomp.linalg_eigvals(A)
