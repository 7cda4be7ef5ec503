"""Convolution: one op, ``convolution`` (PyTorch's ``aten::convolution``: 1-, 2- and 3-d,
stride, padding, dilation, groups, transposed with output padding), and the
``conv1d/2d/3d`` and ``conv_transpose1d/2d/3d`` functions written with it.

The kernel is im2col then one BLAS product: the (zero-padded) input is seen through a
strided window view (no copy), which one reshape copies into columns that ``np.matmul``
multiplies with the weight, group by group in one broadcast call.  A transposed
convolution is one product too, whose blocks col2im adds into place.  The derivative is
written with
``convolution`` itself (the gradient of a convolution's input is a transposed convolution
and vice versa; the weight's gradient is a convolution of the input with the incoming
gradient, batch and channels swapped), so it is differentiable to any order; its batching
rule follows the derivative.

Memory format as PyTorch's: when the input or the weight is channels_last, so is the
result, and the columns are gathered in that order (channels innermost), reading the input
without transposing it.
"""
import math
import threading

import numpy as np

from microtensor._C import meta, nnkernels
from microtensor._C.meta import contiguous_format
from microtensor._C.tensor import bool_, empty_strided_unchecked
from microtensor._dtype import info
from microtensor.ops.arguments import int_arg, int_tuple
from microtensor.ops.copy import linked
from microtensor.ops.loops import _type_name, array_module, conj_if_complex, device_of
from microtensor.ops import ghost, layout
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import (batch_size, call, front_or_expanded, same_level, to_front,
                                      wrap)

_INPUTS = ("input", "weight", "bias")

# --------------------------------------------------------------------------- arguments


def expand_param(value, dims, name):
    """An int or a sequence of ``dims`` ints (or of one int) as a tuple of ``dims`` ints."""
    if isinstance(value, int):
        return (int_arg(value, name),) * dims
    value = int_tuple(value, name)
    if len(value) == 1:
        return value * dims
    if len(value) != dims:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {dims} "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(value)}")
    return value


def _sizes_text(sizes):
    return " x ".join(str(s) for s in sizes)


def conv_params(weight_dim, stride, padding, dilation, output_padding):
    """The parameters as tuples, one entry per spatial dim."""
    dims = weight_dim - 2
    return (expand_param(stride, dims, "stride"), expand_param(padding, dims, "padding"),
            expand_param(dilation, dims, "dilation"),
            expand_param(output_padding, dims, "output_padding"))


