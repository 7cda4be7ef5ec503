"""``svd_lowrank`` and ``pca_lowrank``: randomized low-rank SVD and PCA (Halko, Martinsson
and Tropp, 2009, algorithms 4.4 and 5.1), as PyTorch's ``torch._lowrank``.

Written in microtensor ops (random projection, QR, a small exact SVD), so autograd
differentiates them and they batch over leading dims.  The random projection draws from
microtensor's generator: results depend on it (``mt.manual_seed`` makes them
reproducible), and the factors are unique only up to the SVD's own sign freedom.
"""
from microtensor.ops.factory import randn

__all__ = ["svd_lowrank", "pca_lowrank", "get_approximate_basis"]


def _floating_dtype(A):
    from microtensor._C.tensor import float32
    return A.dtype if A.is_floating_point() else float32


def get_approximate_basis(A, q, niter=2, M=None):
    """An orthonormal ``(m, q)`` basis ``Q`` whose range approximates that of ``A - M``
    (``niter`` subspace iterations sharpen it)."""
    from microtensor.linalg import qr
    niter = 2 if niter is None else niter
    R = randn(A.shape[-1], q, dtype=_floating_dtype(A), device=A.device)
    X = A @ R
    if M is not None:
        X = X - M @ R
    Q = qr(X).Q
    for _ in range(niter):
        X = A.mH @ Q
        if M is not None:
            X = X - M.mH @ Q
        Q = qr(X).Q
        X = A @ Q
        if M is not None:
            X = X - M @ Q
        Q = qr(X).Q
    return Q


def svd_lowrank(A, q=6, niter=2, M=None):
    """``(U, S, V)`` with ``A - M ≈ U diag(S) V^H``, of rank ``q``: exact (to rounding)
    when ``A - M`` has rank at most ``q``."""
    from microtensor.linalg import svd
    q = 6 if q is None else q
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(A.size())
    if m < n:                        # the algorithm assumes a tall matrix
        A = A.mH
        if M is not None:
            M = M.mH
    Q = get_approximate_basis(A, q, niter=niter, M=M)
    B = Q.mH @ A
    if M is not None:
        B = B - Q.mH @ M
    U, S, Vh = svd(B, full_matrices=False)
    V = Vh.mH
    U = Q @ U
    if m < n:
        U, V = V, U
    return U, S, V


def pca_lowrank(A, q=None, center=True, niter=2):
    """``(U, S, V)``: the low-rank SVD of ``A`` with its column means removed (when
    ``center``), so that ``V``'s columns are the principal directions."""
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not 0 <= q <= min(m, n):
        raise ValueError(f"q(={q}) must be non-negative integer and not greater than "
                         f"min(m, n)={min(m, n)}")
    if not niter >= 0:
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    if not center:
        return svd_lowrank(A, q, niter=niter, M=None)
    return svd_lowrank(A - A.mean(dim=(-2,), keepdim=True), q, niter=niter, M=None)
