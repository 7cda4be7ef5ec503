"""Indexing: ``tensor[index]``, ``tensor[index] = value``, and the ops that read or write
elements chosen by index tensors (``index_select``, ``gather``, ``scatter``,
``scatter_add``, ``index_add``, ``index_fill``, ``masked_select``, ``take``).

Basic indices (ints, slices with positive steps, None, Ellipsis) make views through
``select``/``slice``/``unsqueeze``, so reads share storage and writes go through the view
(which autograd turns into CopySlices).  Advanced indices (integer or bool tensors, lists,
Python bools) follow PyTorch: the basic parts are applied first as views, then ``index``
(a read, which copies) or ``index_put_`` (a write) gets one entry per remaining dimension,
an index tensor or None for "all of it".  On that form NumPy's advanced indexing has
PyTorch's rules (where results dims go, mask expansion, broadcasting), so the kernels hand
it to NumPy, after checking every index against its dimension: nothing outside the
storage is ever read or written.
"""
import warnings

import numpy as np

from microtensor._C import kernels, meta
from microtensor._C.tensor import (TensorBase, bool_, empty_strided_unchecked, float32, int32,
                                   int64)
from microtensor._dtype import check_scalar_fits, cast_scalar
from microtensor.backends import cuda
from microtensor.ops.copy import clone
from microtensor.ops.dispatch import call_by_name
from microtensor.ops.factory import arange, empty_strided, full, tensor
from microtensor.ops.loops import (_type_name as type_name, array_module, check_no_internal_overlap,
                                   check_no_overlap, has_internal_overlap, new_result, owned,
                                   refuse_complex, update_at)
from microtensor.ops.registry import Sample, inplace_variant, op, REGISTRY
from microtensor.ops.shape import cat, fresh_tensor
from microtensor.vmap.helpers import (BatchedTensor, aligned, batch_size, call, fallback,
                                      front_or_expanded, inplace_error, no_fallback, same_level,
                                      to_front, wrap)


# --------------------------------------------------------------------------- index checks

def _is_integer_index(t):
    return t._dtype is int64 or t._dtype is int32


def _out_of_range(positions, low, high):
    """The first of ``positions`` (an ndarray) outside ``[low, high)``, or None."""
    if positions.size == 0 or (positions.min() >= low and positions.max() < high):
        return None
    return int(positions[(positions < low) | (positions >= high)].flat[0])


def _shape_or_vector(t):
    """A 0-d tensor counts as a vector of one element in the dim-wise index ops."""
    return t._sizes or (1,)


def _along(positions, dim):
    """NumPy's index that reads or writes, for every element of ``positions``, the element
    of the same coordinates but with coordinate ``dim`` replaced by its value."""
    xp = array_module(positions)
    ndim = len(positions.shape)
    grids = [xp.arange(n).reshape((1,) * k + (n,) + (1,) * (ndim - k - 1))
             for k, n in enumerate(positions.shape)]
    grids[dim] = positions
    return tuple(grids)


def _target(self, out, reads, expanded_warning=None):
    """Where an index op writes: a contiguous copy of ``self``, or ``out`` (``self`` of the
    in-place variant) after PyTorch's checks: none of the tensors it ``reads`` shares
    memory with ``out``, nor do two elements of ``out`` (where PyTorch only deprecates that,
    ``expanded_warning`` names the op it warns for)."""
    if out is None:
        return clone.kernel(self, memory_format=meta.contiguous_format)
    if expanded_warning is None:
        check_no_internal_overlap(out)
    elif has_internal_overlap(out):
        warnings.warn(f"Use of {expanded_warning} on expanded tensors is deprecated. Please "
                      f"clone() the tensor before performing this operation.", UserWarning,
                      stacklevel=4)
    check_no_overlap(out, reads)
    return out


# --------------------------------------------------------------------------- tensor[index]

def _is_basic(item):
    return item is None or item is Ellipsis or isinstance(item, (int, slice)) and \
        not isinstance(item, bool)


def _expand_ellipsis(index, ndim):
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    out = []
    spread = ndim - consumed          # PyTorch: the first ellipsis takes every free dim,
    for i in index:                   # any later one takes none
        if i is Ellipsis:
            out.extend([slice(None)] * spread)
            spread = 0
        else:
            out.append(i)
    return out


def _select_checked(tensor, dim, item):
    size = tensor.shape[dim]
    if not -size <= item < size:
        raise IndexError(f"index {item} is out of bounds for dimension {dim} with size {size}")
    return tensor.select(dim, item)


def _sliced(tensor, dim, item):
    start, stop, step = item.start, item.stop, item.step
    if step == 0:
        raise ValueError("slice step cannot be zero")   # Python's own message, as PyTorch's
    if step is not None and step < 0:
        raise ValueError("step must be greater than zero")
    if start in (None, 0) and stop is None and step in (None, 1):
        return tensor
    return call_by_name("slice", tensor, dim, start, stop, step or 1)


def basic_index(self, index):
    """Apply a tuple of basic indices as a chain of views."""
    result = self
    dim = 0
    for item in _expand_ellipsis(index, self.dim()):
        if item is None:
            result = result.unsqueeze(dim)
            dim += 1
        elif isinstance(item, int):
            result = _select_checked(result, dim, item)
        else:
            result = _sliced(result, dim, item)
            dim += 1
    if result is self:
        result = self.alias()
    return result


def _as_index_tensor(item):
    """Lists, tuples and ndarrays in an index become CPU tensors (bool only when all bool),
    whatever the default device."""
    if isinstance(item, TensorBase):
        return item
    if isinstance(item, bool):
        return tensor(item, device="cpu")
    if isinstance(item, (list, tuple, np.ndarray)):
        t = tensor(item, device="cpu")
        return t.long() if t._numel == 0 else t
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                     f"Variables are valid indices (got {type(item).__name__})")


def _split_index(self, index):
    """Apply the basic parts of a mixed index as views of ``self``.  Returns that view
    (``self`` itself when there were none) and ``index``'s entries for it: one per
    dimension it indexes, an index tensor or None, trailing Nones dropped."""
    index = [i if _is_basic(i) else _as_index_tensor(i) for i in index]
    consumed = sum(1 if isinstance(i, (int, slice)) else
                   i.dim() if i._dtype is bool_ else 1
                   for i in index if i is not None and i is not Ellipsis)
    if consumed > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    result, dim, entries = self, 0, []
    for item in index:
        if item is Ellipsis:
            entries.extend([None] * (self.dim() - consumed))
            dim += self.dim() - consumed
        elif item is None:
            result = result.unsqueeze(dim)
            entries.append(None)
            dim += 1
        elif isinstance(item, int):
            result = _select_checked(result, dim, item)
        elif isinstance(item, slice):
            result = _sliced(result, dim, item)
            entries.append(None)
            dim += 1
        elif item._dtype is bool_ and item.dim() == 0:
            # a 0-d mask adds a dimension of size 1 that it keeps (True) or empties (False)
            result = result.unsqueeze(dim)
            entries.append(item.reshape(1))
            dim += 1
        else:
            entries.append(item)
            dim += item.dim() if item._dtype is bool_ else 1
    while entries and entries[-1] is None:
        entries.pop()
    return result, tuple(entries)


_INDEX_TYPES = (int, slice, type(None), type(Ellipsis), TensorBase, list, tuple, np.ndarray,
                np.integer, np.bool_)


