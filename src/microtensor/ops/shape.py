"""Shape ops: joining tensors (``cat``, ``stack``, ``hstack``, ``vstack``), splitting one into
views (``split``, ``split_with_sizes``, ``chunk``, ``unbind``), rearranging copies
(``roll``, ``flip``, ``repeat``, ``tile``) and the triangle and diagonal ops (``tril``,
``triu``, ``trace``, ``diag``, ``diag_embed``).

Splits return tuples of views sharing the input's storage; autograd records each call as
one multi-output view op, so writing in place into a piece raises as in PyTorch.  Copies
are computed by NumPy on views of the storage.  Derivatives use only microtensor ops and
make their buffers from the incoming gradient, so they are differentiable and run under
vmap.
"""
import inspect
from numbers import Integral

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import TensorBase, bool_, empty_strided_unchecked, int64
from microtensor._composite import _tensors
from microtensor._dtype import promote_types, result_type
from microtensor.backends import cuda
from microtensor.ops.arguments import int_arg, int_tuple, ints_arg, size_arg
from microtensor.ops.factory import arange, tensor_of
from microtensor.ops.loops import (_type_name, array_module, device_of, new_result, owned,
                                   repeated_dim_error)
from microtensor.ops.registry import Sample, inplace_variant, op
from microtensor.ops.registry import REGISTRY
from microtensor.vmap.helpers import (actual_dim, aligned, batch_size, call, front_or_expanded,
                                      inplace_error, no_fallback, same_level, to_front,
                                      wrap)
from microtensor.ops.view import diagonal


def fresh_tensor(values):
    """A new contiguous tensor taking over a NumPy result (copied only when it is a view
    or not C-ordered)."""
    if cuda.is_device_array(values):
        return cuda.from_result(values)
    values = np.asarray(values, order="C")
    if values.base is not None:
        values = values.copy()
    return tensor_of(values)


# --------------------------------------------------------------------------- joining

def _skipped_by_cat(t):
    # PyTorch's legacy rule: a 1-D empty tensor is left out of cat whatever its other sizes
    return t._sizes == (0,)


def _cat_samples(make):
    return [Sample([make(2, 3), make(4, 3)]), Sample([make(2, 3), make(2, 1), make(2, 0)], 1),
            Sample([make(3), make(0), make(2)], -1), Sample([make(2, 2, 2)], dim=2)]


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), samples=_cat_samples)
def cat(tensors, dim=0):
    tensors = tuple(tensors)
    if not tensors:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorBase):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
        if not t._sizes:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               "concatenated")
    skipped = [_skipped_by_cat(t) for t in tensors]
    if all(skipped):
        skipped = [False] * len(tensors)
    first = tensors[skipped.index(False)]
    d = meta.wrap_dim(dim, first.dim())
    for i, t in enumerate(tensors):
        if skipped[i]:
            continue
        if t.dim() != first.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.dim()} "
                               f"and {t.dim()}")
        for k in range(first.dim()):
            if k != d and t._sizes[k] != first._sizes[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {first._sizes[k]} but got size {t._sizes[k]} "
                                   f"for tensor number {i} in the list.")
    if len(tensors) == 1:
        return first.clone(memory_format=_cat_format(tensors, skipped))
    sizes = tuple(None if skip else t._sizes[d] for t, skip in zip(tensors, skipped))
    return _cat(tensors, d, sizes)


def _cat_format(tensors, skipped):
    """The inputs' common suggested memory format (PyTorch's rule), else contiguous."""
    formats = {meta.suggest_memory_format(t._sizes, t._strides)
               for t, skip in zip(tensors, skipped) if not skip}
    return formats.pop() if len(formats) == 1 else meta.contiguous_format


def _private_cat_samples(make):
    return [Sample([make(2, 3), make(4, 3)], 0, (2, 4)),
            Sample([make(2, 3), make(0), make(2, 1)], 1, (3, None, 1))]


@op(inputs=("tensors",), method=False, function=False, samples=_private_cat_samples)
def _cat(tensors, dim, sizes):
    """``cat`` once its arguments are checked; ``sizes`` are the inputs' sizes along
    ``dim`` (None for skipped ones): all the derivative needs."""
    dtype = result_type(*tensors)
    device = device_of(*tensors)
    joined = [t for t, size in zip(tensors, sizes) if size is not None]
    shape = list(joined[0]._sizes)
    shape[dim] = sum(size for size in sizes if size is not None)
    shape = tuple(shape)
    strides = meta.strides_for_format(shape, _cat_format(joined, [False] * len(joined)))
    out = empty_strided_unchecked(shape, tuple(strides), dtype, device)
    if out._numel:
        target = out._array()
        start = 0
        for t in joined:
            length = t._sizes[dim]
            target[(slice(None),) * dim + (slice(start, start + length),)] = t._array()
            start += length
    return out


@_cat.def_derivative("tensors")
def _cat(grad, dim, sizes):
    grads, start = [], 0
    for size in sizes:
        if size is None:
            grads.append(grad.new_zeros(0))
        else:
            grads.append(grad.narrow(dim, start, size))
            start += size
    return grads


@_cat.def_batch_rule
def _cat(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    size = batch_size(level)
    # the samples' legacy empty tensors (skipped: size None) are left out of the physical
    # call, where they are no longer 1-D and their gradient could not be an empty 1-D one
    kept = [(t, n) for t, n in zip(bound["tensors"], bound["sizes"]) if n is not None]
    tensors = [front_or_expanded(t, level, size) for t, _ in kept]
    return wrap(call(op, (tensors, bound["dim"] + 1, [n for _, n in kept]), None), 0, level)


def _stack_samples(make):
    return [Sample([make(2, 3), make(2, 3)]), Sample([make(3), make(3), make(3)], dim=-1),
            Sample([make()], 0)]


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), samples=_stack_samples)
def stack(tensors, dim=0):
    tensors = tuple(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0]._sizes
    for i, t in enumerate(tensors):
        if t._sizes != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(shape)} at entry 0 and {list(t._sizes)} at entry {i}")
    d = meta.wrap_dim(dim, len(shape) + 1)
    if d < len(shape):
        # PyTorch's layout: the inputs joined along ``d`` as ``cat`` lays them out, then
        # that dim split in two (the unsqueezed inputs can suggest another memory format)
        return owned(cat(tensors, d).unflatten(d, (len(tensors), shape[d])))
    return cat([t.unsqueeze(d) for t in tensors], d)


def _hstack_samples(make):
    return [Sample([make(2), make(3)]), Sample([make(2, 3), make(2, 1), make(2, 2)]),
            Sample([make(), make(2)])]


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=_hstack_samples)
def hstack(tensors):
    tensors = [t.reshape(1) if t.dim() == 0 else t for t in tensors]
    if not tensors:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return cat(tensors, 0 if tensors[0].dim() == 1 else 1)