def check_convolution(input, weight, bias, stride, padding, dilation, transposed,
                      output_padding, groups):
    """PyTorch's checks of ``convolution``'s arguments for one sample; the result's shape
    and the parameters as tuples.  Only shapes and dtypes are read (batching rules call it
    on per-sample tensors)."""
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if weight.dim() < 3:
        raise RuntimeError(f"weight should have at least three dimensions, but got "
                           f"{weight.dim()}-dimensional weight")
    stride, padding, dilation, output_padding = conv_params(weight.dim(), stride, padding,
                                                            dilation, output_padding)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    x_shape, w_shape = tuple(input.shape), tuple(weight.shape)
    if len(x_shape) != len(w_shape):
        raise RuntimeError(f"Expected {len(w_shape)}-dimensional input for {len(w_shape)}-"
                           f"dimensional weight {list(w_shape)}, but got {len(x_shape)}-"
                           f"dimensional input of size {list(x_shape)} instead")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input.dtype)} but found "
                           f"{_type_name(weight.dtype)}")
    if input.dtype is bool_:
        raise NotImplementedError(f"\"slow_conv2d_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    channels = x_shape[1]
    if transposed:
        if w_shape[0] != channels:
            raise RuntimeError(f"Given transposed=1, weight of size {list(w_shape)}, expected "
                               f"input{list(x_shape)} to have {w_shape[0]} channels, but got "
                               f"{channels} channels instead")
        if any(p >= s and p >= d for p, s, d in zip(output_padding, stride, dilation)):
            raise RuntimeError(f"output padding must be smaller than either stride or "
                               f"dilation, but got output_padding={list(output_padding)}, "
                               f"stride={list(stride)}, dilation={list(dilation)}")
        out_channels = w_shape[1] * groups
    else:
        if w_shape[0] < groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be at least "
                               f"{groups} at dimension 0, but got weight of size "
                               f"{list(w_shape)} instead")
        if w_shape[0] % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by "
                               f"{groups} at dimension 0, but got weight of size "
                               f"{list(w_shape)} instead")
        if w_shape[1] * groups != channels:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(w_shape)}, "
                               f"expected input{list(x_shape)} to have "
                               f"{w_shape[1] * groups} channels, but got {channels} channels "
                               f"instead")
        out_channels = w_shape[0]
    if channels % groups:
        raise RuntimeError(f"Given groups={groups}, expected input channels {channels} to be "
                           f"divisible by groups")
    if bias is not None:
        if tuple(bias.shape) != (out_channels,):
            raise RuntimeError(f"Given weight of size {list(w_shape)}, expected bias to be "
                               f"1-dimensional with {out_channels} elements, but got bias of "
                               f"size {list(bias.shape)} instead")
        if bias.dtype is not input.dtype:
            raise RuntimeError(f"Input type ({info(input.dtype).cpp_name}) and bias type "
                               f"({info(bias.dtype).cpp_name}) should be the same")
    kernel = w_shape[2:]
    spatial = x_shape[2:]
    extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    if transposed:
        out = tuple((i - 1) * s - 2 * p + e + o for i, s, p, e, o in
                    zip(spatial, stride, padding, extent, output_padding))
        if any(o <= 0 for o in out):
            raise RuntimeError(f"Given input size per channel: ({_sizes_text(spatial)}). "
                               f"Calculated output size per channel: ({_sizes_text(out)}). "
                               f"Output size is too small")
    else:
        padded = tuple(i + 2 * p for i, p in zip(spatial, padding))
        if any(p < e for p, e in zip(padded, extent)):
            raise RuntimeError(f"Calculated padded input size per channel: "
                               f"({_sizes_text(padded)}). Kernel size: ({_sizes_text(extent)})"
                               f". Kernel size can't be greater than actual input size")
        out = tuple((p - e) // s + 1 for p, e, s in zip(padded, extent, stride))
    shape = (x_shape[0], out_channels) + out
    return shape, (stride, padding, dilation, output_padding)


def channels_last_result(input, weight):
    """Whether the result is channels_last(_3d): PyTorch's rule, when either operand is."""
    return input.dim() in (4, 5) and any(
        meta.suggest_memory_format(t._sizes, t._strides) is not contiguous_format
        for t in (input, weight))


# --------------------------------------------------------------------------- kernel

# Per-thread scratch buffers for the columns and blocks of the kernels, kept between calls:
# fresh arrays of tens of MiB cost page faults on every call (a third of a 3x3 convolution
# on 32 channels).  Buffers over the cap are not kept.
_workspaces = threading.local()
_WORKSPACE_CAP = 64 << 20


def _workspace(name, shape, dtype):
    """An uninitialised C-contiguous NumPy array of ``shape`` and ``dtype`` in this thread's
    buffer ``name``, valid until the next call with that name."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > _WORKSPACE_CAP:
        return np.empty(shape, dtype)
    buffers = _workspaces.__dict__
    buffer = buffers.get(name)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = buffers[name] = np.empty(nbytes, np.uint8)
    return buffer[:nbytes].view(dtype).reshape(shape)


def _padded(x, padding, channels_last):
    """``x`` (N, C, *spatial) with ``padding`` zeros on both sides of each spatial dim, in a
    fresh buffer laid out channels last if asked; ``x`` itself without padding."""
    if not any(padding):
        return x
    xp = array_module(x)
    room = tuple(n + 2 * p for n, p in zip(x.shape[2:], padding))
    if channels_last:
        buffer = np.moveaxis(xp.zeros((x.shape[0],) + room + (x.shape[1],), x.dtype), -1, 1)
    else:
        buffer = xp.zeros(x.shape[:2] + room, x.dtype)
    buffer[(slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in
                                              zip(padding, x.shape[2:]))] = x
    return buffer


def _convolve(x, w, stride, dilation, groups, out, channels_last):
    """im2col and one product: ``out`` (N, O, *spatial out) = the convolution of the
    already padded ``x`` (N, C, *spatial) with ``w`` (O, C/groups, *kernel)."""
    n, channels = x.shape[:2]
    dims = x.ndim - 2
    o_per_group = w.shape[0] // groups
    c_per_group = channels // groups
    kernel, spatial = w.shape[2:], out.shape[2:]
    rows = math.prod(spatial)
    # a window view (no copy; NumPy functions, so that CuPy arrays dispatch to CuPy's):
    # (N, groups, C/groups, *out positions, *kernel offsets)
    extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    windows = np.lib.stride_tricks.sliding_window_view(x, extent, axis=tuple(range(2, 2 + dims)))
    windows = windows[(slice(None), slice(None))
                      + tuple(slice(None, o * s_, s_) for o, s_ in zip(spatial, stride))
                      + tuple(slice(None, None, d) for d in dilation)]
    windows = windows.reshape((n, groups, c_per_group) + windows.shape[2:])
    position, offset = tuple(range(3, 3 + dims)), tuple(range(3 + dims, 3 + 2 * dims))
    weights = w.reshape((groups, o_per_group, c_per_group) + kernel)
    if channels_last:
        # columns (N, groups, positions, kernel * channels), channels innermost as in x
        columns = windows.transpose((0, 1) + position + offset + (2,)).reshape(
            n, groups, rows, -1)
        weights = weights.transpose((0, 1) + tuple(range(3, 3 + dims)) + (2,)).reshape(
            groups, o_per_group, -1)
        # out is (N, *spatial, O) in memory: per group a (positions, O/groups) block
        target = np.moveaxis(out, 1, -1).reshape(n, rows, groups, o_per_group)
        if groups == 1:
            np.matmul(columns, weights.transpose(0, 2, 1), out=target.transpose(0, 2, 1, 3))
        else:
            target[...] = np.matmul(columns, weights.transpose(0, 2, 1)).transpose(0, 2, 1, 3)
    elif kernel[-1] > spatial[-1]:
        # long kernel rows, few positions (a weight gradient): the columns of all images
        # side by side, (groups, N * positions, channels * kernel), copied along the
        # kernel's rows, and one product per group
        if dims == 2 and groups == 1 and nnkernels.supports(x):
            columns = nnkernels.im2col2d(
                x, kernel, stride, dilation, spatial, True,
                _workspace("columns", (n * rows, channels * math.prod(kernel)), x.dtype))[None]
        else:
            columns = windows.transpose((1, 0) + position + (2,) + offset).reshape(
                groups, n * rows, -1)
        products = np.matmul(weights.reshape(groups, o_per_group, -1),
                             columns.transpose(0, 2, 1))
        out.reshape(n, groups, o_per_group, rows)[...] = products.reshape(
            groups, o_per_group, n, rows).transpose(2, 0, 1, 3)
    else:
        # columns (N, groups, channels * kernel, positions): weights @ columns per group
        if dims == 2 and nnkernels.supports(x):
            columns = nnkernels.im2col2d(
                x, kernel, stride, dilation, spatial, False,
                _workspace("columns", (n, channels * math.prod(kernel), rows), x.dtype)
            ).reshape(n, groups, -1, rows)
        else:
            columns = windows.transpose((0, 1, 2) + offset + position).reshape(
                n, groups, -1, rows)
        np.matmul(weights.reshape(groups, o_per_group, -1), columns,
                  out=out.reshape(n, groups, o_per_group, rows))


def _transposed(x, w, stride, padding, dilation, groups, out):
    """A transposed convolution as one product and col2im: every input position times the
    weight gives a block of the output (N, groups, C_out/groups * kernel, positions), and
    each kernel offset's share is added at its place (a loop over the kernel's offsets, not
    over elements; in C plane by plane for float32/float64 NumPy arrays); the padding is
    cut off at the end."""
    n, c_in = x.shape[:2]
    kernel, spatial = w.shape[2:], x.shape[2:]
    o_per_group = w.shape[1]
    xp = array_module(x)
    room = tuple(o + 2 * p for o, p in zip(out.shape[2:], padding))
    unit_stride = all(s == 1 for s in stride)
    if unit_stride:
        # the input widened to the output's rows (zeros after each row): then each kernel
        # offset's share is one contiguous run of the flattened output, a fast add
        wide = xp.zeros((n, c_in, spatial[0]) + room[1:], x.dtype)
        wide[(slice(None), slice(None)) + tuple(slice(0, i) for i in spatial)] = x
        x = wide
    weights = w.reshape(groups, c_in // groups, -1).transpose(0, 2, 1)
    x = x.reshape(n, groups, c_in // groups, -1)
    blocks = np.matmul(weights, x, out=_workspace(
        "blocks", (n, groups, weights.shape[1], x.shape[-1]), x.dtype)) \
        if nnkernels.supports(x, w) else np.matmul(weights, x)
    if unit_stride:
        blocks = blocks.reshape((n, groups * o_per_group, math.prod(kernel), -1))
        steps = meta.contiguous_strides(room)
        # the zeros of the last row's widening reach past the end: room for them
        tail = sum(d * (k - 1) * s for d, k, s in zip(dilation, kernel, steps))
        total = math.prod(room) + tail
        length = blocks.shape[-1]
        starts = [sum(k * d * s for k, d, s in zip(offset, dilation, steps))
                  for offset in np.ndindex(*kernel)]
        if nnkernels.supports(blocks):
            flat = nnkernels.col2im(blocks.reshape((-1,) + blocks.shape[2:]), starts,
                                    total).reshape(out.shape[:2] + (total,))
        else:
            flat = xp.zeros(out.shape[:2] + (total,), x.dtype)
            for index, start in enumerate(starts):
                flat[:, :, start:start + length] += blocks[:, :, index]
        padded = flat[:, :, :math.prod(room)].reshape(out.shape[:2] + room)
    else:
        blocks = blocks.reshape((n, groups * o_per_group) + tuple(kernel) + tuple(spatial))
        padded = xp.zeros(out.shape[:2] + room, x.dtype)
        for offset in np.ndindex(*kernel):
            place = tuple(slice(k * d, k * d + s * (i - 1) + 1, s) for k, d, s, i in
                          zip(offset, dilation, stride, spatial))
            padded[(slice(None), slice(None)) + place] += blocks[(slice(None), slice(None))
                                                                 + offset]
    out[...] = padded[(slice(None), slice(None))
                      + tuple(slice(p, p + o) for p, o in zip(padding, out.shape[2:]))]


def _conv_samples(make):
    return [
        Sample(make(2, 3, 5, 5), make(4, 3, 3, 3), make(4), [1, 1], [0, 0], [1, 1], False,
               [0, 0], 1),
        Sample(make(2, 2, 5, 5), make(3, 2, 3, 3), None, [2, 2], [1, 1], [1, 1], False,
               [0, 0], 1),
        Sample(make(2, 4, 5, 5), make(4, 2, 2, 3), make(4), [1, 2], [1, 0], [2, 1], False,
               [0, 0], 2),
        Sample(make(2, 2, 6), make(3, 2, 3), make(3), [2], [1], [1], False, [0], 1),
        Sample(make(2, 4, 4, 7), make(4, 2, 2, 5), make(4), [1, 1], [0, 0], [1, 1], False,
               [0, 0], 2),   # kernel rows longer than the output's: positions-major
        Sample(make(1, 2, 3, 4, 3), make(2, 2, 2, 2, 2), make(2), [1, 1, 1], [1, 0, 0],
               [1, 1, 1], False, [0, 0, 0], 1),
        Sample(make(2, 3, 5, 5).to(memory_format=meta.channels_last), make(4, 3, 3, 3), make(4),
               [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        Sample(make(2, 4, 5, 5).to(memory_format=meta.channels_last), make(4, 2, 3, 3), None,
               [2, 2], [0, 0], [1, 1], False, [0, 0], 2),
        # transposed
        Sample(make(2, 3, 4, 4), make(3, 2, 3, 3), make(2), [2, 2], [1, 1], [1, 1], True,
               [1, 0], 1),
        Sample(make(2, 4, 3, 3), make(4, 1, 2, 3), None, [1, 2], [0, 1], [2, 1], True,
               [0, 1], 2),
        Sample(make(2, 2, 4), make(2, 3, 3), make(3), [3], [2], [1], True, [1], 1),
        Sample(make(2, 4, 3, 4), make(4, 1, 2, 3), make(2), [1, 1], [1, 0], [2, 1], True,
               [1, 0], 2),   # unit stride: the flat col2im
        Sample(make(2, 3, 3, 3).to(memory_format=meta.channels_last), make(3, 2, 2, 2), None,
               [2, 2], [0, 0], [1, 1], True, [0, 0], 1),
    ]


@op(inputs=_INPUTS, method=False, samples=_conv_samples)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    """A 1-, 2- or 3-d convolution (``transposed``: its transpose) of ``input``
    (N, C, *spatial) with ``weight`` (out, C / groups, *kernel), or (C, out / groups,
    *kernel) when transposed, plus ``bias`` (out,) if given."""
    # the output padding shows in the shape alone
    shape, (stride, padding, dilation, _) = check_convolution(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    channels_last = channels_last_result(input, weight)
    strides = meta.strides_for_format(shape, meta.channels_last if len(shape) == 4 else
                                      meta.channels_last_3d) if channels_last else \
        meta.contiguous_strides(shape)
    out = empty_strided_unchecked(shape, strides, input._dtype, device_of(input, weight))
    if not out._numel:
        return out
    result = out._array()
    x, w = input._array(), weight._array()
    bias_values = None if bias is None else bias._array()
    # float16 and bfloat16: sums and bias in float32, the result rounded once, as
    # PyTorch's (rounding the sums and then the sum with the bias is off by a last place
    # of the largest term where terms cancel)
    half = input._dtype.itemsize == 2 and input._dtype.is_floating_point
    if half:
        x, w = x.astype(np.float32), w.astype(np.float32)
        bias_values = None if bias is None else bias_values.astype(np.float32)
    target = array_module(result).empty_like(result, dtype=np.float32) if half else result
    if input._numel == 0 or weight._numel == 0:
        target[...] = 0
    elif transposed:
        _transposed(x, w, stride, padding, dilation, groups, target)
    else:
        _convolve(_padded(x, padding, channels_last), w, stride, dilation, groups, target,
                  channels_last)
    if bias is not None:
        target += bias_values.reshape((-1,) + (1,) * len(stride))
    if half:
        result[...] = target
    return out


# --------------------------------------------------------------------------- derivative

def _cut_to(t, sizes):
    """``t`` narrowed to ``sizes`` (a gradient that reaches past the input's last rows,
    which the stride never reads, is cut)."""
    for dim, (have, want) in enumerate(zip(t.shape, sizes)):
        if have != want:
            t = t.narrow(dim, 0, want)
    return t


def weight_gradient(input, grad, kernel, stride, padding, dilation, groups):
    """``sum over n and positions of grad[n, o, l] * input[n, c, l * stride + k * dilation]``
    as a convolution: channels as the batch, the batch as channels (group-major), the
    stride and dilation swapped; the result (grad's channels, input's channels / groups,
    *kernel)."""
    n, channels = input.shape[:2]
    spatial = tuple(input.shape[2:])
    dims = len(spatial)
    per_group = channels // groups
    columns = input.reshape((n, groups, per_group) + spatial) \
        .permute((2, 1, 0) + tuple(range(3, 3 + dims))) \
        .reshape((per_group, groups * n) + spatial)
    result = convolution(columns, grad.transpose(0, 1), None, dilation, padding, stride, False,
                         (0,) * dims, groups)
    return _cut_to(result, result.shape[:2] + tuple(kernel)).transpose(0, 1)


@convolution.def_derivative("input")
def convolution(grad, weight, input_shape, stride, padding, dilation, transposed,
                output_padding, groups):
    stride, padding, dilation, _ = conv_params(len(weight.shape), stride, padding, dilation,
                                               output_padding)
    kernel = weight.shape[2:]
    weight = conj_if_complex(weight)    # (a bilinear map: PyTorch's complex convention)
    if transposed:
        grad_input = convolution(grad, weight, None, stride, padding, dilation, False,
                                 (0,) * len(kernel), groups)
    else:
        # the rows past the last window, never read, need output padding to be reached
        extra = tuple(i - ((o - 1) * s - 2 * p + d * (k - 1) + 1) for i, o, s, p, d, k in
                      zip(input_shape[2:], grad.shape[2:], stride, padding, dilation, kernel))
        grad_input = convolution(grad, weight, None, stride, padding, dilation, True, extra,
                                 groups)
    return _cut_to(grad_input, input_shape)


@convolution.def_derivative("weight")
def convolution(grad, input, weight_shape, stride, padding, dilation, transposed,
                output_padding, groups):
    stride, padding, dilation, _ = conv_params(len(weight_shape), stride, padding, dilation,
                                               output_padding)
    kernel = weight_shape[2:]
    input = conj_if_complex(input)
    if transposed:
        return weight_gradient(grad, input, kernel, stride, padding, dilation, groups)
    return weight_gradient(input, grad, kernel, stride, padding, dilation, groups)


@convolution.def_derivative("bias")
def convolution(grad, input, weight):
    # with PyTorch's one backward op, every gradient has a graph when an input has one
    return linked(grad.sum((0,) + tuple(range(2, grad.dim()))), input, weight)


@convolution.def_batch_rule
def convolution(op, level, args, kwargs):
    """One physical convolution for any mix of batched arguments, never a loop.

    * Shared weight: the samples are more images of the batch (the vmap dim folded into N).
    * Per-sample weights (model ensembles; under ``vmap(grad)`` the weight gradient, which
      is a convolution of the input with the incoming gradient, both per sample): the
      samples become groups, as torch.func does: input (B, N, C, ...) -> (N, B * C, ...),
      weight (B, O, C / g, ...) -> (B * O, C / g, ...) with ``groups * B``; the result's
      channels are (B, O) and unfold back.
    """
    bound = op.bind(args, kwargs)
    x, w, b = bound["input"], bound["weight"], bound["bias"]
    options = [bound[name] for name in ("stride", "padding", "dilation", "transposed",
                                        "output_padding")]
    groups = bound["groups"]
    check_convolution(x, w, b, *options, groups)
    if not same_level(w, level):
        if same_level(b, level):   # a per-sample bias alone: added to the result
            out = call(op, (x, w, None, *options, groups), None)
            return out + b.reshape((-1,) + (1,) * (w.dim() - 2))
        images = to_front(x._value, x._bdim)
        size, n = images.shape[:2]
        out = call(op, (images.reshape((size * n,) + tuple(images.shape[2:])), w, b,
                        *options, groups), None)
        return wrap(out.reshape((size, n) + tuple(out.shape[1:])), 0, level)
    size = batch_size(level)
    images = front_or_expanded(x, level, size).movedim(0, 1)
    n = images.shape[0]
    images = images.reshape((n, size * images.shape[2]) + tuple(images.shape[3:]))
    weights = to_front(w._value, w._bdim)
    weights = weights.reshape((size * weights.shape[1],) + tuple(weights.shape[2:]))
    if b is not None:
        b = front_or_expanded(b, level, size)
        b = b.reshape(size * b.shape[1])
    out = call(op, (images, weights, b, *options, groups * size), None)
    return wrap(out.reshape((n, size, out.shape[1] // size) + tuple(out.shape[2:])), 1, level)


# --------------------------------------------------------------------------- functions

def same_padding(input, weight, dims, dilation, stride):
    """``padding="same"``: the input padded by ``dilation * (kernel - 1)`` in all, the odd
    one at the end (PyTorch's choice).  Returns the symmetric padding to ask for and the
    output rows to drop first (1 where the padding is uneven: the convolution pads the
    larger side on both ends, and the first row, one too many, is dropped)."""
    if any(s != 1 for s in expand_param(stride, dims, "stride")):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    dilation = expand_param(dilation, dims, "dilation")
    totals = [d * (k - 1) for d, k in zip(dilation, tuple(weight.shape[2:]))]
    return tuple(t - t // 2 for t in totals), tuple(t % 2 for t in totals)


def _conv(input, weight, bias, stride, padding, dilation, groups, dims, name):
    if input.dim() not in (dims + 1, dims + 2):
        raise RuntimeError(f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input "
                           f"to {name}, but got input of size: {list(input.shape)}")
    unbatched = input.dim() == dims + 1
    if unbatched:
        input = input.unsqueeze(0)
    skip = None
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            padding, skip = same_padding(input, weight, dims, dilation, stride)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    out = convolution(input, weight, bias, stride, padding, dilation, False, (0,) * dims,
                      groups)
    if skip is not None and any(skip):
        for dim, first in enumerate(skip):
            if first:
                out = out.narrow(2 + dim, 1, out.shape[2 + dim] - 1)
        # dense again, in the layout the convolution chose (PyTorch's result is fresh)
        out = out.contiguous(memory_format=meta.suggest_memory_format(out._sizes,
                                                                      out._strides))
    return out.squeeze(0) if unbatched else out


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation,
                    dims, name):
    if input.dim() not in (dims + 1, dims + 2):
        raise RuntimeError(f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input "
                           f"to {name}, but got input of size: {list(input.shape)}")
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    unbatched = input.dim() == dims + 1
    if unbatched:
        input = input.unsqueeze(0)
    out = convolution(input, weight, bias, stride, padding, dilation, True, output_padding,
                      groups)
    return out.squeeze(0) if unbatched else out


def _conv1d_samples(make):
    return [Sample(make(2, 2, 7), make(4, 2, 3), make(4)),
            Sample(make(2, 7), make(4, 2, 3), None, 1, "same"),
            Sample(make(2, 4, 7), make(2, 2, 4), None, 1, "same", 2, 2),
            Sample(make(1, 2, 7), make(3, 2, 2), make(3), 2, "valid")]


def _conv2d_samples(make):
    return [Sample(make(2, 2, 5, 5), make(3, 2, 3, 3), make(3)),
            Sample(make(2, 5, 5), make(3, 2, 3, 3), None, 1, 1),
            Sample(make(2, 2, 5, 5), make(3, 2, 2, 4), make(3), 1, "same", (2, 1)),
            Sample(make(2, 4, 5, 5), make(4, 2, 3, 3), None, (2, 1), (1, 0), 1, 2)]


def _conv3d_samples(make):
    return [Sample(make(1, 2, 3, 4, 4), make(2, 2, 2, 3, 2), make(2), 1, (0, 1, 0)),
            Sample(make(2, 3, 3, 3), make(2, 2, 2, 2, 2), None, 1, "same")]


def _conv_transpose1d_samples(make):
    return [Sample(make(2, 3, 4), make(3, 2, 3), make(2), 2, 1, 1),
            Sample(make(3, 4), make(3, 2, 2), None, 1, 0, 0, 1, 2)]


def _conv_transpose2d_samples(make):
    return [Sample(make(2, 3, 3, 3), make(3, 2, 3, 3), make(2), 2, 1, 1),
            Sample(make(1, 4, 3, 3), make(4, 1, 2, 2), None, (1, 2), 0, 0, 2, (2, 1))]


def _conv_transpose3d_samples(make):
    return [Sample(make(1, 2, 2, 3, 2), make(2, 2, 2, 2, 2), make(2), 2)]


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv1d_samples)
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 1-d convolution over (N, C, L) or (C, L) inputs; ``padding`` may be "same" or
    "valid"."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv2d_samples)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 2-d convolution over (N, C, H, W) or (C, H, W) inputs; ``padding`` may be "same"
    or "valid"."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv3d_samples)
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 3-d convolution over (N, C, D, H, W) or (C, D, H, W) inputs; ``padding`` may be
    "same" or "valid"."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv_transpose1d_samples)
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose of ``conv1d`` (its gradient with respect to the input)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 1, "conv_transpose1d")


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv_transpose2d_samples)
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose of ``conv2d`` (its gradient with respect to the input)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 2, "conv_transpose2d")


@op(kind="composite", method=False, inputs=_INPUTS, samples=_conv_transpose3d_samples)
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """The transpose of ``conv3d`` (its gradient with respect to the input)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 3, "conv_transpose3d")