def _normalize(index):
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if not isinstance(item, _INDEX_TYPES):
            # PyTorch refuses strings with a TypeError, other objects with an IndexError
            error = TypeError if isinstance(item, str) else IndexError
            raise error("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                        f"Variables are valid indices (got {type(item).__name__})")
    return tuple(_scalar_index(i) for i in index)


def _scalar_index(item):
    """A scalar that indexes like a Python int (a NumPy integer, a 0-d integer tensor) as
    that int; anything else unchanged (PyTorch refuses NumPy bools)."""
    if type(item) is int and not -2 ** 63 <= item < 2 ** 63:
        raise ValueError("Overflow when unpacking long long")   # PyTorch parses an int64
    if isinstance(item, np.integer):
        return item.item()
    if isinstance(item, TensorBase) and item.dim() == 0 and _is_integer_index(item):
        return item.item()
    return item


def getitem(self, index):
    index = _normalize(index)
    if all(_is_basic(i) for i in index):
        return basic_index(self, index)
    view, entries = _split_index(self, index)
    return call_by_name("index", view, entries)


def setitem(self, index, value):
    if type(value) is int and not -2 ** 63 <= value < 2 ** 63:
        raise ValueError("Overflow when unpacking long long")   # PyTorch parses an int64
    if not isinstance(value, TensorBase):
        check_scalar_fits(value, self._dtype)   # PyTorch converts it before reading the index
    index = _normalize(index)
    if all(_is_basic(i) for i in index):
        target = basic_index(self, index)
        if isinstance(value, TensorBase):
            _copy_to(target, value)
        else:
            check_no_internal_overlap(target)   # PyTorch copies a scalar in: copy_'s check
            target.fill_(value)
        return
    target, entries = _split_index(self, index)
    if not isinstance(value, TensorBase):
        value = full((), value, dtype=target.dtype, device=target.device)
    elif value._sizes[:1] == (1,):
        # PyTorch drops a value's leading size-1 dims, which broadcasting puts back
        sizes = value._sizes
        while sizes[:1] == (1,):
            sizes = sizes[1:]
        value = value.reshape(sizes)
    call_by_name("index_put_", target, entries, value)


def _copy_to(target, value):
    """PyTorch's basic-index write of a tensor: a 0-d CPU value is read once and filled in
    (however it overlaps the target); another drops its leading size-1 dims and is
    expanded to the target's shape before ``copy_``, so that ``x[None] = x`` copies the
    very same elements in the same order (which the overlap check allows)."""
    if value._sizes != target._sizes:
        if not value._sizes and value.device.type == "cpu":
            value = value.clone()
        else:
            sizes = value._sizes
            while sizes[:1] == (1,):
                sizes = sizes[1:]
            value = value.view(sizes).expand(target._sizes)
    target.copy_(value)


# --------------------------------------------------------------------------- index, index_put

class _IndexPlan:
    """``self[indices]`` checked and translated for NumPy: ``where`` is NumPy's index and
    ``shape`` the result's shape.  The positions are checked against the sizes last, as
    PyTorch's kernels do (``check_bounds=False`` leaves that to the caller, after its own
    checks)."""

    def __init__(self, self_tensor, indices, check_bounds=True):
        sizes = self_tensor._sizes
        where, entry_shapes, full_dims, dim, indexed = [], [], [], 0, 0
        self._positions = []   # (positions, size of their dim, the dim's number among the indexed)
        for entry in indices:
            if entry is None:
                if dim >= len(sizes):
                    raise IndexError(f"too many indices for tensor of dimension {len(sizes)}")
                where.append(slice(None))
                full_dims.append((len(where) - 1, sizes[dim]))
                dim += 1
                continue
            if not isinstance(entry, TensorBase):
                raise TypeError("index entries must be Tensors or None, got "
                                f"{type(entry).__name__}")
            if entry._dtype is bool_:
                span = entry.dim()
                if dim + span > len(sizes):
                    raise IndexError(f"too many indices for tensor of dimension {len(sizes)}")
                for j in range(span):
                    if entry._sizes[j] != sizes[dim + j]:
                        raise IndexError(
                            f"The shape of the mask {list(entry._sizes)} at index {j} does not "
                            f"match the shape of the indexed tensor {list(sizes)} at index "
                            f"{dim + j}")
                mask = entry._array()
                where.append(mask)
                entry_shapes.append((int(np.count_nonzero(mask)),))
            elif _is_integer_index(entry):
                span = 1
                if dim >= len(sizes):
                    raise IndexError(f"too many indices for tensor of dimension {len(sizes)}")
                positions = entry._array()
                if sizes[dim] == 0 and positions.size:   # checked with the structure
                    raise IndexError("index is out of bounds for dimension with size 0")
                self._positions.append((positions, sizes[dim], indexed))
                where.append(positions)
                entry_shapes.append(entry._sizes)
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            dim += span
            indexed += span
        try:
            broadcast = tuple(np.broadcast_shapes(*entry_shapes))
        except ValueError:
            raise IndexError("shape mismatch: indexing tensors could not be broadcast together "
                             "with shapes " + ", ".join(str(list(s)) for s in entry_shapes)) \
                from None
        self.where = tuple(where)
        self.has_tensor = bool(entry_shapes)
        self._broadcast, self._full_dims, self._indexed_dims = broadcast, full_dims, dim
        self.shape = self._result_shape(broadcast, full_dims, sizes[dim:])
        if check_bounds:
            self.check_bounds()

    def check_bounds(self):
        for positions, size, indexed in self._positions:
            bad = _out_of_range(positions, -size, size)
            if bad is not None:
                raise IndexError(f"index {bad} is out of bounds for dimension {indexed} "
                                 f"with size {size}")

    def result_strides(self, source):
        """The strides of PyTorch's result of ``source[indices]``, or None when that is
        contiguous.  Its TensorIterator orders the result's dims by the strides of
        ``source`` (the indexed dims replaced by the index shape, with stride 0) and of the
        index tensors (broadcast together), the first operand that can order two dims
        deciding.  With a contiguous ``source`` and contiguous (or 1-D) index tensors no
        operand orders two dims against C order, so only other layouts are worked out."""
        entries = [w for w in self.where if not isinstance(w, slice)]
        if source._strides == meta.contiguous_strides(source._sizes) and \
                all(w.ndim < 2 or w.flags.c_contiguous or w.dtype == np.bool_ for w in entries):
            return None
        strides = source._strides
        full = [(position, d) for d, (position, _) in
                zip(self._source_dims_of_full(), self._full_dims)]
        trailing = list(range(self._indexed_dims, len(strides)))
        tensor_positions = [i for i, w in enumerate(self.where) if not isinstance(w, slice)]
        first, last = tensor_positions[0], tensor_positions[-1]
        if last - first + 1 == len(tensor_positions):
            before = [d for position, d in full if position < first]
            after = [d for position, d in full if position > last] + trailing
        else:   # PyTorch moves the indexed dims to the front
            before, after = [], [d for _, d in full] + trailing
        rank = len(self._broadcast)
        operands = [(self.shape, tuple(strides[d] for d in before) + (0,) * rank +
                     tuple(strides[d] for d in after))]
        # every index tensor is an operand too (a mask as the columns of its nonzero(), one
        # 1-D tensor per dim it covers), which also keeps PyTorch off its fast setup: each
        # is expanded to the index shape, then viewed with size-1 dims around it, whose
        # strides (a view's) order them where the result has one element there
        shapes = []
        for w in entries:
            if w.dtype == np.bool_:
                shapes += [((int(np.count_nonzero(w)),), (w.ndim,))] * w.ndim
            else:
                shapes.append((w.shape, tuple(t // w.itemsize for t in w.strides)))
        for shape, strides_of_index in shapes:
            expanded = meta.expand_strides(shape, strides_of_index, self._broadcast)
            inner = expanded[-1] if expanded else 1
            outer = self._broadcast[0] * expanded[0] if expanded else 1
            operands.append(((1,) * len(before) + self._broadcast + (1,) * len(after),
                             (outer,) * len(before) + expanded + (inner,) * len(after)))
        result = meta.elementwise_output_strides(self.shape, operands)
        return None if result == meta.contiguous_strides(self.shape) else result

    def _source_dims_of_full(self):
        """The dims of the indexed tensor that each full slice of ``where`` covers."""
        dims, dim = [], 0
        for w in self.where:
            if isinstance(w, slice):
                dims.append(dim)
                dim += 1
            else:
                dim += w.ndim if w.dtype == np.bool_ else 1
        return dims

    def _result_shape(self, broadcast, full_dims, trailing):
        """NumPy's (and PyTorch's) rule: the indexed dims are replaced by the broadcast
        index shape in place when the index tensors are adjacent, else in front."""
        tensor_positions = [i for i, w in enumerate(self.where) if not isinstance(w, slice)]
        if not tensor_positions:
            return tuple(size for _, size in full_dims) + tuple(trailing)
        first, last = tensor_positions[0], tensor_positions[-1]
        if last - first + 1 == len(tensor_positions):
            before = tuple(size for p, size in full_dims if p < first)
            after = tuple(size for p, size in full_dims if p > last)
            return before + broadcast + after + tuple(trailing)
        return broadcast + tuple(size for _, size in full_dims) + tuple(trailing)


def _index_samples(make):
    return [Sample(make(4, 3), (tensor([0, 2, -1, 0]),)),
            Sample(make(3, 4, 2), (None, tensor([[1, 0]]), tensor([1, -1]))),
            Sample(make(3, 4, 2), (tensor([2, 0]), None, tensor([1]))),
            Sample(make(3, 4), (make(3, 4, dtype=bool_),)),
            Sample(make(3, 4), (tensor([True, False, True]), tensor([3, 0])))]


@op(method=False, function=False, samples=_index_samples)
def index(self, indices):
    """``self[indices]`` for advanced ``indices`` (one tensor or None per dimension)."""
    plan = _IndexPlan(self, indices)
    values = self._array()[plan.where]
    if not plan.has_tensor:
        return fresh_tensor(values.copy())
    strides = plan.result_strides(self)
    if strides is None:
        return fresh_tensor(values)
    out = empty_strided_unchecked(plan.shape, strides, self._dtype, self.device)
    out._array()[...] = values
    return out


@index.def_derivative("self")
def index(grad, self_shape, indices):
    return grad.new_zeros(self_shape).index_put(indices, grad, accumulate=True)


def _index_result_bdim(indices):
    """Where NumPy's advanced indexing puts the batch dim (a leading full slice): first,
    unless the index tensors are not adjacent, in which case their broadcast dims go first."""
    positions = [i for i, e in enumerate(indices) if e is not None]
    if not positions or positions[-1] - positions[0] + 1 == len(positions):
        return 0
    return max(1 if e._dtype is bool_ else e.dim() for e in indices if e is not None)


def _per_sample_indices(indices, level, size):
    """Physical indices for ``self[indices]`` per sample when some index tensors differ
    per sample (``self`` physical with its batch dim first): a leading ``arange`` index
    picks each sample, broadcast against the index tensors (the batched ones aligned after
    their batch dim).  Also where the result's per-sample dims must move: NumPy puts the
    broadcast dims first once the ``arange`` makes the index tensors non-adjacent, while
    per sample they stay in place when adjacent.  Returns (indices, (from, to) or None)."""
    rank = max(e.dim() for e in indices if e is not None)
    physical = []
    for e in indices:
        if same_level(e, level):
            e = aligned(e._value, e._bdim, e.dim(), rank)
        physical.append(e)
    first = next(e for e in physical if e is not None)
    picks = arange(size, device=first.device).view((size,) + (1,) * rank)
    positions = [i for i, e in enumerate(indices) if e is not None]
    move = None
    if positions[0] > 0 and positions == list(range(positions[0], positions[-1] + 1)):
        move = (tuple(range(1, 1 + rank)),
                tuple(range(1 + positions[0], 1 + positions[0] + rank)))
    return (picks,) + tuple(physical), move


def _per_sample_masks(indices, level):
    """Boolean masks that differ per sample (each sample may select a different number of
    elements, so no single physical op computes them), or 0-d masks beside index tensors
    that do."""
    masks = [e for e in indices if e is not None and e.dtype is bool_]
    return any(same_level(e, level) for e in masks) or \
        (any(e.dim() == 0 for e in masks) and any(same_level(e, level) for e in indices))


def _masks_as_positions(indices):
    """Boolean masks (the same for every sample) as the integer index tensors of their True
    positions, as NumPy reads them, so that they broadcast with per-sample index tensors."""
    out = []
    for e in indices:
        if e is None or e.dtype is not bool_:
            out.append(e)
            continue
        for j, n in enumerate(e.shape):     # the j-th coordinate of each True, row-major
            along = arange(n, device=e.device).view((n,) + (1,) * (e.dim() - 1 - j))
            out.append(REGISTRY["masked_select"](along, e))
    return tuple(out)


@index.def_batch_rule
def index(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, indices = bound["self"], tuple(bound["indices"])
    if _per_sample_masks(indices, level):
        return fallback(op, level, args, kwargs)
    if not any(same_level(e, level) for e in indices):
        result = call(op, (to_front(self._value, self._bdim), (None,) + indices), None)
        return wrap(result, _index_result_bdim(indices), level)
    size = batch_size(level)
    physical, move = _per_sample_indices(_masks_as_positions(indices), level, size)
    result = call(op, (front_or_expanded(self, level, size), physical), None)
    return wrap(result if move is None else result.movedim(*move), 0, level)


def _index_put_samples(make):
    return [Sample(make(4, 3), (tensor([0, 2]),), make(2, 3)),
            Sample(make(4, 3), (tensor([0, 2, 0]),), make(3), accumulate=True),
            Sample(make(3, 4), (None, tensor([[1], [3]])), make(3, 2, 1)),
            Sample(make(3, 4), (make(3, 4, dtype=bool_),), make()),
            Sample(make(2, 3), (tensor([1, 1]), tensor([0, 0])), make(1), True)]


@op(inputs=("self", "values"), out=False, samples=_index_put_samples)
def index_put(self, indices, values, accumulate=False, *, out=None):
    if not isinstance(values, TensorBase):
        name = "index_put_" if out is self else "index_put"
        raise TypeError(f"{name}(): argument 'values' (position 2) must be Tensor, not "
                        f"{type(values).__name__}")
    if values._dtype is not self._dtype and not accumulate and _one_mask_fill(indices, values):
        # PyTorch writes one value through one boolean mask with masked_fill_, which casts
        values = values.to(self._dtype)
    # PyTorch's order: the indices' structure, the values' shape, their dtype, the bounds
    plan = _IndexPlan(self, indices, check_bounds=False)
    try:
        fits = tuple(np.broadcast_shapes(values._sizes, plan.shape)) == plan.shape
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values._sizes)} cannot "
                           f"be broadcast to indexing result of shape {list(plan.shape)}")
    if values._dtype is not self._dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{type_name(self._dtype)} for the destination and "
                           f"{type_name(values._dtype)} for the source.")
    plan.check_bounds()
    out = _target(self, out, (values,) + tuple(indices), expanded_warning="index_put_")
    if out._numel == 0:
        return out
    target = out._array()
    source = np.broadcast_to(values._array(), plan.shape)
    if np.may_share_memory(source, target):   # the overlap PyTorch lets through (not dense)
        source = source.copy()
    if accumulate:
        update_at("add", target, plan.where, source)
    else:
        target[plan.where] = source
    return out


def _one_mask_fill(indices, values):
    """Whether PyTorch's index_put_ fills ``values`` in with masked_fill_: one CPU value,
    and one index entry, a boolean mask, with every other entry a full slice (None)."""
    if values._numel != 1 or values.device.type != "cpu":
        return False
    given = [entry for entry in indices if entry is not None]
    return len(given) == 1 and isinstance(given[0], TensorBase) and given[0]._dtype is bool_


@index_put.def_derivative("self")
def index_put(grad, indices, accumulate):
    return grad if accumulate else grad.index_put(indices, grad.new_zeros(()))


@index_put.def_derivative("values")
def index_put(grad, indices, values_shape):
    return index(grad, indices).sum_to_size(values_shape)


def _index_result_rank(self, indices):
    """The rank of ``self[indices]`` per sample, without reading the indices (they may be
    batched at an outer level): a mask is one dim in place of the ``dim()`` it covers."""
    tensors = [e for e in indices if e is not None]
    covered = sum(e.dim() if e.dtype is bool_ else 1 for e in tensors)
    rank = max((1 if e.dtype is bool_ else e.dim() for e in tensors), default=0)
    return rank + self.dim() - covered


def _prepared(bound, names, level, size):
    """The named tensor arguments with the batch dim first (per-sample scalars as
    1-element vectors, as the dim-wise index ops treat them)."""
    for name in names:
        t = bound.get(name)
        if isinstance(t, TensorBase):
            p = front_or_expanded(t, level, size)
            bound[name] = p.unsqueeze(1) if t.dim() == 0 else p


def _check_indexed_write(op, bound, self, level):
    """An in-place variant needs ``self`` batched; ``out=`` has no batching rule."""
    if op.kind == "inplace" and not same_level(self, level):
        raise inplace_error(op.name)
    if bound.pop("out", None) is not None:
        raise no_fallback(op)


@index_put.def_batch_rule
def index_put(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, indices, values = bound["self"], tuple(bound["indices"]), bound["values"]
    _check_indexed_write(op, bound, self, level)
    if _per_sample_masks(indices, level):
        raise RuntimeError(f"Batching rule not implemented for {op.name} with boolean masks "
                           "that differ per sample; use where instead.")
    size = batch_size(level)
    target = front_or_expanded(self, level, size)
    if not any(same_level(e, level) for e in indices):
        physical, bdim, move = (None,) + indices, _index_result_bdim(indices), None
    else:
        indices = _masks_as_positions(indices)
        (physical, move), bdim = _per_sample_indices(indices, level, size), 0
    if isinstance(values, TensorBase):
        values = front_or_expanded(values, level, size)
        values = aligned(values, 0, values.dim() - 1, _index_result_rank(self, indices))
        # the values' per-sample dims in the order NumPy's physical result has them
        values = values.movedim(0, bdim) if move is None else values.movedim(move[1], move[0])
    result = call(op, (target, physical, values, bound["accumulate"]), None)
    return self if op.kind == "inplace" else wrap(result, 0, level)


index_put_ = inplace_variant(index_put)


# --------------------------------------------------------------------------- along one dim

def _index_select_samples(make):
    return [Sample(make(4, 3), 0, tensor([3, 0, 0])), Sample(make(2, 5), -1, tensor([4, 1])),
            Sample(make(3), 0, tensor(2)), Sample(make(), 0, tensor([0])),
            Sample(make(3, 2), 1, tensor([], dtype=int64))]


@op(out=True, samples=_index_select_samples)
def index_select(self, dim, index):
    if not _is_integer_index(index):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = meta.wrap_dim(dim, self.dim())
    positions = index._array().reshape(-1)
    if positions.size and self.dim() > 1 and not self._sizes[d]:   # (1-D: the IndexError)
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    if _out_of_range(positions, 0, _shape_or_vector(self)[d]) is not None:
        raise IndexError("index out of range in self")
    if self.dim() == 0:
        if positions.size != 1:
            raise IndexError(f"index_select(): Index to scalar can have only 1 value, got "
                             f"{positions.size} value(s)")
        return fresh_tensor(self._array().copy())
    return fresh_tensor(np.take(self._array(), positions, axis=d))


@index_select.def_derivative("self")
def index_select(grad, self_shape, dim, index):
    return grad.new_zeros(self_shape).index_add(dim, index, grad)


def _index_spread(index, like, d):
    """A per-sample 1-D ``index`` (physical ``(B, k)``) placed at dim ``d`` of ``like``'s
    shape, for gather/scatter."""
    shape = [index._sizes[0]] + [1] * (like.dim() - 1)
    shape[d] = index._sizes[1]
    sizes = list(like._sizes)
    sizes[d] = index._sizes[1]
    return index.view(shape).expand(sizes)


@index_select.def_batch_rule
def index_select(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index = bound["self"], bound["index"]
    size = batch_size(level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    value = front_or_expanded(self, level, size)
    if self.dim() == 0:
        value = value.unsqueeze(1)
    if not same_level(index, level):
        result = call(op, (value, d, index), None)
    else:
        positions = to_front(index._value, index._bdim).reshape(size, -1)
        result = REGISTRY["gather"](value, d, _index_spread(positions, value, d))
    return wrap(result.squeeze(1) if self.dim() == 0 else result, 0, level)


def _gather_samples(make):
    return [Sample(make(3, 4), 0, tensor([[2, 0, 1, 1], [0, 0, 2, 1]])),
            Sample(make(3, 4), 1, tensor([[3], [0], [3]])),
            Sample(make(4), 0, tensor([1, 1, 3, 0, 2])), Sample(make(), 0, tensor(0))]


@op(out=True, samples=_gather_samples)
def gather(self, dim, index, *, sparse_grad=False):
    if not _is_integer_index(index):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    d = meta.wrap_dim(dim, self.dim())
    self_shape, index_shape = _shape_or_vector(self), _shape_or_vector(index)
    if len(index_shape) != len(self_shape):
        raise RuntimeError("Index tensor must have the same number of dimensions as input "
                           "tensor")
    for k, (i, s) in enumerate(zip(index_shape, self_shape)):
        if k != d and i > s:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(index._sizes)} to be no larger than self "
                               f"{list(self._sizes)} apart from dimension {d}")
    positions = index._array().reshape(index_shape)
    source = self._array().reshape(self_shape)
    if isinstance(positions, np.ndarray):
        out = new_result(index._sizes, self._dtype, device=self.device)
        bad = kernels.gather_(out._array().reshape(index_shape), source,
                              positions.astype(np.int64, copy=False), d)
    else:
        bad = _out_of_range(positions, 0, self_shape[d])
    if bad is not None:
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size "
                           f"{self_shape[d]}")
    if isinstance(positions, np.ndarray):
        return out
    return fresh_tensor(source[_along(positions, d)].reshape(index._sizes))


@gather.def_derivative("self")
def gather(grad, self, dim, index):
    # `self` is saved (not just its shape) as PyTorch does, so an in-place write into it
    # before backward fails the version check there too
    return grad.new_zeros(self.shape).scatter_add(dim, index, grad)


def _check_scatter(name, self, dim, index, src):
    """PyTorch's checks of scatter's arguments; returns the wrapped dim and the positions
    (both ``self`` and ``index`` taken as at least 1-D)."""
    if not _is_integer_index(index):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if src is not None and src._dtype is not self._dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    d = meta.wrap_dim(dim, self.dim())
    self_shape, index_shape = _shape_or_vector(self), _shape_or_vector(index)
    if len(index_shape) != len(self_shape):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    src_shape = _shape_or_vector(src) if src is not None else None
    if src is not None and len(src_shape) != len(index_shape):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    for k, i in enumerate(index_shape):
        if (k != d and i > self_shape[k]) or (src is not None and i > src_shape[k]):
            raise RuntimeError(
                f"Expected index {list(index._sizes)} to be no larger than self "
                f"{list(self._sizes)} apart from dimension {d}" +
                (f" and to be no larger size than src {list(src._sizes)}" if src is not None
                 else ""))
    positions = index._array().reshape(index_shape)
    bad = _out_of_range(positions, 0, self_shape[d])
    if bad is not None:
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size "
                           f"{self_shape[d]}")
    return d, positions


