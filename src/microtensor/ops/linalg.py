"""Matrix products: ``matmul`` (every rank case of PyTorch's), ``mm``, ``bmm``, ``mv``,
``dot``, ``outer``, ``addmm``.

Kernels check shapes and dtypes the way PyTorch does (no type promotion: both operands
must have one dtype), then hand zero-copy NumPy views to ``np.matmul``, which calls BLAS
(transposed views included), writing into a fresh contiguous result.  Derivatives are
products again, so they are differentiable; broadcast batch dims are summed back to the
input shapes by the autograd engine.  These ops have no vmap family: their batching
rules are written explicitly in ``vmap``.
"""
import math

import numpy as np

from microtensor._C import kernels, meta
from microtensor._C.tensor import bool_, empty_contiguous
from microtensor._dtype import cast_scalar, result_type
from microtensor.ops.loops import _type_name, device_of
from microtensor.ops.registry import Sample, op

BINARY = ("self", "other")


DTYPE_MISMATCH = {
    "mm": "expected m1 and m2 to have the same dtype, but got: {a_lower} != {b_lower}",
    "dot": "dot : expected both vectors to have same dtype, but found {a} and {b}",
    "bmm": "expected scalar type {a} but found {b}",
}


def _check_same_dtype(self, other, kind="mm"):
    """Products do not promote: PyTorch wants one dtype (and no bool)."""
    if self._dtype is not other._dtype:
        a, b = _type_name(self._dtype), _type_name(other._dtype)
        raise RuntimeError(DTYPE_MISMATCH[kind].format(a=a, b=b, a_lower=a.lower(),
                                                       b_lower=b.lower()))
    if self._dtype is bool_:
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")


def _product(np_fn, shape, self, other):
    """``np_fn(self, other)`` into a fresh contiguous tensor of ``shape``."""
    dev = self._storage.device
    out = empty_contiguous(tuple(shape), self._dtype,
                           dev if other._storage.device is dev else device_of(self, other))
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
            np.matmul(a.reshape(-1, a.shape[-1]), b[(0,) * (b.ndim - 2)],
                      out=out._array().reshape(-1, b.shape[-1]))
        else:
            np_fn(a, b, out=out._array())
    return out


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


@op(inputs=BINARY, samples=_matmul_samples)
def matmul(self, other):
    """Matrix product with PyTorch's rank rules: 1-D operands are vectors (a dim is added
    then removed), leading dims are batch dims and broadcast."""
    shape = _matmul_shape(self, other)
    _check_same_dtype(self, other, "dot" if self.dim() == other.dim() == 1 else "mm")
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


@matmul.def_derivative(only_for={"self": "other", "other": "self"})
def matmul(grad, self, other, self_shape, other_shape, self_strides, other_strides):
    # each operand is saved only for the other's gradient: None means "not needed"
    grad_self = grad_other = None
    if len(self_shape) == 1 and len(other_shape) == 1:
        grad_self = None if other is None else grad * other
        grad_other = None if self is None else grad * self
    elif len(other_shape) == 1:
        # (..., n, k) @ (k,) -> (..., n)
        grad_self = None if other is None else grad.unsqueeze(-1) * other
        grad_other = None if self is None else matmul(grad.unsqueeze(-2), self).squeeze(-2)
    elif len(self_shape) == 1:
        # (k,) @ (..., k, m) -> (..., m)
        grad_self = None if other is None else matmul(other, grad.unsqueeze(-1)).squeeze(-1)
        grad_other = None if self is None else self.unsqueeze(-1) * grad.unsqueeze(-2)
    else:
        grad_self = None if other is None else \
            _product_grad(matmul, grad, other.mT, self_shape, self_strides)
        grad_other = None if self is None else \
            _product_grad(matmul, self.mT, grad, other_shape, other_strides)
    return grad_self, grad_other


# --------------------------------------------------------------------------- fixed ranks

@op(inputs=("self", "mat2"), samples=_mm_samples)
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


@mm.def_derivative(only_for={"self": "mat2", "mat2": "self"})
def mm(grad, self, mat2, self_shape, self_strides, mat2_shape, mat2_strides):
    return (None if mat2 is None else _product_grad(mm, grad, mat2.mT, self_shape, self_strides),
            None if self is None else _product_grad(mm, self.mT, grad, mat2_shape, mat2_strides))


@op(inputs=("self", "mat2"), samples=_bmm_samples)
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


@bmm.def_derivative(only_for={"self": "mat2", "mat2": "self"})
def bmm(grad, self, mat2):
    return (None if mat2 is None else bmm(grad, mat2.mT),
            None if self is None else bmm(self.mT, grad))


@op(inputs=("self", "vec"), samples=_mv_samples)
def mv(self, vec):
    if self.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.dim()}, "
                           f"{vec.dim()}")
    (n, k), (k2,) = self._sizes, vec._sizes
    if k != k2:
        raise _mv_size_error(n, k, k2)
    _check_same_dtype(self, vec)
    return _product(np.matmul, (n,), self, vec)


@mv.def_derivative(only_for={"self": "vec", "vec": "self"})
def mv(grad, self, vec):
    return (None if vec is None else grad.unsqueeze(-1) * vec,
            None if self is None else mv(self.mT, grad))


