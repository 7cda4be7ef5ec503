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

``stft`` and ``istft`` (also ``Tensor.stft``/``Tensor.istft``) are composites over these:
frames by ``unfold``, windowed, transformed; the inverse overlap-adds with ``index_add``.
"""
from numbers import Integral

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import (TensorBase, bfloat16, complex128, float16,
                                   get_default_dtype)
from microtensor._dtype import info
from microtensor.ops.factory import arange, pick_dtype
from microtensor.ops.layout import constant_pad_nd
from microtensor.ops.layout import pad as pad_op
from microtensor.ops.complex import view_as_real
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
    if not self._dtype.is_floating_point:
        raise RuntimeError(_R2C_FLOATING_ONLY.format(info(self._dtype).scalar_name))
    if self._dtype.itemsize == 2:   # float16, bfloat16
        raise RuntimeError(f"MKL FFT doesn't support tensors of type: "
                           f"{info(self._dtype).scalar_name}")
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
    weights = from_numpy_result(weights.astype(grad.dtype.np).reshape(shape))
    return gradient * weights.to(grad.device)


def _zero_padded(x, dim, count):
    """``x`` with ``count`` zeros appended along ``dim``."""
    pad = [0] * (2 * (x.dim() - dim))
    pad[-1] = count
    return constant_pad_nd(x, pad)


# --------------------------------------------------------------------------- arguments

# PyTorch's refusals of a complex input to a real-input transform: ihfftn's is that of
# its r2c kernel
_R2C_FLOATING_ONLY = "Only supports floating-point dtypes, but found: {}"
_REAL_INPUT_ERRORS = {"rfftn": "rfftn expects a real-valued input tensor, but got {}",
                      "ihfftn": _R2C_FLOATING_ONLY}


def _floating(name, x, complex_input):
    """``x`` in the dtype the transform computes in: integers in the default float type,
    complex when ``complex_input`` (a real-input transform refuses complex values)."""
    if not isinstance(x, TensorBase):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    if x._dtype in (float16, bfloat16):
        raise RuntimeError(f"Unsupported dtype {info(x._dtype).scalar_name}")
    if complex_input is False and x._dtype.is_complex:
        raise RuntimeError(_REAL_INPUT_ERRORS.get(name, name + " expects a real input tensor, "
                                                        "but got {}").format(
            info(x._dtype).scalar_name))
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


@op(out=True, out_casting=True, kind="composite", method=False, function=False,
    samples=_one_dim_samples)
def fft_fft(self, n=None, dim=-1, norm=None):
    """The 1-D discrete Fourier transform along ``dim`` (``n``: the signal length, the input
    trimmed or zero-padded to it)."""
    return _c2c("fft_fft", self, *_one_dim(n, dim), norm, True)


@op(out=True, out_casting="kind", kind="composite", method=False, function=False,
    samples=_one_dim_samples)
def fft_ifft(self, n=None, dim=-1, norm=None):
    """The inverse of ``fft``."""
    return _c2c("fft_ifft", self, *_one_dim(n, dim), norm, False)


@op(out=True, kind="composite", method=False, function=False)
def fft_fft2(self, s=None, dim=(-2, -1), norm=None):
    """``fftn`` over the last two dims."""
    return _c2c("fft_fft2", self, s, dim, norm, True)


@op(out=True, kind="composite", method=False, function=False)
def fft_ifft2(self, s=None, dim=(-2, -1), norm=None):
    return _c2c("fft_ifft2", self, s, dim, norm, False)


@op(out=True, out_casting=True, kind="composite", method=False, function=False,
    samples=_n_dim_samples)
def fft_fftn(self, s=None, dim=None, norm=None):
    """The N-D transform over ``dim`` (every dim, or the last ``len(s)``)."""
    return _c2c("fft_fftn", self, s, dim, norm, True)


@op(out=True, kind="composite", method=False, function=False)
def fft_ifftn(self, s=None, dim=None, norm=None):
    return _c2c("fft_ifftn", self, s, dim, norm, False)


# --------------------------------------------------------------------------- real transforms

def _r2c(name, x, s, dim, norm):
    x = _floating(name, x, False)
    dims, sizes = _dims_and_sizes(x, s, dim)
    return _fft_r2c(_resized(x, dims, sizes), dims, _norm_code(norm, True), True)


def _c2r(name, x, s, dim, norm, forward=False):
    """The real signal whose one-sided transform is ``x``; ``forward``: ``hfftn``, the
    forward transform of a Hermitian signal given by its one-sided half (the other dims
    transformed first, then the conjugate's c2r, as PyTorch orders them)."""
    x = _floating(name, x, True)
    given = s is not None and (s if isinstance(s, Integral) else list(s)[-1]) != -1
    dims, sizes = _dims_and_sizes(x, s, dim)
    if not dims:
        raise RuntimeError(f"{name} must transform at least one axis")
    last = sizes[-1] if given else 2 * (x._sizes[dims[-1]] - 1)
    _check_size(last)
    x = _resized(x, dims, sizes[:-1] + [last // 2 + 1])
    code = _norm_code(norm, forward)
    if not forward:
        return _fft_c2r(x, dims, code, last)
    if len(dims) > 1:
        x = _fft_c2c(x, dims[:-1], code, True)
    return _fft_c2r(x.conj(), dims[-1:], code, last)


@op(out=True, out_casting=True, kind="composite", method=False, function=False,
    samples=_real_samples)
def fft_rfft(self, n=None, dim=-1, norm=None):
    """The one-sided transform of a real signal: bins 0 .. n // 2."""
    return _r2c("rfft", self, *_one_dim(n, dim), norm)


@op(out=True, out_casting="kind", kind="composite", method=False, function=False,
    samples=_half_samples)
def fft_irfft(self, n=None, dim=-1, norm=None):
    """The real signal of length ``n`` (default ``2 * (m - 1)``) whose one-sided transform
    is ``self``."""
    return _c2r("irfft", self, *_one_dim(n, dim), norm)


@op(out=True, kind="composite", method=False, function=False)
def fft_rfft2(self, s=None, dim=(-2, -1), norm=None):
    return _r2c("rfftn", self, s, dim, norm)


@op(out=True, kind="composite", method=False, function=False)
def fft_irfft2(self, s=None, dim=(-2, -1), norm=None):
    return _c2r("irfftn", self, s, dim, norm)


@op(out=True, out_casting=True, kind="composite", method=False, function=False,
    samples=_real_n_dim_samples)
def fft_rfftn(self, s=None, dim=None, norm=None):
    return _r2c("rfftn", self, s, dim, norm)


@op(out=True, out_casting="kind", kind="composite", method=False, function=False,
    samples=_half_n_dim_samples)
def fft_irfftn(self, s=None, dim=None, norm=None):
    return _c2r("irfftn", self, s, dim, norm)


@op(out=True, out_casting="kind", kind="composite", method=False, function=False,
    samples=_half_samples)
def fft_hfft(self, n=None, dim=-1, norm=None):
    """The real transform of a Hermitian signal given by its one-sided half (``irfft`` of
    the conjugate with the forward scaling)."""
    return _c2r("hfft", self, *_one_dim(n, dim), norm, forward=True)


@op(out=True, kind="composite", method=False, function=False, samples=_real_samples)
def fft_ihfft(self, n=None, dim=-1, norm=None):
    """The inverse of ``hfft``: the one-sided half of a real signal's inverse transform."""
    return _ihfftn("ihfft", self, *_one_dim(n, dim), norm)


def _ihfftn(name, x, s, dim, norm):
    """The one-sided inverse transform of a real signal: the last dim's r2c conjugated,
    then the other dims' inverse c2c (PyTorch's order)."""
    x = _floating(name, x, False)
    dims, sizes = _dims_and_sizes(x, s, dim)
    code = _norm_code(norm, False)
    half = _fft_r2c(_resized(x, dims, sizes), dims[-1:], code, True).conj()
    return _fft_c2c(half, dims[:-1], code, False) if len(dims) > 1 else half


@op(out=True, kind="composite", method=False, function=False)
def fft_hfft2(self, s=None, dim=(-2, -1), norm=None):
    return _c2r("hfftn", self, s, dim, norm, forward=True)


@op(out=True, kind="composite", method=False, function=False)
def fft_ihfft2(self, s=None, dim=(-2, -1), norm=None):
    return _ihfftn("ihfftn", self, s, dim, norm)


@op(out=True, out_casting="kind", kind="composite", method=False, function=False,
    samples=_half_n_dim_samples)
def fft_hfftn(self, s=None, dim=None, norm=None):
    """The N-D ``hfft``: the real transform of a Hermitian signal given by its half."""
    return _c2r("hfftn", self, s, dim, norm, forward=True)


@op(out=True, out_casting=True, kind="composite", method=False, function=False,
    samples=_real_n_dim_samples)
def fft_ihfftn(self, s=None, dim=None, norm=None):
    """The inverse of ``hfftn``."""
    return _ihfftn("ihfftn", self, s, dim, norm)


# --------------------------------------------------------------------------- helpers

def _frequencies(values, dtype, device, requires_grad):
    result = from_numpy_result(values.astype(pick_dtype(dtype, get_default_dtype()).np))
    if device is not None:
        result = result.to(device)
    return result.requires_grad_() if requires_grad else result


@op(kind="composite", inputs=(), method=False, function=False)
def fft_fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """The sample frequencies of an ``n``-point ``fft``: 0, 1, ..., then the negative ones,
    divided by ``n * d``."""
    return _frequencies(np.fft.fftfreq(n, d), dtype, device, requires_grad)


@op(kind="composite", inputs=(), method=False, function=False)
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




# --------------------------------------------------------------------------- short-time transforms

def _stft_window(name, window, win_length, n_fft, like):
    """The window of ``win_length`` (ones by default) zero-padded on both sides to
    ``n_fft``, as a tensor broadcasting over frames."""
    if not 0 < win_length <= n_fft:
        raise RuntimeError(f"{name}: expected 0 < win_length <= n_fft, but got "
                           f"win_length={win_length}")
    if window is None:
        window = like.new_ones(win_length, dtype=like._dtype.to_real())
    elif window.dim() != 1 or window.shape[0] != win_length:
        raise RuntimeError(f"{name}: expected a 1D window tensor of size equal to "
                           f"win_length={win_length}, but got window with size "
                           f"{list(window.shape)}")
    left = (n_fft - win_length) // 2
    if left or win_length < n_fft:
        window = constant_pad_nd(window, [left, n_fft - win_length - left])
    return window


def _stft_sizes(name, n_fft, hop_length, win_length):
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if hop_length <= 0:
        raise RuntimeError(f"{name}: expected hop_length > 0, but got "
                           f"hop_length={hop_length}")
    return hop_length, win_length


@op(kind="composite")
def stft(self, n_fft, hop_length=None, win_length=None, window=None, center=True,
         pad_mode="reflect", normalized=False, onesided=None, return_complex=None,
         align_to_window=None):
    """The short-time Fourier transform: the ``n_fft``-point transform of each windowed
    frame, frames ``hop_length`` apart (``center``: the signal padded by ``n_fft // 2``
    on both sides first); ``(freq, frames)``, with a batch dim for a 2-D input."""
    complex_data = self._dtype.is_complex or window is not None and window._dtype.is_complex
    if return_complex is None:
        if not complex_data:
            raise RuntimeError("stft requires the return_complex parameter be given for real "
                               "inputs, and will further require that return_complex=True "
                               "in a future PyTorch release.")
        return_complex = True
    if align_to_window is not None and center:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    if center:
        signal_dim = self.dim()
        extended = (1,) * (3 - signal_dim) + tuple(self.shape)
        pad = n_fft // 2
        self = pad_op(self.view(extended), [pad, pad], pad_mode)
        self = self.view(self.shape[-signal_dim:])
    if self.dim() not in (1, 2):
        raise RuntimeError("stft: expected a 1D or 2D tensor")
    hop_length, win_length = _stft_sizes("stft", n_fft, hop_length, win_length)
    length = self.shape[-1]
    if not 0 < n_fft <= length:
        raise RuntimeError(f"stft: expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    window = _stft_window("stft", window, win_length, n_fft, self)
    if align_to_window and win_length < n_fft:
        # frames aligned to the window's nonzero part: the signal is read from where the
        # window starts, zero-padded past its ends
        left = (n_fft - win_length) // 2
        self = constant_pad_nd(self, [left, n_fft - win_length - left])
    frames = self.unfold(-1, n_fft, hop_length) * window     # (..., frames, n_fft)
    onesided = not complex_data if onesided is None else onesided
    norm = "ortho" if normalized else "backward"
    spectrum = fft_rfft(frames, norm=norm) if onesided else fft_fft(frames, norm=norm)
    spectrum = spectrum.transpose(-1, -2)
    return spectrum if return_complex else view_as_real(spectrum)


@op(kind="composite")
def istft(self, n_fft, hop_length=None, win_length=None, window=None, center=True,
          normalized=False, onesided=None, length=None, return_complex=False):
    """The inverse of ``stft``: each frame's inverse transform, windowed and overlap-added,
    divided by the overlap-added squared window (its least-squares estimate)."""
    if not self._dtype.is_complex:
        raise RuntimeError("istft requires a complex-valued input tensor matching the output "
                           "from stft with return_complex=True.")
    hop_length, win_length = _stft_sizes("istft", n_fft, hop_length, win_length)
    if self.dim() not in (2, 3):
        raise RuntimeError(f"istft: expected a tensor with 2 or 3 dimensions of complex "
                           f"dtype, but got {self.dim()}")
    batched = self.dim() == 3
    if not batched:
        self = self.unsqueeze(0)
    bins, frames = self.shape[-2], self.shape[-1]
    onesided = bins != n_fft if onesided is None else onesided
    expected_bins = n_fft // 2 + 1 if onesided else n_fft
    if bins != expected_bins:
        raise RuntimeError(f"istft: expected the frequency dimension (3rd to the last) of the "
                           f"input tensor to match {'n_fft / 2 + 1' if onesided else 'n_fft'} "
                           f"when onesided={onesided}, but got {bins}")
    window = _stft_window("istft", window, win_length, n_fft, self)
    norm = "ortho" if normalized else "backward"
    spectra = self.transpose(1, 2)                           # (batch, frames, bins)
    if return_complex:
        if onesided:
            raise RuntimeError("cannot have onesided output if window or input is complex")
        signal = fft_ifft(spectra, n_fft, -1, norm)
    else:
        if window._dtype.is_complex:
            raise RuntimeError("Complex windows are incompatible with return_complex=False")
        if not onesided:
            spectra = spectra.narrow(-1, 0, n_fft // 2 + 1)
        signal = fft_irfft(spectra, n_fft, -1, norm)
    total = n_fft + hop_length * (frames - 1)
    positions = (arange(frames).unsqueeze(1) * hop_length + arange(n_fft)).reshape(-1)
    summed = signal.new_zeros((signal.shape[0], total)).index_add(
        1, positions, (signal * window).reshape(signal.shape[0], -1))
    envelope = (window * window.conj()).real.expand(frames, n_fft).reshape(-1)
    envelope = envelope.new_zeros(total).index_add(0, positions, envelope)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else (total - n_fft // 2 if center else total)
    kept = min(end, total)
    summed, envelope = summed[:, start:kept], envelope[start:kept]
    if bool((envelope.abs() < 1e-11).any()):
        raise RuntimeError(f"istft: window overlap add min: {float(envelope.abs().min())}")
    result = summed / envelope
    if end > total:
        result = constant_pad_nd(result, [0, end - total])
    return result if batched else result.squeeze(0)


NAMES = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
         "rfftn", "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn", "fftfreq",
         "rfftfreq", "fftshift", "ifftshift")
__all__ = ["fft_" + name for name in NAMES] + ["stft", "istft"]
