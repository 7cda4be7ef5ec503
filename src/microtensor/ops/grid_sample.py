"""Sampling an input at the points of a grid: ``grid_sampler`` (``F.grid_sample``'s op,
PyTorch's integer modes), the taps it reads (``_grid_sampler_taps``) and
``affine_grid_generator`` (``F.affine_grid``'s grid, a composite).

A grid point's coordinates go through PyTorch's ``GridSampler.h`` rules: unnormalised from
[-1, 1] to pixel positions (``align_corners`` says whether -1 and 1 are the centres or
the outer edges of the corner pixels), then clipped ("border") or reflected and clipped
("reflection"); bicubic instead pads each of its 4 x 4 taps.  Every mode is then a sum
over taps: ``out = sum_k input[tap_k] * valid_k * w_k(t)``, the weights a product over
the dims of polynomials in each dim's fraction ``t`` (``1 - t`` and ``t`` for bilinear,
Keys' cubic with A = -0.75 for bicubic, one tap of weight 1 for nearest).

``_grid_sampler_taps`` computes, for every grid point at once, the taps' flat positions in
the input plane, their validity (inside the input), the fractions ``t`` and ``dt/dgrid``
(a constant per point: the coordinate maps are piecewise affine).  The kernel gathers with
them in NumPy; the derivatives gather and scatter with them in microtensor ops, with
``t`` rebuilt as an affine function of the grid, so that they are differentiable again.
"""
import math

import numpy as np

from microtensor._C import meta
from microtensor._C.dispatch import batching
from microtensor._C.tensor import bool_, int64
from microtensor.ops.loops import _type_name, array_module, from_numpy_result, owned
from microtensor.ops.copy import linked
from microtensor.ops.factory import tensor
from microtensor.ops.registry import Sample, op
from microtensor.ops.shape import stack
from microtensor.vmap.helpers import call, same_level, to_front, wrap

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_CUBIC_A = -0.75


# --------------------------------------------------------------------------- checks

def check_grid_sampler(input_shape, input_dtype, grid_shape, grid_dtype, interpolation_mode,
                       padding_mode):
    """PyTorch's checks of ``grid_sampler``'s arguments, from shapes and dtypes alone (so
    that the batching rule makes them per sample)."""
    def sizes():
        return f"input with sizes {list(input_shape)} and grid with sizes {list(grid_shape)}"
    if interpolation_mode not in (BILINEAR, NEAREST, BICUBIC):
        raise ValueError(f"grid_sampler(): expected interpolation_mode to be 0 (bilinear), "
                         f"1 (nearest) or 2 (bicubic), but got: {interpolation_mode}")
    if padding_mode not in (ZEROS, BORDER, REFLECTION):
        raise ValueError(f"grid_sampler(): expected padding_mode to be 0 (zeros), 1 (border) "
                         f"or 2 (reflection), but got: {padding_mode}")
    if not input_shape or not grid_shape or input_shape[0] != grid_shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch "
                           f"size, but got {sizes()}")
    if grid_shape[-1] != len(input_shape) - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size "
                           f"{len(input_shape) - 2} in last dimension, but got grid with "
                           f"sizes {list(grid_shape)}")
    for i in range(2, len(input_shape)):
        if input_shape[i] <= 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial "
                               f"dimensions, but input has sizes {list(input_shape)} with "
                               f"dimension {i} being empty")
    if len(input_shape) not in (4, 5) or len(input_shape) != len(grid_shape):
        raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same number of "
                           f"dimensions, but got {sizes()}")
    if interpolation_mode == BICUBIC and len(input_shape) != 4:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input_dtype.is_floating_point:
        kernel = "grid_sampler_2d_cpu_kernel_impl" if len(input_shape) == 4 else \
            "grid_sampler3d_cpu"
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{_type_name(input_dtype)}'")
    if grid_dtype is not input_dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input_dtype)} but found "
                           f"{_type_name(grid_dtype)}")


# --------------------------------------------------------------------------- coordinates