def _vstack_samples(make):
    return [Sample([make(3), make(2, 3)]), Sample([make(2, 2), make(1, 2), make(2)])]


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=_vstack_samples)
def vstack(tensors):
    tensors = [t.reshape(1, -1) if t.dim() < 2 else t for t in tensors]
    if not tensors:
        raise RuntimeError("vstack expects a non-empty TensorList")
    return cat(tensors, 0)


# --------------------------------------------------------------------------- splitting

def split_sizes(shape, split_size_or_sections, dim):
    """The sizes along ``dim`` of the pieces ``split`` cuts a tensor of ``shape`` into."""
    if not shape:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = meta.wrap_dim(dim, len(shape))
    size = shape[d]
    if isinstance(split_size_or_sections, (tuple, list)):
        return _checked_sections(size, d, split_size_or_sections)
    split_size = int_arg(split_size_or_sections, "split_size")
    if split_size < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got "
                           f"split_size={split_size}")
    if split_size == 0:
        if size != 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {size}")
        return (0,)
    count = max(-(-size // split_size), 1)
    return (split_size,) * (count - 1) + (size - split_size * (count - 1),)


def _checked_sections(size, dim, sections):
    sections = int_tuple(sections, "split_sizes")
    if any(s < 0 for s in sections):
        raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative "
                           f"entries, but got split_sizes={list(sections)}")
    if sum(sections) != size:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                           f"(input tensor's size at dimension {dim}), but got "
                           f"split_sizes={list(sections)}")
    return sections


def _pieces(self, sizes, dim):
    d = meta.wrap_dim(dim, self.dim())
    stride = self._strides[d]
    pieces, start = [], 0
    for size in sizes:  # safe: the callers checked that the sizes sum to the dim's size
        pieces.append(self._make_view_unchecked(
            self._sizes[:d] + (size,) + self._sizes[d + 1:], self._strides,
            self._offset + start * stride))
        start += size
    return tuple(pieces)


def _as_grads(grad):
    # autograd hands a node with a single output its gradient itself, not in a tuple
    return (grad,) if isinstance(grad, TensorBase) else grad


def _joined_grads(grads, self_shape, dim, sizes):
    """The gradient of the input of a split: the pieces' gradients concatenated, with
    zeros for pieces that received none."""
    d = meta.wrap_dim(dim, len(self_shape))
    grads = _as_grads(grads)
    present = next(g for g in grads if g is not None)
    filled = [g if g is not None else
              present.new_zeros(self_shape[:d] + (size,) + self_shape[d + 1:])
              for g, size in zip(grads, sizes)]
    return cat(filled, d)


def _split_samples(make):
    return [Sample(make(5, 2), 2), Sample(make(4, 3), 2, 1), Sample(make(4, 3), [1, 0, 3]),
            Sample(make(3), 5), Sample(make(0, 2), 0)]


@op(kind="view", samples=_split_samples)
def split(self, split_size_or_sections, dim=0):
    return _pieces(self, split_sizes(self._sizes, split_size_or_sections, dim), dim)


@split.def_derivative("self")
def split(grad, self_shape, split_size_or_sections, dim):
    sizes = split_sizes(self_shape, split_size_or_sections, dim)
    return _joined_grads(grad, self_shape, dim, sizes)


def _split_with_sizes_samples(make):
    return [Sample(make(4, 3), [1, 3]), Sample(make(2, 5), (2, 0, 3), dim=-1)]


@op(kind="view", samples=_split_with_sizes_samples)
def split_with_sizes(self, split_sizes, dim=0):
    if self.dim() == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = meta.wrap_dim(dim, self.dim())
    return _pieces(self, _checked_sections(self._sizes[d], d, split_sizes), d)


@split_with_sizes.def_derivative("self")
def split_with_sizes(grad, self_shape, split_sizes, dim):
    return _joined_grads(grad, self_shape, dim, tuple(split_sizes))


def _chunk_samples(make):
    return [Sample(make(5, 2), 2), Sample(make(2, 6), 4, dim=1), Sample(make(0), 2)]


