"""``nn.utils.parametrizations``, as PyTorch's: ``orthogonal``, ``weight_norm`` and
``spectral_norm`` written as parametrizations (``nn.utils.parametrize``), with PyTorch's
module layout and state-dict keys (``parametrizations.weight.original``,
``original0``/``original1``, ``parametrizations.weight.0._u``...).  Real dtypes only."""
from enum import Enum, auto

from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import no_grad
from microtensor.nn import functional as F
from microtensor.nn.modules import Module
from microtensor.nn.utils import parametrize
from microtensor.nn.utils.spectral_norm import _check_power_iterations, _default_dim
from microtensor.nn.utils.weight_norm import _weight_norm, norm_except_dim

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def _eye_like(matrices, n, k):
    """The ``(n, k)`` identity, broadcast over ``matrices``' batch dimensions."""
    from microtensor.ops.factory import eye
    identity = eye(n, k, dtype=matrices.dtype, device=matrices.device)
    return identity.expand(*matrices.shape[:-2], n, k)


def _householder_product(reflectors, tau):
    """The first ``k`` columns of ``H_1 ... H_m`` (LAPACK's orgqr, PyTorch's
    ``linalg.householder_product``), ``H_i = I - tau_i v_i v_i^T`` with ``v_i`` column i
    of ``reflectors`` (``(..., n, k)``) below the diagonal, 1 on it.  Written in
    differentiable ops: one rank-1 update of the ``(n, k)`` result per reflector."""
    n, k = reflectors.shape[-2:]
    vectors = reflectors.tril(-1) + _eye_like(reflectors, n, k)
    result = _eye_like(reflectors, n, k)
    for i in reversed(range(tau.shape[-1])):
        v = vectors[..., i:i + 1]
        result = result - tau[..., i, None, None] * (v @ (v.mT @ result))
    return result


def _geqrf(matrices):
    """LAPACK's QR in Householder form ``(reflectors, tau)``, as ``torch.geqrf``: R on and
    above the diagonal, the reflectors below.  Through NumPy (no gradient: only
    ``right_inverse`` needs it)."""
    import numpy as np
    from microtensor.ops.factory import from_numpy
    transposed, tau = np.linalg.qr(matrices.detach().cpu().numpy(), mode="raw")
    reflectors = np.ascontiguousarray(np.swapaxes(transposed, -1, -2))
    return (from_numpy(reflectors).to(matrices.device),
            from_numpy(np.ascontiguousarray(tau)).to(matrices.device))


def _is_orthogonal(q):
    from microtensor._dtype import finfo
    from microtensor.ops.factory import eye
    n, k = q.size(-2), q.size(-1)
    identity = eye(k, dtype=q.dtype, device=q.device)
    return bool((q.mT @ q).allclose(identity, atol=10.0 * n * finfo(q.dtype).eps))


def _make_orthogonal(matrices):
    """The Q of ``matrices``' QR with R's diagonal made positive (so Q depends only on
    ``matrices``, as PyTorch's)."""
    from microtensor.linalg import qr
    q, r = qr(matrices)
    return q * r.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    """Maps a matrix (or batch) to an orthogonal one: the exponential or the Cayley
    transform of the skew-symmetric matrix its lower triangle defines, or the product of
    the Householder reflectors below its diagonal.  With ``use_trivialization`` the
    result is multiplied by the buffer ``base``, an orthogonal matrix that
    ``right_inverse`` sets (``original`` then starts at the map's preimage of I)."""

    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex "
                             "tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        from microtensor import linalg
        from microtensor.ops.shape import cat
        n, k = X.size(-2), X.size(-1)
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:
                X = cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = A.matrix_exp()
            else:
                identity = _eye_like(A, n, n)
                Q = linalg.solve(identity - 0.5 * A, identity + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = _householder_product(A, tau)
            # the diagonal's signs (truncated to integers, as PyTorch's) flip columns
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q):
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q):
        from microtensor.ops.factory import randn, zeros_like
        from microtensor.ops.shape import cat
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {Q.shape}.")
        Q_init = Q
        n, k = Q.size(-2), Q.size(-1)
        transpose = n < k
        if transpose:
            Q = Q.mT
            n, k = k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError("It is not possible to assign to the matrix "
                                          "exponential or the Cayley parametrizations when "
                                          "use_trivialization=False.")
            # the reflectors of Q's QR, with R's diagonal as signs (a reflector with tau 0
            # is the identity, so its sign flips)
            A, tau = _geqrf(Q)
            diagonal = A.diagonal(dim1=-2, dim2=-1)
            diagonal.sign_()
            diagonal.mul_((tau == 0.0).to(A.dtype) * -2 + 1)
            return A.mT if transpose else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
        else:
            # completed to a square matrix whose first k columns only depend on Q
            N = randn(*(Q.size()[:-2] + (n, n - k)), dtype=Q.dtype, device=Q.device)
            Q = _make_orthogonal(cat([Q, N], dim=-1))
        self.base = Q
        neg_identity = zeros_like(Q_init)
        neg_identity.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_identity


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Constrain the matrix (or batch of matrices) ``module.<name>`` to be orthogonal
    (semi-orthogonal when not square).  ``orthogonal_map``: ``"matrix_exp"`` (default
    for square), ``"cayley"`` or ``"householder"`` (default otherwise).  Returns
    ``module``."""
    weight = getattr(module, name, None)
    if not isinstance(weight, TensorBase):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError("Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.ndim} dimensions.")
    if orthogonal_map is None:
        square = weight.size(-2) == weight.size(-1)
        orthogonal_map = "matrix_exp" if square or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


class _WeightNorm(Module):
    """``(weight_g, weight_v) -> weight_v * weight_g / ||weight_v||`` (norms over every
    dimension but ``dim``; ``None``: the whole tensor)."""

    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Reparametrize ``module.<name>`` by its magnitude ``original0`` (norms over every
    dimension but ``dim``) and direction ``original1``.  A state dict of the older
    ``nn.utils.weight_norm`` (``<name>_g``, ``<name>_v``) still loads.  Returns
    ``module``."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(state_dict, prefix, local_metadata, strict, missing_keys,
                                 unexpected_keys, error_msgs):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(_weight_norm_compat_hook)
    return module


class _SpectralNorm(Module):
    """``weight -> weight / sigma``, sigma its largest singular value (as a matrix over
    ``dim``), estimated by power iteration with the buffers ``_u`` and ``_v`` (15 steps at
    creation, ``n_power_iterations`` per training forward).  A vector is normalized."""

    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError("Dimension out of range (expected to be in range of "
                             f"[-{ndim}, {ndim - 1}] but got {dim})")
        _check_power_iterations(n_power_iterations)
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations):
        with no_grad():
            for _ in range(n_power_iterations):
                self._u = F.normalize(weight_mat.mv(self._v), dim=0, eps=self.eps, out=self._u)
                self._v = F.normalize(weight_mat.mT.mv(self._u), dim=0, eps=self.eps,
                                      out=self._v)

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # copies, so that backward sees the u and v this forward used
        u, v = self._u.clone(), self._v.clone()
        return weight / u.vdot(weight_mat.mv(v))

    def right_inverse(self, value):
        return value


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Reparametrize ``module.<name>`` as itself over its spectral norm; ``dim``: the
    dimension of the output channels (default 1 for transposed convolutions, else 0).
    Returns ``module``."""
    weight = getattr(module, name, None)
    if not isinstance(weight, TensorBase):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, _default_dim(module, dim), eps))
    return module
