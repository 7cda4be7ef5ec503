"""Elementwise ops: arithmetic, math functions, comparisons and logical ops.

Kernels run NumPy ufuncs over views (``loops.pointwise``) with broadcasting and PyTorch's
type promotion; the result follows the inputs' layout.  Each op with an in-place form
declares it with ``inplace_variant``.  Derivatives are written in microtensor ops; the
engine sums gradients back to each input's shape (un-broadcasting) and dtype.
"""
import inspect
import math
from collections import namedtuple

import numpy as np

from microtensor._C import kernels, meta, nnkernels
from microtensor._C.dispatch import batching, set_unary_kernel
from microtensor._C.tensor import (TensorBase, bool_, complex128, compute_numpy, cpu,
                                    empty_contiguous,
                                    float32, float64, get_default_dtype, int32, int64,
                                    is_grad_enabled)
from microtensor._dtype import (check_scalar_fits, check_scalar_range, info, result_type,
                                wrap_scalar)
from microtensor.ops.arguments import int_arg
from microtensor.ops.copy import linked
from microtensor.ops import special_math
from microtensor.ops.loops import (_type_name, array_module, check_scale_factor,
                                   conj_if_complex, float_dtype,
                                   from_numpy_result, pointwise, real_number_arg,
                                   refuse_complex, refuse_unless_floating, store)
from microtensor.ops.registry import REGISTRY, Sample, inplace_variant, op
from microtensor.vmap.helpers import (aligned, call, front_or_expanded, inplace_error,
                                      no_fallback, same_level, to_front, wrap)
from microtensor.vmap.rules import pointwise as pointwise_family

BINARY = ("self", "other")


# --------------------------------------------------------------------------- samples
# ``self`` always has the full (broadcast) shape, so the in-place variants share them.

def _unary_samples(low=None, high=None, integers=True):
    def samples(make):
        cases = [Sample(make(3, 4, low=low, high=high)), Sample(make(5, low=low, high=high)),
                 Sample(make((), low=low, high=high)),
                 Sample(make(4, 3, low=low, high=high).t())]
        if integers:
            cases.append(Sample(make(2, 3, dtype=int64, low=1 if low is not None else None)))
        return cases
    return samples


def _binary_samples(low=None, high=None, integers=True):
    """``other`` drawn from ``[low, high)`` (a divisor away from zero, say)."""
    def samples(make):
        cases = [Sample(make(3, 4), make(3, 4, low=low, high=high)),
                 Sample(make(3, 4), make(4, low=low, high=high)),
                 Sample(make(2, 3), make((), low=low, high=high)),
                 Sample(make(4, 3).t(), make(3, 4, low=low, high=high)),
                 Sample(make(3), 2.5 if low is None else low + 0.5)]
        if integers:
            cases.append(Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=1)))
        return cases
    return samples


def _add_samples(make):
    return _binary_samples()(make) + [Sample(make(3, 4), make(3, 4), alpha=2)]


def _div_samples(make):
    return _binary_samples(low=0.5)(make) + [
        Sample(make(3, 4), make(3, 4, low=0.5), rounding_mode="floor"),
        Sample(make(3, 4), make(4, low=0.5), rounding_mode="trunc"),
        Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=1), rounding_mode="trunc")]


def _pow_samples(make):
    return [Sample(make(3, 4, low=0.5, high=2), 2.5),
            Sample(make(3, 4), 2),
            Sample(make(3, 4, low=0.5, high=2), make(3, 4, low=-1, high=2)),
            Sample(make(3, 4, low=0.5, high=2), make(4, low=-1, high=2)),
            Sample(make(2, 3, dtype=int64, low=0, high=4), 3)]


def _clamp_samples(make):
    return [Sample(make(3, 4), -1.0, 1.0), Sample(make(3, 4), min=-0.5),
            Sample(make(3, 4), None, 0.5),
            Sample(make(3, 4), make(3, 4, low=-3, high=-0.2), make(4, low=0.2, high=3)),
            Sample(make(2, 3, dtype=int64), -2, 3), Sample(make(3, 4), 1.0, -1.0),
            Sample(make(3, 4), make(3, 4, low=0.2, high=3), make(4, low=-3, high=-0.2)),
            Sample(make(3, 4), make(4, low=-3, high=3), 0.1)]


def _where_samples(make):
    return [Sample(make(3, 4, dtype=bool_), make(3, 4), make(3, 4)),
            Sample(make(3, 1, dtype=bool_), make(4), make(3, 4)),
            Sample(make(3, dtype=bool_), make(3), 0.5)]


def _masked_fill_samples(make):
    return [Sample(make(3, 4), make(3, 4, dtype=bool_), 2.5),
            Sample(make(3, 4), make(4, dtype=bool_), make(())),
            Sample(make(2, 3, dtype=int64), make(2, 3, dtype=bool_), 7)]


def _lerp_samples(make):
    return [Sample(make(3, 4), make(3, 4), 0.3), Sample(make(3, 4), make(4), make(3, 4)),
            Sample(make(2, 3), make(2, 3), make(()))]


def _comparison_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(3, 4), make(4)),
            Sample(make(3, 4), 0.5), Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64))]


def _logical_samples(make):
    return [Sample(make(3, 4, dtype=bool_), make(3, 4, dtype=bool_)),
            Sample(make(3, 4), make(4)), Sample(make(2, 3, dtype=int64), make(3, dtype=int64))]


def _tensor_pair_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(3, 4), make(4)),
            Sample(make(2, 3), make(())), Sample(make(4, 3).t(), make(3, 4)),
            Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=1))]


def _require_tensors(name, **arguments):
    """PyTorch's TypeError for a Python number where the op takes only tensors."""
    for position, (argument, value) in enumerate(arguments.items(), 1):
        if not isinstance(value, TensorBase):
            raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be "
                            f"Tensor, not {type(value).__name__}")


def _bitwise_samples(make):
    return [Sample(make(3, 4, dtype=int64), make(3, 4, dtype=int64)),
            Sample(make(3, 4, dtype=bool_), make(4, dtype=bool_)),
            Sample(make(3, dtype=int64), 6)]


def _float_only_samples(make):
    return [Sample(make(3, 4)), Sample(make(())), Sample(make(2, 3, dtype=int64))]


def _fill_samples(make):
    return [Sample(make(3, 4), 2.5), Sample(make(3, 4), make(())),
            Sample(make(2, 3, dtype=int64), 4)]


def _float_result(*operands):
    return float_dtype(result_type(*operands))


# --------------------------------------------------------------------------- arithmetic

def _scaled(self, other, alpha):
    """``alpha * other`` as ``add`` and ``sub`` take it: PyTorch's checks of ``alpha``
    against the result's dtype, and the product computed in that dtype (a float32
    ``other`` of a float64 sum is not rounded to float32 first)."""
    dt = result_type(self, other)
    check_scale_factor("alpha", alpha, dt)
    if isinstance(other, TensorBase) and other._dtype is not dt:
        other = other.to(dt)
    return other * (bool(alpha) if dt is bool_ else alpha)


@op(inputs=BINARY, family="pointwise", samples=_add_samples)
def add(self, other, *, alpha=1, out=None):
    if type(alpha) is not int or alpha != 1:
        other = _scaled(self, other, alpha)
    return pointwise(np.add, self, other, out=out, wrapped_numbers=True)


@add.def_derivative("self")
def add(grad):
    return grad


@add.def_derivative("other")
def add(grad, alpha):
    return grad if alpha == 1 else grad * alpha


add_ = inplace_variant(add)


def _check_bool_subtraction(self, other):
    """PyTorch refuses any subtraction with a bool operand (a tensor or a Python bool),
    once its Python numbers are converted."""
    for x in (self, other):
        if type(x) is int:
            check_scalar_range(x)
    bools = [x is True or x is False or (isinstance(x, TensorBase) and x._dtype is bool_)
             for x in (self, other)]
    if all(bools):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if any(bools):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                           "supported. If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")


@op(inputs=BINARY, family="pointwise", samples=_add_samples)
def sub(self, other, *, alpha=1, out=None):
    _check_bool_subtraction(self, other)
    if type(alpha) is not int or alpha != 1:
        other = _scaled(self, other, alpha)
    return pointwise(np.subtract, self, other, out=out, wrapped_numbers=True)


@sub.def_derivative("self")
def sub(grad):
    return grad


@sub.def_derivative("other")
def sub(grad, alpha):
    return -grad if alpha == 1 else grad * -alpha


sub_ = inplace_variant(sub)


@op(kind="composite")
def rsub(self, other, *, alpha=1):
    _check_bool_subtraction(other, self)
    return sub(other, self, alpha=alpha) if isinstance(other, TensorBase) else \
        (-self) * alpha + other


@op(inputs=BINARY, family="pointwise", samples=_binary_samples())
def mul(self, other, *, out=None):
    return pointwise(np.multiply, self, other, out=out, wrapped_numbers=True)


@mul.def_derivative("self")
def mul(grad, other):
    return grad * conj_if_complex(other)


@mul.def_derivative("other")
def mul(grad, self):
    return grad * conj_if_complex(self)


mul_ = inplace_variant(mul)


