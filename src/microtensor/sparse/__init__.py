"""``microtensor.sparse``: PyTorch's ``torch.sparse`` functions on sparse COO tensors
(``mm``, ``addmm``, ``sum``), the products ``mm``/``matmul``/``@`` take with a sparse
left operand, and the route by which ``microtensor.mm(S, D)`` and the other dense ops
reach them (``dispatch_op``).

The products are compositions of dense ops: the rows of the dense operand picked by each
entry's column, scaled by its value, added into the entry's row (``index_select``,
``mul``, ``index_add``).  Their gradients wrt the dense operand and the values, their
second derivatives and their vmap over the dense operand are those ops'.
"""
import warnings

from microtensor._C.tensor import TensorBase
from microtensor._dtype_table import BY_NAME, DTYPES
from microtensor.sparse._coo import (SparseTensor, sparse_coo, sparse_coo_tensor, to_sparse,
                                     unsupported)

__all__ = ["mm", "addmm", "sum", "spmm", "softmax", "log_softmax", "SparseTensor",
           "sparse_coo_tensor"]
__all__ += [f"{info.scalar_name}Tensor" for info in DTYPES]


def _scalar_type(dtype):
    return BY_NAME[dtype.name].scalar_name


def _check_matrix(sparse, name):
    if not isinstance(sparse, SparseTensor):
        raise TypeError(f"{name}(): argument 'mat1' must be a sparse COO tensor, got "
                        f"{type(sparse).__name__}")
    if sparse.sparse_dim() != 2 or sparse.dense_dim() != 0:
        raise RuntimeError(f"{name}: a 2-D sparse matrix (2 sparse dims, no dense dims) "
                           f"expected, got {sparse.sparse_dim()} sparse and "
                           f"{sparse.dense_dim()} dense dimensions")


def mm(mat1, mat2):
    """As ``torch.sparse.mm``: sparse ``mat1`` (n x m) times dense ``mat2`` (m x k), a dense
    n x k tensor; differentiable wrt ``mat2`` and wrt ``mat1``'s values.  Two dense
    matrices: their ``mm``, as PyTorch's."""
    if isinstance(mat1, TensorBase):
        return mat1.mm(mat2)
    _check_matrix(mat1, "mm")
    if isinstance(mat2, SparseTensor):
        raise unsupported("mm (sparse @ sparse)")
    if not isinstance(mat2, TensorBase):
        raise TypeError(f"mm(): argument 'mat2' must be Tensor, not {type(mat2).__name__}")
    if mat2.dim() != 2:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(mat2.dim(), 1)}, {max(mat2.dim(), 1) - 1}], but got 1)")
    if mat2.shape[0] != mat1.shape[1]:
        raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size "
                           f"{mat1.shape[1]}, got {mat2.shape[0]}")
    if mat2.dtype is not mat1.dtype:
        raise RuntimeError(f"expected scalar type {_scalar_type(mat1.dtype)} but found "
                           f"{_scalar_type(mat2.dtype)}")
    import microtensor as mt
    rows, cols = mat1._indices()
    picked = mat2.index_select(0, cols) * mat1._values().unsqueeze(1)
    out = mt.zeros(mat1.shape[0], mat2.shape[1], dtype=mat2.dtype, device=mat2.device)
    return out.index_add(0, rows, picked)


spmm = mm


def matmul(input, other):
    """``input @ other`` for a sparse ``input``: ``mm`` for a matrix ``other``, a vector's
    product for a 1-D one."""
    if isinstance(other, TensorBase) and other.dim() == 1:
        return mm(input, other.unsqueeze(1)).squeeze(1)
    if isinstance(other, TensorBase) and other.dim() != 2:
        # PyTorch's error: its batched matmul would expand the sparse operand
        raise RuntimeError("expand is unsupported for Sparse tensors")
    return mm(input, other)


