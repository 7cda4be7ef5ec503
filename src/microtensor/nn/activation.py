"""Activation modules: the module forms of ``nn.functional``'s activations, with
PyTorch's constructor arguments, parameters (``PReLU.weight``) and reprs.  ``ReLU``,
``Tanh``, ``Sigmoid``, ``Softmax`` and ``LogSoftmax`` are in ``nn.modules``."""
from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.modules import Module
from microtensor.nn.parameter import Parameter

__all__ = ["GELU", "SiLU", "Mish", "LeakyReLU", "ELU", "SELU", "CELU", "Softplus", "Hardtanh",
           "ReLU6", "Hardsigmoid", "Hardswish", "LogSigmoid", "Softsign", "Tanhshrink", "GLU",
           "PReLU", "Threshold"]
__all__ += ["Hardshrink", "Softshrink", "RReLU"]


def _inplace_suffix(inplace):
    return ", inplace=True" if inplace else ""


class _InplaceActivation(Module):
    """An activation whose only argument is ``inplace``."""
    _function = None

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._function(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class SiLU(_InplaceActivation):
    _function = F.silu


class Mish(_InplaceActivation):
    _function = F.mish


class SELU(_InplaceActivation):
    _function = F.selu


class Hardsigmoid(_InplaceActivation):
    _function = F.hardsigmoid

    def extra_repr(self):
        return ""     # PyTorch prints no arguments for it


class Hardswish(_InplaceActivation):
    _function = F.hardswish

    def extra_repr(self):
        return ""


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}{_inplace_suffix(self.inplace)}"


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_suffix(self.inplace)}"


class CELU(ELU):
    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if max_val <= min_val:
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val "
                                 f"({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_suffix(self.inplace)}"


class ReLU6(Hardtanh):
    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LogSigmoid(Module):
    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return F.tanhshrink(input)


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class PReLU(Module):
    """``weight``: ``num_parameters`` slopes (1, or one per channel), each ``init``."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(empty(num_parameters, dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return (f"threshold={self.threshold}, value={self.value}"
                f"{_inplace_suffix(self.inplace)}")


__all__ += ["Softmin", "Softmax2d"]


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a (N, C, H, W) or (C, H, W) input."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D "
                             f"instead")
        return F.softmax(input, -3)
class Hardshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input):
        return F.softshrink(input, self.lambd)


class RReLU(Module):
    """Random leaky ReLU: slopes drawn in training mode, their mean in evaluation mode."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{_inplace_suffix(self.inplace)}"