@op(kind="composite", samples=_chunk_samples)
def chunk(self, chunks, dim=0):
    if self.dim() == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    chunks = int_arg(chunks, "chunks")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    size = self.shape[meta.wrap_dim(dim, self.dim())]
    if size == 0:
        return split_with_sizes(self, [0] * chunks, dim)
    return split(self, -(-size // chunks), dim)


def _unbind_samples(make):
    return [Sample(make(3, 2)), Sample(make(2, 4), 1), Sample(make(3), -1)]


@op(kind="view", samples=_unbind_samples)
def unbind(self, dim=0):
    if self.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = meta.wrap_dim(dim, self.dim())
    sizes = self._sizes[:d] + self._sizes[d + 1:]
    strides = self._strides[:d] + self._strides[d + 1:]
    # safe: one view per index 0 <= i < size of dim d (as select)
    return tuple(self._make_view_unchecked(sizes, strides, self._offset + i * self._strides[d])
                 for i in range(self._sizes[d]))


@unbind.def_derivative("self")
def unbind(grad, self_shape, dim):
    d = meta.wrap_dim(dim, len(self_shape))
    grads = _as_grads(grad)
    present = next(g for g in grads if g is not None)
    piece_shape = self_shape[:d] + self_shape[d + 1:]
    return stack([g if g is not None else present.new_zeros(piece_shape) for g in grads], d)


def split_batch_rule(op, level, args, kwargs):
    """``split``/``split_with_sizes``/``unbind``: the per-sample dim shifted past the batch
    dim; every piece keeps it (``unbind`` removes a dim before it)."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    n, b = self.dim(), self._bdim
    if n == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor") \
            if op.name != "unbind" else IndexError("Dimension specified as 0 but tensor has no "
                                                   "dimensions")
    p = actual_dim(meta.wrap_dim(bound["dim"], n), b)
    bound["dim"] = p
    pieces = call(op, (self._value,), bound)
    new_bdim = b - 1 if op.name == "unbind" and p < b else b
    return tuple(wrap(piece, new_bdim, level) for piece in pieces)


split.def_batch_rule(split_batch_rule)
split_with_sizes.def_batch_rule(split_batch_rule)
unbind.def_batch_rule(split_batch_rule)


# --------------------------------------------------------------------------- rearranging

def _roll_samples(make):
    return [Sample(make(4, 3), 1), Sample(make(4, 3), -2, 0),
            Sample(make(2, 3, 4), (1, -5), (2, 0)), Sample(make(), 3)]


@op(samples=_roll_samples)
def roll(self, shifts, dims=None):
    shifts = ints_arg(shifts, "shifts")
    dims = () if dims is None else ints_arg(dims, "dims")
    if not dims and len(shifts) == 1:
        flat = np.roll(self._array().reshape(-1), shifts[0])
        return fresh_tensor(flat.reshape(self._sizes))
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                           f"{len(dims)}")
    axes = tuple(meta.wrap_dim(d, self.dim()) for d in dims)
    if self.dim() == 0:
        return self.clone()
    return fresh_tensor(np.roll(self._array(), shifts, axis=axes))


@roll.def_derivative("self")
def roll(grad, shifts, dims):
    shifts = (shifts,) if isinstance(shifts, Integral) else tuple(shifts)
    return grad.roll(tuple(-s for s in shifts), dims)


@roll.def_batch_rule
def roll(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, shifts, dims = bound["self"], bound["shifts"], bound["dims"]
    value = to_front(self._value, self._bdim)
    if dims is None or (not isinstance(dims, Integral) and len(dims) == 0):
        flat = value.reshape(value._sizes[0], -1)
        rolled = call(op, (flat, shifts, 1), None)
        return wrap(rolled.view(value._sizes), 0, level)
    dims = (dims,) if isinstance(dims, Integral) else tuple(dims)
    n = max(self.dim(), 1)
    if self.dim() == 0:
        return wrap(value.clone(), 0, level)
    return wrap(call(op, (value, shifts, tuple(meta.wrap_dim(d, n) + 1 for d in dims)), None),
                0, level)


def _flip_samples(make):
    return [Sample(make(4, 3), 0), Sample(make(2, 3, 4), (0, 2)), Sample(make(3, 2), -1, 0),
            Sample(make(), 0)]


@op(samples=_flip_samples)
def flip(self, *dims):
    axes = tuple(meta.wrap_dim(d, self.dim()) for d in size_arg(dims, "dims"))
    if len(set(axes)) != len(axes):
        raise repeated_dim_error(axes)
    strides = meta.preserve_format_strides(self._sizes, self._strides)
    out = empty_strided_unchecked(self._sizes, tuple(strides), self._dtype, self.device)
    if out._numel:
        source = self._array()
        out._array()[...] = np.flip(source, axes) if self.dim() else source
    return out


@flip.def_derivative("self")
def flip(grad, dims):
    return grad.flip(size_arg(dims, "dims", required=False))


@flip.def_batch_rule
def flip(op, level, args, kwargs):
    self = args[0]
    dims = size_arg(args[1:], "dims", required=False)
    b = self._bdim
    physical = tuple(actual_dim(meta.wrap_dim(d, self.dim()), b) for d in dims) if self.dim() \
        else ()
    return wrap(call(op, (self._value, physical), None), b, level)


def _repeat_samples(make):
    return [Sample(make(2, 3), 2, 1), Sample(make(3), (2, 1, 2)), Sample(make(), 3),
            Sample(make(2, 1), 1, 0)]


@op(samples=_repeat_samples)
def repeat(self, *repeats):
    sizes = size_arg(repeats, "repeats", required=False)
    if len(sizes) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    padded = (1,) * (len(sizes) - self.dim()) + self._sizes
    meta.check_size_nonnegative(tuple(n * s for n, s in zip(sizes, padded)))
    return fresh_tensor(np.tile(self._array().reshape(padded), sizes))


@repeat.def_derivative("self")
def repeat(grad, self_shape, repeats):
    sizes = size_arg(repeats, "repeats", required=False)
    if 0 in sizes:      # nothing of self in the result: PyTorch's zeros, without a graph
        return grad.new_zeros(tuple(self_shape))
    padded = (1,) * (len(sizes) - len(self_shape)) + tuple(self_shape)
    interleaved = tuple(n for pair in zip(sizes, padded) for n in pair)
    repeated_dims = tuple(range(0, 2 * len(sizes), 2))
    return grad.reshape(interleaved).sum(repeated_dims).reshape(self_shape)


@repeat.def_batch_rule
def repeat(op, level, args, kwargs):
    self = args[0]
    sizes = size_arg(args[1:], "repeats", required=False)
    if len(sizes) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    value = aligned(self._value, self._bdim, self.dim(), len(sizes))
    return wrap(call(op, (value, (1,) + sizes), None), 0, level)


@op(kind="composite")
def tile(self, *dims):
    dims = size_arg(dims, "dims", required=False)
    return self.repeat((1,) * (self.dim() - len(dims)) + dims)


# --------------------------------------------------------------------------- triangles, diagonals

def _triangle_samples(make):
    return [Sample(make(4, 3)), Sample(make(3, 4), 1), Sample(make(2, 3, 3), -1),
            Sample(make(3, 5), diagonal=-7)]


def _triangle(name, np_triangle):
    def kernel(self, diagonal=0, *, out=None):
        if self.dim() < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        diagonal = int_arg(diagonal, "diagonal")
        if out is None:
            out = new_result(self._sizes, self._dtype, device=self.device)
        if out._numel:
            out._array()[...] = np_triangle(self._array(), diagonal)
        return out
    kernel.__name__ = name
    declared = op(name, samples=_triangle_samples)(kernel)

    def derivative(grad, diagonal):
        return declared(grad, diagonal)
    return declared.def_derivative("self")(derivative)


tril = _triangle("tril", np.tril)
triu = _triangle("triu", np.triu)


def triangle_batch_rule(op, level, args, kwargs):
    """``tril``/``triu`` (and their in-place variants): with the batch dim first, the
    physical last two dims are the sample's, so one physical call."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if not same_level(self, level):
        raise inplace_error(op.name)
    if self.dim() < 2:
        raise RuntimeError(f"{op.name.rstrip('_')}: input tensor must have at least 2 dimensions")
    if bound.pop("out", None) is not None:
        raise no_fallback(op)
    result = call(op, (to_front(self._value, self._bdim),), bound)
    return self if op.kind == "inplace" else wrap(result, 0, level)


tril.def_batch_rule(triangle_batch_rule)
triu.def_batch_rule(triangle_batch_rule)


tril_ = inplace_variant(tril)
triu_ = inplace_variant(triu)


def _diagonal_positions(shape, offset, device):
    """Row and column index tensors of diagonal ``offset`` of a matrix of ``shape``."""
    rows, cols = shape
    length = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    steps = arange(length, device=device)
    return steps + max(-offset, 0), steps + max(offset, 0)


def _trace_samples(make):
    return [Sample(make(3, 3)), Sample(make(2, 4)), Sample(make(5, 1)), Sample(make(0, 2))]


@op(samples=_trace_samples)
def trace(self):
    if self.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.dim()}")
    if self._dtype is bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    dtype = self._dtype if self._dtype.kind >= 2 else int64     # (floating or complex)
    return fresh_tensor(np.trace(self._array(), dtype=dtype.np))


@trace.def_derivative("self")
def trace(grad, self_shape):
    rows, cols = _diagonal_positions(self_shape, 0, grad.device)
    return grad.new_zeros(self_shape).index_put((rows, cols), grad.expand(rows.shape[0]))


@trace.def_batch_rule
def trace(op, level, args, kwargs):
    self = args[0]
    if self.dim() != 2:
        raise RuntimeError("trace: expected a matrix, but got tensor with dim " f"{self.dim()}")
    value = to_front(self._value, self._bdim)
    return wrap(value.diagonal(0, 1, 2).sum(-1), 0, level)


def _diag_samples(make):
    return [Sample(make(3)), Sample(make(3), 1), Sample(make(2), -2), Sample(make(3, 4)),
            Sample(make(3, 4), 2), Sample(make(4, 3), -1)]


@op(out=True, samples=_diag_samples)
def diag(self, diagonal=0):
    if self.dim() not in (1, 2):
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {self.dim()}D")
    diagonal = int_arg(diagonal, "diagonal")
    if self.dim() == 2:
        return fresh_tensor(np.diagonal(self._array(), diagonal))
    n = self._sizes[0] + abs(diagonal)
    out = new_result((n, n), self._dtype, device=self.device)
    target = out._array()
    target[...] = 0
    if self._numel:
        steps = array_module(target).arange(self._sizes[0])
        target[steps + max(-diagonal, 0), steps + max(diagonal, 0)] = self._array()
    return out


@diag.def_derivative("self")
def diag(grad, self_shape, diagonal):
    if len(self_shape) == 1:
        return grad.diagonal(diagonal)
    rows, cols = _diagonal_positions(self_shape, diagonal, grad.device)
    return grad.new_zeros(self_shape).index_put((rows, cols), grad)


@diag.def_batch_rule
def diag(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, offset = bound["self"], bound["diagonal"]
    value = to_front(self._value, self._bdim)
    if self.dim() == 1:
        return wrap(REGISTRY["diag_embed"](value, offset, -2, -1), 0, level)
    if self.dim() != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " f"{self.dim()}D")
    return wrap(value.diagonal(offset, 1, 2).clone(), 0, level)


def _diag_embed_samples(make):
    return [Sample(make(3)), Sample(make(2, 3), 1), Sample(make(2, 3), -1, 0, 2),
            Sample(make(2, 3), 0, -1, 1)]


@op(samples=_diag_embed_samples)
def diag_embed(self, offset=0, dim1=-2, dim2=-1):
    offset = int_arg(offset, "offset")
    ndim = self.dim() + 1
    d1, d2 = meta.wrap_dim(dim1, ndim), meta.wrap_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (self._sizes[-1] if self._sizes else 1) + abs(offset)
    rest = iter(self._sizes[:-1])
    shape = tuple(n if k in (d1, d2) else next(rest) for k in range(ndim))
    out = new_result(shape, self._dtype, device=self.device)
    if out._numel:
        out._array()[...] = 0
        diagonal.kernel(out, offset, d1, d2)._array()[...] = self._array()
    return out


@diag_embed.def_derivative("self")
def diag_embed(grad, offset, dim1, dim2):
    return grad.diagonal(offset, dim1, dim2)


@diag_embed.def_batch_rule
def diag_embed(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    n = self.dim() + 1
    d1, d2 = meta.wrap_dim(bound["dim1"], n), meta.wrap_dim(bound["dim2"], n)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {bound['dim1']}, "
                           f"{bound['dim2']}")
    value = to_front(self._value, self._bdim)
    return wrap(call(op, (value, bound["offset"], d1 + 1, d2 + 1), None), 0, level)


__all__ = ["cat", "stack", "hstack", "vstack", "split", "split_with_sizes", "chunk", "unbind",
           "roll", "flip", "repeat", "tile", "tril", "triu", "tril_", "triu_", "trace", "diag",
           "diag_embed", "fresh_tensor"]
__all__ += ["channel_shuffle", "native_channel_shuffle"]
__all__ += ["row_stack", "gradient"]
__all__ += [name + "_copy" for name in ("alias", "as_strided", "detach", "diagonal", "expand",
                                        "narrow", "permute", "select", "slice", "split",
                                        "split_with_sizes", "squeeze", "t", "transpose",
                                        "unbind", "unfold", "unsqueeze", "view")]


# --------------------------------------------------------------------------- channel shuffle

def _channel_shuffle_samples(make):
    return [Sample(make(2, 6, 3), 2), Sample(make(1, 4, 2, 3), 4), Sample(make(2, 6, 2), 1),
            Sample(make(2, 2, 3, 6).permute(0, 3, 1, 2), 3),           # channels-last
            Sample(make(1, 2, 2, 1, 4).permute(0, 4, 1, 2, 3), 2),     # channels-last 3d
            Sample(make(2, 4, 3, 2).transpose(2, 3), 2)]


def _channel_shuffled(input, groups):
    """PyTorch's ``channel_shuffle``: the channels (dim 1), seen as (groups, C / groups),
    transposed; checks as PyTorch's.  The result has the layout PyTorch's CPU kernel gives:
    channels-last when the input suggests it (shuffled in that order: one copy), else
    contiguous; an empty input comes back as a view."""
    shape = tuple(input.shape)
    if len(shape) <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {list(shape)}")
    groups = int_arg(groups, "groups")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value "
                           f"of groups:{groups}")
    channels = shape[1]
    if channels % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {channels} "
                           f"channels and {groups} groups.")
    if input.numel() == 0:
        return input.view(shape)
    # a copy always (PyTorch's result never shares the input's memory, even when the
    # shuffle leaves the channels in place), viewed as the result's shape
    if meta.suggest_memory_format(shape, tuple(input.stride())) is meta.contiguous_format:
        grouped = input.reshape(shape[0], groups, channels // groups, -1)
        return grouped.transpose(1, 2).clone(
            memory_format=meta.contiguous_format)._unsafe_view(shape)
    last = len(shape) - 1
    channels_last = input.permute((0,) + tuple(range(2, len(shape))) + (1,))
    grouped = channels_last.reshape(tuple(channels_last.shape[:-1]) +
                                    (groups, channels // groups))
    shuffled = grouped.transpose(-1, -2).clone(
        memory_format=meta.contiguous_format)._unsafe_view(tuple(channels_last.shape))
    return owned(shuffled.permute((0, last) + tuple(range(1, last))))


@op(kind="composite", method=False, inputs=("input",), samples=_channel_shuffle_samples)
def channel_shuffle(input, groups):
    return _channel_shuffled(input, groups)


@op(kind="composite", method=False, inputs=("input",), samples=_channel_shuffle_samples)
def native_channel_shuffle(input, groups):
    return _channel_shuffled(input, groups)
__all__ += ["concat", "concatenate", "fliplr", "flipud", "rot90", "atleast_1d",
            "atleast_2d", "atleast_3d", "tensor_split", "hsplit", "vsplit", "dsplit",
            "column_stack", "dstack", "take_along_dim", "diagflat", "argwhere", "diff",
            "broadcast_shapes", "tril_indices", "triu_indices", "block_diag",
            "cartesian_prod", "combinations", "vander", "unravel_index"]


# --------------------------------------------------------------------------- PyTorch's other
# shape names, written with the ops above (composites: their derivatives and batching
# rules are those of the ops they call)

def _concat_samples(make):
    return [Sample([make(2, 3), make(1, 3)]), Sample([make(2, 1), make(2, 2)], 1)]


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=_concat_samples)
def concat(tensors, dim=0):
    return cat(tensors, dim)


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=lambda make: [Sample([make(2, 3), make(1, 3)]),
                          Sample([make(2, 1), make(2, 2)], axis=-1)])
def concatenate(tensors, axis=0):
    return cat(tensors, axis)


def _flip_side_samples(make):
    return [Sample(make(3, 4)), Sample(make(2, 3, 2))]


@op(kind="composite", samples=_flip_side_samples)
def fliplr(self):
    if self.dim() < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return self.flip(1)


@op(kind="composite", samples=lambda make: [Sample(make(3)), Sample(make(3, 2))])
def flipud(self):
    if self.dim() < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return self.flip(0)


def _rot90_samples(make):
    return [Sample(make(3, 4)), Sample(make(3, 4), 2), Sample(make(3, 4), -1),
            Sample(make(2, 3, 4), 1, (2, 0)), Sample(make(3, 4), 4), Sample(make(4, 3).t(), 3)]


@op(kind="composite", samples=_rot90_samples)
def rot90(self, k=1, dims=(0, 1)):
    k, dims = int_arg(k, "k"), int_tuple(dims, "dims")
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    n = self.dim()
    if n < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {n}")
    if dims[0] == dims[1] or meta.wrap_dim(dims[0], n) == meta.wrap_dim(dims[1], n):
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} "
                           f"and dim1 = {dims[1]}")
    d0, d1 = meta.wrap_dim(dims[0], n), meta.wrap_dim(dims[1], n)
    k = k % 4
    if k == 1:
        return owned(self.flip(d1).transpose(d0, d1))
    if k == 2:
        return self.flip(d0, d1)
    if k == 3:
        return owned(self.flip(d0).transpose(d0, d1))
    return self.clone(memory_format=meta.contiguous_format)


