"""Converting convolution weights to a memory format (``channels_last``...), as
``torch.nn.utils.memory_format``: the weights of every (transposed) 2-D or 3-D
convolution in a module tree take the format's strides, values unchanged."""

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format"]


def _convert(module, memory_format, classes):
    if isinstance(module, classes):
        module.weight.data = module.weight.detach().clone(memory_format=memory_format)
    for child in module.children():
        _convert(child, memory_format, classes)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Give the weight of every ``Conv2d`` and ``ConvTranspose2d`` in ``module`` (itself
    included) ``memory_format``; returns ``module``."""
    from microtensor.nn.conv import Conv2d, ConvTranspose2d
    return _convert(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module, memory_format):
    """Give the weight of every ``Conv3d`` and ``ConvTranspose3d`` in ``module`` (itself
    included) ``memory_format``; returns ``module``."""
    from microtensor.nn.conv import Conv3d, ConvTranspose3d
    return _convert(module, memory_format, (Conv3d, ConvTranspose3d))
