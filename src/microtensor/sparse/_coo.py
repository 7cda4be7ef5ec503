"""The sparse COO layout: ``SparseTensor``, ``sparse_coo_tensor`` and ``Tensor.to_sparse``.

A sparse COO tensor is two dense tensors and a size: ``indices`` (int64, ``sparse_dim x
nnz``: the position of each stored entry in the first ``sparse_dim`` dims) and ``values``
(``nnz x dense sizes``: each entry, itself a dense block for a hybrid tensor).  Every
operation is written in dense microtensor ops on those two, so autograd and vmap follow
from theirs: a sparse tensor built from ``values`` that require grad carries their history
(``to_dense``, ``sparse.mm`` and ``sparse.sum`` differentiate wrt ``values``), and a sparse
leaf (``requires_grad=True``) keeps its gradient on its values, shown as PyTorch's
``.grad``: a sparse tensor on its coalesced pattern.

``SparseTensor`` is no ``Tensor`` subclass: the dense kernels never see its (absent)
strided memory.  A dense op given one fails, and the dispatcher's failure path hands the
call to ``microtensor.sparse.dispatch_op``, which runs the few ops that take a sparse
operand (``mm``, ``matmul``, ``neg``...) and refuses the others with PyTorch's
``NotImplementedError``; a dense call never reaches this module.
"""
import math
import numbers

from microtensor._C.tensor import TensorBase, get_default_dtype, int64
from microtensor._dtype import default_complex_dtype
from microtensor._dtype_table import BY_NAME
from microtensor._printing import _body, _with_suffixes
from microtensor._tensor_extras import layout

sparse_coo = layout("sparse_coo")

_UNSUPPORTED = ("Could not run 'aten::{}' with arguments from the 'SparseCPU' backend. This "
                "could be because the operator doesn't exist for this backend: microtensor's "
                "sparse COO tensors support {}.")
_SUPPORTED = ("to_dense, coalesce, sparse.mm/mm/matmul/@ and sparse.addmm with a dense "
              "right operand, sparse.sum, sparse.softmax/log_softmax, t/transpose, clone, "
              "detach, to, neg, +/- of two sparse tensors, * by a dense tensor and * or / by "
              "a scalar")


def _mt():
    import microtensor
    return microtensor


class SparseLayoutError(NotImplementedError, AttributeError):
    """A dense kernel asked a sparse tensor for strided metadata (``_sizes``, ``_dtype``...).
    Also an AttributeError, the failure the dispatcher hands to ``dispatch_op``, which
    answers with the op's name; an op that runs without the dispatcher (a composite)
    raises this one."""


def unsupported(name):
    """PyTorch's error for an op that has no sparse kernel (here: not written yet)."""
    return NotImplementedError(_UNSUPPORTED.format(name, _SUPPORTED))


# --------------------------------------------------------------------------- construction

def _as_dense(data, dtype=None):
    mt = _mt()
    if isinstance(data, SparseTensor):
        raise TypeError("sparse_coo_tensor(): indices and values must be dense tensors, got a "
                        "sparse tensor")
    if isinstance(data, TensorBase):
        return data if dtype is None else data.to(dtype)
    return mt.tensor(data, dtype=dtype)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """As ``torch.sparse_coo_tensor``: ``indices`` (``sparse_dim x nnz``, any numeric dtype,
    made int64) and ``values`` (``nnz x dense sizes``) at ``size`` (inferred when None: one
    past the largest index of each sparse dim, then the values' dense sizes).

    Unlike PyTorch, whose default skips the check (and fails later, or reads out of
    bounds), the indices are always checked against ``size``, as with
    ``check_invariants=True``."""
    mt = _mt()
    idx = _as_dense(indices)
    vals = _as_dense(values, dtype)
    if device is not None and mt.device(device) != vals.device:
        vals = vals.to(device)
    if size is not None:      # PyTorch checks the size's length first
        _check_size_length(tuple(size), idx.shape[0] if idx.dim() else 0, vals.dim() - 1)
    if idx.dim() != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    if idx.dtype is not int64:
        idx = idx.to(int64)
    sparse_dim, nnz = idx.shape
    if vals.dim() == 0 or vals.shape[0] != nnz:
        got = vals.shape[0] if vals.dim() else 1
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{nnz}, nnz from values: {got}")
    dense_sizes = tuple(vals.shape[1:])
    lowest = idx.amin(1).tolist() if nnz else [0] * sparse_dim
    highest = idx.amax(1).tolist() if nnz else [-1] * sparse_dim
    for d, low in enumerate(lowest):
        if low < 0:
            raise RuntimeError(f"found negative index {low} for dim {d}")
    if size is None:
        shape = tuple(h + 1 for h in highest) + dense_sizes
    else:
        shape = tuple(int(s) for s in size)
        if shape[sparse_dim:] != dense_sizes:
            raise RuntimeError(f"values has incorrect size, expected "
                               f"{[nnz, *shape[sparse_dim:]]}, got {list(vals.shape)}")
        for d, high in enumerate(highest):
            if high >= shape[d]:
                raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                                   f"{shape[d]} but found index {high}")
    if requires_grad and not (vals.dtype.is_floating_point or vals.dtype.is_complex):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                           "gradients")
    if vals.requires_grad:      # a non-leaf: the values' history is its own
        vals = vals.view(vals.shape)
    else:                       # a leaf of its own over the values' memory
        vals = vals.detach().requires_grad_(requires_grad)
    coalesced = nnz <= 1 if is_coalesced is None else bool(is_coalesced)
    return SparseTensor(idx, vals, mt.Size(shape), coalesced)


