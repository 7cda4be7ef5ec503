"""The elementwise functions of ``torch.special`` that no other op module has: the normal
distribution (``ndtr``, ``ndtri``, ``log_ndtr``), ``erfcx``, the Bessel functions (J, Y,
I, K and their scaled forms) and Airy's Ai, ``xlog1py``, ``entr``, Hurwitz's ``zeta``, the
regularised incomplete gamma functions (``igamma``/``igammac``,
``torch.special.gammainc``/``gammaincc``) and the orthogonal polynomials.

Each is a pointwise op named as PyTorch's (``special_<name>``, reached as
``microtensor.special.<name>``), its kernel NumPy vectorised over the whole tensor in
float64 (a float32 result is rounded once), its derivative written in microtensor ops where
PyTorch has one.  The numerics build on Cody's erf (``activation``) and ``special_math``.
"""
import math

import numpy as np

from microtensor._C.tensor import TensorBase, float32, float64, int64
from microtensor._dtype import info, result_type
from microtensor.backends import cuda
from microtensor.ops import special_math
from microtensor.ops.activation import _erfc, _erfinv, scaled_erfc_of_large
from microtensor.ops.loops import float_dtype, pointwise, refuse_complex, store
from microtensor.ops.pointwise import _require_tensors, lgamma, where
from microtensor.ops.registry import Sample, inplace_variant, op

_SQRT_2 = math.sqrt(2.0)
_SQRT_HALF = math.sqrt(0.5)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_LOG_SQRT_2PI = math.log(_SQRT_2PI)
_2_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _host_loop(fn):
    """A ``pointwise`` loop of ``fn``, which selects and indexes elements with NumPy's
    array constructors: GPU (CuPy) operands are computed on the host and the result copied
    back.  A float32 result overflows to ±inf quietly, as PyTorch's."""
    def on_host(*arrays):
        if not any(cuda.is_device_array(a) for a in arrays):
            return fn(*arrays)
        xp = cuda.cupy()
        return xp.asarray(fn(*[xp.asnumpy(a) if cuda.is_device_array(a) else a
                                for a in arrays]))
    stored = store(on_host)

    def loop(*arrays, out, dtype, casting):
        with np.errstate(over="ignore"):
            return stored(*arrays, out=out, dtype=dtype, casting=casting)
    return loop


# --------------------------------------------------------------------------- numerics
# (float64 arrays in, float64 arrays out)

def _exp_square(x):
    """exp(x^2) with x^2 split as h^2 + (x - h)(x + h), h = x rounded to 1/16 (h^2 exact):
    the rounding of x^2 would otherwise be amplified by the exponential."""
    head = np.trunc(x * 16.0) / 16.0
    return np.exp(head * head) * np.exp((x - head) * (x + head))


def erfcx(x):
    """exp(x^2) erfc(x): Cody's rational functions of the scaled erfc above 0.46875,
    exp(x^2) erfc(x) up to it, and 2 exp(x^2) - erfcx(-x) below -0.46875 (+inf from about
    -26.6 on)."""
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        scaled = scaled_erfc_of_large(ax)
        near_zero = _exp_square(np.clip(x, -1.0, 1.0)) * _erfc(x)
        negative = 2.0 * _exp_square(np.minimum(ax, 40.0)) - scaled
        return np.where(ax <= 0.46875, near_zero, np.where(x < 0, negative, scaled))


def ndtr(x):
    """The standard normal distribution function, erfc(-x / sqrt 2) / 2."""
    with np.errstate(all="ignore"):
        return 0.5 * _erfc(-x * _SQRT_HALF)


def log_ndtr(x):
    """log ndtr(x), accurate in the far left tail through erfcx:
    log(erfcx(-t) / 2) - t^2 with t = x / sqrt 2 below -1, log1p(-erfc(t) / 2) above."""
    with np.errstate(all="ignore"):
        t = x * _SQRT_HALF
        left = np.minimum(t, 0.0)
        tail = np.log(erfcx(-left) / 2.0) - left * left
        return np.where(x < -1.0, tail, np.log1p(-0.5 * _erfc(t)))


def _ndtri_lower_tail(q):
    """ndtri(q) for 0 < q < 0.25: Abramowitz and Stegun's 26.2.23 (error below 4.5e-4),
    then Newton steps on log ndtr(x) = log q (log ndtr is nearly linear in the tail, so
    each step squares the relative error)."""
    t = np.sqrt(-2.0 * np.log(q))
    x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) /
          (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))))
    log_q = np.log(q)
    for _ in range(4):
        log_cdf = log_ndtr(x)
        slope = np.exp(-0.5 * x * x - log_cdf - _LOG_SQRT_2PI)   # d log ndtr / dx
        x = x - (log_cdf - log_q) / slope
    return x


