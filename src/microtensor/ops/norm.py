"""Normalization layers as single ops: ``layer_norm`` and ``batch_norm`` (PyTorch's
``native_layer_norm`` / ``native_batch_norm``), and the composites ``group_norm`` and
``rms_norm``.

The kernels are fused NumPy passes (mean, centred second moment, scale and shift) on
zero-copy views of the input.  The derivatives recompute the statistics from the saved
input in microtensor ops, so that they are themselves differentiable (gradgradcheck)
and vmappable; each op's batching rule follows its derivative.
"""
import math

import numpy as np

from microtensor._C import nnkernels
from microtensor._C.dispatch import batching
from microtensor._C.tensor import bfloat16, compute_numpy, float16, float32, is_grad_enabled
from microtensor._C.meta import channels_last, channels_last_3d, contiguous_format
from microtensor.ops.copy import linked
from microtensor.ops.loops import (_type_name, from_numpy_result, in_format, memory_format_of,
                                   owned, refuse_unless_floating)
from microtensor.ops import ghost
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import (batch_size, call, front_or_expanded, same_level, unwrap,
                                      wrap)


def _shape_list(shape):
    return list(shape)


# --------------------------------------------------------------------------- layer_norm

def _layer_norm_samples(make):
    return [Sample(make(3, 4), (4,), make(4), make(4)),
            Sample(make(2, 3, 4), (3, 4), make(3, 4), make(3, 4), 1e-3),
            Sample(make(2, 5), [5]), Sample(make(2, 5), (5,), make(5)),
            Sample(make(4), (4,), None, make(4))]


def check_layer_norm(input_shape, normalized_shape, weight, bias):
    """PyTorch's checks of ``layer_norm``'s arguments, for one sample's input shape."""
    normalized = tuple(normalized_shape)
    k = len(normalized)
    if k == 0 or len(input_shape) < k or tuple(input_shape[-k:]) != normalized:
        raise RuntimeError(f"Given normalized_shape={_shape_list(normalized)}, expected input "
                           f"with shape [*, {', '.join(map(str, normalized))}], but got input "
                           f"of size{_shape_list(input_shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != normalized:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {_shape_list(t.shape)} and "
                               f"normalized_shape = {_shape_list(normalized)}")


def check_parameter_dtypes(input, *parameters):
    """PyTorch's CPU rule for the affine parameters (and running statistics) of the
    normalisations: of the input's dtype, or float32 beside a float16/bfloat16 input."""
    dtypes = {t.dtype for t in parameters if t is not None}
    if not dtypes or dtypes == {input.dtype}:
        return
    if dtypes == {float32}:
        if input.dtype in (float16, bfloat16):
            return
        raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")
    raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")


def _normalize_over(arr, axes, eps):
    """``(arr - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), one pass each."""
    mean = _mean_over(arr, axes)
    centered = arr - mean
    var = _mean_of_product(centered, centered, axes)
    centered *= 1.0 / (var + eps) ** 0.5
    return centered, mean, var


def _trailing(a, axes):
    """Whether ``axes`` are the last dims of the NumPy array ``a`` (then row-wise BLAS
    products replace NumPy's slower last-axis reductions)."""
    return isinstance(a, np.ndarray) and axes == tuple(range(a.ndim - len(axes), a.ndim))


def _rows(a, axes):
    return a.reshape(a.shape[:a.ndim - len(axes)] + (-1,))


def _mean_over(a, axes):
    """``a.mean(axes, keepdims=True)``."""
    if not _trailing(a, axes):
        return a.mean(axis=axes, keepdims=True)
    rows = _rows(a, axes)
    ones = np.full(rows.shape[-1], 1.0 / max(rows.shape[-1], 1), dtype=a.dtype)
    return np.matmul(rows, ones).reshape(a.shape[:a.ndim - len(axes)] + (1,) * len(axes))


def _mean_of_product(a, b, axes):
    """``(a * b).mean(axes, keepdims=True)``, row-wise dot products when it can."""
    if not _trailing(a, axes):
        return (a * b).mean(axis=axes, keepdims=True)
    rows_a, rows_b = _rows(a, axes), _rows(b, axes)
    dots = np.einsum("...i,...i->...", rows_a, rows_b) / max(rows_a.shape[-1], 1)
    return dots.reshape(a.shape[:a.ndim - len(axes)] + (1,) * len(axes)).astype(a.dtype,
                                                                                copy=False)