def _check_integer_divisor(self, other):
    """PyTorch refuses an integer division (``//``, ``%``, ``fmod``) by zero, where NumPy
    would give 0: checked before anything is written.  Empty results divide nothing."""
    if isinstance(other, TensorBase):
        if other._dtype.is_floating_point or other._numel == 0:
            return
        divisors = other._array()   # NumPy's count_nonzero is far quicker than its .all()
        if (np.count_nonzero(divisors) == other._numel if isinstance(divisors, np.ndarray)
                else divisors.all()):
            return
    elif other != 0 and (type(other) is not int or -256 < other < 256 or
                         wrap_scalar(other, result_type(self, other)) != 0):
        # (the common case is decided without type promotion; only an int of 256 or more
        # can wrap to 0, as PyTorch's scalars do: 2**40 is 0 in int32)
        return
    dt = result_type(self, other)
    if dt.is_floating_point or dt is bool_ or (isinstance(self, TensorBase) and
                                               self._numel == 0):
        return
    raise RuntimeError("ZeroDivisionError")


@op(inputs=BINARY, family="pointwise", samples=_div_samples)
def div(self, other, *, rounding_mode=None, out=None):
    # ``number / tensor`` is PyTorch's reciprocal and product: no wrapped number
    wrapped = isinstance(self, TensorBase)
    if rounding_mode is None:
        return pointwise(np.true_divide, self, other, out=out, dtype=_float_result(self, other),
                         wrapped_numbers=wrapped)
    if rounding_mode in ("floor", "trunc"):
        _refuse_complex_or_bool(f"div_{rounding_mode}_cpu", self, other)
        _check_integer_divisor(self, other)
    if rounding_mode == "floor":
        return pointwise(np.floor_divide, self, other, out=out, wrapped_numbers=wrapped)
    if rounding_mode == "trunc":
        dt = result_type(self, other)
        if dt.is_floating_point:
            quotient = pointwise(np.true_divide, self, other, out=out, wrapped_numbers=wrapped)
            return pointwise(np.trunc, quotient, out=quotient)
        return pointwise(_trunc_int_divide, self, other, out=out, wrapped_numbers=wrapped)
    raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                       f"found '{rounding_mode}'")


def _trunc_int_divide(a, b, out, dtype, casting):
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & (np.less(a, 0) != np.less(b, 0))
    np.add(q, fix, out=out, dtype=dtype, casting=casting)
    return out


@div.def_derivative("self")
def div(grad, other, rounding_mode):
    return _zero_grad(grad) if rounding_mode is not None else grad / conj_if_complex(other)


@div.def_derivative("other")
def div(grad, self, other, rounding_mode):
    return _zero_grad(grad) if rounding_mode is not None else \
        -grad * conj_if_complex(self / (other * other))


div_ = inplace_variant(div)


@op(kind="composite")
def floor_divide(self, other):
    return div(self, other, rounding_mode="floor")


@op(kind="composite", function=False)
def floor_divide_(self, other):
    return div_(self, other, rounding_mode="floor")


@op(inputs=BINARY, family="pointwise", samples=_binary_samples(low=0.5))
def remainder(self, other, *, out=None):
    _refuse_complex_or_bool("remainder_cpu", self, other)
    _check_integer_divisor(self, other)
    return pointwise(np.remainder, self, other, out=out, wrapped_numbers=True)


@remainder.def_derivative("self")
def remainder(grad):
    return grad


@remainder.def_derivative("other")
def remainder(grad, self, other):
    return -grad * (self / other).floor()


remainder_ = inplace_variant(remainder)


@op(inputs=BINARY, family="pointwise", samples=_binary_samples(low=0.5))
def fmod(self, other, *, out=None):
    _refuse_complex_or_bool("fmod_cpu", self, other)
    _check_integer_divisor(self, other)
    return pointwise(np.fmod, self, other, out=out, wrapped_numbers=True)


@fmod.def_derivative("self")
def fmod(grad):
    return grad


@fmod.def_derivative("other")
def fmod(grad, self, other):
    return -grad * (self / other).trunc()


fmod_ = inplace_variant(fmod)


@op(inputs=("self", "exponent"), family="pointwise", samples=_pow_samples)
def pow(self, exponent, *, out=None):
    if isinstance(self, TensorBase) and not self._dtype.is_floating_point and \
            isinstance(exponent, int) and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if isinstance(self, TensorBase) and type(exponent) is int and \
            not self._dtype.is_floating_point and self._dtype is not bool_:
        check_scalar_fits(exponent, self._dtype)   # int32 ** 2**40: PyTorch refuses
    if not isinstance(self, TensorBase) and isinstance(exponent, TensorBase) and out is None:
        # a number base: PyTorch's result is contiguous whatever the exponent's layout
        exponent = exponent.contiguous()
    if result_type(self, exponent) is bool_:
        if isinstance(exponent, TensorBase) or not isinstance(self, TensorBase):
            _refuse_complex_or_bool("pow", self, exponent)
        # bool ** True is the base, bool ** False ones, as PyTorch's
        return pointwise(_bool_power, self, exponent, out=out)
    if isinstance(exponent, TensorBase) and exponent._dtype.kind < 2 and \
            result_type(self, exponent).kind < 2:   # (integers: neither floating nor complex)
        return pointwise(_int_power, self, exponent, out=out)
    if isinstance(self, TensorBase) and type(exponent) is float and \
            compute_numpy(self._dtype) is not self._dtype.np:
        exponent = float(self._dtype.np.type(exponent))   # PyTorch rounds it to half first
    if isinstance(self, TensorBase) and type(exponent) in (int, float):
        kernel = _EXACT_POWERS.get((self._dtype.is_complex, exponent))
        if kernel is not None:
            return pointwise(kernel, self, exponent, out=out)
    return pointwise(np.power, self, exponent, out=out)


def _cube(base, exponent, *, out, dtype, casting):
    square = np.multiply(base, base, dtype=dtype, casting=casting)
    return np.multiply(square, base, out=out, dtype=dtype, casting=casting)


def _inverse_square(base, exponent, *, out, dtype, casting):
    square = np.multiply(base, base, dtype=dtype, casting=casting)
    return np.divide(1, square, out=out, dtype=dtype, casting=casting)


def _inverse_root(base, exponent, *, out, dtype, casting):
    root = np.sqrt(base, dtype=dtype, casting=casting)
    return np.divide(1, root, out=out, dtype=dtype, casting=casting)


def _root(base, exponent, *, out, dtype, casting):
    return np.sqrt(base, out=out, dtype=dtype, casting=casting)


# Exponents PyTorch computes with other operations than its general ``pow`` (whose float
# results differ from ``np.power``'s in the last bit): keyed by (complex base, exponent).
_EXACT_POWERS = {(False, 3): _cube, (False, -2): _inverse_square,
                 (False, -0.5): _inverse_root, (True, 0.5): _root}


def _bool_power(base, exponent, *, out, dtype, casting):
    return np.logical_or(base, np.logical_not(exponent), out=out)


def _refuse_complex_or_bool(kernel, *operands):
    """PyTorch's error for kernels with integer and real floating versions only."""
    refuse_complex(result_type(*operands), kernel, bool_too=True)


def _int_power(base, exponent, *, out, dtype, casting):
    """np.power for integers, with PyTorch's results for negative exponents (NumPy
    raises): 0, but 1 for a base of 1 and +-1 for a base of -1."""
    negative = np.asarray(exponent) < 0
    if np.dtype(dtype).kind == "b" or not negative.any():
        return np.power(base, exponent, out=out, dtype=dtype, casting=casting)
    # before the power: in place, ``out`` is ``base``
    base = np.asarray(base).astype(dtype, copy=False)
    odd = np.asarray(exponent) % 2 != 0
    small = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
    np.power(base, np.where(negative, 0, exponent), out=out, dtype=dtype, casting=casting)
    np.copyto(out, small, where=np.broadcast_to(negative, out.shape), casting="unsafe")
    return out


@pow.def_derivative("self")
def pow(grad, self, exponent):
    if not isinstance(exponent, TensorBase) and exponent == 0:
        return _zero_grad(grad)
    self_grad = grad * conj_if_complex(exponent * self.pow(exponent - 1))
    if isinstance(exponent, TensorBase):    # 0 where the exponent is 0 (0 ** -1 is inf)
        return self_grad.masked_fill(exponent == 0, 0)
    return self_grad


def _nonnegative(exponent):
    if exponent._dtype.is_complex:
        return (exponent.imag == 0) & (exponent.real >= 0)
    return exponent >= 0


@pow.def_derivative("exponent")
def pow(grad, self, exponent):
    # d/de a**e = a**e * log(a); defined as 0 where a == 0 and e >= 0, as PyTorch
    if not isinstance(self, TensorBase):
        if self == 0:
            return (grad * conj_if_complex(self ** exponent) * -math.inf).masked_fill(
                _nonnegative(exponent), 0)
        return grad * conj_if_complex(self ** exponent * np.log(self))
    exp_grad = grad * conj_if_complex(self ** exponent * self.log())
    return exp_grad.masked_fill((self == 0) & _nonnegative(exponent), 0)


pow_ = inplace_variant(pow)


def _double(x):
    return x.double() if isinstance(x, TensorBase) else x


def _check_double(what, name, t):
    if t._dtype is not float64:
        raise RuntimeError(f"the {what} given to {name} has dtype {info(t._dtype).scalar_name} "
                           f"but the operation's result requires dtype Double")


@op(kind="composite")
def float_power(self, exponent, *, out=None):
    """``pow`` computed in (and returning) float64."""
    if out is not None:
        _check_double("output", "float_power", out)
    return pow(_double(self), _double(exponent), out=out)


@op(kind="composite", function=False)
def float_power_(self, exponent):
    _check_double("base", "float_power_", self)
    return pow_(self, _double(exponent))


# --------------------------------------------------------------------------- unary math

