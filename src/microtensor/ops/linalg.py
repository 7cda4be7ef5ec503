"""Matrix products: ``matmul`` (every rank case of PyTorch's), ``mm``, ``bmm``, ``mv``,
``dot``, ``outer``, ``addmm``.

Kernels check shapes and dtypes the way PyTorch does (no type promotion: both operands
must have one dtype), then hand zero-copy NumPy views to ``np.matmul``, which calls BLAS
(transposed views included), writing into a fresh contiguous result.  Derivatives are
products again, so they are differentiable; broadcast batch dims are summed back to the
input shapes by the autograd engine.  These ops have no vmap family: their batching
rules follow their derivatives (one rule serves every matrix product).
"""
import math
import time
import warnings

import numpy as np

from microtensor._C import kernels, meta, nnkernels
from microtensor._C.dispatch import batching
from microtensor._C.tensor import bfloat16, bool_, empty_contiguous, float16, is_grad_enabled
from microtensor._dtype import can_cast, cast_scalar, info, result_type
from microtensor.ops.factory import tensor
from microtensor.ops.loops import _type_name, check_scale_factor, conj_if_complex, device_of
from microtensor.ops.registry import Sample, op
from microtensor.ops.registry import REGISTRY
from microtensor.vmap.helpers import (BatchedTensor, aligned, batch_size, call,
                                      front_or_expanded, same_level, to_front, unwrap, wrap)

BINARY = ("self", "other")


# PyTorch's messages for operands of two dtypes, by the kernel a product runs as ({a}, {b}:
# the operands' ScalarType names, {a_cpp}, {b_cpp}: their C++ type names)
DTYPE_MISMATCH = {
    "mm": "expected m1 and m2 to have the same dtype, but got: {a_cpp} != {b_cpp}",
    "dot": "dot : expected both vectors to have same dtype, but found {a} and {b}",
    # a matrix (a) times a vector (b): PyTorch's result takes the vector's dtype, and is
    # named first
    "addmv": "addmv input tensors must have the same dtype, but got {b}, {a}, and {b}",
    "bmm": "expected scalar type {a} but found {b}",
    # linear with a bias (PyTorch's addmm): the bias ("self") is checked first
    "addmm_bias": "self and mat2 must have the same dtype, but got {a} and {b}",
    "addmm": "mat1 and mat2 must have the same dtype, but got {a} and {b}",
}
# the kernel whose name PyTorch's refusal of bool operands gives
BOOL_KERNEL = {"dot": "dot", "addmv": "addmv_impl_cpu", "bmm": "bmm"}


def _product_kind(self, other):
    """The kernel PyTorch's ``matmul`` runs for these operands (whose messages it gives):
    ``dot``, ``addmv`` or ``mm`` for vectors and matrices, and for a stack times a vector
    or a matrix that PyTorch folds into one matrix (``_folds``), else ``bmm``."""
    self_dim, other_dim = self.dim(), other.dim()
    if self_dim <= 2 and other_dim <= 2:
        if other_dim == 1:
            return "dot" if self_dim == 1 else "addmv"
        return "mm"   # (a vector times a matrix is one row times it)
    if _folds(self, other):
        return "addmv" if min(self_dim, other_dim) == 1 else "mm"
    return "bmm"


def _folds(self, other):
    """PyTorch's ``should_fold``: a stack (the larger operand; ``other.mT`` when that is
    the stack and ``self`` a vector) times a vector or matrix runs as one matrix product
    when the smaller operand requires grad, or when the stack's leading dims merge into
    rows without a copy."""
    larger = self.dim() >= other.dim()
    smaller = other if larger else self
    if max(self.dim(), other.dim()) < 3 or smaller.dim() > 2:
        return False
    if smaller.requires_grad:
        return True
    if self.dim() == 2 or type(self) is not type(other) or not hasattr(self, "_strides"):
        return False   # (a BatchedTensor's per-sample strides are not its own)
    stack = self if larger else other
    sizes, strides = list(stack._sizes), list(stack._strides)
    if not larger:
        sizes[-2:], strides[-2:] = sizes[:-3:-1], strides[:-3:-1]
    if 0 in sizes:
        return True
    return all(strides[i] == strides[i + 1] * sizes[i + 1] for i in range(len(sizes) - 2))


def _check_same_dtype(self, other, kind="mm"):
    """Products do not promote: PyTorch wants one dtype (and no bool; ``bmm`` refuses a
    bool first operand before it compares dtypes)."""
    if self._dtype is bool_ and kind == "bmm":
        raise NotImplementedError("\"bmm\" not implemented for 'Bool'")
    if self._dtype is not other._dtype:
        raise RuntimeError(DTYPE_MISMATCH[kind].format(
            a=_type_name(self._dtype), b=_type_name(other._dtype),
            a_cpp=info(self._dtype).cpp_name, b_cpp=info(other._dtype).cpp_name))
    if self._dtype is bool_:
        raise NotImplementedError(f"\"{BOOL_KERNEL.get(kind, 'addmm_impl_cpu_')}\" not "
                                  f"implemented for 'Bool'")


def _fresh(shape, self, other):
    """A fresh contiguous result of ``shape`` for an op on ``self`` and ``other``."""
    dev = self._storage.device
    return empty_contiguous(shape, self._dtype,
                            dev if other._storage.device is dev else device_of(self, other))


def _product(np_fn, shape, self, other):
    """``np_fn(self, other)`` into a fresh contiguous tensor of ``shape``."""
    out = _fresh(tuple(shape), self, other)
    if out._numel:
        a, b = self._array(), other._array()
        if np_fn is np.matmul and a.ndim > 2 and a.shape[-1] == 1 and b.shape[-2] == 1:
            # stacked outer products (every per-sample weight gradient): BLAS is slow on
            # these; on the CPU a C loop writes them (CuPy: a broadcast multiply)
            target = out._array()
            if isinstance(target, np.ndarray) and a.ndim == b.ndim and \
                    self._dtype.np in (np.float32, np.float64):
                kernels.outer_products_(target, a, b)
            else:
                np.multiply(a, b, out=target)
        elif np_fn is np.matmul and _shared_matrix(a, b, shape):
            # a stack of one repeated matrix (a parameter expanded over a vmap batch):
            # every row of ``a`` times that matrix, as one product
            np.matmul(_as_rows(a), b[(0,) * (b.ndim - 2)], out=_as_rows(out._array()))
        else:
            np_fn(_blas_ready(a), _blas_ready(b), out=out._array())
    return out


