"""More pooling: adaptive max pooling in 1-d and 3-d, adaptive average pooling in 3-d,
max unpooling, power-average (LP) pooling and fractional max pooling, with PyTorch's
arguments, checks, errors and result layouts.

Max pooling over windows that are not one strided view (adaptive windows, fractional
windows starting at random places) gathers the windows by their elements' flat positions
and reduces them along one axis (the first maximum, or the last NaN, as PyTorch's
kernels); indices are flat positions in each
input plane and the derivative scatters there (``pooling.scatter_to_indices``).  Max
unpooling puts each value at its flat index in a zero plane; its derivative gathers from
there.  Adaptive average pooling in 3-d and LP pooling are composites (products with
averaging matrices; ``avg_pool`` of powers).  The ops with their own kernel share one
batching rule: the vmap batch folded into N.
"""
import math

import numpy as np

from microtensor._C import meta, nnkernels
from microtensor._C.meta import channels_last_3d
from microtensor._C.tensor import int64
from microtensor.ops.loops import (_type_name, array_module, from_numpy_result, in_format,
                                   is_floating_array, owned)
from microtensor.ops.pooling import (_adaptive_windows, _averaging_matrix, avg_pool1d,
                                     avg_pool2d, avg_pool3d, max_pool1d_with_indices,
                                     max_pool2d_with_indices, max_pool3d_with_indices,
                                     pool_format, scatter_to_indices)
from microtensor.ops.registry import Sample, op
from microtensor.ops.copy import linked
from microtensor.ops.factory import tensor
from microtensor.ops.pointwise import where
from microtensor.vmap.helpers import batch_size, call, front_or_expanded, wrap

_DIM_NAMES = {2: "(height, width)", 3: "(depth, height, width)"}
_COUNT_NAMES = {2: "two", 3: "three"}


# --------------------------------------------------------------------------- shared pieces

def _require_floating(self, kernel_name):
    if not self._dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel_name}\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")


def _check_non_batch_sizes(shape, name, got="but input has sizes ", end=""):
    """PyTorch's refusal of an empty non-batch dim (dim 0 may be empty when batched), in
    the op's own words (``got``, ``end``)."""
    for i in range(1, len(shape)):
        if shape[i] == 0:
            raise RuntimeError(f"{name}: Expected input to have non-zero size for non-batch "
                               f"dimensions, {got}{list(shape)} with dimension {i} being "
                               f"empty{end}")


def _sizes_of(value, d, message):
    """An int or a ``d``-sequence of sizes as a ``d``-tuple (``message`` otherwise)."""
    sizes = (int(value),) * d if isinstance(value, (int, np.integer)) else tuple(value)
    if len(sizes) != d:
        raise RuntimeError(message)
    return sizes


def _window_max(rows, lows, highs):
    """The maximum over box windows of the spatial dims of ``rows`` (R, *sizes), and its
    flat index in each plane.  ``lows[k]`` and ``highs[k]`` bound the windows along dim
    ``k``: integer arrays (1 or R, outputs).  float32/float64 NumPy planes go through one C
    pass; others gather every window's elements as one array (R, outputs, window), its
    positions padded by repeating each window's last, and reduce it along its last axis."""
    if nnkernels.supports(rows):
        pad = 3 - len(lows)
        planes = rows.reshape((rows.shape[0],) + (1,) * pad + rows.shape[1:])
        first, one = np.zeros((1, 1), np.int64), np.ones((1, 1), np.int64)
        values, flat = nnkernels.window_max(planes, [first] * pad + list(lows),
                                            [one] * pad + list(highs))
        out = (rows.shape[0],) + tuple(lo.shape[1] for lo in lows)
        return values.reshape(out), flat.reshape(out)
    xp = array_module(rows)
    windows = []
    for lo, hi in zip(lows, highs):
        lo, hi = xp.asarray(lo), xp.asarray(hi)
        width = max(int((hi - lo).max()), 1)
        windows.append(xp.minimum(lo[:, :, None] + xp.arange(width), hi[:, :, None] - 1))
    d = len(windows)
    count, sizes = rows.shape[0], rows.shape[1:]
    out = tuple(w.shape[1] for w in windows)
    positions = 0
    for k, w in enumerate(windows):
        shape = [w.shape[0]] + [1] * (2 * d)
        shape[1 + k], shape[1 + d + k] = out[k], w.shape[2]
        positions = positions * sizes[k] + w.reshape(shape)
    positions = positions.reshape((positions.shape[0], math.prod(out), -1))
    planes = rows.reshape((count, -1))
    if positions.shape[0] == 1:     # the same windows in every plane
        gathered = planes[:, positions[0]]
        which = 0
    else:
        which = xp.arange(count)[:, None]
        gathered = planes[which[:, :, None], positions]
    values, picked = _max_first_or_last_nan(gathered)
    flat = positions[which, xp.arange(positions.shape[1]), picked]
    return values.reshape((count,) + out), flat.reshape((count,) + out)