_BOOL_UNARY = {   # PyTorch's answers for bool tensors
    "abs": (NotImplementedError, "\"abs_cpu\" not implemented for 'Bool'"),
    **{name: (NotImplementedError, f"\"{name}_vml_cpu\" not implemented for 'Bool'")
       for name in ("floor", "ceil", "trunc")},
    "relu": (RuntimeError, "Boolean inputs not supported for relu"),
    "neg": (RuntimeError, "Negation, the `-` operator, on a bool tensor is not supported. If "
                          "you are trying to invert a mask, use the `~` or `logical_not()` "
                          "operator instead."),
    "sign": (None, None),
}


def _complex_abs(self, out):
    """The magnitudes of a complex tensor, a real one."""
    return pointwise(lambda a, *, out, dtype, casting: np.absolute(a, out=out), self,
                     out=out, dtype=self._dtype.to_real())


def _refuse_complex(message, error=NotImplementedError):
    def refuse(self, out):
        raise error(message)
    return refuse


_COMPLEX_UNARY = {   # PyTorch's answers for complex tensors, where NumPy's differ
    "abs": _complex_abs,
    "sign": _refuse_complex("Unlike NumPy, torch.sign is not intended to support complex "
                            "numbers. Please use torch.sgn instead."),
    **{name: _refuse_complex(f"{name} is not supported for complex inputs")
       for name in ("floor", "ceil", "trunc")},
    "relu": _refuse_complex("clamp is not supported for complex types"),
    **{name: _refuse_complex(f"{name} is not supported for complex tensors.", RuntimeError)
       for name in ("deg2rad", "rad2deg")},
    **{name: lambda self, out, kernel=kernel: refuse_complex(self, kernel)
       for name, kernel in (("lgamma", "lgamma_vml_cpu"), ("digamma", "digamma"),
                            ("i0", "i0_vml_cpu"))},
}


def _bool_identity(a, *, out, dtype, casting):
    return np.copyto(out, a, casting="unsafe")


def _refuse_complex_abs_in_place(self):
    if self._dtype.is_complex:
        raise RuntimeError("In-place abs is not supported for complex tensors.")


def _unary(name, ufunc, floating=True, samples=_unary_samples(), quiet=False,
           floating_kernel=None, refuse_in_place=None, out=True):
    """Declare a one-input elementwise op and its in-place variant (kernel only).
    ``floating``: integers and bool compute in the default float dtype (else the result
    keeps the input's dtype, and PyTorch wants it in an ``out=`` too);
    ``floating_kernel``: the name of PyTorch's kernel when it has real floating versions
    only (its error for the other dtypes names it); ``refuse_in_place``: what the in-place
    variant refuses (``inplace_variant``'s ``refuse``); ``out``: whether PyTorch's
    function takes ``out=``."""
    def kernel(self, *, out=None):
        if floating_kernel:
            refuse_unless_floating(self._dtype, floating_kernel)
        if self._dtype is bool_ and name in _BOOL_UNARY:
            error, message = _BOOL_UNARY[name]
            if error is None:           # sign of a bool is the bool
                return pointwise(_bool_identity, self, out=out)
            raise error(message)
        if self._dtype.is_complex and name in _COMPLEX_UNARY:
            return _COMPLEX_UNARY[name](self, out)
        return pointwise(ufunc, self, out=out,
                         dtype=float_dtype(self._dtype) if floating else None)
    kernel.__name__ = name
    declared = op(name, family="pointwise", samples=samples, out=out,
                  out_casting=floating)(kernel)
    inplace_variant(declared, refuse=refuse_in_place)
    set_unary_kernel(declared, ufunc, quiet)   # float32/float64 calls skip the Python kernel
    return declared


neg = _unary("neg", np.negative, floating=False)
exp = _unary("exp", np.exp)
log = _unary("log", np.log, samples=_unary_samples(low=0.5))
log1p = _unary("log1p", np.log1p, samples=_unary_samples(low=-0.5))
expm1 = _unary("expm1", np.expm1)
log2 = _unary("log2", np.log2, samples=_unary_samples(low=0.5))
log10 = _unary("log10", np.log10, samples=_unary_samples(low=0.5))
sin = _unary("sin", np.sin)
cos = _unary("cos", np.cos)
tan = _unary("tan", np.tan, samples=_unary_samples(low=-1.2, high=1.2))
tanh = _unary("tanh", np.tanh)
sinh = _unary("sinh", np.sinh)
cosh = _unary("cosh", np.cosh)
asin = _unary("asin", np.arcsin, samples=_unary_samples(low=-0.9, high=0.9, integers=False))
acos = _unary("acos", np.arccos, samples=_unary_samples(low=-0.9, high=0.9, integers=False))
atan = _unary("atan", np.arctan)
sqrt = _unary("sqrt", np.sqrt, samples=_unary_samples(low=0.5))
abs = _unary("abs", np.absolute, floating=False, refuse_in_place=_refuse_complex_abs_in_place)
sign = _unary("sign", lambda a, out, dtype, casting: np.nan_to_num(
    np.sign(a, out=out, dtype=dtype, casting=casting), copy=False, nan=0.0, posinf=np.inf,
    neginf=-np.inf), floating=False)   # 0 at NaN, as PyTorch
floor = _unary("floor", np.floor, floating=False)
ceil = _unary("ceil", np.ceil, floating=False)
trunc = _unary("trunc", np.trunc, floating=False)
frac = _unary("frac", lambda a, out, dtype, casting: np.subtract(
    a, np.trunc(a), out=out, dtype=dtype, casting=casting), floating=False,
    samples=_unary_samples(integers=False), floating_kernel="frac_cpu")
reciprocal = _unary("reciprocal", lambda a, out, dtype, casting: np.divide(
    1, a, out=out, dtype=dtype, casting=casting), samples=_unary_samples(low=0.5))
rsqrt = _unary("rsqrt", lambda a, out, dtype, casting: np.divide(
    1, np.sqrt(a, dtype=dtype), out=out, dtype=dtype, casting=casting),
    samples=_unary_samples(low=0.5))
sigmoid = _unary("sigmoid", lambda a, out, dtype, casting: np.divide(
    1, 1 + np.exp(np.negative(a, dtype=dtype)), out=out, dtype=dtype, casting=casting))
relu = _unary("relu", lambda a, out, dtype, casting: np.maximum(
    a, 0, out=out, dtype=dtype, casting=casting), floating=False, quiet=True, out=False)


def _rint(a, out, dtype, casting):
    """Round half to even, as PyTorch; an integer is its own rounding."""
    if np.dtype(dtype).kind == "f":
        return np.rint(a, out=out, dtype=dtype, casting=casting)
    return np.copyto(out, a, casting=casting)


def _rint_at(decimals):
    """``_rint`` at ``decimals`` places (negative: to tens, hundreds ...) in the tensor's
    own precision, as PyTorch: ``x * 10**d`` rounded, then divided back."""
    scale = 10.0 ** decimals if decimals > 0 else 10.0 ** -decimals

    def ufunc(a, out, dtype, casting):
        shift, unshift = (np.multiply, np.divide) if decimals > 0 else (np.divide, np.multiply)
        rounded = np.rint(shift(a, scale, dtype=dtype))
        return unshift(rounded, scale, out=out, dtype=dtype, casting=casting)
    return ufunc


def _round_samples(make):
    return _unary_samples()(make) + [Sample(make(3, 4, low=-20, high=20), decimals=1),
                                     Sample(make(5, low=-500, high=500), decimals=-2),
                                     Sample(make((), low=-20, high=20), decimals=2)]


@op(out_casting=False, family="pointwise", samples=_round_samples)
def round(self, *, decimals=0, out=None):
    if not decimals:
        refuse_complex(self, "round_vml_cpu", bool_too=True)
        return pointwise(_rint, self, out=out)
    if not self._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"round_cpu\" not implemented for '{_type_name(self._dtype)}'")
    return pointwise(_rint_at(decimals), self, out=out)


inplace_variant(round)
set_unary_kernel(round, _rint)   # float32/float64 calls without decimals skip the kernel



@neg.def_derivative("self")
def neg(grad):
    return -grad


@exp.def_derivative("self")
def exp(grad, result):
    return grad * conj_if_complex(result)


@log.def_derivative("self")
def log(grad, self):
    return grad / conj_if_complex(self)


@log1p.def_derivative("self")
def log1p(grad, self):
    return grad / conj_if_complex(self + 1)


@expm1.def_derivative("self")
def expm1(grad, result):
    return grad * conj_if_complex(result + 1)


@log2.def_derivative("self")
def log2(grad, self):
    return grad / conj_if_complex(self * 0.6931471805599453)


@log10.def_derivative("self")
def log10(grad, self):
    return grad / conj_if_complex(self * 2.302585092994046)


@sin.def_derivative("self")
def sin(grad, self):
    return grad * conj_if_complex(self.cos())


@cos.def_derivative("self")
def cos(grad, self):
    return -grad * conj_if_complex(self.sin())


@tan.def_derivative("self")
def tan(grad, result):
    return grad * conj_if_complex(1 + result * result)


def _fused_backward(kernel, grad, result):
    """``kernel``'s one C pass over ``grad`` and the op's ``result`` when no graph of the
    backward pass is being built, nor a vmap, and both are contiguous alike; else None."""
    if batching() is None and not is_grad_enabled():
        g, y = grad._array(), result._array()
        if grad._is_contig and result._is_contig and grad._sizes == result._sizes and \
                nnkernels.supports(g, y):
            out = empty_contiguous(result._sizes, result._dtype, cpu)
            kernel(out._array(), g, y)
            return out
    return None


