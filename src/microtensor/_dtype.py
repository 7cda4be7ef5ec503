"""Type promotion: PyTorch's rules for which dtype an operation on mixed inputs produces.

Participants fall into three priority groups: tensors with dimensions, zero-dimensional
tensors, and Python scalars.  A lower group only changes the result when it belongs to a
higher *category* (bool < integer < floating < complex), as in ``torch.result_type``.
"""
import math
import numbers

import numpy

from microtensor import _dtype_table
from microtensor._C.tensor import (DTYPES, TensorBase, bool_, complex64, dtype, float32,
                                   float64, get_default_dtype, int16, int64)


def promote_types(a, b):
    """The smallest dtype both ``a`` and ``b`` can be cast to without losing category
    (PyTorch's table): the higher category wins; within one, the wider type, except that
    float16 with bfloat16 needs float32 and uint8 with int8 needs int16."""
    if a is b:
        return a
    if a.is_complex or b.is_complex:
        # the complex type of the wider of the two parts' types (float64 + complex64 is
        # complex128)
        return complex_of(promote_types(a.to_real(), b.to_real())) \
            if a.kind >= 2 and b.kind >= 2 else (a if a.is_complex else b)
    if a.kind != b.kind:
        return a if a.kind > b.kind else b
    if a.is_floating_point and a.itemsize == b.itemsize:
        return float32
    if a.is_signed != b.is_signed:
        signed = a if a.is_signed else b
        return int16 if signed.itemsize == 1 else signed
    return a if a.itemsize > b.itemsize else b


def _combine_categories(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        # a lower-priority complex operand keeps a floating operand's precision
        return complex_of(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


class NotATensor(TypeError):
    """A value where a tensor or a Python number goes; the dispatcher turns it into
    PyTorch's message naming the op's argument."""


def scalar_dtype(value):
    """The dtype a Python scalar takes when it stands alone (``tensor(2.5)`` is float32)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return get_default_dtype()
    if isinstance(value, complex):
        return default_complex_dtype()
    raise NotATensor(f"expected a Tensor or a Python number, got {type(value).__name__}")


def complex_of(dt):
    """The complex dtype of floating ``dt``'s precision, where promotion needs one:
    microtensor has no complex32, so float16 (as bfloat16, as PyTorch) gives complex64."""
    return complex64 if dt.itemsize == 2 else dt.to_complex()


def default_complex_dtype():
    """The dtype a Python complex takes: the default dtype's complex type (complex64 by
    default)."""
    return complex_of(get_default_dtype())


def result_type(*operands):
    """PyTorch's ``result_type`` over tensors and Python scalars."""
    dim_result = zero_result = scalar_result = None
    for x in operands:
        if isinstance(x, TensorBase):
            if x._sizes:
                dim_result = x._dtype if dim_result is None else promote_types(dim_result, x._dtype)
            else:
                zero_result = x._dtype if zero_result is None else promote_types(zero_result, x._dtype)
        elif x is not None:
            d = scalar_dtype(x)
            scalar_result = d if scalar_result is None else promote_types(scalar_result, d)
    return _combine_categories(dim_result, _combine_categories(zero_result, scalar_result))


def can_cast(from_, to):
    """False when casting would drop a category (complex to real, float to int, anything
    but bool to bool)."""
    if from_.kind > to.kind and from_.kind >= 2:
        return False
    return not (to is bool_ and from_ is not bool_)


def info(dt):
    """The dtype table's row for ``dt``: its PyTorch names (``scalar_name``, ``cpp_name``...)."""
    return _dtype_table.BY_NAME[dt.name]


# what each integer dtype holds
_INTEGER_RANGE = {dt: (int(numpy.iinfo(dt.np).min), int(numpy.iinfo(dt.np).max))
                  for dt in DTYPES.values() if dt.kind == 1}
_FLOAT32_MAX = 3.4028234663852886e38


def check_scalar_fits(value, dt):
    """Refuse a Python number that a ``dt`` tensor cannot hold, before it is written (by
    ``fill_``, ``full``, ``x[i] = v``, ``masked_fill`` ...) where NumPy's cast would wrap:
    PyTorch's "value cannot be converted to type int without overflow".  Bool holds
    anything (nonzero is True); NaN and infinities fit the floating dtypes, and the
    floating dtypes narrower than float64 take what float32 holds (float16 then rounds
    to infinity, as PyTorch's)."""
    kind = type(value)
    if kind is not int and kind is not float:     # exact types first: factories call this
        if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
            if dt.is_complex:
                return
            if value.imag != 0:       # a real dtype holds a complex number with no imaginary part
                raise RuntimeError(f"value cannot be converted to type {info(dt).limit_name} "
                                   "without overflow")
            value = value.real
        if kind is bool or not isinstance(value, numbers.Real):
            return
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
        kind = type(value)
    if kind is int:
        check_scalar_range(value)
    if dt is bool_:
        return
    part = dt.to_real()      # a complex dtype holds what its parts' type holds
    if part.is_floating_point:
        fits = part is float64 or not math.isfinite(value) or abs(value) <= _FLOAT32_MAX
    else:
        low, high = _INTEGER_RANGE[dt]
        if kind is int and not low:
            # PyTorch's unsigned types also take the integers down to minus their maximum,
            # wrapped (-1 is 255 in uint8): the ``~mask``-style values C code writes
            low = -high
        fits = low <= value <= high and (kind is int or not math.isnan(value))
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {info(dt).limit_name} without "
                           "overflow")


