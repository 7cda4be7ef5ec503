"""Sorting and selection along one dim: ``sort``, ``argsort``, ``topk``, ``kthvalue``,
``median``, ``mode``, ``cummax``/``cummin`` and ``cumprod``.

Kernels sort with NumPy's stable sort along the dim (NaN sorts as the largest value, as in
PyTorch).  The ops returning ``(values, indices)`` are a kernel op returning a plain tuple
(what autograd records) and a composite that names the fields as
``torch.return_types``.  Their derivatives put the gradient of each value at the index it
was taken from (``scatter_add``), so they only save the indices, as PyTorch does.  Every
kernel op has ``family="reduction"``: vmap shifts ``dim`` past the batch dim.
"""
import math
from collections import namedtuple

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import bool_, float32, float64, int32, int64
from microtensor._dtype import result_type
from microtensor.ops.arguments import int_arg
from microtensor.ops.factory import tensor
from microtensor.ops.loops import (_type_name, array_module, conj_if_complex, dims_of,
                                   is_floating_array, new_result, owned, refuse_complex)
from microtensor.ops.reduction import (_evenly_to_extrema, _ValuesIndices, _along,
                                       _check_reducible, _fresh, _integer_to_int64, _into,
                                       cumulative_, refuse_bool_accumulation)
from microtensor.ops.registry import Sample, op, out_with_dim
from microtensor.ops.shape import cat, stack
from microtensor.vmap.helpers import batch_size, call, to_front, unwrap, wrap


def _return_type(name):
    """A ``(values, indices)`` named tuple printed as ``microtensor.return_types.<name>``."""
    t = type(name, (_ValuesIndices, namedtuple(name, ("values", "indices"))), {"__slots__": ()})
    t.__module__ = "microtensor.return_types"
    return t


ReturnSort, ReturnTopk, ReturnKthvalue, ReturnMedian, ReturnMode, ReturnCummax, \
    ReturnCummin = map(_return_type, ("sort", "topk", "kthvalue", "median", "mode", "cummax",
                                      "cummin"))


# --------------------------------------------------------------------------- helpers