@tanh.def_derivative("self")
def tanh(grad, result):
    fused = _fused_backward(nnkernels.tanh_backward, grad, result)
    return grad * conj_if_complex(1 - result * result) if fused is None else fused


@sinh.def_derivative("self")
def sinh(grad, self):
    return grad * conj_if_complex(self.cosh())


@cosh.def_derivative("self")
def cosh(grad, self):
    return grad * conj_if_complex(self.sinh())


@asin.def_derivative("self")
def asin(grad, self):
    return grad * conj_if_complex((1 - self * self).rsqrt())


@acos.def_derivative("self")
def acos(grad, self):
    return -grad * conj_if_complex((1 - self * self).rsqrt())


@atan.def_derivative("self")
def atan(grad, self):
    return grad / conj_if_complex(1 + self * self)


@sqrt.def_derivative("self")
def sqrt(grad, result):
    return grad / (2 * conj_if_complex(result))


@rsqrt.def_derivative("self")
def rsqrt(grad, result):
    return grad * conj_if_complex(-0.5 * result * result * result)


@reciprocal.def_derivative("self")
def reciprocal(grad, result):
    return -grad * conj_if_complex(result * result)


@sigmoid.def_derivative("self")
def sigmoid(grad, result):
    return grad * conj_if_complex(result * (1 - result))


@relu.def_derivative("self")
def relu(grad, result):
    # a select, not ``grad * mask``: an infinite or NaN gradient where the result is 0
    # gives 0, and a NaN result passes the gradient, as PyTorch's
    fused = _fused_backward(nnkernels.relu_backward, grad, result)
    return linked(where(result <= 0, grad.new_zeros(()), grad), result) if fused is None \
        else fused


@abs.def_derivative("self")
def abs(grad, self):
    if self._dtype.is_complex:
        # z / |z| (0 at 0), PyTorch's sgn
        magnitude = self.abs()
        return (grad * self / magnitude).masked_fill(magnitude == 0, 0)
    return grad * self.sign()


def _zero_grad(grad):
    # zeros, not ``grad * 0``: an infinite or NaN incoming gradient still gives 0, and the
    # zeros have no graph (a second-order gradient through them is None), as PyTorch's
    return REGISTRY["zeros_like"](grad)


for _flat in (sign, floor, ceil, round, trunc):
    _flat.def_derivative("self")(_zero_grad)


@frac.def_derivative("self")
def frac(grad):
    return grad


# --------------------------------------------------------------------------- two inputs

def _refuse_complex_pair(name, self, other):
    if self._dtype.is_complex or other._dtype.is_complex:
        raise RuntimeError(f"{name} not implemented for complex tensors.")


@op(inputs=BINARY, family="pointwise", samples=_tensor_pair_samples)
def maximum(self, other, *, out=None):
    _require_tensors("maximum", input=self, other=other)
    _refuse_complex_pair("maximum", self, other)
    return pointwise(np.maximum, self, other, out=out)


# ties split the gradient evenly and a NaN sends it to both, as PyTorch does
@maximum.def_derivative("self")
def maximum(grad, self, other):
    return grad * (1 - ((self < other) + (self == other) * 0.5))


@maximum.def_derivative("other")
def maximum(grad, self, other):
    return grad * (1 - ((self > other) + (self == other) * 0.5))


@op(inputs=BINARY, family="pointwise", samples=_tensor_pair_samples)
def minimum(self, other, *, out=None):
    _require_tensors("minimum", input=self, other=other)
    _refuse_complex_pair("minimum", self, other)
    return pointwise(np.minimum, self, other, out=out)


@minimum.def_derivative("self")
def minimum(grad, self, other):
    return grad * (1 - ((self > other) + (self == other) * 0.5))


@minimum.def_derivative("other")
def minimum(grad, self, other):
    return grad * (1 - ((self < other) + (self == other) * 0.5))


@op(out_casting=False, inputs=("self", "min", "max"), family="pointwise", samples=_clamp_samples)
def clamp(self, min=None, max=None, *, out=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = result_type(self, min, max)
    if dt.is_complex:
        raise NotImplementedError("clamp is not supported for complex types")
    if dt is bool_ and isinstance(min, TensorBase) and isinstance(max, TensorBase):
        raise NotImplementedError("\"clamp_cpu\" not implemented for 'Bool'")  # (both bounds)
    if dt is bool_ and not isinstance(min, TensorBase) and not isinstance(max, TensorBase):
        kernel = "clamp" if min is not None and max is not None else \
            "clamp_min" if min is not None else "clamp_max"
        raise NotImplementedError(f"\"{kernel}_scalar_cpu\" not implemented for 'Bool'")
    check_scalar_fits(min, dt)
    check_scalar_fits(max, dt)
    result = self
    if min is not None:
        result = pointwise(np.maximum, result, min, out=out,
                           dtype=result_type(self, min, *([max] if max is not None else [])))
    if max is not None:
        source = result if min is not None else self
        result = pointwise(np.minimum, source, max, out=out if min is None else result,
                           dtype=result_type(self, max, *([min] if min is not None else [])))
    return result


# PyTorch's rule: when min > max the result is max, so only max gets the gradient
@clamp.def_derivative("self")
def clamp(grad, self, min, max):
    inside = None if min is None else self >= min
    if max is not None:
        inside = self <= max if inside is None else inside & (self <= max)
    return where(inside, grad, grad.new_zeros(()))


@clamp.def_derivative("min")
def clamp(grad, self, min, max):
    below = self < min
    return where(below if max is None else below & (min < max), grad, grad.new_zeros(()))


@clamp.def_derivative("max")
def clamp(grad, self, min, max):
    above = self > max
    return where(above if min is None else above | (max < min), grad, grad.new_zeros(()))


clamp_ = inplace_variant(clamp)


@op(kind="composite")
def clamp_min(self, min):
    return clamp(self, min=min)


@op(kind="composite")
def clamp_max(self, max):
    return clamp(self, max=max)


def _of_tensors(arguments):
    """PyTorch's ``where`` takes ``out=`` only in its form on three tensors."""
    return isinstance(arguments["self"], TensorBase) and isinstance(arguments["other"],
                                                                   TensorBase)


@op(out=_of_tensors, out_casting=False, inputs=("condition", "self", "other"), method=False,
    family="pointwise",
    samples=_where_samples)
def where(condition, self, other):
    _require_tensors("where", condition=condition)
    if condition._dtype is not bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {condition._dtype.name.capitalize()}")
    dt = result_type(self, other)
    check_scalar_fits(self, dt)
    check_scalar_fits(other, dt)
    return pointwise(lambda c, a, b, out, dtype, casting: np.copyto(
        out, np.where(c, a, b), casting=casting) or out, condition, self, other, dtype=dt,
        wrapped_numbers=True)


@where.def_derivative("self")
def where(grad, condition):
    return where(condition, grad, grad.new_zeros(()))


@where.def_derivative("other")
def where(grad, condition):
    return where(condition, grad.new_zeros(()), grad)


@op(inputs=("self", "mask", "value"), family="pointwise", out=False,
    samples=_masked_fill_samples)
def masked_fill(self, mask, value, *, out=None):
    if mask._dtype is not bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{mask._dtype.name}")
    if isinstance(value, TensorBase):
        if value.dim() != 0:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.dim()} dimension(s).")
        value = value.item()   # as PyTorch: a value inside ``self`` is read before writing
    dt = self._dtype
    check_scalar_fits(value, dt)
    if out is None:    # PyTorch fills a contiguous clone, whatever the layout of ``self``
        out = empty_contiguous(meta.broadcast_pair(self._sizes, mask._sizes), dt, self.device)
    return pointwise(lambda a, m, v, out, dtype, casting: np.copyto(
        out, np.where(m, v, a), casting=casting) or out, self, mask, value, out=out, dtype=dt)


@masked_fill.def_derivative("self")
def masked_fill(grad, mask):
    return grad.masked_fill(mask, 0)    # as PyTorch's: contiguous, like the op's result


@masked_fill.def_derivative("value")
def masked_fill(grad, mask):
    return where(mask, grad, grad.new_zeros(())).sum()


@masked_fill.def_batch_rule
def masked_fill(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, mask, value = bound["self"], bound["mask"], bound["value"]
    if not same_level(value, level):
        return pointwise_family(op, level, args, kwargs)
    if value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.dim()} dimension(s).")
    filled = where(mask, value.to(self.dtype), self)
    if op.kind == "inplace":
        return self.copy_(filled)
    return filled


masked_fill_ = inplace_variant(masked_fill)


@op(inputs=("self", "end", "weight"), family="pointwise", samples=_lerp_samples)
def lerp(self, end, weight, *, out=None):
    _require_tensors("lerp", input=self, end=end)
    for argument, value in (("end", end), ("weight", weight)):
        if isinstance(value, TensorBase) and value._dtype is not self._dtype and \
                (argument == "end" or value.dim()):
            raise RuntimeError(f"expected dtype {info(self._dtype).cpp_name} for `{argument}` "
                               f"but got dtype {info(value._dtype).cpp_name}")
    if self._dtype.kind < 2:     # (neither floating nor complex)
        kind = "tensor" if isinstance(weight, TensorBase) else "scalar"
        raise NotImplementedError(f"\"lerp_kernel_{kind}\" not implemented for "
                                  f"'{_type_name(self._dtype)}'")
    return pointwise(_lerp_kernel, self, end, weight, out=out)


