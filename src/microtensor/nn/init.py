"""Parameter initialisation, as ``torch.nn.init``: every function fills ``tensor`` in
place without recording gradients and returns it, with PyTorch's fan computations,
gains and errors; the names without the trailing underscore are PyTorch's deprecated
aliases (they warn)."""
import math
import statistics
import warnings

from microtensor.autograd.grad_mode import no_grad


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (``param``: leaky_relu's negative slope)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    """``(fan_in, fan_out)``: ``size(1)`` and ``size(0)`` times the receptive field (the
    product of the dimensions after the first two)."""
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    receptive_field = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(tensor, values):
    """Copy ``values`` (made on the CPU, whatever the default device, in ``tensor``'s
    dtype) into ``tensor``."""
    with no_grad():
        return tensor.copy_(values)


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Values drawn from U(a, b)."""
    from microtensor.ops.factory import rand
    return _fill(tensor, rand(tensor.shape, dtype=tensor.dtype, device="cpu", generator=generator)
                 * (b - a) + a)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Values drawn from N(mean, std²)."""
    from microtensor.ops.factory import randn
    return _fill(tensor, randn(tensor.shape, dtype=tensor.dtype, device="cpu", generator=generator)
                 * std + mean)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Values drawn from N(mean, std²) truncated to [a, b].  Drawn by rejection (redrawing
    the values outside [a, b]); after a few rounds the rare remaining ones come from the
    inverse CDF, so a narrow window far in a tail still ends quickly."""
    from microtensor.ops.factory import rand, randn, tensor as make_tensor
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The "
                      "distribution of values may be incorrect.", stacklevel=2)
    on_cpu = dict(dtype=tensor.dtype, device="cpu", generator=generator)
    values = randn(tensor.shape, **on_cpu) * std + mean
    for _ in range(8):
        outside = (values < a) | (values > b)
        if not outside.any():
            return _fill(tensor, values)
        redraw = randn(tensor.shape, **on_cpu) * std + mean
        values = redraw.where(outside, values)
    normal = statistics.NormalDist(mean, std)
    low, high = normal.cdf(a), normal.cdf(b)
    outside = (values < a) | (values > b)
    flat, mask = values.reshape(-1), outside.reshape(-1)
    count = int(mask.sum().item())
    u = (rand(count, **on_cpu) * (high - low) + low).tolist()
    inside = [min(max(normal.inv_cdf(min(max(p, 1e-300), 1 - 1e-16)), a), b) for p in u]
    flat[mask] = make_tensor(inside, dtype=tensor.dtype, device="cpu")
    return _fill(tensor, flat.reshape(tensor.shape))


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    with no_grad():
        return tensor.zero_()


def ones_(tensor):
    with no_grad():
        return tensor.fill_(1)


def eye_(tensor):
    """The identity matrix (2-D tensors only)."""
    from microtensor.ops.factory import eye
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, eye(*tensor.shape, dtype=tensor.dtype, device="cpu"))


def dirac_(tensor, groups=1):
    """The Dirac delta of a convolution weight (3-, 4- or 5-D): each of the first
    ``min(out/groups, in)`` channels of every group passes its input channel through."""
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    centre = tuple(s // 2 for s in sizes[2:])
    with no_grad():
        tensor.zero_()
        for g in range(groups):
            for d in range(min(out_per_group, sizes[1])):
                tensor[(g * out_per_group + d, d) + centre] = 1
    return tensor


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std²) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound) with ``bound = gain * sqrt(3 / fan_mode)`` (He et al.)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std²) with ``std = gain / sqrt(fan_mode)``."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix (over the trailing dimensions flattened), as PyTorch:
    the Q of a Gaussian matrix's QR, signs fixed by R's diagonal.  The QR runs in NumPy
    (an initialiser, not a differentiable op)."""
    import numpy as np
    from microtensor.ops.factory import from_numpy, randn
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, dtype=tensor.dtype, device="cpu", generator=generator).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, from_numpy(np.ascontiguousarray(q * gain)).reshape(tensor.shape))


__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "zeros_",
           "ones_", "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """A sparse matrix (2-D only): values from N(0, std²) with ``ceil(sparsity * rows)``
    zeros in each column, at random rows (Martens, 2010)."""
    from microtensor.ops.factory import rand, randn
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if tensor.is_meta:
        return tensor
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    on_cpu = dict(dtype=tensor.dtype, device="cpu", generator=generator)
    values = randn(rows, cols, **on_cpu) * std
    # the rows ranked first by a uniform key: a random subset per column, all at once
    ranks = rand(rows, cols, **on_cpu).argsort(dim=0).argsort(dim=0)
    return _fill(tensor, values.masked_fill(ranks < num_zeros, 0))


def _deprecated(method):
    """``method`` under its old name (without the underscore), warning as PyTorch's."""
    new_name = method.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of "
                      f"`nn.init.{new_name}`.", FutureWarning, stacklevel=2)
        return method(*args, **kwargs)
    deprecated_init.__name__ = old_name
    deprecated_init.__doc__ = f"Deprecated alias of ``{new_name}``."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)

__all__ += ["sparse_", "uniform", "normal", "constant", "eye", "dirac", "xavier_uniform",
            "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse"]