def ndtri(p):
    """The inverse of ndtr: sqrt 2 erfinv(2p - 1) in [0.25, 0.75] (2p - 1 is exact there),
    the lower tail at min(p, 1 - p) (1 - p is exact for p >= 0.5) elsewhere; -inf at 0,
    +inf at 1, NaN outside [0, 1]."""
    with np.errstate(all="ignore"):
        central = _SQRT_2 * _erfinv(2.0 * p - 1.0)
        q = np.minimum(p, 1.0 - p)
        tail = _ndtri_lower_tail(np.clip(q, 1e-320, 0.25))
        result = np.where(np.abs(p - 0.5) <= 0.25, central, np.where(p < 0.5, tail, -tail))
        result = np.where(p == 0, -np.inf, np.where(p == 1, np.inf, result))
        return np.where((p < 0) | (p > 1), np.nan, result)


def xlog1py(x, y):
    """x log1p(y), 0 where x is 0 and y is no NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log1p(y))


def entr(x):
    """-x log x: 0 at 0, -inf for negative x."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, -x * np.log(x), np.where(x == 0, 0.0, np.where(
            x < 0, -np.inf, x)))


def spherical_bessel_j0(x):
    """sin(x) / x: 1 at 0, 0 at ±inf."""
    with np.errstate(all="ignore"):
        return np.where(x == 0, 1.0, np.where(np.isinf(x), 0.0, np.sin(x) / x))


def _lgamma1p(a):
    """log Γ(1 + a) for 0 <= a < 1, exact for tiny a (where 1 + a would round away a):
    the series -γ a + Σ_k ζ(k) (-a)^k / k up to 0.2, log Γ(1 + a) above."""
    with np.errstate(all="ignore"):
        small = np.minimum(a, 0.2)
        total = -special_math._EULER * small
        power = -small
        for k, zeta_minus_1 in enumerate(special_math._ZETA_MINUS_1, 2):
            power = power * -small
            total += (1.0 + zeta_minus_1) / k * power
        return np.where(a <= 0.2, total, special_math.lgamma(1.0 + a))


def _gamma_density(a, x):
    """x^a e^-x / Γ(a), from its logarithm: below a = 1 as a x^a e^-x / Γ(a + 1) (log Γ(a)
    would be large and its rounding amplified); from a = 10 on as
    a (log1p(u) - u) + log(a / 2π) / 2 - S(a) with u = (x - a) / a and S Stirling's series
    of log Γ (the direct a log x - x - log Γ(a) would cancel terms of size a)."""
    with np.errstate(all="ignore"):
        direct = a * np.log(x) - x - special_math.lgamma(a)
        small = np.minimum(a, 1.0)
        below_one = small * np.exp(small * np.log(x) - x - _lgamma1p(small))
        big = np.maximum(a, 10.0)
        w = 1.0 / (big * big)
        stirling = (1 / 12 + w * (-1 / 360 + w * (1 / 1260 + w * (-1 / 1680 + w * (
            1 / 1188 + w * (-691 / 360360 + w / 156)))))) / big
        u = (x - big) / big
        uniform = big * (np.log1p(u) - u) + 0.5 * np.log(big / (2 * np.pi)) - stirling
        return np.where(a < 1.0, below_one, np.exp(np.where(a >= 10.0, uniform, direct)))


_GAMMA_INC_STEPS = 20000   # enough below _TEMME_FROM, where x near a takes the most
_TEMME_FROM = 1e6          # Temme's two terms reach float64 precision from there on


def _lower_gamma_series(a, x, density):
    """P(a, x) = x^a e^-x / Γ(a + 1) Σ_n x^n / ((a+1) ... (a+n)) (for x < a + 1, where the
    terms fall)."""
    term = np.ones_like(x)
    total = term.copy()
    active = np.arange(x.size)
    for n in range(1, _GAMMA_INC_STEPS):
        term[active] *= x[active] / (a[active] + n)
        total[active] += term[active]
        active = active[term[active] > 1e-17 * total[active]]
        if not active.size:
            break
    return density / a * total