def _lerp_kernel(a, b, w, out, dtype, casting):
    """PyTorch's two formulas: ``a + w (b - a)`` for weights below 0.5, ``b - (1 - w)
    (b - a)`` from 0.5 on, so that a weight of 1 gives ``end`` exactly."""
    xp = array_module(a) if hasattr(a, "dtype") else np
    a, b, w = (xp.asarray(x, dtype=dtype) for x in (a, b, w))
    difference = b - a
    result = xp.where(xp.abs(w) < 0.5, a + w * difference, b - difference * (1 - w))
    return xp.copyto(out, result, casting=casting) if out is not None else result


@lerp.def_derivative("self")
def lerp(grad, weight):
    return grad * conj_if_complex(1 - weight)


@lerp.def_derivative("end")
def lerp(grad, weight):
    return grad * conj_if_complex(weight)


@lerp.def_derivative("weight")
def lerp(grad, self, end):
    return grad * conj_if_complex(end - self)


# --------------------------------------------------------------------------- comparisons

def _predicate(ufunc):
    """``ufunc`` computing in the dtype ``pointwise`` passes and producing bools (NumPy's
    own ``dtype=`` names the output type, which has no such loop)."""
    def apply(*arrays, out, dtype, casting):
        # cast the operands rather than pass ``signature=``, which CuPy's ufuncs refuse
        operands = [a.astype(dtype, copy=False) if hasattr(a, "astype") else a
                    for a in arrays]
        return ufunc(*operands, out=out, casting=casting)
    return apply


def _comparison(name, ufunc):
    def kernel(self, other, *, out=None):
        dt = result_type(self, other)
        if dt.is_complex and name not in ("eq", "ne"):
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for "
                                      f"'{info(dt).scalar_name}'")
        return pointwise(_predicate(ufunc), self, other, out=out, dtype=bool_,
                         compute_dtype=dt, wrapped_numbers=True)
    kernel.__name__ = name
    declared = op(name, inputs=BINARY, differentiable=False, family="pointwise",
                  samples=_comparison_samples)(kernel)
    inplace_variant(declared, differentiable=False, predicate=True)
    return declared


eq = _comparison("eq", np.equal)
ne = _comparison("ne", np.not_equal)
lt = _comparison("lt", np.less)
le = _comparison("le", np.less_equal)
gt = _comparison("gt", np.greater)
ge = _comparison("ge", np.greater_equal)


def _logical(name, ufunc, arity):
    if arity == 2:
        def kernel(self, other, *, out=None):
            _require_tensors(name, input=self, other=other)
            return pointwise(ufunc, self, other, out=out, dtype=bool_, compute_dtype=bool_)
    else:
        def kernel(self, *, out=None):
            return pointwise(ufunc, self, out=out, dtype=bool_, compute_dtype=bool_)
    kernel.__name__ = name
    declared = op(name, inputs=BINARY[:arity], differentiable=False, family="pointwise",
                  samples=_logical_samples if arity == 2 else _float_only_samples)(kernel)
    inplace_variant(declared, differentiable=False, predicate=True)
    return declared


logical_and = _logical("logical_and", np.logical_and, 2)
logical_or = _logical("logical_or", np.logical_or, 2)
logical_xor = _logical("logical_xor", np.logical_xor, 2)
logical_not = _logical("logical_not", np.logical_not, 1)


def _bitwise(name, ufunc, samples=_bitwise_samples, loop_name=None, bools=True):
    """Declare a two-input integer op (``loop_name``: PyTorch's kernel name in its refusal
    of floats, ``name`` by default; ``bools``: whether it has a kernel for bool) and its
    in-place variant."""
    def kernel(self, other, *, out=None):
        for value in (self, other):
            if type(value) is int:    # PyTorch parses its scalar before checking the dtype
                check_scalar_range(value)
        dt = result_type(self, other)
        if dt.is_floating_point or dt.is_complex or (dt is bool_ and not bools):
            raise NotImplementedError(f"\"{loop_name or name}_cpu\" not implemented for "
                                      f"'{info(dt).scalar_name}'")
        return pointwise(ufunc, self, other, out=out, wrapped_numbers=True)
    kernel.__name__ = name
    declared = op(name, inputs=BINARY, differentiable=False, family="pointwise",
                  samples=samples)(kernel)
    inplace_variant(declared, differentiable=False)
    return declared


bitwise_and = _bitwise("bitwise_and", np.bitwise_and)
bitwise_or = _bitwise("bitwise_or", np.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor)


@op(out_casting=False, differentiable=False, family="pointwise",
    samples=lambda make: [Sample(make(3, 4, dtype=int64)), Sample(make(5, dtype=bool_))])
def bitwise_not(self, *, out=None):
    if self._dtype.is_floating_point:
        raise NotImplementedError(f"\"bitwise_not_cpu\" not implemented for "
                                  f"'{info(self._dtype).scalar_name}'")
    return pointwise(np.invert, self, out=out)


@op(differentiable=False, family="pointwise", samples=_float_only_samples)
def isnan(self):
    return pointwise(_predicate(np.isnan), self, dtype=bool_,
                     compute_dtype=float_dtype(self._dtype))


@op(differentiable=False, family="pointwise", samples=_float_only_samples)
def isinf(self):
    return pointwise(_predicate(np.isinf), self, dtype=bool_,
                     compute_dtype=float_dtype(self._dtype))


@op(differentiable=False, family="pointwise", samples=_float_only_samples)
def isfinite(self):
    return pointwise(_predicate(np.isfinite), self, dtype=bool_,
                     compute_dtype=float_dtype(self._dtype))


@op(inputs=BINARY, kind="composite")
def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(np.allclose(self._array(), other._array(), rtol=rtol, atol=atol,
                            equal_nan=equal_nan))


@op(inputs=BINARY, kind="composite")
def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    diff = (self - other).abs()
    close = diff <= atol + rtol * other.abs()
    if equal_nan:
        close = close | (self.isnan() & other.isnan())
    return close


@op(inputs=BINARY, kind="composite")
def equal(self, other):
    return self.shape == other.shape and bool((self == other).all())


# --------------------------------------------------------------------------- fills

@op(inputs=("self",), kind="inplace", family="pointwise", samples=_fill_samples)
def fill_(self, value):
    if isinstance(value, TensorBase):
        if value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.dim()} dimensions.")
        value = value.item()
    else:
        check_scalar_fits(value, self._dtype)
        if isinstance(value, int) and self._dtype.is_floating_point:
            value = float(value)   # NumPy would take an int past int64 as uint64, then wrap
        elif type(value) is complex and not self._dtype.is_complex:
            value = value.real     # (checked above: no imaginary part)
    if self._numel:
        if self.device.type == "cpu":
            kernels.fill_(self._array(), value)
        else:
            self._array().fill(value)
    return self


@fill_.def_derivative("self")
def fill_(grad):
    return _zero_grad(grad)


@fill_.def_batch_rule
def fill_(op, level, args, kwargs):
    self, value = args[0], (args[1] if len(args) > 1 else kwargs["value"])
    if not same_level(self, level):
        raise inplace_error("fill_")
    if isinstance(value, TensorBase) and value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    if same_level(value, level):
        target = to_front(self._value, self._bdim)
        source = aligned(value._value, value._bdim, 0, self.dim())
        call(REGISTRY["copy_"], (target, source), None)
    else:
        call(op, (self._value, value), None)
    return self


@op(inputs=("self",), kind="composite")
def zero_(self):
    return self.fill_(0)


__all__ = [name for name in dir() if not name.startswith("_") and name not in
           ("np", "op", "inplace_variant", "pointwise", "result_type", "float_dtype",
            "TensorBase", "bool_", "int64", "BINARY", "Sample", "info", "compute_numpy")]


# --------------------------------------------------------------------------- aliases
# PyTorch's other names of ops declared above: composites that call the op, so autograd,
# vmap and ``out=`` are the op's own.

def _alias(name, base, *, function=True):
    def kernel(*args, **kwargs):
        return base(*args, **kwargs)
    kernel.__signature__ = inspect.signature(base.kernel)
    kernel.__name__ = name
    kernel.__doc__ = f"Alias of ``{base.name}``."
    return op(name, kind="composite", inputs=base.inputs, function=function)(kernel)


_ALIASES = {   # name: (op, whether PyTorch has the in-place variant as a function too)
    "absolute": (abs, False), "arccos": (acos, True), "arcsin": (asin, True),
    "arctan": (atan, True), "greater": (gt, False), "greater_equal": (ge, False),
    "less": (lt, False), "less_equal": (le, False), "not_equal": (ne, False),
    "multiply": (mul, False), "divide": (div, False), "subtract": (sub, False),
    "negative": (neg, True), "true_divide": (div, False), "fix": (trunc, True),
}
for _name, (_base, _inplace_function) in _ALIASES.items():
    _alias(_name, _base)
    _alias(_name + "_", REGISTRY[_base.name + "_"], function=_inplace_function)


@op(kind="composite")
def positive(self):
    """``self`` itself (PyTorch refuses bool tensors)."""
    if self._dtype is bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


# --------------------------------------------------------------------------- more math
# PyTorch's other elementwise functions.  Integer and bool inputs of the float functions
# compute in the default float dtype; the gamma family and the Bessel functions come from
# ``special_math`` (NumPy has none of them).

def _float_unary_samples(low=None, high=None):
    """``_unary_samples`` and a float32 case (the special functions compute in float64 and
    round once)."""
    def samples(make):
        return _unary_samples(low, high)(make) + [
            Sample(make(2, 3, dtype=float32, low=low, high=high))]
    return samples