def _unnormalize(coord, size, align_corners):
    """Pixel positions of normalised coordinates, and their derivative."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1), (size - 1) / 2
    return ((coord + 1) * size - 1) / 2, size / 2


def _clip(x, size, nan_to):
    """Positions clipped into [0, size - 1] (NaN to ``nan_to``), and their derivative: 0
    at and beyond the borders, as PyTorch's gradient counts the borders out of bounds."""
    inside = (x > 0) & (x < size - 1)
    return np.where(np.isnan(x), nan_to, np.clip(x, 0, size - 1)), inside


def _reflect(x, twice_low, twice_high):
    """Positions reflected by the bounds (given doubled) until they fall between them,
    and the derivative's sign (None when the span is empty: every position is 0)."""
    if twice_low == twice_high:
        return np.zeros_like(x), None
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    shifted = x - low
    sign = np.where(shifted < 0, -1, 1)
    distance = np.abs(shifted)
    extra = np.fmod(distance, span)
    even = np.fmod(np.floor(distance / span), 2) == 0
    return np.where(even, extra + low, span - extra + low), np.where(even, sign, -sign)


def _pad(x, size, padding_mode, align_corners, nan_to):
    """PyTorch's ``compute_coordinates``: positions outside the input moved in by the
    padding mode, and the derivative's factor (1 for "zeros")."""
    if padding_mode == ZEROS:
        return x, 1
    factor = 1
    if padding_mode == REFLECTION:
        bounds = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        x, sign = _reflect(x, *bounds)
        factor = 0 if sign is None else sign
    x, inside = _clip(x, size, nan_to)
    return x, factor * inside


def _dim_taps(coord, size, mode, padding_mode, align_corners, d):
    """One dim of every grid point of a ``d``-d sampling: the taps' positions (a list),
    the fraction ``t`` and ``dt/dcoord``."""
    # PyTorch's 2-d CPU kernel clips NaN to 0, its 3-d one (std::min of std::max) to the
    # last position
    nan_to = 0 if d == 2 else size - 1
    x, slope = _unnormalize(coord, size, align_corners)
    if mode == BICUBIC:       # the taps themselves are padded, not the position
        first = np.floor(x)
        positions = [_pad(first + (k - 1), size, padding_mode, align_corners, nan_to)[0]
                     for k in range(4)]
        # truncated as PyTorch's ``static_cast``: reflected taps are whole numbers
        taps = [np.trunc(p) for p in positions]
        return taps, x - first, x * 0 + slope
    x, factor = _pad(x, size, padding_mode, align_corners, nan_to)
    if mode == NEAREST:
        return [np.rint(x)], np.zeros_like(x), np.zeros_like(x)
    first = np.floor(x)
    return [first, first + 1], x - first, (x * 0 + slope * factor).astype(x.dtype)


def _taps_arrays(grid, sizes, mode, padding_mode, align_corners):
    """``_grid_sampler_taps`` on arrays: for a grid (..., d) and spatial sizes (d,), the
    taps' flat positions (..., K) (0 where invalid), validity (..., K), ``t`` and
    ``dt/dgrid`` (..., d), in grid dim order (x first: the last spatial dim)."""
    d = len(sizes)
    flat = valid = None
    fractions, slopes = [], []
    stride = 1
    for j in range(d):      # grid component j: spatial dim d - 1 - j
        size = sizes[d - 1 - j]
        with np.errstate(invalid="ignore"):     # NaN and infinite points: NaN fractions
            taps, t, slope = _dim_taps(grid[..., j], size, mode, padding_mode,
                                       align_corners, d)
        positions = np.stack(taps, -1)
        inside = (positions >= 0) & (positions < size)   # False for NaN positions too
        index = np.where(inside, positions, 0).astype(np.int64) * stride
        if flat is None:
            flat, valid = index, inside
        else:   # combined with the dims before: tap (k_0, ..., k_j) at k_0 + K0 (k_1 + ...)
            taps_shape = grid.shape[:-1] + (flat.shape[-1] * index.shape[-1],)
            flat = (flat[..., None, :] + index[..., :, None]).reshape(taps_shape)
            valid = (valid[..., None, :] & inside[..., :, None]).reshape(taps_shape)
        fractions.append(t)
        slopes.append(slope)
        stride *= size
    return np.where(valid, flat, 0), valid, np.stack(fractions, -1), np.stack(slopes, -1)


