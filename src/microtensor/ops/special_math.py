"""NumPy implementations of the special functions NumPy lacks, vectorised over whole arrays
(CuPy arrays take the same code): ``lgamma``, ``digamma``, ``polygamma`` (through the
Hurwitz zeta function ``zeta``) and the modified Bessel functions ``i0``, ``i1`` (and
their exponentially scaled ``i0e``, ``i1e``).

They compute in float64 and reach its precision (relative error about 1e-15, absolute near
the zeros of lgamma and digamma).  Each shifts its argument with the recurrence until it
is large enough for an asymptotic series, and reflects negative arguments; the loops run
a bounded number of steps over the whole array, never over elements.
"""
import math

import numpy as np

_LOG_2PI_HALF = 0.5 * math.log(2 * math.pi)
_SHIFT_TO = 10.0      # the series below are accurate to float64 from here on
# Bernoulli numbers B_2, B_4, ..., B_18
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
              43867 / 798)


def _float64(x):
    """``x`` (a NumPy or CuPy array, or a number) as float64, a copy."""
    return x.astype(np.float64) if hasattr(x, "astype") else np.float64(x)


def _abs_sin_pi(x):
    """|sin(pi x)| with the argument reduced first, exactly 0 at the integers."""
    return np.abs(np.sin(np.pi * (x - np.round(x))))


def _cot_pi(x):
    """cot(pi x) (period 1), infinite at the integers."""
    r = x - np.round(x)
    with np.errstate(divide="ignore"):
        return np.cos(np.pi * r) / np.sin(np.pi * r)


def _shifted(x, step):
    """``x`` moved up by whole steps to at least ``_SHIFT_TO`` (x >= 0.5 takes at most ten
    steps), with ``step(z, moving)`` called before each move to accumulate."""
    z = x.copy()
    for _ in range(int(_SHIFT_TO)):
        moving = z < _SHIFT_TO
        step(z, moving)
        z = np.where(moving, z + 1, z)
    return z


def _lgamma_from_half(x):
    """log Γ(x) for x >= 0.5: Γ(x) = Γ(x + n) / (x (x+1) ... (x+n-1)), then Stirling."""
    product = np.ones_like(x)

    def step(z, moving):
        np.multiply(product, np.where(moving, z, 1.0), out=product)
    z = _shifted(x, step)
    w = 1.0 / (z * z)
    series = (1 / 12 + w * (-1 / 360 + w * (1 / 1260 + w * (-1 / 1680 + w * (
        1 / 1188 + w * (-691 / 360360 + w / 156)))))) / z
    return (z - 0.5) * np.log(z) - z + _LOG_2PI_HALF + series - np.log(product)


_EULER = 0.5772156649015329


def _lgamma_near_1_and_2(x):
    """log Γ(x) for 0.5 <= x <= 2.5 by the series of log Γ(2 + e) in e = x - 2 (or of
    log Γ(x + 1) - log x): exact at the zeros 1 and 2, where the shifted Stirling series
    would leave a rounding error of the size of the terms it subtracts."""
    below = x < 1.5
    e = np.where(below, x - 1.0, x - 2.0)        # |e| <= 0.5
    total = (1.0 - _EULER) * e
    power = -e                                   # (-e)^k
    for k, zeta_minus_1 in enumerate(_ZETA_MINUS_1, 2):
        power = power * -e
        total += zeta_minus_1 / k * power
    return np.where(below, total - np.log1p(e), total)


def lgamma(x):
    """log|Γ(x)|: +inf at the poles (0 and the negative integers) and at ±inf."""
    x = _float64(x)
    with np.errstate(all="ignore"):
        reflected = x < 0.5
        y = np.where(reflected, 1.0 - x, x)
        near = y <= 2.5
        direct = np.empty_like(y)
        direct[near] = _lgamma_near_1_and_2(y[near])
        direct[~near] = _lgamma_from_half(y[~near])
        # Γ(x) Γ(1 - x) = π / sin(πx)
        result = np.where(reflected, math.log(math.pi) - np.log(_abs_sin_pi(x)) - direct,
                          direct)
        # near 0, log Γ(x) = -log|x| - γx + O(x²) (sin(πx) would lose digits in subnormals)
        result = np.where(np.abs(x) < 1e-8, -np.log(np.abs(x)) - _EULER * x, result)
    return np.where(np.isinf(x), np.inf, result)