def _stable_order(arr, axis, descending):
    """Indices sorting ``arr`` along ``axis``; equal values keep their order either way."""
    if not descending:
        return np.argsort(arr, axis=axis, kind="stable")
    n = arr.shape[axis]
    # ascending on the reversed array puts equal values last-first; reversing that
    # gives descending order with equal values first-first
    reversed_order = np.argsort(np.flip(arr, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(reversed_order, axis)


def _values_indices(self, arr, axis, order, keepdim=True):
    """Tensors of ``arr`` taken at ``order`` along ``axis``, shaped as the 0-d input when
    it is one, with ``axis`` dropped unless ``keepdim``."""
    values = np.take_along_axis(arr, order, axis=axis)
    if self.dim() == 0:
        values, order = values.reshape(()), order.reshape(())
    elif not keepdim:
        values, order = values.squeeze(axis), order.squeeze(axis)
    return _fresh(values, self._dtype), _fresh(order, int64)


def _to_positions(grad, self_shape, dim, indices, keepdim=True):
    """The gradient of values taken at ``indices`` along ``dim``, at those positions
    (summed where an index repeats)."""
    if not self_shape:
        return grad
    d = meta.wrap_dim(dim, len(self_shape))
    if not keepdim:
        grad, indices = grad.unsqueeze(d), indices.unsqueeze(d)
    return grad.new_zeros(self_shape).scatter_add(d, indices, grad)


def _check_k(name, k, size, dim):
    if not 1 <= k <= size:
        if name == "topk":
            raise RuntimeError("selected index k out of range")
        raise RuntimeError(f"{name}(): selected number k out of range for dimension {dim}")


def _dim_size(self, dim):
    d = meta.wrap_dim(dim, self.dim())
    return d, (self._sizes[d] if self.dim() else 1)


# --------------------------------------------------------------------------- samples

def _distinct(make, *shape):
    """A tensor of distinct values (ties make a selection's subgradient ambiguous)."""
    n = int(np.prod(shape, dtype=np.int64))
    values = np.random.default_rng(n).permutation(n).astype(np.float64) / 2 - n / 4
    return tensor(values.reshape(shape))


def _sort_samples(make):
    return [Sample(_distinct(make, 3, 4)), Sample(_distinct(make, 3, 4), 0, True),
            Sample(_distinct(make, 2, 3, 4), -2, descending=True),
            Sample(_distinct(make, 4, 3).mT, 1), Sample(_distinct(make)),
            Sample(tensor([2, 1, 2, 0, 1]), descending=True),
            Sample(tensor([1.0, float("nan"), -1.0, 1.0]))]


def _topk_samples(make):
    return [Sample(_distinct(make, 3, 4), 2), Sample(_distinct(make, 3, 4), 3, 0),
            Sample(_distinct(make, 2, 3, 4), 1, -2, largest=False),
            Sample(_distinct(make, 5), 5), Sample(_distinct(make), 1)]


def _kthvalue_samples(make):
    return [Sample(_distinct(make, 3, 4), 2), Sample(_distinct(make, 3, 4), 3, 0, True),
            Sample(_distinct(make, 2, 3, 4), 1, -2), Sample(_distinct(make), 1)]


def _median_dim_samples(make):
    return [Sample(_distinct(make, 3, 4), 1), Sample(_distinct(make, 3, 4), 0, True),
            Sample(_distinct(make, 2, 3, 4), -2), Sample(_distinct(make), 0),
            Sample(tensor([3.0, 1.0, 2.0, 1.0]), 0)]


def _median_samples(make):
    return [Sample(_distinct(make, 3, 4)), Sample(make(0))] + _median_dim_samples(make)


def _mode_samples(make):
    return [Sample(tensor([[1.0, 2, 2, 3], [3, 3, 1, 1], [0, 4, 4, 4]])),
            Sample(tensor([[1, 2, 2], [3, 3, 1]]), 0),
            Sample(tensor([[1.0, 2], [2, 1], [2, 5]]), 0, True), Sample(_distinct(make, 2, 3)),
            Sample(_distinct(make))]


def _cum_extremum_samples(make):
    return [Sample(_distinct(make, 3, 4), 1), Sample(_distinct(make, 3, 4), 0),
            Sample(_distinct(make, 2, 3, 4), -2), Sample(_distinct(make), 0),
            Sample(tensor([1.0, 3.0, 3.0, 2.0, 1.0, 3.0]), 0), Sample(make(0, 3), 0)]


def _cumprod_samples(make):
    return [Sample(make(3, 4), 1), Sample(make(3, 4), 0), Sample(make(2, 3, 4), -2),
            Sample(make(), 0), Sample(tensor([[2.0, 0.0, 3.0, 0.5], [0.0, 1.5, 0.0, 2.0]]), 1),
            Sample(tensor([1, 2, 3]), 0), Sample(make(4), 0, dtype=make().dtype)]


# --------------------------------------------------------------------------- sort

@op(family="reduction", method=False, function=False, samples=_sort_samples)
def _sort(self, dim=-1, descending=False):
    if self._dtype.is_complex:
        raise RuntimeError(" Sort does not support complex dtypes on CPU")
    arr, axis = _along(self, dim)
    values, indices = _values_indices(self, arr, axis, _stable_order(arr, axis, descending))
    return _laid_out_like(values, self), _laid_out_like(indices, self)


def _laid_out_like(result, like):
    """``result`` strided as ``empty_like(like)`` (the input's layout when it is dense, as
    PyTorch's sort allocates its outputs): a copy when it is not already."""
    strides = meta.preserve_format_strides(like._sizes, like._strides)
    if strides == result._strides:
        return result
    return result.new_empty_strided(result._sizes, strides).copy_(result)


@_sort.def_derivative("self")
def _sort(grad, self_shape, dim, result1):
    return _to_positions(grad[0], self_shape, dim, result1)


@op(out=True, kind="composite", samples=_sort_samples)
def sort(self, dim=-1, descending=False, *, stable=False):
    """``(values, indices)`` sorted along ``dim``; the sort is always stable."""
    return ReturnSort(*_sort(self, dim, descending))


@op(kind="composite", samples=_sort_samples)
def argsort(self, dim=-1, descending=False, stable=False):
    return _sort(self, dim, descending)[1]


@op(family="reduction", method=False, function=False, samples=_topk_samples)
def _topk(self, k, dim=-1, largest=True, sorted=True):
    if self._dtype.is_complex or self._dtype is bool_:
        kind = "complex" if self._dtype.is_complex else "bool"
        raise RuntimeError(f" topk does not support {kind} dtypes on CPU")
    k = int_arg(k, "k")
    d, size = _dim_size(self, dim)
    if not 0 <= k <= size:
        _check_k("topk", k, size, d)
    arr, axis = _along(self, dim)
    order = _stable_order(arr, axis, largest)
    return _values_indices(self, arr, axis,
                           np.take(order, array_module(arr).arange(k), axis=axis))


@_topk.def_derivative("self")
def _topk(grad, self_shape, dim, result1):
    return _to_positions(grad[0], self_shape, dim, result1)


@op(out=True, kind="composite", samples=_topk_samples)
def topk(self, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) values along ``dim``, in sorted order."""
    return ReturnTopk(*_topk(self, k, dim, largest, sorted))


# --------------------------------------------------------------------------- kth, median, mode

def _select_kth(self, k, dim, keepdim, nan_first=False):
    """The ``k``-th (from 0) smallest along ``dim``; with ``nan_first`` a row holding NaN
    gives its first NaN (median propagates NaN, kthvalue sorts it as the largest)."""
    arr, axis = _along(self, dim)
    order = np.take(np.argsort(arr, axis=axis, kind="stable"),
                    array_module(arr).asarray([k]), axis=axis)
    if nan_first and is_floating_array(arr):
        nans = np.isnan(arr)
        order = np.where(nans.any(axis=axis, keepdims=True),
                         np.argmax(nans, axis=axis, keepdims=True), order)
    return _values_indices(self, arr, axis, order, keepdim)


@op(family="reduction", method=False, function=False, samples=_kthvalue_samples)
def _kthvalue(self, k, dim=-1, keepdim=False):
    k = int_arg(k, "k")
    d, size = _dim_size(self, dim)
    if not size:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    _check_k("kthvalue", k, size, d)
    return _select_kth(self, k - 1, dim, keepdim)


@op(out=True, kind="composite", samples=_kthvalue_samples)
def kthvalue(self, k, dim=-1, keepdim=False):
    """The ``k``-th smallest value along ``dim`` and its index."""
    refuse_complex(self, "kthvalue_cpu", bool_too=True)
    return ReturnKthvalue(*_kthvalue(self, k, dim, keepdim))


@op(family="reduction", method=False, function=False, samples=_median_dim_samples)
def _median(self, dim, keepdim=False):
    _check_reducible("median", self, dim)
    _, size = _dim_size(self, dim)
    return _select_kth(self, (size - 1) // 2, dim, keepdim, nan_first=True)


def _median_all_samples(make):
    return [Sample(_distinct(make, 3, 4)), Sample(_distinct(make)), Sample(make(0)),
            Sample(tensor([[3.0, 1.0], [1.0, 2.0]])), Sample(_distinct(make, 2, 3, 4), (0, 2))]


@op(family="reduction", method=False, function=False, samples=_median_all_samples)
def _median_all(self, dim=None, keepdim=False):
    """The lower median over ``dim`` (every dim when None), NaN where a NaN is among them:
    ``median(input)``, and what vmap makes of it (every per-sample dim)."""
    arr = self._array()
    dims = dims_of(dim, arr.ndim)
    kept = [d for d in range(arr.ndim) if d not in dims]
    rows = np.transpose(arr, kept + list(dims)).reshape([arr.shape[d] for d in kept] + [-1])
    if rows.shape[-1] == 0:
        values = np.full_like(np.sum(rows, axis=-1, dtype=rows.dtype), np.nan)
    else:
        # NumPy sorts NaN last, so a row with NaN has it at its end
        ordered = np.sort(rows, axis=-1)
        values = ordered[..., (rows.shape[-1] - 1) // 2]
        if is_floating_array(ordered):
            values = np.where(np.isnan(ordered[..., -1]), ordered[..., -1], values)
    if keepdim:
        values = np.expand_dims(values, dims)
    return _fresh(values, self._dtype)


# as PyTorch, the gradient is shared evenly by the elements equal to the median
_median_all.def_derivative("self")(_evenly_to_extrema)


@op(out=out_with_dim, kind="composite", samples=_median_samples)
def median(self, dim=None, keepdim=False):
    """The lower median of all elements, or ``(values, indices)`` along ``dim``."""
    refuse_complex(self, "median_cpu" if dim is None else "median_out", bool_too=True)
    if dim is None:
        return _median_all(self)
    return ReturnMedian(*_median(self, dim, keepdim))


def _mode_along_last(arr):
    """Per row of a 2-D array: the most frequent value (the smallest among equally
    frequent ones) and the index of its last occurrence."""
    order = np.argsort(arr, axis=1, kind="stable")
    ordered = np.take_along_axis(arr, order, axis=1)
    xp = array_module(arr)
    positions = np.broadcast_to(xp.arange(arr.shape[1]), arr.shape)
    starts = np.ones_like(arr, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    run_start = np.maximum.accumulate(np.where(starts, positions, 0), axis=1)
    # the end of the first longest run: the smallest most frequent value; the stable
    # sort puts its last occurrence there
    end = np.argmax(positions - run_start, axis=1)[:, None]
    return np.take_along_axis(ordered, end, 1)[:, 0], np.take_along_axis(order, end, 1)[:, 0]


@op(family="reduction", method=False, function=False, samples=_mode_samples)
def _mode(self, dim=-1, keepdim=False):
    arr, axis = _along(self, dim)
    moved = np.moveaxis(arr, axis, -1)
    shape = moved.shape[:-1]
    if moved.shape[-1] == 0:
        raise IndexError(f"mode(): Expected reduction dim {axis} to have non-zero size.")
    values, indices = _mode_along_last(moved.reshape(-1, moved.shape[-1]))
    values, indices = values.reshape(shape), indices.reshape(shape)
    if keepdim and self.dim():
        values, indices = np.expand_dims(values, axis), np.expand_dims(indices, axis)
    return _fresh(values, self._dtype), _fresh(indices, int64)


@op(out=True, kind="composite", samples=_mode_samples)
def mode(self, dim=-1, keepdim=False):
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and
    the index of its last occurrence."""
    refuse_complex(self, "mode_cpu")
    return ReturnMode(*_mode(self, dim, keepdim))


def _selected_derivative(grad, self_shape, dim, keepdim, result1):
    return _to_positions(grad[0], self_shape, dim, result1, keepdim)


_kthvalue.def_derivative("self")(_selected_derivative)
_median.def_derivative("self")(_selected_derivative)
_mode.def_derivative("self")(_selected_derivative)


# --------------------------------------------------------------------------- cumulative

def _cum_extremum(name, accumulate):
    def kernel(self, dim):
        meta.wrap_dim(dim, self.dim())
        arr, axis = _along(self, dim)
        values = accumulate(arr, axis=axis) if arr.size else arr.copy()
        shape = [1] * arr.ndim
        shape[axis] = arr.shape[axis]
        positions = array_module(arr).arange(arr.shape[axis]).reshape(shape)
        # a new running extremum (ties included, as PyTorch) moves the index forward
        reached = (arr == values) | np.isnan(arr) if is_floating_array(arr) else arr == values
        indices = np.maximum.accumulate(np.where(reached, positions, 0), axis=axis) \
            if arr.size else array_module(arr).zeros(arr.shape, np.int64)
        return _fresh(values.reshape(self._sizes), self._dtype), \
            _fresh(indices.reshape(self._sizes), int64)
    kernel.__name__ = "_" + name
    kernel_op = op(family="reduction", method=False, function=False,
                   samples=_cum_extremum_samples)(kernel)

    def derivative(grad, self_shape, dim, result1):
        return _to_positions(grad[0], self_shape, dim, result1)
    kernel_op.def_derivative("self")(derivative)
    return kernel_op


_cummax = _cum_extremum("cummax", np.maximum.accumulate)
_cummin = _cum_extremum("cummin", np.minimum.accumulate)


@op(out=True, kind="composite", samples=_cum_extremum_samples)
def cummax(self, dim):
    """Running maximum along ``dim`` and the index where it was reached."""
    refuse_complex(self, "cummax_cpu")
    return ReturnCummax(*_cummax(self, dim))


@op(out=True, kind="composite", samples=_cum_extremum_samples)
def cummin(self, dim):
    """Running minimum along ``dim`` and the index where it was reached."""
    refuse_complex(self, "cummin_cpu")
    return ReturnCummin(*_cummin(self, dim))


@op(out=True, out_casting="dtype", family="reduction", samples=_cumprod_samples)
def cumprod(self, dim, *, dtype=None):
    refuse_bool_accumulation("cumprod", dtype)
    dtype = _integer_to_int64(self, dtype)
    result = new_result(self._sizes, dtype, device=self.device)
    arr, axis = _along(self, dim)
    if self._numel:
        np.cumprod(arr, axis=axis, dtype=dtype.np, out=result._array().reshape(arr.shape))
    return result


@cumprod.def_derivative("self")
def cumprod(grad, self, dim):
    # d out_i / d x_j (j <= i) is the product of x_0..x_i without x_j: the cumulative
    # product of x with x_j replaced by 1.  Written so, it holds where x has zeros too
    # (dividing out by x_j would not), at the cost of an n-by-n intermediate.
    if self.dim() == 0:
        return grad
    d = meta.wrap_dim(dim, self.dim())
    x = self.movedim(d, -1).to(grad.dtype)
    g = grad.movedim(d, -1)
    n = x.shape[-1]
    rows = tensor(np.arange(n)).view(n, 1)
    cols = tensor(np.arange(n)).view(1, n)
    without_j = x.unsqueeze(-2).expand(*x.shape[:-1], n, n).masked_fill(rows == cols, 1.0)
    partial = without_j.cumprod(-1).masked_fill(cols < rows, 0.0)   # [..., j, i]
    return (conj_if_complex(partial) * g.unsqueeze(-2)).sum(-1).movedim(-1, d)



# --------------------------------------------------------------------------- searchsorted

def _searchsorted_samples(make):
    seq = tensor([-1.0, 0.0, 0.5, 0.5, 2.0])
    rows = tensor([[-1.0, 0.0, 1.0, 3.0], [0.0, 0.0, 2.0, 2.5]])
    vals = tensor([[0.5, -2.0, 3.0], [2.0, 0.0, 1.0]])
    return [Sample(seq, vals), Sample(seq, vals, right=True), Sample(seq, vals, side="right"),
            Sample(rows, vals), Sample(rows, vals, right=True, out_int32=True),
            Sample(tensor([2.0, -1.0, 0.5, 0.0]), vals, sorter=tensor([1, 3, 2, 0])),
            Sample(seq, tensor(0.5))]


@op(out=True, inputs=(), method=False, differentiable=False, samples=_searchsorted_samples)
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """Indices where ``self`` would be inserted in the innermost dim of ``sorted_sequence``
    keeping it sorted (``right``/``side="right"``: after equal values)."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites,"
                               " got side of left while right was True")
        right = side == "right"
    refuse_complex(result_type(sorted_sequence, self), "searchsorted_out_cpu", bool_too=True)
    seq = sorted_sequence._array()
    values = self._array() if hasattr(self, "_array") else np.asarray(self)
    if sorter is not None:
        if sorter._sizes != sorted_sequence._sizes:
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same "
                               "size, but got boundary tensor "
                               f"{list(sorted_sequence._sizes)}and got sorter tensor "
                               f"{list(sorter._sizes)}")
        seq = np.take_along_axis(seq, sorter._array(), axis=-1)
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if seq.ndim > 1 and (values.ndim != seq.ndim or values.shape[:-1] != seq.shape[:-1]):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
            "dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    side_name = "right" if right else "left"
    if seq.ndim == 1:
        found = np.searchsorted(seq, values, side=side_name)
    else:
        # count, per row, the boundaries before each value (vectorised over rows)
        s, v = seq[..., None, :], values[..., :, None]
        found = ((s <= v) if right else (s < v)).sum(-1)
    return _fresh(found.astype(np.int32 if out_int32 else np.int64),
                  int32 if out_int32 else int64)


def _front(value, bdim, size):
    if bdim is None:
        return value.unsqueeze(0).expand((size,) + tuple(value._sizes))
    return to_front(value, bdim)


@searchsorted.def_batch_rule
def searchsorted(op, level, args, kwargs):
    """A shared 1-D sequence: the values keep their batch dim.  Otherwise both (and the
    sorter) get the batch dim first; a per-sample 1-D sequence then searches each sample's
    values flattened into one row."""
    bound = op.bind(args, kwargs)
    seq, seq_b = unwrap(bound["sorted_sequence"], level)
    values, val_b = unwrap(bound["self"], level)
    sorter = bound.get("sorter")
    sorter, sorter_b = unwrap(sorter, level) if sorter is not None else (None, None)
    options = {k: bound[k] for k in ("out_int32", "right", "side")}
    if seq_b is None and sorter_b is None and seq.dim() == 1:
        result = call(op, (seq, values), dict(options, sorter=sorter))
        return wrap(result, val_b, level)
    size = batch_size(level)
    seq = _front(seq, seq_b, size)
    sorter = None if sorter is None else _front(sorter, sorter_b, size)
    values = _front(values, val_b, size) if hasattr(values, "_sizes") else values
    if seq.dim() == 2:
        sample_shape = tuple(values._sizes[1:])
        result = call(op, (seq, values.reshape(size, -1)), dict(options, sorter=sorter))
        return wrap(result.reshape((size,) + sample_shape), 0, level)
    return wrap(call(op, (seq, values), dict(options, sorter=sorter)), 0, level)


def _bucketize_samples(make):
    return [Sample(tensor([[0.5, -2.0, 3.0], [2.0, 0.0, 1.0]]), tensor([-1.0, 0.0, 1.0, 2.0])),
            Sample(tensor([[0.5, -2.0, 3.0], [2.0, 0.0, 1.0]]), tensor([-1.0, 0.0, 1.0, 2.0]),
                   right=True),
            Sample(tensor(1.0), tensor([0.0, 1.0, 2.0]), out_int32=True)]


@op(out=True, kind="composite", inputs=(), method=False, differentiable=False,
    samples=_bucketize_samples)
def bucketize(self, boundaries, *, out_int32=False, right=False):
    """The bucket of each element of ``self`` among the 1-D ``boundaries``."""
    if boundaries.dim() != 1:
        raise RuntimeError("boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")
    return searchsorted(boundaries, self, out_int32=out_int32, right=right)


# --------------------------------------------------------------------------- nonzero, unique
# Their result shape depends on the values: vmap refuses them (their batching rule).

def _nonzero_samples(make):
    return [Sample(tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])),
            Sample(tensor([[0, 3], [0, 0]]), as_tuple=True), Sample(tensor(3.0)),
            Sample(tensor(0.0), as_tuple=True), Sample(tensor([True, False, True]))]


def _not_as_tuple(arguments):
    if arguments["as_tuple"]:
        raise RuntimeError("nonzero does not support the out kwarg when as_tuple is True")
    return True


@op(out=_not_as_tuple, out_layout="column-major", differentiable=False, samples=_nonzero_samples)
def nonzero(self, *, as_tuple=False):
    """The indices of the non-zero elements: an ``(n, dim)`` tensor, or per dim a 1-D
    tensor with ``as_tuple`` (a 0-d input counts as 1-d there)."""
    arr = self._array()
    if as_tuple:
        return tuple(_fresh(i.astype(np.int64), int64)
                     for i in np.nonzero(arr.reshape(-1) if arr.ndim == 0 else arr))
    found = np.argwhere(arr) if arr.ndim else \
        array_module(arr).zeros((int(arr.reshape(1).astype(bool).sum().item()), 0), np.int64)
    return _fresh(found.astype(np.int64), int64)


def _unique_samples(make):
    x = tensor([[2.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    rows = tensor([[1, 2], [0, 5], [1, 2], [0, 5], [0, 1]])
    return [Sample(x), Sample(x, return_inverse=True), Sample(x, return_counts=True),
            Sample(x, True, True, True), Sample(rows, dim=0, return_inverse=True,
                                                return_counts=True),
            Sample(rows, dim=1, return_counts=True), Sample(tensor(2.0), return_inverse=True)]


def _check_unique_dim(shape, axis):
    """PyTorch's rule for ``unique(dim=...)``: no empty dim but ``dim`` itself."""
    empty = shape.count(0)
    if shape and shape[axis] == 0 and empty > 1:
        raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot "
                           "be applied ")
    if shape and shape[axis] != 0 and empty:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique "
                           "cannot be applied")


