"""Histograms: ``histogram`` (of all elements, 1-D) and ``histogramdd`` (of points in D
dims), each returning the counts and the bin edges, as PyTorch's.

One NumPy core serves both, and vmap: it takes R rows of N points each (R = 1, or the
batch under vmap), each row with its own edges per dim.  A point's bin along a dim is the
number of that row's edges at or below it, less one (the last bin also holds its right
edge), found for every row at once by one lexicographic sort of edges and values keyed by
row; the counts are then one ``bincount`` over (row, bin, bin, ...) flattened.  Edges of
``bins=int`` are PyTorch's: ``linspace`` over ``range`` or the row's min and max (widened
by 0.5 on each side when they are equal).

Histograms have no derivative (PyTorch's has none either): the ops are not differentiable.
A GPU tensor's histogram is computed on the CPU and the results moved back.
"""
from collections import namedtuple
from numbers import Integral

import numpy as np

from microtensor._C.tensor import TensorBase
from microtensor.ops.factory import _linspace_values, tensor
from microtensor.ops.loops import _type_name, from_numpy_result, owned
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import batch_size, call, front_or_expanded, wrap


class ReturnHistogram(namedtuple("histogram", ("hist", "bin_edges"))):
    def __repr__(self):
        return (f"microtensor.return_types.histogram(\nhist={self.hist!r},\n"
                f"bin_edges={self.bin_edges!r})")


class ReturnHistogramdd(namedtuple("histogramdd", ("hist", "bin_edges"))):
    def __repr__(self):
        return (f"microtensor.return_types.histogramdd(\nhist={self.hist!r},\n"
                f"bin_edges={self.bin_edges!r})")


def _number(value):
    """A bound as C++ prints a double (PyTorch's messages): 3, 0.5, inf, nan."""
    return f"{value:g}"


# --------------------------------------------------------------------------- the core

def _bin_index(values, edges):
    """Per row r of ``values`` (R, N) and ``edges`` (R, E): each value's bin (the number of
    the row's edges at or below it, less one; the last edge closes the last bin), or -1
    when it lies outside the edges (or is NaN)."""
    rows, count = values.shape
    bins = edges.shape[1] - 1
    keys = np.concatenate([edges.ravel(), values.ravel()])
    row = np.concatenate([np.repeat(np.arange(rows), edges.shape[1]),
                          np.repeat(np.arange(rows), count)])
    is_value = np.concatenate([np.zeros(edges.size, bool), np.ones(values.size, bool)])
    order = np.lexsort((is_value, keys, row))        # by row, then value, edges first
    at_or_below = np.cumsum(~is_value[order]) - row[order] * edges.shape[1]
    index = np.empty(values.size, np.int64)
    placed = is_value[order]
    index[order[placed] - edges.size] = at_or_below[placed] - 1
    index = index.reshape(rows, count)
    index[(index == bins) & (values == edges[:, -1:])] = bins - 1
    index[(index < 0) | (index >= bins)] = -1
    return index


def _counts(points, edges, weight, density):
    """``points`` (R, N, D), ``edges`` a list of D arrays (R, K_d + 1), ``weight`` (R, N)
    or None: the histograms (R, K_0, ..., K_{D-1}) in the points' dtype."""
    rows, count, dims = points.shape
    shape = tuple(e.shape[1] - 1 for e in edges)
    flat = np.zeros((rows, count), np.int64)
    inside = np.ones((rows, count), bool)
    for d, e in enumerate(edges):
        index = _bin_index(points[:, :, d], e)
        inside &= index >= 0
        flat = flat * shape[d] + index
    cells = int(np.prod(shape, dtype=np.int64))
    flat += np.arange(rows)[:, None] * cells
    weights = None if weight is None else weight[inside].astype(np.float64)
    hist = np.bincount(flat[inside], weights, minlength=rows * cells).reshape((rows,) + shape)
    if density:
        with np.errstate(divide="ignore", invalid="ignore"):
            total = hist.reshape(rows, -1).sum(1).reshape((rows,) + (1,) * dims)
            hist = hist / total
            for d, e in enumerate(edges):
                widths = np.diff(e.astype(np.float64), axis=1)
                hist = hist / widths.reshape((rows,) + (1,) * d + (-1,) + (1,) * (dims - d - 1))
    return hist.astype(points.dtype)


