"""``Variable``, the pre-0.4 wrapper PyTorch merged into ``Tensor``: ``Variable(t)`` is a
tensor sharing ``t``'s data, detached, that requires grad when asked, and every tensor is an
instance of ``Variable``; ``variable(...)`` (the old factory) refuses, as PyTorch's."""
import warnings

from microtensor._tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(data=None, requires_grad=False, volatile=False)``: ``data.detach()``
    (an empty float tensor without ``data``), requiring grad if ``requires_grad``;
    ``volatile`` only warns (use ``no_grad``)."""

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if volatile:
            if requires_grad:
                raise ValueError("Variable can't be volatile and require_grad at the same "
                                 "time!")
            warnings.warn("volatile was removed and now has no effect. Use `with "
                          "torch.no_grad():` instead.", stacklevel=2)
        if data is None:
            from microtensor import tensor
            data = tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(data).__name__}")
        result = data.detach()
        if requires_grad:
            result.requires_grad_(True)
        return result


def variable(*args, **kwargs):
    raise RuntimeError("torch.autograd.variable(...) is deprecated, use torch.tensor(...) "
                       "instead")