@op(differentiable=False, samples=_unique_samples)
def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values (or slices along ``dim``), sorted; with ``return_inverse`` where
    each element (slice) went, with ``return_counts`` how often each occurs."""
    refuse_complex(self, "unique")
    arr = self._array()
    xp = array_module(arr)
    if hasattr(arr, "get"):       # a device array: NumPy's unique on the host copy
        arr = arr.get()
    if dim is None:
        values, inverse, counts = np.unique(arr.reshape(-1), return_inverse=True,
                                            return_counts=True)
        inverse = inverse.reshape(arr.shape)
    else:
        axis = meta.wrap_dim(dim, max(arr.ndim, 1))
        _check_unique_dim(arr.shape, axis)
        values, inverse, counts = np.unique(arr, return_inverse=True, return_counts=True,
                                            axis=axis)
        inverse = inverse.reshape(-1)
    values, inverse, counts = (xp.asarray(a)
                               for a in (values, inverse, counts))
    result = _fresh(values, self._dtype)
    extra = []
    if return_inverse:
        extra.append(_fresh(inverse.astype(np.int64), int64))
    if return_counts:
        extra.append(_fresh(counts.astype(np.int64), int64))
    return (result, *extra) if extra else result


def dynamic_shape_batch_rule(op, level, args, kwargs):
    """The result's shape depends on the values, so the samples' results would differ in
    shape: refused with torch.func's error."""
    aten = {"unique": "_unique2"}.get(op.name, op.name)
    raise RuntimeError(
        "vmap: We do not support batching operators that can output dynamic shape. "
        f"Attempted to vmap over aten::{aten}. Please file an issue at "
        "https://github.com/pytorch/pytorch/issues if you need this feature.")