def _as_rows(a):
    """An array's leading dims flattened into rows (no -1: that is ambiguous when a size
    is 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def _blas_ready(a):
    """``a``, copied when its matrices repeat a row or column (a zero stride in the last two
    dims: an expanded gradient): NumPy's matmul leaves BLAS for those, and the copy costs
    less than the slower loop."""
    if isinstance(a, np.ndarray) and a.ndim >= 2 and \
            ((a.strides[-1] == 0 and a.shape[-1] > 1) or (a.strides[-2] == 0 and a.shape[-2] > 1)):
        return np.ascontiguousarray(a)
    return a


def _shared_matrix(a, b, shape):
    """Whether ``b`` is one matrix repeated along every batch dim (stride 0) and ``a`` has
    the result's (``shape``) batch dims: then the product is one product of ``a``'s rows
    (NumPy arrays only)."""
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and \
        a.ndim == b.ndim == len(shape) > 2 and not any(b.strides[:-2]) and \
        a.shape[:-2] == tuple(shape[:-2])


def _dot_size_error(n, m):
    return RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to "
                        f"have the same number of elements, but got {n} and {m} elements "
                        "respectively")


def _mm_shape_error(rows, inner, other_rows, cols):
    return RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{inner} and "
                        f"{other_rows}x{cols})")


def _mv_size_error(rows, inner, n):
    return RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{inner}), vec ({n})")


def _batch_size_error(batch, inner, got_batch, got_inner):
    return RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                        f"[{batch}, {inner}] but got: [{got_batch}, {got_inner}].")


# --------------------------------------------------------------------------- samples

def _matmul_samples(make):
    return [Sample(make(3), make(3)), Sample(make(2, 3), make(3)), Sample(make(3), make(3, 4)),
            Sample(make(2, 3), make(3, 4)), Sample(make(5, 2, 3), make(3)),
            Sample(make(3), make(5, 3, 4)), Sample(make(5, 2, 3), make(3, 4)),
            Sample(make(2, 3), make(5, 3, 4)), Sample(make(5, 1, 2, 3), make(4, 3, 2)),
            Sample(make(4, 2).mT, make(4, 3, 5).transpose(0, 1)), Sample(make(0, 3), make(3, 2)),
            Sample(make(5, 3, 1), make(5, 1, 4)),   # stacked outer products
            Sample(make(5, 2, 3), make(1, 3, 4).expand(5, 3, 4))]   # one matrix, repeated


def _mm_samples(make):
    return [Sample(make(2, 3), make(3, 4)), Sample(make(3, 2).mT, make(3, 1)),
            Sample(make(1, 1), make(1, 5)), Sample(make(2, 0), make(0, 3))]


def _bmm_samples(make):
    return [Sample(make(4, 2, 3), make(4, 3, 5)), Sample(make(1, 3, 2).mT, make(1, 3, 1)),
            Sample(make(3, 2, 4), make(4, 3, 2).transpose(0, 1))]


def _mv_samples(make):
    return [Sample(make(2, 3), make(3)), Sample(make(3, 2).mT, make(3)),
            Sample(make(1, 4), make(4))]


def _dot_samples(make):
    return [Sample(make(3), make(3)), Sample(make(1), make(1)), Sample(make(6)[::2], make(3))]


def _outer_samples(make):
    return [Sample(make(3), make(4)), Sample(make(1), make(2)), Sample(make(4)[::2], make(3))]


def _addmm_samples(make):
    return [Sample(make(2, 4), make(2, 3), make(3, 4)), Sample(make(4), make(2, 3), make(3, 4)),
            Sample(make(2, 4), make(2, 3), make(3, 4), beta=0.5, alpha=2.0)]


# --------------------------------------------------------------------------- matmul

def _matmul_shape(self, other):
    """The result shape of ``self @ other``, raising PyTorch's errors on a mismatch."""
    a, b = self._sizes, other._sizes
    if not a or not b:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{len(a)}D and {len(b)}D")
    if len(a) == 1 and len(b) == 1:
        if a[0] != b[0]:
            raise _dot_size_error(a[0], b[0])
        return ()
    if len(b) == 1:
        if a[-1] != b[0]:
            rows = math.prod(a[:-1])
            raise _mv_size_error(rows, a[-1], b[0])
        return a[:-1]
    if len(b) == 2:
        if a[-1] != b[0]:
            raise _mm_shape_error(math.prod(a[:-1]), a[-1], b[0], b[1])
        return a[:-1] + b[1:]
    batch = tuple(meta.broadcast_shapes(a[:-2], b[:-2]))
    if a[-1] != b[-2]:
        count = math.prod(batch)
        raise _batch_size_error(count, a[-1], count, b[-2])
    rows = a[-2:-1]
    return batch + rows + b[-1:]


@op(out=True, inputs=BINARY, samples=_matmul_samples)
def matmul(self, other):
    """Matrix product with PyTorch's rank rules: 1-D operands are vectors (a dim is added
    then removed), leading dims are batch dims and broadcast."""
    shape = _matmul_shape(self, other)
    kind = _product_kind(self, other)
    if kind == "addmv" and self.dim() == 1:   # PyTorch runs other.mT (folded) @ self
        _check_same_dtype(other, self, kind)
    else:
        _check_same_dtype(self, other, kind)
    return _product(np.matmul, shape, self, other)


def _column_major(shape, strides):
    """Whether the last two dims of a matrix (stack) are laid out column by column, as a
    transposed contiguous matrix (``weight.t()`` in ``linear``) is."""
    return len(shape) >= 2 and strides[-2] == 1 and strides[-1] == shape[-2] and \
        shape[-2] > 1 and shape[-1] > 1


def _product_grad(product, left, right, layout_shape, layout_strides):
    """``left @ right``, computed as ``(right.mT @ left.mT).mT`` when the operand it is the
    gradient of is column-major: the gradient then has that operand's layout, so that after
    the backward of ``t()`` it is contiguous and ``.grad`` takes it without a copy (as
    PyTorch's ``mm`` backward does)."""
    if _column_major(layout_shape, layout_strides):
        return product(right.mT, left.mT).mT
    return product(left, right)


@matmul.def_derivative("self")
def matmul(grad, other, self_shape, self_strides):
    other = conj_if_complex(other)
    if len(other.shape) == 1:
        # (k,) @ (k,) -> (); (..., n, k) @ (k,) -> (..., n)
        return grad * other if len(self_shape) == 1 else grad.unsqueeze(-1) * other
    if len(self_shape) == 1:
        # (k,) @ (..., k, m) -> (..., m); for one matrix a matrix-vector product (under
        # vmap: one product with the batch as rows, no unsqueeze/squeeze to batch)
        if len(other.shape) == 2:
            return matmul(other, grad)
        return matmul(other, grad.unsqueeze(-1)).squeeze(-1)
    return _product_grad(matmul, grad, other.mT, self_shape, self_strides)


@matmul.def_derivative("other")
def matmul(grad, self, other_shape, other_strides):
    self = conj_if_complex(self)
    if len(self.shape) == 1:
        return grad * self if len(other_shape) == 1 else self.unsqueeze(-1) * grad.unsqueeze(-2)
    if len(other_shape) == 1:
        # (..., n, k) @ (k,) -> (..., n); for one matrix the vector-matrix product
        # ``grad @ self`` (as above)
        if len(self.shape) == 2:
            return matmul(grad, self)
        return matmul(grad.unsqueeze(-2), self).squeeze(-2)
    return _product_grad(matmul, self.mT, grad, other_shape, other_strides)


# --------------------------------------------------------------------------- fixed ranks

@op(out=True, inputs=("self", "mat2"), samples=_mm_samples)
def mm(self, mat2):
    if self.dim() != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    (n, k), (k2, m) = self._sizes, mat2._sizes
    if k != k2:
        raise _mm_shape_error(n, k, k2, m)
    _check_same_dtype(self, mat2)
    return _product(np.matmul, (n, m), self, mat2)