_SCATTER_ADD_KERNEL_DTYPES = (np.float32, np.float64, np.int64, np.int32)


def _scatter_into(out, self, d, positions, source, reduce):
    target = out._array().reshape(_shape_or_vector(self))
    if isinstance(source, np.ndarray) or cuda.is_device_array(source):
        source = source.reshape(source.shape or (1,))[tuple(slice(0, n) for n in positions.shape)]
        if np.may_share_memory(source, target):   # the overlap PyTorch lets through
            source = source.copy()
    else:
        source = target.dtype.type(source)
    if reduce == "add" and isinstance(target, np.ndarray) and \
            target.dtype in _SCATTER_ADD_KERNEL_DTYPES and isinstance(source, np.ndarray):
        kernels.scatter_add_(target, positions.astype(np.int64, copy=False), source, d)
        return out
    where = _along(positions, d)
    if reduce is None:
        target[where] = source
    elif reduce == "add":
        update_at("add", target, where, source)
    else:
        update_at("multiply", target, where, source)
    return out


def _padded(grad, shape):
    """``grad`` grown with zeros at the end of each dim to ``shape`` (the gradient of a
    ``src`` larger than the index)."""
    for k, size in enumerate(shape):
        missing = size - grad.shape[k]
        if missing:
            grad = cat([grad, grad.new_zeros(grad.shape[:k] + (missing,) + grad.shape[k + 1:])], k)
    return grad


