"""NumPy implementations of the special functions NumPy lacks, vectorised over whole arrays
(CuPy arrays take the same code): ``lgamma``, ``digamma``, ``polygamma`` (through the
Hurwitz zeta function ``zeta``) and the Bessel functions: ``i0``, ``i1`` (and their
exponentially scaled ``i0e``, ``i1e``), ``bessel_j0/j1/y0/y1``, the ``K`` functions and
Airy's ``airy_ai``.

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
        done = np.zeros_like(a, dtype=bool)
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



# --------------------------------------------------------------------------- Bessel J and Y
# J0, J1, Y0, Y1 of x > 0 (the callers reflect): below 1e-5 the leading terms of their
# series; up to 25 Miller's backward recurrence J_{n-1} = (2n / x) J_n - J_{n+1}, normalised
# by J0 + 2 (J2 + J4 + ...) = 1, with Y0 and Y1 from the same J_n by Neumann's series
#   Y0 = (2/π) (log(x/2) + γ) J0 - (4/π) Σ_k (-1)^k J_2k / k
#   Y1 = -Y0' = (2/π) ((log(x/2) + γ) J1 - J0 / x) + (2/π) Σ_k (-1)^k (J_2k-1 - J_2k+1) / k;
# from 25 on Hankel's asymptotic series.  Absolute accuracy about 1e-16 times the envelope
# sqrt(2 / (π x)), as the usual approximations (PyTorch's too) have near the zeros.

_BESSEL_SERIES_BELOW = 1e-5
_BESSEL_HANKEL_FROM = 25.0
_RESCALE = 1e200


def _bessel_miller(x):
    """(J0, J1, Y0, Y1) of x in [1e-5, 25) by the backward recurrence (values rescaled as
    they grow, which they do by 2n / x a step)."""
    start = 2 * int((float(np.max(x)) + 40.0) / 2) if x.size else 2
    j_next = np.zeros_like(x)                 # J_{n+1} (unnormalised)
    j = np.full_like(x, 1e-30)                # J_n, n = start
    norm = np.zeros_like(x)                   # J0 + 2 Σ J_2k
    y0_sum = np.zeros_like(x)                 # Σ_k (-1)^k J_2k / k
    y1_sum = np.zeros_like(x)                 # Σ_k (-1)^k (J_2k-1 - J_2k+1) / k
    odd_above = np.zeros_like(x)              # J_{n+1} for the next odd-order term
    j1 = np.zeros_like(x)
    for n in range(start, 0, -1):
        # here j = J_n, j_next = J_{n+1}
        if n % 2 == 0:
            k = n // 2
            sign = -1.0 if k % 2 else 1.0
            norm += 2.0 * j
            y0_sum += sign * j / k
            odd_above = j_next.copy()         # J_{2k+1} (rescaled with the rest)
            pending = sign / k                # waits for J_{2k-1}
        j_prev = 2.0 * n / x * j - j_next
        if n % 2 == 0:
            y1_sum += pending * (j_prev - odd_above)
        if n == 1:
            j1 = j.copy()
        j_next, j = j, j_prev
        big = np.abs(j) > _RESCALE
        if big.any():
            scale = np.where(big, 1.0 / _RESCALE, 1.0)
            for array in (j, j_next, norm, y0_sum, y1_sum, odd_above, j1):
                array *= scale
    j0 = j
    norm += j0
    j0, j1 = j0 / norm, j1 / norm
    log_term = np.log(0.5 * x) + _EULER
    y0 = 2 / np.pi * (log_term * j0 - 2.0 * y0_sum / norm)
    y1 = 2 / np.pi * (log_term * j1 - j0 / x + y1_sum / norm)
    return j0, j1, y0, y1


def _bessel_hankel(x):
    """(J0, J1, Y0, Y1) for x >= 25 by Hankel's expansions P_ν, Q_ν in 1/x, the phases
    x - π/4 and x - 3π/4 taken through sin x and cos x (no rounding of x - π/4)."""
    out = []
    sin, cos = np.sin(x), np.cos(x)
    inv_8x = 1.0 / (8.0 * x)
    for nu in (0, 1):
        mu = 4.0 * nu * nu
        term = np.ones_like(x)
        p, q = term.copy(), np.zeros_like(x)
        for k in range(1, 40):
            term = term * (mu - (2 * k - 1) ** 2) * inv_8x / k
            if k % 2:
                q += term if (k // 2) % 2 == 0 else -term
            else:
                p += -term if (k // 2) % 2 else term
        # cos(x - (2ν+1)π/4) and sin(...) from cos x, sin x
        if nu == 0:
            c, s = (cos + sin) / np.sqrt(2.0), (sin - cos) / np.sqrt(2.0)
        else:
            c, s = (sin - cos) / np.sqrt(2.0), -(sin + cos) / np.sqrt(2.0)
        envelope = np.sqrt(2.0 / (np.pi * x))
        out.append((envelope * (p * c - q * s), envelope * (p * s + q * c)))
    (j0, y0), (j1, y1) = out
    return j0, j1, y0, y1


def _bessel_jy(x):
    """(J0, J1, Y0, Y1) of x > 0 (finite)."""
    result = [np.empty_like(x) for _ in range(4)]
    tiny = x < _BESSEL_SERIES_BELOW
    large = x >= _BESSEL_HANKEL_FROM
    middle = ~tiny & ~large
    t = x[tiny]
    log_term = np.log(0.5 * t) + _EULER
    j0 = 1.0 - 0.25 * t * t
    series = (j0, 0.5 * t * (1.0 - 0.125 * t * t),
              2 / np.pi * (log_term * j0 + 0.25 * t * t),
              -2 / (np.pi * t) + t / np.pi * (log_term - 0.5))
    for mask, values in ((tiny, series), (middle, _bessel_miller(x[middle])),
                         (large, _bessel_hankel(x[large]))):
        for target, value in zip(result, values):
            target[mask] = value
    return result


def _bessel_of(x, pick, odd=False, at_zero=0.0, negative=np.nan):
    """One of (J0, J1, Y0, Y1) (``pick``) elementwise: reflected for J (``odd``: J1),
    ``negative`` (NaN) for Y of x < 0, the value at 0 given; NaN at ±inf, as PyTorch's."""
    x = _float64(x)
    shape = x.shape
    flat = np.abs(x.reshape(-1)).astype(np.float64)
    regular = (flat > 0) & np.isfinite(flat)
    values = np.full(flat.shape, np.nan)
    with np.errstate(all="ignore"):
        values[regular] = _bessel_jy(flat[regular])[pick]
    values = values.reshape(shape)
    if odd:
        values = np.where(x < 0, -values, values)
    values = np.where(x == 0, at_zero, values)
    if negative is not None:
        values = np.where(x < 0, negative, values)
    return np.where(np.isnan(x), np.nan, values)


