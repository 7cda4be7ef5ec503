"""View ops: results that share their input's storage (no copy), with ``_base`` set.

Each kernel only computes the new (sizes, strides, offset) — the stride math lives in
``microtensor._C.meta`` — and asks the core for the view.  A geometry derived from the
input's own (a slice, a selected index, a permutation, a stride 0 for a broadcast dim)
reaches only elements the input reaches, so it takes ``_make_view_unchecked``, which only
refuses values past int64 (each call says why its geometry is safe); ``as_strided``, whose
geometry the caller chooses, is checked against the storage's bounds (``_make_view``).  Derivatives map
the gradient back to the input's shape with other view ops, or by writing it into a
``new_zeros`` buffer through the same view, so that they run under vmap too.
"""
import builtins
import inspect
from numbers import Integral

from microtensor._C import meta
from microtensor.ops.arguments import int_arg, ints_arg, size_arg
from microtensor.ops.factory import arange
from microtensor.ops.loops import may_overlap
from microtensor.ops.registry import REGISTRY, Op, Sample, op
from microtensor.vmap.helpers import actual_dim, aligned, call, to_front, wrap


# --------------------------------------------------------------------------- reshaping

@op(kind="view",
    samples=lambda make: [
        Sample(make(2, 6), 3, 4), Sample(make(2, 6), (12,)), Sample(make(2, 6), -1, 2),
        Sample(make(4, 3).t(), 3, 2, 2), Sample(make(()), 1)])
def view(self, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list)) and \
            not hasattr(shape[0], "__index__"):
        raise TypeError(f"view(): argument 'size' must be tuple of ints, not "
                        f"{type(shape[0]).__name__} (view(dtype) is not supported; use .to)")
    sizes = tuple(meta.infer_size(size_arg(shape), self._numel))
    strides = meta.view_strides(self._sizes, self._strides, sizes)
    if strides is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    # safe: view_strides only regroups runs of dims that share one stride pattern, and
    # infer_size checked that the element count is unchanged
    return self._make_view_unchecked(sizes, tuple(strides), self._offset)


@view.def_derivative("self")
def view(grad, self_shape):
    return grad.reshape(self_shape)


@op(kind="composite")
def reshape(self, *shape):
    """A view when the strides allow one (PyTorch's rule), else a contiguous copy."""
    sizes = tuple(meta.infer_size(size_arg(shape, "shape"), self._numel))
    if meta.view_strides(self._sizes, self._strides, sizes) is not None:
        return self.view(sizes)
    return self.clone(memory_format=meta.contiguous_format)._unsafe_view(sizes)


@op(samples=lambda make: [Sample(make(2, 6), 3, 4), Sample(make(2, 6), (12,))])
def _unsafe_view(self, *shape):
    """``view`` of a tensor nobody else sees (reshape's private copy): the result is not a
    view, as in PyTorch, so ``reshape`` gives ``_base`` None whenever it copies."""
    sizes = tuple(meta.infer_size(size_arg(shape), self._numel))
    strides = meta.view_strides(self._sizes, self._strides, sizes)
    # safe: as for view (reshape calls this only on a contiguous copy, which always views)
    return self._make_alias_unchecked(sizes, tuple(strides), self._offset)


@_unsafe_view.def_derivative("self")
def _unsafe_view(grad, self_shape):
    return grad.reshape(self_shape)


def view_batch_rule(op, level, args, kwargs):
    """``view``/``_unsafe_view``: the sizes are checked against the *sample's* strides (a
    per-sample view must exist), then batch dim first and one physical view."""
    self, shape = args[0], args[1:]
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        raise TypeError("view(dtype) is not supported; use .to(dtype)")
    sizes = tuple(meta.infer_size(size_arg(shape), self._numel))
    if meta.view_strides(self._sizes, self._strides, sizes) is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    value = to_front(self._value, self._bdim)
    return wrap(call(op, (value, (value._sizes[0],) + sizes), None), 0, level)


