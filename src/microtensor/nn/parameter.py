"""``Parameter``: a tensor that a ``Module`` registers as learnable (requires grad)."""
from microtensor._C.meta import preserve_format
from microtensor._C.tensor import register_parameter_class
from microtensor._tensor import Tensor, _rebuild_tensor


class Parameter(Tensor):
    """A leaf tensor that requires grad and is found by ``Module.parameters()``.

    It shares storage with the tensor it was made from.
    """

    def __new__(cls, data=None, requires_grad=True):
        from microtensor.ops.factory import empty
        if data is None:
            data = empty(0)
        return _rebuild_tensor(cls, data._storage, data._offset, data._sizes, data._strides,
                               data._dtype, bool(requires_grad))

    def __init__(self, data=None, requires_grad=True):
        pass

    def __deepcopy__(self, memo):
        """As PyTorch: a new Parameter over a clone of the data, with the same
        requires_grad (neither ``.grad`` nor attributes are copied)."""
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.detach().clone(memory_format=preserve_format),
                                        self._requires_grad)
        return memo[id(self)]

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


register_parameter_class(Parameter)