def _check_size_length(size, sparse_dim, dense_dim):
    if len(size) != sparse_dim + dense_dim:
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: "
                           f"len(size) = {len(size)}, sparse_dim = {sparse_dim}, "
                           f"dense_dim = {dense_dim}")


def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """``Tensor.to_sparse``: the COO tensor of the entries of ``self`` (its first
    ``sparse_dim`` dims, default all) that are nonzero, in order (so coalesced)."""
    mt = _mt()
    if layout is not None and layout is not sparse_coo:
        raise NotImplementedError(f"to_sparse: layout {layout} is not supported; microtensor "
                                  "has sparse COO tensors only")
    if blocksize is not None or dense_dim is not None:
        raise NotImplementedError("to_sparse: blocksize and dense_dim apply to compressed "
                                  "layouts, which microtensor does not have")
    ndim = self.dim()
    sparse_dim = ndim if sparse_dim is None else sparse_dim
    if not 0 <= sparse_dim <= ndim:
        raise RuntimeError(f"dense_to_sparse: sparse_dim argument must be in [0,{ndim}] range, "
                           f"but {sparse_dim} is given")
    if sparse_dim == 0 and ndim > 0:
        raise RuntimeError("dense_to_sparse: sparse_dim argument must be in >0 when "
                           "self.dim()>0")
    nonzero = self.detach() != 0
    if sparse_dim < ndim:
        nonzero = nonzero.any(tuple(range(sparse_dim, ndim)))
    if sparse_dim == 0:     # a 0-d tensor: one entry, or none when it is zero
        kept = int(nonzero.item())
        return SparseTensor(mt.zeros(0, kept, dtype=int64), self.unsqueeze(0)[:kept],
                            self.shape, True)
    idx = nonzero.nonzero().t().contiguous()
    return SparseTensor(idx, self[tuple(idx)], self.shape, True)


# --------------------------------------------------------------------------- the type

def _refusing(name):
    def method(*args, **kwargs):
        raise unsupported(name)
    method.__name__ = name
    return method


def _scalar(other):
    """``other`` as a number or 0-d tensor (which scale a sparse tensor), else None."""
    if isinstance(other, numbers.Number) and not isinstance(other, bool):
        return other
    if isinstance(other, TensorBase) and other.dim() == 0:
        return other
    return None