def _outer_edges(points, bins, ranges, dtype):
    """Per dim with a count in ``bins`` (None for the others), the edges (R, bins + 1) of
    that many equal bins over ``ranges[d]`` or each row's extent; PyTorch's refusals of a
    reversed or infinite range."""
    rows, count, dims = points.shape
    edges = []
    for d in range(dims):
        if not bins[d]:
            edges.append(None)
            continue
        if ranges is not None:
            low = np.full(rows, float(ranges[2 * d]))
            high = np.full(rows, float(ranges[2 * d + 1]))
        elif count:
            low = points[:, :, d].min(1).astype(np.float64)
            high = points[:, :, d].max(1).astype(np.float64)
        else:
            low, high = np.zeros(rows), np.ones(rows)
        for lo, hi in zip(low, high):
            if lo > hi:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min "
                                   f"{_number(lo)} max {_number(hi)} for dimension {d}")
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise RuntimeError(f"torch.histogramdd: dimension {d}'s range "
                                   f"[{_number(lo)}, {_number(hi)}] is not finite")
        equal = low == high
        low, high = np.where(equal, low - 0.5, low), np.where(equal, high + 0.5, high)
        edges.append(_linspace_values(low[:, None], high[:, None], bins[d] + 1, dtype)
                     .reshape(rows, bins[d] + 1))
    return edges


# --------------------------------------------------------------------------- arguments

def _check_bins(bins, dims, function):
    """``bins`` as a list per dim of counts (int) or edge tensors."""
    if isinstance(bins, (Integral, TensorBase)) and not isinstance(bins, bool):
        bins = [bins] * dims
    bins = list(bins)
    if len(bins) != dims:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost "
                           "dimension of the input.")
    for d, b in enumerate(bins):
        count = b.numel() - 1 if isinstance(b, TensorBase) else b
        if isinstance(b, TensorBase) and b.dim() != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, "
                               f"but got {b.dim()} dimensions in the bins tensor for "
                               f"dimension {d}")
        if count <= 0:
            raise RuntimeError(f"{function}(): bins must be > 0, but got {count} for "
                               f"dimension {d}")
    return bins


def _check_arguments(input, bins, ranges, weight, dims, function):
    """PyTorch's checks of a ``histogramdd`` call on one sample's ``input`` (.., D)."""
    if not input.is_floating_point():
        raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    bins = _check_bins(bins, dims, function)
    if input.dtype.itemsize == 2 and ranges is None and \
            not all(isinstance(b, TensorBase) for b in bins):
        # PyTorch has no float16/bfloat16 kernel that finds the data's range (given edges
        # or a given range work)
        raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    for d, b in enumerate(bins):
        if isinstance(b, TensorBase) and b.dtype is not input.dtype:
            raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have "
                               f"the same dtype, but got input with dtype "
                               f"{_type_name(input.dtype).lower()} and bins for dimension {d} "
                               f"with dtype {_type_name(b.dtype).lower()}")
    if ranges is not None and len(ranges) != 2 * dims:
        raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range "
                           f"should have {2 * dims} elements, but got {len(ranges)}")
    if weight is not None and weight.dtype is not input.dtype:
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided, input tensor "
                           f"and weight tensor should have the same dtype, but got "
                           f"input({_type_name(input.dtype).lower()}), and "
                           f"weight({_type_name(weight.dtype).lower()})")
    return bins


def _rows_samples(make):
    edges = tensor([[-1.0, 0.0, 0.5, 1.0], [-0.5, -0.25, 0.25, 0.5]], dtype=make().dtype)
    return [Sample(make(2, 5, 1), [3]),
            Sample(make(1, 6, 2), [2, edges[:1]], [-1.0, 1.0, -1.0, 1.0]),
            Sample(make(2, 4, 1), [edges], None, make(2, 4, low=0.0, high=1.0), True)]


@op(differentiable=False, function=False, method=False, samples=_rows_samples)
def _histogram_rows(points, bins, range=None, weight=None, density=False):
    """The histograms of R rows of points at once: ``points`` (R, N, D); ``bins`` per dim
    a count or the edges (R, E); ``weight`` (R, N) or None.  ``(hist (R, K_0, ...),
    edges (R, K_0 + 1), ...)``; the public ops (and vmap, whose batch becomes rows) call it."""
    arr = _host(points)
    rows, _, dims = arr.shape
    counts = [b if isinstance(b, Integral) else 0 for b in bins]
    edges = _outer_edges(arr, counts, range, points.dtype)
    for d, b in enumerate(bins):
        if isinstance(b, TensorBase):
            edges[d] = np.ascontiguousarray(np.broadcast_to(_host(b), (rows, b.shape[-1])))
    weight = None if weight is None else _host(weight).reshape(rows, -1)
    hist = _counts(arr, edges, weight, density)
    return tuple(from_numpy_result(a).to(points.device) for a in [hist] + edges)