def check_scalar_range(value):
    """PyTorch's scalars hold a Python int from int64's minimum to uint64's maximum."""
    if not -2 ** 63 <= value < 2 ** 64:
        raise OverflowError("int too big to convert")


def wrap_scalar(value, dt):
    """A Python number as an elementwise op computing in ``dt`` sees it: PyTorch takes an
    int in its scalar range (int64 and uint64) and casts it to ``dt``, wrapping beyond
    ``dt``'s range (``int32_tensor + 2**40`` adds 0); beyond that range it refuses."""
    if type(value) is not int:
        return value
    check_scalar_range(value)
    if dt in _INTEGER_RANGE:
        bits = 8 * dt.itemsize
        value &= (1 << bits) - 1
        if dt.is_signed and value >> (bits - 1):
            value -= 1 << bits
    return value


def check_scalars_fit(dt, *values):
    """``check_scalar_fits`` for each of an op's number parameters given (not None)."""
    for value in values:
        if value is not None:
            check_scalar_fits(value, dt)


def cast_scalar(value, dt):
    """A Python number as an op computing in ``dt`` applies it (``alpha``, ``value``): an
    integer dtype truncates a float and wraps beyond its range, bool takes its truth, as
    PyTorch converts; one it cannot hold (NaN for an integer dtype, a complex number for a
    real one) is refused with PyTorch's error."""
    check_scalar_fits(value, dt)
    if dt is bool_:
        return bool(value)
    if dt.kind >= 2 or isinstance(value, bool):
        return value
    return wrap_scalar(int(value), dt)


def _check_dtype(fn, value):
    if not isinstance(value, dtype):
        raise TypeError(f"{fn}(): argument 'type' (position 1) must be microtensor.dtype, not "
                        f"{type(value).__name__}")


class finfo:
    """Machine limits of a floating dtype (the default dtype when none is given), as
    ``torch.finfo``: ``bits``, ``eps``, ``max``, ``min``, ``tiny`` (= ``smallest_normal``),
    ``resolution`` and ``dtype`` (the dtype's name)."""

    def __init__(self, type=None):
        type = get_default_dtype() if type is None else type
        _check_dtype("finfo", type)
        type = type.to_real()     # a complex dtype's limits are its parts'
        if not type.is_floating_point:
            raise TypeError("microtensor.finfo() requires a floating point input type. Use "
                            "microtensor.iinfo to handle 'microtensor.finfo'")
        limits = numpy.finfo(type.np)
        self.bits = limits.bits
        self.eps = float(limits.eps)
        self.max = float(limits.max)
        self.min = float(limits.min)
        self.tiny = self.smallest_normal = float(limits.smallest_normal)
        self.resolution = 10.0 ** -limits.precision     # as a Python float, as PyTorch's
        self.dtype = type.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Machine limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``max``, ``min``
    and ``dtype`` (the dtype's name); bool is refused as PyTorch refuses it."""

    def __init__(self, type):
        _check_dtype("iinfo", type)
        if type is bool_:
            raise TypeError("microtensor.bool is not supported by microtensor.iinfo")
        if type.is_floating_point or type.is_complex:
            raise TypeError("microtensor.iinfo() requires an integer input type. Use "
                            "microtensor.finfo to handle 'microtensor.iinfo'")
        limits = numpy.iinfo(type.np)
        self.bits = limits.bits
        self.max = int(limits.max)
        self.min = int(limits.min)
        self.dtype = type.name

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


__all__ = ["dtype", "finfo", "iinfo", "promote_types", "result_type", "can_cast", "scalar_dtype",
           "default_complex_dtype", "check_scalar_fits", "wrap_scalar", "cast_scalar", "info"]