def _scatter_samples(make):
    return [Sample(make(3, 4), 0, tensor([[2, 0, 1, 1], [1, 2, 0, 2]]), make(2, 4)),
            Sample(make(3, 4), 1, tensor([[3], [0]]), make(2, 1)),
            Sample(make(3, 4), 1, tensor([[3, 1], [0, 2]]), 2.5),
            # float32: no derivative to check (reduce= has none, as in PyTorch)
            Sample(make(4, dtype=float32), 0, tensor([1, 3, 1]), make(3, dtype=float32),
                   reduce="add"),
            Sample(make(2, 3, dtype=float32), 1, tensor([[0, 0], [2, 1]]), 1.5,
                   reduce="multiply")]


@op(inputs=("self", "src"), samples=_scatter_samples)
def scatter(self, dim, index, src=None, *, value=None, reduce=None, out=None):
    if src is not None and not isinstance(src, TensorBase):
        src, value = None, src
    if src is None and value is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if reduce not in (None, "add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    d, positions = _check_scatter("scatter", self, dim, index, src)
    check_scalar_fits(value, self._dtype)
    if reduce is not None and src is not None:
        warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and "
                      "will be removed in a future PyTorch release. Use torch.scatter_reduce "
                      "instead for more reduction options.", UserWarning, stacklevel=3)
    source = src._array() if src is not None else value
    return _scatter_into(_target(self, out, (index, src)), self, d, positions, source, reduce)


