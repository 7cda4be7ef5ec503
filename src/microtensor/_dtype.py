"""Type promotion: PyTorch's rules for which dtype an operation on mixed inputs produces.

Participants fall into three priority groups: tensors with dimensions, zero-dimensional
tensors, and Python scalars.  A lower group only changes the result when it belongs to a
higher *category* (bool < integer < floating), as in ``torch.result_type``.
"""
import math
import numbers

from microtensor._C.tensor import (TensorBase, bool_, dtype, float32, float64,
                                   get_default_dtype, int32, int64)

_RANK = {bool_: 0, int32: 1, int64: 2, float32: 3, float64: 4}


def promote_types(a, b):
    """The smallest dtype both ``a`` and ``b`` can be cast to without losing category."""
    return a if _RANK[a] >= _RANK[b] else b


def _combine_categories(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def scalar_dtype(value):
    """The dtype a Python scalar takes when it stands alone (``tensor(2.5)`` is float32)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return get_default_dtype()
    raise TypeError(f"expected a Tensor or a Python number, got {type(value).__name__}")


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
    """False when casting would drop a category (float to int, anything but bool to bool)."""
    if from_.is_floating_point and not to.is_floating_point:
        return False
    return not (to is bool_ and from_ is not bool_)


# what each dtype holds, by the C type PyTorch's messages name
_INTEGER_RANGE = {int32: ("int", -2 ** 31, 2 ** 31 - 1), int64: ("int64_t", -2 ** 63, 2 ** 63 - 1)}
_FLOAT32_MAX = 3.4028234663852886e38


def check_scalar_fits(value, dt):
    """Refuse a Python number that a ``dt`` tensor cannot hold, before it is written (by
    ``fill_``, ``full``, ``x[i] = v``, ``masked_fill`` ...) where NumPy's cast would wrap:
    PyTorch's "value cannot be converted to type int without overflow".  Bool holds
    anything (nonzero is True); NaN and infinities fit the floating dtypes."""
    kind = type(value)
    if kind is not int and kind is not float:     # exact types first: factories call this
        if kind is bool or not isinstance(value, numbers.Real):
            return
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
        kind = type(value)
    if kind is int and not -2 ** 63 <= value < 2 ** 64:
        raise OverflowError("int too big to convert")   # PyTorch's scalars hold no more
    if dt is bool_:
        return
    if dt.is_floating_point:
        fits = dt is not float32 or not math.isfinite(value) or abs(value) <= _FLOAT32_MAX
        name = "float"
    else:
        name, low, high = _INTEGER_RANGE[dt]
        fits = low <= value <= high and (kind is int or not math.isnan(value))
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {name} without overflow")


def wrap_scalar(value, dt):
    """A Python number as an elementwise op computing in ``dt`` sees it: PyTorch takes an
    int in its scalar range (int64 and uint64) and casts it to ``dt``, wrapping beyond
    ``dt``'s range (``int32_tensor + 2**40`` adds 0); beyond that range it refuses."""
    if type(value) is not int:
        return value
    if not -2 ** 63 <= value < 2 ** 64:
        raise OverflowError("int too big to convert")
    if dt in _INTEGER_RANGE:
        bits = 8 * dt.itemsize
        value &= (1 << bits) - 1
        if value >> (bits - 1):
            value -= 1 << bits
    return value


__all__ = ["dtype", "promote_types", "result_type", "can_cast", "scalar_dtype",
           "check_scalar_fits", "wrap_scalar"]