def _at_least(name, ndim, reshape):
    def kernel(*tensors):
        single = len(tensors) == 1 and isinstance(tensors[0], TensorBase)
        tensors = _tensors(name, tensors)
        results = tuple(t if t.dim() >= ndim else reshape(t) for t in tensors)
        return results[0] if single else results
    kernel.__name__ = name
    kernel.__doc__ = f"Each tensor with at least {ndim} dims (a view where it had fewer)."
    return op(name, kind="composite", inputs=("tensors",), method=False, samples=lambda make: [
        Sample(make()), Sample(make(3)), Sample(make(2, 3)), Sample(make(), make(2, 2, 2)),
        Sample([make(2), make(1, 2)])])(kernel)


atleast_1d = _at_least("atleast_1d", 1, lambda t: t.reshape(1))
atleast_2d = _at_least("atleast_2d", 2, lambda t: t.reshape(1, 1) if t.dim() == 0 else
                       t.unsqueeze(0))
atleast_3d = _at_least("atleast_3d", 3, lambda t: (t.reshape(1, 1, 1) if t.dim() == 0 else
                                                   t.unsqueeze(0).unsqueeze(-1) if t.dim() == 1
                                                   else t.unsqueeze(-1)))


def _tensor_split_samples(make):
    return [Sample(make(7, 2), 3), Sample(make(2, 5), 2, 1), Sample(make(7), [1, 4]),
            Sample(make(7), (-2, 9, 3)), Sample(make(2), 4)]


