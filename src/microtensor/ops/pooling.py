"""Pooling: ``max_pool{1,2,3}d_with_indices`` and ``adaptive_max_pool2d`` as single ops,
``avg_pool{1,2,3}d`` as single ops, ``adaptive_avg_pool{1,2}d`` as composites.

Max pooling reads a zero-copy window view of the (padded) input (strides over its
storage) and reduces it with a running maximum, one pass per kernel position (2-d pooling
of float32/float64 NumPy arrays: one C pass, ``nnkernels.max_pool2d``); its indices are
flat positions in each input plane, as PyTorch's, and its derivative scatters the
gradient there with ``scatter_add`` (differentiable: its own derivative is a
``gather``), or in C when no graph of the backward is recorded.  Average pooling is one
C pass in 1-d and 2-d (float32/float64, ``nnkernels.avg_pool2d``), else one sum of
strided views of the zero-padded input per kernel position, over a divisor; its
derivative is a transposed convolution with a kernel of ones, or one C pass in 2-d when
no graph of the backward is recorded.  Adaptive average pooling
is a product with averaging matrices per spatial dim.  The max poolings share one
batching rule, the average poolings another (the vmap batch folds into N).
"""
import math

import numpy as np

from microtensor._C import meta, nnkernels
from microtensor._C.meta import contiguous_format
from microtensor._C.dispatch import batching
from microtensor._C.tensor import empty_contiguous, from_array, int64, is_grad_enabled
from microtensor.ops.arguments import int_arg, int_tuple
from microtensor.ops.conv import convolution
from microtensor.ops.copy import linked
from microtensor.ops.factory import ones, tensor
from microtensor.ops.loops import (array_module, from_numpy_result, in_format,
                                  is_floating_array, memory_format_of, refuse_complex,
                                  refuse_unless_floating)
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import call, to_front, wrap

_ORDINAL = {1: "", 2: "two ", 3: "three "}


def expand_param(value, d, name, op_name):
    """An int or a 1- or ``d``-tuple as a ``d``-tuple (PyTorch's error otherwise)."""
    if isinstance(value, (int, np.integer)):
        return (int_arg(value, name),) * d
    value = tuple(value)
    int_tuple([v for v in value if v is not None], name)   # (adaptive sizes may hold None)
    if len(value) == 1:
        return value * d
    if len(value) != d:
        plural = "s" if d > 1 else ""
        raise RuntimeError(f"{op_name}: {name} must either be a single int, or a tuple of "
                           f"{_ORDINAL[d]}int{plural}")
    return value


def check_pool_input(shape, d, op_name):
    """The input must be (C, *spatial) or (N, C, *spatial), non-empty but for N."""
    if len(shape) not in (d + 1, d + 2) or 0 in shape[-(d + 1):]:
        if d == 1:
            raise RuntimeError(f"{op_name}: Expected 2D or 3D (batch mode) tensor with "
                               f"optional 0 dim batch size for input, but got:{list(shape)}")
        raise RuntimeError(f"non-empty {d + 1}D or {d + 2}D (batch mode) tensor expected "
                           f"for input")