class SparseTensor:
    """A sparse COO tensor (``layout == microtensor.sparse_coo``); see the module."""

    __slots__ = ("_index_tensor", "_value_tensor", "_shape", "_coalesced", "__weakref__")
    __array_priority__ = 1000   # NumPy defers to our operators

    is_sparse = True
    is_sparse_csr = False
    layout = sparse_coo

    def __init__(self, indices, values, shape, coalesced):
        self._index_tensor = indices
        self._value_tensor = values
        self._shape = shape
        self._coalesced = coalesced

    def _like(self, values, indices=None, shape=None, coalesced=None):
        return SparseTensor(self._index_tensor if indices is None else indices, values,
                            self._shape if shape is None else shape,
                            self._coalesced if coalesced is None else coalesced)

    # ------------------------------------------------------------------ metadata
    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._value_tensor.dtype)
    device = property(lambda self: self._value_tensor.device)
    ndim = property(lambda self: len(self._shape))
    is_cuda = property(lambda self: self._value_tensor.is_cuda)
    is_meta = False
    is_quantized = False
    is_nested = False

    def size(self, dim=None):
        if dim is None:
            return self._shape
        return self._shape[self._dim(dim)]

    def dim(self):
        return len(self._shape)

    ndimension = dim

    def numel(self):
        return math.prod(self._shape)

    nelement = numel

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def sparse_dim(self):
        return self._index_tensor.shape[0]

    def dense_dim(self):
        return self._value_tensor.dim() - 1

    def _nnz(self):
        return self._index_tensor.shape[1]

    def is_coalesced(self):
        return self._coalesced

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_complex(self):
        return self.dtype.is_complex

    def element_size(self):
        return self.dtype.itemsize

    def is_contiguous(self, memory_format=None):
        return False      # PyTorch's answer: no strided memory

    def _dim(self, dim):
        n = max(self.dim(), 1)
        if not -n <= dim < n:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-n}, {n - 1}], but got {dim})")
        return dim % n

    # ------------------------------------------------------------------ parts
    def _indices(self):
        return self._index_tensor

    def _values(self):
        return self._value_tensor

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._index_tensor

    def values(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._value_tensor

    def _linear_indices(self):
        """Each entry's position in the sparse dims flattened row-major (int64, nnz)."""
        strides = [1] * self.sparse_dim()
        for d in range(self.sparse_dim() - 2, -1, -1):
            strides[d] = strides[d + 1] * self._shape[d + 1]
        weights = _mt().tensor(strides, dtype=int64).unsqueeze(1)
        return (self._index_tensor * weights).sum(0)

    def _sparse_sizes(self):
        return tuple(self._shape[:self.sparse_dim()])

    def coalesce(self):
        """Duplicates summed, entries ordered by their indices (lexicographically)."""
        if self._coalesced:
            return self
        mt = _mt()
        positions, inverse = mt.unique(self._linear_indices(), sorted=True,
                                       return_inverse=True)
        vals = self._value_tensor
        summed = mt.zeros((positions.shape[0],) + tuple(vals.shape[1:]), dtype=vals.dtype,
                          device=vals.device).index_add(0, inverse, vals)
        return SparseTensor(_unravel(positions, self._sparse_sizes()), summed, self._shape,
                            True)

    def to_dense(self, dtype=None, *, masked_grad=True):
        """The dense tensor: each entry added at its position (so duplicates sum)."""
        mt = _mt()
        if dtype is not None:
            raise RuntimeError("dtype argument is not supported by sparse_to_dense")
        vals = self._value_tensor
        rows = math.prod(self._sparse_sizes())
        flat = mt.zeros((rows,) + tuple(vals.shape[1:]), dtype=vals.dtype, device=vals.device)
        return flat.index_add(0, self._linear_indices(), vals).view(self._shape)

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        if layout is not None and layout is not sparse_coo:
            raise NotImplementedError(f"to_sparse: layout {layout} is not supported; "
                                      "microtensor has sparse COO tensors only")
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError("to_sparse: conversion from Sparse to Sparse with sparse_dim "
                               "argument !=self.sparse_dim() is not supported")
        return self

    # ------------------------------------------------------------------ autograd
    requires_grad = property(lambda self: self._value_tensor.requires_grad,
                             lambda self, flag: self.requires_grad_(flag))
    data = property(lambda self: self.detach())
    grad_fn = property(lambda self: self._value_tensor.grad_fn)
    is_leaf = property(lambda self: self._value_tensor.is_leaf)

    def requires_grad_(self, requires_grad=True):
        self._value_tensor.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        """A leaf's gradient as PyTorch's: sparse, on this tensor's coalesced pattern, each
        entry the gradient at its position (its values' gradient, which every duplicate
        of a position shares when the tensor was used through its dense value)."""
        vals = self._value_tensor
        if not vals.is_leaf or vals.grad is None:
            return None
        if self._coalesced:
            return self._like(vals.grad)
        mt = _mt()
        linear = self._linear_indices()
        order = linear.argsort(stable=True)
        ordered = linear[order]
        first = mt.cat([mt.ones(1, dtype=mt.bool), ordered[1:] != ordered[:-1]])
        kept = order[first]      # ordered as coalesced, flagged as this tensor (as PyTorch)
        return SparseTensor(self._index_tensor[:, kept], vals.grad[kept], self._shape, False)

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise RuntimeError("assigning a gradient to a sparse tensor is not supported; "
                               "only None (to clear it) is")
        self._value_tensor.grad = None

    def detach(self):
        return self._like(self._value_tensor.detach())

    def clone(self, *, memory_format=None):
        return self._like(self._value_tensor.clone(), self._index_tensor.clone())

    def to(self, *args, **kwargs):
        vals = self._value_tensor.to(*args, **kwargs)
        if vals is self._value_tensor:
            return self
        return self._like(vals, self._index_tensor.to(vals.device))

    def cpu(self):
        return self.to("cpu")

    def type(self, dtype=None):
        if dtype is not None:
            return self.to(dtype)
        return f"microtensor.sparse.{BY_NAME[self.dtype.name].scalar_name}Tensor"

    # ------------------------------------------------------------------ shape
    def transpose(self, dim0, dim1):
        d0, d1 = self._dim(dim0), self._dim(dim1)
        sparse_dim = self.sparse_dim()
        shape = list(self._shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        if d0 < sparse_dim and d1 < sparse_dim:
            order = list(range(sparse_dim))
            order[d0], order[d1] = order[d1], order[d0]
            return self._like(self._value_tensor, self._index_tensor[order],
                              _mt().Size(shape), self._nnz() <= 1 or d0 == d1)
        raise RuntimeError(f"sparse transpose: transposed dimensions must be sparse Got "
                           f"sparse_dim: {sparse_dim}, d0: {d0}, d1: {d1}")

    def t(self):
        if self.sparse_dim() > 2 or self.dense_dim() > 0:
            raise RuntimeError(f"t() expects a tensor with <= 2 sparse and 0 dense dimensions, "
                               f"but got {self.sparse_dim()} sparse and {self.dense_dim()} "
                               f"dense dimensions")
        return self if self.dim() < 2 else self.transpose(0, 1)

    # ------------------------------------------------------------------ arithmetic
    def neg(self):
        return self._like(-self._value_tensor)

    __neg__ = neg

    def mul(self, other):
        factor = _scalar(other)
        if factor is not None:
            return self._like(self._value_tensor * factor)
        if not isinstance(other, TensorBase):
            raise unsupported("mul")
        # times a dense tensor: each entry times the dense value at its position
        if _mt().broadcast_shapes(self._shape, other.shape) != self._shape:
            raise unsupported("mul (broadcasting a sparse tensor to a larger shape)")
        at_entries = other.expand(self._shape)[tuple(self._index_tensor)]
        return self._like(self._value_tensor * at_entries)

    __mul__ = __rmul__ = mul

    def div(self, other, *, rounding_mode=None):
        divisor = _scalar(other)
        if divisor is None:
            raise RuntimeError("Sparse division requires a scalar or zero-dim dense tensor "
                               "divisor")
        if rounding_mode is None:
            return self._like(self._value_tensor / divisor)
        # rounding is not linear: duplicates are summed first
        coalesced = self.coalesce()
        return coalesced._like(coalesced._value_tensor.div(divisor,
                                                            rounding_mode=rounding_mode))

    __truediv__ = div

    def __floordiv__(self, other):
        return self.div(other, rounding_mode="floor")

    def add(self, other, *, alpha=1):
        if not isinstance(other, SparseTensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) "
                               "instead.")
        if other._shape != self._shape:
            raise RuntimeError(f"add: expected sizes of 'self' and 'other' to match, but "
                               f"{list(self._shape)} != {list(other._shape)}")
        if other.sparse_dim() != self.sparse_dim():
            raise RuntimeError(f"add: expected 'self' and 'other' to have same sparse "
                               f"dimensions, but got {self.sparse_dim()} and "
                               f"{other.sparse_dim()}")
        mt = _mt()
        theirs = other._value_tensor if alpha == 1 else other._value_tensor * alpha
        dtype = mt.result_type(self._value_tensor, theirs)
        # the other's entries first, as PyTorch's
        both = SparseTensor(mt.cat([other._index_tensor, self._index_tensor], 1),
                            mt.cat([theirs.to(dtype), self._value_tensor.to(dtype)]),
                            self._shape, False)
        # PyTorch merges two coalesced operands and concatenates any others
        return both.coalesce() if self._coalesced and other._coalesced else both

    __add__ = add

    def sub(self, other, *, alpha=1):
        if not isinstance(other, SparseTensor):
            raise RuntimeError("sub(sparse, dense) is not supported. Use sub(dense, sparse) "
                               "instead.")
        return self.add(other, alpha=-alpha)

    __sub__ = sub

    def sum(self, dim=None, keepdim=False, dtype=None):
        if keepdim:
            raise unsupported("sum (keepdim=True)")
        from microtensor.sparse import sum as sparse_sum
        return sparse_sum(self, dim, dtype=dtype)

    def mm(self, mat2):
        from microtensor.sparse import mm
        return mm(self, mat2)

    def matmul(self, other):
        from microtensor.sparse import matmul
        return matmul(self, other)

    __matmul__ = matmul

    def __radd__(self, other):       # dense + sparse: dense, as PyTorch's
        if not isinstance(other, TensorBase):
            raise unsupported("add")
        return other + self.to_dense()

    def __rsub__(self, other):
        if not isinstance(other, TensorBase):
            raise unsupported("sub")
        return other - self.to_dense()

    def __rmatmul__(self, other):
        raise unsupported("matmul")

    def __rtruediv__(self, other):
        raise unsupported("div")

    # ------------------------------------------------------------------ refusals
    def numpy(self, *, force=False):
        raise TypeError("can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() "
                        "first.")

    def __array__(self, dtype=None, copy=None):
        return self.numpy()

    def __bool__(self):
        raise unsupported("is_nonzero")

    # comparisons have no sparse version: refused rather than compared by identity
    __eq__, __ne__, __lt__, __le__, __gt__, __ge__ = (
        _refusing(name) for name in ("eq", "ne", "lt", "le", "gt", "ge"))
    __hash__ = object.__hash__

    def __getattr__(self, name):
        # a dense Tensor method: a sparse kernel PyTorch may have, this type does not
        tensor_attribute = getattr(_mt().Tensor, name, None)
        if tensor_attribute is None or name.startswith("__"):
            raise AttributeError(f"'SparseTensor' object has no attribute '{name}'")
        if name.startswith("_"):
            raise SparseLayoutError(f"'{name}' of a dense tensor was asked of a sparse one: "
                                    f"this operation does not support layout {sparse_coo} "
                                    f"(convert with .to_dense())")
        if callable(tensor_attribute):
            return _refusing(name)
        raise unsupported(name)

    def __getitem__(self, index):
        raise unsupported("index (subscripting)")

    def __setitem__(self, index, value):
        raise unsupported("index_put_ (subscript assignment)")

    def __iter__(self):
        raise unsupported("unbind (iteration)")

    def __reduce_ex__(self, protocol):
        return _rebuild, (self._index_tensor, self._value_tensor, tuple(self._shape),
                          self._coalesced)

    # ------------------------------------------------------------------ printing
    def __repr__(self):
        suffixes = [f"nnz={self._nnz()}"]
        if self.dtype not in (get_default_dtype(), default_complex_dtype(), int64, _mt().bool):
            suffixes.append(f"dtype={self.dtype!r}")
        if self.device.type != "cpu":
            suffixes.append(f"device='{self.device}'")
        suffixes.append(f"layout={sparse_coo!r}")
        vals = self._value_tensor
        if vals.grad_fn is not None:
            suffixes.append(f"grad_fn=<{vals.grad_fn.name()}>")
        elif vals.requires_grad:
            suffixes.append("requires_grad=True")
        text = (f"tensor(indices={_part(self._index_tensor, 15)},\n"
                f"       values={_part(vals, 14)},\n"
                f"       size={tuple(self._shape)}")
        return _with_suffixes(text, suffixes, 7)

    __str__ = __repr__


def _converter(method, dtype_name):
    def convert(self):
        return self.to(getattr(_mt(), dtype_name))
    convert.__name__ = method
    return convert


# ``double()``, ``long()``...: ``to`` that dtype
for _method, _dtype_name in (("half", "float16"), ("bfloat16", "bfloat16"), ("float", "float32"),
                             ("double", "float64"), ("cfloat", "complex64"),
                             ("cdouble", "complex128"), ("bool", "bool"), ("byte", "uint8"),
                             ("char", "int8"), ("short", "int16"), ("int", "int32"),
                             ("long", "int64")):
    setattr(SparseTensor, _method, _converter(_method, _dtype_name))


def _rebuild(indices, values, shape, coalesced):
    return SparseTensor(indices, values, _mt().Size(shape), coalesced)


def _part(t, indent):
    """``indices``/``values`` as PyTorch prints them in a sparse tensor: no dtype, the
    size of an empty one."""
    if t.numel() == 0:
        return f"tensor([], size={tuple(t.shape)})"
    return "tensor(" + _body(t.detach().cpu(), indent + 7) + ")"


def _unravel(linear, sizes):
    """The ``len(sizes) x n`` indices of row-major positions ``linear``."""
    mt = _mt()
    rows = []
    for size in reversed(sizes):
        rows.append(linear.remainder(size) if size else linear)
        linear = linear.div(size, rounding_mode="floor") if size else linear
    if not rows:
        return mt.zeros(0, linear.shape[0], dtype=int64)
    return mt.stack(rows[::-1])
