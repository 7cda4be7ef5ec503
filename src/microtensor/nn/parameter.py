"""``Parameter``: a tensor that a ``Module`` registers as learnable (requires grad)."""
from microtensor._C.tensor import register_parameter_class
from microtensor._tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that requires grad and is found by ``Module.parameters()``.

    It shares storage with the tensor it was made from.
    """

    def __new__(cls, data=None, requires_grad=True):
        from microtensor.ops.factory import empty
        if data is None:
            data = empty(0)
        data = data.detach()
        param = Tensor.__new__(cls)
        param._dtype = data._dtype
        param._set_storage(data._storage, data._sizes, data._strides, data._offset)
        param._requires_grad = bool(requires_grad)
        return param

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


register_parameter_class(Parameter)