def _upper_gamma_fraction(a, x, density):
    """Q(a, x) = x^a e^-x / Γ(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...))
    by the modified Lentz method (for x >= a + 1, where the fraction converges fast)."""
    tiny = 1e-300
    b = x + 1.0 - a
    c = np.full_like(x, 1.0 / tiny)
    d = 1.0 / b
    h = d.copy()
    active = np.arange(x.size)
    for i in range(1, _GAMMA_INC_STEPS):
        an = -i * (i - a[active])
        b[active] += 2.0
        d_next = an * d[active] + b[active]
        d_next = np.where(np.abs(d_next) < tiny, tiny, d_next)
        c_next = b[active] + an / c[active]
        c_next = np.where(np.abs(c_next) < tiny, tiny, c_next)
        d[active] = 1.0 / d_next
        c[active] = c_next
        delta = d[active] * c_next
        h[active] *= delta
        active = active[np.abs(delta - 1.0) > 1e-16]
        if not active.size:
            break
    return density * h


def _temme_upper(a, x):
    """Q(a, x) for a large by Temme's uniform expansion (DLMF 8.12): erfc(η sqrt(a/2)) / 2
    + exp(-a η^2 / 2) / sqrt(2 pi a) (C0(η) + C1(η) / a), η^2 / 2 = λ - 1 - log λ with
    λ = x / a; C0 and C1 by their Taylor series in η near λ = 1, where their closed forms
    cancel."""
    lam = x / a
    d = lam - 1.0
    eta = np.sign(d) * np.sqrt(2.0 * (d - np.log1p(d)))
    safe_d = np.where(d == 0, 1.0, d)
    safe_eta = np.where(eta == 0, 1.0, eta)
    c0 = 1.0 / safe_d - 1.0 / safe_eta
    c1 = 1.0 / safe_eta ** 3 - 1.0 / safe_d ** 3 - 1.0 / safe_d ** 2 - 1.0 / (12.0 * safe_d)
    near = np.abs(d) < 0.03
    c0 = np.where(near, -1 / 3 + eta * (1 / 12 + eta * (-2 / 135 + eta * (
        1 / 864 + eta * (1 / 2835 + eta * (-139 / 777600))))), c0)
    c1 = np.where(near, -1 / 540 + eta * (-1 / 288 + eta * (1 / 378 + eta * (
        -7 / 8640 + eta * (-1 / 1440)))), c1)
    return 0.5 * _erfc(eta * np.sqrt(0.5 * a)) + np.exp(-0.5 * a * eta * eta) / np.sqrt(
        2 * np.pi * a) * (c0 + c1 / a)


def _upper_gamma_small_a(a, x):
    """Q(a, x) for a < 1 and x < a + 1, where 1 - P would cancel (P is near 1 for a small a):
    Q = -expm1(a log x - log Γ(1 + a)) - x^a / Γ(a) Σ_{n>=1} (-x)^n / (n! (a + n))."""
    scaled_power = np.exp(a * np.log(x) - _lgamma1p(a))          # x^a / Γ(a + 1)
    term = np.ones_like(x)
    total = np.zeros_like(x)
    for n in range(1, 60):                   # x < 2: the terms fall as 2^n / n!
        term = term * -x / n
        total += term / (a + n)
    return -np.expm1(a * np.log(x) - _lgamma1p(a)) - a * scaled_power * total


def _gamma_inc(a, x, upper):
    """P(a, x) (``upper`` False) or Q(a, x) = 1 - P, with PyTorch's values at the edges."""
    a, x = np.broadcast_arrays(special_math._float64(a), special_math._float64(x))
    shape = a.shape
    a, x = a.reshape(-1).astype(np.float64), x.reshape(-1).astype(np.float64)
    inner = (a > 0) & (x > 0) & np.isfinite(a) & np.isfinite(x)
    result = np.full(a.shape, np.nan)
    with np.errstate(all="ignore"):
        ai, xi = a[inner], x[inner]
        series = xi < ai + 1.0
        temme = ai >= _TEMME_FROM
        series, fraction = series & ~temme, ~series & ~temme
        value = np.empty_like(ai)      # P or Q, whichever each method gives directly
        value[series] = _lower_gamma_series(ai[series], xi[series],
                                            _gamma_density(ai[series], xi[series]))
        value[fraction] = _upper_gamma_fraction(ai[fraction], xi[fraction],
                                                _gamma_density(ai[fraction], xi[fraction]))
        value[temme] = _temme_upper(ai[temme], xi[temme])
        value = np.where(series != upper, value, 1.0 - value)
        if upper:
            small = series & (ai < 1.0)
            value[small] = _upper_gamma_small_a(ai[small], xi[small])
        result[inner] = value
    # PyTorch's edge cases, tested in its order (a NaN can pass a test on the other
    # argument): negative arguments, a = 0, x = 0, an infinite a, an infinite x
    one, zero = (0.0, 1.0) if upper else (1.0, 0.0)
    edges = [((x < 0) | (a < 0), np.nan), ((a == 0) & (x > 0), one), (a == 0, np.nan),
             (x == 0, zero), (np.isinf(a) & np.isinf(x), np.nan), (np.isinf(a), zero),
             (np.isinf(x), one)]
    result = np.select([condition for condition, _ in edges] + [np.ones_like(inner)],
                       [value for _, value in edges] + [result])
    return result.reshape(shape)