def pool_geometry(shape, d, kernel, stride, padding, dilation, ceil_mode, op_name):
    """Checked ``(kernel, stride, padding, dilation, output sizes)`` of a ``d``-dim pool
    over an input of ``shape``, PyTorch's rules and errors."""
    kernel = expand_param(kernel, d, "kernel_size", op_name)
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else expand_param(stride, d, "stride", op_name)
    padding = expand_param(padding, d, "padding", op_name)
    dilation = expand_param(dilation, d, "dilation", op_name)
    if any(s == 0 for s in stride):
        raise RuntimeError("stride should not be zero")
    if any(k <= 0 for k in kernel):
        names = ("kH", "kW") if d == 2 else ("kT", "kH", "kW")[-d:] if d == 3 else ("kW",)
        raise RuntimeError("kernel size should be greater than zero, but got " +
                           " ".join(f"{n}: {k}" for n, k in zip(names, kernel)))
    if any(e <= 0 for e in dilation):
        names = ("dilationH", "dilationW") if d == 2 else ("dilationT", "dilationH",
                                                           "dilationW")[-d:]
        raise RuntimeError("dilation should be greater than zero, but got " +
                           " ".join(f"{n}: {e}" for n, e in zip(names, dilation)))
    check_pool_input(shape, d, op_name)
    for k, p, e in zip(kernel, padding, dilation):
        if p > (e * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but "
                               f"got pad={p}, kernel_size={k} and dilation={e}")
    sizes = shape[-d:]
    out = tuple(_output_size(n, k, s, p, e, ceil_mode)
                for n, k, s, p, e in zip(sizes, kernel, stride, padding, dilation))
    if any(o <= 0 for o in out):
        channels = shape[-d - 1]
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, (channels,) + sizes))}). "
                           f"Calculated output size: ({'x'.join(map(str, (channels,) + out))})."
                           f" Output size is too small")
    return kernel, stride, padding, dilation, out


def _output_size(n, k, s, p, e, ceil_mode):
    span = n + 2 * p - e * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= n + p:   # the last window must start in the input
        out -= 1
    return out


def _padded_rows(self, d, padding, extents, fill):
    """``self`` as (rows, *spatial) with ``padding`` before and enough after each spatial
    dim to hold ``extents`` elements, filled with ``fill`` (``self`` itself, reshaped,
    when no padding is needed)."""
    sizes = self._sizes[-d:]
    rows = self.reshape((-1,) + sizes)
    after = [max(0, x - n - p) for x, n, p in zip(extents, sizes, padding)]
    if not any(padding) and not any(after):
        return rows
    shape = rows._sizes[:1] + tuple(n + p + a for n, p, a in zip(sizes, padding, after))
    padded = empty_contiguous(shape, self._dtype, self.device)
    target = padded._array()
    target[...] = fill
    target[(slice(None),) + tuple(slice(p, p + n) for p, n in zip(padding, sizes))] = \
        rows._array()
    return padded


