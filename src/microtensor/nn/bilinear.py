"""``nn.Bilinear``: ``y = x1ᵀ A x2 + b`` per output feature, PyTorch's parameters and
initialisation."""
import math

from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.modules import Module
from microtensor.nn.parameter import Parameter

__all__ = ["Bilinear"]


class Bilinear(Module):
    """``weight`` (out_features, in1_features, in2_features) and ``bias`` (out_features),
    both drawn from U(-1/sqrt(in1_features), 1/sqrt(in1_features))."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, dtype=dtype,
                                      device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.size(1))
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
