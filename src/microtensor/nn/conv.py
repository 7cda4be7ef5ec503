"""Convolution layers: ``Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d``, with PyTorch's
attributes, parameter names and shapes, default initialisation and repr (a PyTorch
``state_dict`` loads unchanged)."""
import math

from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.modules import Module
from microtensor.nn.parameter import Parameter
from microtensor.ops.conv import expand_param

_PADDING_STRINGS = {"same", "valid"}
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


class _ConvNd(Module):
    """What every convolution layer shares: arguments, parameters, initialisation, repr."""

    _dims = None
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None, output_padding=0):
        super().__init__()
        from microtensor.ops.factory import empty
        dims = self._dims
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        stride = expand_param(stride, dims, "stride")
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{_PADDING_STRINGS}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = expand_param(padding, dims, "padding")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = expand_param(kernel_size, dims, "kernel_size")
        self.stride = stride
        self.padding = padding
        self.dilation = expand_param(dilation, dims, "dilation")
        self.transposed = self._transposed
        self.output_padding = expand_param(output_padding, dims, "output_padding")
        self.groups = groups
        self.padding_mode = padding_mode
        shape = (in_channels, out_channels // groups) if self.transposed else \
            (out_channels, in_channels // groups)
        self.weight = Parameter(empty(shape + self.kernel_size, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}"
        if self.padding != (0,) * len(self.padding):
            s += ", padding={padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**self.__dict__)


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)

    def _reversed_padding_repeated_twice(self):
        """``F.pad``'s pads for ``padding`` (last dim first), as PyTorch computes them."""
        if self.padding == "valid":
            return (0, 0) * self._dims
        if self.padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in totals]
        else:
            pairs = [(p, p) for p in self.padding]
        return tuple(p for pair in reversed(pairs) for p in pair)

    def forward(self, input):
        padding = self.padding
        if self.padding_mode != "zeros":   # padded here, so the convolution pads nothing
            input = F.pad(input, self._reversed_padding_repeated_twice(), self.padding_mode)
            padding = 0
        return self._function(input, self.weight, self.bias, self.stride, padding,
                              self.dilation, self.groups)


class Conv1d(_Conv):
    """A 1-d convolution layer: (N, C_in, L) -> (N, C_out, L_out)."""
    _dims = 1
    _function = staticmethod(F.conv1d)


class Conv2d(_Conv):
    """A 2-d convolution layer: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    _dims = 2
    _function = staticmethod(F.conv2d)


class Conv3d(_Conv):
    """A 3-d convolution layer: (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""
    _dims = 3
    _function = staticmethod(F.conv3d)


class _ConvTranspose(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{type(self).__name__}')
        if isinstance(padding, str):
            raise TypeError(f"{type(self).__name__}: padding must be an int or a tuple of "
                            f"ints, not {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def _output_padding(self, input, output_size):
        """The output padding that makes the result ``output_size`` (PyTorch's rule)."""
        if output_size is None:
            return self.output_padding
        dims = self._dims
        output_size = list(output_size)
        leading = 2 if input.dim() == dims + 2 else 1
        if len(output_size) == leading + dims:
            output_size = output_size[leading:]
        if len(output_size) != dims:
            raise ValueError(f"ConvTranspose{dims}D: for {input.dim()}D input, output_size "
                             f"must have {dims} or {leading + dims} elements (got "
                             f"{len(output_size)})")
        smallest = [(input.shape[leading + d] - 1) * self.stride[d] - 2 * self.padding[d]
                    + self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(dims)]
        largest = [low + s - 1 for low, s in zip(smallest, self.stride)]
        for size, low, high in zip(output_size, smallest, largest):
            if size < low or size > high:
                raise ValueError(f"requested an output size of {output_size}, but valid "
                                 f"sizes range from {smallest} to {largest} (for an input "
                                 f"of {input.shape[leading:]})")
        return tuple(size - low for size, low in zip(output_size, smallest))

    def forward(self, input, output_size=None):
        return self._function(input, self.weight, self.bias, self.stride, self.padding,
                              self._output_padding(input, output_size), self.groups,
                              self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """The transpose of ``Conv1d`` (a "deconvolution")."""
    _dims = 1
    _function = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    """The transpose of ``Conv2d`` (a "deconvolution")."""
    _dims = 2
    _function = staticmethod(F.conv_transpose2d)


class ConvTranspose3d(_ConvTranspose):
    """The transpose of ``Conv3d`` (a "deconvolution")."""
    _dims = 3
    _function = staticmethod(F.conv_transpose3d)


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d"]