@op(kind="composite", samples=_tensor_split_samples)
def tensor_split(self, indices_or_sections, dim=0):
    """Views of ``self`` along ``dim``: ``sections`` nearly equal pieces (the first ones
    one longer), or the pieces between ``indices``."""
    if self.dim() == 0:
        raise RuntimeError(f"tensor_split expected at least a 1-dimensional tensor, but got a "
                           f"tensor with {self.dim()} dims")
    d = meta.wrap_dim(dim, self.dim())
    split = indices_or_sections
    if isinstance(split, TensorBase):
        if split.device.type != "cpu":
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be on cpu, "
                               f"but it's on {split.device}")
        if split._dtype is not int64:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype "
                               f"of long, but got {_type_name(split._dtype)}")
        if split.dim() > 1:
            raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to be a "
                               f"zero-dimensional or one-dimensional tensor, but got a tensor "
                               f"with {split.dim()} dims")
        split = split.item() if split.dim() == 0 else split.tolist()
    size = self._sizes[d]
    if isinstance(split, (list, tuple)):
        bounds = [0] + list(int_tuple(split, "indices")) + [size]
        return tuple(self.slice(d, start, end) for start, end in zip(bounds, bounds[1:]))
    sections = int_arg(split, "sections")
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    short, longer = divmod(size, sections)
    lengths = [short + 1] * longer + [short] * (sections - longer)
    starts = np.cumsum([0] + lengths[:-1])
    return tuple(self.narrow(d, int(start), n) for start, n in zip(starts, lengths))


def _directional_split(name, dim, ndim):
    def kernel(self, indices_or_sections):
        if self.dim() < ndim:
            raise RuntimeError(f"torch.{name} requires a tensor with at least {ndim} dimension, "
                               f"but got a tensor with {self.dim()} dimensions!")
        d = 0 if name == "hsplit" and self.dim() == 1 else dim
        if isinstance(indices_or_sections, Integral):
            size = self._sizes[d]
            if indices_or_sections == 0 or size % indices_or_sections:
                raise RuntimeError(f"torch.{name} attempted to split along dimension {d}, but "
                                   f"the size of the dimension {size} is not divisible by the "
                                   f"split_size {indices_or_sections}!")
        return tensor_split(self, indices_or_sections, d)
    kernel.__name__ = name
    return op(name, kind="composite", samples=lambda make: [
        Sample(make(*(4,) * ndim), 2), Sample(make(*(2,) * (ndim - 1) + (5,)), [1, 3]),
        Sample(make(*(2,) * ndim + (4,)), 2)])(kernel)


hsplit = _directional_split("hsplit", 1, 1)
vsplit = _directional_split("vsplit", 0, 2)
dsplit = _directional_split("dsplit", 2, 3)


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=lambda make: [Sample([make(3), make(3, 2)]), Sample([make(), make(1, 2)]),
                          Sample([make(2, 2, 1), make(2, 1, 1)])])