def gammainc(a, x):
    """The regularised lower incomplete gamma function P(a, x) = γ(a, x) / Γ(a)."""
    return _gamma_inc(a, x, upper=False)


def gammaincc(a, x):
    """The regularised upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a)."""
    return _gamma_inc(a, x, upper=True)


# ---- orthogonal polynomials of degree n (an array, truncated to whole numbers; negative
# or NaN: 0): by their three-term recurrences, one pass over the elements per degree up to
# the largest n asked for (stopping as each element reaches its own), with PyTorch's
# closed forms on (-1, 1) for the Chebyshev kinds past degree 6 or 8 and its values at ±1.

def _recurrence(x, n, first, second, step):
    """p_n(x) from p_0 = ``first(x)``, p_1 = ``second(x)`` and
    p_{k+1} = ``step(k, x, p_{k-1}, p_k)``; 0 for n < 0."""
    previous, current = first(x), second(x)
    result = np.where(n == 0, previous, np.where(n == 1, current, 0.0))
    active = np.flatnonzero(n >= 2)
    top = int(n.max()) if n.size else 0
    x_active, n_active = x.reshape(-1)[active], n.reshape(-1)[active]
    previous = np.broadcast_to(previous, x.shape).reshape(-1)[active]
    current = np.broadcast_to(current, x.shape).reshape(-1)[active]
    flat = result.reshape(-1).copy()
    for k in range(1, top):
        previous, current = current, step(k, x_active, previous, current)
        done = n_active == k + 1
        if done.any():
            flat[active[done]] = current[done]
            keep = ~done
            active, x_active, n_active = active[keep], x_active[keep], n_active[keep]
            previous, current = previous[keep], current[keep]
    return flat.reshape(x.shape)


def _degrees(x, n):
    """(x, n) broadcast, n truncated toward 0 (NaN and negative degrees become -1)."""
    x, n = np.broadcast_arrays(x, n)
    n = np.where(np.isnan(n), -1.0, np.trunc(n))
    return x.astype(np.float64), np.where(n < 0, -1.0, n)


def _chebyshev(kind, x, n, closed_from):
    """Chebyshev polynomials of the ``kind`` T, U, V or W."""
    x, n = _degrees(x, n)
    first = {"t": lambda z: np.ones_like(z), "u": lambda z: np.ones_like(z),
             "v": lambda z: np.ones_like(z), "w": lambda z: np.ones_like(z)}[kind]
    second = {"t": lambda z: z, "u": lambda z: 2 * z, "v": lambda z: 2 * z - 1,
              "w": lambda z: 2 * z + 1}[kind]
    with np.errstate(all="ignore"):
        result = _recurrence(x, n, first, second, lambda k, z, p, q: 2 * z * q - p)
        theta = np.arccos(np.clip(x, -1.0, 1.0))
        odd = n % 2 == 1
        closed = {
            "t": np.cos(n * theta),
            "u": np.where(np.sin(theta) != 0, np.sin((n + 1) * theta) / np.sin(theta),
                          (n + 1) * np.cos((n + 1) * theta) / x),
            "v": np.where(np.sin(theta / 2) != 1,
                          np.cos((n + 0.5) * theta) / np.cos(theta / 2),
                          np.where(odd, -(2 * n + 1), 2 * n + 1)),
            "w": np.where(np.cos(theta / 2) != 1,
                          np.sin((n + 0.5) * theta) / np.sin(theta / 2),
                          np.where(x > 0, 2 * n + 1, np.where(odd, -1.0, 1.0))),
        }[kind]
        result = np.where((n > closed_from) & (np.abs(x) < 1), closed, result)
        at_one = {"t": (1.0, np.where(odd, -1.0, 1.0)),
                  "u": (n + 1, np.where(odd, -(n + 1), n + 1)),
                  "v": (1.0, np.where(odd, -(2 * n + 1), 2 * n + 1)),
                  "w": (2 * n + 1, np.where(odd, -1.0, 1.0))}[kind]
        result = np.where(x == 1, at_one[0], np.where(x == -1, at_one[1], result))
    return np.where(n < 0, 0.0, result)