def _max_first_or_last_nan(windows):
    """The maximum of each row of the last axis and its position: the first maximum, or
    the last NaN when there is one (PyTorch's kernels keep a value when it is greater, or
    NaN); two reductions whatever the window's length."""
    values, picked = windows.max(-1), windows.argmax(-1)
    with_nan = values != values     # the maximum is NaN where a window holds one
    if is_floating_array(windows) and with_nan.any():
        last_nan = windows.shape[-1] - 1 - (windows != windows)[..., ::-1].argmax(-1)
        picked = array_module(windows).where(with_nan, last_nan, picked)
    return values, picked


def _max_results(self, values, flat, lead, out):
    return (from_numpy_result(values.reshape(lead + out), self._dtype),
            from_numpy_result(flat.astype(np.int64).reshape(lead + out), int64))


def _spatial_rows(self, d):
    return self._array().reshape((-1,) + self._sizes[-d:])


def _empty_max_results(self, lead, out):
    return (self.new_empty(lead + out), self.new_empty(lead + out, dtype=int64))


# --------------------------------------------------------------------------- adaptive max pooling

def _adaptive_max_output(self, d, output_size, name):
    """Checked output sizes of ``d``-dim adaptive max pooling, PyTorch's errors."""
    shape = tuple(self.shape)
    if d == 1:
        if len(shape) not in (2, 3):
            raise RuntimeError(f"Expected 2 to 3 dimensions, but got {len(shape)}-dimensional "
                               f"tensor for argument #1 'self' (while checking arguments for "
                               f"{name})")
        _check_non_batch_sizes(shape, f"{name}()")
        if not isinstance(output_size, (int, np.integer)):
            if len(tuple(output_size)) != 1:
                raise RuntimeError(f"{name}() argument 'output_size' should contain one int "
                                   f"(got {len(tuple(output_size))})")
    else:
        if len(shape) not in (d + 1, d + 2):
            raise RuntimeError(f"{name}(): Expected {d + 1}D or {d + 2}D tensor, but got: "
                               f"{list(shape)}")
        _check_non_batch_sizes(shape, f"{name}()")
    size = _sizes_of(output_size, d, f"{name}(): internal error: output_size.size() must be "
                                     f"{d}")
    out = tuple(shape[-d + i] if s is None else int(s) for i, s in enumerate(size))
    lead = shape[:-d]
    if any(o < 0 for o in out):
        # PyTorch pools 1-d as 2-d planes one row high, and names that shape
        shown = lead + (1,) * (d == 1) + out
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{min(out)}: {list(shown)}")
    meta.check_size_nonnegative(lead + out)     # an overflowing result, before any window
    return out


def _adaptive_max_checks(d, name, kernel_name):
    """The checks of ``d``-dim adaptive max pooling: ``check(self, output_size)`` returns
    the output sizes."""
    def check(self, output_size):
        out = _adaptive_max_output(self, d, output_size, name)
        _require_floating(self, kernel_name)
        return out
    return check