@mm.def_derivative("self")
def mm(grad, mat2, self_shape, self_strides):
    mat2 = conj_if_complex(mat2)
    return _product_grad(mm, grad, mat2.mT, self_shape, self_strides)


@mm.def_derivative("mat2")
def mm(grad, self, mat2_shape, mat2_strides):
    self = conj_if_complex(self)
    return _product_grad(mm, self.mT, grad, mat2_shape, mat2_strides)


@op(out=True, inputs=("self", "mat2"), samples=_bmm_samples)
def bmm(self, mat2):
    if self.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.dim() != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    (b, n, k), (b2, k2, m) = self._sizes, mat2._sizes
    if (b, k) != (b2, k2):
        raise _batch_size_error(b, k, b2, k2)
    _check_same_dtype(self, mat2, "bmm")
    return _product(np.matmul, (b, n, m), self, mat2)


@bmm.def_derivative("self")
def bmm(grad, mat2):
    return bmm(grad, conj_if_complex(mat2).mT)


@bmm.def_derivative("mat2")
def bmm(grad, self):
    return bmm(conj_if_complex(self).mT, grad)


@op(out=True, inputs=("self", "vec"), samples=_mv_samples)
def mv(self, vec):
    if self.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.dim()}, "
                           f"{vec.dim()}")
    (n, k), (k2,) = self._sizes, vec._sizes
    if k != k2:
        raise _mv_size_error(n, k, k2)
    _check_same_dtype(self, vec, "addmv")
    return _product(np.matmul, (n,), self, vec)


@mv.def_derivative("self")
def mv(grad, vec):
    return grad.unsqueeze(-1) * conj_if_complex(vec)


@mv.def_derivative("vec")
def mv(grad, self):
    return mv(conj_if_complex(self).mT, grad)


@op(out=True, inputs=("self", "tensor"), samples=_dot_samples)
def dot(self, tensor):
    if self.dim() != 1 or tensor.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {tensor.dim()}D "
                           "tensors")
    if self._sizes[0] != tensor._sizes[0]:
        raise _dot_size_error(self._sizes[0], tensor._sizes[0])
    _check_same_dtype(self, tensor, "dot")
    return _product(np.matmul, (), self, tensor)


@dot.def_derivative("self")
def dot(grad, tensor):
    return grad * conj_if_complex(tensor)


@dot.def_derivative("tensor")
def dot(grad, self):
    return grad * conj_if_complex(self)


_FIXED_RANKS = {"mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1)}
_RANK_ERRORS = {
    "mm": lambda a, b: "self must be a matrix" if a != 2 else "mat2 must be a matrix",
    "bmm": lambda a, b: "batch1 must be a 3D tensor" if a != 3 else "batch2 must be a 3D tensor",
    "mv": lambda a, b: f"vector + matrix @ vector expected, got 1, {a}, {b}",
    "dot": lambda a, b: f"1D tensors expected, but got {a}D and {b}D tensors",
}


def _check_product(op, a, b):
    """The op's own errors, raised for one sample's shapes."""
    ranks = _FIXED_RANKS.get(op.name)
    if ranks is not None and (a.dim(), b.dim()) != ranks:
        raise RuntimeError(_RANK_ERRORS[op.name](a.dim(), b.dim()))
    if op.name == "bmm" and (a._sizes[0], a._sizes[2]) != (b._sizes[0], b._sizes[1]):
        raise _batch_size_error(a._sizes[0], a._sizes[2], b._sizes[0], b._sizes[1])
    _matmul_shape(a, b)
    kind = {"bmm": "bmm", "mm": "mm", "mv": "addmv"}.get(op.name) or _product_kind(a, b)
    if kind == "addmv" and a.dim() == 1:
        a, b = b, a
    _check_same_dtype(a, b, kind)


def matmul_batch_rule(op, level, args, kwargs):
    """Every matrix product as one physical ``matmul``: vectors become 1-row/1-column
    matrices, batched operands get the batch dim first and equal per-sample ranks, and
    unbatched operands broadcast over the batch."""
    if kwargs or len(args) != 2:
        bound = op.bind(args, kwargs)
        args = (bound[op.params[0]], bound[op.params[1]])
    a, b = args
    _check_product(op, a, b)
    ra, rb = a.dim(), b.dim()
    folded = _fold_batch_into_rows(a, b, level)
    if folded is not None:
        return folded
    rank = max(ra, rb, 2)
    pa = _as_matrix_operand(a, level, rank, -2 if ra == 1 else None)
    pb = _as_matrix_operand(b, level, rank, -1 if rb == 1 else None)
    result = call(REGISTRY["matmul"], (pa, pb), None)
    if rb == 1:
        result = result.squeeze(-1)
    if ra == 1:
        result = result.squeeze(-1 if rb == 1 else -2)
    return wrap(result, 0, level)


def _fold_batch_into_rows(a, b, level):
    """One big matrix product instead of a batch of small ones, when one operand is a
    plain (unbatched) matrix: per-sample rows ``(B, ..., k) @ (k, m)`` are just more rows
    (``x @ W.T`` in every per-sample linear layer), and ``W @ v`` per sample is
    ``V @ W.T`` with the batch as rows.  The products are physical 2-D ones, taken with
    ``@``: the core's fast path for plain matrices (BLAS without the Python kernel's
    checks, about 3 us less), which dispatches like ``matmul`` for anything else."""
    a_batched, b_batched = same_level(a, level), same_level(b, level)
    if a_batched and not b_batched and b.dim() == 2:
        rows = to_front(a._value, a._bdim)
        if rows.dim() == 2:      # one vector per sample: already the rows
            return wrap(rows @ b, 0, level)
        count = 1
        for size in rows.shape[:-1]:
            count *= size
        flat = rows.reshape(count, rows.shape[-1])
        return wrap((flat @ b).reshape(tuple(rows.shape[:-1]) + (b.shape[1],)), 0, level)
    if b_batched and not a_batched and a.dim() == 2 and b.dim() == 1:
        vectors = to_front(b._value, b._bdim)
        return wrap(vectors @ a.mT, 0, level)
    return None


def _as_matrix_operand(t, level, rank, vector_dim):
    value, bdim = unwrap(t, level)
    if bdim is not None:
        value = to_front(value, bdim)
    if vector_dim is not None:
        value = value.unsqueeze(vector_dim)
    if bdim is None:
        return value
    return aligned(value, 0, 2 if vector_dim is not None else t.dim(), rank)


matmul.def_batch_rule(matmul_batch_rule)
mm.def_batch_rule(matmul_batch_rule)
bmm.def_batch_rule(matmul_batch_rule)
mv.def_batch_rule(matmul_batch_rule)
dot.def_batch_rule(matmul_batch_rule)


@op(out=True, out_casting=True, kind="composite", samples=_outer_samples)
def outer(self, vec2):
    """``self[i] * vec2[j]`` (with type promotion, as PyTorch's ``outer``)."""
    for name, t in (("self", self), ("vec2", vec2)):
        if t.dim() != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.dim()}-D")
    return self.unsqueeze(-1) * vec2