def chebyshev_polynomial_t(x, n):
    """T_n(x), cos(n θ) for x = cos θ."""
    return _chebyshev("t", x, n, 6)


def chebyshev_polynomial_u(x, n):
    """U_n(x), sin((n + 1) θ) / sin θ for x = cos θ."""
    return _chebyshev("u", x, n, 8)


def chebyshev_polynomial_v(x, n):
    """V_n(x), cos((n + 1/2) θ) / cos(θ / 2) for x = cos θ."""
    return _chebyshev("v", x, n, 8)


def chebyshev_polynomial_w(x, n):
    """W_n(x), sin((n + 1/2) θ) / sin(θ / 2) for x = cos θ."""
    return _chebyshev("w", x, n, 8)


def shifted_chebyshev_polynomial_t(x, n):
    """T*_n(x) = T_n(2x - 1)."""
    return _chebyshev("t", 2 * np.asarray(x) - 1, n, 6)


def shifted_chebyshev_polynomial_u(x, n):
    """U*_n(x) = U_n(2x - 1)."""
    return _chebyshev("u", 2 * np.asarray(x) - 1, n, 8)


def shifted_chebyshev_polynomial_v(x, n):
    """V*_n(x) = V_n(2x - 1)."""
    return _chebyshev("v", 2 * np.asarray(x) - 1, n, 8)


def shifted_chebyshev_polynomial_w(x, n):
    """W*_n(x) = W_n(2x - 1)."""
    return _chebyshev("w", 2 * np.asarray(x) - 1, n, 8)


def hermite_polynomial_h(x, n):
    """The physicists' Hermite polynomial H_n: H_{k+1} = 2x H_k - 2k H_{k-1}."""
    x, n = _degrees(x, n)
    with np.errstate(all="ignore"):
        result = _recurrence(x, n, np.ones_like, lambda z: 2 * z,
                             lambda k, z, p, q: 2 * z * q - 2 * k * p)
    return np.where(n < 0, 0.0, result)


def hermite_polynomial_he(x, n):
    """The probabilists' Hermite polynomial He_n: He_{k+1} = x He_k - k He_{k-1}."""
    x, n = _degrees(x, n)
    with np.errstate(all="ignore"):
        result = _recurrence(x, n, np.ones_like, lambda z: z,
                             lambda k, z, p, q: z * q - k * p)
    return np.where(n < 0, 0.0, result)


def laguerre_polynomial_l(x, n):
    """The Laguerre polynomial L_n: (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}; 1 at 0."""
    x, n = _degrees(x, n)
    with np.errstate(all="ignore"):
        result = _recurrence(x, n, np.ones_like, lambda z: 1 - z,
                             lambda k, z, p, q: ((2 * k + 1 - z) * q - k * p) / (k + 1))
    return np.where(n < 0, 0.0, np.where(x == 0, 1.0, result))


def legendre_polynomial_p(x, n):
    """The Legendre polynomial P_n: (k + 1) P_{k+1} = (2k + 1) x P_k - k P_{k-1}."""
    x, n = _degrees(x, n)
    with np.errstate(all="ignore"):
        result = _recurrence(x, n, np.ones_like, lambda z: z,
                             lambda k, z, p, q: ((2 * k + 1) * z * q - k * p) / (k + 1))
        result = np.where(x == 1, 1.0, np.where(x == -1, np.where(n % 2 == 1, -1.0, 1.0),
                                                  result))
    return np.where(n < 0, 0.0, result)


# --------------------------------------------------------------------------- declarations

def _float_samples(low=None, high=None):
    """Shapes, a transposed view, a 0-d tensor, float32 and integer inputs."""
    def samples(make):
        return [Sample(make(3, 4, low=low, high=high)), Sample(make(5, low=low, high=high)),
                Sample(make((), low=low, high=high)),
                Sample(make(4, 3, low=low, high=high).t()),
                Sample(make(2, 3, dtype=float32, low=low, high=high)),
                Sample(make(2, 3, dtype=int64, low=0 if low is None or low < 0 else
                            math.ceil(low), high=3))]
    return samples