nonzero.def_batch_rule(dynamic_shape_batch_rule)
unique.def_batch_rule(dynamic_shape_batch_rule)


# --------------------------------------------------------------------------- repeat_interleave

def _repeat_interleave_samples(make):
    # int repeats only: the sweeps batch every tensor argument, and repeats that differ
    # per sample are refused under vmap (tensor repeats: tests/test_selection2.py)
    return [Sample(make(2, 3), 2), Sample(make(2, 3), 2, 1), Sample(make(2, 3), 3, -2),
            Sample(make(), 3), Sample(make(2, 3), 2, 0, output_size=4)]


def _repeat_counts(self, repeats, dim):
    """``(array, axis, counts)``: ``self`` flattened when ``dim`` is None."""
    arr = self._array()
    if dim is None:
        arr, axis = arr.reshape(-1), 0
    else:
        axis = meta.wrap_dim(dim, self.dim())
        if arr.ndim == 0:
            arr = arr.reshape(1)
    if hasattr(repeats, "_array"):
        _check_integral_repeats(repeats)
        counts = repeats._array()
        if counts.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        if counts.ndim == 1 and counts.shape[0] != arr.shape[axis] and counts.shape[0] != 1:
            raise RuntimeError("repeats must have the same size as input along dim, but got "
                               f"repeats.size(0) = {counts.shape[0]} and input.size({axis}) = "
                               f"{arr.shape[axis]}")
        counts = np.broadcast_to(counts.reshape(-1), (arr.shape[axis],))
    else:
        counts = int_arg(repeats, "repeats")
    if (counts < 0) if isinstance(counts, int) else (counts < 0).any():
        raise RuntimeError("Repeats must be non-negative" if hasattr(repeats, "_array")
                           else "repeats can not be negative")
    return arr, axis, counts