@op(out=True, kind="composite", samples=_addmm_samples)
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat1 @ mat2)``; with ``beta=0`` ``self`` is ignored."""
    require_one_dtype(self, mat1, mat2, "addmm")
    if self._dtype in REDUCED_FLOATS:     # PyTorch sums in float32 and rounds once
        return addmm(self.float(), mat1.float(), mat2.float(), beta=beta,
                     alpha=alpha).to(self._dtype)
    return scaled_sum(self, mm(mat1, mat2), beta, alpha)


REDUCED_FLOATS = (float16, bfloat16)


def require_one_dtype(self, first, second, name):
    """PyTorch's refusal of operands of different dtypes in ``addmm``, ``addbmm``,
    ``addmv`` and ``baddbmm`` (``addr`` promotes them), each with its own message."""
    dtypes = (self._dtype, first._dtype, second._dtype)
    if dtypes[0] is dtypes[1] is dtypes[2]:
        return
    scalar = [info(dt).scalar_name for dt in dtypes]
    if name == "addmv":
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got "
                           f"{scalar[0]}, {scalar[1]}, and {scalar[2]}")
    cpp = [info(dt).cpp_name for dt in dtypes]
    if name.startswith("baddbmm") and dtypes[0] is dtypes[1]:
        # the batches' product refuses first (in place: the result's dtype)
        if name == "baddbmm_":
            raise RuntimeError(f"Bad in-place call: input tensor dtype {cpp[0]} and output "
                               f"tensor dtype {cpp[2]} should match")
        raise RuntimeError(f"expected scalar type {scalar[0]} but found {scalar[2]}")
    if name.startswith("baddbmm"):
        raise RuntimeError(f"Input dtypes must be the same, got: input {cpp[0]}, batch1: "
                           f"{cpp[1]}, batch2: {cpp[2]}")
    if dtypes[0] is not dtypes[2]:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar[0]} and "
                           f"{scalar[2]}")
    raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {scalar[1]} and "
                       f"{scalar[2]}")


def scaled_sum(self, product, beta, alpha):
    """``beta * self + alpha * product``, as the ``add*mm`` family computes it: no
    multiplication by 1, and ``self`` ignored (NaNs included) when ``beta`` is 0, where it
    still gets a zero gradient, as in PyTorch."""
    dt = result_type(self, product)
    alpha, beta = cast_scalar(alpha, dt), cast_scalar(beta, dt)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        if self.requires_grad and is_grad_enabled():
            # PyTorch's gradient of the ignored ``self`` is zeros (``grad * beta``), not None
            return product + REGISTRY["where"](self.new_zeros((), dtype=bool_), self, 0)
        return product
    return product + (self if beta == 1 else self * beta)


# --------------------------------------------------------------------------- linear

def _linear_samples(make):
    return [Sample(make(3, 4), make(5, 4), make(5)), Sample(make(4), make(5, 4), make(5)),
            Sample(make(2, 3, 4), make(5, 4), make(5)), Sample(make(3, 4), make(2, 4)),
            Sample(make(3, 4), make(4)), Sample(make(4, 3).mT, make(5, 4), make(())),
            Sample(make(0, 4), make(2, 4), make(2))]


def _bias_fused(input, bias):
    """Whether PyTorch's ``linear`` runs as ``addmm(bias, input, weight.t())`` (a 2-D input,
    or a contiguous input and a 1-D bias), with addmm's checks; otherwise it runs
    ``matmul(input, weight.t())`` and adds the bias in place, casting it to the product's
    dtype."""
    return bias is not None and (input.dim() == 2 or (bias.dim() == 1 and input.is_contiguous()))


def check_linear(input, weight, bias):
    """PyTorch's checks of ``linear``'s arguments for one sample (weights of 1 or 2 dims)."""
    if input.dim() == 0 or weight.dim() == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are "
                           f"{input.dim()}D and {weight.dim()}D")
    fused = _bias_fused(input, bias)
    if fused:
        _check_same_dtype(bias, weight, "addmm_bias")
        _check_same_dtype(input, weight, "addmm")
        if weight.dim() == 1:   # (stacked weights, beyond PyTorch, broadcast instead)
            raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    else:
        _check_same_dtype(input, weight, _product_kind(input, weight.mT if weight.dim() == 2
                                                       else weight))
    if input._sizes[-1] != weight._sizes[-1]:
        if weight.dim() == 1:
            raise _mv_size_error(math.prod(input._sizes[:-1]), input._sizes[-1],
                                 weight._sizes[0])
        raise _mm_shape_error(math.prod(input._sizes[:-1]), input._sizes[-1],
                              weight._sizes[1], weight._sizes[0])
    if bias is not None and not fused:
        # ``output.add_(bias)``: the bias casts to the product's dtype and broadcasts to
        # its shape without growing it
        if not can_cast(result_type(input, bias), input._dtype):
            raise RuntimeError(f"result type {_type_name(result_type(input, bias))} can't be "
                               f"cast to the desired output type {_type_name(input._dtype)}")
        shape = input._sizes[:-1] + weight._sizes[:-1]
        broadcast = tuple(meta.broadcast_shapes(shape, bias._sizes))
        if broadcast != shape:
            raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast "
                               f"shape {list(broadcast)}")


@op(inputs=("input", "weight", "bias"), method=False, function=False,
    samples=_linear_samples)
def linear(input, weight, bias=None):
    """``input @ weight.mT + bias``, the linear layer, as one op (one graph node).  Beyond
    PyTorch's 1-D and 2-D weights, stacked weights ``(..., out, in)`` broadcast with the
    leading dims of ``input``, and a bias stacked like them, ``(..., out)``, adds to each
    row (how vmap runs per-sample weights)."""
    dtype = input._dtype
    if len(input._sizes) == 2 and len(weight._sizes) == 2 and weight._dtype is dtype and \
            dtype.is_floating_point and input._sizes[1] == weight._sizes[1] and \
            (bias is None or (bias._dtype is dtype and bias._sizes == weight._sizes[:1])):
        # the layer's call on a batch of rows, which passes every check below: the
        # product and the bias added into it, without the general path's checks
        out = _fresh((input._sizes[0], weight._sizes[0]), input, weight)
        if out._numel:
            _rows_times_transposed(input._array(), weight._array(), out._array())
            if bias is not None:
                target = out._array()
                target += bias._array()
        return out
    if len(weight._sizes) > 2:
        # vmap(grad)'s layer, one matrix repeated along the stack, served in C (only for
        # arguments that pass ``check_linear``)
        out = nnkernels.linear_repeated_weight(input, weight, bias)
        if out is not None:
            return out
    check_linear(input, weight, bias)
    if weight.dim() == 1:
        out = _checked_product(input, weight)
    elif weight.dim() == 2 and input.dim() > 2:
        # every leading dim is more rows: one matrix product
        rows = _checked_product(input.flatten(0, -2), weight.mT)   # (no -1: a size may be 0)
        sizes = input._sizes[:-1] + weight._sizes[:1]
        # safe: rows is a fresh contiguous (rows, out) result with exactly these elements
        out = rows._make_alias_unchecked(sizes, meta.contiguous_strides(sizes), 0)
    elif input.dim() == 2:
        out = _fresh((input._sizes[0], weight._sizes[0]), input, weight)
        if out._numel:
            _rows_times_transposed(input._array(), weight._array(), out._array())
    elif len(input._sizes) == len(weight._sizes) and input._sizes[:-2] == weight._sizes[:-2] \
            and not any(weight._strides[:-2]) and isinstance(weight._array(), np.ndarray):
        # one matrix repeated along the stack (a parameter expanded over a vmap batch):
        # every row times it, as one product, without the general product's shape rules
        out = _fresh(input._sizes[:-1] + weight._sizes[-2:-1], input, weight)
        if out._numel:
            matrix = _blas_ready(weight._array()[(0,) * (len(weight._sizes) - 2)])
            rows = input._array()
            np.matmul(_blas_ready(_as_rows(rows)), matrix.T, out=_as_rows(out._array()))
    else:
        out = _checked_product(input, weight.mT)
    if bias is not None:
        values = bias._array()
        if _stacked_bias(weight._sizes, bias._sizes):
            values = values[..., None, :]
        else:
            meta.expand_geometry(bias._sizes, bias._strides, out._sizes)   # PyTorch's error
        target = out._array()
        target += values
    return out


def _rows_times_transposed(rows, weights, out):
    """``out = rows @ weights.T`` for matrices (a layer's forward): NumPy hands the
    weight's transpose to BLAS as a flag (no ``mT`` view, no shape rules to run again), or,
    where that was measured slower, the product runs in the other order
    (``_through_transposed_output``)."""
    if 0 in rows.strides or 0 in weights.strides:
        rows, weights = _blas_ready(rows), _blas_ready(weights)
    if _through_transposed_output(rows, weights):
        scratch = np.empty((weights.shape[0], rows.shape[0]), rows.dtype)
        np.dot(weights, rows.T, out=scratch)
        kernels.copy_(out, scratch.T)
    else:
        _matrix_product(rows, weights.T, out)


# ``rows @ W.T`` can be computed as it reads, BLAS packing the transposed weight, or as
# ``(W @ rows.T).T``: the weight read as it lies, the result made transposed in a scratch
# and copied back.  BLAS does not promise the same numbers from both: OpenBLAS's float32
# kernels give them for C-contiguous operands (checked over many shapes), but not when one
# operand is transposed, nor its float64 ones (from 193 weight rows at 16 input rows on
# Haswell); a choice made by timing must not change a result from one run to the next,
# so only float32 products of C-contiguous matrices are offered the other order.
# Which is faster depends on the CPU, the BLAS build, the dtype and the shape: OpenBLAS
# on an AMD EPYC packs a transposed float32 weight slowly, so that from 8 to about 128
# rows (from 4 for 512x512) the second order takes 0.4-0.9x the time of the first for
# weights of 256x256 and up, while for small weights and many rows it takes up to 1.8x.  So it is measured, once
# per process for each dtype, weight shape and number of rows rounded up to a power of
# two (a few products on the first call of each), and remembered here.
_ORDER_MEASURED = {}
_ORDER_MIN_ROWS = 4     # below that BLAS multiplies a few vectors: either order is one
_BLAS_DTYPES = (np.float32, np.float64)   # NumPy's other dtypes have no BLAS products
_ORDER_DTYPES = (np.float32,)             # the products whose two orders agree (above)


def _through_transposed_output(rows, weights):
    """Whether ``rows @ weights.T`` is faster as ``(weights @ rows.T).T`` here (measured
    on the first call of its kind, see ``_ORDER_MEASURED``)."""
    count = rows.shape[0]
    if count < _ORDER_MIN_ROWS or type(rows) is not np.ndarray or \
            type(weights) is not np.ndarray or rows.dtype not in _ORDER_DTYPES or \
            not (rows.flags.c_contiguous and weights.flags.c_contiguous):
        return False
    key = (rows.dtype, weights.shape, (count - 1).bit_length())
    found = _ORDER_MEASURED.get(key)
    if found is None:
        found = _ORDER_MEASURED[key] = _measure_order(rows, weights)
    return found


def _measure_order(rows, weights):
    """Time both orders of ``rows @ weights.T``, alternately, best of three each (after
    one untimed call of each)."""
    out = np.empty((rows.shape[0], weights.shape[0]), rows.dtype)
    scratch = np.empty(out.shape[::-1], rows.dtype)

    def as_written():
        np.dot(rows, weights.T, out=out)

    def transposed_output():
        np.dot(weights, rows.T, out=scratch)
        kernels.copy_(out, scratch.T)
    best = [math.inf, math.inf]
    for attempt in range(4):
        for i, order in enumerate((as_written, transposed_output)):
            start = time.perf_counter()
            order()
            if attempt:
                best[i] = min(best[i], time.perf_counter() - start)
    return best[1] < best[0]


def _matrix_product(a, b, out):
    """``out = a @ b`` for matrices (``out`` a fresh contiguous array): ``np.dot`` on NumPy
    float32/float64 arrays, the same BLAS call as ``np.matmul`` at half its overhead (0.5
    against 0.9 us), and BLAS's product where matmul's own loop takes 6x as long (one row
    times one column: a weight's gradient at batch 1); ``np.matmul`` for other dtypes (as
    every product computes them) and other arrays (CuPy)."""
    if 0 in a.strides or 0 in b.strides:
        a, b = _blas_ready(a), _blas_ready(b)
    if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype in _BLAS_DTYPES:
        np.dot(a, b, out=out)
    else:
        np.matmul(a, b, out=out)


def _checked_product(a, b):
    """``a @ b`` for operands ``check_linear`` has already checked."""
    return _product(np.matmul, _matmul_shape(a, b), a, b)


def _stacked_bias(weight_shape, bias_shape):
    return len(weight_shape) > 2 and len(bias_shape) == len(weight_shape) - 1


@linear.def_derivative("input")
def linear(grad, weight):
    weight = conj_if_complex(weight)
    if weight.dim() == 1:
        return grad.unsqueeze(-1) * weight
    if weight.dim() > 2:
        # stacked weights (per-sample, under vmap): ``@``'s C fast path multiplies by a
        # weight expanded over the batch as one product, without the op's Python
        return grad @ weight
    return grad.matmul(weight)


@linear.def_derivative("weight")
def linear(grad, input, weight_shape):
    input = conj_if_complex(input)
    if len(weight_shape) == 1 or input.dim() == 1:
        return grad.unsqueeze(-1) * input
    if len(weight_shape) == 2:
        return grad.flatten(0, -2).mT.matmul(input.flatten(0, -2))   # (sizes may be 0)
    if input.shape[-2] == 1:   # one row per stack: outer products, as a broadcast
        return grad.mT * input
    return grad.mT.matmul(input)


@linear.def_derivative("bias")
def linear(grad, weight_shape, bias_shape):
    if _stacked_bias(weight_shape, bias_shape):   # summed over each stack's rows
        return grad.sum(-2)
    # ``grad`` itself, summed to the bias's shape by the engine
    return grad


@linear.def_unrecorded_backward
def linear(grad, wanted, weight, input, weight_shape, bias_shape):
    """The three gradients of a layer with a 2-D weight (and a 1-D bias, or none) when
    nothing records and no vmap is active, on the NumPy arrays: one ``np.matmul`` for the
    input's, one for the weight's and the bias's as one row sum (the formulas' general
    path would reduce it with the engine's ``sum_to_size``), with no op dispatch and no
    views.  Other calls (stacked or 1-D weights, a broadcast bias, another array
    library, dtypes other than float32/float64, empty gradients) go to the formulas."""
    want_input, want_weight, want_bias = wanted
    # (each value is saved only for the formulas that will run: the weight for the
    # input's, its shape for the weight's and the bias's)
    if len(weight._sizes if weight_shape is None else weight_shape) != 2 or \
            not grad._numel or batching() is not None or \
            (want_bias and tuple(bias_shape) != grad._sizes[-1:]):
        return None
    rows = grad._array()
    # (float16 and bfloat16 go to the formulas, whose sums accumulate in float32 as
    # PyTorch's do: NumPy sums them in their own precision)
    if not isinstance(rows, np.ndarray) or rows.dtype not in _BLAS_DTYPES or \
            (want_input and (weight._dtype is not grad._dtype or
                             not isinstance(weight._array(), np.ndarray))) or \
            (want_weight and (input._dtype is not grad._dtype or
                              not isinstance(input._array(), np.ndarray))):
        return None
    if rows.ndim != 2:
        rows = _as_rows(rows)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        grad_input = _fresh(grad._sizes[:-1] + weight._sizes[1:], grad, weight)
        _matrix_product(rows, weight._array(), grad_input._array().reshape(len(rows), -1))
    if want_weight:
        grad_weight = _fresh(tuple(weight_shape), grad, input)
        inputs = input._array()
        _matrix_product(rows.T, _as_rows(inputs), grad_weight._array())
    if want_bias:
        grad_bias = _fresh(tuple(bias_shape), grad, grad)
        np.add.reduce(rows, axis=0, out=grad_bias._array())
    return grad_input, grad_weight, grad_bias


@linear.def_batch_rule
def linear(op, level, args, kwargs):
    """Shared weights: the samples are just more rows of one call.  Per-sample weights: one
    call on the stacked weights ``(B, ..., out, in)``, which the kernel broadcasts."""
    if not kwargs and len(args) == 3:   # ``F.linear``'s call
        x, w, b = args
    else:
        bound = op.bind(args, kwargs)
        x, w, b = bound["input"], bound["weight"], bound["bias"]
    if _batched_in_front(w, level) and len(w._sizes) == 2 and _batched_in_front(x, level) \
            and len(x._sizes) == 2 and (b is None or (_batched_in_front(b, level) and
                                                      len(b._sizes) == 1)) and \
            x._sizes[1] == w._sizes[1] and x._dtype is w._dtype and x._dtype is not bool_ \
            and (b is None or b._dtype is x._dtype):
        # per-sample weights over rows of inputs (vmap(grad) of a layer), which
        # ``check_linear`` passes: the values are already stacked and aligned as the
        # general path below would make them
        return wrap(call(op, (x._value, w._value, None if b is None else b._value), None), 0,
                    level)
    check_linear(x, w, b)
    if not same_level(w, level) and not same_level(b, level):
        return wrap(call(op, (to_front(x._value, x._bdim), w, b), None), 0, level)
    if w.dim() == 1:       # per-sample weight vectors: a product and a sum, batched as such
        out = call(REGISTRY["matmul"], (x, w), None)
        return out if b is None else out + b
    size = batch_size(level)
    # per sample, the weights may already be stacked (..., out, in) by an outer level:
    # inputs (rows of them), weights and bias are right-aligned behind the batch dim
    rank = max(x.dim(), 2, w.dim())
    inputs = aligned(front_or_expanded(x, level, size), 0, x.dim(), rank)
    weights = aligned(front_or_expanded(w, level, size), 0, w.dim(), rank)
    biases = None if b is None else aligned(front_or_expanded(b, level, size), 0, b.dim(),
                                            rank - 1)   # stacked like the weights
    out = call(op, (inputs, weights, biases), None)
    return wrap(out.squeeze(-2) if x.dim() == 1 else out, 0, level)


def _batched_in_front(t, level):
    return type(t) is BatchedTensor and t._level == level and t._bdim == 0


@linear.def_norm_rule
def linear(grad, input, weight, bias):
    # each sample's leading dims are rows t: its weight gradient is Σ_t g_t a_tᵀ, its bias
    # gradient Σ_t g_t (rows of ones); as rows, several calls of one weight combine
    if weight.dim() > 2:
        return NotImplemented
    count = input.shape[0]
    rows = input.reshape(count, -1, input.shape[-1])
    grads = grad.reshape(count, rows.shape[1], -1)
    found = {"weight": (rows, grads)}
    if bias is not None:
        ones = grads.new_ones((count, rows.shape[1], 1))
        found["bias"] = (ones, grads if bias.dim() else grads.sum(-1, keepdim=True))
    return found


__all__ = ["matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "linear", "check_linear"]
__all__ += ["addmv", "addmv_", "addr", "addr_", "addbmm", "addbmm_", "ger", "inner", "vdot",
            "chain_matmul", "dist", "cov", "corrcoef", "renorm", "renorm_", "trapezoid", "trapz",
            "cumulative_trapezoid"]


# --------------------------------------------------------------------------- PyTorch's other
# product and statistics names, written with the products above and reductions (their
# derivatives and batching rules are those ops')

def _addmv_samples(make):
    return [Sample(make(3), make(3, 4), make(4)), Sample(make(), make(2, 3), make(3), beta=0.5),
            Sample(make(1), make(3, 2), make(2), alpha=2, beta=0)]


@op(out=True, kind="composite", inputs=("self", "mat", "vec"), samples=_addmv_samples)
def addmv(self, mat, vec, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat @ vec)``; with ``beta=0`` ``self`` is ignored."""
    if mat.dim() != 2 or vec.dim() != 1 or self.dim() > 1 or \
            (self.dim() == 1 and self.shape[0] not in (1, mat.shape[0])) or \
            mat.shape[1] != vec.shape[0]:
        if mat.dim() == 2 and vec.dim() == 1:
            raise RuntimeError(f"size mismatch, got input ({self.numel()}), mat "
                               f"({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})")
        raise RuntimeError(f"vector + matrix @ vector expected, got {self.dim()}, {mat.dim()}, "
                           f"{vec.dim()}")
    require_one_dtype(self, mat, vec, "addmv")
    return scaled_sum(self, mv(mat, vec), beta, alpha)


def _checked_inplace(self, result):
    if not can_cast(result._dtype, self._dtype):
        raise RuntimeError(f"result type {info(result._dtype).scalar_name} can't be cast to "
                           f"the desired output type {info(self._dtype).scalar_name}")
    if tuple(result.shape) != tuple(self.shape):
        raise RuntimeError(f"Bad in-place call: input tensor size {list(self.shape)} and output "
                           f"tensor size {list(result.shape)} should match")
    return self.copy_(result)


@op(kind="composite", inputs=("self", "mat", "vec"), function=False)
def addmv_(self, mat, vec, *, beta=1, alpha=1):
    return _checked_inplace(self, addmv(self, mat, vec, beta=beta, alpha=alpha))


def _addr_samples(make):
    return [Sample(make(3, 2), make(3), make(2)), Sample(make(2), make(3), make(2), beta=2),
            Sample(make(3, 2), make(3), make(2), alpha=0.5, beta=0)]


def _expanded_to(self, shape):
    try:
        return self.expand(shape)
    except RuntimeError:
        raise RuntimeError(f"The expanded size of the tensor ({shape[-2]}) must match the "
                           f"existing size ({self.shape[-2] if self.dim() > 1 else 1}) at "
                           f"non-singleton dimension 0.  Target sizes: {list(shape)}.  Tensor "
                           f"sizes: {list(self.shape)}") from None


@op(out=True, out_casting=True, kind="composite", inputs=("self", "vec1", "vec2"),
    samples=_addr_samples)
def addr(self, vec1, vec2, *, beta=1, alpha=1):
    """``beta * self + alpha * outer(vec1, vec2)``; with ``beta=0`` ``self`` is ignored."""
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.dim() != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.dim()}-D")
    product = outer(vec1, vec2)
    dt = result_type(self, product)
    check_scale_factor("beta", beta, dt)
    check_scale_factor("alpha", alpha, dt)
    return scaled_sum(_expanded_to(self, tuple(product.shape)), product, beta, alpha)