def _digamma_from_half(x):
    """ψ(x) for x >= 0.5: ψ(x) = ψ(x + n) - Σ 1/(x + k), then the asymptotic series."""
    total = np.zeros_like(x)

    def step(z, moving):
        np.add(total, np.where(moving, 1.0 / z, 0.0), out=total)
    z = _shifted(x, step)
    w = 1.0 / (z * z)
    series = w * (1 / 12 + w * (-1 / 120 + w * (1 / 252 + w * (-1 / 240 + w * (
        1 / 132 + w * (-691 / 32760 + w / 12))))))
    return np.log(z) - 0.5 / z - series - total


def digamma(x):
    """ψ(x) = d/dx log Γ(x): NaN at the negative integers and at -inf, -inf at +0 and
    +inf at -0 (PyTorch's signs)."""
    x = _float64(x)
    with np.errstate(all="ignore"):
        reflected = x < 0.5
        direct = _digamma_from_half(np.where(reflected, 1.0 - x, x))
        # ψ(1 - x) - ψ(x) = π cot(πx)
        result = np.where(reflected, direct - np.pi * _cot_pi(x), direct)
        result = np.where((x <= 0) & (x == np.floor(x)), np.nan, result)
    result = np.where(x == 0, np.copysign(np.inf, -x), result)
    return np.where(x == np.inf, np.inf, result)


def _power(a, k):
    """``a ** k`` for a whole k >= 0 by squaring: NumPy's ``power`` with a float exponent
    runs the general (slow) pow per element."""
    result = np.ones_like(a)
    while k:
        if k & 1:
            result = result * a
        k >>= 1
        if k:
            a = a * a
    return result


def _zeta_tail(s, a):
    """Σ_{k>=0} (a + k)^-s by Euler-Maclaurin: the integral, half the first term and the
    Bernoulli corrections; accurate to float64 once a >= max(10, s + 19) (the corrections
    then fall at least as fast as ((s + 18) / (2 pi a))^2)."""
    inv_power = a ** (1.0 - s)                   # a^(1 - s)
    tail = inv_power / (s - 1) + 0.5 * inv_power / a
    rising = s.copy()                            # s (s+1) ... (s + 2j - 2)
    inv_a2 = 1.0 / (a * a)
    power = inv_power * inv_a2                   # a^(-s - 2j + 1)
    factorial = 2.0                              # (2j)!
    for j, b in enumerate(_BERNOULLI, 1):
        tail += b / factorial * rising * power
        rising *= (s + 2 * j - 1) * (s + 2 * j)
        factorial *= (2 * j + 1) * (2 * j + 2)
        power *= inv_a2
    return tail