def _unary(name, fn, samples, differentiable=True, kernel_name=None, out_layout=None):
    """Declare ``special_<name>``: ``fn`` elementwise in float64, the result in the input's
    float type (integers and bool: the default one; complex tensors refused with the error
    of PyTorch's kernel ``kernel_name``, ``<name>_cpu`` by default; ``out_layout``: as
    ``Op.out_layout``)."""
    loop = _host_loop(fn)
    kernel_name = kernel_name or name + "_cpu"

    def kernel(self, *, out=None):
        _require_tensors("special_" + name, input=self)
        refuse_complex(self, kernel_name)
        return pointwise(loop, self, out=out, dtype=float_dtype(self._dtype),
                         compute_dtype=float64)
    kernel.__name__ = "special_" + name
    kernel.__doc__ = f"``torch.special.{name}``: {fn.__doc__.splitlines()[0]}"
    return op("special_" + name, method=False, function=False, family="pointwise",
              samples=samples, differentiable=differentiable, out_layout=out_layout)(kernel)


def _binary(name, fn, samples, *, tensors_only=False, **options):
    """Declare a two-input op ``name``: ``fn`` elementwise in float64, the result in the
    promoted float type (complex ones refused).  Either input may be a Python number (not
    both) unless
    ``tensors_only``, where integer and bool inputs are refused too (PyTorch has no such
    kernel)."""
    loop = _host_loop(fn)
    short = name.replace("special_", "")

    def kernel(self, other, *, out=None):
        if tensors_only:
            _require_tensors(name, input=self, other=other)
        elif not isinstance(self, TensorBase) and not isinstance(other, TensorBase):
            raise TypeError(f"{name}() received an invalid combination of arguments - got "
                            f"({type(self).__name__}, {type(other).__name__})")
        dt = result_type(self, other)
        refuse_complex(dt, short + "_cpu")
        if tensors_only and not dt.is_floating_point:
            raise NotImplementedError(f"\"{short}_cpu\" not implemented for "
                                      f"'{info(dt).scalar_name}'")
        return pointwise(loop, self, other, out=out, dtype=float_dtype(dt),
                         compute_dtype=float64)
    kernel.__name__ = name
    kernel.__doc__ = fn.__doc__.splitlines()[0]
    options.setdefault("method", False)
    options.setdefault("function", False)
    return op(name, inputs=("self", "other"), family="pointwise", samples=samples,
              **options)(kernel)


def _derivative_not_implemented(name):
    raise NotImplementedError(f"the derivative for '{name}' is not implemented.")


special_ndtr = _unary("ndtr", ndtr, _float_samples(), kernel_name="erf_vml_cpu",
                      out_layout="contiguous")   # PyTorch's is a composite of erf
special_ndtri = _unary("ndtri", ndtri, _float_samples(0.02, 0.98))
special_log_ndtr = _unary("log_ndtr", log_ndtr, _float_samples(-12.0, 4.0))
special_erfcx = _unary("erfcx", erfcx, _float_samples(-3.0, 8.0))
special_i0e = _unary("i0e", special_math.i0e, _float_samples(-5.0, 5.0))
special_i1e = _unary("i1e", special_math.i1e, _float_samples(-5.0, 5.0))
special_entr = _unary("entr", entr, _float_samples(0.1, 3.0))
# PyTorch's have no derivative: their results do not require grad
special_modified_bessel_i0 = _unary("modified_bessel_i0", special_math.i0,
                                    _float_samples(-5.0, 5.0), differentiable=False)
special_modified_bessel_i1 = _unary("modified_bessel_i1", special_math.i1,
                                    _float_samples(-5.0, 5.0), differentiable=False)
special_spherical_bessel_j0 = _unary("spherical_bessel_j0", spherical_bessel_j0,
                                     _float_samples(-8.0, 8.0), differentiable=False)
special_airy_ai = _unary("airy_ai", special_math.airy_ai, _float_samples(-10.0, 5.0),
                         differentiable=False)
special_bessel_j0 = _unary("bessel_j0", special_math.bessel_j0, _float_samples(-30.0, 30.0),
                           differentiable=False)
special_bessel_j1 = _unary("bessel_j1", special_math.bessel_j1, _float_samples(-30.0, 30.0),
                           differentiable=False)
special_bessel_y0 = _unary("bessel_y0", special_math.bessel_y0, _float_samples(0.1, 30.0),
                           differentiable=False)
special_bessel_y1 = _unary("bessel_y1", special_math.bessel_y1, _float_samples(0.1, 30.0),
                           differentiable=False)
special_modified_bessel_k0 = _unary("modified_bessel_k0", special_math.modified_bessel_k0,
                                    _float_samples(0.1, 30.0), differentiable=False)