view.def_batch_rule(view_batch_rule)
_unsafe_view.def_batch_rule(view_batch_rule)


@op(kind="composite")
def view_as(self, other):
    return self.view(other.shape)


@op(kind="composite")
def reshape_as(self, other):
    return self.reshape(other.shape)


@op(kind="composite")
def flatten(self, start_dim=0, end_dim=-1):
    if self.dim() == 0:
        return self.reshape(1)
    start = meta.wrap_dim(int_arg(start_dim, "start_dim"), self.dim())
    end = meta.wrap_dim(int_arg(end_dim, "end_dim"), self.dim())
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return self
    middle = 1
    for s in self._sizes[start:end + 1]:
        middle *= s
    return self.reshape(self._sizes[:start] + (middle,) + self._sizes[end + 1:])


@op(kind="composite")
def unflatten(self, dim, sizes):
    d = meta.wrap_dim(int_arg(dim, "dim"), self.dim())
    requested = size_arg((sizes,), "sizes")
    if not requested:
        raise RuntimeError("unflatten: sizes must be non-empty")
    try:
        sizes = tuple(meta.infer_size(requested, self._sizes[d]))
    except RuntimeError as error:
        if "inferred" in str(error) or -1 in requested:
            raise
        raise RuntimeError(f"unflatten: Provided sizes {list(requested)} don't multiply up to "
                           f"the size of dim {dim} ({self._sizes[d]}) in the input tensor") \
            from None
    return self.view(self._sizes[:d] + sizes + self._sizes[d + 1:])


# --------------------------------------------------------------------------- permuting

@op(kind="view",
    samples=lambda make: [
        Sample(make(2, 3, 4), 0, 2), Sample(make(3, 4), -1, 0), Sample(make(3), 0, 0)])
def transpose(self, dim0, dim1):
    n = self.dim()
    a, b = meta.wrap_dim(int_arg(dim0, "dim0"), n), meta.wrap_dim(int_arg(dim1, "dim1"), n)
    if n == 0:
        return self._make_view_unchecked((), (), self._offset)
    sizes, strides = list(self._sizes), list(self._strides)
    sizes[a], sizes[b] = sizes[b], sizes[a]
    strides[a], strides[b] = strides[b], strides[a]
    # safe: the same (size, stride) pairs in another order reach the same elements
    return self._make_view_unchecked(tuple(sizes), tuple(strides), self._offset)


@transpose.def_derivative("self")
def transpose(grad, dim0, dim1):
    return grad.transpose(dim0, dim1)


def _logical_dim(dim, self):
    return meta.wrap_dim(dim, len(self._sizes))


@transpose.def_batch_rule
def transpose(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, dim0, dim1 = bound["self"], bound["dim0"], bound["dim1"]
    if not self._sizes:
        meta.wrap_dim(dim0, 0), meta.wrap_dim(dim1, 0)
        return self
    b = self._bdim
    a0 = actual_dim(_logical_dim(dim0, self), b)
    a1 = actual_dim(_logical_dim(dim1, self), b)
    return wrap(call(op, (self._value, a0, a1), None), b, level)


@op(kind="composite")
def swapaxes(self, axis0, axis1):
    return self.transpose(axis0, axis1)


@op(kind="composite")
def t(self):
    if self.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.dim()}D")
    return self.transpose(0, 1) if self.dim() == 2 else self.alias()