def _tap_weights(fractions, mode, grad_dim=None):
    """The taps' weights (a list over the taps, in ``_taps_arrays``' order) from each dim's
    fraction, or their derivative with respect to dim ``grad_dim``'s fraction.  Written
    with arithmetic operators only: it serves arrays and tensors alike."""
    weights = [fractions[0] * 0 + 1]    # an array or tensor: the taps can be stacked
    for j, t in enumerate(fractions):
        if mode == NEAREST:
            factors = (0,) if j == grad_dim else (1,)
        elif mode == BICUBIC:
            factors = _cubic_slopes(t) if j == grad_dim else _cubic_weights(t)
        else:
            factors = (-1, 1) if j == grad_dim else (1 - t, t)
        weights = [w * f for f in factors for w in weights]
    return weights


def _near(x):            # Keys' cubic for |x| <= 1
    return ((_CUBIC_A + 2) * x - (_CUBIC_A + 3)) * x * x + 1


def _far(x):             # and for 1 < |x| < 2
    return ((_CUBIC_A * x - 5 * _CUBIC_A) * x + 8 * _CUBIC_A) * x - 4 * _CUBIC_A


def _near_slope(x):
    return (3 * (_CUBIC_A + 2) * x - 2 * (_CUBIC_A + 3)) * x


def _far_slope(x):
    return (3 * _CUBIC_A * x - 10 * _CUBIC_A) * x + 8 * _CUBIC_A


def _cubic_weights(t):
    return _far(t + 1), _near(t), _near(1 - t), _far(2 - t)


def _cubic_slopes(t):
    return _far_slope(t + 1), _near_slope(t), -_near_slope(1 - t), -_far_slope(2 - t)


# --------------------------------------------------------------------------- the taps

def _taps_samples(make):
    return [Sample(make(2, 3, 2, low=-1.3, high=1.3), (4, 5), BILINEAR, ZEROS, False),
            Sample(make(3, 2, 2, low=-3.0, high=3.0), (3, 4), BILINEAR, REFLECTION, True),
            Sample(make(2, 2, 3, low=-1.5, high=1.5), (2, 3, 4), NEAREST, BORDER, False),
            Sample(make(2, 2, 2, low=-2.0, high=2.0), (4, 3), BICUBIC, REFLECTION, False)]


@op(method=False, function=False, differentiable=False, samples=_taps_samples)
def _grid_sampler_taps(grid, sizes, interpolation_mode, padding_mode, align_corners):
    """For every point of ``grid`` (..., d) sampling spatial ``sizes``: the taps' flat
    positions and validity (..., K), the fractions and ``dfraction/dgrid`` (..., d)."""
    flat, valid, t, slope = _taps_arrays(grid._array(), tuple(sizes), interpolation_mode,
                                         padding_mode, align_corners)
    return (from_numpy_result(flat, int64), from_numpy_result(valid, bool_),
            from_numpy_result(t, grid._dtype), from_numpy_result(slope, grid._dtype))


@_grid_sampler_taps.def_batch_rule
def _grid_sampler_taps(op, level, args, kwargs):
    """Point by point: the batch dim is one more leading dim of the grid."""
    bound = op.bind(args, kwargs)
    grid = bound.pop("grid")
    results = call(op, (to_front(grid._value, grid._bdim),), bound)
    return tuple(wrap(r, 0, level) for r in results)


# --------------------------------------------------------------------------- grid_sampler