def zeta(s, q):
    """Hurwitz's ζ(s, q) = Σ_k (q + k)^-s for real s (arrays broadcast), with PyTorch's
    (Cephes's) domain: +inf at s = 1 and at the poles q = 0, -1, ...; NaN for s < 1 and
    for a negative q with a fractional s.

    The terms are summed directly while q + k is below the Euler-Maclaurin threshold, an
    element stopping early once its terms no longer reach its sum (a large s).  A very
    negative q with a whole s takes -q steps, as PyTorch's summation does; each step runs
    over the elements still summing, never over one element at a time."""
    s, q = np.broadcast_arrays(_float64(s), _float64(q))
    shape = s.shape
    with np.errstate(all="ignore"):
        s, a = s.reshape(-1).astype(np.float64), q.reshape(-1).astype(np.float64)
        total = np.zeros_like(a)
        threshold = np.maximum(10.0, s + 19.0)
        done = np.zeros(a.shape, dtype=bool)
        moving = np.flatnonzero((a < threshold) & (s > 1))
        while moving.size:
            term = a[moving] ** -s[moving]
            total[moving] += term
            a[moving] += 1
            # a positive term too small to change the sum with all that follows it
            # (at most term (1 + a / (s - 1)))
            small = (a[moving] > 1) & (term * (1 + a[moving] / (s[moving] - 1)) <=
                                       1e-17 * total[moving])
            done[moving[small]] = True
            moving = moving[~small & (a[moving] < threshold[moving])]
        result = np.where(done, total, total + _zeta_tail(s, a)).reshape(shape)
    q, s = q.reshape(shape), s.reshape(shape)
    # Cephes's order: s = 1, then s < 1, then the poles, then a fractional s at q < 0
    result = np.where((q <= 0) & (q != np.floor(q)) & (s != np.floor(s)), np.nan, result)
    result = np.where((q <= 0) & (q == np.floor(q)), np.inf, result)
    return np.where(s == 1, np.inf, np.where(s < 1, np.nan, result))


def hurwitz_zeta(s, q):
    """ζ(s, q) for one whole s > 1."""
    return zeta(float(s), q)


def polygamma(n, x):
    """ψ^(n)(x), the n-th derivative of digamma: (-1)^(n+1) n! ζ(n + 1, x) for n >= 1."""
    if n == 0:
        return digamma(x)
    x = _float64(x)
    sign = 1.0 if n % 2 else -1.0
    with np.errstate(all="ignore"):
        result = sign * math.factorial(n) * hurwitz_zeta(n + 1, x)
    # the limits at ±inf: 0 from above; none from below
    return np.where(x == np.inf, 0.0, np.where(x == -np.inf, np.nan, result))


def _bessel_i(order, x, scaled=False):
    """I_order(|x|) for order 0 or 1 (times exp(-|x|) when ``scaled``): the power series up
    to 30, the asymptotic series of e^x / sqrt(2 pi x) above (NaN at infinity unscaled, as
    PyTorch's; 0 scaled)."""
    ax = np.abs(_float64(x))
    with np.errstate(all="ignore"):
        small = np.minimum(ax, 30.0)
        half_sq = 0.25 * small * small
        term = (0.5 * small) ** order      # (x/2)^(2k + order) / (k! (k + order)!)
        total = term.copy()
        for k in range(1, 80):
            term = term * half_sq / (k * (k + order))
            total += term
        big = np.maximum(ax, 30.0)
        mu = 4.0 * order * order
        term = np.ones_like(big)
        series = term.copy()
        for k in range(1, 30):
            term = term * -(mu - (2 * k - 1) ** 2) / (k * 8.0 * big)
            series += term
        asymptotic = series / np.sqrt(2 * np.pi * big)
        if scaled:
            return np.where(ax <= 30.0, total * np.exp(-small), asymptotic)
        return np.where(ax <= 30.0, total, np.exp(big) * asymptotic)


def i0(x):
    """The modified Bessel function of the first kind, order 0."""
    return _bessel_i(0, x)


def i1(x):
    """The modified Bessel function of the first kind, order 1 (odd)."""
    x = _float64(x)
    return np.copysign(_bessel_i(1, x), x)


def i0e(x):
    """exp(-|x|) I0(x), finite everywhere (0 at ±inf)."""
    return _bessel_i(0, x, scaled=True)


def i1e(x):
    """exp(-|x|) I1(x) (odd)."""
    x = _float64(x)
    return np.copysign(_bessel_i(1, x, scaled=True), x)


# ζ(k) - 1 = ζ(k, 2) for k = 2, 3, ...: the coefficients of the series of log Γ near 2
# (the terms fall as 4^-k there)
_ZETA_MINUS_1 = [float(hurwitz_zeta(k, 2.0)) for k in range(2, 40)]