_ADAPTIVE_MAX_CHECKS = {1: _adaptive_max_checks(1, "adaptive_max_pool1d", "adaptive_max_pool2d"),
                        3: _adaptive_max_checks(3, "adaptive_max_pool3d",
                                                "adaptive_max_pool3d_cpu")}


def _adaptive_max(self, d, output_size):
    out = _ADAPTIVE_MAX_CHECKS[d](self, output_size)
    lead = self._sizes[:-d]
    if 0 in out or 0 in lead:
        return _empty_max_results(self, lead, out)
    rows = _spatial_rows(self, d)
    bounds = [_adaptive_windows(n, o)[:2] for n, o in zip(self._sizes[-d:], out)]
    values, flat = _window_max(rows, [starts[None] for starts, _ in bounds],
                               [ends[None] for _, ends in bounds])
    return _max_results(self, values, flat, lead, out)


def _adaptive_max_samples(d):
    def samples(make):
        spatial = {1: ((7,), (4,), (5,)), 3: ((4, 5, 3), (3, 3, 4), (5, 2, 3))}[d]
        sizes = {1: (3, 2, 5), 3: ((2, 3, 2), 2, (5, 1, 2))}[d]
        return [Sample(_distinct(2, 3, *spatial[0]), sizes[0]),
                Sample(_distinct(2, *spatial[1]), sizes[1]),
                Sample(_distinct(1, 2, *spatial[2]), sizes[2])]
    return samples


def _distinct(*shape):
    """Values without ties (a maximum's gradient is then defined everywhere)."""
    count = math.prod(shape)
    values = np.random.default_rng(count).permutation(count).astype(np.float64)
    return tensor(values.reshape(shape) / count)


@op(method=False, samples=_adaptive_max_samples(1))
def adaptive_max_pool1d(self, output_size):
    """The maximum over each adaptive window of the last dim (PyTorch's ``floor``/``ceil``
    bounds) and its index."""
    return _adaptive_max(self, 1, output_size)


@op(method=False, samples=_adaptive_max_samples(3))
def adaptive_max_pool3d(self, output_size):
    """The maximum over each adaptive window of the last three dims and its flat index in
    the input volume."""
    return _adaptive_max(self, 3, output_size)


@adaptive_max_pool1d.def_derivative("self")
def adaptive_max_pool1d(grad, self, self_shape, result1):
    return linked(scatter_to_indices(grad[0], self_shape, result1, 1), self)


@adaptive_max_pool3d.def_derivative("self")
def adaptive_max_pool3d(grad, self, self_shape, result1):
    return linked(scatter_to_indices(grad[0], self_shape, result1, 3), self)


# --------------------------------------------------------------------------- adaptive average 3-d

def _adaptive_avg_pool3d_output(self, output_size):
    shape = tuple(self.shape)
    if len(shape) not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got "
                           f"{list(shape)}")
    _check_non_batch_sizes(shape, "adaptive_avg_pool3d()")
    size = _sizes_of(output_size, 3, "adaptive_avg_pool3d: output_size must be 3")
    out = tuple(shape[-3 + i] if s is None else int(s) for i, s in enumerate(size))
    if any(o < 0 for o in out):
        raise RuntimeError(f"adaptive_avg_pool3d: elements of output_size must be greater "
                           f"than or equal to 0 but received {{{out[0]}, {out[1]},{out[2]}}}")
    meta.check_size_nonnegative(shape[:-3] + out)   # an overflowing result, before any window
    _require_floating(self, "adaptive_avg_pool3d_cpu")
    return out


def _adaptive_avg_3d_samples(make):
    return [Sample(make(2, 3, 4, 5, 3), (2, 3, 2)), Sample(make(2, 3, 3, 4), 2),
            Sample(make(1, 2, 3, 2, 4), (None, 1, 3)), Sample(make(2, 2, 3, 3, 2), 1)]