def addmm(mat, mat1, mat2, *, beta=1, alpha=1):
    """As ``torch.sparse.addmm``: ``beta * mat + alpha * (mat1 @ mat2)``, ``mat1`` sparse
    (``beta == 0`` ignores ``mat``, NaN included)."""
    product = mm(mat1, mat2)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (mat if beta == 1 else mat * beta)


def sum(input, dim=None, dtype=None):
    """As ``torch.sparse.sum``: over all dims a dense 0-d tensor; over ``dim`` a
    (coalesced) sparse tensor, or a dense one when every sparse dim is summed."""
    if isinstance(input, TensorBase):
        raise RuntimeError("coalesce expected sparse coordinate tensor layout but got Strided")
    if not isinstance(input, SparseTensor):
        raise TypeError(f"sparse.sum(): argument 'input' must be a sparse tensor, got "
                        f"{type(input).__name__}")
    values = input._values() if dtype is None else input._values().to(dtype)
    if dim is None:
        return values.sum()
    dims = [input._dim(d) for d in ((dim,) if isinstance(dim, int) else dim)]
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    sparse_dim = input.sparse_dim()
    dense_summed = tuple(d - sparse_dim + 1 for d in dims if d >= sparse_dim)
    if dense_summed:
        values = values.sum(dense_summed)
    kept = [d for d in range(sparse_dim) if d not in dims]
    if not kept:
        return values.sum(0)
    import microtensor as mt
    shape = mt.Size(s for d, s in enumerate(input.shape) if d not in dims)
    return SparseTensor(input._indices()[kept], values, shape, False).coalesce()


def _softmax(name, input, dim, dtype):
    """``softmax``/``log_softmax`` over ``dim`` of the stored entries (the others count as
    -inf, so they stay out), on the coalesced tensor."""
    if not isinstance(input, SparseTensor):
        raise TypeError(f"sparse.{name}(): argument 'input' must be a sparse tensor, got "
                        f"{type(input).__name__}")
    import microtensor as mt
    dim = input._dim(dim)
    input = input.coalesce()
    values = input._values() if dtype is None else input._values().to(dtype)
    if not (values.dtype.is_floating_point or values.dtype.is_complex):
        raise NotImplementedError(f'"softmax" not implemented for '
                                  f"'{_scalar_type(values.dtype)}'")
    sparse_dim = input.sparse_dim()
    if dim >= sparse_dim:           # along a dense dim: each entry's block on its own
        return input._like(getattr(values, name)(dim - sparse_dim + 1))
    # the entries of one group share every sparse index but the one along ``dim``
    others = [d for d in range(sparse_dim) if d != dim]
    sizes = [input.shape[d] for d in others]
    key = SparseTensor(input._indices()[others], values, mt.Size(sizes), True)
    _, group = mt.unique(key._linear_indices(), return_inverse=True)
    groups = int(group.max()) + 1 if group.numel() else 0
    blocks = (groups,) + tuple(values.shape[1:])
    spread = group.view((-1,) + (1,) * (values.dim() - 1)).expand(values.shape)
    with mt.no_grad():              # a shift for stability: the result does not depend on it
        shift = mt.zeros(blocks, dtype=values.dtype).scatter_reduce(
            0, spread, values, "amax", include_self=False)
    shifted = values - shift.index_select(0, group)
    totals = mt.zeros(blocks, dtype=values.dtype).index_add(0, group, shifted.exp())
    if name == "softmax":
        return input._like(shifted.exp() / totals.index_select(0, group))
    return input._like(shifted - totals.log().index_select(0, group))


def softmax(input, dim, *, dtype=None):
    """As ``torch.sparse.softmax``: over ``dim``, among the stored entries only."""
    return _softmax("softmax", input, dim, dtype)


def log_softmax(input, dim, *, dtype=None):
    """As ``torch.sparse.log_softmax``: over ``dim``, among the stored entries only."""
    return _softmax("log_softmax", input, dim, dtype)


# --------------------------------------------------------------------------- legacy types

