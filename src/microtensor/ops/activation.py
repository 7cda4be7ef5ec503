"""Activation functions and the elementwise special functions they need: ``erf``,
``erfc``, ``erfinv``, ``atan2``, ``addcmul``/``addcdiv``, ``nan_to_num``, ...

Each is one pointwise op (one graph node, PyTorch's node names), its kernel NumPy
vectorised over the whole tensor (CuPy arrays take the same code), its derivative written
in microtensor ops so that it is itself differentiable.  Subgradients at kinks are
PyTorch's: ``leaky_relu`` takes the negative slope at 0, ``hardtanh`` and ``threshold``
give 0 at their bounds, ``elu`` the negative branch at 0, and so on.

NumPy has no ``erf``: it is W. J. Cody's rational approximations (float64 accuracy about
1e-16), and ``erfinv`` is M. Giles's approximation refined by Halley steps on that erf.
"""
import math

import numpy as np

from microtensor._C import meta, nnkernels
from microtensor._C.dispatch import set_unary_kernel
from microtensor._C.tensor import bool_, float32, float64, int64
from microtensor._dtype import cast_scalar, check_scalars_fit, finfo, result_type
from microtensor.ops.copy import linked
from microtensor.ops.factory import rand_like
from microtensor.ops.loops import (_type_name, conj_if_complex, float_dtype, pointwise,
                                   real_number_arg, refuse_complex, refuse_unless_floating)
from microtensor.ops.loops import store as _store
from microtensor.ops.pointwise import clamp, clamp_, pow, pow_, where
from microtensor.ops.registry import REGISTRY, Sample, inplace_variant, op
from microtensor.vmap.helpers import actual_dim, call, wrap
from microtensor.ops.shape import cat

_SQRT_2 = math.sqrt(2.0)
_2_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0
_1_OVER_SQRT_PI = 1.0 / math.sqrt(math.pi)
_1_OVER_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_K = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


# --------------------------------------------------------------------------- kernels

def _float_only(kernel, self):
    """PyTorch's kernels of most activations exist for floating types only (its error
    names the kernel)."""
    if not self._dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")


def _unary(name, self, loop, out, integers="raise"):
    """``loop`` (a ``_store``) elementwise; ``integers``: "raise" (PyTorch has no integer kernel),
    "promote" (computed in the default float dtype) or "keep" (the input's dtype)."""
    if integers == "raise":
        _float_only(name + "_cpu", self)
    dt = self._dtype if integers == "keep" else float_dtype(self._dtype)
    return pointwise(loop, self, out=out, dtype=dt)


def _polyval(coefficients, x):
    """Horner's rule, highest power first, updating one array in place (CuPy has no
    ``polyval`` for arrays)."""
    result = x * coefficients[0] + coefficients[1]
    for c in coefficients[2:]:
        result *= x
        result += c
    return result


# W. J. Cody, "Rational Chebyshev approximations for the error function" (1969): erf on
# |x| <= 0.46875, erfc(x) exp(x^2) on 0.46875 < |x| <= 4 and on |x| > 4 (in 1/x^2)
_ERF_NUM = (1.85777706184603153e-1, 3.16112374387056560e00, 1.13864154151050156e02,
            3.77485237685302021e02, 3.20937758913846947e03)
_ERF_DEN = (1.0, 2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
            2.84423683343917062e03)
_ERFC_NUM = (2.15311535474403846e-8, 5.64188496988670089e-1, 8.88314979438837594e00,
             6.61191906371416295e01, 2.98635138197400131e02, 8.81952221241769090e02,
             1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03)
_ERFC_DEN = (1.0, 1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
             1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
             3.43936767414372164e03, 1.23033935480374942e03)
_TAIL_NUM = (1.63153871373020978e-2, 3.05326634961232344e-1, 3.60344899949804439e-1,
             1.25781726111229246e-1, 1.60837851487422766e-2, 6.58749161529837803e-4)
_TAIL_DEN = (1.0, 2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
             6.05183413124413191e-2, 2.33520497626869185e-3)


def scaled_erfc_of_large(y):
    """erfcx(y) = exp(y^2) erfc(y) for y > 0.46875 (elsewhere a value to be discarded)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        middle = _polyval(_ERFC_NUM, y) / _polyval(_ERFC_DEN, y)
        z = 1.0 / (y * y)
        tail = (_1_OVER_SQRT_PI - z * _polyval(_TAIL_NUM, z) / _polyval(_TAIL_DEN, z)) / y
        return np.where(y <= 4.0, middle, tail)


def _erfc_of_large(y):
    """erfc(y) for y > 0.46875 (elsewhere a value to be discarded)."""
    scaled = scaled_erfc_of_large(y)
    with np.errstate(over="ignore", invalid="ignore"):
        # exp(-y^2) split as Cody does, so that the rounding of y^2 is not amplified
        # (past 30 the result is 0 anyway; capping keeps inf - inf out)
        y = np.minimum(y, 30.0)
        head = np.trunc(y * 16.0) / 16.0
        return scaled * np.exp(-head * head) * np.exp(-(y - head) * (y + head))


def _erf_parts(x):
    """(mask of |x| <= 0.46875, erf(x) there, erfc(|x|) elsewhere), each formula over the
    whole array and selected after: NumPy's vectorised passes are far quicker than
    gathering each range's elements."""
    z = x * x
    with np.errstate(over="ignore", invalid="ignore"):
        erf_small = x * _polyval(_ERF_NUM, z) / _polyval(_ERF_DEN, z)
    return np.abs(x) <= 0.46875, erf_small, _erfc_of_large(np.abs(x))