@op(kind="composite", method=False, samples=_adaptive_avg_3d_samples)
def adaptive_avg_pool3d(self, output_size):
    """Means over adaptive windows of the last three dims: a product with an averaging
    matrix per dim (a mean when every output size is 1, as PyTorch computes it)."""
    od, oh, ow = _adaptive_avg_pool3d_output(self, output_size)
    shape = tuple(self.shape)
    if (od, oh, ow) == (1, 1, 1):
        mean = self.mean((-3, -2, -1), keepdim=True)
        # PyTorch's result is laid out channels_last_3d (a copy: strides of size-1 dims
        # included) when the input is
        suggests = self.dim() == 5 and not self.is_contiguous() and \
            self.is_contiguous(memory_format=channels_last_3d)
        return mean.clone(memory_format=channels_last_3d) if suggests else mean
    lead, (d, h, w) = shape[:-3], shape[-3:]
    result = self.matmul(_averaging_rows(w, ow, self).mT)           # (..., d, h, ow)
    result = _averaging_rows(h, oh, self).matmul(result)            # (..., d, oh, ow)
    result = _averaging_rows(d, od, self).matmul(result.reshape(lead + (d, oh * ow)))
    return owned(result.reshape(lead + (od, oh, ow)))


def _averaging_rows(n, o, like):
    """``pooling._averaging_matrix``, and no rows for an output size of 0."""
    if o == 0:
        return from_numpy_result(np.zeros((0, n)), like.dtype).to(like.device)
    return _averaging_matrix(n, o, like)


# --------------------------------------------------------------------------- max unpooling

def _max_unpool_checks(d):
    """The checks of ``d``-dim max unpooling, in PyTorch's order and words:
    ``check(self, indices, output_size, stride=None, padding=None)``."""
    name = f"max_unpooling{d}d"

    def check(self, indices, output_size, stride=None, padding=None):
        shape, index_shape = tuple(self.shape), tuple(indices.shape)
        output_size = tuple(output_size)
        if indices.dtype is not int64:
            got = f" but got: {_type_name(indices.dtype)}" if d == 2 else ""
            raise RuntimeError(f"elements in indices should be type int64{got}")
        if d == 3 and len(shape) not in (4, 5):
            raise RuntimeError(f"Input to {name} should be a 4d or 5d Tensor, but got a "
                               f"tensor with {len(shape)} dimensions.")
        if len(output_size) != d:
            raise RuntimeError(f"There should be exactly {_COUNT_NAMES[d]} elements "
                               f"{_DIM_NAMES[d]} in output_size, but got {len(output_size)} "
                               f"elements.")
        if d == 3:
            for what, value in (("stride", stride), ("padding", padding)):
                if len(tuple(value)) != 3:
                    raise RuntimeError(f"There should be exactly three elements (depth, "
                                       f"height, width) in {what}, but got: "
                                       f"{len(tuple(value))} elements.")
        if d == 2 and len(shape) not in (3, 4):
            raise RuntimeError(f"Input to {name} should be a 3d or 4d Tensor, but got a "
                               f"tensor with {len(shape)} dimensions.")
        if any(o < 0 for o in output_size):
            raise RuntimeError(f"{name}(): output_size must contain non-negative spatial "
                               f"dimensions, but got output_size={output_size}")
        if shape != index_shape:
            raise RuntimeError(f"Expected shape of indices to be same as that of the input "
                               f"tensor ({list(shape)}) but got indices tensor with shape: "
                               f"{list(index_shape)}")
        _check_non_batch_sizes(shape, f"{name}_forward_out_cpu()", "but got ", ".")
        if d == 3 and any(s <= 0 for s in stride):
            raise RuntimeError(f"strides should be greater than zero, but got stride: "
                               f"{list(stride)}")
        _require_floating(self, f"max_unpool{d}d")
    return check


_MAX_UNPOOL_CHECKS = {2: _max_unpool_checks(2), 3: _max_unpool_checks(3)}


