"""Discrete Fourier transforms: the ops behind ``microtensor.fft``.

Three ops compute, as PyTorch's aten does (and under aten's names and arguments): ``_fft_c2c``
(complex to complex, forward or inverse), ``_fft_r2c`` (real to complex, one-sided or
full) and ``_fft_c2r`` (the one-sided half of a Hermitian signal to real), over any set of
dims, scaled by ``normalization``: 0 none, 1 by ``1/sqrt(n)``, 2 by ``1/n`` (``n`` the
product of the transformed sizes).  The kernels run NumPy's pocketfft (CuPy's for GPU
arrays) and keep single precision: float32 in, complex64 out.  Every public function
(``fft_fft``, ``fft_rfft2`` ..., ``microtensor.fft.<name>``) is a composite: it checks its
arguments as PyTorch does, zero-pads or trims the input to the requested sizes, then
calls one of the three.

The derivatives are PyTorch's: c2c's adjoint is the c2c of the other direction with the
same scaling; r2c's is the inverse c2c of the gradient zero-padded from the one-sided to
the full length (its real part); c2r's is the one-sided r2c of the gradient with the
entries that stand for two conjugate bins (all but the first and, for an even length, the
last) doubled.  The batching rule moves the batch dim to the front, out of the
transformed dims.
"""
from numbers import Integral

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import (TensorBase, bfloat16, complex128, float16,
                                   get_default_dtype)
from microtensor._dtype import info
from microtensor.ops.factory import pick_dtype
from microtensor.ops.layout import constant_pad_nd
from microtensor.ops.loops import array_module, from_numpy_result
from microtensor.ops.registry import Sample, op
from microtensor.ops.shape import roll
from microtensor.vmap.helpers import call, to_front, wrap

# NumPy's ``norm`` for aten's normalization codes, per direction
_NUMPY_NORM = {True: ("backward", "ortho", "forward"), False: ("forward", "ortho", "backward")}


def _norm_code(norm, forward):
    """aten's normalization code of the ``norm`` argument for a transform in the forward
    (or inverse) direction: "backward" scales only the inverse, "forward" only the forward,
    "ortho" both by ``1/sqrt(n)``."""
    if norm is None or norm == "backward":
        return 0 if forward else 2
    if norm == "forward":
        return 2 if forward else 0
    if norm == "ortho":
        return 1
    raise RuntimeError(f'Invalid normalization mode: "{norm}"')


def _result(arr, dt):
    return from_numpy_result(arr.astype(dt.np, copy=False))


def _axes(self, dim):
    return tuple(meta.wrap_dim(d, len(self._sizes)) for d in dim)


# --------------------------------------------------------------------------- samples

def _c2c_samples(make):
    return [Sample(make(4, 3, dtype=complex128), (0,), 0, True),
            Sample(make(2, 3, 4, dtype=complex128), (1, 2), 1, False),
            Sample(make(5, dtype=complex128), (0,), 2, True),
            Sample(make(3, 4, dtype=complex128).t(), (0, 1), 2, False)]


def _r2c_samples(make):
    return [Sample(make(4, 3), (1,), 0, True), Sample(make(2, 4, 5), (0, 2), 1, True),
            Sample(make(5), (0,), 2, False), Sample(make(4, 6), (0, 1), 0, True)]


def _c2r_samples(make):
    return [Sample(make(4, 3, dtype=complex128), (1,), 0, 4),
            Sample(make(4, 3, dtype=complex128), (1,), 2, 5),
            Sample(make(2, 4, 3, dtype=complex128), (0, 2), 1, 4)]


def _one_dim_samples(make):
    return [Sample(make(3, 8, dtype=complex128)), Sample(make(3, 6), 4, 0, "ortho"),
            Sample(make(5, dtype=complex128), 7, -1, "forward")]


def _real_samples(make):
    return [Sample(make(3, 8)), Sample(make(3, 6), 5, 0, "ortho"), Sample(make(5), 8, -1,
                                                                             "forward")]


def _half_samples(make):
    return [Sample(make(3, 5, dtype=complex128)), Sample(make(4, 3, dtype=complex128), 5, 0,
                                                         "ortho"),
            Sample(make(4, dtype=complex128), 8, -1, "forward")]