# GELU in float32: erf as one rational function on [-4, 4] (Eigen's, as in XLA), past 4 it
# is 1 in float32 anyway: a third of the passes of Cody's formulas, and GELU's absolute
# error as small as PyTorch's (erf itself keeps Cody's, exact to the last ulp)
_ERF32_NUM = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
              -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
              -1.60960333262415e-02)
_ERF32_DEN = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
              -7.37332916720468e-03, -1.42647390514189e-02)


def _gelu_erf(x):
    if x.dtype != np.float32:
        return _erf(x)
    x = np.clip(x, -4.0, 4.0)
    z = x * x
    return x * _polyval(_ERF32_NUM, z) / _polyval(_ERF32_DEN, z)


def _erf(x):
    small, erf_small, erfc_large = _erf_parts(x)
    return np.where(small, erf_small, np.copysign(1.0 - erfc_large, x))


def _erfc(x):
    small, erf_small, erfc_large = _erf_parts(x)
    return np.where(small, 1.0 - erf_small, np.where(x < 0, 2.0 - erfc_large, erfc_large))


# M. Giles, "Approximating the erfinv function" (2010): about 1e-7 relative, in w
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erfinv(y):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -np.log((1.0 - y) * (1.0 + y))
        x = y * np.where(w < 5.0, _polyval(_ERFINV_CENTRAL, w - 2.5),
                         _polyval(_ERFINV_TAIL, np.sqrt(w) - 3.0))
        a = np.abs(y)
        finite = a < 1
        # Halley steps on erf(x) = |y| in the middle; in the tails, where erf(x) - y
        # would cancel, Newton steps on log erfc(x) = log(1 - |y|), which is nearly
        # quadratic and so converges from Giles's rougher guesses there
        middle = a <= 0.5
        log_q = np.log(1.0 - a)
        for _ in range(4):
            ax = np.abs(x)
            density = _2_OVER_SQRT_PI * np.exp(-ax * ax)
            step = (_erf(ax) - a) / density
            halley = ax - step / (1.0 + ax * step)
            tail = _erfc(ax)
            newton = ax + (np.log(tail) - log_q) * tail / density
            x = np.where(finite, np.copysign(np.where(middle, halley, newton), y), x)
        return np.where(a == 1, np.copysign(np.inf, y), np.where(a > 1, np.nan, x))


# --------------------------------------------------------------------------- samples

def _float_samples(low=None, high=None, integers=False):
    def samples(make):
        cases = [Sample(make(3, 4, low=low, high=high)), Sample(make(5, low=low, high=high)),
                 Sample(make((), low=low, high=high)),
                 Sample(make(4, 3, low=low, high=high).t())]
        if integers:
            cases.append(Sample(make(2, 3, dtype=int64)))
        return cases
    return samples


def _away_from(points, samples):
    """Samples with the values within 0.05 of a kink moved off it (finite differences
    are undefined there; the subgradient PyTorch picks is tested separately)."""
    def shifted(make):
        def make_away(*shape, **kwargs):
            t = make(*shape, **kwargs)
            if t.dtype.is_floating_point:
                a = t._array()
                for p in points:
                    near = np.abs(a - p) < 0.05
                    a[near] = p + 0.1
            return t
        return samples(make_away)
    return shifted


def _with_params(samples, *extra):
    """``samples`` plus the same first tensors called with each kwargs dict of ``extra``."""
    def combined(make):
        cases = samples(make)
        return cases + [Sample(make(3, 4, low=-4, high=4), **kw) for kw in extra]
    return combined


# --------------------------------------------------------------------------- special functions

_ERF_LOOP, _ERFC_LOOP, _ERFINV_LOOP = _store(_erf), _store(_erfc), _store(_erfinv)

@op(family="pointwise", samples=_float_samples(integers=True))
def erf(self, *, out=None):
    refuse_complex(self, "erf_vml_cpu")
    return _unary("erf", self, _ERF_LOOP, out, integers="promote")


set_unary_kernel(erf, _ERF_LOOP)


@erf.def_derivative("self")
def erf(grad, self):
    return grad * (-self * self).exp() * _2_OVER_SQRT_PI