def _lowest(dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _running_max(windows, kernel, offsets):
    """Maximum over the trailing ``kernel`` dims of a window view, and ``offsets[j]`` for
    the kernel position ``j`` where it is: passes over strided views, one per kernel
    position (no copy of the windows), keeping the first maximum and taking any NaN, as
    PyTorch's kernel does."""
    positions = list(np.ndindex(*kernel))
    best = windows[(Ellipsis,) + positions[0]].copy()
    if not isinstance(best, np.ndarray):     # another array module (CuPy)
        return _running_max_select(windows, positions, offsets, best)
    for position in positions[1:]:
        np.maximum(best, windows[(Ellipsis,) + position], out=best)
    if is_floating_array(best) and np.isnan(best).any():
        return _running_max_select(windows, positions, offsets,
                                   windows[(Ellipsis,) + positions[0]].copy())
    # the first position holding the maximum, by arithmetic (masked selects are slow)
    arg = np.zeros(best.shape, dtype=np.int64)
    found = np.zeros(best.shape, dtype=bool)
    first = np.empty(best.shape, dtype=bool)
    for position, offset in zip(positions, offsets):
        np.equal(windows[(Ellipsis,) + position], best, out=first)
        np.greater(first, found, out=first)          # equal, and not found before
        if offset:
            arg += first * offset
        found |= first
    return best, arg


def _running_max_select(windows, positions, offsets, best):
    """``_running_max`` by selection: any array module, NaN taken."""
    xp = array_module(best)
    arg = xp.zeros(best.shape, dtype=np.int64) + offsets[0]
    for position, offset in zip(positions[1:], offsets[1:]):
        candidate = windows[(Ellipsis,) + position]
        take = (candidate > best) | (candidate != candidate)
        best = xp.where(take, candidate, best)
        arg = xp.where(take, offset, arg)
    return best, arg


def _argmax_last(windows, shape):
    """Maximum and position of each row of the windows' last axis (the first maximum, or
    the first NaN, which ``max`` propagates)."""
    flat = windows.reshape(shape + (math.prod(windows.shape[len(shape):]),))   # shape may hold 0
    return flat.max(-1), flat.argmax(-1)


def _unravel(flat, sizes):
    """Per-dim coordinates of flat positions in a block of ``sizes``."""
    coords = []
    for n in reversed(sizes):
        coords.append(flat % n)
        flat = flat // n
    return coords[::-1]


def _flat_indices(coords, sizes):
    """Flat positions in a plane of ``sizes`` of per-dim ``coords``."""
    index = coords[0]
    for c, n in zip(coords[1:], sizes[1:]):
        index = index * n + c
    return index


# --------------------------------------------------------------------------- max pooling

def pool_format(self, d):
    """PyTorch's layout of a ``d``-dim pool's results: a batched input's suggested memory
    format (exact strides, size-1 dims included), else contiguous."""
    return memory_format_of(self) if self.dim() == d + 2 else contiguous_format


def _max_pool(self, d, op_name, kernel_size, stride, padding, dilation, ceil_mode):
    refuse_complex(self, "max_pool3d" if d == 3 else "max_pool2d", bool_too=True)
    kernel, stride, padding, dilation, out = pool_geometry(
        self._sizes, d, kernel_size, stride, padding, dilation, ceil_mode, op_name)
    sizes, lead = self._sizes[-d:], self._sizes[:-d]
    fmt = pool_format(self, d)
    if d == 2 and nnkernels.supports(self._array()):
        # fresh arrays, stored channels last when the input is: wrapped as they lie
        values, indices = nnkernels.max_pool2d(self._array(), kernel, stride, padding, dilation,
                                               out)
        return (from_numpy_result(values, self._dtype, fmt),
                from_numpy_result(indices, int64, fmt))
    extents = [(o - 1) * s + e * (k - 1) + 1
               for o, s, e, k in zip(out, stride, dilation, kernel)]
    # narrow integers pool in int64, whose lowest value no element can tie with (a
    # padded uint8 zero must not beat a real one)
    wide = self if self._dtype.is_floating_point or self._dtype is int64 else self.to(int64)
    rows = _padded_rows(wide, d, padding, extents, _lowest(wide._dtype.np))
    # the windows as a zero-copy view: (rows, *out, *kernel)
    steps = rows._strides[1:]
    # safe: every window lies inside ``rows`` (extents fit its spatial sizes)
    windows = rows._make_alias_unchecked(
        rows._sizes[:1] + out + kernel,
        rows._strides[:1] + tuple(t * s for t, s in zip(steps, stride)) +
        tuple(t * e for t, e in zip(steps, dilation)), rows._offset)._array()
    # a window's flat index in the input plane: its start's plus the kernel position's
    offsets = [int(_flat_indices([e * q for e, q in zip(dilation, position)], sizes))
               for position in np.ndindex(*kernel)]
    values, picked = _running_max(windows, kernel, offsets)
    xp = array_module(picked)
    starts = [(xp.arange(o) * s - p).reshape((o,) + (1,) * (d - 1 - i))
              for i, (o, s, p) in enumerate(zip(out, stride, padding))]
    indices = picked + _flat_indices(starts, sizes)
    return (from_numpy_result(values.reshape(lead + out), self._dtype, fmt),
            from_numpy_result(indices.reshape(lead + out), int64, fmt))


def scatter_to_indices(grad, self_shape, indices, d):
    """``grad`` of pooled values put (summed) at their flat ``indices`` in each plane of
    the input's last ``d`` dims: the derivative of every max pooling."""
    lead = tuple(self_shape[:-d])
    plane = math.prod(self_shape[-d:])
    grads = grad.reshape(lead + (-1,))
    zeros = grads.new_zeros(lead + (plane,))
    return zeros.scatter_add(-1, indices.reshape(lead + (-1,)), grads).reshape(
        tuple(self_shape))


def _max_pool_samples(d):
    def samples(make):
        def shaped(*spatial):   # smaller volumes in 3-d: the sweeps stay fast
            return spatial[:d] if d < 3 else tuple(max(3, n - 2) for n in spatial)
        # distinct values (no ties): the gradient is defined everywhere
        def distinct(*shape):
            count = math.prod(shape)
            values = np.random.default_rng(count).permutation(count).astype(np.float64)
            return tensor(values.reshape(shape) / count)
        return [Sample(distinct(2, 3, *shaped(5, 4, 4)), 2),
                Sample(distinct(2, *shaped(6, 5, 4)), (3,) * d, 2, 1, 1, True),
                Sample(distinct(1, 2, *shaped(7, 6, 5)), (2,) * d, 1, 1, 2),
                Sample(distinct(2, 1, *shaped(5, 5, 3)), 3, (2,) * d, 1, 1, True)]
    return samples


def _declare_max_pool(d):
    name = f"max_pool{d}d_with_indices"

    def kernel(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return _max_pool(self, d, name.replace("_with_indices", ""), kernel_size, stride,
                         padding, dilation, ceil_mode)
    kernel.__name__ = name
    kernel.__doc__ = (f"The maximum of each window of a {d}-d pooling and its flat index in "
                      f"the input plane.")
    declared = op(name, method=False, samples=_max_pool_samples(d))(kernel)

    def derivative(grad, self, self_shape, result1):
        if batching() is None and not is_grad_enabled() and \
                nnkernels.supports(grad[0]._array()):
            # no graph of the backward pass is being built, nor a vmap: one C pass
            return from_array(nnkernels.max_pool_backward(
                grad[0]._array(), result1._array(), tuple(self_shape), d))
        return linked(scatter_to_indices(grad[0], self_shape, result1, d), self)
    declared.def_derivative("self")(derivative)
    return declared


max_pool1d_with_indices = _declare_max_pool(1)
max_pool2d_with_indices = _declare_max_pool(2)
max_pool3d_with_indices = _declare_max_pool(3)


# --------------------------------------------------------------------------- adaptive pooling

def adaptive_output_size(shape, d, output_size):
    """``output_size`` as a ``d``-tuple (None: the input's size)."""
    size = expand_param(output_size, d, "output_size", "adaptive pooling")
    out = tuple(shape[-d + i] if s is None else s for i, s in enumerate(size))
    meta.check_size_nonnegative(tuple(shape[:-d]) + out)    # before any window is built
    return out


def check_adaptive_input(shape, d, name):
    """PyTorch's checks: the rank, then no empty dim but the first (average pooling in 1-d
    and 2-d, which PyTorch computes in 2-d, lets the channels be empty too)."""
    if len(shape) not in (d + 1, d + 2):
        if d == 1:
            raise RuntimeError(f"Expected 2 to 3 dimensions, but got {len(shape)}-dimensional "
                               f"tensor for argument #1 'self' (while checking arguments for "
                               f"{name})")
        colon = ":" if name.startswith("adaptive_max") else ""   # PyTorch's two spellings
        raise RuntimeError(f"{name}(): Expected {d + 1}D or {d + 2}D tensor, but got{colon} "
                           f"{list(shape)}")
    if name == "adaptive_avg_pool1d":
        shape, name = shape[:-1] + (1,) + shape[-1:], "adaptive_avg_pool2d"
    first = len(shape) - 2 if name == "adaptive_avg_pool2d" else 1
    for i in range(first, len(shape)):
        if shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(shape)} with dimension "
                               f"{i} being empty")