@op(inputs=("input", "weight", "bias"), method=False, samples=_layer_norm_samples)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Each sample normalised over its last ``len(normalized_shape)`` dims, then scaled by
    ``weight`` and shifted by ``bias``."""
    check_layer_norm(input._sizes, normalized_shape, weight, bias)
    check_parameter_dtypes(input, weight, bias)
    refuse_unless_floating(input._dtype, "LayerNormKernelImpl")
    arr = input._array()
    if not input._numel:
        return from_numpy_result(arr.copy(), input._dtype)
    w, b = (None if t is None else t._array() for t in (weight, bias))
    if nnkernels.supports(arr, w, b):
        return from_numpy_result(
            nnkernels.layer_norm(np.empty(arr.shape, arr.dtype), arr, len(normalized_shape),
                                 w, b, eps), input._dtype)
    arr = arr.astype(compute_numpy(input._dtype), copy=False)   # half types: in float32
    axes = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    out, _, _ = _normalize_over(arr, axes, eps)
    if weight is not None:
        out *= weight._array()
    if bias is not None:
        out += bias._array()
    return from_numpy_result(out, input._dtype)


def normalized_input_gradient(grad, input, dims, eps, scale=None):
    """The gradient of ``(x - mean) * rstd`` (statistics over ``dims``) times ``scale``,
    and the normalised input, in microtensor ops: ``rstd * (g - mean(g) - x̂ mean(g x̂))``
    with ``g = grad * scale``."""
    centered = input - input.mean(dims, True)
    rstd = ((centered * centered).mean(dims, True) + eps).rsqrt()
    xhat = centered * rstd
    g = grad if scale is None else grad * scale
    return rstd * (g - g.mean(dims, True) - xhat * (g * xhat).mean(dims, True)), xhat


@layer_norm.def_joint_derivative     # the gradients share the normalised input
def layer_norm(grad, input, normalized_shape, weight, eps):
    if batching() is None and not is_grad_enabled():
        # no graph of the backward pass is being built, nor a vmap: one fused pass
        return _fused_layer_norm_backward(grad, input, len(normalized_shape), weight, eps)
    dims = tuple(range(-len(normalized_shape), 0))
    grad_input, xhat = normalized_input_gradient(grad, input, dims, eps, weight)
    # the parameters' gradients are summed over the leading dims by the engine; the bias's
    # has a graph when an input has one, as with PyTorch's one backward op
    return grad_input, None if weight is None else grad * xhat, linked(grad, input, weight)


def _affine(out, weight, bias, view=None):
    """``out * weight + bias`` as per-sample ops (weights and biases batched or not)."""
    if weight is not None:
        out = out * (weight if view is None else view(weight))
    if bias is not None:
        out = out + (bias if view is None else view(bias))
    return out


@layer_norm.def_batch_rule
def layer_norm(op, level, args, kwargs):
    """The vmap batch is one more leading dim of one call; per-sample weights and biases
    scale and shift its result by broadcasting."""
    bound = op.bind(args, kwargs)
    x, shape, weight, bias, eps = (bound["input"], bound["normalized_shape"],
                                   bound["weight"], bound["bias"], bound["eps"])
    check_layer_norm(x._sizes, shape, weight, bias)
    inputs = front_or_expanded(x, level, batch_size(level))
    if not same_level(weight, level) and not same_level(bias, level):
        return wrap(call(op, (inputs, shape, weight, bias, eps), None), 0, level)
    out = wrap(call(op, (inputs, shape, None, None, eps), None), 0, level)
    return _affine(out, weight, bias)


def _sum_of_product(a, b, leading):
    """``(a * b).sum(leading)`` for NumPy arrays: one contraction over the rows."""
    if not isinstance(a, np.ndarray):
        return (a * b).sum(axis=leading)
    shape = a.shape[len(leading):]
    flat_a, flat_b = a.reshape((-1,) + shape), b.reshape((-1,) + shape)
    return np.einsum("r...,r...->...", flat_a, flat_b)


def _fused_layer_norm_backward(grad, input, k, weight, eps):
    """``layer_norm``'s derivative on the arrays (the formula of
    ``normalized_input_gradient``), for a backward pass that records nothing."""
    dtype = input._dtype
    w = None if weight is None else weight._array()
    if nnkernels.supports(grad._array(), input._array(), w):
        return tuple(None if a is None else from_numpy_result(a, dtype) for a in
                     nnkernels.layer_norm_backward(grad._array(), input._array(), k, w, eps))
    axes = tuple(range(input.dim() - k, input.dim()))
    leading = tuple(range(input.dim() - k))
    g = grad._array()
    xhat, _, var = _normalize_over(input._array(), axes, eps)
    # one fresh buffer, updated in place (fresh large arrays cost page faults)
    grad_input = g.copy() if weight is None else g * weight._array()
    projection = _mean_of_product(grad_input, xhat, axes)
    grad_weight = None if weight is None else \
        from_numpy_result(_sum_of_product(g, xhat, leading), dtype)
    grad_input -= _mean_over(grad_input, axes)
    xhat *= projection
    grad_input -= xhat
    grad_input *= 1.0 / (var + eps) ** 0.5
    return (from_numpy_result(grad_input, dtype), grad_weight,
            from_numpy_result(g.sum(axis=leading), dtype))


# --------------------------------------------------------------------------- batch_norm

def _batch_norm_samples(make):
    pos = dict(low=0.5, high=2.0)
    return [Sample(make(4, 3), make(3), make(3), None, None, True, 0.1, 1e-5, False),
            Sample(make(2, 3, 4), make(3), make(3), None, None, True, 0.1, 1e-5, False),
            Sample(make(2, 2, 3, 2), None, None, None, None, True, 0.1, 1e-3, False),
            Sample(make(3, 2, 2), make(2), make(2), make(2), make(2, **pos), False, 0.1, 1e-5,
                   False),
            Sample(make(3, 2, 2), None, None, make(2), make(2, **pos), False, 0.1, 1e-5, False),
            Sample(make(3, 2), make(2), None, None, None, True, 0.1, 1e-5, False)]


def check_batch_norm(input, weight, bias, running_mean, running_var, training):
    """PyTorch's checks of ``batch_norm``'s per-channel arguments, for one sample."""
    input_shape = input._sizes
    if not training:
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is None:
                raise RuntimeError(f"{name} must be defined in evaluation mode")
    if len(input_shape) < 2:
        raise RuntimeError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), "
                           f"got {len(input_shape)}")
    channels = input_shape[1]
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        if t is not None and t._numel != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t._numel}")
    check_parameter_dtypes(input, weight, bias, running_mean, running_var)


def channel_view(t, ndim):
    """A per-channel vector shaped to broadcast against an (N, C, ...) tensor of ``ndim``."""
    return t.reshape((-1,) + (1,) * (ndim - 2))


def _dense_in_a_format(t):
    return t.is_contiguous() or any(t.is_contiguous(memory_format=fmt)
                                    for fmt in (channels_last, channels_last_3d))


def batch_norm_format(input, params=(), grad=None):
    """The layout of ``batch_norm``'s result (``grad``: of its input gradient), PyTorch's
    rule: when the input (and ``grad``, in the input's suggested format) is contiguous in
    some format and the parameters are contiguous, that format, plain contiguous first
    (so a channels_last input with size-1 dims can give a contiguous result); else the
    input's suggested format."""
    dense = _dense_in_a_format(input) and all(t is None or t.is_contiguous() for t in params)
    if dense and grad is not None:
        dense = _dense_in_a_format(grad) and memory_format_of(grad) is memory_format_of(input)
    if dense:
        if input.is_contiguous():
            return contiguous_format
        return channels_last_3d if input.is_contiguous(memory_format=channels_last_3d) else \
            channels_last
    return memory_format_of(input)


@op(inputs=("input", "weight", "bias"), method=False, samples=_batch_norm_samples)
def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled=False):
    """Normalisation per channel (dim 1) over the batch and spatial dims: with the batch's
    statistics when ``training``, updating
    ``running_mean``/``running_var`` in place (unbiased variance), else with the running
    statistics.  Arguments in ``torch.batch_norm``'s order (``cudnn_enabled``: accepted
    for that signature, it changes nothing here).  The result is computed in the input's
    layout (NumPy's element-wise results follow it); a channels-last input's statistics
    are products of its (rows, C) view."""
    refuse_unless_floating(input._dtype, "batch_norm")
    check_batch_norm(input, weight, bias, running_mean, running_var, training)
    if not input._numel:    # PyTorch's: an empty copy, the running statistics untouched
        return input.clone()
    arr = input._array().astype(compute_numpy(input._dtype), copy=False)   # half: float32
    blocks = _channel_blocks(arr)
    if training:
        mean, var = _batch_statistics(arr) if blocks is None else _block_statistics(blocks[0])
        _update_running_stats(running_mean, running_var, mean, var,
                              input._numel // input._sizes[1], momentum)
    else:
        mean, var = running_mean._array(), running_var._array()
    scale = 1.0 / (var.reshape(-1) + eps) ** 0.5
    if weight is not None:
        scale = scale * weight._array().reshape(-1)
    shift = -mean.reshape(-1) * scale
    if bias is not None:
        shift += bias._array().reshape(-1)
    if blocks is None:
        shape = (-1,) + (1,) * (input.dim() - 2)
        out = np.multiply(arr, scale.reshape(shape).astype(arr.dtype, copy=False))
        out += shift.reshape(shape)
    else:     # one C pass in the input's layout
        out = np.empty_like(arr)
        nnkernels.batch_norm_apply(_channel_blocks(out)[0], blocks[0],
                                   scale.astype(arr.dtype), shift.astype(arr.dtype))
    return from_numpy_result(out, input._dtype, batch_norm_format(
        input, (weight, bias, running_mean, running_var)))


def _channel_blocks(*arrays):
    """(outer, C, inner) views of (N, C, ...) float32/float64 arrays of one shape and
    layout, as the C kernels take them: (rows, C, 1) channels-last, (N, C, spatial)
    contiguous; else None."""
    found = _channel_views(*arrays) if nnkernels.supports(*arrays) else None
    if found is None:
        return None
    views, each, _ = found
    return [v[:, :, None] if each == "ij" else v for v in views]


def _block_statistics(x):
    """The per-channel mean and biased variance (float64) of an (outer, C, inner) array:
    its sums in one C pass, shifted by each channel's first element."""
    shift = x[0, :, 0].astype(np.float64)
    s1, s2 = nnkernels.batch_norm_sums(x, None, shift)
    count = x.shape[0] * x.shape[2]
    offset = s1 / count
    return shift + offset, np.maximum(s2 / count - offset * offset, 0.0)


def _channel_views(*arrays):
    """Views of (N, C, ...) arrays of one shape, with the einsum subscripts of one view
    and of its channels: (rows, C) when their channels are all innermost (channels-last),
    (N, C, rest) when they are all C-contiguous; else None."""
    if not arrays[0].size:
        return None
    channels_last_order = (0,) + tuple(range(2, arrays[0].ndim)) + (1,)
    moved = [a.transpose(channels_last_order) for a in arrays]     # np.moveaxis is slower
    if all(m.flags.c_contiguous for m in moved):
        return [m.reshape(-1, m.shape[-1]) for m in moved], "ij", "j"
    if all(a.flags.c_contiguous for a in arrays):
        return [a.reshape(a.shape[0], a.shape[1], -1) for a in arrays], "ncs", "c"
    return None


def _channel_sums(a, b=None):
    """``a.sum`` (``(a * b).sum``) over every dim but the channels (dim 1) of (N, C, ...)
    arrays: one pass over their (rows, C) or (N, C, rest) views when they have one."""
    found = _channel_views(a) if b is None else _channel_views(a, b)
    if found is None:
        axes = (0,) + tuple(range(2, a.ndim))
        return (a if b is None else a * b).sum(axis=axes)
    views, each, channels = found
    if b is None:     # NumPy's sums: pairwise along a contiguous axis
        return views[0].sum(0) if each == "ij" else views[0].sum(-1).sum(0)
    # (BLAS's gemv is no faster here, and slow when its threads meet a busy machine)
    return np.einsum(f"{each},{each}->{channels}", views[0], views[1])


def _batch_statistics(arr):
    """The per-channel mean and biased variance of an (N, C, ...) array."""
    count = max(arr.size // arr.shape[1], 1)
    shape = (-1,) + (1,) * (arr.ndim - 2)
    mean = _channel_sums(arr) / count
    centered = arr - mean.reshape(shape).astype(arr.dtype, copy=False)
    return mean, _channel_sums(centered, centered) / count


def _update_running_stats(running_mean, running_var, mean, var, count, momentum):
    """PyTorch's update: an exponential average with factor ``momentum``, the variance
    unbiased (``count / (count - 1)``)."""
    if running_mean is not None:
        target = running_mean._array()
        target[...] = target * (1 - momentum) + momentum * mean.reshape(target.shape)
    if running_var is not None:
        target = running_var._array()
        unbiased = var.reshape(target.shape) * (count / (count - 1) if count > 1 else math.inf)
        target[...] = target * (1 - momentum) + momentum * unbiased


@batch_norm.def_joint_derivative     # the gradients share the normalised input
def batch_norm(grad, input, weight, running_mean, running_var, training, eps):
    if batching() is None and not is_grad_enabled():
        # no graph of the backward pass is being built, nor a vmap: fused NumPy passes
        return _fused_batch_norm_backward(grad, input, weight, running_mean, running_var,
                                          training, eps)
    ndim = input.dim()
    dims = (0,) + tuple(range(2, ndim))
    scale = None if weight is None else channel_view(weight, ndim)
    if training:
        grad_input, xhat = normalized_input_gradient(grad, input, dims, eps, scale)
    else:
        rstd = channel_view((running_var + eps).rsqrt(), ndim)
        xhat = (input - channel_view(running_mean, ndim)) * rstd
        # linked: with a graph when the input has one, as from PyTorch's one backward op
        grad_input = linked(grad * (rstd if scale is None else rstd * scale), input)
    grad_weight = None if weight is None else (grad * xhat).sum(dims)
    # the bias's gradient has a graph when an input has one, as with PyTorch's backward op
    return grad_input, grad_weight, linked(grad.sum(dims), input, weight)


def _fused_batch_norm_backward(grad, input, weight, running_mean, running_var, training,
                               eps):
    """``batch_norm``'s derivative on the arrays, in the input's layout:
    ``scale * (g - mean(g) - x̂ mean(g x̂))`` in training (``scale * g`` in eval), with
    ``scale = weight * rstd``; the input gradient laid out as PyTorch lays it out."""
    compute = compute_numpy(input._dtype)
    g = grad._array().astype(compute, copy=False)
    x = input._array().astype(compute, copy=False)
    grad_input = np.empty_like(x)
    blocks = _channel_blocks(x, g, grad_input)
    if blocks is not None:
        grad_weight, grad_bias = _block_batch_norm_backward(
            *blocks, weight, running_mean, running_var, training, eps)
    else:
        grad_input, grad_weight, grad_bias = _numpy_batch_norm_backward(
            g, x, weight, running_mean, running_var, training, eps)
    dtype = input._dtype
    return (from_numpy_result(grad_input, dtype, batch_norm_format(input, (weight,), grad)),
            None if weight is None else from_numpy_result(grad_weight.astype(compute), dtype),
            from_numpy_result(grad_bias.astype(compute), dtype))


def _block_batch_norm_backward(x, g, grad_input, weight, running_mean, running_var, training,
                               eps):
    """The weight's and bias's gradients from (outer, C, inner) views of the input, the
    incoming gradient and the input gradient's buffer, which it fills: the sums of ``g``
    and ``g (x - mean)`` in one C pass, then ``grad_input = scale g + kx x + k0`` per
    channel in another."""
    if training:
        mean, var = _block_statistics(x)
    else:
        mean = running_mean._array().astype(np.float64)
        var = running_var._array().astype(np.float64)
    rstd = 1.0 / (var + eps) ** 0.5
    scale = rstd if weight is None else rstd * weight._array()
    grad_bias, centered_sum = nnkernels.batch_norm_sums(x, g, mean)   # sum(g), sum(g (x - m))
    if training:
        count = x.shape[0] * x.shape[2]
        kx = -scale * rstd * rstd * centered_sum / count
        k0 = -scale * grad_bias / count - mean * kx
    else:
        kx = k0 = np.zeros_like(scale)
    dt = x.dtype
    nnkernels.batch_norm_apply(grad_input, x, kx.astype(dt), k0.astype(dt), g, scale.astype(dt))
    return centered_sum * rstd, grad_bias


def _numpy_batch_norm_backward(g, x, weight, running_mean, running_var, training, eps):
    """The gradients with NumPy passes, for layouts the C kernels do not take."""
    compute = x.dtype
    shape = (-1,) + (1,) * (x.ndim - 2)
    if training:
        mean, var = _batch_statistics(x)
    else:
        mean, var = running_mean._array(), running_var._array()
    rstd = 1.0 / (var + eps) ** 0.5
    scale = rstd if weight is None else rstd * weight._array()
    centered = x - mean.reshape(shape).astype(compute, copy=False)
    grad_bias = _channel_sums(g)
    grad_weight = _channel_sums(g, centered) * rstd      # sum(g x̂)
    if training:
        count = max(x.size // x.shape[1], 1)
        grad_input = centered      # updated in place: one fresh buffer
        grad_input *= (-scale * rstd * grad_weight / count).reshape(shape).astype(compute)
        grad_input += g * scale.reshape(shape).astype(compute, copy=False)
        grad_input -= (scale * grad_bias / count).reshape(shape).astype(compute)
    else:
        grad_input = g * scale.reshape(shape).astype(compute, copy=False)
    return grad_input, grad_weight, grad_bias


RUNNING_STATS_ERROR = (
    "Batch norm got a batched tensor as input while the running_mean or running_var, which "
    "will be updated in place, were not batched.\nIf you are using a module and do not need "
    "eval mode, please set `track_running_stats` to be False.If you are using a prebuilt "
    "module and do not need eval mode, please see the functorch website for resources on how "
    "to patch your module to work with vmap")


@batch_norm.def_batch_rule
def batch_norm(op, level, args, kwargs):
    """As torch.func: a batched input gets per-sample statistics, and a running-statistics
    update of unbatched buffers from a batched input raises torch.func's error.  Eval mode
    (running statistics): per-sample broadcasting ops.  Batch statistics of a batched
    input: (B, N, C, ...) seen as (N, B*C, ...), one call, per-sample buffers updated
    through a flat copy."""
    bound = op.bind(args, kwargs)
    x, weight, bias = bound["input"], bound["weight"], bound["bias"]
    mean, var = bound["running_mean"], bound["running_var"]
    training, momentum, eps = bound["training"], bound["momentum"], bound["eps"]
    check_batch_norm(x, weight, bias, mean, var, training)
    n = x.dim()

    def channels(t):
        return channel_view(t, n)
    if not training:
        out = (x - channels(mean)) * channels((var + eps).rsqrt())
        return _affine(out, weight, bias, channels)
    buffers = [t for t in (mean, var) if t is not None]
    if not same_level(x, level) and not any(same_level(t, level) for t in buffers):
        out = call(op, (x, None, None, mean, var, training, momentum, eps), None)
        return _affine(out, weight, bias, channels)
    if not all(same_level(t, level) for t in buffers):
        raise RuntimeError(RUNNING_STATS_ERROR)
    size = batch_size(level)
    inputs = front_or_expanded(x, level, size)
    sizes = tuple(inputs.shape)
    folded = inputs.transpose(0, 1).reshape((sizes[1], size * sizes[2]) + sizes[3:])
    physical = [None if t is None else unwrap(t, level)[0].movedim(unwrap(t, level)[1], 0)
                for t in (mean, var)]
    flat = [None if p is None else p.reshape(-1).clone() for p in physical]
    result = call(op, (folded, None, None, flat[0], flat[1], training, momentum, eps), None)
    if training:
        for p, f in zip(physical, flat):
            if p is not None:
                p.copy_(f.view(p.shape))
    out = result.reshape((sizes[1], size, sizes[2]) + sizes[3:]).transpose(0, 1)
    return _affine(wrap(out, 0, level), weight, bias, channels)


# --------------------------------------------------------------------------- composites

def _group_norm_samples(make):
    return [Sample(make(2, 4, 3), 2, make(4), make(4)), Sample(make(3, 6), 3),
            Sample(make(2, 4, 2, 2), 4, make(4), None, 1e-3)]


@op(kind="composite", inputs=("input", "weight", "bias"), method=False,
    samples=_group_norm_samples)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=False):
    """The channels (dim 1) split into ``num_groups`` groups, each normalised over its
    channels and spatial dims: one ``layer_norm`` over a (N, groups, rest) view (a
    channels-last input's result is then laid out in its format)."""
    shape = tuple(input.shape)
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.dim()}")
    channels = shape[1]
    if num_groups <= 0 or channels % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(shape)} and "
                           f"num_groups={num_groups}")
    for t in (weight, bias):
        if t is not None and (t.dim() != 1 or t.shape[0] != channels):
            raise RuntimeError(f"Expected weight to be a vector of size equal to the number "
                               f"of channels in input, but got weight of shape "
                               f"{list(t.shape)} and input of shape {list(shape)}")
    refuse_unless_floating(input.dtype, "GroupNormKernelImpl")
    check_parameter_dtypes(input, weight, bias)
    per_group = math.prod(shape) // (shape[0] * num_groups) if shape[0] else 0
    grouped = input.reshape(shape[0], num_groups, per_group)
    out = layer_norm(grouped, (per_group,), None, None, eps).reshape(shape)
    if weight is not None:
        out = out * channel_view(weight, len(shape))
    if bias is not None:
        out = out + channel_view(bias, len(shape))
    # float32 parameters of a half input leave the result in the input's dtype
    return owned(in_format(out.to(input.dtype), memory_format_of(input)))   # and layout