@op(family="pointwise", samples=_float_samples(integers=True))
def erfc(self, *, out=None):
    refuse_complex(self, "erfc_vml_cpu")
    return _unary("erfc", self, _ERFC_LOOP, out, integers="promote")


set_unary_kernel(erfc, _ERFC_LOOP)


@erfc.def_derivative("self")
def erfc(grad, self):
    return grad * (-self * self).exp() * -_2_OVER_SQRT_PI


@op(family="pointwise", samples=_float_samples(-0.95, 0.95))
def erfinv(self, *, out=None):
    refuse_complex(self, "erfinv_vml_cpu")
    return _unary("erfinv", self, _ERFINV_LOOP, out, integers="promote")


set_unary_kernel(erfinv, _ERFINV_LOOP)


@erfinv.def_derivative("self")
def erfinv(grad, result):
    return grad * (result * result).exp() * _SQRT_PI_OVER_2


erf_ = inplace_variant(erf)
erfc_ = inplace_variant(erfc)
erfinv_ = inplace_variant(erfinv)


def _atan2_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(3, 4), make(4)),
            Sample(make(2, 3), make(())), Sample(make(4, 3).t(), make(3, 4)),
            Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=1))]


@op(inputs=("self", "other"), family="pointwise", samples=_atan2_samples)
def atan2(self, other, *, out=None):
    dt = result_type(self, other)
    refuse_complex(dt, "atan2_cpu")
    return pointwise(_store(lambda a, b: np.arctan2(a, b)), self, other, out=out,
                     dtype=float_dtype(dt))


@atan2.def_joint_derivative     # both gradients share the scale
def atan2(grad, self, other):
    # the gradient 0 at the origin, where the formula is 0/0, as PyTorch gives it
    squared_radius = self * self + other * other
    scale = grad * squared_radius.reciprocal().masked_fill(squared_radius == 0, 0)
    return scale * other, scale * -self


atan2_ = inplace_variant(atan2)


@op(kind="composite", inputs=("self", "other"))
def arctan2(self, other):
    return atan2(self, other)


@op(kind="composite", inputs=("self", "other"), function=False)
def arctan2_(self, other):
    return atan2_(self, other)


def _addc_samples(divisor_low):
    def samples(make):
        low = divisor_low
        cases = [Sample(make(3, 4), make(3, 4), make(3, 4, low=low)),
                 Sample(make(3, 4), make(4), make(3, 1, low=low), value=0.5),
                 Sample(make(2, 3), make(()), make(2, 3, low=low), value=-2),
                 Sample(make(4, 3).t(), make(3, 4), make(3, 4, low=low))]
        if divisor_low is None:
            cases.append(Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64),
                                make(3, dtype=int64), value=3))
        return cases
    return samples


def _scalar_value(self, tensor1, tensor2, value):
    """``value`` as PyTorch applies it: converted to the result's type (an integer result
    truncates a float ``value`` and wraps it to its range; a complex one is refused by a
    real result)."""
    return cast_scalar(value, result_type(self, tensor1, tensor2))


@op(inputs=("self", "tensor1", "tensor2"), family="pointwise", samples=_addc_samples(None))
def addcmul(self, tensor1, tensor2, *, value=1, out=None):
    if result_type(self, tensor1, tensor2) is bool_:
        raise NotImplementedError("\"addcmul_cpu_out\" not implemented for 'Bool'")
    value = _scalar_value(self, tensor1, tensor2, value)
    return pointwise(_store(lambda a, b, c: a + value * (b * c)), self, tensor1, tensor2,
                     out=out)


@addcmul.def_derivative("self")
def addcmul(grad):
    return grad


@addcmul.def_derivative("tensor1")
def addcmul(grad, tensor2, value):
    return grad * conj_if_complex(value * tensor2)


@addcmul.def_derivative("tensor2")
def addcmul(grad, tensor1, value):
    return grad * conj_if_complex(value * tensor1)


@op(inputs=("self", "tensor1", "tensor2"), family="pointwise", samples=_addc_samples(0.5))
def addcdiv(self, tensor1, tensor2, *, value=1, out=None):
    if result_type(tensor1, tensor2).kind < 2:     # (neither floating nor complex)
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic "
            "addcdiv behavior can be implemented as (input + value * torch.trunc(tensor1 / "
            "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
            "tensor2) for float inputs. The future addcdiv behavior is just the latter "
            "implementation: (input + value * tensor1 / tensor2), for all dtypes.")
    return pointwise(_store(lambda a, b, c: a + value * (b / c)), self, tensor1, tensor2,
                     out=out)


@addcdiv.def_derivative("self")
def addcdiv(grad):
    return grad


@addcdiv.def_derivative("tensor1")
def addcdiv(grad, tensor2, value):
    return grad * conj_if_complex(value / tensor2)


@addcdiv.def_derivative("tensor2")
def addcdiv(grad, tensor1, tensor2, value):
    return -grad * conj_if_complex(value * tensor1 / (tensor2 * tensor2))


