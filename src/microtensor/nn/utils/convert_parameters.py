"""Parameters to one flat vector and back, as ``torch.nn.utils.convert_parameters``."""
from microtensor._C.tensor import TensorBase


def _check_same_device(params):
    """Yield ``params``, refusing (as PyTorch) a parameter on another device than the
    first."""
    first = None
    for p in params:
        if first is None:
            first = p.device
        elif p.device != first:
            raise TypeError("Found two parameters on different devices, this is currently not "
                            "supported.")
        yield p


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one new 1-D tensor."""
    import microtensor
    return microtensor.cat([p.view(-1) for p in _check_same_device(parameters)])


def vector_to_parameters(vec, parameters):
    """Make each parameter's data the next slice of ``vec`` (the parameters then share
    ``vec``'s memory, as in PyTorch)."""
    if not isinstance(vec, TensorBase):
        from microtensor.nn.modules import _typename
        raise TypeError(f"expected microtensor.Tensor, but got: {_typename(vec)}")
    pointer = 0
    for param in _check_same_device(parameters):
        count = param.numel()
        param.data = vec[pointer:pointer + count].view_as(param).data
        pointer += count


__all__ = ["parameters_to_vector", "vector_to_parameters"]