def _rms_norm_samples(make):
    return [Sample(make(3, 4), (4,), make(4)), Sample(make(2, 3, 4), [3, 4], None, 1e-3),
            Sample(make(5), (5,))]


@op(kind="composite", inputs=("input", "weight"), method=False, samples=_rms_norm_samples)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``input / sqrt(mean(input²) + eps)`` over the last dims, times ``weight``
    (``eps=None``: the machine epsilon of the input's dtype, as PyTorch)."""
    normalized = tuple(normalized_shape)
    k = len(normalized)
    shape = tuple(input.shape)
    if k == 0 or len(shape) < k or shape[-k:] != normalized:
        raise RuntimeError(f"Given normalized_shape={list(normalized)}, expected input with "
                           f"shape [*{', '.join(map(str, normalized))}], but got input of "
                           f"size{list(shape)}")
    if not input.dtype.is_complex:  # (complex: PyTorch's formula, holomorphic, x * x not |x|²)
        refuse_unless_floating(input.dtype, "rms_norm")
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps)
    dims = tuple(range(-k, 0))
    out = input * ((input * input).mean(dims, True) + eps).rsqrt()
    return out if weight is None else (out * weight).to(input.dtype)


# --------------------------------------------------------------------------- ghost norms
# Each layer is ``normalized * weight + bias`` elementwise: a sample's weight gradient is
# its output gradient times the normalised input, summed over its positions, a tensor of
# the weight's size (as small as one row of the activation): formed directly.