addcmul_ = inplace_variant(addcmul)
addcdiv_ = inplace_variant(addcdiv)


def _nan_to_num_samples(make):
    def with_specials(dtype):
        t = make(3, 4, dtype=dtype)
        a = t._array()
        a[0, 0], a[1, 1], a[2, 2] = np.nan, np.inf, -np.inf
        return t
    return [Sample(make(3, 4)), Sample(with_specials(float32)),
            Sample(with_specials(float32), 1.5, 2.0, -3.0),
            Sample(make(5), nan=2.0, posinf=1e10),
            Sample(make(2, 3, dtype=int64), 1.0)]


@op(out_casting=False, family="pointwise", samples=_nan_to_num_samples)
def nan_to_num(self, nan=0.0, posinf=None, neginf=None, *, out=None):
    # (NumPy's replaces in the real and the imaginary parts of complex numbers, as PyTorch's)
    for name, value in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
        real_number_arg("nan_to_num", name, value)
    if not (self._dtype.is_floating_point or self._dtype.is_complex):
        return pointwise(_store(lambda a: a), self, out=out)
    info = np.finfo(self._dtype.np)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    return pointwise(_store(lambda a: np.nan_to_num(a, nan=nan, posinf=big, neginf=small)),
                     self, out=out)


@nan_to_num.def_derivative("self")
def nan_to_num(grad, self):
    return grad * self.isfinite()


nan_to_num_ = inplace_variant(nan_to_num)


@op(out=True, out_casting=True, kind="composite",
    samples=lambda make: [Sample(make(3, 4)), Sample(make(()))])
def square(self):
    return pow(self, 2)


@op(kind="composite", function=False)
def square_(self):
    return pow_(self, 2)


@op(out=True, kind="composite", samples=lambda make: [Sample(make(3, 4), -1.0, 1.0),
                                            Sample(make(3, 4), max=0.5)])
def clip(self, min=None, max=None):
    return clamp(self, min, max)


@op(kind="composite", function=False)
def clip_(self, min=None, max=None):
    return clamp_(self, min, max)


# --------------------------------------------------------------------------- activations

def _activation(base, samples=None, function=False, inplace=True, loop=None):
    """Declare ``base`` (its kernel) as a pointwise activation, and ``base_`` if asked;
    ``loop``: the ``_store`` that a one-input activation applies, which then serves its
    float32/float64 calls in C (``dispatch.set_unary_kernel``)."""
    declared = op(base.__name__, family="pointwise", method=False, function=function,
                  samples=samples)(base)
    if loop is not None:
        set_unary_kernel(declared, loop)
    if inplace:
        inplace_variant(declared, method=False)
    return declared


_GELU_APPROXIMATIONS = ("none", "tanh")


def _check_approximate(approximate):
    if approximate not in _GELU_APPROXIMATIONS:
        raise RuntimeError("approximate argument must be either none or tanh.")


def _gelu(x, approximate):
    if approximate == "tanh":
        inner = _GELU_K * (x + _GELU_C * x * x * x)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + _gelu_erf(x / _SQRT_2))


def _gelu_samples(make):
    return _float_samples()(make) + [Sample(make(3, 4), approximate="tanh"),
                                     Sample(make(5, low=-6, high=6), approximate="tanh")]


def _with_c_kernel(c_kernel, fallback, approximate):
    """A ``pointwise`` loop calling ``c_kernel(out, *arrays, tanh_mode)`` on float32/float64
    NumPy arrays of the result's dtype and shape, ``fallback``'s NumPy formulas on anything
    else (other dtypes, broadcasting, CuPy)."""
    numpy_loop = _store(lambda *arrays: fallback(*arrays, approximate))

    def loop(*arrays, out, dtype, casting):
        if nnkernels.supports(out, *arrays) and all(a.shape == out.shape for a in arrays):
            return c_kernel(out, *arrays, approximate == "tanh")
        return numpy_loop(*arrays, out=out, dtype=dtype, casting=casting)
    return loop


def gelu(self, *, approximate="none", out=None):
    _check_approximate(approximate)
    _float_only("GeluKernelImpl", self)   # PyTorch's kernel name in its error
    return pointwise(_with_c_kernel(nnkernels.gelu, _gelu, approximate), self, out=out)


gelu = _activation(gelu, _gelu_samples)


@gelu.def_derivative("self")
def gelu(grad, self, approximate):
    return gelu_backward(grad, self, approximate=approximate)


def _gelu_derivative(x, approximate):
    if approximate == "tanh":
        x2 = x * x
        t = np.tanh(_GELU_K * (x + _GELU_C * x2 * x))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_GELU_K * (1 + 3 * _GELU_C * x2))
    return 0.5 * (1.0 + _gelu_erf(x / _SQRT_2)) + x * _1_OVER_SQRT_2PI * np.exp(-0.5 * x * x)


