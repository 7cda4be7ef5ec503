"""``Parameter``: a tensor that a ``Module`` registers as learnable (requires grad); and
the lazy modules' ``UninitializedParameter`` / ``UninitializedBuffer``, tensors whose
shape is not known yet."""
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


# --------------------------------------------------------------------------- lazy parameters

# What an uninitialized tensor still answers, as PyTorch's list: its size (0 elements),
# dtype and device conversions, and copy_ (a lazy state loaded into a lazy module)
_UNINITIALIZED_ALLOWED = frozenset({"size", "copy_", "is_complex", "is_floating_point",
                                    "half", "float", "double", "char", "short", "int",
                                    "long", "cuda", "cpu", "to", "get_device", "materialize",
                                    "share_memory_"})
# Python's operators look their method up on the type, past ``__getattribute__``
_UNINITIALIZED_OPERATORS = (
    "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__",
    "__rmul__", "__imul__", "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__",
    "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__",
    "__rmatmul__", "__neg__", "__pos__", "__abs__", "__invert__", "__and__", "__or__",
    "__xor__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__getitem__",
    "__setitem__", "__len__", "__iter__", "__bool__", "__float__", "__int__", "__index__",
    "__array__")


def _refuse_uninitialized(cls, what):
    raise ValueError(f"Attempted to use an uninitialized parameter in {what}. This error "
                     "happens when you are using a `LazyModule` or explicitly manipulating "
                     f"`microtensor.nn.parameter.{cls.__name__}` objects. When using "
                     "LazyModules Call `forward` with a dummy batch to initialize the "
                     "parameters before calling microtensor functions")


class UninitializedTensorMixin:
    """A tensor whose shape is not known yet: it holds no elements, refuses (as PyTorch's)
    every method but dtype and device conversions, and ``materialize(shape)`` turns it, in
    place, into a ``cls_to_become`` of that shape (the same object, so an optimizer or a
    module holding it sees the result)."""

    cls_to_become = None

    def __getattribute__(self, name):
        if name[0] != "_" and name not in _UNINITIALIZED_ALLOWED:
            found = getattr(type(self), name, None)
            # a method refuses when called, as PyTorch's; properties (dtype, requires_grad,
            # grad ...) answer
            if callable(found) and not isinstance(found, type):
                cls = type(self)

                def refuse(*args, **kwargs):
                    _refuse_uninitialized(cls, found)
                return refuse
        return super().__getattribute__(name)

    def materialize(self, shape, device=None, dtype=None):
        """Become a ``cls_to_become`` of ``shape`` (uninitialized memory), on this tensor's
        device and dtype unless given."""
        from microtensor.ops.factory import empty
        current = self.data
        self.data = empty(shape, device=current.device if device is None else device,
                          dtype=current.dtype if dtype is None else dtype)
        self.__class__ = self.cls_to_become

    @property
    def data(self):
        # Tensor's own calls ``self.detach()``, which is refused here
        return Tensor.detach(self)

    @data.setter
    def data(self, value):
        Tensor.data.fset(self, value)

    @property
    def shape(self):
        raise RuntimeError("Can't access the shape of an uninitialized parameter or buffer. "
                           "This error usually happens in `load_state_dict` when trying to "
                           "load an uninitialized parameter into an initialized one. Call "
                           "`forward` to initialize the parameters before accessing their "
                           "attributes.")

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call "
                           "`forward` to initialize the parameters before calling "
                           "`module.share_memory()`.")

    def __repr__(self):
        return f"<{type(self).__name__}>"

    def __reduce_ex__(self, protocol):
        return type(self), (self.requires_grad,)


def _operator_refusal(name):
    def refuse(self, *args, **kwargs):
        _refuse_uninitialized(type(self), getattr(Tensor, name))
    refuse.__name__ = name
    return refuse


for _name in _UNINITIALIZED_OPERATORS:
    setattr(UninitializedTensorMixin, _name, _operator_refusal(_name))
UninitializedTensorMixin.__hash__ = Tensor.__hash__     # a class with __eq__ needs one


def is_lazy(param):
    """Whether ``param`` is an ``UninitializedParameter`` or ``UninitializedBuffer``."""
    return isinstance(param, UninitializedTensorMixin)


def _uninitialized(cls, requires_grad, device, dtype):
    """An empty ``cls``: built as the class it becomes (which checks ``requires_grad``
    through methods an uninitialized tensor refuses), then moved to ``cls``."""
    from microtensor.ops.factory import empty
    data = empty(0, device=device, dtype=dtype)
    tensor = _rebuild_tensor(cls.cls_to_become, data._storage, data._offset, data._sizes,
                             data._strides, data._dtype, bool(requires_grad))
    tensor.__class__ = cls
    return tensor


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A ``Parameter`` whose shape is not known yet (a lazy module's, until its first
    forward); ``device`` and ``dtype`` are those it will be materialized with."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return _uninitialized(cls, requires_grad, device, dtype)

    def __init__(self, requires_grad=True, device=None, dtype=None):
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            data = self.data
            memo[id(self)] = type(self)(self.requires_grad, data.device, data.dtype)
        return memo[id(self)]


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape is not known yet (a lazy norm layer's running statistics)."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        buffer = _uninitialized(cls, requires_grad, device, dtype)
        buffer.persistent = persistent
        return buffer

    def __init__(self, requires_grad=False, device=None, dtype=None, persistent=True):
        pass


# --------------------------------------------------------------------------- Buffer

class _BufferMeta(type):
    """``isinstance(t, Buffer)`` holds for the tensors ``Buffer(...)`` returns (plain
    tensors marked as buffers), as PyTorch's."""

    def __instancecheck__(cls, instance):
        return is_buffer(instance)


def is_buffer(value):
    """Whether ``value`` is a tensor marked by ``Buffer``."""
    return isinstance(value, Tensor) and getattr(value, "_is_buffer", False)


class Buffer(metaclass=_BufferMeta):
    """A tensor that, assigned as a module attribute, registers as a buffer
    (``persistent``: saved in ``state_dict``).  ``Buffer(t)`` is ``t`` detached (keeping
    ``requires_grad``), marked.  Unlike PyTorch's, the class is not a ``Tensor``
    subclass (no tensor is ever of this class: ``isinstance`` answers by the mark)."""

    def __new__(cls, data=None, *, persistent=True):
        from microtensor.ops.factory import empty
        if data is None:
            data = empty(0)
        buffer = data.detach().requires_grad_(data.requires_grad)
        buffer.persistent = persistent
        buffer._is_buffer = True
        return buffer