def permutation(dims, n):
    """``dims`` of ``permute`` checked against ``n`` dimensions, wrapped to 0..n-1."""
    if len(dims) != n:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {n} is not equal to len(dims) = {len(dims)}")
    wrapped = [meta.wrap_dim(d, n) for d in dims]
    if len(set(wrapped)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return wrapped


@op(kind="view",
    samples=lambda make: [
        Sample(make(2, 3, 4), (2, 0, 1)), Sample(make(2, 3, 4), 1, 2, 0), Sample(make(()), ())])
def permute(self, *dims):
    wrapped = permutation(size_arg(dims, "dims"), self.dim())
    # safe: permutation() checked this is a reordering of all dims (as for transpose)
    return self._make_view_unchecked(tuple(self._sizes[d] for d in wrapped),
                                     tuple(self._strides[d] for d in wrapped), self._offset)


@permute.def_derivative("self")
def permute(grad, dims):
    dims = size_arg(dims)
    n = len(dims)
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[meta.wrap_dim(d, n)] = i
    return grad.permute(inverse)


@permute.def_batch_rule
def permute(op, level, args, kwargs):
    self = args[0]
    wrapped = permutation(size_arg(args[1:]), self.dim())
    b = self._bdim
    order = [actual_dim(d, b) for d in wrapped]
    order.insert(b, b)
    return wrap(call(op, (self._value, tuple(order)), None), b, level)


@op(kind="composite")
def movedim(self, source, destination):
    n = self.dim()
    src = list(ints_arg(source, "source"))
    dst = list(ints_arg(destination, "destination"))
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) "
                           f"should contain the same number of dims as destination ({dst} dims)")
    src = [meta.wrap_dim(d, n) for d in src]
    dst = [meta.wrap_dim(d, n) for d in dst]
    for name, dims in (("source", src), ("destination", dst)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({dims})")
    if n == 0:
        return self.permute(())
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(n) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return self.permute(order)


# --------------------------------------------------------------------------- size-1 dims

@op(kind="view",
    samples=lambda make: [Sample(make(3, 4), 1), Sample(make(3, 4), -1), Sample(make(()), 0)])
def unsqueeze(self, dim):
    d = meta.wrap_dim(int_arg(dim, "dim"), self.dim() + 1)
    new_stride = self._sizes[d] * self._strides[d] if d < self.dim() else 1
    # safe: a size-1 dim is never stepped, so its stride reaches nothing (and it fits in
    # int64: size * stride is at most twice the extent of dim d when its size exceeds 1)
    return self._make_view_unchecked(self._sizes[:d] + (1,) + self._sizes[d:],
                                     self._strides[:d] + (new_stride,) + self._strides[d:],
                                     self._offset)


@unsqueeze.def_derivative("self")
def unsqueeze(grad, dim):
    return grad.squeeze(dim)


@unsqueeze.def_batch_rule
def unsqueeze(op, level, args, kwargs):
    if not kwargs and len(args) == 2:   # ``x.unsqueeze(0)``: no binding
        self, dim = args
    else:
        bound = op.bind(args, kwargs)
        self, dim = bound["self"], bound["dim"]
    d = meta.wrap_dim(dim, self.dim() + 1)
    b = self._bdim
    p = d if d < b else d + 1
    # the method, not ``call``: a plain physical value takes the core's fast path
    return wrap(self._value.unsqueeze(p), b + 1 if p <= b else b, level)


@op(kind="view",
    samples=lambda make: [
        Sample(make(3, 1, 4)), Sample(make(3, 1, 4), 1), Sample(make(1, 3, 1), (0, 2)),
        Sample(make(3, 4), 0)])
def squeeze(self, dim=None):
    n = self.dim()
    if dim is None:
        dims = {i for i, s in enumerate(self._sizes) if s == 1}
    else:
        dims = {meta.wrap_dim(d, n) for d in ints_arg(dim, "dim")}
        dims = {d for d in dims if d < n and self._sizes[d] == 1}  # a 0-d tensor accepts 0, -1
    keep = [i for i in range(n) if i not in dims]
    # safe: only size-1 dims (never stepped) are dropped
    return self._make_view_unchecked(tuple(self._sizes[i] for i in keep),
                                     tuple(self._strides[i] for i in keep), self._offset)


@squeeze.def_derivative("self")
def squeeze(grad, self_shape):
    return grad.reshape(self_shape)


@squeeze.def_batch_rule
def squeeze(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, dim = bound["self"], bound.get("dim")
    n = self.dim()
    if dim is None:
        dims = [i for i, s in enumerate(self._sizes) if s == 1]
    else:
        dims = [meta.wrap_dim(d, n) for d in ((dim,) if isinstance(dim, Integral) else dim)]
        dims = [d for d in dims if self._sizes[d] == 1]
    b = self._bdim
    physical = tuple(actual_dim(d, b) for d in dims)
    new_bdim = b - sum(1 for p in physical if p < b)
    return wrap(call(op, (self._value, physical), None), new_bdim, level)


# --------------------------------------------------------------------------- broadcasting

@op(kind="view",
    samples=lambda make: [
        Sample(make(3, 1), 3, 4), Sample(make(3, 1), (2, 3, 4)), Sample(make(()), 4),
        Sample(make(3, 1), -1, 4)])
def expand(self, *sizes):
    sizes, strides = meta.expand_geometry(self._sizes, self._strides, size_arg(sizes))
    # safe: expand_geometry gives every stretched or new dim stride 0 and keeps the others,
    # so only this tensor's elements are reached; _new_tensor refuses an overflowing numel
    return self._make_view_unchecked(sizes, strides, self._offset)


@expand.def_derivative("self")
def expand(grad, self_shape):
    return grad.sum_to_size(self_shape)


@expand.def_batch_rule
def expand(op, level, args, kwargs):
    self = args[0]
    sizes = size_arg(args[1:] if not kwargs else (kwargs["sizes"],))
    final, _ = meta.expand_geometry(self._sizes, self._strides, sizes)
    value = aligned(self._value, self._bdim, self.dim(), len(sizes))
    return wrap(call(op, (value, (value._sizes[0],) + final), None), 0, level)


@op(kind="composite")
def expand_as(self, other):
    return self.expand(other.shape)


@op(kind="composite")
def broadcast_to(self, size):
    return self.expand(size)


# --------------------------------------------------------------------------- taking parts

def _zeros_with(grad, self_shape, write):
    """d(view)/d(input): a zero gradient with ``grad`` written through the same view."""
    out = grad.new_zeros(self_shape)
    write(out).copy_(grad)
    return out



def selected(self, dim, index):
    """``select``'s arguments checked against ``self``: the wrapped dim and index."""
    n = self.dim()
    if n == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = meta.wrap_dim(dim, n)
    size = self._sizes[d]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(self._sizes)} at dimension {dim}")
    return d, index + size if index < 0 else index


@op(kind="view",
    samples=lambda make: [
        Sample(make(3, 4), 0, 1), Sample(make(3, 4), 1, -1), Sample(make(2, 3, 4), 2, 3)])
def select(self, dim, index):
    dim, index = int_arg(dim, "dim"), int_arg(index, "index")
    d, index = selected(self, dim, index)
    # safe: selected() checked 0 <= index < size, so every element is one of this tensor's
    return self._make_view_unchecked(self._sizes[:d] + self._sizes[d + 1:],
                                     self._strides[:d] + self._strides[d + 1:],
                                     self._offset + index * self._strides[d])


@select.def_derivative("self")
def select(grad, self_shape, dim, index):
    return _zeros_with(grad, self_shape, lambda t: t.select(dim, index))


@select.def_batch_rule
def select(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    d, index = selected(self, bound["dim"], bound["index"])
    b = self._bdim
    p = actual_dim(d, b)
    return wrap(call(op, (self._value, p, index), None), b if p > b else b - 1, level)


@op(kind="view",
    samples=lambda make: [
        Sample(make(5, 4), 0, 1, 3), Sample(make(5, 4), -1, 2, 2), Sample(make(5, 4), 0, -2, 2)])
def narrow(self, dim, start, length):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = meta.wrap_dim(int_arg(dim, "dim"), self.dim())
    size = self._sizes[d]
    start, length = int_arg(start, "start"), int_arg(length, "length")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], "
                         f"but got {start})")
    start = start + size if start < 0 else start
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    # safe: start + length <= size was just checked
    return self._make_view_unchecked(self._sizes[:d] + (length,) + self._sizes[d + 1:],
                                     self._strides, self._offset + start * self._strides[d])


