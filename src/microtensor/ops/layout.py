"""Layout: ``pad`` (constant, reflect, replicate and circular modes) as one op.

Constant padding is ``np.pad`` after cropping negative pads; the other modes gather each
padded dim's source positions with one ``take`` per dim.  Padding is linear, so its
derivative is its adjoint: for constant mode a crop, i.e. ``pad`` with the pads negated;
for the other modes ``_pad_backward``, which sums each padded position's gradient back
onto its source (one ``add.at`` per dim), and whose own derivative is ``pad`` again: both
are differentiable to any order.  They share one batching rule.
"""
import math

from microtensor._C import meta
from microtensor._C.meta import contiguous_format
from microtensor._C.tensor import bool_, empty_strided_unchecked
from microtensor._dtype import check_scalar_fits
from microtensor.ops.arguments import int_tuple
from microtensor.ops.loops import (array_module, empty_in_format, from_numpy_result,
                                  memory_format_of, update_at)
from microtensor.ops.registry import REGISTRY, Sample, op
from microtensor.vmap.helpers import call, to_front, wrap

MODES = ("constant", "reflect", "replicate", "circular")


def check_pad(shape, pad, mode, value):
    """PyTorch's checks of ``pad``'s arguments against an input of ``shape``."""
    if mode not in MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(pad) // 2
    if k > len(shape):
        raise RuntimeError(f"Padding length should be less than or equal to two times the "
                           f"input dimension but got padding length {len(pad)} and input of "
                           f"dimension {len(shape)}")
    if mode == "constant":
        for i in range(k):   # PyTorch crops (narrows) each negative side before padding
            if shape[-1 - i] + min(pad[2 * i], 0) + min(pad[2 * i + 1], 0) < 0:
                raise RuntimeError("narrow(): length must be non-negative.")
        return
    if value is not None and value != 0:
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    if k not in (1, 2, 3) or len(shape) not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {len(shape)}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if mode in ("reflect", "replicate") and 0 in shape[1:]:
        raise RuntimeError(f"Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 "
                           f"batch size and other non-zero dimensions for input, but got: "
                           f"{list(shape)}")
    for i in range(k):
        n, lo, hi = shape[-1 - i], pad[2 * i], pad[2 * i + 1]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(f"Argument #{4 + 2 * i}: Padding size should be less than the "
                               f"corresponding input dimension, but got: padding ({lo}, {hi}) "
                               f"at dimension {len(shape) - 1 - i} of input {list(shape)}")
        if n == 0:
            raise RuntimeError(f"{mode} padding: input dimension {len(shape) - 1 - i} is "
                               f"empty")
    if mode == "circular":
        empty = RuntimeError("Negative padding value is resulting in an empty dimension")
        for i in range(k - 1, -1, -1):           # outermost padded dim first, as PyTorch
            n, lo, hi = shape[-1 - i], pad[2 * i], pad[2 * i + 1]
            if lo > n or hi > n:
                raise RuntimeError("Padding value causes wrapping around more than once.")
            if n + lo + hi < 0:
                raise empty
        # an input cropped to nothing with a result to fill: PyTorch fails or reads outside
        # the input here
        if any(_circular_reads_nothing(shape[-1 - i], pad[2 * i], pad[2 * i + 1])
               for i in range(k)):
            raise empty
        return
    # (name, input size, output size) of the padded dims, outermost first
    dims = [(name, shape[-1 - i], shape[-1 - i] + pad[2 * i] + pad[2 * i + 1])
            for name, i in zip("DHW"[3 - k:], range(k - 1, -1, -1))]
    if all(out < 1 for _, _, out in dims):
        sizes = ", ".join(f"{name}: {n}" for name, n, _ in dims)
        outs = " ".join(f"{name}: {out}" for name, _, out in dims)
        raise RuntimeError(f"input ({sizes}) is too small. Calculated output {outs}")
    if any(out < 0 for _, _, out in dims):
        sizes = list(shape[:len(shape) - k]) + [out for _, _, out in dims]
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{min(sizes)}: {sizes}")


