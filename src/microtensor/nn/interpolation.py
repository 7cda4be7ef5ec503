"""``F.interpolate`` (and the deprecated ``F.upsample*``): resizing the spatial dims of an
(N, C, *spatial) input in the modes "nearest", "nearest-exact", "linear", "bilinear",
"bicubic", "trilinear" and "area", with PyTorch's argument rules and source coordinates.

Every mode is separable: the nearest modes pick one source position per output position
along each dim (an ``index_select``), the others take fixed weights of the source
positions (a product with an (out, in) weight matrix per dim: tent weights for the linear
modes, Keys' cubic with A = -0.75 for bicubic, window averages for "area", which is the
adaptive average pool).  Written with those ops, ``interpolate`` gets its derivatives
(``index_add``, the transposed matrices) and its batching rules from them.
"""
import math
import warnings

import numpy as np

from microtensor._C.meta import contiguous_format
from microtensor.ops.arguments import int_tuple
from microtensor.ops.loops import in_format, memory_format_of

MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
# the number of spatial dims a mode needs (the others take 1, 2 or 3)
_SPATIAL_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_CUBIC_A = -0.75


def _source_scale(n_in, n_out, scale):
    """PyTorch's ``compute_scales_value``: the user's scale factor inverted, else the size
    ratio."""
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _nearest_positions(n_in, n_out, scale, exact):
    """PyTorch's ``nearest_neighbor_compute_source_index`` and its "exact" form, in its
    float32 arithmetic."""
    j = np.arange(n_out)
    ratio = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
        np.float32(n_in) / np.float32(n_out)
    if exact:       # (dst + 0.5) * scale in double, floored as a float
        src = ((j + 0.5) * np.float64(ratio)).astype(np.float32)
    else:           # dst * scale in float
        src = j.astype(np.float32) * ratio
    return np.minimum(np.floor(src).astype(np.int64), n_in - 1)


def _source_coordinates(n_in, n_out, scale, align_corners, cubic):
    """PyTorch's ``area_pixel_compute_source_index`` for every output position."""
    j = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return j * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    src = (j + 0.5) * _source_scale(n_in, n_out, scale) - 0.5
    return src if cubic else np.maximum(src, 0.0)


def _linear_weights(n_in, n_out, scale, align_corners):
    src = _source_coordinates(n_in, n_out, scale, align_corners, cubic=False)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    frac = src - lo
    return [(lo, 1.0 - frac), (np.minimum(lo + 1, n_in - 1), frac)]


def _cubic_weights(n_in, n_out, scale, align_corners):
    """Keys' cubic convolution on the 4 neighbours, reads clamped to the edges."""
    src = _source_coordinates(n_in, n_out, scale, align_corners, cubic=True)
    first = np.floor(src).astype(np.int64)
    t = src - first

    def near(x):            # |x| <= 1
        return ((_CUBIC_A + 2) * x - (_CUBIC_A + 3)) * x * x + 1

    def far(x):             # 1 < |x| < 2
        return ((_CUBIC_A * x - 5 * _CUBIC_A) * x + 8 * _CUBIC_A) * x - 4 * _CUBIC_A
    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    return [(np.clip(first - 1 + k, 0, n_in - 1), w) for k, w in enumerate(weights)]


def _area_weights(n_in, n_out):
    """Adaptive average pooling's windows: [floor(i in / out), ceil((i + 1) in / out))."""
    i = np.arange(n_out)
    start, end = (i * n_in) // n_out, ((i + 1) * n_in + n_out - 1) // n_out
    cols = np.arange(n_in)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return inside / (end - start)[:, None]


def _weight_matrix(mode, n_in, n_out, scale, align_corners):
    """The (n_out, n_in) weights of one dim."""
    if mode == "area":
        return _area_weights(n_in, n_out)
    taps = (_cubic_weights if mode == "bicubic" else _linear_weights)(n_in, n_out, scale,
                                                                       align_corners)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for columns, weights in taps:
        np.add.at(m, (rows, columns), weights)
    return m