def _gamma_samples(make):
    """Positive arguments, and negative ones between two poles."""
    # (float32 away from the zeros, where PyTorch's float32 loops lose digits)
    return _unary_samples(low=0.3, high=6.0)(make) + [
        Sample(make(2, 3, dtype=float32, low=2.5, high=6.0)),
        Sample(make(3, low=-2.8, high=-2.2)), Sample(make(2, 2, low=-0.8, high=-0.2))]


acosh = _unary("acosh", np.arccosh, samples=_unary_samples(low=1.2, high=3.0))
asinh = _unary("asinh", np.arcsinh)
atanh = _unary("atanh", np.arctanh, samples=_unary_samples(low=-0.9, high=0.9, integers=False))
exp2 = _unary("exp2", np.exp2)
deg2rad = _unary("deg2rad", np.deg2rad)
rad2deg = _unary("rad2deg", np.rad2deg)
lgamma = _unary("lgamma", store(special_math.lgamma), samples=_gamma_samples)
digamma = _unary("digamma", store(special_math.digamma), samples=_gamma_samples)
i0 = _unary("i0", store(special_math.i0), samples=_float_unary_samples(low=-4.0, high=4.0))
sinc = _unary("sinc", store(np.sinc), samples=_float_unary_samples(low=-3.0, high=3.0))


@acosh.def_derivative("self")
def acosh(grad, self):
    return grad * conj_if_complex((self * self - 1).rsqrt())


@asinh.def_derivative("self")
def asinh(grad, self):
    return grad * conj_if_complex((self * self + 1).rsqrt())


@atanh.def_derivative("self")
def atanh(grad, self):
    return grad / conj_if_complex(1 - self * self)


@exp2.def_derivative("self")
def exp2(grad, result):
    return grad * conj_if_complex(result * 0.6931471805599453)


@deg2rad.def_derivative("self")
def deg2rad(grad):
    return grad * (np.pi / 180)


@rad2deg.def_derivative("self")
def rad2deg(grad):
    return grad * (180 / np.pi)


@lgamma.def_derivative("self")
def lgamma(grad, self):
    return grad * digamma(self)


@digamma.def_derivative("self")
def digamma(grad, self):
    return grad * polygamma(1, self)


@i0.def_derivative("self")
def i0(grad, self):
    return grad * special_i1(self)


@sinc.def_derivative("self")
def sinc(grad, self):
    # (cos(pi x) pi x - sin(pi x)) / (pi x^2), 0 at x = 0 (its limit)
    zero = self == 0
    x = where(zero, self.new_ones(()), self) * np.pi
    slope = ((x * x.cos() - x.sin()) / (x * x)) * np.pi
    return grad * conj_if_complex(where(zero, slope.new_zeros(()), slope))


@op(method=False, function=False, family="pointwise", samples=_float_unary_samples(-4.0, 4.0))
def special_i1(self, *, out=None):
    """The modified Bessel function I1 (``torch.special.i1``): ``i0``'s derivative."""
    refuse_complex(self, "i1_cpu")
    return pointwise(store(special_math.i1), self, out=out, dtype=float_dtype(self._dtype))


@special_i1.def_derivative("self")
def special_i1(grad, self, result):
    # I1' = I0 - I1 / x, 1/2 at x = 0 (its limit)
    zero = self == 0
    slope = i0(self) - result / where(zero, self.new_ones(()), self)
    return grad * where(zero, slope.new_full((), 0.5), slope)


def _logit_samples(make):
    return [Sample(make(3, 4, low=0.05, high=0.95)), Sample(make((), low=0.1, high=0.9)),
            Sample(make(4, 3, low=0.05, high=0.95).t(), 0.2),
            Sample(make(5, low=0.05, high=0.95), eps=0.3),
            Sample(make(2, 3, dtype=float32, low=0.05, high=0.95)),
            Sample(make(2, 3, dtype=int64, low=0, high=2))]


def _logit(eps):
    def loop(a):
        if eps is not None:   # PyTorch's order when eps > 1/2: below eps first
            a = np.where(a < eps, eps, np.where(a > 1 - eps, 1 - eps, a))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(a / (1 - a))
    return store(loop)


@op(family="pointwise", samples=_logit_samples)
def logit(self, eps=None, *, out=None):
    real_number_arg("logit", "eps", eps)
    refuse_complex(self, "logit_cpu")
    return pointwise(_logit(eps), self, out=out, dtype=float_dtype(self._dtype))


@logit.def_derivative("self")
def logit(grad, self, eps):
    # PyTorch's: NaN outside [0, 1] without eps, 0 outside [eps, 1 - eps] with it
    slope = grad / (self * (1 - self))
    if eps is None:
        return where((self < 0) | (self > 1), slope.new_full((), np.nan), slope)
    return where((self < eps) | (self > 1 - eps), slope.new_zeros(()), slope)


logit_ = inplace_variant(logit)


def _polygamma_samples(make):
    return [Sample(1, make(3, 4, low=0.3, high=5.0)), Sample(2, make(5, low=-2.8, high=-2.2)),
            Sample(0, make(4, 3, low=0.3, high=5.0).t()), Sample(3, make((), low=0.5)),
            Sample(1, make(2, 3, dtype=float32, low=0.3, high=5.0)),
            Sample(1, make(2, 3, dtype=int64, low=1, high=5))]


@op(inputs=("self",), method=False, family="pointwise", samples=_polygamma_samples)
def polygamma(n, self, *, out=None):
    """The ``n``-th derivative of ``digamma`` (``Tensor.polygamma(n)`` as a method)."""
    if int_arg(n, "n") < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    refuse_complex(self, ("digamma", "trigamma")[n] if n < 2 else "polygamma")
    return pointwise(store(lambda a: special_math.polygamma(n, a)), self, out=out,
                     dtype=float_dtype(self._dtype))


@polygamma.def_derivative("self")
def polygamma(grad, n, self):
    return grad * polygamma(n + 1, self)


def _polygamma_inplace_samples(make):
    return [Sample(s.args[1], s.args[0]) for s in _polygamma_samples(make)[:4]]


@op(kind="inplace", inplace_of=polygamma, family="pointwise", function=False,
    samples=_polygamma_inplace_samples)
def polygamma_(self, n):
    return polygamma.kernel(n, self, out=self)


def _mvlgamma_samples(make):
    return [Sample(make(3, 4, low=1.6, high=5.0), 1), Sample(make(5, low=2.1, high=5.0), 3),
            Sample(make((), low=1.6, high=4.0), 2)]


@op(out_casting=True, kind="composite", samples=_mvlgamma_samples)
def mvlgamma(self, p, *, out=None):
    """The multivariate log-gamma of dimension ``p``:
    ``log(pi) p (p - 1) / 4 + sum_i lgamma(self - i / 2)``."""
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if self._dtype is bool_:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    refuse_complex(self, "arange_cpu")
    if not self._dtype.is_floating_point:
        self = self.to(get_default_dtype())
    total = lgamma(self)
    for i in range(1, p):
        total = total + lgamma(self - i / 2)
    return add(total, np.log(np.pi) * p * (p - 1) / 4, out=out)


@op(kind="composite", function=False)
def mvlgamma_(self, p):
    if not self._dtype.is_floating_point:
        raise RuntimeError(f"mvlgamma: result type {info(self._dtype).scalar_name} can't be "
                           f"cast to the desired output type "
                           f"{info(get_default_dtype()).scalar_name}")
    return self.copy_(mvlgamma(self, p))


# ---- two inputs

def _float_binary_samples(low=None, high=None, scalar=True):
    """Float pairs (``other`` in ``[low, high)``), a number ``other``, float32 and integer
    pairs."""
    def samples(make):
        cases = [Sample(make(3, 4), make(3, 4, low=low, high=high)),
                 Sample(make(3, 4), make(4, low=low, high=high)),
                 Sample(make(2, 3), make((), low=low, high=high)),
                 Sample(make(4, 3).t(), make(3, 4, low=low, high=high)),
                 Sample(make(2, 3, dtype=float32), make(2, 3, dtype=float32, low=low,
                                                       high=high)),
                 Sample(make(2, 3, dtype=int64), make(2, 3, dtype=int64, low=1))]
        if scalar:
            cases.append(Sample(make(3), 2.5 if low is None else low + 0.5))
        return cases
    return samples


def _binary_math(name, fn, *, result="float", tensors_only=False, samples=None,
                 differentiable=True, integer_kernel=True, complex_kernel=False, inplace=True,
                 real_only=False, in_result_dtype=False):
    """Declare a two-input elementwise op (kernel only) and its in-place variant (unless
    ``inplace`` is False: PyTorch has none).
    ``result``: "float" (integers promote to the default float), "promoted" (PyTorch's
    promotion) or "integer" (integer inputs only); ``integer_kernel`` False: PyTorch has
    no kernel for integer or bool inputs (its error names the kernel); ``complex_kernel``
    True (with ``integer_kernel`` False): it has one for complex inputs; ``real_only``:
    complex inputs are refused (an ordering); ``in_result_dtype``: ``fn`` runs in the
    result's dtype, half types too (which others compute in float32 and round)."""
    def kernel(self, other, *, out=None):
        if tensors_only:
            _require_tensors(name, input=self, other=other)
        dt = result_type(self, other)
        if real_only and dt.is_complex:
            raise RuntimeError(f"{name} not implemented for complex tensors.")
        if dt.is_complex and not complex_kernel:
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for "
                                      f"'{info(dt).scalar_name}'")
        if result == "integer" and (dt.is_floating_point or dt is bool_) or \
                not integer_kernel and not (dt.is_floating_point or
                                            complex_kernel and dt.is_complex):
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for "
                                      f"'{info(dt).scalar_name}'")
        return pointwise(_in_own_dtype(fn) if in_result_dtype else store(fn), self, other,
                         out=out, dtype=float_dtype(dt) if result == "float" else dt)
    kernel.__name__ = name
    declared = op(name, inputs=BINARY, family="pointwise", samples=samples,
                  differentiable=differentiable)(kernel)
    if inplace:
        inplace_variant(declared, differentiable=differentiable)
    return declared