def _affine_norms(grad, normalized, weight, bias, keep):
    norms = {}
    if weight is not None:
        norms["weight"] = ghost.squared_norms(ghost.sum_except(grad * normalized, keep))
    if bias is not None:
        norms["bias"] = ghost.squared_norms(ghost.sum_except(grad, keep))
    return norms


def _last_dims(t, count):
    return tuple(range(t.dim() - count, t.dim()))


@layer_norm.def_norm_rule
def layer_norm(grad, input, normalized_shape, weight, bias, eps):
    normalized = layer_norm(input, normalized_shape, None, None, eps)
    return _affine_norms(grad, normalized, weight, bias,
                         _last_dims(grad, len(normalized_shape)))


@group_norm.def_norm_rule
def group_norm(grad, input, num_groups, weight, bias, eps):
    # per sample (N, C, *spatial): the channels are dim 2 here, behind the batch
    folded = input.reshape((-1,) + tuple(input.shape[2:]))
    normalized = group_norm(folded, num_groups, None, None, eps).reshape(input.shape)
    return _affine_norms(grad, normalized, weight, bias, (2,))


@rms_norm.def_norm_rule(params=("weight",))
def rms_norm(grad, input, normalized_shape, weight, eps):
    normalized = rms_norm(input, normalized_shape, None, eps)
    return _affine_norms(grad, normalized, weight, None,
                         _last_dims(grad, len(normalized_shape)))