def _host(t):
    """``t``'s values as a NumPy array (copied from a GPU: the core runs on the CPU)."""
    return np.asarray(t.cpu()._array())


@_histogram_rows.def_batch_rule
def _histogram_rows(op, level, args, kwargs):
    """Rows are independent: the batch joins them (B, R, ...) -> (B * R, ...)."""
    bound = op.bind(args, kwargs)
    size = batch_size(level)

    def fold(t):
        value = front_or_expanded(t, level, size)
        return value.reshape((-1,) + tuple(value.shape[2:]))
    bins = [b if isinstance(b, Integral) else fold(b) for b in bound["bins"]]
    weight = None if bound["weight"] is None else fold(bound["weight"])
    out = call(op, (fold(bound["points"]), bins),
               {"range": bound["range"], "weight": weight, "density": bound["density"]})
    return tuple(wrap(o.reshape((size, -1) + tuple(o.shape[1:])), 0, level) for o in out)


# --------------------------------------------------------------------------- the ops

def _histogram_samples(make):
    return [Sample(make(10), 4), Sample(make(3, 4), 3, range=(-0.5, 0.5)),
            Sample(make(8), tensor([-1.0, -0.2, 0.0, 0.7, 1.0], dtype=make().dtype)),
            Sample(make(6), 5, weight=make(6, low=0.0, high=1.0), density=True),
            Sample(make(5), 2, range=(0.25, 0.25))]


@op(out=True, kind="composite", differentiable=False, samples=_histogram_samples)
def histogram(self, bins=100, *, range=None, weight=None, density=False):
    """``(hist, bin_edges)`` of all of ``self``'s elements: ``bins`` equal bins over
    ``range`` (default: from the smallest element to the largest), or the edges given as a
    1-D tensor; counts weighted by ``weight`` (same number of elements) when given, and
    divided by the total and the bin widths for ``density``."""
    if isinstance(bins, TensorBase) and bins.dim() == 1 and bins.numel() < 2:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins.numel() - 1} "
                           f"for dimension 0")
    (bins,) = _check_arguments(self, bins, range, weight, 1, "torch.histogram")
    if weight is not None and weight.numel() != self.numel():
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided it should have "
                           f"the same shape as the input tensor excluding its innermost "
                           f"dimension, but got input with shape {[self.numel(), 1]} and "
                           f"weight with shape {list(weight.shape)}")
    if isinstance(bins, TensorBase):
        bins = bins.reshape(1, -1)
    hist, edges = _histogram_rows(self.reshape(1, -1, 1), [bins], range,
                                  None if weight is None else weight.reshape(1, -1), density)
    return owned(ReturnHistogram(hist[0], edges[0]))


@op(kind="composite", differentiable=False, method=False,
    samples=lambda make: [Sample(make(6, 2), [2, 3]), Sample(make(5, 1), 3),
                          Sample(make(2, 3, 2), 2, range=[-1.0, 1.0, -0.5, 0.5],
                                 weight=make(2, 3, low=0.0, high=1.0), density=True)])
def histogramdd(input, bins, *, range=None, weight=None, density=False):
    """``(hist, bin_edges)`` of the points ``input`` (..., D): per dim ``bins`` equal bins
    (``bins`` an int for every dim, or one per dim) over that dim's ``range`` pair
    (``range`` flat: [lo_0, hi_0, lo_1, hi_1, ...]) or the points' extent, or per dim the
    edges as 1-D tensors; ``weight`` (...) weighs each point, ``density`` divides by the
    total and the cells' volumes.  ``bin_edges`` is a tuple of D tensors."""
    if input.dim() < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 "
                           "dimensions")
    dims = input.shape[-1]
    bins = _check_arguments(input, bins, range, weight, dims, "torch.histogramdd")
    if weight is not None and tuple(weight.shape) != tuple(input.shape[:-1]):
        raise RuntimeError(f"torch.histogramdd: if weight tensor is provided it should have "
                           f"the same shape as the input tensor excluding its innermost "
                           f"dimension, but got input with shape {list(input.shape)} and "
                           f"weight with shape {list(weight.shape)}")
    if dims == 0:      # no dims to bin along: PyTorch's empty histogram
        return ReturnHistogramdd(input.new_zeros(()), ())
    bins = [b.reshape(1, -1) if isinstance(b, TensorBase) else b for b in bins]
    out = _histogram_rows(input.reshape(1, -1, dims), bins, range,
                          None if weight is None else weight.reshape(1, -1), density)
    return owned(ReturnHistogramdd(out[0][0], tuple(e[0] for e in out[1:])))


__all__ = ["histogram", "histogramdd", "ReturnHistogram", "ReturnHistogramdd"]