def column_stack(tensors):
    tensors = [t.reshape(t.numel(), 1) if t.dim() <= 1 else t for t in tensors]
    if not tensors:
        raise RuntimeError("column_stack expects a non-empty TensorList")
    return hstack(tensors)


@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=lambda make: [Sample([make(3), make(3)]), Sample([make(2, 3), make(2, 3)]),
                          Sample([make(2, 2, 1), make(2, 2, 3), make(2, 2)])])
def dstack(tensors):
    if not tensors:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return cat(atleast_3d(list(tensors)), 2)


def _index_samples(make):
    return [Sample(make(3, 4), tensor_of(np.array([[0, 1], [2, 0], [3, 3]])), 1),
            Sample(make(3, 4), tensor_of(np.array([[2, 0, 1, 1]])), 0),
            Sample(make(2, 3), tensor_of(np.array([[1], [0]])), -1),
            Sample(make(3, 4), tensor_of(np.array([5, 0, 11])))]


@op(out=True, kind="composite", inputs=("self",), samples=_index_samples)
def take_along_dim(self, indices, dim=None):
    """``gather`` of ``self`` and ``indices`` broadcast against each other except along
    ``dim``; without ``dim``, of the flattened tensors."""
    if indices._dtype is not int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{_type_name(indices._dtype)}")
    if dim is None:
        return self.reshape(-1).gather(0, indices.reshape(-1))
    if self.dim() != indices.dim():
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {self.dim()} dimensions for input, "
                           f"and {indices.dim()} dimensions for indices")
    d = meta.wrap_dim(dim, self.dim())
    wanted = list(self._sizes)
    wanted[d] = indices._sizes[d]
    index_shape = meta.broadcast_shapes(tuple(wanted), indices._sizes)
    wanted = list(indices._sizes)
    wanted[d] = self._sizes[d]
    self_shape = meta.broadcast_shapes(tuple(wanted), self._sizes)
    return self.broadcast_to(self_shape).gather(d, indices.broadcast_to(index_shape))


@op(kind="composite", samples=lambda make: [Sample(make(3)), Sample(make(2, 2), 1),
                                            Sample(make(3), -2)])
def diagflat(self, offset=0):
    return self.reshape(-1).diag(offset)


@op(kind="composite", samples=lambda make: [Sample(make())])
def argwhere(self):
    return self.nonzero()


def _diff_samples(make):
    return [Sample(make(5)), Sample(make(3, 4), 2, 0), Sample(make(2, 3), 1, -1, make(2, 2)),
            Sample(make(3, 2), 1, 0, make(1, 2), make(2, 2)),
            Sample(make(3), 4), Sample(make(3), 0),
            Sample(tensor_of(np.array([True, False, False, True])), 2)]


@op(out=True, out_casting=True, kind="composite", inputs=("self", "prepend", "append"),
    samples=_diff_samples)