@op(kind="composite", inputs=("self", "vec1", "vec2"), function=False)
def addr_(self, vec1, vec2, *, beta=1, alpha=1):
    return _checked_inplace(self, addr(self, vec1, vec2, beta=beta, alpha=alpha))


def _addbmm_samples(make):
    return [Sample(make(3, 5), make(2, 3, 4), make(2, 4, 5)),
            Sample(make(5), make(3, 2, 1), make(3, 1, 5), beta=0.5, alpha=2),
            Sample(make(2, 2), make(0, 2, 3), make(0, 3, 2))]


@op(out=True, kind="composite", inputs=("self", "batch1", "batch2"), samples=_addbmm_samples)
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``: one product of the batches
    laid side by side."""
    for name, t in (("batch1", batch1), ("batch2", batch2)):
        if t.dim() != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got "
                           f"{batch1.shape[0]} and {batch2.shape[0]}")
    b, n, k = batch1.shape
    if batch2.shape[1] != k:
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({n}x{k} and "
                           f"{batch2.shape[1]}x{batch2.shape[2]})")
    require_one_dtype(self, batch1, batch2, "addbmm")
    product = mm(batch1.permute(1, 0, 2).reshape(n, b * k), batch2.reshape(b * k, batch2.shape[2]))
    return scaled_sum(_expanded_to(self, tuple(product.shape)), product, beta, alpha)


@op(kind="composite", inputs=("self", "batch1", "batch2"), function=False)
def addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    return _checked_inplace(self, addbmm(self, batch1, batch2, beta=beta, alpha=alpha))


@op(out=True, out_casting=True, kind="composite", inputs=("self", "vec2"),
    samples=lambda make: [Sample(make(3), make(2))])
def ger(self, vec2):
    """``outer`` under its older name."""
    return outer(self, vec2)


def _inner_samples(make):
    return [Sample(make(3), make(3)), Sample(make(2, 3), make(4, 3)), Sample(make(), make(2, 2)),
            Sample(make(2, 1, 3), make(3))]


@op(out=True, kind="composite", inputs=BINARY, samples=_inner_samples)
def inner(self, other):
    """The sums of products over the last dims: shape ``self[:-1] + other[:-1]``."""
    if self.dim() == 0 or other.dim() == 0:
        return self * other
    if self.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(self.shape)} and {list(other.shape)}")
    from microtensor.ops.contraction import tensordot
    return tensordot(self, other, ([-1], [-1]))


@op(out=True, kind="composite", inputs=BINARY, samples=lambda make: [Sample(make(3), make(3))])
def vdot(self, other):
    """The dot product of two 1-D tensors (conjugating the first: no-op for real ones)."""
    if self.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {other.dim()}D "
                           "tensors")
    return dot(conj_if_complex(self), other)


@op(out=True, kind="composite", inputs=("matrices",), method=False,
    samples=lambda make: [Sample(make(2, 3), make(3, 4), make(4, 2)), Sample(make(2, 2))])
def chain_matmul(*matrices):
    """The product of the matrices, left to right (``linalg.multi_dot``)."""
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for m in matrices:
        if m.dim() != 2:
            raise RuntimeError(f"Tensor dimension is {m.dim()}, expected 2 instead.")
    result = matrices[0].clone() if len(matrices) == 1 else matrices[0]
    for m in matrices[1:]:
        result = mm(result, m)
    return result


def _dist_samples(make):
    return [Sample(make(3, 2), make(2)), Sample(make(4), make(4), 1), Sample(make(3), make(3), 0),
            Sample(make(2, 2), make(2, 2), float("inf")), Sample(make(3), make(3), 3.5)]


@op(kind="composite", inputs=BINARY, samples=_dist_samples)
def dist(self, other, p=2):
    """The ``p``-norm of ``self - other`` (broadcast)."""
    from microtensor import linalg
    difference = self - other
    if difference.dtype.kind < 2:     # (neither floating nor complex)
        raise RuntimeError(f"norm(): input dtype should be either floating point or complex. "
                           f"Got {_type_name(difference.dtype)} instead.")
    return linalg.vector_norm(difference, p)


def _check_weights(name, weights, count, integral):
    if weights.dim() > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got "
                           f"{name} with {weights.dim()} dimensions")
    if integral and (weights.dtype.is_floating_point or weights.dtype is bool_):
        raise RuntimeError(f"cov(): expected {name} to have integral dtype but got {name} with "
                           f"{_type_name(weights.dtype)} dtype")
    if not integral and not weights.dtype.is_floating_point:
        raise RuntimeError(f"cov(): expected {name} to have floating point dtype but got {name} "
                           f"with {_type_name(weights.dtype)} dtype")
    if weights.numel() != count:
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                           f"observations in the input but got {weights.numel()} != {count}")
    if not isinstance(weights, BatchedTensor) and bool((weights < 0).any()):
        raise RuntimeError(f"cov(): {name} cannot be negative")


def _cov_samples(make):
    return [Sample(make(2, 5)), Sample(make(4), correction=0),
            Sample(make(3, 4), fweights=tensor([1, 2, 0, 3])),
            Sample(make(2, 4), aweights=make(4, low=0.5, high=2.0)),
            Sample(make(2, 4), correction=2, fweights=tensor([2, 1, 1, 3]),
                   aweights=make(4, low=0.5, high=2.0))]


@op(kind="composite", inputs=("self", "aweights"), samples=_cov_samples)
def cov(self, *, correction=1, fweights=None, aweights=None):
    """The covariance of the variables (rows) of ``self`` over its observations (columns),
    with frequency and importance weights, as ``numpy.cov``."""
    if self.dim() > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {self.dim()} dimensions")
    x = self if self.dim() == 2 else self.reshape(1, -1)
    count = x.shape[1]
    weights = None
    if fweights is not None:
        _check_weights("fweights", fweights, count, integral=True)
        weights = fweights
    if aweights is not None:
        _check_weights("aweights", aweights, count, integral=False)
        weights = aweights if weights is None else weights * aweights
    if weights is None:
        total = count
        mean = (x if x.dtype.is_floating_point else x.to(result_type(x, 1.0))).mean(1)
        dof = total - correction
    else:
        total = weights.sum()
        mean = (x * weights).sum(1) / total
        if correction == 0:
            dof = total
        elif aweights is None:
            dof = total - correction
        else:
            dof = total - correction * (weights * aweights).sum() / total
    if not isinstance(dof, BatchedTensor) and float(dof) <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", UserWarning, stacklevel=2)
    dof = dof.clamp(min=0) if hasattr(dof, "clamp") else max(dof, 0)
    centred = x - mean.unsqueeze(1)
    weighted = centred if weights is None else centred * weights
    return (mm(centred, conj_if_complex(weighted.t())) / dof).squeeze()


@op(kind="composite", samples=lambda make: [Sample(make(3, 5)), Sample(make(4)),
                                            Sample(make(2, 6))])
def corrcoef(self):
    """Pearson's correlation coefficients of the variables (rows) of ``self``."""
    c = cov(self)
    if c.dim() == 0:
        return c / c
    if c.dtype.is_complex:      # (a Hermitian matrix: its diagonal is real)
        deviation = c.diagonal().real.sqrt()
        c = c / deviation.unsqueeze(1) / deviation.unsqueeze(0)
        return REGISTRY["complex"](c.real.clamp(-1, 1), c.imag.clamp(-1, 1))
    deviation = c.diagonal().sqrt()
    return (c / deviation.unsqueeze(1) / deviation.unsqueeze(0)).clamp(-1, 1)