special_modified_bessel_k1 = _unary("modified_bessel_k1", special_math.modified_bessel_k1,
                                    _float_samples(0.1, 30.0), differentiable=False)
special_scaled_modified_bessel_k0 = _unary(
    "scaled_modified_bessel_k0", special_math.scaled_modified_bessel_k0,
    _float_samples(0.1, 30.0), differentiable=False)
special_scaled_modified_bessel_k1 = _unary(
    "scaled_modified_bessel_k1", special_math.scaled_modified_bessel_k1,
    _float_samples(0.1, 30.0), differentiable=False)


@special_ndtr.def_derivative("self")
def special_ndtr(grad, self):
    return grad * (self * self * -0.5).exp() / _SQRT_2PI


@special_ndtri.def_derivative("self")
def special_ndtri(grad, result):
    return grad * (result * result * 0.5).exp() * _SQRT_2PI


@special_log_ndtr.def_derivative("self")
def special_log_ndtr(grad, self, result):
    return grad * (self * self * -0.5 - result).exp() / _SQRT_2PI


@special_erfcx.def_derivative("self")
def special_erfcx(grad, self, result):
    return grad * (self * result * 2.0 - _2_OVER_SQRT_PI)


@special_i0e.def_derivative("self")
def special_i0e(grad, self, result):
    return grad * (special_i1e(self) - self.sign() * result)


@special_i1e.def_derivative("self")
def special_i1e(grad, self, result):
    # i0e - i1e (sgn x + 1 / x), 1/2 at x = 0 (its limit)
    zero = self == 0
    slope = special_i0e(self) - result * (self.sign() + 1 / where(zero, self.new_ones(()),
                                                                  self))
    return grad * where(zero, slope.new_full((), 0.5), slope)


@special_entr.def_derivative("self")
def special_entr(grad, self):
    return grad * -(self.log() + 1)


def _xlog1py_samples(make):
    return [Sample(make(3, 4), make(3, 4, low=-0.7, high=3.0)),
            Sample(make(3, 4), make(4, low=-0.7, high=3.0)),
            Sample(make(4, 3).t(), make((), low=-0.7, high=3.0)),
            Sample(make(2, 3, dtype=float32), make(2, 3, dtype=float32, low=-0.7, high=3.0)),
            Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=0, high=4)),
            Sample(make(3), 1.5), Sample(2.0, make(3, 2, low=-0.7, high=3.0))]


special_xlog1py = _binary("special_xlog1py", xlog1py, _xlog1py_samples)


@special_xlog1py.def_derivative("self")
def special_xlog1py(grad, self, other):
    # PyTorch's: 0 where self is 0 and other <= -1 (where log1p(other) is not finite)
    slope = special_xlog1py(grad, other)
    return where((self == 0) & (other <= -1), slope.new_zeros(()), slope)


@special_xlog1py.def_derivative("other")
def special_xlog1py(grad, self, other):
    return grad * self / (other + 1)


def _zeta_samples(make):
    # ``self`` (s) is a number or float32: PyTorch has no derivative for it
    return [Sample(2.5, make(3, 4, low=0.3, high=4.0)),
            Sample(3.0, make(5, low=-2.8, high=-2.2)),
            Sample(1.5, make(4, 3, low=0.5, high=4.0).t()),
            Sample(make(3, 4, dtype=float32, low=1.1, high=6.0), make(4, low=0.3, high=4.0)),
            Sample(make(2, 3, dtype=float32, low=1.1, high=6.0),
                   make(2, 3, dtype=float32, low=0.3, high=4.0)),
            Sample(make(2, 3, dtype=int64, low=2, high=5), make(3, dtype=int64, low=1, high=5))]


special_zeta = _binary("special_zeta", special_math.zeta, _zeta_samples)


@special_zeta.def_derivative("self")
def special_zeta(grad):
    _derivative_not_implemented("zeta")


@special_zeta.def_derivative("other")
def special_zeta(grad, self, other):
    return grad * -self * special_zeta(self + 1.0, other)


def _igamma_samples(make):
    # ``self`` (a) float32: PyTorch has no derivative for it
    return [Sample(make(3, 4, dtype=float32, low=0.5, high=5.0), make(3, 4, low=0.2, high=8.0)),
            Sample(make(4, dtype=float32, low=0.5, high=5.0), make(3, 4, low=0.2, high=8.0)),
            Sample(make((), dtype=float32, low=12.0, high=20.0), make(4, 3, low=5.0,
                                                                      high=30.0).t()),
            Sample(make(2, 3, dtype=float32, low=0.5, high=5.0),
                   make(2, 3, dtype=float32, low=0.2, high=8.0))]


