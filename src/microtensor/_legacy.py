"""PyTorch's legacy typed constructors, one per dtype and named after its scalar type
(the dtype table's ``scalar_name``): ``FloatTensor``, ``DoubleTensor``, ``HalfTensor``,
``BFloat16Tensor``, ``LongTensor``, ``IntTensor``, ``ShortTensor``, ``CharTensor``,
``ByteTensor`` and ``BoolTensor``.

Each is a CPU tensor type of one dtype: calling it makes a CPU tensor of that dtype
(``LongTensor([1, 2])`` from data, ``FloatTensor(2, 3)`` uninitialized of those sizes), and
``isinstance(t, FloatTensor)`` is True for a float32 CPU tensor.  As in PyTorch they are
not subclasses of ``Tensor``: what they make is a plain ``Tensor``.
"""
import numbers

from microtensor import _dtype_table
from microtensor._C.tensor import DTYPES, Size, TensorBase, cpu, dtype
from microtensor.ops.factory import empty, tensor, to_device


class _LegacyTensorType(type):
    """The metaclass of the typed constructors: calls construct, isinstance checks dtype
    and device."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, TensorBase) and obj.dtype is cls.dtype and obj.device == cpu

    def __call__(cls, *args, device=None):
        if device is not None and to_device(device).type != "cpu":
            raise RuntimeError(f"legacy constructor expects device type: cpu but device "
                               f"type: {to_device(device).type} was passed")
        if not args:
            return empty(0, dtype=cls.dtype, device=cpu)
        if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
            return empty(*args, dtype=cls.dtype, device=cpu)
        if len(args) > 1:
            raise TypeError(f"new(): expected sizes (ints) or one sequence of data, but got "
                            f"{', '.join(type(a).__name__ for a in args)}")
        data, = args
        if isinstance(data, Size):
            return empty(data, dtype=cls.dtype, device=cpu)
        if isinstance(data, TensorBase):
            if data.dtype is not cls.dtype or data.device != cpu:
                raise TypeError(f"expected a CPU tensor of dtype {cls.dtype} (got one of "
                                f"dtype {data.dtype} on {data.device})")
            return data.view_as(data)   # an alias of ``data``, as PyTorch's
        if isinstance(data, (str, bytes)) or not hasattr(data, "__len__"):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return tensor(data, dtype=cls.dtype, device=cpu)


def _legacy_type(name, dt):
    return _LegacyTensorType(name, (), {"dtype": dt, "is_cuda": False,
                                        "__module__": "microtensor",
                                        "__doc__": f"A CPU tensor of dtype {dt.name}."})


TYPED_CONSTRUCTORS = {f"{info.scalar_name}Tensor": _legacy_type(f"{info.scalar_name}Tensor",
                                                                 DTYPES[info.name])
                      for info in _dtype_table.DTYPES}
globals().update(TYPED_CONSTRUCTORS)
_NAME_OF_DTYPE = {cls.dtype: name for name, cls in TYPED_CONSTRUCTORS.items()}


def type_name(t):
    """``t``'s legacy type name, PyTorch's ``Tensor.type()``: ``'microtensor.FloatTensor'``,
    ``'microtensor.cuda.LongTensor'``."""
    device = "cuda." if t.device.type == "cuda" else ""
    return f"microtensor.{device}{_NAME_OF_DTYPE[t.dtype]}"


def convert_to_type(t, type, non_blocking=False):
    """``t`` as ``type`` (a dtype, a typed constructor, or a legacy name whose prefix is
    ``microtensor.`` or ``torch.``): PyTorch's ``Tensor.type(type)``.  A dtype keeps the
    device; a name or constructor also says the device (``cuda.`` in the name, else CPU)."""
    if isinstance(type, dtype):
        return t.to(dtype=type, non_blocking=non_blocking)
    cls, on_cuda = legacy_type(type)
    return t.to(device="cuda" if on_cuda else cpu, dtype=cls.dtype, non_blocking=non_blocking)


def legacy_type(type):
    """``(typed constructor, on_cuda)`` for a typed constructor or a legacy name whose
    prefix is ``microtensor.`` or ``torch.`` (``cuda.`` in the name: on the GPU)."""
    if isinstance(type, _LegacyTensorType):
        return type, False
    if not isinstance(type, str):
        raise TypeError("dtype must be a type, str, or dtype object")
    prefix, _, rest = type.partition(".")
    on_cuda = rest.startswith("cuda.")
    cls = TYPED_CONSTRUCTORS.get(rest[5:] if on_cuda else rest)
    if prefix not in ("microtensor", "torch") or cls is None:
        raise ValueError(f"invalid type: '{type}'")
    return cls, on_cuda
