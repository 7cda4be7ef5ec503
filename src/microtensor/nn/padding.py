"""Padding modules over ``F.pad``: ``ZeroPad``, ``ConstantPad``, ``ReflectionPad``,
``ReplicationPad`` and ``CircularPad``, each 1d/2d/3d, with PyTorch's arguments (an int
for every side or a tuple), checks and reprs."""
from collections.abc import Iterable

from microtensor.nn import functional as F
from microtensor.nn.modules import Module

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
           "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d",
           "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
           "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"]


def _sides(padding, count):
    """PyTorch's ``_ntuple``: an iterable as a tuple (unchecked), a number repeated."""
    return tuple(padding) if isinstance(padding, Iterable) else (padding,) * count


class _PadNd(Module):
    """``F.pad(input, padding, mode)`` over the last ``dims`` dims (2 * dims sides)."""
    mode = None
    dims = None

    def __init__(self, padding):
        super().__init__()
        self.padding = _sides(padding, 2 * self.dims)

    def forward(self, input):
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self):
        return f"{self.padding}"


class _CircularPadNd(_PadNd):
    mode = "circular"

    def forward(self, input):
        # PyTorch checks the rank here, before F.pad's own checks
        if input.dim() not in (self.dims + 1, self.dims + 2):
            raise ValueError(f"expected {self.dims + 1}D or {self.dims + 2}D input (got "
                             f"{input.dim()}D input)")
        return super().forward(input)


class _ReflectionPadNd(_PadNd):
    mode = "reflect"


class _ReplicationPadNd(_PadNd):
    mode = "replicate"


class _ConstantPadNd(_PadNd):
    mode = "constant"

    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class CircularPad1d(_CircularPadNd):
    dims = 1


class CircularPad2d(_CircularPadNd):
    dims = 2


class CircularPad3d(_CircularPadNd):
    dims = 3


class ReflectionPad1d(_ReflectionPadNd):
    dims = 1


class ReflectionPad2d(_ReflectionPadNd):
    dims = 2


class ReflectionPad3d(_ReflectionPadNd):
    dims = 3


class ReplicationPad1d(_ReplicationPadNd):
    dims = 1


class ReplicationPad2d(_ReplicationPadNd):
    dims = 2


class ReplicationPad3d(_ReplicationPadNd):
    dims = 3


class ConstantPad1d(_ConstantPadNd):
    dims = 1


class ConstantPad2d(_ConstantPadNd):
    dims = 2


class ConstantPad3d(_ConstantPadNd):
    dims = 3


class _ZeroPad:
    """``ConstantPad`` with value 0.0 (a subclass of it, as in PyTorch), printed with the
    padding alone."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad, ConstantPad1d):
    pass


class ZeroPad2d(_ZeroPad, ConstantPad2d):
    pass


class ZeroPad3d(_ZeroPad, ConstantPad3d):
    pass