def _check_integral_repeats(repeats):
    if repeats._dtype.is_floating_point or repeats._dtype.is_complex or repeats._dtype is bool_:
        raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for '
                                  f"'{_type_name(repeats._dtype)}'")


def _repeated_indices(repeats, output_size):
    """``repeat_interleave(repeats)``: each index ``i`` repeated ``repeats[i]`` times."""
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    _check_integral_repeats(repeats)
    counts = repeats._array()
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    xp = array_module(counts)
    result = xp.repeat(xp.arange(counts.shape[0], dtype=counts.dtype), counts)
    if output_size is not None and output_size != result.shape[0]:
        raise RuntimeError("allocated size does not match required size")
    return _fresh(result, repeats._dtype)


@op(samples=_repeat_interleave_samples)
def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
    """Each element (slice along ``dim``) repeated ``repeats`` times, in place; the input
    flattened when ``dim`` is None.  Given only a tensor of repeats, the indices
    ``0, 1, ...`` each repeated that many times."""
    if repeats is None:
        return _repeated_indices(self, output_size)
    arr, axis, counts = _repeat_counts(self, repeats, dim)
    result = arr.repeat(counts, axis=axis)
    if output_size is not None and output_size != result.shape[axis]:
        raise RuntimeError("allocated size does not match required size")
    return _fresh(result, self._dtype)


