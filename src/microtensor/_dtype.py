"""Type promotion: PyTorch's rules for which dtype an operation on mixed inputs produces.

Participants fall into three priority groups: tensors with dimensions, zero-dimensional
tensors, and Python scalars.  A lower group only changes the result when it belongs to a
higher *category* (bool < integer < floating), as in ``torch.result_type``.
"""
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


__all__ = ["dtype", "promote_types", "result_type", "can_cast", "scalar_dtype"]