def _gelu_backward_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(5), make(5), approximate="tanh"),
            Sample(make(()), make(()))]


@op(inputs=("grad_output", "self"), family="pointwise", method=False, function=False,
    samples=_gelu_backward_samples)
def gelu_backward(grad_output, self, *, approximate="none"):
    """``grad_output`` times GELU's derivative at ``self``: one pass, as PyTorch's."""
    _check_approximate(approximate)
    refuse_unless_floating(result_type(grad_output, self), "GeluBackwardKernelImpl")
    return pointwise(_with_c_kernel(nnkernels.gelu_backward,
                                    lambda g, a, approx: g * _gelu_derivative(a, approx),
                                    approximate), grad_output, self)


@gelu_backward.def_derivative("grad_output")
def gelu_backward(grad, self, approximate):
    return gelu_backward(grad, self, approximate=approximate)


@gelu_backward.def_derivative("self")
def gelu_backward(grad, grad_output, self, approximate):
    if approximate == "tanh":
        x2 = self * self
        t = (_GELU_K * (self + _GELU_C * x2 * self)).tanh()
        du = _GELU_K * (1 + 3 * _GELU_C * x2)
        second = (1 - t * t) * (du - self * t * du * du + 3 * _GELU_K * _GELU_C * x2)
    else:
        second = (-0.5 * self * self).exp() * _1_OVER_SQRT_2PI * (2 - self * self)
    return grad * grad_output * second


_SILU_LOOP = _store(lambda a: a / (1.0 + np.exp(-a)))


def silu(self, *, out=None):
    if not self._dtype.is_complex:      # (PyTorch has a complex kernel of silu)
        _float_only("silu_cpu", self)
    return pointwise(_SILU_LOOP, self, out=out)


silu = _activation(silu, _float_samples(), loop=_SILU_LOOP)


@silu.def_derivative("self")
def silu(grad, self):
    s = self.sigmoid()
    return grad * conj_if_complex(s * (1 + self * (1 - s)))


_MISH_LOOP = _store(lambda a: a * np.tanh(np.logaddexp(a, 0)))


def mish(self, *, out=None):
    _float_only("mish_cpu", self)
    return pointwise(_MISH_LOOP, self, out=out)


mish = _activation(mish, _float_samples(), loop=_MISH_LOOP)


@mish.def_derivative("self")
def mish(grad, self):
    t = softplus(self).tanh()
    return grad * (t + self * self.sigmoid() * (1 - t * t))


def leaky_relu(self, negative_slope=0.01, *, out=None):
    _float_only("leaky_relu_cpu", self)
    check_scalars_fit(self._dtype, negative_slope)
    return pointwise(_store(lambda a: np.where(a > 0, a, a * negative_slope)), self,
                     out=out)


leaky_relu = _activation(leaky_relu, _with_params(_away_from((0,), _float_samples()),
                                                  {"negative_slope": 0.2}))


@leaky_relu.def_derivative("self")
def leaky_relu(grad, self, negative_slope):
    return linked(where(self > 0, grad, grad * negative_slope), self)


def elu(self, alpha=1.0, scale=1.0, input_scale=1.0, *, out=None):
    _float_only("elu_cpu", self)
    check_scalars_fit(self._dtype, alpha, scale, input_scale)
    return pointwise(_store(lambda a: np.where(
        a > 0, a * scale, np.expm1(np.minimum(a, 0) * input_scale) * (alpha * scale))),
        self, out=out)


elu = _activation(elu, _with_params(_away_from((0,), _float_samples()), {"alpha": 0.5},
                                    {"alpha": 1.5, "scale": 2.0, "input_scale": 0.5}))
elu_ = REGISTRY["elu_"]


@elu.def_derivative("self")
def elu(grad, self, alpha, scale, input_scale):
    # exp of the input with positives zeroed: no overflow where the other branch is taken,
    # and, as PyTorch's, no second derivative at 0 (the first takes the negative branch)
    below = where(self < 0, self, self.new_zeros(()))
    negative = (below * input_scale).exp() * (alpha * scale * input_scale)
    return where(self <= 0, grad * negative, grad * scale)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@op(kind="composite", samples=_away_from((0,), _float_samples()), method=False)
def selu(self):
    return elu(self, _SELU_ALPHA, _SELU_SCALE)


@op(kind="composite", function=True, method=False)
def selu_(self):
    return elu_(self, _SELU_ALPHA, _SELU_SCALE)


def _celu_input_scale(alpha):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return 1.0 / alpha


@op(kind="composite", method=False,
    samples=_with_params(_float_samples(), {"alpha": 2.0}, {"alpha": 0.5}))
def celu(self, alpha=1.0):
    return elu(self, alpha, 1.0, _celu_input_scale(alpha))


@op(kind="composite", function=True, method=False)
def celu_(self, alpha=1.0):
    return elu_(self, alpha, 1.0, _celu_input_scale(alpha))