def _in_own_dtype(fn):
    """A ``pointwise`` loop running ``fn`` in the result's own dtype, half types included
    (where ``store``'s loops compute in float32)."""
    def loop(*arrays, out, dtype, casting):
        np.copyto(out, fn(*[a.astype(out.dtype, copy=False) for a in arrays]), casting=casting)
        return out
    return loop


def _xlogy(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y))


def _logaddexp(base):
    ufunc = np.logaddexp if base == "e" else np.logaddexp2

    def loop(a, b):
        with np.errstate(invalid="ignore"):
            if np.iscomplexobj(a) or np.iscomplexobj(b):
                return _complex_logaddexp(a, b)
            return ufunc(a, b)
    return loop


def _complex_logaddexp(a, b):
    """``log(exp(a) + exp(b))`` of complex values, shifted by the operand of the larger real
    part (no overflow), as PyTorch's, infinite real parts of one sign included."""
    a, b = np.broadcast_arrays(a, b)
    swap = a.real < b.real
    larger, smaller = np.where(swap, b, a), np.where(swap, a, b)
    shifted = larger + np.log1p(np.exp(smaller - larger))
    both_infinite = np.isinf(a.real) & (a.real == b.real)
    if not both_infinite.any():
        return shifted
    with np.errstate(divide="ignore", over="ignore"):
        unshifted = np.where(a.real > 0, np.log(np.exp(a) + np.exp(b)), b)
    return np.where(both_infinite, unshifted, shifted)


xlogy = _binary_math("xlogy", _xlogy, samples=_float_binary_samples(low=0.3, high=3.0))
hypot = _binary_math("hypot", np.hypot, tensors_only=True, integer_kernel=False,
                     samples=_float_binary_samples(low=0.5, scalar=False))
copysign = _binary_math("copysign", np.copysign, samples=_float_binary_samples())
logaddexp = _binary_math("logaddexp", _logaddexp("e"), tensors_only=True,
                         integer_kernel=False, complex_kernel=True, inplace=False,
                         samples=_float_binary_samples(scalar=False))
logaddexp2 = _binary_math("logaddexp2", _logaddexp("2"), tensors_only=True,
                          integer_kernel=False, inplace=False, samples=_float_binary_samples(scalar=False))
nextafter = _binary_math("nextafter", np.nextafter, result="promoted", tensors_only=True,
                         integer_kernel=False, differentiable=False, in_result_dtype=True,
                         samples=_float_binary_samples(scalar=False))   # (half types' steps)
fmax = _binary_math("fmax", np.fmax, result="promoted", tensors_only=True,
                    inplace=False, samples=_tensor_pair_samples, real_only=True)
fmin = _binary_math("fmin", np.fmin, result="promoted", tensors_only=True,
                    inplace=False, samples=_tensor_pair_samples, real_only=True)
gcd = _binary_math("gcd", np.gcd, result="integer", tensors_only=True, differentiable=False,
                   samples=lambda make: [Sample(make(3, 4, dtype=int64), make(4, dtype=int64))])
lcm = _binary_math("lcm", np.lcm, result="integer", tensors_only=True, differentiable=False,
                   samples=lambda make: [Sample(make(3, 4, dtype=int64), make(4, dtype=int64))])


@xlogy.def_derivative("self")
def xlogy(grad, self, other):
    # PyTorch's: 0 where self is 0 and other <= 0 (where log(other) is not finite)
    slope = xlogy(grad, other)
    return where((self == 0) & (other <= 0), slope.new_zeros(()), slope)


@xlogy.def_derivative("other")
def xlogy(grad, self, other):
    return grad * self / other


@hypot.def_derivative("self")
def hypot(grad, self, result):
    return grad * self / result


@hypot.def_derivative("other")
def hypot(grad, other, result):
    return grad * other / result


@copysign.def_derivative("self")
def copysign(grad, self, result):
    ratio = result / where(self == 0, self.new_ones(()), self)
    return grad * where(self == 0, ratio.new_zeros(()), ratio)


@copysign.def_derivative("other")
def copysign(grad):
    return _zero_grad(grad)


@logaddexp.def_derivative("self")
def logaddexp(grad, self, other):
    return grad / conj_if_complex(1 + (other - self).exp())


@logaddexp.def_derivative("other")
def logaddexp(grad, self, other):
    return grad / conj_if_complex(1 + (self - other).exp())


@logaddexp2.def_derivative("self")
def logaddexp2(grad, self, other):
    return grad / (1 + exp2(other - self))


@logaddexp2.def_derivative("other")
def logaddexp2(grad, self, other):
    return grad / (1 + exp2(self - other))


# a tie and a NaN ``other`` send the gradient to ``self``, as PyTorch does
@fmax.def_derivative("self")
def fmax(grad, self, other):
    return where((self >= other) | other.isnan(), grad, grad.new_zeros(()))


@fmax.def_derivative("other")
def fmax(grad, self, other):
    return where((self >= other) | other.isnan(), grad.new_zeros(()), grad)


@fmin.def_derivative("self")
def fmin(grad, self, other):
    return where((self <= other) | other.isnan(), grad, grad.new_zeros(()))


@fmin.def_derivative("other")
def fmin(grad, self, other):
    return where((self <= other) | other.isnan(), grad.new_zeros(()), grad)


def _heaviside_samples(make):
    return [Sample(_with_zeros(make(3, 4)), make(3, 4)), Sample(_with_zeros(make(3, 4)), make(4)),
            Sample(make(2, 3, dtype=int64), make((), dtype=int64))]


def _with_zeros(t):
    """``t`` with a zero in every other element (where the step is decided by ``values``)."""
    t._array().reshape(-1)[::2] = 0
    return t


@op(out_casting=False, inputs=("self", "values"), differentiable=False, family="pointwise",
    samples=_heaviside_samples)
def heaviside(self, values, *, out=None):
    _require_tensors("heaviside", input=self, values=values)
    if self._dtype.is_complex or values._dtype.is_complex:
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if self._dtype is not values._dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different "
                           "dtypes.")
    return pointwise(lambda a, v, out, dtype, casting: np.copyto(
        out, np.where(a == 0, v, a > 0), casting=casting) or out, self, values, out=out)


heaviside_ = inplace_variant(heaviside, differentiable=False)


@op(inputs=("self", "other"), kind="composite")
def ldexp(self, other, *, out=None):
    """``self * 2 ** other``."""
    _require_tensors("ldexp", input=self, other=other)
    return mul(self, pow(2.0, other), out=out)


@op(kind="composite")
def ldexp_(self, other):
    _require_tensors("ldexp", input=self, other=other)
    if not self._dtype.is_floating_point:    # the result is a float
        raise RuntimeError(f"ldexp can't be cast to the desired output type "
                           f"{info(self._dtype).scalar_name}")
    return mul_(self, pow(2.0, other))


# ---- predicates and the rest

def _sign_samples(make):
    return [Sample(make(3, 4)), Sample(make(())), Sample(make(2, 3, dtype=int64)),
            Sample(make(4, dtype=bool_))]


@op(out_casting=False, differentiable=False, family="pointwise", samples=_sign_samples)
def signbit(self, *, out=None):
    if self._dtype.is_complex:
        raise NotImplementedError("signbit is not implemented for complex tensors.")
    # integers and bool tested as float64 (np.signbit has no bool loop)
    return pointwise(_predicate(np.signbit), self, out=out, dtype=bool_,
                     compute_dtype=self._dtype if self._dtype.is_floating_point else float64)


def _infinity_test(name, sign):
    def kernel(self, *, out=None):
        if self._dtype.is_complex:
            raise RuntimeError(f"{name} does not support complex inputs.")
        if not self._dtype.is_floating_point:    # no integer is infinite
            return pointwise(_predicate(np.isinf), self, out=out, dtype=bool_,
                             compute_dtype=float_dtype(self._dtype))
        return pointwise(lambda a, out, dtype, casting: np.equal(a, sign * np.inf, out=out),
                         self, out=out, dtype=bool_, compute_dtype=self._dtype)
    kernel.__name__ = name
    return op(name, differentiable=False, family="pointwise", out_casting=False,
              samples=_float_only_samples)(kernel)


isposinf = _infinity_test("isposinf", 1)
isneginf = _infinity_test("isneginf", -1)


@op(kind="composite")
def isreal(self):
    """True where the imaginary part is 0 (everywhere for a real tensor)."""
    if self._dtype.is_complex:
        return self.imag == 0
    return self.new_ones(self.shape, dtype=bool_)


@op(kind="composite")
def sgn(self, *, out=None):
    """``sign``; for a complex tensor ``z / |z|`` (0 where ``z`` is 0)."""
    if not self._dtype.is_complex:
        return sign(self, out=out)
    magnitude = self.abs()
    zero = magnitude == 0
    # divided by 1 at 0: the gradient there is 0, as PyTorch's (not 0 / 0)
    result = (self / magnitude.masked_fill(zero, 1)).masked_fill(zero, 0)
    return result if out is None else out.copy_(result)