def _max_unpool(self, indices, output_size, d):
    """Each value put at its flat index in a zero plane of ``output_size``."""
    out = tuple(int(o) for o in output_size)
    lead, plane = self._sizes[:-d], math.prod(out)
    values = self._array().reshape((-1, math.prod(self._sizes[-d:])))
    positions = indices._array().reshape(values.shape)
    xp = array_module(values)
    invalid = (positions < 0) | (positions >= plane)
    if invalid.any():
        raise RuntimeError(f"Found an invalid max index: {int(positions[invalid][0])} (output "
                           f"volumes are of size {'x'.join(map(str, out))})")
    result = xp.zeros((values.shape[0], plane), dtype=values.dtype)
    # (a repeated index keeps its last value, as PyTorch's loop does)
    result[xp.arange(values.shape[0])[:, None], positions] = values
    return from_numpy_result(result.reshape(lead + out), self._dtype)


def _gather_from_indices(grad, indices, self_shape, d):
    """The gradient of max unpooling: each value's gradient read at its flat index."""
    lead = tuple(self_shape[:-d])
    planes = grad.reshape(lead + (-1,))
    return planes.gather(-1, indices.reshape(lead + (-1,))).reshape(tuple(self_shape))


def _max_unpool_samples(d):
    def samples(make):
        pool = max_pool2d_with_indices if d == 2 else max_pool3d_with_indices
        cases = [((2, 3, 4, 6), 2), ((3, 5, 5), 2), ((1, 2, 6, 5), (3, 2))] if d == 2 else \
            [((1, 2, 4, 4, 5), 2), ((2, 3, 5, 4), (2, 1, 2))]
        found = []
        for shape, kernel in cases:
            indices = pool(_distinct(*shape), kernel)[1]
            extra = ((kernel,) * 3 if isinstance(kernel, int) else kernel, (0, 0, 0)) \
                if d == 3 else ()
            found.append(Sample(make(*indices.shape), indices, shape[-d:], *extra))
        return found
    return samples


@op(inputs=("self",), method=False, samples=_max_unpool_samples(2))
def max_unpool2d(self, indices, output_size):
    """The partial inverse of 2-d max pooling: values at their indices, zeros elsewhere."""
    _MAX_UNPOOL_CHECKS[2](self, indices, output_size)
    return in_format(_max_unpool(self, indices, output_size, 2), pool_format(self, 2))


@op(inputs=("self",), method=False, samples=_max_unpool_samples(3))
def max_unpool3d(self, indices, output_size, stride, padding):
    """The partial inverse of 3-d max pooling (``stride`` and ``padding`` are checked only,
    as in PyTorch)."""
    _MAX_UNPOOL_CHECKS[3](self, indices, output_size, stride, padding)
    return _max_unpool(self, indices, output_size, 3)


@max_unpool2d.def_derivative("self")
def max_unpool2d(grad, indices, self_shape):
    return _gather_from_indices(grad, indices, self_shape, 2)


@max_unpool3d.def_derivative("self")
def max_unpool3d(grad, indices, self_shape):
    return _gather_from_indices(grad, indices, self_shape, 3)


# --------------------------------------------------------------------------- LP pooling