@repeat_interleave.def_derivative("self")
def repeat_interleave(grad, self, repeats, dim):
    # each block of copies sums back into the element it was copied from
    n_dims = self.dim()
    d = 0 if dim is None else meta.wrap_dim(dim, n_dims)
    size = self.numel() if dim is None else (self.shape[d] if n_dims else 1)
    counts = repeats._array().reshape(-1).get() if hasattr(repeats, "_array") and \
        hasattr(repeats._array(), "get") else repeats._array().reshape(-1) \
        if hasattr(repeats, "_array") else np.full((size,), int(repeats), np.int64)
    counts = np.broadcast_to(counts, (size,))
    index = tensor(np.repeat(np.arange(size), counts)).to(grad.device)
    base_shape = (size,) if dim is None else (tuple(self.shape) or (1,))
    summed = grad.new_zeros(base_shape).index_add(d, index, grad)
    return summed.reshape(self.shape)


@repeat_interleave.def_batch_rule
def repeat_interleave(op, level, args, kwargs):
    """Per-sample ``dim`` shifted past the batch dim (``dim=None``: each sample flattened).
    Repeats that differ per sample would give samples of different sizes: refused."""
    bound = op.bind(args, kwargs)
    self, bdim = unwrap(bound["self"], level)
    repeats, rbdim = unwrap(bound["repeats"], level)
    if rbdim is not None or repeats is None:
        raise RuntimeError(
            "vmap: We do not support batching operators that can output dynamic shape. "
            "Attempted to vmap over aten::repeat_interleave. Please file an issue at "
            "https://github.com/pytorch/pytorch/issues if you need this feature.")
    size = batch_size(level)
    value = _front(self, bdim, size)
    logical = bound["self"].dim()
    dim = bound["dim"]
    if dim is None:
        value, dim = value.reshape(size, -1), 1
    elif logical == 0:
        value, dim = value.reshape(size, 1), 1
    else:
        dim = meta.wrap_dim(dim, logical) + 1
    result = call(op, (value, repeats, dim), {"output_size": bound["output_size"]})
    return wrap(result, 0, level)