def _renorm_samples(make):
    return [Sample(make(3, 4), 2, 0, 1.0), Sample(make(2, 3, 2), 1, -1, 1.5),
            Sample(make(3, 2), 3.0, 1, 100.0)]


def _renorm_factor(self, p, dim, maxnorm):
    if self.dim() < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.dim()} "
                           f"dimensions")
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = meta.wrap_dim(dim, self.dim())
    from microtensor import linalg
    others = tuple(k for k in range(self.dim()) if k != d)
    norms = linalg.vector_norm(self, p, others, True)
    # PyTorch's factor: maxnorm / (norm + 1e-7) for the slices over maxnorm
    return REGISTRY["where"](norms > maxnorm, maxnorm / (norms + 1e-7), norms.new_ones(()))


@op(out=True, kind="composite", samples=_renorm_samples)
def renorm(self, p, dim, maxnorm):
    """``self`` with each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled
    down to norm ``maxnorm``."""
    return self * _renorm_factor(self, p, dim, maxnorm)


@op(kind="composite", function=False)
def renorm_(self, p, dim, maxnorm):
    # the norms are taken of a copy: their backward must not see self's new values
    return self.mul_(_renorm_factor(self.clone(), p, dim, maxnorm))


def _refuse_bool(name, y, x):
    """PyTorch's error for bool samples ``y`` or points ``x`` of the trapezoidal rule."""
    if x is not None and (y._dtype is bool_ or x._dtype is bool_):
        raise RuntimeError(f"{name}: received a bool input for `x` or `y`, but bool is not "
                           f"supported")
    if y._dtype is bool_:
        raise RuntimeError(f"{name}: received a bool input for `y`, but bool is not supported")