@narrow.def_derivative("self")
def narrow(grad, self_shape, dim, start, length):
    return _zeros_with(grad, self_shape, lambda t: t.narrow(dim, start, length))


@op(kind="view",
    samples=lambda make: [
        Sample(make(6, 4), 0, 1, 5, 2), Sample(make(6, 4), 1, None, 3),
        Sample(make(6, 4), 0, -4, None, 3)])
def slice(self, dim=0, start=None, end=None, step=1):
    """``self[..., start:end:step]`` along ``dim`` (what basic indexing uses)."""
    d = meta.wrap_dim(dim, self.dim())
    if step <= 0:
        raise ValueError("step must be greater than zero")
    begin, stop, _ = builtins.slice(start, end).indices(self._sizes[d])
    length = max(0, (stop - begin + step - 1) // step)
    # safe: indices() clamps begin and stop into the dim, so the (length - 1) * step steps
    # stay inside it; a stride * step past int64 is refused by _make_view_unchecked
    return self._make_view_unchecked(
        self._sizes[:d] + (length,) + self._sizes[d + 1:],
        self._strides[:d] + (self._strides[d] * step,) + self._strides[d + 1:],
        self._offset + begin * self._strides[d])


@slice.def_derivative("self")
def slice(grad, self_shape, dim, start, end, step):
    return _zeros_with(grad, self_shape, lambda t: t.slice(dim, start, end, step))


def narrow_batch_rule(op, level, args, kwargs):
    """``narrow``/``slice``: the per-sample dim shifted past the batch dim."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if op.name == "narrow" and self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    bound["dim"] = actual_dim(_logical_dim(bound["dim"], self), self._bdim)
    return wrap(call(op, (self._value,), bound), self._bdim, level)


narrow.def_batch_rule(narrow_batch_rule)
slice.def_batch_rule(narrow_batch_rule)


@op(kind="view",
    samples=lambda make: [
        Sample(make(3, 4)), Sample(make(3, 4), 1), Sample(make(4, 3), -1),
        Sample(make(2, 3, 4), 0, 1, 2), Sample(make(3, 3), 5)])
def diagonal(self, offset=0, dim1=0, dim2=1):
    n = self.dim()
    offset = int_arg(offset, "offset")
    a, b = meta.wrap_dim(int_arg(dim1, "dim1"), n), meta.wrap_dim(int_arg(dim2, "dim2"), n)
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if offset >= 0:
        length = max(0, min(self._sizes[a], self._sizes[b] - offset))
        start = self._offset + offset * self._strides[b]
    else:
        length = max(0, min(self._sizes[a] + offset, self._sizes[b]))
        start = self._offset - offset * self._strides[a]
    if length == 0:
        start = self._offset
    keep = [i for i in range(n) if i not in (a, b)]
    # safe: length is clamped so that the diagonal's last element is inside both dims
    return self._make_view_unchecked(
        tuple(self._sizes[i] for i in keep) + (length,),
        tuple(self._strides[i] for i in keep) + (self._strides[a] + self._strides[b],), start)


@diagonal.def_derivative("self")
def diagonal(grad, self_shape, offset, dim1, dim2):
    return _zeros_with(grad, self_shape, lambda t: t.diagonal(offset, dim1, dim2))


@diagonal.def_batch_rule
def diagonal(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    n = self.dim()
    d1, d2 = meta.wrap_dim(bound["dim1"], n), meta.wrap_dim(bound["dim2"], n)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {bound['dim1']}, "
                           f"{bound['dim2']}")
    b = self._bdim
    p1, p2 = actual_dim(d1, b), actual_dim(d2, b)
    new_bdim = b - (p1 < b) - (p2 < b)
    return wrap(call(op, (self._value, bound["offset"], p1, p2), None), new_bdim, level)


@op(kind="view",
    samples=lambda make: [
        Sample(make(7), 0, 3, 2), Sample(make(3, 6), 1, 2, 2), Sample(make(3, 6), 1, 3, 1)])
def unfold(self, dimension, size, step):
    size, step = int_arg(size, "size"), int_arg(step, "step")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    d = meta.wrap_dim(int_arg(dimension, "dimension"), max(self.dim(), 1))
    dim_size = self._sizes[d] if self.dim() else 1
    if size > dim_size:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {dim_size} but size "
                           f"is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if self.dim() == 0:
        return self._make_view_unchecked((size,), (1,), self._offset)  # size <= 1: checked
    # safe: size <= dim_size was checked and the last window starts at
    # (count - 1) * step <= dim_size - size; a step * stride past int64 is refused by
    # _make_view_unchecked
    count = (dim_size - size) // step + 1
    sizes = self._sizes[:d] + (count,) + self._sizes[d + 1:] + (size,)
    strides = self._strides[:d] + (step * self._strides[d],) + self._strides[d + 1:] + \
        (self._strides[d],)
    return self._make_view_unchecked(sizes, strides, self._offset)


@unfold.def_derivative("self")
def unfold(grad, self_shape, self_strides, self_offset, dimension, size, step):
    d = meta.wrap_dim(dimension, max(len(self_shape), 1))
    out_strides = self_strides[:d] + (step * self_strides[d],) + self_strides[d + 1:] + \
        (self_strides[d],) if self_shape else (1,)
    return as_strided_backward(grad, self_shape, self_strides, self_offset, grad.shape,
                               out_strides, self_offset)


@unfold.def_batch_rule
def unfold(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, size, step = bound["self"], bound["size"], bound["step"]
    n = self.dim()
    d = meta.wrap_dim(bound["dimension"], max(n, 1))
    dim_size = self._sizes[d] if n else 1
    if size > dim_size:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {dim_size} but size "
                           f"is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    b = self._bdim
    if n == 0:
        value = to_front(self._value, b).unsqueeze(1)
        return wrap(call(op, (value, 1, size, step), None).squeeze(1), 0, level)
    return wrap(call(op, (self._value, actual_dim(d, b), size, step), None), b, level)


@op(kind="view",
    samples=lambda make: [
        Sample(make(3, 4), (2, 2), (1, 2)), Sample(make(12), (3, 3), (3, 1), 1),
        Sample(make(6), (3, 3), (1, 1))])
def as_strided(self, size, stride, storage_offset=None):
    sizes, strides = size_arg((size,), "size"), size_arg((stride,), "stride")
    if len(sizes) != len(strides):
        raise RuntimeError(f"mismatch in length of strides and shape: size {list(sizes)} and "
                           f"stride {list(strides)}")
    offset = self._offset if storage_offset is None else int_arg(storage_offset,
                                                                  "storage_offset")
    return self._make_view(sizes, strides, offset)


@as_strided.def_derivative("self")
def as_strided(grad, self_shape, self_strides, self_offset, size, stride, storage_offset):
    offset = self_offset if storage_offset is None else storage_offset
    return as_strided_backward(grad, self_shape, self_strides, self_offset, size, stride,
                               offset)


@as_strided.def_batch_rule
def as_strided(op, level, args, kwargs):
    """Each sample gets ``size``/``stride``; ``storage_offset`` is read inside each
    sample's own memory.

    Why: a function written for one sample computes ``size``, ``stride`` and
    ``storage_offset`` from that sample's metadata (``CopySlices`` carves a view's region
    out of its base's gradient that way).  Per sample, the tensor's offset is ``base``
    (its physical offset), so sample ``i``'s request is its own memory shifted by
    ``storage_offset - base``: physically, the batch dim keeps the input's batch stride
    (sample ``i`` starts ``i * batch_stride`` further) and every sample shares the
    offset, which is the request for sample 0.  The region must lie inside what one
    sample's own geometry reaches (``_check_inside_sample``): beyond it, it would read
    another sample's memory, and vmap refuses, as PyTorch does.
    """
    bound = op.bind(args, kwargs)
    self = bound["self"]
    sizes = tuple(int(s) for s in bound["size"])
    strides = tuple(int(s) for s in bound["stride"])
    if len(sizes) != len(strides):
        raise RuntimeError(f"Tensor.as_strided(size, stride, ...): size and stride must have "
                           f"the same length! Got size {list(sizes)} and stride "
                           f"{list(strides)}")
    value = self._value
    base = value._offset
    offset = base if bound["storage_offset"] is None else int(bound["storage_offset"])
    _check_inside_sample(self, sizes, strides, offset, base)
    physical = call(op, (value, (value._sizes[self._bdim],) + sizes,
                         (value._strides[self._bdim],) + strides, offset), None)
    return wrap(physical, 0, level)


def _check_inside_sample(self, sizes, strides, offset, base):
    needed = meta.storage_size_for(sizes, strides)
    if not needed:
        return
    request = f"result = tensor.as_strided({list(sizes)}, {list(strides)}, {offset}) "
    available = meta.storage_size_for(self._sizes, self._strides)
    if not available:
        raise RuntimeError(
            request + "can access memory outside of `tensor`. `tensor` has no storage but the "
            "passed-in (size, stride, storage_offset) imply a result with some storage. This "
            "is not supported inside of vmap, please try to rewrite the `as_strided` call as a "
            "sequence of view operations")
    if offset < base or offset + needed > base + available:
        raise RuntimeError(
            request + f"can access memory outside of `tensor`. `result` can access some memory "
            f"in range [{offset}, {offset + needed}], but `tensor` can only access some memory "
            f"in range [{base}, {base + available}]. This is not supported inside of vmap, "
            "please try to rewrite the `as_strided` call as a sequence of view operations")


def as_strided_backward(grad, in_sizes, in_strides, in_offset, sizes, strides, offset):
    """Gradient of ``as_strided``: scatter ``grad`` into a buffer shaped like the input's
    memory, adding where the output overlaps itself, then read the input's geometry back.

    The buffer is made with ``grad.new_zeros`` so that under vmap it is batched.
    """
    shared = min(in_offset, offset)
    in_off, out_off = in_offset - shared, offset - shared
    extent = max(meta.storage_size_for(in_sizes, in_strides) + in_off,
                 meta.storage_size_for(sizes, strides) + out_off)
    buffer = grad.new_zeros(extent)
    if meta.is_non_overlapping_and_dense(sizes, strides) or not may_overlap(sizes, strides):
        buffer.as_strided(sizes, strides, out_off).copy_(grad)
    else:
        positions = arange(extent, device=grad.device).as_strided(sizes, strides, out_off)
        buffer = buffer.index_add(0, positions.reshape(-1), grad.reshape(-1))
    result = buffer.as_strided(in_sizes, in_strides, in_off)
    if may_overlap(in_sizes, in_strides):
        positions = arange(extent, device=grad.device).as_strided(in_sizes, in_strides, in_off)
        counts = grad.new_zeros(extent).index_add(
            0, positions.reshape(-1), grad.new_ones(positions.numel()))
        result = result / counts.as_strided(in_sizes, in_strides, in_off)
    return result


# --------------------------------------------------------------------------- aliases

@op(kind="view",
    samples=lambda make: [Sample(make(3, 4)), Sample(make(()))])
def alias(self):
    return self._make_view_unchecked(self._sizes, self._strides, self._offset)  # same geometry


@alias.def_derivative("self")
def alias(grad):
    return grad


@op(kind="view", differentiable=False,
    samples=lambda make: [Sample(make(3, 4)), Sample(make(4, 3).t())])
def detach(self):
    """Shares storage and version counter but is cut from the graph; like PyTorch's, it is
    not a view (``_base`` is None)."""
    return self._make_alias_unchecked(self._sizes, self._strides, self._offset)  # same geometry


def alias_batch_rule(op, level, args, kwargs):
    """``alias``/``detach``: the same op on the physical tensor, batch dim kept."""
    self = args[0]
    return wrap(call(op, (self._value,), None), self._bdim, level)


alias.def_batch_rule(alias_batch_rule)
detach.def_batch_rule(alias_batch_rule)

# --------------------------------------------------------------------------- PyTorch's other
# names of the views above

@op(kind="composite", samples=lambda make: [Sample(make(2, 3, 4), 0, 2),
                                            Sample(make(2, 3, 4), (0, 1), (-1, 0))])
def moveaxis(self, source, destination):
    return movedim(self, source, destination)


@op(kind="composite", samples=lambda make: [Sample(make(2, 3, 4), 0, 2)])
def swapdims(self, dim0, dim1):
    return self.transpose(dim0, dim1)


@op(kind="composite", samples=lambda make: [Sample(make(2, 3)), Sample(make(4, 3).t()),
                                            Sample(make())])
def ravel(self):
    """``self`` flattened: a view when it is contiguous, else a contiguous copy."""
    return self.contiguous().view(-1)


# --------------------------------------------------------------------------- in-place
# metadata changes: ``transpose_``, ``unsqueeze_``, ``squeeze_``, ``as_strided_``, ``t_``,
# ``swapdims_``, ``swapaxes_``
#
# The tensor itself takes the geometry its view would have (same storage, no copy; the
# version counter is bumped).  Autograd records the view's derivative as the tensor's new
# ``grad_fn``; a view stays a view of its base, which is not modified (no CopySlices:
# ``autograd.recording.rebase_history``), as in PyTorch.

def _metadata_variant(base):
    def kernel(self, *args, **kwargs):
        view = base.kernel(self, *args, **kwargs)
        self._set_geometry(view._sizes, view._strides, view._offset)
        return self
    kernel.__signature__ = inspect.signature(base.kernel)
    kernel.__doc__ = f"``{base.name}`` applied to the tensor's own sizes, strides and offset."
    declared = Op(base.name + "_", kernel, inputs=base.inputs, kind="inplace", inplace_of=base,
                  function=base.name == "as_strided", samples=base.samples,
                  batch_rule=_metadata_variant_batch_rule)
    REGISTRY[declared.name] = declared
    return declared


def _metadata_variant_batch_rule(op, level, args, kwargs):
    """The base view op under vmap gives each sample's new geometry over a view of the
    physical value: the wrapper takes both (its physical value becomes that view, so the
    tensor vmap was given keeps its own geometry)."""
    self = args[0]
    result = call(op.inplace_of, args, kwargs)
    self._value = result._value
    self._bdim = result._bdim
    self._set_geometry(result._sizes, result._strides, result._offset)
    self._bump_version()
    return self


transpose_ = _metadata_variant(transpose)
unsqueeze_ = _metadata_variant(unsqueeze)
squeeze_ = _metadata_variant(squeeze)
as_strided_ = _metadata_variant(as_strided)


@op(kind="composite", function=False)
def t_(self):
    if self.dim() > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is "
                           f"{self.dim()}D")
    return self.transpose_(0, 1) if self.dim() == 2 else self


@op(kind="composite", function=False)
def swapdims_(self, dim0, dim1):
    return self.transpose_(dim0, dim1)


@op(kind="composite", function=False)
def swapaxes_(self, axis0, axis1):
    return self.transpose_(axis0, axis1)


@op(kind="composite", samples=lambda make: [Sample(make(2, 3)), Sample(make(2, 3, 4))])
def adjoint(self):
    """The conjugate transpose of the last two dims: their transpose (a view) for real
    tensors; for complex ones a new tensor (``conj`` is not lazy here)."""
    if self.dim() < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of "
                           f"matrices. Got {self.dim()}-D tensor.")
    transposed = self.transpose(-2, -1)
    return transposed.conj() if self._dtype.is_complex else transposed