def _adaptive_windows(n, o):
    """Window starts and ends of adaptive pooling of ``n`` elements into ``o``, and the
    windows as an index matrix padded to the longest by repeating each last element."""
    starts = (np.arange(o) * n) // o
    ends = -((-(np.arange(o) + 1) * n) // o)
    width = int((ends - starts).max()) if o else 0
    index = np.minimum(starts[:, None] + np.arange(width), ends[:, None] - 1)
    return starts, ends, index


def _adaptive_max_samples(make):
    def distinct(*shape):
        count = math.prod(shape)
        values = np.random.default_rng(count).permutation(count).astype(np.float64)
        return tensor(values.reshape(shape) / count)
    return [Sample(distinct(2, 3, 5, 7), (3, 2)), Sample(distinct(2, 4, 4), 2),
            Sample(distinct(1, 2, 5, 3), (None, 2))]


@op(method=False, samples=_adaptive_max_samples)
def adaptive_max_pool2d(self, output_size):
    """The maximum over each adaptive window (PyTorch's ``floor``/``ceil`` bounds) and its
    flat index in the input plane: one gather of the windows, one reduction."""
    check_adaptive_input(self._sizes, 2, "adaptive_max_pool2d")
    refuse_unless_floating(self._dtype, "adaptive_max_pool2d")
    h, w = self._sizes[-2:]
    oh, ow = adaptive_output_size(self._sizes, 2, output_size)
    arr = self._array().reshape((-1, h, w))
    xp = array_module(arr)
    lead = self._sizes[:-2]
    fmt = pool_format(self, 2)
    if not (oh and ow and arr.shape[0]):    # nothing to pool (NumPy's max would refuse)
        return (from_numpy_result(xp.empty(lead + (oh, ow), arr.dtype), self._dtype, fmt),
                from_numpy_result(xp.empty(lead + (oh, ow), np.int64), int64, fmt))
    rows = xp.asarray(_adaptive_windows(h, oh)[2])
    cols = xp.asarray(_adaptive_windows(w, ow)[2])
    windows = arr[:, rows[:, :, None, None], cols[None, None, :, :]]   # (R, oh, kh, ow, kw)
    values, picked = _argmax_last(windows.transpose(0, 1, 3, 2, 4), (arr.shape[0], oh, ow))
    jh, jw = _unravel(picked, (rows.shape[1], cols.shape[1]))
    indices = rows[xp.arange(oh)[:, None], jh] * w + cols[xp.arange(ow)[None, :], jw]
    return (from_numpy_result(values.reshape(lead + (oh, ow)), self._dtype, fmt),
            from_numpy_result(indices.astype(np.int64).reshape(lead + (oh, ow)), int64, fmt))


@adaptive_max_pool2d.def_derivative("self")
def adaptive_max_pool2d(grad, self, self_shape, result1):
    return linked(scatter_to_indices(grad[0], self_shape, result1, 2), self)


def max_pool_batch_rule(op, level, args, kwargs):
    """The vmap batch folded into N: (B, [N,] C, *spatial) as (B*N, C, *spatial), one
    call; values and indices (flat positions in each plane) reshaped back."""
    bound = op.bind(args, kwargs)
    x = bound.pop("self")
    d = MAX_POOL_DIMS[op.name]
    if op.name.startswith("adaptive"):
        check_adaptive_input(x._sizes, d, op.name)
    else:
        check_pool_input(x._sizes, d, op.name.replace("_with_indices", ""))
    value = to_front(x._value, x._bdim)
    sample = tuple(x.shape)
    folded = value.reshape((-1,) + sample[-(d + 1):])
    results = call(op, (folded,), bound)
    lead = (value.shape[0],) + sample[:-(d + 1)]
    return tuple(wrap(r.reshape(lead + tuple(r.shape[1:])), 0, level) for r in results)


max_pool1d_with_indices.def_batch_rule(max_pool_batch_rule)
max_pool2d_with_indices.def_batch_rule(max_pool_batch_rule)
max_pool3d_with_indices.def_batch_rule(max_pool_batch_rule)
adaptive_max_pool2d.def_batch_rule(max_pool_batch_rule)


def _averaging_matrix(n, o, like):
    """The (o, n) matrix whose rows average each adaptive window."""
    starts, ends, _ = _adaptive_windows(n, o)
    positions = np.arange(n)
    inside = (positions >= starts[:, None]) & (positions < ends[:, None])
    matrix = inside / (ends - starts)[:, None]
    return from_numpy_result(matrix, like.dtype).to(like.device)


def _adaptive_avg_samples(d):
    def samples(make):
        return [Sample(make(2, 3, *(7, 5)[:d]), (3, 2)[:d] if d > 1 else 3),
                Sample(make(2, *(4, 6)[:d]), 2), Sample(make(1, 2, *(5, 3)[:d]), (5, 1)[:d])]
    return samples


def _adaptive_avg_pool(self, output_size, d, name):
    check_adaptive_input(tuple(self.shape), d, name)
    refuse_unless_floating(self._dtype, "adaptive_avg_pool2d")
    out = adaptive_output_size(tuple(self.shape), d, output_size)
    sizes = tuple(self.shape)[-d:]
    result = self
    if d == 2:   # rows: (oh, h) @ (..., h, w)
        result = _averaging_matrix(sizes[0], out[0], self).matmul(result)
    result = result.matmul(_averaging_matrix(sizes[-1], out[-1], self).mT)
    return in_format(result, pool_format(self, d))


@op(kind="composite", method=False, samples=_adaptive_avg_samples(1))
def adaptive_avg_pool1d(self, output_size):
    """Means over adaptive windows: a product with an averaging matrix."""
    return _adaptive_avg_pool(self, output_size, 1, "adaptive_avg_pool1d")


@op(kind="composite", method=False, samples=_adaptive_avg_samples(2))
def adaptive_avg_pool2d(self, output_size):
    """Means over adaptive windows: products with an averaging matrix per dim."""
    return _adaptive_avg_pool(self, output_size, 2, "adaptive_avg_pool2d")


# --------------------------------------------------------------------------- average pooling

def _divisor(sizes, kernel, stride, padding, out, count_include_pad):
    """Each output's divisor: its window's size clipped to the padded input (or to the
    input alone without ``count_include_pad``), per dim then multiplied out."""
    counts = []
    for n, k, s, p, o in zip(sizes, kernel, stride, padding, out):
        starts = np.arange(o) * s - p
        ends = np.minimum(starts + k, n + p)
        if not count_include_pad:
            starts, ends = np.maximum(starts, 0), np.minimum(ends, n)
        counts.append(ends - starts)
    total = counts[0]
    for c in counts[1:]:
        total = np.multiply.outer(total, c)
    return total


def _avg_pool_geometry(shape, d, name, kernel_size, stride, padding, ceil_mode,
                       divisor_override):
    """Checked ``(kernel, stride, padding, output sizes)`` of a ``d``-dim average pool."""
    if len(shape) not in (d + 1, d + 2) and d == 1:
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {len(shape)}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for "
                           f"{name})")
    kernel, stride, padding, _, out = pool_geometry(shape, d, kernel_size, stride, padding,
                                                    1, ceil_mode, name)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    return kernel, stride, padding, out