def _grid_sampler_samples(make):
    def grid(*shape, low=-1.25, high=1.25):
        return make(*shape, low=low, high=high)
    return [Sample(make(2, 2, 4, 5), grid(2, 3, 2, 2), BILINEAR, ZEROS, False),
            Sample(make(1, 2, 3, 4), grid(1, 2, 3, 2, low=-3.0, high=3.0), BILINEAR,
                   REFLECTION, True),
            Sample(make(2, 1, 3, 3), grid(2, 2, 2, 2), BILINEAR, BORDER, False),
            Sample(make(2, 2, 3, 4), grid(2, 3, 2, 2), NEAREST, ZEROS, True),
            Sample(make(1, 2, 4, 4), grid(1, 2, 3, 2, low=-2.0, high=2.0), BICUBIC,
                   REFLECTION, False),
            Sample(make(2, 1, 3, 4), grid(2, 2, 2, 2), BICUBIC, ZEROS, True),
            Sample(make(1, 2, 3, 2, 3), grid(1, 2, 2, 1, 3), BILINEAR, BORDER, True),
            Sample(make(2, 1, 2, 3, 2), grid(2, 1, 2, 2, 3, low=-2.5, high=2.5), BILINEAR,
                   REFLECTION, False)]


def _points(grid):
    """The grid's points as (N, P, d)."""
    return grid.reshape(grid.shape[0], math.prod(grid.shape[1:-1]), grid.shape[-1])


@op(method=False, samples=_grid_sampler_samples, inputs=("input", "grid"))
def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """``input`` (N, C, *spatial) sampled at the points of ``grid`` (N, *out, d): the
    result is (N, C, *out).  One gather of every point's taps, one weighted sum."""
    check_grid_sampler(input._sizes, input._dtype, grid._sizes, grid._dtype,
                       interpolation_mode, padding_mode)
    n, c = input._sizes[:2]
    sizes = input._sizes[2:]
    # in the tensors' own dtype, float16 and bfloat16 too: PyTorch's CPU kernel computes
    # their coordinates and weights in that type
    points = _points(grid._array())
    flat, valid, t, _ = _taps_arrays(points, sizes, interpolation_mode, padding_mode,
                                     align_corners)
    weights = _tap_weights([t[..., j] for j in range(len(sizes))], interpolation_mode)
    weights = np.stack(weights, -1)
    # PyTorch's 2-d kernel weighs invalid taps' zeros (a NaN weight stays NaN), its 3-d
    # kernel skips them
    weights = weights * valid if len(sizes) == 2 else np.where(valid, weights, 0)
    rows = _tap_rows(input._array(), flat)
    out = 0
    for k in range(flat.shape[-1]):        # the taps, in order (at most 16)
        out = out + rows[:, :, k] * weights[..., k, None]
    return from_numpy_result(out.transpose(0, 2, 1).reshape((n, c) + grid._sizes[1:-1]),
                             input._dtype)


def _tap_rows(input, flat):
    """The input's values at the taps (N, P, K) of each point, channels last: (N, P, K, C),
    each tap one contiguous row of channels."""
    n, c = input.shape[:2]
    planes = input.reshape(n, c, math.prod(input.shape[2:])).transpose(0, 2, 1)
    xp = array_module(planes)
    return xp.ascontiguousarray(planes)[xp.arange(n)[:, None, None], flat]


def _taps(grid, input_shape, interpolation_mode, padding_mode, align_corners):
    """The taps of ``grid``'s points (``_grid_sampler_taps``, points as (N, P)), the
    fractions as affine functions of the grid (their value exact, their derivative
    ``dt/dgrid``) and ``dt/dgrid``, lists over the dims."""
    points = _points(grid)
    flat, valid, t, slope = call(_grid_sampler_taps, (
        points, tuple(input_shape[2:]), interpolation_mode, padding_mode, align_corners),
        None)
    moved = t + slope * (points - points.detach())
    d = len(input_shape) - 2
    return flat, valid, [moved[..., j] for j in range(d)], [slope[..., j] for j in range(d)]