def _circular_reads_nothing(n, lo, hi):
    """Whether circular padding by ``(lo, hi)`` of a dim of size ``n`` crops the input to
    nothing while its result is not empty (it would wrap around no element)."""
    return n - max(-lo, 0) - max(-hi, 0) <= 0 and n + lo + hi != 0


def source_index(xp, n, lo, hi, mode):
    """For each position of a dim of size ``n`` padded by ``(lo, hi)``: the input position
    it copies.  A negative pad crops: reflect and replicate pad as if the input were whole
    and then crop, circular wraps around the cropped input (as PyTorch's)."""
    j = xp.arange(-lo, n + hi)
    if mode == "replicate":
        return xp.clip(j, 0, n - 1)
    if mode == "circular":
        start, stop = max(-lo, 0), n - max(-hi, 0)
        return start + (j - start) % max(stop - start, 1)     # j is empty when stop <= start
    j = xp.abs(j)                            # reflect: mirror at 0, then at n - 1
    return xp.where(j > n - 1, 2 * (n - 1) - j, j)


def _pad_args(pad):
    return int_tuple(pad, "pad")


def _pad_samples(make):
    return [Sample(make(2, 3, 4), (1, 2)),
            Sample(make(2, 3, 4), (1, -1, 0, 2), value=1.5),
            Sample(make(2, 3, 4), (2, 1, 1, 0, 1, 1)),
            Sample(make(2, 3, 4), (2, 3), "reflect"),
            Sample(make(1, 2, 3, 4), (1, 2, 2, 0), "reflect"),
            Sample(make(2, 3, 4), (4, 1), "replicate"),
            Sample(make(2, 2, 3, 3), (1, 0, 2, 1), "replicate"),
            Sample(make(1, 2, 2, 3, 3), (1, 1, 0, 2, 1, 1), "replicate"),
            Sample(make(2, 3, 4), (4, 2), "circular"),
            Sample(make(2, 3, 3), (1, 2, 3, 0), "circular"),
            Sample(make(2, 3, 5), (-1, 3), "reflect"),
            Sample(make(1, 2, 4, 5), (2, -3, -1, 1), "replicate"),
            Sample(make(2, 3, 5), (-2, 4, -1, 2), "circular")]