def bessel_j0(x):
    """The Bessel function of the first kind of order 0 (even)."""
    return _bessel_of(x, 0, at_zero=1.0, negative=None)


def bessel_j1(x):
    """The Bessel function of the first kind of order 1 (odd)."""
    return _bessel_of(x, 1, odd=True, negative=None)


def bessel_y0(x):
    """The Bessel function of the second kind of order 0: -inf at 0, NaN below."""
    return _bessel_of(x, 2, at_zero=-np.inf)


def bessel_y1(x):
    """The Bessel function of the second kind of order 1: -inf at 0, NaN below."""
    return _bessel_of(x, 3, at_zero=-np.inf)


# --------------------------------------------------------------------------- Bessel K
# K0, K1 of x > 0 and their scaled e^x K: up to 1 their series
#   K0 = -(log(x/2) + γ) I0 + Σ_k H_k (x²/4)^k / k!²
#   K1 = 1/x + log(x/2) I1 - (x/4) Σ_k (H_k + H_k+1 - 2γ) (x²/4)^k / (k! (k+1)!)
# (H_k the harmonic numbers); up to 25 the trapezoidal rule on
#   e^x K_ν(x) = ∫_0^∞ exp(-x (cosh t - 1)) cosh(ν t) dt,
# exact to float64 with steps of 0.1 (the integrand is even and entire); from 25 on the
# asymptotic series sqrt(π / 2x) Σ_k a_k(ν) / x^k.

_K_SERIES_UP_TO = 1.0
_K_ASYMPTOTIC_FROM = 25.0