def softplus(self, beta=1.0, threshold=20.0, *, out=None):
    _float_only("softplus_cpu", self)
    check_scalars_fit(self._dtype, beta, threshold)
    return pointwise(_store(lambda a: np.where(
        a * beta > threshold, a, np.logaddexp(a * beta, 0) / beta)), self, out=out)


softplus = _activation(softplus, _with_params(_float_samples(), {"beta": 2.0},
                                              {"beta": 0.5, "threshold": 1.0}), inplace=False)


@softplus.def_derivative("self")
def softplus(grad, self, beta, threshold):
    scaled = self * beta
    # at the threshold itself the first derivative is the sigmoid's, the second (as
    # PyTorch's) zero: the sigmoid there reads the threshold, a constant
    below = where(scaled < threshold, scaled, scaled.new_full((), threshold))
    return where(scaled > threshold, grad, grad * below.sigmoid())


def hardtanh(self, min_val=-1.0, max_val=1.0, *, out=None):
    if self._dtype.is_complex:
        raise NotImplementedError("clamp is not supported for complex types")
    if self._dtype is bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    check_scalars_fit(self._dtype, min_val, max_val)
    clipped = _store(lambda a: np.minimum(np.maximum(a, min_val), max_val))
    return _unary("hardtanh", self, clipped,
                  out, integers="keep")


def _hardtanh_samples(make):
    return _away_from((-1, 1), _float_samples())(make) + [
        Sample(_away_from((-2, 0.5), lambda m: [m(3, 4)])(make)[0], -2.0, 0.5),
        Sample(make(2, 3, dtype=int64), -2, 3)]


hardtanh = _activation(hardtanh, _hardtanh_samples)
hardtanh_ = REGISTRY["hardtanh_"]


@hardtanh.def_derivative("self")
def hardtanh(grad, self, min_val, max_val):
    return linked(where((self > min_val) & (self < max_val), grad, grad.new_zeros(())), self)


@op(kind="composite", method=False, samples=_away_from((0, 6), _float_samples(-2, 8)))
def relu6(self):
    return hardtanh(self, 0.0, 6.0)


@op(kind="composite", function=False, method=False)
def relu6_(self):
    return hardtanh_(self, 0.0, 6.0)


_HARDSIGMOID_LOOP = _store(lambda a: np.clip(a / 6.0 + 0.5, 0.0, 1.0))


def hardsigmoid(self, *, out=None):
    _float_only("hardsigmoid_cpu", self)
    return pointwise(_HARDSIGMOID_LOOP, self, out=out)


hardsigmoid = _activation(hardsigmoid, _away_from((-3, 3), _float_samples(-5, 5)),
                           loop=_HARDSIGMOID_LOOP)


@hardsigmoid.def_derivative("self")
def hardsigmoid(grad, self):
    # PyTorch has no second derivative here (an error); its value, zeros, is given
    return linked(where((self > -3) & (self < 3), grad / 6, grad.new_zeros(())), self)


_HARDSWISH_LOOP = _store(lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0)


def hardswish(self, *, out=None):
    _float_only("hardswish_cpu", self)
    return pointwise(_HARDSWISH_LOOP, self, out=out)


hardswish = _activation(hardswish, _away_from((-3, 3), _float_samples(-5, 5)),
                         loop=_HARDSWISH_LOOP)


@hardswish.def_derivative("self")
def hardswish(grad, self):
    zero = grad.new_zeros(())
    return where(self <= -3, zero, where(self < 3, grad * (self / 3 + 0.5), grad))


_LOG_SIGMOID_LOOP = _store(lambda a: -np.logaddexp(-a, 0))


def log_sigmoid(self):
    _float_only("log_sigmoid_cpu", self)
    return pointwise(_LOG_SIGMOID_LOOP, self)


log_sigmoid = _activation(log_sigmoid, _float_samples(-30, 30), inplace=False,
                           loop=_LOG_SIGMOID_LOOP)


@log_sigmoid.def_derivative("self")
def log_sigmoid(grad, self):
    return grad * (-self).sigmoid()


def threshold(self, threshold, value, *, out=None):
    refuse_complex(self, "threshold_cpu", bool_too=True)
    check_scalars_fit(self._dtype, threshold, value)
    kept = _store(lambda a: np.where(a > threshold, a, value))
    return _unary("threshold", self, kept, out, integers="keep")


def _threshold_samples(make):
    return [Sample(_away_from((0.5,), lambda m: [m(3, 4)])(make)[0], 0.5, -2.0),
            Sample(_away_from((0,), lambda m: [m(5)])(make)[0], 0.0, 1.0),
            Sample(make(2, 3, dtype=int64), 1, 20)]


threshold = _activation(threshold, _threshold_samples, function=True)


@threshold.def_derivative("self")
def threshold(grad, self, threshold):
    return linked(where(self > threshold, grad, grad.new_zeros(())), self)