def _check_scatter_reduce(reduce):
    if reduce is not None:          # as in PyTorch: scatter_reduce has the derivatives
        raise RuntimeError("derivative for aten::scatter is not implemented")


@scatter.def_derivative("self")
def scatter(grad, dim, index, reduce):
    _check_scatter_reduce(reduce)
    return grad.scatter(dim, index, 0)


@scatter.def_derivative("src")
def scatter(grad, dim, index, src_shape, reduce):
    _check_scatter_reduce(reduce)
    return _padded(grad.gather(dim, index), src_shape)


scatter_ = inplace_variant(scatter)


def _scatter_add_samples(make):
    return [Sample(make(3, 4), 0, tensor([[2, 0, 2, 1], [2, 2, 0, 2]]), make(2, 4)),
            Sample(make(3, 4), 1, tensor([[3, 3], [0, 3]]), make(2, 2)),
            Sample(make(), 0, tensor([0, 0]), make(2))]


@op(inputs=("self", "src"), samples=_scatter_add_samples)
def scatter_add(self, dim, index, src, *, out=None):
    if not isinstance(src, TensorBase):
        raise TypeError(f"scatter_add(): argument 'src' (position 3) must be Tensor, not "
                        f"{type(src).__name__}")
    d, positions = _check_scatter("scatter_add", self, dim, index, src)
    return _scatter_into(_target(self, out, (index, src)), self, d, positions, src._array(),
                         "add")


@scatter_add.def_derivative("self")
def scatter_add(grad):
    return grad


@scatter_add.def_derivative("src")
def scatter_add(grad, dim, index, src_shape):
    return _padded(grad.gather(dim, index), src_shape)