igamma = _binary("igamma", gammainc, _igamma_samples, tensors_only=True, method=True,
                 function=True)
igammac = _binary("igammac", gammaincc, _igamma_samples, tensors_only=True, method=True,
                  function=True)


@igamma.def_derivative("self")
def igamma(grad):
    _derivative_not_implemented("igamma: input")


@igamma.def_derivative("other")
def igamma(grad, self, other):
    return grad * ((self - 1) * other.log() - other - lgamma(self)).exp()


@igammac.def_derivative("self")
def igammac(grad):
    _derivative_not_implemented("igammac: input")


@igammac.def_derivative("other")
def igammac(grad, self, other):
    return grad * -((self - 1) * other.log() - other - lgamma(self)).exp()


def _igamma_inplace_samples(make):
    # float32 throughout: a float64 ``other`` would be differentiated through a float32 self
    return [Sample(make(3, 4, dtype=float32, low=0.5, high=5.0),
                   make(4, dtype=float32, low=0.2, high=8.0))]


igamma_ = inplace_variant(igamma, samples=_igamma_inplace_samples)
igammac_ = inplace_variant(igammac, samples=_igamma_inplace_samples)


def _polynomial_samples(low, high):
    def samples(make):
        return [Sample(make(3, 4, low=low, high=high), make(3, 4, dtype=int64, low=0, high=12)),
                Sample(make(4, 3, low=low, high=high).t(), make(4, dtype=int64, low=0, high=9)),
                Sample(make(5, low=low, high=high), 3), Sample(0.5, make(2, 3, low=-1, high=9)),
                # (float32 is tested against the float64 values in tests/test_special.py:
                # PyTorch's float32 loops lose digits to cancellation)
                Sample(make(2, 3, dtype=int64, low=-2, high=3),
                       make(2, 3, dtype=int64, low=0, high=6))]
    return samples


def _polynomial(name, fn, samples):
    """Declare ``special_<name>(input, n)``: the polynomial of degree ``n`` (either may be a
    number) in float64, the result in the promoted float type (complex ones refused); no
    derivative (PyTorch's results do not require grad)."""
    loop = _host_loop(fn)

    def kernel(self, n, *, out=None):
        if not isinstance(self, TensorBase) and not isinstance(n, TensorBase):
            raise TypeError(f"special_{name}() received an invalid combination of arguments "
                            f"- got ({type(self).__name__}, {type(n).__name__})")
        dt = result_type(self, n)
        refuse_complex(dt, name + "_cpu")
        return pointwise(loop, self, n, out=out, dtype=float_dtype(dt), compute_dtype=float64)
    kernel.__name__ = "special_" + name
    kernel.__doc__ = fn.__doc__.splitlines()[0]
    return op("special_" + name, inputs=(), method=False, function=False,
              family="pointwise", samples=samples, differentiable=False)(kernel)


_POLYNOMIALS = {"chebyshev_polynomial_t": (-1.5, 1.5), "chebyshev_polynomial_u": (-1.5, 1.5),
                "chebyshev_polynomial_v": (-1.5, 1.5), "chebyshev_polynomial_w": (-1.5, 1.5),
                "shifted_chebyshev_polynomial_t": (-0.2, 1.2),
                "shifted_chebyshev_polynomial_u": (-0.2, 1.2),
                "shifted_chebyshev_polynomial_v": (-0.2, 1.2),
                "shifted_chebyshev_polynomial_w": (-0.2, 1.2),
                "hermite_polynomial_h": (-3.0, 3.0), "hermite_polynomial_he": (-3.0, 3.0),
                "laguerre_polynomial_l": (0.0, 8.0), "legendre_polynomial_p": (-1.5, 1.5)}
for _name, (_low, _high) in _POLYNOMIALS.items():
    globals()["special_" + _name] = _polynomial(_name, globals()[_name],
                                                _polynomial_samples(_low, _high))


__all__ = ["special_ndtr", "special_ndtri", "special_log_ndtr", "special_erfcx",
           "special_i0e", "special_i1e", "special_entr", "special_modified_bessel_i0",
           "special_modified_bessel_i1", "special_spherical_bessel_j0", "special_xlog1py",
           "special_zeta", "igamma", "igammac", "special_airy_ai", "special_bessel_j0",
           "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
           "special_modified_bessel_k0", "special_modified_bessel_k1",
           "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1"]
__all__ += ["special_" + name for name in _POLYNOMIALS]