# --------------------------------------------------------------------------- unique_consecutive

def _unique_consecutive_samples(make):
    runs = tensor([1, 1, 2, 2, 3, 1, 1])
    rows = tensor([[1, 2], [1, 2], [0, 5], [1, 2]])
    return [Sample(runs), Sample(runs, True, True), Sample(rows, return_counts=True, dim=0),
            Sample(rows, return_inverse=True, dim=1), Sample(rows, return_inverse=True),
            Sample(tensor(2.0), return_inverse=True), Sample(tensor([], dtype=int64), True, True)]


@op(differentiable=False, samples=_unique_consecutive_samples)
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """The first element (slice along ``dim``) of each run of equal consecutive ones; with
    ``return_inverse`` the run each element belongs to, with ``return_counts`` the run
    lengths."""
    refuse_complex(self, "unique")
    arr = self._array()
    xp = array_module(arr)
    if hasattr(arr, "get"):       # a device array: computed on the host copy, as unique
        arr = arr.get()
    if dim is None:
        rows = arr.reshape(-1, 1)
    else:
        axis = meta.wrap_dim(dim, max(arr.ndim, 1))
        arr = arr.reshape(arr.shape or (1,))
        _check_unique_dim(arr.shape, axis)
        rows = np.moveaxis(arr, axis, 0)
        rows = rows.reshape(rows.shape[0], math.prod(rows.shape[1:]))   # may hold a 0
    n = rows.shape[0]
    starts = np.ones(n, dtype=bool)
    if n > 1:
        starts[1:] = (rows[1:] != rows[:-1]).any(1)
    first = np.flatnonzero(starts)
    if dim is None:
        result = _fresh(xp.asarray(arr.reshape(-1)[first]), self._dtype)
        inverse_shape = arr.shape
    else:
        # computed with the dim first and moved back, so laid out as PyTorch's
        moved = np.ascontiguousarray(np.moveaxis(arr, axis, 0)[first])
        result = owned(_fresh(xp.asarray(moved), self._dtype).movedim(0, axis))
        inverse_shape = (n,)
    extra = []
    if return_inverse:
        extra.append(_fresh(xp.asarray((np.cumsum(starts) - 1).astype(np.int64)
                                       .reshape(inverse_shape)), int64))
    if return_counts:
        extra.append(_fresh(xp.asarray(np.diff(np.append(first, n)).astype(np.int64)), int64))
    return (result, *extra) if extra else result


unique_consecutive.def_batch_rule(dynamic_shape_batch_rule)
# --------------------------------------------------------------------------- nanmedian, bincount

ReturnNanmedian = _return_type("nanmedian")