def dimwise_index_batch_rule(op, level, args, kwargs):
    """Every tensor argument batched (unbatched ones expanded) and ``dim`` shifted."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    _check_indexed_write(op, bound, self, level)
    result_rank = bound["index"].dim() if op.name == "gather" else self.dim()
    bound["dim"] = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    _prepared(bound, ("self", "index", "src"), level, batch_size(level))
    result = call(op, (bound.pop("self"),), bound)
    if op.kind == "inplace":
        return self
    return wrap(result.squeeze(1) if result_rank == 0 else result, 0, level)


gather.def_batch_rule(dimwise_index_batch_rule)
scatter.def_batch_rule(dimwise_index_batch_rule)
scatter_add.def_batch_rule(dimwise_index_batch_rule)


scatter_add_ = inplace_variant(scatter_add)


def _index_add_samples(make):
    return [Sample(make(4, 3), 0, tensor([0, 3, 0]), make(3, 3)),
            Sample(make(2, 5), 1, tensor([4, 4]), make(2, 2), alpha=-1.5),
            Sample(make(), 0, tensor([0]), make())]


def _check_index_and_source(name, self, index, source):
    """PyTorch's checks of the index vector and the source of ``index_add_`` and
    ``index_reduce_`` (public attributes: ``index_reduce_`` checks per sample under vmap)."""
    if not _is_integer_index(index):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index but got: "
                           f"{type_name(index.dtype)}")
    if index.dim() > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector, but got dim: "
                         f"{index.dim()} with type: {type_name(index.dtype)} and size: "
                         f"{list(index.shape)}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"{name}(): self ({type_name(self.dtype)}) and source "
                           f"({type_name(source.dtype)}) must have the same scalar type")


@op(inputs=("self", "source"), samples=_index_add_samples)
def index_add(self, dim, index, source, *, alpha=1, out=None):
    _check_index_and_source("index_add_", self, index, source)
    d = meta.wrap_dim(dim, self.dim())
    self_shape, source_shape = _shape_or_vector(self), _shape_or_vector(source)
    if len(source_shape) != len(self_shape) or \
            any(s != t for k, (s, t) in enumerate(zip(source_shape, self_shape)) if k != d):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {list(self._sizes)} "
                           f"source.shape = {list(source._sizes)}")
    if source_shape[d] != index._numel:
        raise RuntimeError(f"index_add_(): Number of indices ({index._numel}) should be equal to "
                           f"source.size(dim): ({source_shape[d]}), for dim: {d}")
    positions = index._array().reshape(-1)
    bad = _out_of_range(positions, 0, self_shape[d])
    if bad is not None:
        if len(self_shape) <= 1:    # PyTorch's index_add_ of a vector
            raise IndexError("index out of range in self")
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size "
                           f"{self_shape[d]}")
    out = _target(self, out, (index, source))
    target = np.moveaxis(out._array().reshape(self_shape), d, 0)
    addend = np.moveaxis(source._array().reshape(source_shape), d, 0)
    alpha = cast_scalar(alpha, self._dtype)
    if alpha != 1:
        addend = (addend * alpha).astype(target.dtype, copy=False)
    elif np.may_share_memory(addend, target):   # the overlap PyTorch lets through
        addend = addend.copy()
    update_at("add", target, positions, addend)
    return out


@index_add.def_derivative("self")
def index_add(grad):
    return grad


@index_add.def_derivative("source")
def index_add(grad, dim, index, source_shape, alpha):
    grad_source = grad.index_select(dim, index).reshape(source_shape)
    return grad_source if alpha == 1 else grad_source * alpha


@index_add.def_batch_rule
def index_add(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index, source = bound["self"], bound["index"], bound["source"]
    _check_indexed_write(op, bound, self, level)
    size = batch_size(level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    bound["self"], bound["source"] = self, source
    _prepared(bound, ("self", "source"), level, size)
    target, values = bound["self"], bound["source"]
    if not same_level(index, level):
        result = call(op, (target, d, index, values), {"alpha": bound["alpha"]})
    else:
        positions = _index_spread(to_front(index._value, index._bdim).reshape(size, -1),
                                  values, d)
        if bound["alpha"] != 1:
            values = values * bound["alpha"]
        scatter = REGISTRY["scatter_add_" if op.kind == "inplace" else "scatter_add"]
        result = call(scatter, (target, d, positions, values), None)
    if op.kind == "inplace":
        return self
    return wrap(result.squeeze(1) if self.dim() == 0 else result, 0, level)


index_add_ = inplace_variant(index_add)


def _index_fill_samples(make):
    return [Sample(make(4, 3), 0, tensor([0, -1, 0]), -2.0),
            Sample(make(2, 5), 1, tensor([4]), make()), Sample(make(), 0, tensor(0), 1.0)]


@op(inputs=("self", "value"), out=False, samples=_index_fill_samples)
def index_fill(self, dim, index, value, *, out=None):
    if index._dtype is not int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if isinstance(value, TensorBase):
        if value.dim() != 0:
            raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value.dim()} dimension(s).")
        value = value._array().item()
    if index.dim() > 1:
        raise IndexError("index_fill_(): Index is supposed to be a vector")
    check_scalar_fits(value, self._dtype)
    d = meta.wrap_dim(dim, self.dim())
    self_shape = _shape_or_vector(self)
    positions = index._array().reshape(-1)
    bad = _out_of_range(positions, -self_shape[d], self_shape[d])
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for dimension {d} with size "
                         f"{self_shape[d]}")
    out = _target(self, out, (index,), expanded_warning="index_fill_")
    np.moveaxis(out._array().reshape(self_shape), d, 0)[positions] = value
    return out


@index_fill.def_derivative("self")
def index_fill(grad, dim, index):
    return grad.index_fill(dim, index, 0)


@index_fill.def_derivative("value")
def index_fill(grad, dim, index):
    return (grad - grad.index_fill(dim, index, 0)).sum()


@index_fill.def_batch_rule
def index_fill(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index, value = bound["self"], bound["index"], bound["value"]
    _check_indexed_write(op, bound, self, level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1))
    if self.dim() and same_level(self, level) and not same_level(index, level) \
            and not same_level(value, level):
        result = call(op, (to_front(self._value, self._bdim), d + 1, index, value), None)
        return self if op.kind == "inplace" else wrap(result, 0, level)
    # a per-sample value or index: fill through a mask of the chosen positions
    mask = _index_mask(self, d, index, level)
    filled = REGISTRY["where"](mask, value, self).to(self.dtype)
    return self.copy_(filled) if op.kind == "inplace" else filled


def _index_mask(self, d, index, level):
    """True where ``index_fill(d, index)`` writes, per sample."""
    shape = tuple(self.shape) or (1,)
    if not same_level(index, level):
        mask = index.new_zeros(shape, dtype=bool_).index_fill_(d, index, True)
        return mask.view(tuple(self.shape))
    size = batch_size(level)
    mask = index._value.new_zeros((size,) + shape, dtype=bool_)
    positions = to_front(index._value, index._bdim).reshape(size, -1)
    positions = REGISTRY["where"](positions < 0, positions + shape[d], positions)
    mask.scatter_(d + 1, _index_spread(positions, mask, d + 1), value=True)
    return wrap(mask.view((size,) + tuple(self.shape)), 0, level)


index_fill_ = inplace_variant(index_fill)


# --------------------------------------------------------------------------- masks, flat positions

def _masked_select_samples(make):
    return [Sample(make(3, 4), make(3, 4, dtype=bool_)), Sample(make(4), make(3, 4, dtype=bool_)),
            Sample(make(3, 1), make(4, dtype=bool_))]


@op(out=True, samples=_masked_select_samples)
def masked_select(self, mask):
    if mask._dtype is not bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = tuple(meta.broadcast_shapes(self._sizes, mask._sizes))
    return fresh_tensor(np.broadcast_to(self._array(), shape)[
        np.broadcast_to(mask._array(), shape)])


@masked_select.def_derivative("self")
def masked_select(grad, self, mask):
    # `self` is saved (not just its shape) as PyTorch does: see gather
    shape = tuple(meta.broadcast_shapes(self.shape, mask.shape))
    return grad.new_zeros(shape).index_put((mask.expand(shape),), grad)


# Each sample may select a different number of elements, so there is no single physical
# op; the loop is correct whenever the counts agree (and warns).
masked_select.def_batch_rule(fallback)


def _take_samples(make):
    return [Sample(make(3, 4), tensor([[0, 11], [-1, 5]])), Sample(make(5), tensor([4, 4, 0])),
            Sample(make(), tensor(0))]


@op(out=True, samples=_take_samples)
def take(self, index):
    if index._dtype is not int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{type_name(index._dtype)}")
    count = self._numel
    positions = index._array()
    if count == 0 and positions.size:
        raise IndexError("take(): tried to take from an empty tensor")
    bad = _out_of_range(positions, -count, count)
    if bad is not None:
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {count} "
                         "elements.")
    return fresh_tensor(self._array().reshape(-1)[positions])


@take.def_derivative("self")
def take(grad, self_shape, index):
    count = 1
    for size in self_shape:
        count *= size
    flat = grad.new_zeros(count).index_put((index.reshape(-1),), grad.reshape(-1),
                                           accumulate=True)
    return flat.reshape(self_shape)


@take.def_batch_rule
def take(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index = bound["self"], bound["index"]
    size = batch_size(level)
    flat = front_or_expanded(self, level, size).reshape(size, -1)
    positions = front_or_expanded(index, level, size).reshape(size, -1)
    positions = REGISTRY["where"](positions < 0, positions + max(self.numel(), 1), positions)
    picked = REGISTRY["gather"](flat, 1, positions)
    return wrap(picked.view((size,) + tuple(index.shape)), 0, level)


__all__ = ["getitem", "setitem", "basic_index", "index", "index_put", "index_put_",
           "index_select", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_",
           "index_add", "index_add_", "index_fill", "index_fill_", "masked_select", "take"]
__all__ += ["select_scatter", "slice_scatter", "diagonal_scatter", "as_strided_scatter",
            "index_copy", "index_copy_", "index_reduce", "index_reduce_", "masked_scatter",
            "masked_scatter_", "put", "put_"]


# --------------------------------------------------------------------------- PyTorch's other
# scatter and indexing names: composites of index_put, scatter_reduce, gather and where
# (their derivatives and batching rules are those ops')
#
# Values are read for PyTorch's range checks only outside vmap (``_host``): inside, a
# batched index holds every sample's values, which a rule must not read.

def _host(t):
    """``t``'s values as a NumPy array, or None for a tensor batched under vmap."""
    return None if isinstance(t, BatchedTensor) else t._array()