def _legacy_constructor(info):
    """``torch.sparse.FloatTensor`` and its kin, as old ports call them:
    ``(indices, values[, size])`` (int64 indices; the values keep their dtype, as in
    PyTorch) or ``(*sizes)``, an empty sparse tensor of this type."""
    def constructor(*args, device=None):
        import microtensor as mt
        warnings.warn(f"microtensor.sparse.{info.scalar_name}Tensor(...) is deprecated. Please "
                      f"use microtensor.sparse_coo_tensor(indices, values, shape, dtype=, "
                      f"device=).", UserWarning, stacklevel=2)
        if args and isinstance(args[0], TensorBase):
            if len(args) not in (2, 3) or not isinstance(args[1], TensorBase):
                raise TypeError(f"{info.scalar_name}Tensor(): expected (Tensor indices, "
                                f"Tensor values[, size]) or sizes")
            if args[0].dtype is not mt.int64:
                raise RuntimeError("indices must be an int64 tensor")
            return sparse_coo_tensor(*args, device=device)
        sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
        dtype = getattr(mt, info.name)
        return sparse_coo_tensor(mt.zeros(len(sizes), 0, dtype=mt.int64),
                                 mt.zeros(0, dtype=dtype), sizes, device=device)
    constructor.__name__ = constructor.__qualname__ = f"{info.scalar_name}Tensor"
    return constructor


globals().update({f"{info.scalar_name}Tensor": _legacy_constructor(info) for info in DTYPES})


# --------------------------------------------------------------------------- dense ops

def _is_sparse(value):
    return isinstance(value, SparseTensor) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, SparseTensor) for v in value))


def _dense_then_sparse(op_name):
    """``add``/``sub`` of a dense tensor and a sparse one: dense, as PyTorch's."""
    def run(input, other, *, alpha=1):
        import microtensor as mt
        return getattr(mt, op_name)(input, other.to_dense(), alpha=alpha)
    return run


# ops of the registry that take a sparse operand where PyTorch's do; others are refused
_BY_SECOND = {"add": _dense_then_sparse("add"), "sub": _dense_then_sparse("sub"),
              "mul": lambda input, other: other.mul(input)}
_BY_FIRST = ("mm", "matmul", "neg", "mul", "div", "add", "sub", "clone", "detach", "t",
             "transpose", "sum", "to_sparse")


def dispatch_op(op, args, kwargs):
    """A registry op's call that a dense kernel refused: NotImplemented when no sparse
    tensor is among ``args``/``kwargs`` (the failure is then the call's own), the op's
    sparse version where there is one, else PyTorch's ``NotImplementedError``."""
    kwargs = kwargs or {}
    if not (any(_is_sparse(a) for a in args) or any(_is_sparse(v) for v in kwargs.values())):
        return NotImplemented
    if "out" in kwargs:
        raise unsupported(f"{op.name} (out=)") from None
    first = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if isinstance(first, SparseTensor) and op.name in _BY_FIRST:
        rest = args[1:] if args else ()
        kwargs = {k: v for k, v in kwargs.items() if k not in ("input", "self")}
        return getattr(first, op.name)(*rest, **kwargs)
    if op.name in _BY_SECOND and len(args) >= 2 and isinstance(args[1], SparseTensor) and \
            isinstance(first, TensorBase):
        return _BY_SECOND[op.name](*args, **kwargs)
    raise unsupported(op.name) from None


def install(tensor_class, namespace):
    """``Tensor.to_sparse``/``to_dense``, ``microtensor.sparse_coo`` and
    ``sparse_coo_tensor``, and the dispatcher's route for sparse operands."""
    from microtensor._C.dispatch import install_layout_handler
    tensor_class.to_sparse = to_sparse
    tensor_class.to_sparse_coo = lambda self: to_sparse(self)
    tensor_class.to_dense = lambda self, dtype=None, *, masked_grad=None: (
        self if dtype is None else self.to(dtype))
    namespace.update(sparse_coo=sparse_coo, sparse_coo_tensor=sparse_coo_tensor, spmm=spmm)
    install_layout_handler(dispatch_op)