def _nan_median_positions(sorted_rows, axis):
    """Along ``axis`` of rows sorted with NaN last: the position of the lower median of the
    values that are not NaN (0 in a row of NaN only, which then gives NaN)."""
    if not is_floating_array(sorted_rows):
        return (sorted_rows.shape[axis] - 1) // 2
    count = np.sum(~np.isnan(sorted_rows), axis=axis, keepdims=True)
    return np.maximum((count - 1) // 2, 0)


def _nanmedian_samples(make):
    # (a row of NaN only: PyTorch's index there is whichever NaN its partial sort leaves
    # in the middle, ours the first)
    nan = float("nan")
    with_nans = tensor([[1.0, nan, 3.0, -2.0], [nan, 4.0, nan, nan], [0.5, 2.0, -1.0, nan]])
    return [Sample(_distinct(make, 3, 4), 1), Sample(_distinct(make, 2, 3, 4), -2, True),
            Sample(_distinct(make), 0), Sample(with_nans, 1), Sample(with_nans, 0),
            Sample(tensor([[3, 1, 2], [1, 1, 5]]), 1)]


@op(family="reduction", method=False, function=False, samples=_nanmedian_samples)
def _nanmedian(self, dim, keepdim=False):
    _check_reducible("median", self, dim)      # PyTorch's message names median()
    arr, axis = _along(self, dim)
    order = np.argsort(arr, axis=axis, kind="stable")     # NaN last
    ordered = np.take_along_axis(arr, order, axis=axis)
    k = _nan_median_positions(ordered, axis)
    positions = array_module(arr).zeros(ordered.shape[:axis] + (1,) + ordered.shape[axis + 1:],
                                        dtype=np.int64) + k
    chosen = np.take_along_axis(order, positions, axis=axis)
    return _values_indices(self, arr, axis, chosen, keepdim)


_nanmedian.def_derivative("self")(_selected_derivative)


@op(family="reduction", method=False, function=False,
    samples=lambda make: [Sample(s.args[0]) for s in _nanmedian_samples(make)[2:5]] +
    [Sample(make(0))])
def _nanmedian_all(self, dim=None, keepdim=False):
    """The lower median of the values that are not NaN over ``dim`` (every dim when None):
    ``nanmedian(input)``, and what vmap makes of it; NaN when there are none."""
    arr = self._array()
    dims = dims_of(dim, arr.ndim)
    kept = [d for d in range(arr.ndim) if d not in dims]
    rows = np.transpose(arr, kept + list(dims)).reshape([arr.shape[d] for d in kept] + [-1])
    xp = array_module(arr)
    if rows.shape[-1] == 0:
        values = xp.zeros(rows.shape[:-1], dtype=rows.dtype) + np.nan
    else:
        ordered = np.sort(rows, axis=-1)
        positions = xp.zeros(ordered.shape[:-1] + (1,), dtype=np.int64) + \
            _nan_median_positions(ordered, -1)
        values = np.take_along_axis(ordered, positions, axis=-1)[..., 0]
    if keepdim:
        values = np.expand_dims(values, dims)
    return _fresh(values, self._dtype)


# as median: the gradient shared evenly by the elements equal to the result
_nanmedian_all.def_derivative("self")(_evenly_to_extrema)


@op(kind="composite", samples=lambda make: _nanmedian_samples(make) + [Sample(make(0))])
def nanmedian(self, dim=None, keepdim=False, *, out=None):
    """``median`` ignoring NaN: of all elements, or ``(values, indices)`` along ``dim``."""
    refuse_complex(self, "median_cpu" if dim is None else "median_out", bool_too=True)
    if dim is None:
        if out is not None:
            raise TypeError("nanmedian() missing 1 required positional arguments: \"dim\"")
        return _nanmedian_all(self)
    result = _nanmedian(self, dim, keepdim)
    if out is None:
        return ReturnNanmedian(*result)
    return ReturnNanmedian(
        _into(out[0], result[0], f"Expected tensor for 'values' to have the same type as "
                                 f"tensor for argument #2 'self'; but type "
                                 f"torch.{_type_name(out[0]._dtype)}Tensor does not equal "
                                 f"torch.{_type_name(self._dtype)}Tensor (while checking "
                                 f"arguments for median)"),
        _into(out[1], result[1]))


def _bincount_samples(make):
    counts = tensor([1, 4, 1, 0, 6, 4])
    return [Sample(counts), Sample(counts, make(6)), Sample(counts, minlength=9),
            Sample(counts, make(6, dtype=int64), 3), Sample(tensor([], dtype=int64))]


@op(differentiable=False, samples=_bincount_samples)
def bincount(self, weights=None, minlength=0):
    """How often each value 0, 1, ... occurs in the 1-D non-negative integer ``self``
    (summing ``weights`` instead of counting when given), at least ``minlength`` long."""
    if self._dtype.is_floating_point or self._dtype is bool_:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")
    if int_arg(minlength, "minlength") < 0:
        raise RuntimeError("minlength should be >= 0")
    values = self._array()
    if self.dim() != 1 or (self._numel and values.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _fresh(np.bincount(values, minlength=minlength).astype(np.int64), int64)
    if weights.dim() != 1 or weights._numel != self._numel:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    dtype = float32 if weights._dtype is float32 else float64   # PyTorch's two outputs
    return _fresh(np.bincount(values, weights._array().astype(np.float64),
                              minlength=minlength).astype(dtype.np), dtype)


bincount.def_batch_rule(dynamic_shape_batch_rule)


# --------------------------------------------------------------------------- more in-place

@op(kind="composite", function=False)
def cumprod_(self, dim, *, dtype=None):
    # cumprod's derivative reads its input, which the write would overwrite
    return cumulative_(cumprod, self, dim, dtype, self.clone())


# --------------------------------------------------------------------------- msort

@op(out=True, kind="composite", samples=lambda make: [Sample(_distinct(make, 3, 4)),
                                            Sample(_distinct(make, 5)),
                                            Sample(_distinct(make, 4, 3).mT),
                                            Sample(tensor([[2, 1], [0, 3], [1, 1]]))])
def msort(self):
    """``self`` sorted along dim 0 (the values of ``sort(self, 0)``)."""
    return sort(self, 0).values


# --------------------------------------------------------------------------- nonzero_static
# ``nonzero`` with a shape known before the values: the first ``size`` indices, padded.

def _nonzero_static_samples(make):
    return [Sample(tensor([[0, 1], [2, 0], [3, 4]]), size=2),
            Sample(tensor([[0.0, 1.5], [2.0, 0.0]]), size=5, fill_value=-7),
            Sample(tensor(3.0), size=2), Sample(tensor([True, False, True]), size=0),
            Sample(make(2, 3), size=6)]


def _check_static_size(size):
    size = int_arg(size, "size")
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    return size


@op(out=True, kind="composite", differentiable=False, samples=_nonzero_static_samples)
def nonzero_static(self, *, size, fill_value=-1):
    """The first ``size`` rows of ``nonzero(self)``, padded with ``fill_value`` rows: a
    shape that does not depend on the values.  Written in ops (a stable sort puts the
    nonzero positions first, then each position is unravelled), so that vmap batches it
    with their rules."""
    size = _check_static_size(size)
    shape = tuple(self.shape)
    if size == 0:
        return self.new_zeros((0, len(shape)), dtype=int64)
    nonzero = self.reshape(-1) != 0
    taken = min(size, nonzero.shape[0])
    order = argsort(nonzero.logical_not().to(int64), stable=True)[:taken]
    if shape:
        indices = stack([order // math.prod(shape[d + 1:]) % shape[d]
                         for d in range(len(shape))], -1)
    else:
        indices = order.new_zeros((taken, 0))
    found = nonzero.gather(0, order).unsqueeze(-1)
    indices = indices.where(found, indices.new_full((), int(fill_value)))
    if size == taken:
        return indices
    return cat([indices, indices.new_full((size - taken, len(shape)), int(fill_value))])