def _divisor_tensor(sizes, kernel, stride, padding, out, count_include_pad, like):
    divisor = _divisor(sizes, kernel, stride, padding, out, count_include_pad)
    return from_numpy_result(divisor.astype(like.dtype.np)).to(like.device)


def _avg_pool_arrays(x, d, kernel, stride, padding, out, count_include_pad,
                     divisor_override):
    """Average pooling of the last ``d`` dims of the array ``x`` (any dtype, any array
    module): the zero-padded input summed over one strided view per kernel position."""
    xp = array_module(x)
    lead, sizes = x.shape[:-d], x.shape[-d:]
    extents = [(o - 1) * s + k for o, s, k in zip(out, stride, kernel)]
    padded = xp.zeros(lead + tuple(max(n + p, e) for n, p, e in zip(sizes, padding, extents)),
                      dtype=x.dtype)
    padded[(Ellipsis,) + tuple(slice(p, p + n) for p, n in zip(padding, sizes))] = x
    total = xp.zeros(lead + out, dtype=np.float64 if x.dtype.kind in "iub" else x.dtype)
    for position in np.ndindex(*kernel):
        total += padded[(Ellipsis,) + tuple(slice(q, q + (o - 1) * s + 1, s)
                                            for q, o, s in zip(position, out, stride))]
    if divisor_override is not None:
        return total / divisor_override
    return total / xp.asarray(_divisor(sizes, kernel, stride, padding, out, count_include_pad))