@grid_sampler.def_derivative("input")
def grid_sampler(grad, input_shape, grid, interpolation_mode, padding_mode, align_corners):
    # each tap's share of the output's gradient, added at the tap
    flat, valid, fractions, _ = _taps(grid, input_shape, interpolation_mode, padding_mode,
                                      align_corners)
    weights = stack(_tap_weights(fractions, interpolation_mode), -1) * valid     # (N, P, K)
    n, c = input_shape[:2]
    points, taps = flat.shape[1:]
    shares = grad.reshape(n, c, points, 1) * weights.unsqueeze(1)
    index = flat.reshape(n, 1, points * taps).expand(n, c, points * taps)
    plane = math.prod(input_shape[2:])
    return grad.new_zeros((n, c, plane)).scatter_add(
        2, index, shares.reshape(n, c, points * taps)).reshape(tuple(input_shape))


@grid_sampler.def_derivative("grid")
def grid_sampler(grad, input, grid, interpolation_mode, padding_mode, align_corners):
    if interpolation_mode == NEAREST:      # piecewise constant in the grid
        # zeros with a graph when an input has one, as from PyTorch's one backward op
        return linked(grid.new_zeros(tuple(grid.shape)), input, grid)
    input_shape = tuple(input.shape)
    flat, valid, fractions, factors = _taps(grid, input_shape, interpolation_mode,
                                            padding_mode, align_corners)
    n, c = input_shape[:2]
    points, taps = flat.shape[1:]
    index = flat.reshape(n, 1, points * taps).expand(n, c, points * taps)
    values = input.reshape(n, c, math.prod(input_shape[2:])).gather(2, index).reshape(
        n, c, points, taps)
    # d out / d tap weight, summed over the channels: (N, P, K)
    pulls = (grad.reshape(n, c, points, 1) * values).sum(1) * valid
    slopes = [(pulls * stack(_tap_weights(fractions, interpolation_mode, j), -1)).sum(-1) *
              factors[j] for j in range(len(fractions))]
    return stack(slopes, -1).reshape(tuple(grid.shape))


@grid_sampler.def_unrecorded_backward
def grid_sampler(grad, wanted, input_shape, input, grid, interpolation_mode, padding_mode,
                 align_corners):
    """The formulas on NumPy arrays when nothing records and no vmap is active: the
    input's gradient as one weighted ``bincount`` over (tap, channel), the grid's from one
    gather of the taps.  float16, bfloat16 and other array libraries go to the formulas."""
    want_input, want_grid = wanted
    tensors = [grad, grid] + ([input] if want_grid else [])
    if batching() is not None or any(type(t._array()) is not np.ndarray or
                                     t._dtype.name not in ("float32", "float64")
                                     for t in tensors):
        return None
    # (each value is saved only for the formulas that will run: the input's shape for the
    # input's, the input itself for the grid's)
    input_shape = tuple(input_shape) if want_input else input._sizes
    n, c = input_shape[:2]
    sizes = input_shape[2:]
    flat, valid, t, slope = _taps_arrays(_points(grid._array()), sizes, interpolation_mode,
                                         padding_mode, align_corners)
    points, count = flat.shape[1:]
    fractions = [t[..., j] for j in range(len(sizes))]
    outgoing = grad._array().reshape(n, c, points).transpose(0, 2, 1)      # (N, P, C)
    grad_input = grad_grid = None
    if want_input:
        weights = np.stack(_tap_weights(fractions, interpolation_mode), -1) * valid
        plane = math.prod(sizes)
        # every (tap, channel) share added at its input position, in one bincount
        at = ((flat + (np.arange(n) * plane)[:, None, None])[..., None] * c +
              np.arange(c)).ravel()
        shares = (weights[..., None] * outgoing[:, :, None, :]).ravel()
        sums = np.bincount(at, shares, n * plane * c).reshape(n, plane, c)
        grad_input = from_numpy_result(sums.transpose(0, 2, 1).reshape(input_shape),
                                       grad._dtype)
    if want_grid:
        if interpolation_mode == NEAREST:
            return grad_input, from_numpy_result(np.zeros(grid._sizes, grid._dtype.np))
        pulls = np.einsum("npkc,npc->npk", _tap_rows(input._array(), flat), outgoing) * valid
        slopes = [(pulls * np.stack(_tap_weights(fractions, interpolation_mode, j), -1)).sum(
            -1) * slope[..., j] for j in range(len(sizes))]
        grad_grid = from_numpy_result(np.stack(slopes, -1).reshape(grid._sizes), grid._dtype)
    return grad_input, grad_grid


