"""Window functions (``torch.signal.windows``): each is a formula of microtensor ops over
``M`` evenly spaced points, so that ``requires_grad=True`` gives a window with a history
as PyTorch's does.  ``sym=True`` gives the symmetric window (filter design); ``sym=False``
the periodic one (spectral analysis: the symmetric window of ``M + 1`` points without its
last)."""
import math
from collections.abc import Iterable

import microtensor as mt

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
           "general_hamming", "hamming", "hann", "kaiser", "nuttall"]


def _checked(name, M, dtype, layout):
    """PyTorch's checks of every window; the dtype to make it in."""
    dtype = mt.get_default_dtype() if dtype is None else dtype
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout is not mt.strided:
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if dtype not in (mt.float32, mt.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _points(first, step, M, dtype, device, requires_grad):
    """``first, first + step, ..., first + (M - 1) step``."""
    return mt.linspace(first, first + (M - 1) * step, M, dtype=dtype, device=device,
                       requires_grad=requires_grad)


def _trivial(M, dtype, device, requires_grad, one_point=True):
    """The window of no point (empty) and, where ``one_point``, of one point ([1])."""
    if M == 0:
        return mt.empty((0,), dtype=dtype, device=device, requires_grad=requires_grad)
    if M == 1 and one_point:
        return mt.ones((1,), dtype=dtype, device=device, requires_grad=requires_grad)
    return None


def _span(M, sym):
    """The denominator of the spacing: M - 1 points apart, or M for the periodic form
    (which for one point is the symmetric one)."""
    return M if not sym and M > 1 else M - 1


def exponential(M, *, center=None, tau=1.0, sym=True, dtype=None, layout=mt.strided,
                device=None, requires_grad=False):
    """exp(-|n - center| / tau); the center defaults to the middle."""
    dtype = _checked("exponential", M, dtype, layout)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    empty = _trivial(M, dtype, device, requires_grad, one_point=False)
    if empty is not None:
        return empty
    if center is None:
        center = _span(M, sym) / 2.0
    return mt.exp(-mt.abs(_points(-center / tau, 1 / tau, M, dtype, device, requires_grad)))


def cosine(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    """sin(pi (n + 1/2) / M), the sine window."""
    dtype = _checked("cosine", M, dtype, layout)
    empty = _trivial(M, dtype, device, requires_grad, one_point=False)
    if empty is not None:
        return empty
    step = math.pi / (M + 1 if not sym and M > 1 else M)
    return mt.sin(_points(0.5 * step, step, M, dtype, device, requires_grad))


def gaussian(M, *, std=1.0, sym=True, dtype=None, layout=mt.strided, device=None,
             requires_grad=False):
    """exp(-(n - (M - 1) / 2)^2 / (2 std^2))."""
    dtype = _checked("gaussian", M, dtype, layout)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    empty = _trivial(M, dtype, device, requires_grad, one_point=False)
    if empty is not None:
        return empty
    step = 1 / (std * math.sqrt(2))
    return mt.exp(-(_points(-_span(M, sym) / 2.0 * step, step, M, dtype, device,
                            requires_grad) ** 2))


def kaiser(M, *, beta=12.0, sym=True, dtype=None, layout=mt.strided, device=None,
           requires_grad=False):
    """I0(sqrt(beta^2 - k^2)) / I0(beta), k from -beta in steps of 2 beta / (M - 1)."""
    dtype = _checked("kaiser", M, dtype, layout)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    empty = _trivial(M, dtype, device, requires_grad)
    if empty is not None:
        return empty
    beta = mt.tensor(beta, dtype=dtype, device=device)
    step = 2.0 * beta / (M if not sym else M - 1)
    last = mt.minimum(beta, -beta + (M - 1) * step)   # the rounding may pass beta
    k = mt.linspace(-beta, last, M, dtype=dtype, device=device, requires_grad=requires_grad)
    return mt.i0(mt.sqrt(beta * beta - mt.pow(k, 2))) / mt.i0(beta)


def general_cosine(M, *, a, sym=True, dtype=None, layout=mt.strided, device=None,
                   requires_grad=False):
    """sum_i (-1)^i a_i cos(2 pi i n / (M - 1)): the Hann, Hamming, Blackman and Nuttall
    windows are such sums."""
    dtype = _checked("general_cosine", M, dtype, layout)
    empty = _trivial(M, dtype, device, requires_grad)
    if empty is not None:
        return empty
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    if not a:
        raise ValueError("Coefficients cannot be empty")
    angles = _points(0, 2 * math.pi / (M if not sym else M - 1), M, dtype, device,
                     requires_grad)
    weights = mt.tensor([(-1) ** i * w for i, w in enumerate(a)], dtype=dtype, device=device,
                        requires_grad=requires_grad)
    orders = mt.arange(weights.shape[0], dtype=dtype, device=device,
                       requires_grad=requires_grad)
    return (weights.unsqueeze(-1) * mt.cos(orders.unsqueeze(-1) * angles)).sum(0)


def general_hamming(M, *, alpha=0.54, sym=True, dtype=None, layout=mt.strided, device=None,
                    requires_grad=False):
    """alpha - (1 - alpha) cos(2 pi n / (M - 1))."""
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def hamming(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    return general_hamming(M, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def hann(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def blackman(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    _checked("blackman", M, dtype, layout)    # (its own name in the errors)
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)


def nuttall(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym,
                          dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def bartlett(M, *, sym=True, dtype=None, layout=mt.strided, device=None, requires_grad=False):
    """1 - |2 n / (M - 1) - 1|, the triangle."""
    dtype = _checked("bartlett", M, dtype, layout)
    empty = _trivial(M, dtype, device, requires_grad)
    if empty is not None:
        return empty
    return 1 - mt.abs(_points(-1, 2 / (M if not sym else M - 1), M, dtype, device,
                              requires_grad))