_alias("sgn_", REGISTRY["sign_"], function=False)
for _name in ("acosh", "asinh", "atanh"):
    _alias("arc" + _name[1:], REGISTRY[_name])
    _alias("arc" + _name[1:] + "_", REGISTRY[_name + "_"])


def _frexp_samples(make):
    return [Sample(make(3, 4)), Sample(make(())), Sample(make(2, 3, dtype=float32))]


@op(method=False, function=False, family="pointwise", samples=_frexp_samples)
def _frexp(self):
    if not self._dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    mantissa, exponent = np.frexp(self._array())
    return (from_numpy_result(mantissa, self._dtype),
            from_numpy_result(exponent.astype(np.int32), int32))


@_frexp.def_derivative("self")
def _frexp(grad, result1):
    return grad[0] / exp2(result1)


ReturnFrexp = type("frexp", (namedtuple("frexp", ("mantissa", "exponent")),),
                   {"__slots__": (), "__module__": "microtensor.return_types"})


@op(kind="composite", samples=_frexp_samples)
def frexp(self, *, out=None):
    """``(mantissa, exponent)`` with ``self = mantissa * 2 ** exponent`` and
    ``0.5 <= |mantissa| < 1`` (both 0 at 0)."""
    mantissa, exponent = _frexp(self)
    if out is None:
        return ReturnFrexp(mantissa, exponent)
    if out[0]._dtype is not self._dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype "
                           f"{info(self._dtype).cpp_name} but got "
                           f"{info(out[0]._dtype).cpp_name}")
    if out[1]._dtype is not int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got "
                           f"{info(out[1]._dtype).cpp_name}")
    # ``mul`` by 1 writes by the rules of ``out=`` (resizing, refusing autograd), keeping -0
    return ReturnFrexp(mul(mantissa, 1, out=out[0]), mul(exponent, 1, out=out[1]))



def _isin_samples(make):
    return [Sample(make(3, 4, dtype=int64, low=0, high=5), make(3, dtype=int64, low=0, high=5)),
            Sample(make(2, 3, dtype=int64, low=0, high=4), make(2, 2, dtype=int64, low=0,
                                                               high=4), invert=True),
            Sample(make(5, dtype=int64, low=0, high=3), 1),
            Sample(make(4, low=0, high=1), make(2, low=0, high=1), assume_unique=True)]


def _check_isin(elements, test_elements):
    if not isinstance(elements, TensorBase) and not isinstance(test_elements, TensorBase):
        raise TypeError(f"isin() received an invalid combination of arguments - got "
                        f"({type(elements).__name__}, {type(test_elements).__name__})")
    for value in (elements, test_elements):
        if isinstance(value, TensorBase) and (value._dtype is bool_ or value._dtype.is_complex):
            raise RuntimeError(f"Unsupported input type encountered for isin(): "
                               f"{_type_name(value._dtype)}")


@op(inputs=(), method=False, differentiable=False, samples=_isin_samples)
def isin(elements, test_elements, *, assume_unique=False, invert=False, out=None):
    """Whether each of ``elements`` is among ``test_elements`` (either may be a number)."""
    _check_isin(elements, test_elements)
    tests = test_elements._array() if isinstance(test_elements, TensorBase) else test_elements
    values = elements._array() if isinstance(elements, TensorBase) else elements
    return from_numpy_result(np.isin(values, tests, assume_unique=assume_unique,
                                     invert=invert), bool_)


@isin.def_batch_rule
def isin(op, level, args, kwargs):
    """Elementwise in ``elements``: one physical call when only they are batched; with
    batched ``test_elements``, each sample's elements compared with its own test elements
    (one broadcast ``eq``)."""
    bound = op.bind(args, kwargs)
    elements, tests = bound.pop("elements"), bound.pop("test_elements")
    if bound.pop("out") is not None:
        raise no_fallback(op)
    _check_isin(elements, tests)
    if not same_level(tests, level):
        return wrap(call(op, (to_front(elements._value, elements._bdim), tests), bound), 0,
                    level)
    size = tests._value.shape[tests._bdim]
    tests = to_front(tests._value, tests._bdim).reshape(size, 1, tests.numel())
    if isinstance(elements, TensorBase):
        elements = front_or_expanded(elements, level, size)
    else:
        elements = tests.new_full((size,), elements)
    found = (elements.reshape(size, -1, 1) == tests).any(-1).reshape(elements.shape)
    return wrap(found.logical_not() if bound["invert"] else found, 0, level)


__all__ += ["positive", "float_power_", "acosh", "asinh", "atanh", "exp2", "deg2rad",
            "rad2deg", "lgamma", "digamma", "i0", "sinc", "special_i1", "logit", "logit_",
            "polygamma", "polygamma_", "mvlgamma", "mvlgamma_", "xlogy", "hypot", "copysign",
            "logaddexp", "logaddexp2", "nextafter", "fmax", "fmin", "gcd", "lcm", "heaviside",
            "heaviside_", "ldexp", "ldexp_", "signbit", "isposinf", "isneginf", "isreal",
            "frexp", "isin"]   # and the aliases and in-place variants, in the registry only


# --------------------------------------------------------------------------- more in-place
# PyTorch's in-place variants of the ops above, and the bit shifts.

@op(kind="composite", function=False)
def clamp_min_(self, min):
    return clamp_(self, min)


@op(kind="composite", function=False)
def clamp_max_(self, max):
    return clamp_(self, None, max)


lerp_ = inplace_variant(lerp)
bitwise_not_ = inplace_variant(bitwise_not, differentiable=False)


def _shift(ufunc, left):
    """``ufunc`` (NumPy's shift) with PyTorch's answers for amounts outside [0, bits): 0
    for a left shift, the sign (0 or -1) for a right shift, as if shifted one bit at a
    time (C leaves those undefined)."""
    def apply(a, b, *, out, dtype, casting):
        xp = array_module(out)
        a, b = xp.asarray(a).astype(dtype, copy=False), xp.asarray(b).astype(dtype, copy=False)
        in_range = (b >= 0) & (b < 8 * np.dtype(dtype).itemsize)
        shifted = ufunc(a, xp.where(in_range, b, 0).astype(dtype, copy=False))
        beyond = xp.zeros((), dtype) if left else xp.where(a < 0, -1, 0).astype(dtype)
        return xp.copyto(out, xp.where(in_range, shifted, beyond), casting=casting)
    return apply


def _shift_samples(make):
    return [Sample(make(3, 4, dtype=int64, low=-50, high=50), make(3, 4, dtype=int64, low=0,
                                                                   high=8)),
            Sample(make(3, dtype=int64, low=-9, high=9), 2)]


bitwise_left_shift = _bitwise("bitwise_left_shift", _shift(np.left_shift, True),
                              _shift_samples, "lshift", bools=False)
bitwise_right_shift = _bitwise("bitwise_right_shift", _shift(np.right_shift, False),
                               _shift_samples, "rshift", bools=False)



# conjugation: a real tensor is its own conjugate.  A complex tensor's conjugate is a new
# tensor (PyTorch's ``conj`` sets a lazy bit instead), so no tensor ever carries the
# conjugate or negation bit and resolving them is the tensor itself, as in PyTorch

def _conjugate_loop(a, *, out, dtype, casting):
    return np.conjugate(a, out=out)


@op(method=False, function=False, family="pointwise",
    samples=lambda make: [Sample(make(3, 4, dtype=complex128)),
                          Sample(make(4, 3, dtype=complex128).t())])
def _conjugate(self):
    return pointwise(_conjugate_loop, self)


@_conjugate.def_derivative("self")
def _conjugate(grad):
    return _conjugate(grad)


_conjugate.node_name = "ConjBackward0"


def _conjugating(name):
    def kernel(self):
        return _conjugate(self) if self._dtype.is_complex else self
    kernel.__name__ = name
    kernel.__doc__ = "The complex conjugate (a new tensor); a real tensor itself."
    return op(name, kind="composite")(kernel)


def _itself(name):
    def kernel(self):
        return self
    kernel.__name__ = name
    kernel.__doc__ = "``self`` itself: no tensor carries a lazy conjugate or negation bit."
    return op(name, kind="composite")(kernel)


def _no_bit(name):
    def kernel(self):
        return False
    kernel.__name__ = name
    kernel.__doc__ = "False: no tensor carries the lazy conjugate or negation bit."
    return op(name, kind="composite")(kernel)


conj, conj_physical = map(_conjugating, ("conj", "conj_physical"))
resolve_conj, resolve_neg = map(_itself, ("resolve_conj", "resolve_neg"))
is_conj, is_neg = map(_no_bit, ("is_conj", "is_neg"))


@op(kind="inplace", family="pointwise", samples=lambda make: [Sample(make(3, 4))])
def conj_physical_(self):
    """A write of the conjugate values (a real tensor's own): the version counter moves and
    autograd records it, as PyTorch does."""
    if self._dtype.is_complex:
        pointwise(_conjugate_loop, self, out=self)
    return self


@conj_physical_.def_derivative("self")
def conj_physical_(grad):
    return conj(grad)


__all__ += ["clamp_min_", "clamp_max_", "lerp_", "bitwise_not_", "bitwise_left_shift",
            "bitwise_right_shift", "conj", "conj_physical", "resolve_conj", "resolve_neg",
            "is_conj", "is_neg", "conj_physical_"]