def diff(self, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (exclusive or for bool tensors), of
    ``self`` with ``prepend`` and ``append`` joined before and after."""
    if self.dim() == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = meta.wrap_dim(dim, self.dim())
    joined = [self]
    for extra, before in ((prepend, True), (append, False)):
        if extra is None:
            continue
        if extra.dim() != self.dim():
            raise RuntimeError("diff expects prepend or append to be the same dimension as "
                               "input")
        for k in range(self.dim()):
            if k != d and extra._sizes[k] != self._sizes[k]:
                raise RuntimeError(f"diff expects the shape of tensor to prepend or append to "
                                   f"match that of input except along the differencing "
                                   f"dimension; input.size({k}) = {self._sizes[k]}, but got "
                                   f"tensor.size({k}) = {extra._sizes[k]}")
        joined.insert(0 if before else len(joined), extra)
    result = cat(joined, d) if len(joined) > 1 else self
    steps = min(n, result._sizes[d])
    for _ in range(steps):
        length = result._sizes[d] - 1
        later, earlier = result.narrow(d, 1, length), result.narrow(d, 0, length)
        result = later.logical_xor(earlier) if result._dtype is bool_ else later - earlier
    return result if steps else result.clone()


def broadcast_shapes(*shapes):
    """The shape that tensors of ``shapes`` broadcast to (a ``Size``); an int is a 1-D
    shape."""
    from microtensor._C.tensor import Size
    result = []
    for i, shape in enumerate(shapes):
        shape = (shape,) if isinstance(shape, Integral) else tuple(shape)
        if any(s < 0 for s in shape):
            raise ValueError("Attempting to broadcast a dimension with negative length!")
        if len(shape) > len(result):
            result = [1] * (len(shape) - len(result)) + result
        for k in range(1, len(shape) + 1):
            size, have = shape[-k], result[-k]
            if size != have and size != 1:
                if have != 1:
                    raise RuntimeError(
                        f"Attempting to broadcast a dimension of length {size} at {-k}! "
                        f"Mismatching argument at index {i} had {tuple(shape)}; but expected "
                        f"shape should be broadcastable to {result}")
                result[-k] = size
    return Size(result)


def _triangle_indices(name, numpy_indices):
    def indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
        from microtensor._C.tensor import device as as_device
        dtype = int64 if dtype is None else dtype
        if dtype.is_floating_point or dtype is bool_:
            raise NotImplementedError(f"\"{name}\" not implemented for '{_type_name(dtype)}'")
        row, col, offset = int_arg(row, "row"), int_arg(col, "col"), int_arg(offset, "offset")
        for arg, value in (("row", row), ("col", col)):
            if value < 0:
                raise RuntimeError(f"{arg} must be non-negative, got{value}")
        rows, cols = numpy_indices(row, offset, col)
        result = tensor_of(np.stack([rows, cols]).astype(dtype.np).reshape(2, -1))
        return result if device is None else result.to(as_device(device))
    indices.__name__ = name
    indices.__doc__ = (f"The (row, column) coordinates of the {name[:4]} triangle (diagonal "
                       f"``offset``) of a ``row`` x ``col`` matrix, as a 2 x N tensor in row-"
                       f"major order.")
    return indices


tril_indices = _triangle_indices("tril_indices", np.tril_indices)
triu_indices = _triangle_indices("triu_indices", np.triu_indices)


def _block_diag_samples(make):
    return [Sample(make(2, 2), make(1, 3)), Sample(make(), make(2), make(2, 1)),
            Sample(make(0), make(2, 2)), Sample(make(2, 3))]


@op(kind="composite", inputs=("tensors",), method=False, samples=_block_diag_samples)
def block_diag(*tensors):
    """The matrices (0-d: 1x1, 1-d: a row) along the diagonal of a zero matrix."""
    matrices = []
    for i, t in enumerate(tensors):
        if t.dim() > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.dim()} dimensions")
        matrices.append(t.reshape(1, -1) if t.dim() < 2 else t)
    if not matrices:
        return tensor_of(np.zeros((1, 0), dtype=np.float32))
    width = sum(m._sizes[1] for m in matrices)
    rows, left = [], 0
    for m in matrices:
        height, cols = m._sizes
        rows.append(cat([m.new_zeros((height, left)), m,
                         m.new_zeros((height, width - left - cols))], 1))
        left += cols
    return cat(rows, 0)


def _vector_check(t):
    if t.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(t._sizes)}")


@op(kind="composite", inputs=("tensors",), method=False,
    samples=lambda make: [Sample(make(3)), Sample(make(2), make(3)),
                          Sample(make(2), make(1), make(2))])
def cartesian_prod(*tensors):
    """Every tuple of one element of each 1-D tensor, in lexicographic order, as rows."""
    for t in tensors:
        _vector_check(t)
    if len(tensors) == 1:
        return tensors[0]
    from microtensor._composite import meshgrid
    return stack([grid.reshape(-1) for grid in meshgrid(*tensors, indexing="ij")], 1)


def _combinations_samples(make):
    return [Sample(make(4)), Sample(make(4), 3), Sample(make(3), 2, True), Sample(make(3), 1),
            Sample(make(3), 0), Sample(make(2), 3)]


@op(kind="composite", method=False, samples=_combinations_samples)
def combinations(self, r=2, with_replacement=False):
    """The length-``r`` combinations of the elements of a 1-D tensor, as rows."""
    _vector_check(self)
    r = int_arg(r, "r")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return self.new_empty(0)
    n = self._sizes[0]
    # the positions of every r-tuple, kept when strictly (or weakly) increasing: lexicographic
    grid = np.indices((n,) * r).reshape(r, -1).T
    increasing = grid[:, 1:] >= grid[:, :-1] if with_replacement else grid[:, 1:] > grid[:, :-1]
    positions = tensor_of(np.ascontiguousarray(grid[increasing.all(1)], dtype=np.int64))
    return self[positions.to(self.device)]


def _vander_samples(make):
    return [Sample(make(3)), Sample(make(3), 4, True), Sample(make(2), 1), Sample(make(3), 0),
            Sample(tensor_of(np.array([1, -2, 3], dtype=np.int32)))]


@op(kind="composite", inputs=("x",), method=False, samples=_vander_samples)
def vander(x, N=None, increasing=False):
    """Columns ``x ** 0 .. x ** (N-1)`` (highest power first unless ``increasing``)."""
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x._sizes[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    x = x.to(promote_types(x.dtype, int64))     # PyTorch's: integers in int64
    columns = [x.new_ones((x._sizes[0], min(n, 1)))]
    if n > 1:
        columns.append(x.unsqueeze(1).expand(x._sizes[0], n - 1).cumprod(1))
    result = cat(columns, 1)
    return result if increasing else result.flip(1)


@op(kind="composite", inputs=(), method=False,
    samples=lambda make: [Sample(tensor_of(np.array([0, 5, 7, -1])), (2, 3)),
                          Sample(tensor_of(np.array(11)), (3, 4)),
                          Sample(tensor_of(np.array([[1, 2]], dtype=np.int32)), [4])])
def unravel_index(indices, shape):
    """Per dim of ``shape``, the coordinate of each flat index of ``indices`` (taken
    modulo the number of elements, as PyTorch's)."""
    if not isinstance(indices, TensorBase):
        raise TypeError(f"expected 'indices' to be a tensor, but got {type(indices).__name__}")
    if indices._dtype.is_floating_point or indices._dtype is bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices._dtype}")
    shape = (shape,) if isinstance(shape, Integral) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {shape}")
    coefficients = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    device = indices.device
    return (indices.unsqueeze(-1).floor_divide(tensor_of(coefficients.astype(np.int64))
                                               .to(device))
            % tensor_of(np.array(shape, dtype=np.int64)).to(device)).unbind(-1)


# --------------------------------------------------------------------------- unsafe splits
# PyTorch's ``unsafe_`` splits: the pieces of ``split`` as aliases that are not views, so
# autograd records one function and writing into a piece is allowed (the version counter
# is still the input's).

def _aliases(pieces):
    return tuple(p._make_alias_unchecked(p._sizes, p._strides, p._offset) for p in pieces)


@op(samples=lambda make: [Sample(make(5, 2), 2), Sample(make(4, 3), 2, 1)])
def unsafe_split(self, split_size, dim=0):
    if not isinstance(split_size, Integral):
        raise TypeError(f"unsafe_split(): argument 'split_size' (position 2) must be int, not "
                        f"{type(split_size).__name__}")
    return _aliases(split.kernel(self, split_size, dim))


@unsafe_split.def_derivative("self")
def unsafe_split(grad, self_shape, split_size, dim):
    return _joined_grads(grad, self_shape, dim, split_sizes(self_shape, split_size, dim))


@op(samples=_split_with_sizes_samples)
def unsafe_split_with_sizes(self, split_sizes, dim=0):
    return _aliases(split_with_sizes.kernel(self, split_sizes, dim))


unsafe_split_with_sizes.def_derivative("self")(split_with_sizes.derivative.formulas[0][0])
unsafe_split.def_batch_rule(split_batch_rule)
unsafe_split_with_sizes.def_batch_rule(split_batch_rule)


@op(kind="composite", samples=_chunk_samples)
def unsafe_chunk(self, chunks, dim=0):
    sizes = [piece.shape[dim] for piece in chunk(self.detach(), chunks, dim)]
    return unsafe_split_with_sizes(self, sizes, dim)


__all__ += ["unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk"]


# --------------------------------------------------------------------------- row_stack

@op(out=True, out_casting=True, kind="composite", inputs=("tensors",), method=False,
    samples=_vstack_samples)
def row_stack(tensors):
    """``vstack``'s other name."""
    return vstack(tensors)


# --------------------------------------------------------------------------- gradient

def _gradient_dims(self, dim):
    """The dims ``gradient`` differentiates along, wrapped, each once."""
    if dim is None:
        return list(range(self.dim()))
    dims = [meta.wrap_dim(d, self.dim()) for d in ((dim,) if isinstance(dim, Integral)
                                                   else dim)]
    for d in dims:
        if dims.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return dims


def _gradient_spacings(spacing, dims, dim_given, ndim):
    """One spacing per dim: a number or 0-d tensor (uniform), or a 1-D tensor of the
    coordinates of the samples along that dim."""
    if not isinstance(spacing, (tuple, list)):
        if isinstance(spacing, TensorBase) and spacing.dim() != 0:
            raise TypeError(f"gradient(): argument 'spacing' must be a number or a tuple of "
                            f"tensors, not a {spacing.dim()}-D Tensor")
        return [spacing] * len(dims)
    if len(spacing) != len(dims):
        if dim_given:
            raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar "
                               f"or it's spacing and dim arguments to have the same length, "
                               f"but got a spacing argument of length {len(spacing)} and a "
                               f"dim argument of length {len(dims)}.")
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar, or "
                           f"a list of length equal to 'self.dim() = {ndim}', since dim "
                           f"argument was not given, but got a list of length {len(spacing)}")
    if any(isinstance(s, TensorBase) for s in spacing):
        _tensors("gradient", spacing)
        for s in spacing:
            if s.dim() != 1:
                raise RuntimeError(f"torch.gradient expected each element of spacing to have "
                                   f"one dimension, but got an element with {s.dim()} "
                                   f"dimensions!")
    return list(spacing)