@op(inputs=("self", "tensor"), samples=_dot_samples)
def dot(self, tensor):
    if self.dim() != 1 or tensor.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {tensor.dim()}D "
                           "tensors")
    if self._sizes[0] != tensor._sizes[0]:
        raise _dot_size_error(self._sizes[0], tensor._sizes[0])
    _check_same_dtype(self, tensor, "dot")
    return _product(np.matmul, (), self, tensor)


@dot.def_derivative(only_for={"self": "tensor", "tensor": "self"})
def dot(grad, self, tensor):
    return (None if tensor is None else grad * tensor,
            None if self is None else grad * self)


@op(kind="composite", samples=_outer_samples)
def outer(self, vec2):
    """``self[i] * vec2[j]`` (with type promotion, as PyTorch's ``outer``)."""
    for name, t in (("self", self), ("vec2", vec2)):
        if t.dim() != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.dim()}-D")
    return self.unsqueeze(-1) * vec2



@op(kind="composite", samples=_addmm_samples)
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat1 @ mat2)``; with ``beta=0`` ``self`` is ignored."""
    product = mm(mat1, mat2)
    dt = result_type(self, product)
    alpha, beta = cast_scalar(alpha, dt), cast_scalar(beta, dt)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (self if beta == 1 else self * beta)


# --------------------------------------------------------------------------- linear

def _linear_samples(make):
    return [Sample(make(3, 4), make(5, 4), make(5)), Sample(make(4), make(5, 4), make(5)),
            Sample(make(2, 3, 4), make(5, 4), make(5)), Sample(make(3, 4), make(2, 4)),
            Sample(make(3, 4), make(4)), Sample(make(4, 3).mT, make(5, 4), make(())),
            Sample(make(0, 4), make(2, 4), make(2))]


def check_linear(input, weight, bias):
    """PyTorch's checks of ``linear``'s arguments for one sample (weights of 1 or 2 dims)."""
    if input.dim() == 0 or weight.dim() == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are "
                           f"{input.dim()}D and {weight.dim()}D")
    _check_same_dtype(input, weight)
    if input._sizes[-1] != weight._sizes[-1]:
        if weight.dim() == 1:
            raise _mv_size_error(math.prod(input._sizes[:-1]), input._sizes[-1],
                                 weight._sizes[0])
        raise _mm_shape_error(math.prod(input._sizes[:-1]), input._sizes[-1],
                              weight._sizes[1], weight._sizes[0])
    if bias is not None:
        _check_same_dtype(input, bias)


@op(inputs=("input", "weight", "bias"), method=False, function=False,
    samples=_linear_samples)
def linear(input, weight, bias=None):
    """``input @ weight.mT + bias``, the linear layer, as one op (one graph node).  Beyond
    PyTorch's 1-D and 2-D weights, stacked weights ``(..., out, in)`` broadcast with the
    leading dims of ``input``, and a bias stacked like them, ``(..., out)``, adds to each
    row (how vmap runs per-sample weights)."""
    check_linear(input, weight, bias)
    if weight.dim() == 1:
        out = _checked_product(input, weight)
    elif weight.dim() == 2 and input.dim() > 2:
        # every leading dim is more rows: one matrix product
        rows = _checked_product(input.reshape(-1, input._sizes[-1]), weight.mT)
        sizes = input._sizes[:-1] + weight._sizes[:1]
        # safe: rows is a fresh contiguous (rows, out) result with exactly these elements
        out = rows._make_alias_unchecked(sizes, meta.contiguous_strides(sizes), 0)
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


def _checked_product(a, b):
    """``a @ b`` for operands ``check_linear`` has already checked."""
    return _product(np.matmul, _matmul_shape(a, b), a, b)


def _stacked_bias(weight_shape, bias_shape):
    return len(weight_shape) > 2 and len(bias_shape) == len(weight_shape) - 1


@linear.def_derivative(only_for={"input": "weight", "weight": "input"})
def linear(grad, input, weight, weight_shape, input_shape, bias_shape):
    # each of input and weight is saved only for the other's gradient (None: not needed);
    # the bias's gradient is ``grad`` itself, summed to the bias's shape by the engine
    # (a stacked bias: summed over each stack's rows here)
    grad_input = grad_weight = None
    if weight is not None:
        grad_input = grad.unsqueeze(-1) * weight if len(weight_shape) == 1 else \
            grad.matmul(weight)
    if input is not None:
        if len(weight_shape) == 1 or len(input_shape) == 1:
            grad_weight = grad.unsqueeze(-1) * input
        elif len(weight_shape) == 2:
            rows = grad.reshape(-1, weight_shape[0])
            grad_weight = rows.mT.matmul(input.reshape(-1, input_shape[-1]))
        elif input_shape[-2] == 1:   # one row per stack: outer products, as a broadcast
            grad_weight = grad.mT * input
        else:
            grad_weight = grad.mT.matmul(input)
    stacked = bias_shape is not None and _stacked_bias(weight_shape, bias_shape)
    return grad_input, grad_weight, grad.sum(-2) if stacked else grad


__all__ = ["matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "linear", "check_linear"]