def _n_dim_samples(make):
    return [Sample(make(3, 4, dtype=complex128)), Sample(make(2, 3, 4), (3, 5), None, "ortho"),
            Sample(make(2, 3, 4, dtype=complex128), (-1, 2), (2, 0), "forward")]


def _real_n_dim_samples(make):
    return [Sample(make(3, 4)), Sample(make(2, 3, 4), (3, 5), None, "ortho"),
            Sample(make(2, 3, 4), (-1, 2), (2, 0), "forward")]


def _half_n_dim_samples(make):
    return [Sample(make(3, 4, dtype=complex128)),
            Sample(make(2, 3, 4, dtype=complex128), (3, 5), None, "ortho"),
            Sample(make(2, 3, 4, dtype=complex128), (4, 3), (2, 0), "forward")]


# --------------------------------------------------------------------------- the three transforms

def _batch_rule(op, level, args, kwargs):
    """The batch dim to the front and the transformed dims shifted past it."""
    bound = op.bind(args, kwargs)
    x = bound.pop("self")
    dims = tuple(meta.wrap_dim(d, len(x._sizes)) + 1 for d in bound.pop("dim"))
    result = call(op, (to_front(x._value, x._bdim), dims) + tuple(bound.values()), None)
    return wrap(result, 0, level)


@op(method=False, function=False, batch_rule=_batch_rule, samples=_c2c_samples)
def _fft_c2c(self, dim, normalization, forward):
    axes = _axes(self, dim)
    fft = array_module(self._array()).fft
    transform = fft.fftn if forward else fft.ifftn
    return _result(transform(self._array(), axes=axes,
                             norm=_NUMPY_NORM[bool(forward)][normalization]), self._dtype)


@_fft_c2c.def_derivative("self")
def _fft_c2c(grad, dim, normalization, forward):
    return _fft_c2c(grad, dim, normalization, not forward)


@op(method=False, function=False, batch_rule=_batch_rule, samples=_r2c_samples)
def _fft_r2c(self, dim, normalization, onesided):
    axes = _axes(self, dim)
    fft = array_module(self._array()).fft
    norm = _NUMPY_NORM[True][normalization]
    arr = fft.rfftn(self._array(), axes=axes, norm=norm) if onesided else \
        fft.fftn(self._array(), axes=axes, norm=norm)
    return _result(arr, self._dtype.to_complex())


@_fft_r2c.def_derivative("self")
def _fft_r2c(grad, self_shape, dim, normalization, onesided):
    if onesided:
        last = meta.wrap_dim(dim[-1], len(self_shape))
        missing = self_shape[last] - grad.shape[last]
        if missing > 0:      # the bins the one-sided result leaves out get no gradient
            grad = _zero_padded(grad, last, missing)
    return _fft_c2c(grad, dim, normalization, False).real


@op(method=False, function=False, batch_rule=_batch_rule, samples=_c2r_samples)
def _fft_c2r(self, dim, normalization, last_dim_size):
    axes = _axes(self, dim)
    fft = array_module(self._array()).fft
    sizes = [self._sizes[d] for d in axes[:-1]] + [last_dim_size]
    arr = fft.irfftn(self._array(), s=sizes, axes=axes,
                     norm=_NUMPY_NORM[False][normalization])
    return _result(arr, self._dtype.to_real())


@_fft_c2r.def_derivative("self")
def _fft_c2r(grad, dim, normalization):
    gradient = _fft_r2c(grad, dim, normalization, True)
    last = meta.wrap_dim(dim[-1], grad.dim())
    doubled = grad.shape[last] - gradient.shape[last]
    if doubled <= 0:
        return gradient
    # bins 1 .. doubled each stand for themselves and their conjugate
    weights = np.ones(gradient.shape[last])
    weights[1:1 + doubled] = 2
    shape = [1] * grad.dim()
    shape[last] = len(weights)
    return gradient * from_numpy_result(weights.astype(grad.dtype.np).reshape(shape))


def _zero_padded(x, dim, count):
    """``x`` with ``count`` zeros appended along ``dim``."""
    pad = [0] * (2 * (x.dim() - dim))
    pad[-1] = count
    return constant_pad_nd(x, pad)


# --------------------------------------------------------------------------- arguments