def _gradient_uniform(f, d, h, edge_order):
    """Central differences inside, one-sided (first or second order) at the two ends, for
    samples ``h`` apart."""
    def part(start, stop=None):
        return f.narrow(d, start % f.shape[d], 1 if stop is None else stop - start)
    n = f.shape[d]
    center = (f.narrow(d, 2, n - 2) - f.narrow(d, 0, n - 2)) / h
    if edge_order == 1:
        first, last = (part(1) - part(0)) / h, (part(-1) - part(-2)) / h
    else:
        first = (-1.5 * part(0) + 2 * part(1) - 0.5 * part(2)) / h
        last = (0.5 * part(-3) - 2 * part(-2) + 1.5 * part(-1)) / h
    return cat([first, center / 2, last], d)


def _gradient_coordinates(f, d, x, edge_order):
    """The second-order accurate differences of unevenly spaced samples at coordinates
    ``x`` (NumPy's and PyTorch's weights), first or second order at the two ends."""
    def part(start):
        return f.narrow(d, start % f.shape[d], 1)
    n = f.shape[d]
    shape = [1] * f.dim()
    shape[d] = -1
    dx = x.diff()
    dx1, dx2 = dx[:-1], dx[1:]
    a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
    b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
    c = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
    center = a * f.narrow(d, 0, n - 2) + b * f.narrow(d, 1, n - 2) + c * f.narrow(d, 2, n - 2)
    if edge_order == 1:
        first, last = (part(1) - part(0)) / dx[0], (part(-1) - part(-2)) / dx[-1]
    else:
        h0, h1, hl, hm = dx[0], dx[1], dx[-1], dx[-2]
        first = (-(2.0 * h0 + h1) / (h0 * (h0 + h1)) * part(0) + (h0 + h1) / (h0 * h1) * part(1)
                 - h0 / (h1 * (h0 + h1)) * part(2))
        last = (hl / (hm * (hl + hm)) * part(-3) - (hl + hm) / (hl * hm) * part(-2)
                + (2 * hl + hm) / (hl * (hl + hm)) * part(-1))
    return cat([first, center, last], d)


def _gradient_samples(make):
    def coordinates(*values):
        return tensor_of(np.array(values, dtype=np.float64))
    return [Sample(make(3, 4)), Sample(make(5), spacing=2.0),
            Sample(make(3, 4), spacing=[0.5, 2.0], edge_order=2),
            Sample(make(4, 3), spacing=(coordinates(0.0, 0.5, 2.0, 2.5),), dim=0),
            Sample(make(3, 4), spacing=(coordinates(0.0, 1.0, 3.0),
                                        coordinates(-1.0, 0.0, 0.5, 2.0)), edge_order=2),
            Sample(make(3, 2, 4), dim=(-1, 0), edge_order=2)]


@op(kind="composite", inputs=("self", "spacing"), method=False, samples=_gradient_samples)
def gradient(self, *, spacing=1, dim=None, edge_order=1):
    """The derivative of the function sampled in ``self`` along each of ``dim`` (every dim
    by default): a tuple of tensors shaped like ``self``.  Inside, central differences;
    at the ends, one-sided ones of ``edge_order`` 1 or 2.  ``spacing``: the samples' step
    (one number for every dim, or one per dim), or per dim the 1-D tensor of the
    samples' coordinates."""
    dims = _gradient_dims(self, dim)
    spacings = _gradient_spacings(spacing, dims, dim is not None, self.dim())
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    for d in dims:
        if self.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least "
                               "edge_order+1")
    return tuple(
        _gradient_coordinates(self, d, h, edge_order)
        if isinstance(h, TensorBase) and h.dim() == 1 else
        _gradient_uniform(self, d, h, edge_order)
        for d, h in zip(dims, spacings))



# --------------------------------------------------------------------------- *_copy
# PyTorch's ``<view>_copy`` functions: the view's values in a fresh contiguous tensor
# (``transpose_copy(x, 0, 1)`` is ``x.transpose(0, 1).clone(contiguous_format)``), composites
# of the view and ``clone``, so autograd and vmap follow those two.

def _fresh(result):
    if isinstance(result, (tuple, list)):
        return tuple(r.clone(memory_format=meta.contiguous_format) for r in result)
    return result.clone(memory_format=meta.contiguous_format)


def _declare_copy(base, samples=None, method=False):
    """``<base>_copy``, with the base view's signature and samples (or ``samples``)."""
    def kernel(self, *args, **kwargs):
        return _fresh(REGISTRY[base](self, *args, **kwargs))
    kernel.__signature__ = inspect.signature(REGISTRY[base].kernel)
    kernel.__name__ = kernel.__qualname__ = base + "_copy"
    kernel.__doc__ = f"``{base}``'s values in a fresh contiguous tensor."
    return op(base + "_copy", kind="composite", method=method, out=True,
              samples=samples or REGISTRY[base].samples,
              differentiable=base != "detach")(kernel)


_declare_copy("narrow", method=True)      # also a Tensor method, as PyTorch's
for _base in ("alias", "as_strided", "detach", "diagonal", "select", "slice",
              "split", "split_with_sizes", "squeeze", "transpose", "unbind", "unfold",
              "unsqueeze"):
    _declare_copy(_base)
_declare_copy("t", lambda make: [Sample(make(2, 3)), Sample(make(3)), Sample(make())])


# aten's forms take the sizes (dims) as one list, not spread
@op(out=True, kind="composite", method=False,
    samples=lambda make: [Sample(make(3, 1), (2, 3, 4)), Sample(make(2), [3, -1])])
def expand_copy(self, size, *, implicit=False):
    return _fresh(self.expand(size))


@op(out=True, kind="composite", method=False,
    samples=lambda make: [Sample(make(2, 3, 4), (2, 0, 1)), Sample(make(4, 3).t(), [1, 0])])
def permute_copy(self, dims):
    return _fresh(self.permute(dims))


@op(out=True, kind="composite", method=False,
    samples=lambda make: [Sample(make(2, 3, 4), (6, 4)), Sample(make(2, 6), [-1])])
def view_copy(self, size):
    return _fresh(self.view(size))