@op(method=False, function=False, samples=_pad_samples)
def pad(self, pad, mode="constant", value=None):
    """``self`` padded on its last ``len(pad) // 2`` dims, ``pad`` listing (before,
    after) from the last dim backwards; a negative pad crops."""
    pad = _pad_args(pad)
    check_pad(self._sizes, pad, mode, value)
    if mode in ("reflect", "replicate") and self._dtype is bool_:
        kernel = "reflection" if mode == "reflect" else "replication"
        raise NotImplementedError(f"\"{kernel}_pad{len(pad) // 2}d\" not implemented for "
                                  f"'Bool'")
    arr = self._array()
    xp = array_module(arr)
    ndim = arr.ndim
    if mode == "constant":
        return _constant_pad(self, arr, pad, value)
    out = arr
    for i in range(len(pad) // 2):
        d = ndim - 1 - i
        out = xp.take(out, source_index(xp, arr.shape[d], pad[2 * i], pad[2 * i + 1], mode),
                      axis=d)
    # PyTorch's layout: the input's suggested memory format, but contiguous for "circular"
    return from_numpy_result(out, self._dtype, contiguous_format if mode == "circular" else
                             memory_format_of(self))


def _constant_pad(self, arr, pad, value):
    """The input cropped where pads are negative, written into a fresh result filled with
    ``value``, laid out as PyTorch lays it out: in the input's suggested memory format, or,
    when no pad is positive (a crop), as a clone of the cropped input."""
    crops, inside = [slice(None)] * arr.ndim, [slice(None)] * arr.ndim
    sizes = list(arr.shape)
    for i in range(len(pad) // 2):
        d, lo, hi = arr.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        crops[d] = slice(max(-lo, 0), arr.shape[d] - max(-hi, 0))
        sizes[d] = arr.shape[d] + lo + hi
        inside[d] = slice(max(lo, 0), max(lo, 0) + arr.shape[d] - max(-lo, 0) - max(-hi, 0))
    sizes = tuple(sizes)
    if all(p <= 0 for p in pad):
        out = empty_strided_unchecked(sizes, meta.preserve_format_strides(sizes, self._strides),
                                      self._dtype, self.device)
    else:
        out = empty_in_format(sizes, memory_format_of(self), self._dtype, self.device)
    if out._numel:
        target = out._array()
        if any(p > 0 for p in pad):
            target.fill(0 if value is None else value)
        target[tuple(inside)] = arr[tuple(crops)]
    return out


@pad.def_derivative("self")
def pad(grad, self_shape, pad, mode):
    # ``pad`` the argument shadows ``pad`` the op here
    if mode == "constant":
        return globals()["pad"](grad, tuple(-p for p in _pad_args(pad)))
    return _pad_backward(grad, self_shape, pad, mode)


def _backward_samples(make):
    return [Sample(make(2, 3, 9), (2, 3, 4), (2, 3), "reflect"),
            Sample(make(2, 6, 4), (2, 3, 3), (1, 0, 2, 1), "replicate"),
            Sample(make(1, 2, 4, 5, 6), (1, 2, 3, 4, 5), (0, 1, 1, 0, 1, 0), "circular")]


@op(inputs=("grad",), method=False, function=False, samples=_backward_samples)
def _pad_backward(grad, self_shape, pad, mode):
    """The adjoint of non-constant ``pad``: each padded position's gradient summed onto
    the input position it copies, for an input of ``self_shape``."""
    pad, shape = _pad_args(pad), tuple(self_shape)
    check_pad(shape, pad, mode, None)
    out = grad._array()
    xp = array_module(out)
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        front = xp.moveaxis(out, d, 0)
        summed = xp.zeros((shape[d],) + front.shape[1:], dtype=out.dtype)
        update_at("add", summed, source_index(xp, shape[d], pad[2 * i], pad[2 * i + 1], mode),
                  front)
        out = xp.moveaxis(summed, 0, d)
    return from_numpy_result(out, grad._dtype)


@_pad_backward.def_derivative("grad")
def _pad_backward(grad, pad, mode):
    return globals()["pad"](grad, pad, mode)


def pad_batch_rule(op, level, args, kwargs):
    """``pad`` and ``_pad_backward``: the vmap batch and every dim before the padded ones
    fold into one leading dim (a (C, *spatial) input), one call."""
    bound = op.bind(args, kwargs)
    x = bound.pop("self" if op.name == "pad" else "grad")
    pads = tuple(int(p) for p in bound["pad"])
    k = len(pads) // 2
    shape = tuple(x.shape) if op.name == "pad" else tuple(bound["self_shape"])
    check_pad(shape, pads, bound["mode"], bound.get("value"))
    value = to_front(x._value, x._bdim)
    lead = (value.shape[0],) + tuple(x.shape)[:len(x.shape) - k]
    folded = value.reshape((math.prod(lead),) + tuple(x.shape)[len(x.shape) - k:])
    if op.name == "_pad_backward":
        bound["self_shape"] = (math.prod(lead),) + shape[len(shape) - k:]
    out = call(op, (folded,), bound)
    return wrap(out.reshape(lead + tuple(out.shape[1:])), 0, level)


pad.def_batch_rule(pad_batch_rule)
_pad_backward.def_batch_rule(pad_batch_rule)


__all__ = ["check_pad", "pad"]
__all__ += ["constant_pad_nd"]


# --------------------------------------------------------------------------- constant_pad_nd

def _constant_pad_nd_samples(make):
    return [Sample(make(2, 3), (1, 2)), Sample(make(2, 3, 4), [1, 0, 0, 2], 1.5),
            Sample(make(3, 4), (-1, 2)), Sample(make(2, 2), (0, 0, 1, -1), value=-2.0)]


@op(kind="composite", method=False, samples=_constant_pad_nd_samples)
def constant_pad_nd(self, pad, value=0):
    """``pad(self, pad, "constant", value)``: the aten name, ``value`` defaulting to 0."""
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    check_scalar_fits(value, self._dtype)
    return REGISTRY["pad"](self, pad, "constant", value)