def _avg_pool(self, d, name, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    refuse_complex(self, "avg_pool3d_out_frame" if d == 3 else "avg_pool2d", bool_too=True)
    kernel, stride, padding, out = _avg_pool_geometry(
        self._sizes, d, name, kernel_size, stride, padding, ceil_mode, divisor_override)
    x = self._array()
    if d < 3 and nnkernels.supports(x):
        # 1-d pooling is 2-d pooling of planes one row high
        values = nnkernels.avg_pool2d(
            x if d == 2 else x[..., None, :], (1,) * (2 - d) + kernel,
            (1,) * (2 - d) + stride, (0,) * (2 - d) + padding, (1,) * (2 - d) + out,
            count_include_pad, divisor_override)
        values = values if d == 2 else values[..., 0, :]
    else:
        values = _avg_pool_arrays(x, d, kernel, stride, padding, out, count_include_pad,
                                  divisor_override)
    # PyTorch keeps channels_last for 2-d average pooling only
    return from_numpy_result(values, self._dtype,
                             pool_format(self, d) if d == 2 else contiguous_format)


def _avg_pool_derivative(grad, self_shape, d, name, kernel_size, stride, padding, ceil_mode,
                         count_include_pad, divisor_override):
    """Each output's gradient over its divisor, added back to every input position of its
    window: a transposed convolution of those with a kernel of ones (the windows' extent
    past the padded input, or short of it, made up by cropping or output padding)."""
    kernel, stride, padding, out = _avg_pool_geometry(
        tuple(self_shape), d, name, kernel_size, stride, padding, ceil_mode, divisor_override)
    if d == 2 and batching() is None and not is_grad_enabled() and \
            nnkernels.supports(grad._array()):
        # no graph of the backward pass is being built, nor a vmap: one C pass
        return from_numpy_result(nnkernels.avg_pool2d_backward(
            grad._array(), tuple(self_shape), kernel, stride, padding, count_include_pad,
            divisor_override), grad._dtype)
    sizes = tuple(self_shape[-d:])
    if divisor_override is not None:
        scaled = grad / divisor_override
    else:
        scaled = grad / _divisor_tensor(sizes, kernel, stride, padding, out,
                                        count_include_pad, grad)
    extents = [(o - 1) * s + k for o, s, k in zip(out, stride, kernel)]
    output_padding = tuple(max(0, p + n - e) for p, n, e in zip(padding, sizes, extents))
    spread = convolution(scaled.reshape((-1, 1) + out),
                         ones((1, 1) + kernel, dtype=grad.dtype, device=grad.device), None,
                         stride, (0,) * d, (1,) * d, True, output_padding, 1)
    crop = spread[(Ellipsis,) + tuple(slice(p, p + n) for p, n in zip(padding, sizes))]
    return crop.reshape(tuple(self_shape))


def avg_pool_batch_rule(op, level, args, kwargs):
    """The vmap batch folded into N: (B, [N,] C, *spatial) as (B*N, C, *spatial), one
    call, reshaped back."""
    bound = op.bind(args, kwargs)
    x = bound.pop("self")
    d = AVG_POOL_DIMS[op.name]
    sample = tuple(x.shape)
    _avg_pool_geometry(sample, d, op.name, bound["kernel_size"], bound["stride"],
                       bound["padding"], bound["ceil_mode"], bound.get("divisor_override"))
    value = to_front(x._value, x._bdim)
    result = call(op, (value.reshape((-1,) + sample[-(d + 1):]),), bound)
    lead = (value.shape[0],) + sample[:-(d + 1)]
    return wrap(result.reshape(lead + tuple(result.shape[1:])), 0, level)


def _avg_pool_samples(d):
    def samples(make):
        def shaped(*spatial):   # smaller volumes in 3-d: the sweeps stay fast
            return spatial[:d] if d < 3 else tuple(max(3, n - 2) for n in spatial)
        divisor = (3,) if d > 1 else ()
        return [Sample(make(2, 3, *shaped(5, 4, 4)), (2,) * d),
                Sample(make(2, *shaped(6, 5, 4)), (3,) * d, (2,) * d, (1,) * d, True),
                Sample(make(1, 2, *shaped(7, 6, 5)), (3,) * d, (2,) * d, (1,) * d, True, False),
                Sample(make(2, 1, *shaped(5, 5, 3)), (2,) * d, (1,) * d, (1,) * d, False,
                       True, *divisor),
                Sample(make(1, 2, *shaped(6, 7, 5)), (3, 2, 2)[:d], (2, 3, 2)[:d],
                       (1, 0, 1)[:d], True, False, *((-2,) if d > 1 else ())),
                Sample(make(2, *shaped(4, 5, 4)), (2,) * d, (2,) * d, 0, True)]
    return samples


def _declare_avg_pool(d):
    name = f"avg_pool{d}d"
    if d == 1:
        def kernel(self, kernel_size, stride=(), padding=0, ceil_mode=False,
                   count_include_pad=True):
            return _avg_pool(self, d, name, kernel_size, stride, padding, ceil_mode,
                             count_include_pad, None)

        def derivative(grad, self, self_shape, kernel_size, stride, padding, ceil_mode,
                       count_include_pad):
            return linked(_avg_pool_derivative(grad, self_shape, d, name, kernel_size, stride,
                                               padding, ceil_mode, count_include_pad, None),
                          self)
    else:
        def kernel(self, kernel_size, stride=(), padding=0, ceil_mode=False,
                   count_include_pad=True, divisor_override=None):
            return _avg_pool(self, d, name, kernel_size, stride, padding, ceil_mode,
                             count_include_pad, divisor_override)

        def derivative(grad, self, self_shape, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
            return linked(_avg_pool_derivative(grad, self_shape, d, name, kernel_size, stride,
                                               padding, ceil_mode, count_include_pad,
                                               divisor_override), self)
    kernel.__name__ = name
    kernel.__doc__ = (f"The mean of each window of a {d}-d pooling, positions in the padding "
                      f"counted as zeros (or not at all without ``count_include_pad``).")
    declared = op(name, method=False, samples=_avg_pool_samples(d))(kernel)
    declared.def_derivative("self")(derivative)
    declared.def_batch_rule(avg_pool_batch_rule)
    return declared


avg_pool1d = _declare_avg_pool(1)
avg_pool2d = _declare_avg_pool(2)
avg_pool3d = _declare_avg_pool(3)

AVG_POOL_DIMS = {"avg_pool1d": 1, "avg_pool2d": 2, "avg_pool3d": 3}
MAX_POOL_DIMS = {"max_pool1d_with_indices": 1, "max_pool2d_with_indices": 2,
                 "max_pool3d_with_indices": 3, "adaptive_max_pool2d": 2}

__all__ = ["max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "adaptive_max_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d",
           "avg_pool2d", "avg_pool3d", "MAX_POOL_DIMS", "check_pool_input", "check_adaptive_input"]