__all__ = ["layer_norm", "batch_norm", "group_norm", "rms_norm", "check_layer_norm",
           "check_batch_norm", "channel_view"]
__all__ += ["local_response_norm", "cross_map_lrn2d"]


# --------------------------------------------------------------------------- local response norm

def _lrn_samples(make):
    return [Sample(make(2, 5, 3), 3), Sample(make(2, 4, 3, 2), 2, 1e-2, 0.5, 2.0),
            Sample(make(1, 6, 2, 2, 2), 4, 0.1), Sample(make(3, 4, 1, 2).transpose(2, 3), 5)]


def _pool(name, input, kernel_size, divisor_override=None):
    """A stride-1 average pool (a windowed sum with ``divisor_override=1``)."""
    from microtensor.ops.pooling import avg_pool2d, avg_pool3d
    pool = avg_pool2d if name == "avg_pool2d" else avg_pool3d
    return pool(input, kernel_size, (1,) * len(kernel_size), 0, False, True,
                divisor_override)


@op(kind="composite", method=False, function=False, inputs=("input",), samples=_lrn_samples)
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``input / (k + alpha * mean of the squares over a window of size channels)^beta``,
    written as PyTorch's ``F.local_response_norm``: the squares padded along the channels
    and average-pooled."""
    from microtensor.ops.layout import pad
    dim = input.dim()
    if dim < 3:
        # PyTorch's message, with the spaces of its line continuation
        raise ValueError(f"Expected 3D or higher dimensionality {' ' * 25}input (got {dim} "
                         f"dimensions)")
    if input.numel() == 0:
        return input
    div = input * input
    if dim == 3:
        div = pad(div.unsqueeze(1), (0, 0, size // 2, (size - 1) // 2))
        div = _pool("avg_pool2d", div, (size, 1)).squeeze(1)
    else:
        sizes = tuple(input.shape)
        div = div.view(sizes[0], 1, sizes[1], sizes[2], -1)
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = _pool("avg_pool3d", div, (size, 1, 1)).squeeze(1).view(sizes)
    return input / (div * alpha + k) ** beta


def _cross_map_lrn2d_samples(make):
    return [Sample(make(2, 7, 2, 3), 3), Sample(make(1, 4, 2, 2), 2, 1e-2, 0.5, 2.0),
            Sample(make(1, 6, 3, 2), 4, 0.1), Sample(make(2, 3, 2, 2), 5, 0.5, 1.0, 1.5)]


@op(kind="composite", method=False, function=False, inputs=("input",),
    samples=_cross_map_lrn2d_samples)
def cross_map_lrn2d(input, size, alpha=1e-4, beta=0.75, k=1):
    """``nn.CrossMapLRN2d``'s forward as PyTorch computes it: channel c divided by
    ``(k + alpha / size * S_c)^beta``, ``S_c`` the sum of the squares of channels
    ``c - h .. c + h`` (``h = (size - 1) // 2`` rounded up less one, so an even size sums
    size - 1 channels), plus channel 0's square for every ``c > h``: PyTorch's running
    window never subtracts channel 0, and its results keep that term."""
    from microtensor.ops.factory import arange
    from microtensor.ops.layout import pad
    if input.dim() != 4:
        raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.dim()}D "
                         f"instead.")
    half = int((size - 1) / 2 + 1) - 1
    squares = input * input
    window = pad(squares.unsqueeze(1), (0, 0, 0, 0, half, half))
    sums = _pool("avg_pool3d", window, (2 * half + 1, 1, 1), divisor_override=1).squeeze(1)
    kept = (arange(input.shape[1], device=input.device) > half).to(input.dtype)
    sums = sums + squares[:, :1] * kept.view(1, -1, 1, 1)
    return input * (sums * (alpha / size) + k) ** -beta


# --------------------------------------------------------------------------- aten names
# ``native_layer_norm``, ``native_batch_norm`` and ``native_group_norm``: PyTorch's aten
# forms, returning with the output the statistics they normalised with (``mean`` and
# ``rstd``, the reciprocal standard deviation).  Those are differentiable here (PyTorch
# marks them non-differentiable): they are computed in ops, so autograd and vmap see them.

def _statistics(values, dims, eps):
    """The mean and ``1 / sqrt(biased variance + eps)`` of ``values`` over ``dims``,
    kept as size-1 dims."""
    mean = values.mean(dims, keepdim=True)
    return mean, (values.var(dims, correction=0, keepdim=True) + eps).rsqrt()


def _native_layer_norm_samples(make):
    return [Sample(make(3, 4), (4,), make(4), make(4), 1e-5),
            Sample(make(2, 3, 4), [3, 4], None, make(3, 4), 1e-3),
            Sample(make(2, 5), (5,), None, None, 1e-5)]


@op(kind="composite", method=False, inputs=("input", "weight", "bias"),
    samples=_native_layer_norm_samples)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``(layer_norm(...), mean, rstd)``, the statistics over the normalised dims, kept
    as size-1 dims."""
    out = layer_norm(input, normalized_shape, weight, bias, eps)
    # the statistics are saved values, not differentiable outputs (PyTorch's)
    return (out,) + tuple(s.detach() for s in
                          _statistics(input, tuple(range(-len(normalized_shape), 0)), eps))