def _bessel_k_series(x):
    """(K0, K1) for 0 < x <= 1."""
    half_log = np.log(0.5 * x) + _EULER
    quarter = 0.25 * x * x
    term = np.ones_like(x)                    # (x²/4)^k / k!²
    k0_sum = np.zeros_like(x)
    k1_sum = (1.0 - 2.0 * _EULER) * term      # k = 0: (H_0 + H_1 - 2γ) / (0! 1!)
    harmonic = 0.0
    for k in range(1, 30):
        term = term * quarter / (k * k)
        harmonic += 1.0 / k
        k0_sum += harmonic * term
        k1_sum += (2.0 * harmonic + 1.0 / (k + 1) - 2.0 * _EULER) * term / (k + 1)
    k0 = -half_log * i0(x) + k0_sum
    k1 = 1.0 / x + (half_log - _EULER) * i1(x) - 0.25 * x * k1_sum
    return k0, k1


def _scaled_bessel_k_quadrature(x):
    """(e^x K0, e^x K1) for 1 < x < 25: one pass over the elements per node."""
    step = 0.1
    k0, k1 = np.zeros_like(x), np.zeros_like(x)
    for node in np.arange(0.0, 5.0, step):     # exp(-(cosh 5 - 1)) is below 1e-31
        decay = np.exp(-x * (np.cosh(node) - 1.0)) * (step / 2 if node == 0 else step)
        k0 += decay
        k1 += decay * np.cosh(node)
    return k0, k1


def _scaled_bessel_k_asymptotic(x):
    """(e^x K0, e^x K1) for x >= 25."""
    out = []
    for nu in (0, 1):
        mu = 4.0 * nu * nu
        term = np.ones_like(x)
        total = term.copy()
        for k in range(1, 40):
            term = term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * x)
            total += term
        out.append(total * np.sqrt(np.pi / (2.0 * x)))
    return out


def _bessel_k(x, order, scaled):
    """K_order(x) (times e^x when ``scaled``): +inf at 0, NaN below, 0 at +inf."""
    x = _float64(x)
    shape = x.shape
    flat = x.reshape(-1).astype(np.float64)
    values = np.full(flat.shape, np.nan)
    with np.errstate(all="ignore"):
        for low, high, method in ((0.0, _K_SERIES_UP_TO, "series"),
                                  (_K_SERIES_UP_TO, _K_ASYMPTOTIC_FROM, "quadrature"),
                                  (_K_ASYMPTOTIC_FROM, np.inf, "asymptotic")):
            mask = (flat > low) & (flat <= high) if method == "series" else \
                (flat > low) & (flat < high) if method == "quadrature" else \
                (flat >= low) & (flat < high)
            part = flat[mask]
            if method == "series":
                result = _bessel_k_series(part)[order]
                values[mask] = result * np.exp(part) if scaled else result
            else:
                result = (_scaled_bessel_k_quadrature(part) if method == "quadrature"
                          else _scaled_bessel_k_asymptotic(part))[order]
                values[mask] = result if scaled else result * np.exp(-part)
    values = values.reshape(shape)
    values = np.where(x == 0, np.inf, np.where(x == np.inf, 0.0, values))
    return np.where(x < 0, np.nan, values)


def modified_bessel_k0(x):
    """The modified Bessel function of the second kind of order 0."""
    return _bessel_k(x, 0, scaled=False)


def modified_bessel_k1(x):
    """The modified Bessel function of the second kind of order 1."""
    return _bessel_k(x, 1, scaled=False)


def scaled_modified_bessel_k0(x):
    """e^x K0(x)."""
    return _bessel_k(x, 0, scaled=True)


def scaled_modified_bessel_k1(x):
    """e^x K1(x)."""
    return _bessel_k(x, 1, scaled=True)


# --------------------------------------------------------------------------- Airy Ai
# Ai(x) by its Maclaurin series on [-2, 2]; right of 2 as sqrt(x / 3) K_{1/3}(ζ) / π with
# ζ = 2 x^{3/2} / 3 (e^ζ K_{1/3} by the trapezoidal rule up to ζ = 25, its asymptotic
# series beyond); left of -2 as sqrt(x) (J_{1/3}(ζ) + J_{-1/3}(ζ)) / 3, the sum written as
#   (2/π) ∫_0^π cos(t/3) cos(ζ sin t) dt + (√3/π) ∫_0^∞ exp(-ζ sinh t) sinh(t/3) dt
# by Gauss-Legendre quadrature up to ζ = 30, and Hankel's expansion beyond.