def ntuple(value, n):
    """``value`` as a tuple: itself if a sequence, else repeated ``n`` times (PyTorch's
    ``_single``/``_pair``/``_triple``)."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


_MAX_POOLS = {1: max_pool1d_with_indices, 2: max_pool2d_with_indices,
              3: max_pool3d_with_indices}
_AVG_POOLS = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}


def _lp_pool(self, d, norm_type, kernel_size, stride, ceil_mode):
    """PyTorch's formula: the ``norm_type`` power averaged over each window, times the
    window's size, to the power ``1 / norm_type`` (a max of magnitudes for an infinite
    ``norm_type``)."""
    window = kernel_size
    if d > 1:   # PyTorch unpacks exactly ``d`` sizes (its ValueError otherwise)
        window = math.prod(_unpacked(ntuple(kernel_size, d), d))
    stride = () if stride is None else stride
    if isinstance(norm_type, (int, float)) and norm_type == math.inf:
        return _MAX_POOLS[d](self.abs(), kernel_size, stride, 0, 1, ceil_mode)[0]
    if isinstance(norm_type, (int, float)) and norm_type == -math.inf:
        return -_MAX_POOLS[d](-self.abs(), kernel_size, stride, 0, 1, ceil_mode)[0]
    out = _AVG_POOLS[d](self.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    magnitude = out.abs()
    # Where a window's sum is 0 the root's gradient is infinite and PyTorch's is 0: its
    # relu's derivative selects (threshold_backward) and its sign's is zeros, where
    # products with 0 would give NaN.  So relu is a select here, and sign (derivative
    # zero) is detached.
    rectified = where(magnitude > 0, magnitude, 0)
    return (out.sign().detach() * rectified).mul(window).pow(1.0 / norm_type)


def _unpacked(sizes, d):
    if len(sizes) > d:
        raise ValueError(f"too many values to unpack (expected {d})")
    if len(sizes) < d:
        raise ValueError(f"not enough values to unpack (expected {d}, got {len(sizes)})")
    return sizes


def _lp_pool_samples(d):
    def samples(make):
        def shaped(*spatial):   # smaller volumes in 3-d: the sweeps stay fast
            return spatial[:d] if d < 3 else tuple(max(3, n - 2) for n in spatial)

        def positive(*spatial):
            return make(*(2, 3) if d < 3 else (1, 2), *shaped(*spatial), low=0.5, high=2.0)
        return [Sample(positive(5, 4, 4), 2, 2), Sample(positive(6, 5, 4), 3, 3, 2, True),
                Sample(positive(4, 5, 3), 1.5, (2, 3, 2)[:d] if d > 1 else 2, 1),
                Sample(positive(5, 4, 3), float("inf"), 2, 1),
                Sample(make(1, 2, *shaped(4, 4, 4)), -float("inf"), 2)]
    return samples


def _declare_lp_pool(d):
    def lp_pool(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        return _lp_pool(self, d, norm_type, kernel_size, stride, ceil_mode)
    lp_pool.__name__ = f"lp_pool{d}d"
    lp_pool.__doc__ = (f"{d}-d power-average pooling: ``(sum over the window of "
                       f"x ** norm_type) ** (1 / norm_type)``, PyTorch's formula.")
    return op(f"lp_pool{d}d", kind="composite", method=False, samples=_lp_pool_samples(d))(
        lp_pool)


lp_pool1d = _declare_lp_pool(1)
lp_pool2d = _declare_lp_pool(2)
lp_pool3d = _declare_lp_pool(3)


# --------------------------------------------------------------------------- fractional max pooling

def _fractional_checks(d):
    """The checks of ``d``-dim fractional max pooling in PyTorch's order and words (its
    3-d pool must be strictly shorter than the input plus one, not at most): ``check(self,
    kernel_size, output_size, random_samples)`` returns the kernel and output sizes."""
    name = f"fractional_max_pool{d}d"
    prefix = f"{name}()" if d == 2 else f"{name}_out()"
    ints = "Ints" if d == 2 else "three Ints"
    # the order PyTorch checks the dims in, and its names for them
    order = (("height", 0), ("width", 1)) if d == 2 else \
        (("time", 0), ("width", 2), ("height", 1))

    def check(self, kernel_size, output_size, random_samples):
        kernel = _sizes_of(kernel_size, d, f"{name}: kernel_size must either be a single Int "
                                           f"or tuple of {ints}")
        out = _sizes_of(output_size, d, f"{name}: output_size must either be a single Int "
                                        f"or tuple of {ints}")
        shape = tuple(self.shape)
        if len(shape) not in (d + 1, d + 2):
            raise RuntimeError(f"{prefix}: Expected {d + 1}D or {d + 2}D tensor, but got: "
                               f"{list(shape)}")
        _check_non_batch_sizes(shape, prefix, "but got", ".")
        for word, k in order:
            n = shape[-d + k]
            if out[k] + kernel[k] - 1 > n - (d == 3):
                raise RuntimeError(f"{prefix}: pool {word} {kernel[k]} too large relative to "
                                   f"input {word} {n}")
        if any(o < 0 for o in out):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: "
                               f"{list(shape[:-d] + out)}")
        _check_random_samples(self, random_samples, d)
        _require_floating(self, f"{name}_out_frame")
        return kernel, out
    return check


def _check_random_samples(self, random_samples, d):
    shape, samples = tuple(self.shape), tuple(random_samples.shape)
    if random_samples.dtype is not self.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if len(samples) != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {len(samples)}")
    batch = shape[0] if len(shape) == d + 2 else 1
    if samples[0] < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples[1] != shape[-d - 1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples[2] != d:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {d}; got {samples[2]}.")


_FRACTIONAL_CHECKS = {2: _fractional_checks(2), 3: _fractional_checks(3)}


def _fractional_starts(samples, n, o, k):
    """PyTorch's interval generation: the window starts ``(R, o)`` along a dim of ``n``
    for one sample ``u`` per row, ``int((i + u) * alpha) - int(u * alpha)`` with ``alpha =
    (n - k) / (o - 1)``, computed in the samples' own dtype (float32 samples round as
    PyTorch's float arithmetic does), and the last window ending at the input's end."""
    xp = array_module(samples)
    starts = xp.empty(samples.shape + (o,), dtype=np.int64)
    if o > 1:
        scalar = samples.dtype.type
        alpha = scalar(n - k) / scalar(o - 1)
        steps = xp.arange(o - 1).astype(samples.dtype)
        starts[:, :-1] = ((steps + samples[:, None]) * alpha).astype(np.int64) - \
            (samples * alpha).astype(np.int64)[:, None]
    if o > 0:
        starts[:, -1] = n - k
    return starts


def _fractional_max_pool(self, kernel_size, output_size, random_samples, d):
    kernel, out = _FRACTIONAL_CHECKS[d](self, kernel_size, output_size, random_samples)
    lead, sizes = self._sizes[:-d], self._sizes[-d:]
    if 0 in out or 0 in lead:
        return _empty_max_results(self, lead, out)
    rows = _spatial_rows(self, d)
    xp = array_module(rows)
    batch = self._sizes[0] if self.dim() == d + 2 else 1
    # each plane's samples: W then H in 2-d, T, H, W in 3-d (PyTorch's order)
    samples = random_samples._array()[:batch].reshape((-1, d))
    columns = (1, 0) if d == 2 else (0, 1, 2)
    starts = [_fractional_starts(xp.ascontiguousarray(samples[:, c]), n, o, k)
              for c, n, o, k in zip(columns, sizes, out, kernel)]
    if min(kernel) < 1:
        # an empty window: PyTorch's -inf at the window's start
        flat = 0
        for k, (start, n) in enumerate(zip(starts, sizes)):
            flat = flat * n + start.reshape((-1,) + (1,) * k + (out[k],) + (1,) * (d - 1 - k))
        values = xp.full(flat.shape, -np.inf, dtype=rows.dtype)
        return _max_results(self, values, flat, lead, out)
    values, flat = _window_max(rows, starts, [start + k for start, k in zip(starts, kernel)])
    return _max_results(self, values, flat, lead, out)


def _fractional_samples(d):
    def samples(make):
        def uniform(*shape):
            return make(*shape, low=0.0, high=1.0)
        if d == 2:
            return [Sample(_distinct(2, 3, 7, 6), (2, 2), (3, 4), uniform(2, 3, 2)),
                    Sample(_distinct(2, 5, 5), 3, 2, uniform(1, 2, 2)),
                    Sample(_distinct(1, 2, 6, 7), (2, 3), (5, 1), uniform(3, 2, 2))]
        return [Sample(_distinct(1, 2, 5, 6, 4), (2, 2, 2), (3, 4, 2), uniform(1, 2, 3)),
                Sample(_distinct(2, 4, 5, 4), 2, 2, uniform(1, 2, 3)),
                Sample(_distinct(2, 1, 4, 4, 5), (1, 2, 3), (3, 1, 2), uniform(2, 1, 3))]
    return samples


@op(method=False, samples=_fractional_samples(2))
def fractional_max_pool2d(self, kernel_size, output_size, random_samples):
    """The maximum over windows of ``kernel_size`` starting at pseudo-random places (from
    ``random_samples``: one per plane and dim) that make ``output_size`` outputs, and its
    flat index in the input plane."""
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 2)


@op(method=False, samples=_fractional_samples(3))
def fractional_max_pool3d(self, kernel_size, output_size, random_samples):
    """``fractional_max_pool2d`` over volumes."""
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 3)


@fractional_max_pool2d.def_derivative("self")
def fractional_max_pool2d(grad, self, self_shape, result1):
    return linked(scatter_to_indices(grad[0], self_shape, result1, 2), self)


@fractional_max_pool3d.def_derivative("self")
def fractional_max_pool3d(grad, self, self_shape, result1):
    return linked(scatter_to_indices(grad[0], self_shape, result1, 3), self)


# --------------------------------------------------------------------------- the batching rule

def _fold_batch_rule(op, level, args, kwargs):
    """The vmap batch folded into N: each sample's (N, C, *spatial) or (C, *spatial)
    tensors as one (B*N, C, *spatial) call (``random_samples``: its first N rows of each
    sample), the results reshaped back.  Per-sample checks run first, on the samples'
    shapes, so that a folded call raises nothing a sample would not."""
    bound = op.bind(args, kwargs)
    d, check = _FOLDED[op.name]
    check(**bound)
    x = bound.pop("self")
    sample = tuple(x.shape)
    size = batch_size(level)
    folded = front_or_expanded(x, level, size).reshape((-1,) + sample[-(d + 1):])
    if "indices" in bound:
        bound["indices"] = front_or_expanded(bound["indices"], level, size).reshape(
            folded.shape)
    if "random_samples" in bound:
        rows = sample[0] if len(sample) == d + 2 else 1
        bound["random_samples"] = front_or_expanded(bound["random_samples"], level, size)[
            :, :rows].reshape((-1,) + tuple(bound["random_samples"].shape[1:]))
    results = call(op, (folded,), bound)
    lead = (size,) + sample[:-(d + 1)]
    if not isinstance(results, tuple):
        return wrap(results.reshape(lead + tuple(results.shape[1:])), 0, level)
    return tuple(wrap(r.reshape(lead + tuple(r.shape[1:])), 0, level) for r in results)


_FOLDED = {"adaptive_max_pool1d": (1, _ADAPTIVE_MAX_CHECKS[1]),
           "adaptive_max_pool3d": (3, _ADAPTIVE_MAX_CHECKS[3]),
           "max_unpool2d": (2, _MAX_UNPOOL_CHECKS[2]), "max_unpool3d": (3, _MAX_UNPOOL_CHECKS[3]),
           "fractional_max_pool2d": (2, _FRACTIONAL_CHECKS[2]),
           "fractional_max_pool3d": (3, _FRACTIONAL_CHECKS[3])}
adaptive_max_pool1d.def_batch_rule(_fold_batch_rule)
adaptive_max_pool3d.def_batch_rule(_fold_batch_rule)
max_unpool2d.def_batch_rule(_fold_batch_rule)
max_unpool3d.def_batch_rule(_fold_batch_rule)
fractional_max_pool2d.def_batch_rule(_fold_batch_rule)
fractional_max_pool3d.def_batch_rule(_fold_batch_rule)

__all__ = ["adaptive_max_pool1d", "adaptive_max_pool3d", "adaptive_avg_pool3d", "max_unpool2d",
           "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "fractional_max_pool2d",
           "fractional_max_pool3d"]