@grid_sampler.def_batch_rule
def grid_sampler(op, level, args, kwargs):
    """One call with the vmap batch folded in: into N when both are batched, into the
    channels when only the input is, into the first output dim when only the grid is."""
    bound = op.bind(args, kwargs)
    input, grid = bound.pop("input"), bound.pop("grid")
    check_grid_sampler(tuple(input.shape), input.dtype, tuple(grid.shape), grid.dtype,
                       bound["interpolation_mode"], bound["padding_mode"])
    if same_level(input, level) and same_level(grid, level):
        x, g = to_front(input._value, input._bdim), to_front(grid._value, grid._bdim)
        size, n = x.shape[:2]
        out = call(op, (x.reshape((size * n,) + tuple(x.shape[2:])),
                        g.reshape((size * n,) + tuple(g.shape[2:]))), bound)
        return wrap(out.reshape((size, n) + tuple(out.shape[1:])), 0, level)
    if same_level(input, level):
        x = to_front(input._value, input._bdim).movedim(0, 1)     # (N, B, C, *spatial)
        n, size, c = x.shape[:3]
        out = call(op, (x.reshape((n, size * c) + tuple(x.shape[3:])), grid), bound)
        return wrap(out.reshape((n, size, c) + tuple(out.shape[2:])), 1, level)
    g = to_front(grid._value, grid._bdim).movedim(0, 1)           # (N, B, *out, d)
    n, size, first = g.shape[:3]
    out = call(op, (input, g.reshape((n, size * first) + tuple(g.shape[3:]))), bound)
    return wrap(out.reshape(tuple(out.shape[:2]) + (size, first) + tuple(out.shape[3:])), 2,
                level)


# --------------------------------------------------------------------------- affine_grid

def _base_coordinates(n, align_corners):
    """PyTorch's ``linspace_from_neg_one``: ``n`` positions spanning [-1, 1], pulled in
    to the pixel centres without ``align_corners``; 0 for one position."""
    if n <= 1:
        return np.zeros(n)
    positions = np.linspace(-1.0, 1.0, n)
    return positions if align_corners else positions * (n - 1) / n


def _affine_samples(make):
    return [Sample(make(2, 2, 3), (2, 3, 4, 5), False),
            Sample(make(1, 2, 3), (1, 1, 3, 2), True),
            Sample(make(2, 3, 4), (2, 1, 2, 3, 2), False),
            Sample(make(1, 3, 4), (1, 2, 3, 1, 2), True)]


@op(kind="composite", inputs=("theta",), method=False, samples=_affine_samples)
def affine_grid_generator(theta, size, align_corners):
    """The grid (N, *spatial, d) of the affine maps ``theta`` (N, d, d + 1) applied to the
    output pixels' normalised coordinates (x first), for ``size`` (N, C, *spatial)."""
    spatial = tuple(size[2:])
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if theta.shape[0] != size[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{size[0]}, {len(spatial) + 1}] but got: "
                           f"[{theta.shape[0]}, {len(spatial) + 1}].")
    # the homogeneous coordinates (x, y[, z], 1) of every output pixel, x the last dim;
    # PyTorch's check of their size comes before any is made
    meta.check_storage_nbytes((size[0],) + spatial + (len(spatial) + 1,), theta.itemsize)
    axes = [_base_coordinates(n, align_corners) for n in reversed(spatial)]
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]
    base = np.stack(list(mesh) + [np.ones(spatial)], -1).reshape(-1, len(spatial) + 1)
    points = tensor(base, dtype=theta.dtype, device=theta.device) @ theta.transpose(1, 2)
    return owned(points.reshape((size[0],) + spatial + (len(spatial),)))