def unfolded_rows(input, kernel, stride, padding, dilation, groups):
    """The patches a convolution reads, as rows: ``input`` [B, N, C, *spatial] ->
    [B, groups, N * positions, C / groups * prod(kernel)] (im2col, per sample)."""
    count, n, channels = input.shape[:3]
    dims = len(kernel)
    x = input.reshape((count * n, channels) + tuple(input.shape[3:]))
    if any(padding):
        x = layout.pad(x, tuple(p for p in reversed(padding) for _ in range(2)))
    for d, (k, s, dil) in enumerate(zip(kernel, stride, dilation)):
        x = x.unfold(2 + d, dil * (k - 1) + 1, s)      # positions in place, window last
    if any(dil != 1 for dil in dilation):
        x = x[(Ellipsis,) + tuple(slice(None, None, dil) for dil in dilation)]
    positions = tuple(x.shape[2:2 + dims])
    # [B*N, C, *positions, *kernel] -> [B, N, *positions, C, *kernel]
    x = x.permute((0,) + tuple(range(2, 2 + dims)) + (1,) + tuple(range(2 + dims, 2 + 2 * dims)))
    rows = x.reshape(count, n * math.prod(positions), groups, -1)
    return rows.transpose(1, 2)


@convolution.def_norm_rule
def convolution(grad, input, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups):
    # the weight's gradient is Σ over positions of the output gradient times the patch
    # read there: a linear layer's over the unfolded input, one per group; the unfolded
    # input is k times the input, so it is formed for a chunk of samples at a time
    if transposed:
        return NotImplemented
    stride, padding, dilation, _ = conv_params(weight.dim(), stride, padding, dilation,
                                               output_padding)
    kernel = tuple(weight.shape[2:])
    outs = grad.shape[2]

    def weight_norms(input, grad):
        rows = unfolded_rows(input, kernel, stride, padding, dilation, groups)
        # [b, N, O, *positions] -> [b, groups, N * positions, O / groups]
        grads = grad.movedim(2, -1).reshape(grad.shape[0], -1, groups, outs // groups)
        return ghost.outer_product_norms(rows, grads.transpose(1, 2))
    unfolded = grad[0].numel() // outs * groups * weight[0].numel()     # per sample
    norms = {"weight": ghost.by_chunks(weight_norms, unfolded, input.numel(), input, grad)}
    if bias is not None:
        norms["bias"] = ghost.squared_norms(ghost.sum_except(grad, (2,)))
    return norms


__all__ = ["convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
           "conv_transpose2d", "conv_transpose3d", "check_convolution", "weight_gradient"]