def _native_batch_norm_samples(make):
    pos = dict(low=0.5, high=2.0)
    return [Sample(make(4, 3), make(3), make(3), None, None, True, 0.1, 1e-5),
            Sample(make(2, 3, 2), None, make(3), None, None, True, 0.1, 1e-5),
            Sample(make(3, 2, 2), make(2), None, make(2), make(2, **pos), False, 0.1, 1e-5)]


@op(out=True, kind="composite", method=False, inputs=("input", "weight", "bias"),
    samples=_native_batch_norm_samples)
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    """``(batch_norm(...), save_mean, save_invstd)``: when ``training``, the batch's
    per-channel mean and ``1 / sqrt(biased variance + eps)``; in evaluation, two empty
    tensors, as PyTorch's CPU kernel returns."""
    if training and not input.numel():
        raise RuntimeError(f"input tensor must have at least one element, but got input_sizes "
                           f"= {list(input.shape)}")
    out = batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    if not training:
        empty = input.new_empty((0,))
        return out, empty, empty.clone()
    dims = (0,) + tuple(range(2, input.dim()))
    mean, rstd = _statistics(input, dims, eps)
    # the statistics are saved values, not differentiable outputs (PyTorch's)
    return out, mean.reshape(-1).detach(), rstd.reshape(-1).detach()


def _native_group_norm_samples(make):
    return [Sample(make(2, 4, 3), make(4), make(4), 2, 4, 3, 2, 1e-5),
            Sample(make(3, 6), None, None, 3, 6, 1, 3, 1e-5),
            Sample(make(2, 4, 2, 2), make(4), None, 2, 4, 4, 4, 1e-3)]


@op(kind="composite", method=False, inputs=("input", "weight", "bias"),
    samples=_native_group_norm_samples)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """``(group_norm(...), mean, rstd)``, the statistics of each (sample, group), shaped
    (N, group); ``N``, ``C`` and ``HxW`` must describe the input."""
    if input.numel() != N * C * HxW:
        raise RuntimeError("Expected X.numel() == N * C * HxW to be true, but got false.")
    out = group_norm(input, group, weight, bias, eps)
    mean, rstd = _statistics(input.reshape(N, group, -1), (2,), eps)
    return out, owned(mean.reshape(N, group)), owned(rstd.reshape(N, group))


__all__ += ["native_layer_norm", "native_batch_norm", "native_group_norm"]
