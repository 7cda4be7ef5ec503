"""Top-level functions of PyTorch's about tensors: ``is_tensor``, ``is_floating_point``,
``numel``."""
from microtensor._C.tensor import TensorBase


def _require_tensor(function, value):
    if not isinstance(value, TensorBase):
        raise TypeError(f"{function}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(value).__name__}")


def is_tensor(obj):
    """True if ``obj`` is a microtensor tensor (or Parameter)."""
    return isinstance(obj, TensorBase)


def is_floating_point(input):
    """True if ``input``'s dtype is a floating-point one."""
    _require_tensor("is_floating_point", input)
    return input.is_floating_point()


def numel(input):
    """The number of elements of ``input``."""
    _require_tensor("numel", input)
    return input.numel()