def _trapezoid_spacing(name, y, x, d):
    """``x``'s differences along ``d``, shaped to broadcast against the trapezoids of ``y``
    (a 1-D ``x`` lies along ``d``)."""
    if x.dim() == 1:
        if x.shape[0] != y.shape[d]:
            raise RuntimeError(f"{name}: There must be one `x` value for each sample point")
        return x.view((-1,) + (1,) * (y.dim() - d - 1)).diff(dim=0)
    return x.diff(dim=d - y.dim())


def _sample_dim(y, dim):
    if y.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return meta.wrap_dim(dim, y.dim())


def _trapezoid_samples(make):
    return [Sample(make(5)), Sample(make(3, 4), make(4)), Sample(make(3, 4), make(3, 4), dim=0),
            Sample(make(2, 3), dx=0.5), Sample(make(2, 3), make(3), dim=1), Sample(make(2, 0))]


def _check_spacing(name, dx):
    if isinstance(dx, (bool, complex)):
        raise RuntimeError(f"{name}: Currently, we only support dx as a real number.")


@op(kind="composite", inputs=("y", "x"), method=False, samples=_trapezoid_samples)
def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along ``dim``: with sample points ``x``, or spacing ``dx``
    (default 1)."""
    d = _sample_dim(y, dim)
    n = y.shape[d]
    if x is not None and dx is not None:
        raise RuntimeError("trapezoid: received both x and dx")
    _check_spacing("trapezoid", dx)
    if n == 0:      # (whatever the dtype, as PyTorch's)
        return y.new_zeros(tuple(y.shape[:d]) + tuple(y.shape[d + 1:]))
    _refuse_bool("trapezoid", y, x)
    if x is None:
        step = 1 if dx is None else dx
        return (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * step
    spacing = _trapezoid_spacing("trapezoid", y, x, d)
    return (spacing * (y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1))).sum(d) / 2.0


@op(kind="composite", inputs=("y", "x"), method=False,
    samples=lambda make: [Sample(make(5)), Sample(make(3, 4), make(4))])
def trapz(y, x=None, *, dx=None, dim=-1):
    """``trapezoid`` under its older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


