"""The functions PyTorch 2 removed after deprecating them in 1.9 (``solve``, ``lstsq``,
``eig``, ``symeig``, ``matrix_rank``, and the first four as Tensor methods): each raises
PyTorch's RuntimeError, which says what replaces it, so that a ported 1.x script learns
what to write instead of meeting an AttributeError."""

_REMOVED = "This function was deprecated since version 1.9 and is now removed. "
_REPLACEMENTS = {
    "solve": "`solve` is replaced by `linalg.solve`, whose arguments are reversed and which "
             "does not return the LU factorization (see `lu`, `lu_solve`, `lu_unpack`): "
             "X = solve(B, A).solution should be replaced with X = linalg.solve(A, B)",
    "lstsq": "`lstsq` is replaced by `linalg.lstsq`, whose arguments are reversed, which "
             "does not return the QR decomposition (see `linalg.qr`) and keeps the "
             "residuals in its 'residuals' field: X = lstsq(B, A).solution[:A.size(1)] "
             "should be replaced with X = linalg.lstsq(A, B).solution",
    "eig": "`linalg.eig` returns complex tensors rather than real tensors mimicking complex "
           "ones: L, _ = eig(A) should be replaced with L_complex = linalg.eigvals(A), and "
           "L, V = eig(A, eigenvectors=True) with L_complex, V_complex = linalg.eig(A)",
    "symeig": "The default triangle changed from the upper to the lower: L, _ = "
              "symeig(A, upper=upper) should be replaced with L = linalg.eigvalsh(A, "
              "UPLO='U' if upper else 'L'), and L, V = symeig(A, eigenvectors=True) with "
              "L, V = linalg.eigh(A, UPLO='U' if upper else 'L')",
    "matrix_rank": "Please use the `linalg.matrix_rank` function instead. The parameter "
                   "'symmetric' was renamed in `linalg.matrix_rank()` to 'hermitian'.",
}


def _removed(name):
    def removed(*args, **kwargs):
        raise RuntimeError(_REMOVED + _REPLACEMENTS[name])
    removed.__name__ = removed.__qualname__ = name
    removed.__doc__ = f"Removed in PyTorch 2: raises the RuntimeError that names what " \
                      f"replaces it."
    return removed


solve, lstsq, eig, symeig, matrix_rank = (_removed(name) for name in _REPLACEMENTS)
TENSOR_METHODS = {"solve": solve, "lstsq": lstsq, "eig": eig, "symeig": symeig}