def _floating(name, x, complex_input):
    """``x`` in the dtype the transform computes in: integers in the default float type,
    complex when ``complex_input`` (a real-input transform refuses complex values)."""
    if not isinstance(x, TensorBase):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    if x._dtype in (float16, bfloat16):
        raise RuntimeError(f"Unsupported dtype {info(x._dtype).scalar_name}")
    if complex_input is False and x._dtype.is_complex:
        raise RuntimeError(f"{name} expects a real input tensor, but got "
                           f"{info(x._dtype).scalar_name}")
    if x._dtype.kind < 2:
        x = x.to(get_default_dtype())
    if complex_input and not x._dtype.is_complex:
        x = x.to(x._dtype.to_complex())
    return x


def _check_size(n):
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")


def _dims_and_sizes(x, s, dim):
    """PyTorch's reading of ``s`` and ``dim``: the transformed dims (wrapped, unique) and
    the signal size along each (``-1``: the input's size)."""
    ndim = len(x._sizes)
    if dim is not None:
        dims = [dim] if isinstance(dim, Integral) else list(dim)
        dims = [meta.wrap_dim(d, ndim) for d in dims]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
    if s is not None:
        s = [s] if isinstance(s, Integral) else list(s)
        if dim is None:
            if len(s) > ndim:
                raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has "
                                   f"{ndim} dimensions.")
            dims = list(range(ndim - len(s), ndim))
        elif len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
        sizes = [x._sizes[d] if n == -1 else n for d, n in zip(dims, s)]
        for n in sizes:
            _check_size(n)
    else:
        if dim is None:
            dims = list(range(ndim))
        sizes = [x._sizes[d] for d in dims]
    return tuple(dims), sizes


def _resized(x, dims, sizes):
    """``x`` trimmed or zero-padded to ``sizes`` along ``dims``."""
    for d, n in zip(dims, sizes):
        have = x.shape[d]
        if n < have:
            x = x.narrow(d, 0, n)
        elif n > have:
            x = _zero_padded(x, d, n - have)
    return x


def _one_dim(n, dim):
    return (None if n is None else (n,)), (dim,)


# --------------------------------------------------------------------------- complex transforms

def _c2c(name, x, s, dim, norm, forward):
    x = _floating(name, x, True)
    dims, sizes = _dims_and_sizes(x, s, dim)
    return _fft_c2c(_resized(x, dims, sizes), dims, _norm_code(norm, forward), forward)


@op(kind="composite", method=False, function=False, samples=_one_dim_samples)
def fft_fft(self, n=None, dim=-1, norm=None):
    """The 1-D discrete Fourier transform along ``dim`` (``n``: the signal length, the input
    trimmed or zero-padded to it)."""
    return _c2c("fft_fft", self, *_one_dim(n, dim), norm, True)


@op(kind="composite", method=False, function=False, samples=_one_dim_samples)
def fft_ifft(self, n=None, dim=-1, norm=None):
    """The inverse of ``fft``."""
    return _c2c("fft_ifft", self, *_one_dim(n, dim), norm, False)


@op(kind="composite", method=False, function=False)
def fft_fft2(self, s=None, dim=(-2, -1), norm=None):
    """``fftn`` over the last two dims."""
    return _c2c("fft_fft2", self, s, dim, norm, True)


@op(kind="composite", method=False, function=False)
def fft_ifft2(self, s=None, dim=(-2, -1), norm=None):
    return _c2c("fft_ifft2", self, s, dim, norm, False)


@op(kind="composite", method=False, function=False, samples=_n_dim_samples)
def fft_fftn(self, s=None, dim=None, norm=None):
    """The N-D transform over ``dim`` (every dim, or the last ``len(s)``)."""
    return _c2c("fft_fftn", self, s, dim, norm, True)


@op(kind="composite", method=False, function=False)
def fft_ifftn(self, s=None, dim=None, norm=None):
    return _c2c("fft_ifftn", self, s, dim, norm, False)


# --------------------------------------------------------------------------- real transforms

def _r2c(name, x, s, dim, norm):
    x = _floating(name, x, False)
    dims, sizes = _dims_and_sizes(x, s, dim)
    return _fft_r2c(_resized(x, dims, sizes), dims, _norm_code(norm, True), True)