def _dense_order(t):
    """The dims of ``t`` outermost-first in the memory order its ``clone()`` keeps, so that
    a result computed on ``t.permute(order)`` and permuted back has that layout."""
    strides = meta.preserve_format_strides(t._sizes, t._strides)
    return sorted(range(len(strides)), key=lambda k: -strides[k])


def _put_at(self, coordinates, values, accumulate=False, inplace=False):
    """``self.index_put(coordinates, values)`` (one coordinate tensor per dim), the result
    laid out as ``self.clone()``."""
    if inplace:
        return self.index_put_(coordinates, values, accumulate)
    order = _dense_order(self)
    if order == list(range(self.dim())):
        return self.index_put(coordinates, values, accumulate)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return owned(self.permute(order).index_put(tuple(coordinates[k] for k in order), values,
                                               accumulate).permute(inverse))


def _scatter_into_view(self, src, view):
    """``self`` with the elements of ``view(self)`` replaced by ``src``: ``view`` is applied
    to a grid holding each element's flat position, laid out in memory as ``self.clone()``
    (what ``as_strided`` reads), so the same view op gives PyTorch's checks and region."""
    shape = tuple(self.shape)
    grid = arange(self.numel()).view(shape) if self.dim() else arange(1).view(())
    memory = meta.preserve_format_strides(shape, tuple(self.stride()))
    laid_out = grid.new_empty_strided(shape, memory)
    laid_out.copy_(grid)
    region = view(laid_out)
    if tuple(src.shape) != tuple(region.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(region.shape)}")
    if not shape:
        return src.to(self.dtype).clone() if region.numel() else self.clone()
    flat = region._array().reshape(-1)
    coordinates = tuple(tensor(c, dtype=int64).to(self.device)
                        for c in np.unravel_index(flat, shape))
    return _put_at(self, coordinates, src.to(self.dtype).reshape(-1))


def _select_scatter_samples(make):
    return [Sample(make(3, 4), make(4), 0, 1), Sample(make(3, 4), make(3), -1, -2),
            Sample(make(2, 3, 2), make(2, 2), 1, 0)]


@op(kind="composite", inputs=("self", "src"), samples=_select_scatter_samples)
def select_scatter(self, src, dim, index):
    return _scatter_into_view(self, src, lambda grid: grid.select(dim, index))


def _slice_scatter_samples(make):
    return [Sample(make(5, 3), make(2, 3), 0, 1, 5, 2), Sample(make(3, 4), make(3, 2), 1, 2),
            Sample(make(4, 2), make(4, 2)), Sample(make(4, 2), make(3, 2), end=-1)]


@op(out=True, kind="composite", inputs=("self", "src"), samples=_slice_scatter_samples)
def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    return _scatter_into_view(self, src, lambda grid: grid.slice(dim, start, end, step))


def _diagonal_scatter_samples(make):
    return [Sample(make(3, 4), make(3)), Sample(make(3, 4), make(2), 2),
            Sample(make(2, 3, 3), make(2, 2), -1, 1, 2)]


@op(kind="composite", inputs=("self", "src"), samples=_diagonal_scatter_samples)
def diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    return _scatter_into_view(self, src, lambda grid: grid.diagonal(offset, dim1, dim2))


def _as_strided_scatter_samples(make):
    return [Sample(make(3, 4), make(2, 2), (2, 2), (1, 2)),
            Sample(make(4, 3).t(), make(2), (2,), (1,)),
            Sample(make(6), make(2, 2), (2, 2), (2, 1), 1)]


@op(kind="composite", inputs=("self", "src"), samples=_as_strided_scatter_samples)
def as_strided_scatter(self, src, size, stride, storage_offset=None):
    def view(grid):
        offset = grid.storage_offset() if storage_offset is None else storage_offset
        # the bounds check (and its message) for the elements of self, not of the grid
        empty_strided(grid.shape, grid.stride(), dtype=self.dtype).as_strided(size, stride,
                                                                               offset)
        return grid.as_strided(size, stride, offset)
    return _scatter_into_view(self, src, view)


def _check_index_copy(self, d, index, source):
    if index.dim() > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got "
                         f"{index.dim()})")
    if index.dtype is not int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{type_name(index.dtype)}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, "
                           f"but got (self) {type_name(self.dtype)} and (source) "
                           f"{type_name(source.dtype)}")
    if source.dim() and self.dim() and source.dim() != self.dim():
        raise IndexError(f"index_copy_(): When source and destination are not scalars, their "
                         f"dimensionality must match. Source dimensionality ({source.dim()}), "
                         f"destination dimensionality ({self.dim()})")
    count = index.numel()
    if source.dim() and count != source.shape[d]:
        raise IndexError(f"index_copy_(): Number of indices ({count}) should be equal to "
                         f"source.size(dim) ({source.shape[d]})")
    for k in range(self.dim()):
        if k != d and source.dim() and source.shape[k] != self.shape[k]:
            at = k if k < d else k - 1      # PyTorch counts the dims of the slices
            raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice "
                               f"shapes. Destination slice shape: {self.shape[k]} at dimension "
                               f"{at} and source slice shape: {source.shape[k]} at dimension "
                               f"{at}.")
    positions = _host(index)
    size = self.shape[d] if self.dim() else 1
    if positions is not None:
        bad = _out_of_range(positions.reshape(-1), 0, size)
        if bad is not None:
            raise IndexError(f"index_copy_(): index {bad} is out of bounds for dimension {d} "
                             f"with size {size}")


def _index_copy_samples(make):
    return [Sample(make(4, 3), 0, tensor([3, 0]), make(2, 3)),
            Sample(make(2, 5), 1, tensor([4, 1, 2]), make(2, 3)),
            Sample(make(3), 0, tensor(1), make(1))]


def _index_copy(self, dim, index, source, inplace):
    d = meta.wrap_dim(dim, max(self.dim(), 1))
    _check_index_copy(self, d, index, source)
    if not self.dim():
        target = self.view(1)
        result = _put_at(target, (index.reshape(-1),), source.reshape(-1), inplace=inplace)
        return self if inplace else result.view(())
    coordinates = (None,) * d + (index.reshape(-1),)
    values = source.reshape(tuple(self.shape[:d]) + (index.numel(),) + tuple(self.shape[d + 1:]))
    if inplace:
        return self.index_put_(coordinates, values)
    return self.index_put(coordinates, values)