_AIRY_0 = 0.355028053887817239260           # Ai(0)
_AIRY_1 = 0.258819403792806798405           # -Ai'(0)
_LEGENDRE_NODES, _LEGENDRE_WEIGHTS = np.polynomial.legendre.leggauss(80)


def _airy_series(x):
    """Ai(x) = Ai(0) f(x) - |Ai'(0)| g(x), f = Σ 3^k (1/3)_k x^3k / (3k)!,
    g = Σ 3^k (2/3)_k x^(3k+1) / (3k+1)!."""
    cube = x * x * x
    f_term, g_term = np.ones_like(x), x.copy()
    f, g = f_term.copy(), g_term.copy()
    for k in range(1, 40):
        f_term = f_term * cube / ((3 * k - 1) * (3 * k))
        g_term = g_term * cube / ((3 * k) * (3 * k + 1))
        f += f_term
        g += g_term
    return _AIRY_0 * f - _AIRY_1 * g


def _scaled_k_third(zeta):
    """e^ζ K_{1/3}(ζ) for ζ > 1.8."""
    step = 0.1
    trapezoid = np.zeros_like(zeta)
    for node in np.arange(0.0, 5.0, step):
        trapezoid += np.exp(-zeta * (np.cosh(node) - 1.0)) * np.cosh(node / 3) * (
            step / 2 if node == 0 else step)
    mu = 4.0 / 9.0
    term = np.ones_like(zeta)
    asymptotic = term.copy()
    for k in range(1, 40):
        term = term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * np.maximum(zeta, 25.0))
        asymptotic += term
    asymptotic *= np.sqrt(np.pi / (2.0 * np.maximum(zeta, 25.0)))
    return np.where(zeta < 25.0, trapezoid, asymptotic)


def _airy_negative(x):
    """Ai(x) for x < -2."""
    r = -x
    zeta = 2.0 / 3.0 * r * np.sqrt(r)
    small = np.minimum(zeta, 30.0)
    t = (_LEGENDRE_NODES[:, None] + 1.0) * (np.pi / 2)              # on [0, π]
    oscillating = (np.pi / 2) * (_LEGENDRE_WEIGHTS[:, None] * np.cos(t / 3) *
                                 np.cos(small[None, :] * np.sin(t))).sum(axis=0)
    end = np.arcsinh(45.0 / small)                                  # exp(-ζ sinh t) < 1e-19
    u = (_LEGENDRE_NODES[:, None] + 1.0) * (end[None, :] / 2)        # on [0, end]
    decaying = (end / 2) * (_LEGENDRE_WEIGHTS[:, None] * np.exp(-small[None, :] * np.sinh(u)) *
                            np.sinh(u / 3)).sum(axis=0)
    quadrature = np.sqrt(r) / 3 * (2 / np.pi * oscillating + np.sqrt(3) / np.pi * decaying)
    # Hankel: Ai(-r) = (sin(ζ + π/4) P - cos(ζ + π/4) Q) / (sqrt(π) r^(1/4))
    big = np.maximum(zeta, 30.0)
    term = np.ones_like(big)
    p, q = term.copy(), np.zeros_like(big)
    for k in range(1, 40):
        # u_k = (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k) u_{k-1}
        term = term * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216.0 * k * big)
        if k % 2:
            q += term if (k // 2) % 2 == 0 else -term
        else:
            p += -term if (k // 2) % 2 else term
    phase = big + np.pi / 4
    hankel = (np.sin(phase) * p - np.cos(phase) * q) / (np.sqrt(np.pi) * np.sqrt(np.sqrt(r)))
    return np.where(zeta < 30.0, quadrature, hankel)


def airy_ai(x):
    """The Airy function Ai: NaN at ±inf (as PyTorch's)."""
    x = _float64(x)
    shape = x.shape
    flat = x.reshape(-1).astype(np.float64)
    values = np.full(flat.shape, np.nan)
    with np.errstate(all="ignore"):
        middle = np.abs(flat) <= 2.0
        right = (flat > 2.0) & np.isfinite(flat)
        left = (flat < -2.0) & np.isfinite(flat)
        values[middle] = _airy_series(flat[middle])
        r = flat[right]
        zeta = 2.0 / 3.0 * r * np.sqrt(r)
        values[right] = np.sqrt(r / 3) / np.pi * _scaled_k_third(zeta) * np.exp(-zeta)
        values[left] = _airy_negative(flat[left])
    return values.reshape(shape)