@op(kind="composite", method=False, function=False, samples=_float_samples())
def softsign(self):
    return self / (1 + self.abs())


@op(kind="composite", method=False, function=False, samples=_float_samples())
def tanhshrink(self):
    return self - self.tanh()


# --------------------------------------------------------------------------- glu, prelu

def _glu_samples(make):
    return [Sample(make(3, 4)), Sample(make(4, 3), 0), Sample(make(2, 6, 2), dim=1),
            Sample(make(4, 2).t(), -1)]


def glu_halves(shape, dim):
    """PyTorch's checks of ``glu``'s arguments; the wrapped dim and the size of a half."""
    if not shape:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    dim = meta.wrap_dim(dim, len(shape))
    if shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size "
                           f"{shape[dim]}")
    return dim, shape[dim] // 2


@op(method=False, function=False, samples=_glu_samples)
def glu(self, dim=-1):
    """The first half of ``self`` along ``dim`` gated by the sigmoid of the second."""
    _float_only("glu_cpu", self)
    dim, half = glu_halves(self._sizes, dim)
    first, second = self.narrow(dim, 0, half), self.narrow(dim, half, half)
    return pointwise(_store(lambda a, b: a / (1.0 + np.exp(-b))), first, second)


@glu.def_derivative("self")
def glu(grad, self, dim):
    dim, half = glu_halves(self._sizes, dim)
    first, gate = self.narrow(dim, 0, half), self.narrow(dim, half, half).sigmoid()
    gated = grad * gate
    return cat([gated, gated * first * (1 - gate)], dim)