def _check_mode(mode, d, ndim):
    needed = _SPATIAL_DIMS.get(mode)
    if needed is not None and d in (1, 2, 3) and d != needed:
        if mode == "bicubic":
            raise NotImplementedError(
                f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {ndim}D) "
                f"for the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos "
                f"| area | nearest-exact (got {mode})")
        raise NotImplementedError(f"Got {ndim}D input, but {mode} mode needs {needed + 2}D "
                                  f"input")
    if mode not in MODES or d not in (1, 2, 3):
        if mode == "lanczos":
            raise NotImplementedError("interpolate: mode 'lanczos' (antialiased) is not "
                                      "supported")
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {ndim}D) for the "
            f"modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
            f"nearest-exact (got {mode})")


def _output_size_and_scales(input, size, scale_factor, mode, recompute_scale_factor):
    """PyTorch's reading of ``size`` / ``scale_factor``: the output size, and the scale
    factors the coordinates use (None where the size ratio is used)."""
    d = input.dim() - 2
    spatial = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != d:
                raise ValueError(
                    f"Input and output must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {spatial} and output size of "
                    f"{size}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                    f"and output size in (o1, o2, ...,oK) format.")
            if not all(isinstance(n, int) for n in size):
                raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, "
                                f"int] or Tuple[int, int, int], but got size with types "
                                f"{[type(n) for n in size]}")
            output = list(size)
        else:
            output = [size] * d
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit "
                             "size.")
        return list(int_tuple(output, "output_size")), [None] * d
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != d:
            raise ValueError(
                f"Input and scale_factor must have the same number of spatial dimensions, "
                f"but got input with spatial dimensions of {spatial} and scale_factor of "
                f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK)"
                f" format and scale_factor in (s1, s2, ...,sK) format.")
        scales = [float(s) for s in scale_factor]
    else:
        scales = [float(scale_factor)] * d
    output = [math.floor(n * s) for n, s in zip(spatial, scales)]
    if recompute_scale_factor or mode == "area":
        scales = [None] * d
    return output, scales


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of (N, C, *spatial): see the module docstring."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    else:
        align_corners = bool(align_corners)
    d = input.dim() - 2
    output, scales = _output_size_and_scales(input, size, scale_factor, mode,
                                             recompute_scale_factor)
    if antialias:
        if not (mode in ("bilinear", "bicubic", "lanczos") and input.dim() == 4):
            raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and "
                             "lanczos modes and requires a 4-D tensor as input")
        raise NotImplementedError("interpolate: antialias=True is not supported")
    _check_mode(mode, d, input.dim())
    spatial = tuple(input.shape[2:])
    if min(spatial) <= 0 or min(output) <= 0:
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"{_sizes(spatial)} output {_sizes(output)}")
    from microtensor.ops.factory import tensor
    out = input
    for i, (n_in, n_out, scale) in enumerate(zip(spatial, output, scales)):
        dim = 2 + i
        if n_in == n_out and (mode in ("linear", "bilinear", "trilinear") or
                              (mode == "nearest" and len(spatial) == 2)):
            continue            # PyTorch copies such a dim whatever the scale factor says
        if mode in ("nearest", "nearest-exact"):
            positions = _nearest_positions(n_in, n_out, scale, mode == "nearest-exact")
            out = out.index_select(dim, tensor(positions, device=input.device))
        else:
            m = tensor(_weight_matrix(mode, n_in, n_out, scale, align_corners),
                       dtype=input.dtype, device=input.device)
            out = (out.movedim(dim, -1) @ m.T).movedim(-1, dim)
    # PyTorch's layout: the input's suggested format, but "area" in 3-d (its adaptive
    # average pooling) is contiguous unless it pools to one element
    fmt = contiguous_format if mode == "area" and d == 3 and tuple(output) != (1, 1, 1) else \
        memory_format_of(input)
    return out.clone(memory_format=fmt) if out is input else in_format(out, fmt)


def _sizes(sizes):
    names = ("D", "H", "W")[3 - len(sizes):]
    return "(" + ", ".join(f"{n}: {s}" for n, s in zip(names, sizes)) + ")"


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use "
                  "nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use "
                  "nn.functional.interpolate(..., mode='bilinear', align_corners=True) "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]