def _cumulative_trapezoid_samples(make):
    return [Sample(make(5)), Sample(make(3, 4), make(4)), Sample(make(2, 3), dx=2.0, dim=0),
            Sample(make(2, 0))]


@op(kind="composite", inputs=("y", "x"), method=False, samples=_cumulative_trapezoid_samples)
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal rule along ``dim`` (one fewer element than ``y``)."""
    _refuse_bool("cumulative_trapezoid", y, x)
    d = _sample_dim(y, dim)
    n = y.shape[d]
    if x is not None and dx is not None:
        raise RuntimeError("cumulative_trapezoid: received both x and dx")
    _check_spacing("cumulative_trapezoid", dx)
    if n == 0:
        return y.narrow(d, 0, 0) * 1.0
    pairs = y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)
    if x is None:
        return ((1 if dx is None else dx) / 2.0 * pairs).cumsum(d)
    spacing = _trapezoid_spacing("cumulative_trapezoid", y, x, d)
    return (spacing * pairs).cumsum(d) / 2.0


# --------------------------------------------------------------------------- more in-place

@op(kind="composite", inputs=("self", "mat1", "mat2"), function=False)
def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    return _checked_inplace(self, addmm(self, mat1, mat2, beta=beta, alpha=alpha))


__all__ += ["addmm_"]