@glu.def_batch_rule
def glu(op, level, args, kwargs):
    """The per-sample dim shifted past the batch dim; checks made on the sample's shape."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    dim, _ = glu_halves(self._sizes, bound["dim"])
    b = self._bdim
    return wrap(call(op, (self._value, actual_dim(dim, b)), None), b, level)


def _prelu_samples(make):
    return [Sample(_away_from((0,), lambda m: [m(3, 4)])(make)[0], make(4)),
            Sample(_away_from((0,), lambda m: [m(2, 3, 2)])(make)[0], make(3, 1)),
            Sample(_away_from((0,), lambda m: [m(5)])(make)[0], make(()))]


# ``a`` where positive, else ``w * a``: PReLU's and RReLU's kernel
_NEGATIVES_SCALED = _store(lambda a, w: np.where(a > 0, a, w * a))


@op(inputs=("self", "weight"), family="pointwise", method=False, function=False,
    samples=_prelu_samples)
def _prelu_kernel(self, weight):
    """``self`` where positive, else ``weight * self`` (``weight`` broadcast already)."""
    _float_only("prelu_cpu", self)
    return pointwise(_NEGATIVES_SCALED, self, weight)


@_prelu_kernel.def_derivative("self")
def _prelu_kernel(grad, self, weight):
    return linked(where(self > 0, grad, grad * weight), self)


@_prelu_kernel.def_derivative("weight")
def _prelu_kernel(grad, self):
    return where(self > 0, grad.new_zeros(()), grad * self)


@op(kind="composite", inputs=("self", "weight"),
    samples=lambda make: [Sample(make(3, 4), make(4)), Sample(make(2, 3, 2), make(1)),
                          Sample(make(5), make(1)), Sample(make(()), make(()))])
def prelu(self, weight):
    """PReLU with one weight, or one per channel (dim 1 of ``self``)."""
    if weight.dim() > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {weight.dim()}")
    channels = self.shape[1] if self.dim() >= 2 else 1
    if weight.numel() != 1 and weight.numel() != channels:
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                           f"parameter numbers = {weight.numel()} and channel size = "
                           f"{channels}.")
    if weight.numel() > 1:
        weight = weight.reshape((channels,) + (1,) * (self.dim() - 2))
    elif self.dim() == 0 and weight.dim() == 1:
        weight = weight.reshape(())
    return _prelu_kernel(self, weight)


__all__ = ["erf", "erfc", "erfinv", "atan2", "arctan2", "addcmul", "addcdiv", "nan_to_num",
           "square", "clip", "gelu", "silu", "mish", "leaky_relu", "elu", "selu", "celu",
           "softplus", "hardtanh", "relu6", "hardsigmoid", "hardswish", "log_sigmoid",
           "threshold", "softsign", "tanhshrink", "glu", "prelu"]
__all__ += ["softmin"]


# --------------------------------------------------------------------------- softmin

def _softmin_samples(make):
    return [Sample(make(3, 4), 1), Sample(make(2, 3, 4), 0), Sample(make(5), -1),
            Sample(make(4, 3).t(), 1), Sample(make(2, 3, dtype=int64), 1, float32)]


@op(kind="composite", method=False, function=False, inputs=("input",),
    samples=_softmin_samples)
def softmin(input, dim, dtype=None):
    """``softmax(-input)`` along ``dim``, the negated input first cast to ``dtype``."""
    return (-input).softmax(dim, dtype=dtype)
__all__ += ["hardshrink", "softshrink", "rrelu", "rrelu_"]


# --------------------------------------------------------------------------- shrinks, rrelu

def _shrink_samples(make):
    near_half = _away_from((-0.5, 0.5), _float_samples())(make)
    wide = _away_from((-1, 1), lambda m: [m(3, 4, low=-3, high=3)])(make)[0]
    return near_half + [Sample(wide, 1.0),
                        Sample(_away_from((0,), lambda m: [m(5)])(make)[0], lambd=0.0)]


def _inside(x, lambd):
    """Where ``-lambd <= x <= lambd`` (``x`` an array or a tensor): what both shrinks zero
    (NaN is outside)."""
    return (x >= -lambd) & (x <= lambd)


def _shrink_derivative(grad, self, lambd):
    return linked(where(_inside(self, lambd), grad.new_zeros(()), grad), self)


@op(out_casting=False, family="pointwise", samples=_shrink_samples)
def hardshrink(self, lambd=0.5, *, out=None):
    """``self`` where ``|self| > lambd``, else 0."""
    _float_only("hardshrink_cpu", self)
    check_scalars_fit(self._dtype, lambd)
    return pointwise(_store(lambda a: np.where(_inside(a, lambd), 0, a)), self, out=out)


hardshrink.def_derivative("self")(_shrink_derivative)


def _check_shrink_lambda(self, lambd):
    """PyTorch's softshrink checks ``0 <= lambd <= the dtype's largest value``."""
    largest = finfo(self._dtype).max
    if not 0 <= lambd <= largest:
        raise RuntimeError(f"lambda must be in range [0, {largest:g}] for input dtype "
                           f"{_type_name(self._dtype)}, but found {lambd:g}")


@op(family="pointwise", method=False, function=False, samples=_shrink_samples)
def softshrink(self, lambd=0.5, *, out=None):
    """``self`` moved ``lambd`` towards 0, and 0 where ``|self| <= lambd``."""
    _float_only("softshrink_check", self)
    check_scalars_fit(self._dtype, lambd)
    _check_shrink_lambda(self, lambd)
    return pointwise(_store(lambda a: np.where(a > lambd, a - lambd,
                                               np.where(a < -lambd, a + lambd, a * 0))),
                     self, out=out)


softshrink.def_derivative("self")(_shrink_derivative)


def _rrelu_noise_samples(make):
    away = _away_from((0,), lambda m: [m(3, 4), m(5), m(2, 3)])(make)
    return [Sample(away[0], make(3, 4, low=0.1, high=0.4)), Sample(away[1], make(())),
            Sample(away[2], make(3, low=0.1, high=0.4))]


@op(family="pointwise", method=False, function=False, samples=_rrelu_noise_samples)
def _rrelu_with_noise(self, noise, *, out=None):
    """``self`` where positive, else ``noise * self``: RReLU once its slopes are drawn
    (``noise``, a constant of autograd as in PyTorch)."""
    _float_only("rrelu_with_noise_out_cpu", self)
    return pointwise(_NEGATIVES_SCALED, self, noise, out=out)


@_rrelu_with_noise.def_derivative("self")
def _rrelu_with_noise(grad, self, noise):
    return linked(where(self > 0, grad, grad * noise), self)


_rrelu_with_noise_ = inplace_variant(_rrelu_with_noise, method=False)


def _rrelu_noise(self, lower, upper, training, generator):
    """The slopes of the negative elements: one uniform draw in [lower, upper) per element
    in training (``rand_like``, a random op: vmap's ``randomness`` governs it), their mean
    otherwise."""
    check_scalars_fit(float64, lower, upper)
    for name, bound in (("lower", lower), ("upper", upper)):
        if not math.isfinite(bound):
            raise RuntimeError(f"rrelu: {name} bound must be finite, got {bound}")
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    _float_only("rrelu_with_noise_out_cpu" if training else "leaky_relu_cpu", self)
    if not training:
        return self.new_full((), (lower + upper) / 2)
    return rand_like(self, generator=generator) * (upper - lower) + lower


def _rrelu_samples(make):
    away = _away_from((0,), lambda m: [m(3, 4), m(5), m(())])(make)
    return [Sample(away[0]), Sample(away[1], 0.2, 0.6), Sample(away[2], upper=0.5)]


@op(kind="composite", method=False, samples=_rrelu_samples)
def rrelu(self, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """Leaky ReLU with a slope drawn from U(lower, upper) for each negative element in
    training, the mean slope ``(lower + upper) / 2`` otherwise."""
    return _rrelu_with_noise(self, _rrelu_noise(self, lower, upper, training, generator))


@op(kind="composite", method=False)
def rrelu_(self, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return _rrelu_with_noise_(self, _rrelu_noise(self, lower, upper, training, generator))