def _c2r(name, x, s, dim, norm, forward=False):
    """The real signal whose one-sided transform is ``x`` (``forward``: ``hfft``'s scaling,
    with the conjugate taken first)."""
    x = _floating(name, x, True)
    given = s is not None and (s if isinstance(s, Integral) else list(s)[-1]) != -1
    dims, sizes = _dims_and_sizes(x, s, dim)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    last = sizes[-1] if given else 2 * (x._sizes[dims[-1]] - 1)
    _check_size(last)
    x = _resized(x, dims, sizes[:-1] + [last // 2 + 1])
    if forward:
        x = x.conj()
    return _fft_c2r(x, dims, _norm_code(norm, forward), last)


@op(kind="composite", method=False, function=False, samples=_real_samples)
def fft_rfft(self, n=None, dim=-1, norm=None):
    """The one-sided transform of a real signal: bins 0 .. n // 2."""
    return _r2c("rfft", self, *_one_dim(n, dim), norm)


@op(kind="composite", method=False, function=False, samples=_half_samples)
def fft_irfft(self, n=None, dim=-1, norm=None):
    """The real signal of length ``n`` (default ``2 * (m - 1)``) whose one-sided transform
    is ``self``."""
    return _c2r("irfft", self, *_one_dim(n, dim), norm)


@op(kind="composite", method=False, function=False)
def fft_rfft2(self, s=None, dim=(-2, -1), norm=None):
    return _r2c("rfftn", self, s, dim, norm)


@op(kind="composite", method=False, function=False)
def fft_irfft2(self, s=None, dim=(-2, -1), norm=None):
    return _c2r("irfftn", self, s, dim, norm)


@op(kind="composite", method=False, function=False, samples=_real_n_dim_samples)
def fft_rfftn(self, s=None, dim=None, norm=None):
    return _r2c("rfftn", self, s, dim, norm)


@op(kind="composite", method=False, function=False, samples=_half_n_dim_samples)
def fft_irfftn(self, s=None, dim=None, norm=None):
    return _c2r("irfftn", self, s, dim, norm)


@op(kind="composite", method=False, function=False, samples=_half_samples)
def fft_hfft(self, n=None, dim=-1, norm=None):
    """The real transform of a Hermitian signal given by its one-sided half (``irfft`` of
    the conjugate with the forward scaling)."""
    return _c2r("hfft", self, *_one_dim(n, dim), norm, forward=True)


@op(kind="composite", method=False, function=False, samples=_real_samples)
def fft_ihfft(self, n=None, dim=-1, norm=None):
    """The inverse of ``hfft``: the one-sided half of a real signal's inverse transform."""
    x = _floating("ihfft", self, False)
    dims, sizes = _dims_and_sizes(x, *_one_dim(n, dim))
    return _fft_r2c(_resized(x, dims, sizes), dims, _norm_code(norm, False), True).conj()


# --------------------------------------------------------------------------- helpers

def _frequencies(values, dtype, device, requires_grad):
    result = from_numpy_result(values.astype(pick_dtype(dtype, get_default_dtype()).np))
    if device is not None:
        result = result.to(device)
    return result.requires_grad_() if requires_grad else result


@op(kind="composite", method=False, function=False)
def fft_fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """The sample frequencies of an ``n``-point ``fft``: 0, 1, ..., then the negative ones,
    divided by ``n * d``."""
    return _frequencies(np.fft.fftfreq(n, d), dtype, device, requires_grad)


@op(kind="composite", method=False, function=False)
def fft_rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """The sample frequencies of an ``n``-point ``rfft``: 0 .. n // 2, divided by ``n * d``."""
    return _frequencies(np.fft.rfftfreq(n, d), dtype, device, requires_grad)


def _shift(x, dim, sign):
    dims = tuple(range(x.dim())) if dim is None else \
        (dim,) if isinstance(dim, Integral) else tuple(dim)
    return roll(x, tuple(sign * (x.shape[d] // 2) for d in dims), dims)


@op(kind="composite", method=False, function=False)
def fft_fftshift(self, dim=None):
    """The zero frequency moved to the middle of ``dim`` (every dim by default)."""
    return _shift(self, dim, 1)


@op(kind="composite", method=False, function=False)
def fft_ifftshift(self, dim=None):
    """The inverse of ``fftshift``."""
    return _shift(self, dim, -1)


NAMES = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
         "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift")
__all__ = ["fft_" + name for name in NAMES]