@op(out=True, kind="composite", inputs=("self", "source"), samples=_index_copy_samples)
def index_copy(self, dim, index, source):
    """``self`` with slice ``index[i]`` along ``dim`` replaced by slice ``i`` of
    ``source``."""
    return _index_copy(self, dim, index, source, inplace=False)


@op(kind="composite", inputs=("self", "source"), function=False)
def index_copy_(self, dim, index, source):
    return _index_copy(self, dim, index, source, inplace=True)


INDEX_REDUCTIONS = ("prod", "mean", "amax", "amin")


def _index_reduce(self, dim, index, source, reduce, include_self, inplace):
    if reduce not in INDEX_REDUCTIONS:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    if not include_self:
        refuse_complex(self, "index_reduce_func_exclude_input_init", bool_too=True)
    elif reduce in ("amax", "amin"):    # (complex numbers have no order)
        refuse_complex(self, {"amax": "maximum_cpu", "amin": "minimum_cpu"}[reduce])
    _check_index_and_source("index_reduce_", self, index, source)
    d = meta.wrap_dim(dim, max(self.dim(), 1))
    target, values = (self.view(1), source.view(1)) if not self.dim() else (self, source)
    if values.dim() and values.shape[d] != index.numel():
        raise RuntimeError(f"index_reduce_(): Number of indices ({index.numel()}) should be "
                           f"equal to source.size(dim): ({values.shape[d]}), for dim: {d}")
    positions = _host(index)
    if positions is not None and _out_of_range(positions.reshape(-1), -target.shape[d],
                                               target.shape[d]) is not None:
        raise IndexError("index out of range in self")
    index = index.to(int64).reshape(-1)
    index = REGISTRY["where"](index < 0, index + target.shape[d], index)
    spread = index.view((1,) * d + (-1,) + (1,) * (target.dim() - d - 1)).expand(values.shape)
    name = "scatter_reduce_" if inplace else "scatter_reduce"
    result = getattr(target, name)(d, spread, values, reduce, include_self=include_self)
    return self if inplace else owned(result.view(self.shape))


def _index_reduce_samples(make):
    return [Sample(make(4, 3), 0, tensor([3, 0, 3]), make(3, 3), "prod"),
            Sample(make(2, 5), 1, tensor([4, 1]), make(2, 2), "mean", include_self=False),
            Sample(make(3, 2), 0, tensor([1, 1]), make(2, 2), "amax"),
            Sample(make(3, 2), -1, tensor([0]), make(3, 1), "amin", include_self=False)]


@op(out=True, kind="composite", inputs=("self", "source"), samples=_index_reduce_samples)
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """``self`` with slice ``i`` of ``source`` reduced (``prod``, ``mean``, ``amax``,
    ``amin``) into slice ``index[i]`` along ``dim`` (with ``self``'s own value unless
    ``include_self=False``)."""
    return _index_reduce(self, dim, index, source, reduce, include_self, inplace=False)


@op(kind="composite", inputs=("self", "source"), function=False)
def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return _index_reduce(self, dim, index, source, reduce, include_self, inplace=True)


def _masked_scatter_samples(make):
    return [Sample(make(3, 4), make(3, 4, dtype=bool_), make(12)),
            Sample(make(4), make(3, 4, dtype=bool_), make(3, 5)),
            Sample(make(2, 3), tensor([True, False, True]), make(4))]


@op(kind="composite", inputs=("self", "source"), samples=_masked_scatter_samples)
def masked_scatter(self, mask, source):
    """``self`` with the elements where ``mask`` is True replaced, in order, by the first
    elements of ``source`` (``self`` and ``mask`` broadcast)."""
    if mask.dtype is not bool_:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {type_name(mask.dtype)}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but "
                           f"got{type_name(self.dtype)} and {type_name(source.dtype)}")
    shape = tuple(meta.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
    mask, base = mask.expand(shape), self.expand(shape)
    ones = _host(mask)
    if ones is not None and int(ones.sum()) > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    if not source.numel():
        return base.clone(memory_format=meta.contiguous_format)
    # each True takes the source element numbered by the Trues before it
    taken = mask.reshape(-1).to(int64).cumsum(0).sub(1).clamp(0, source.numel() - 1)
    picked = source.reshape(-1).gather(0, taken).view(shape)
    # contiguous, as PyTorch's (where would follow a transposed self)
    return REGISTRY["where"](mask, picked, base).contiguous()


@op(kind="composite", inputs=("self", "source"), function=False)
def masked_scatter_(self, mask, source):
    result = masked_scatter(self, mask, source)
    if tuple(result.shape) != tuple(self.shape):
        raise RuntimeError(f"masked_scatter_: the mask of shape {list(mask.shape)} does not "
                           f"broadcast to self of shape {list(self.shape)}")
    return self.copy_(result)


def _put(self, index, source, accumulate, inplace):
    if index.dtype is not int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got "
                           f"{type_name(index.dtype)}")
    if source.dtype is not self.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {type_name(self.dtype)} and source.dtype = "
                           f"{type_name(source.dtype)}")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.numel()}, index.numel() "
                         f"= {index.numel()}")
    count = self.numel()
    if count == 0 and index.numel():
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    positions = _host(index)
    if positions is not None:
        bad = _out_of_range(positions.reshape(-1), -count, count)
        if bad is not None:
            raise IndexError(f"out of range: tried to access index {bad} on a tensor of "
                             f"{count} elements.")
    flat = index.reshape(-1)
    flat = REGISTRY["where"](flat < 0, flat + count, flat)
    target = self if self.dim() else self.view(1)
    coordinates = REGISTRY["unravel_index"](flat, tuple(target.shape))
    result = _put_at(target, coordinates, source.reshape(-1), accumulate, inplace)
    return self if inplace else owned(result.view(self.shape))


def _put_samples(make):
    return [Sample(make(3, 4), tensor([0, 11, -2]), make(3)),
            Sample(make(3, 4), tensor([[1, 1], [2, 5]]), make(2, 2), True),
            Sample(make(4, 3).t(), tensor([1, 4]), make(2)), Sample(make(), tensor([0]), make(1))]


@op(kind="composite", inputs=("self", "source"), samples=_put_samples)
def put(self, index, source, accumulate=False):
    """``self`` with the elements at flat (row-major) positions ``index`` replaced by (with
    ``accumulate``: added to) ``source``."""
    return _put(self, index, source, accumulate, inplace=False)


@op(kind="composite", inputs=("self", "source"), function=False)
def put_(self, index, source, accumulate=False):
    return _put(self, index, source, accumulate, inplace=True)


# --------------------------------------------------------------------------- more in-place

@op(kind="composite", function=False)
def fill_diagonal_(self, fill_value, wrap=False):
    """Fill the main diagonal (every index equal) of a matrix or of an n-D tensor with
    dims of equal length; ``wrap``: in a matrix taller than wide, restart the diagonal
    every ``width + 1`` rows, as NumPy's ``fill_diagonal``.  PyTorch's ``as_strided``
    plan: the diagonal is one stride, the sum of the tensor's strides."""
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    height, width = self.shape[0], self.shape[1]
    if self.dim() > 2 and any(n != height for n in self.shape[1:]):
        raise RuntimeError("all dimensions of input must be of equal length")
    stride, offset = sum(self.stride()), self.storage_offset()
    size = min(height, width)
    self.as_strided((size,), (stride,), offset).fill_(fill_value)
    step = width + 1
    if wrap and self.dim() == 2 and height > step:
        wrapped = (self.numel() + step - 1) // step - size
        self.as_strided((wrapped,), (stride,), offset + self.stride(0) * step).fill_(fill_value)
    return self


__all__ += ["fill_diagonal_"]
