"""``microtensor.Tensor``: the class users hold.

The metadata and the fast paths live in the Cython base ``TensorBase``.  This class adds
what reads best in Python: conversions (``numpy``, ``item``, ``tolist``), printing,
Python protocol methods, autograd conveniences, and — attached at import by
``install_methods`` — one method per op declared in ``microtensor.ops``.
"""
import copy
import copyreg
import numbers

import numpy as np

from microtensor._C import meta
from microtensor._C.meta import contiguous_format
from microtensor._C.tensor import (Storage, TensorBase, bfloat16, bool_, complex64, complex128,
                                   float16, float32, float64, int8, int16, int32, int64,
                                   share_tensor_free, uint8)
from microtensor._C.dispatch import op_function, op_method
from microtensor.ops.dispatch import call_by_name
from microtensor.ops.loops import scalar_tensor_like


def _refuse_if_requires_grad(tensor):
    if tensor.requires_grad:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                           "tensor.detach().numpy() instead.")


class Tensor(TensorBase):
    """A strided view of a storage, with autograd metadata.  See ``TensorBase``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        share_tensor_free(cls)   # so that ``__class__`` may move tensors to and from it

    # ------------------------------------------------------------ layout queries
    def is_contiguous(self, memory_format=contiguous_format):
        if memory_format is contiguous_format:
            return self._is_contig
        return meta.is_contiguous(self._sizes, self._strides, memory_format)

    def is_non_overlapping_and_dense(self):
        return meta.is_non_overlapping_and_dense(self._sizes, self._strides)

    # ------------------------------------------------------------ conversions
    def numpy(self, *, force=False):
        if self.device.type != "cpu":
            where = "meta" if self.is_meta else f"{self.device.type}:{self.device.index or 0}"
            raise TypeError(f"can't convert {where} device "
                            "type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
                            "memory first.")
        if not force:
            _refuse_if_requires_grad(self)
        return self._array()

    def __array__(self, dtype=None, copy=None):
        # an array over the memory of a tensor that requires grad would let NumPy write
        # behind autograd's back (no version bump): refused as PyTorch does
        _refuse_if_requires_grad(self)
        arr = self.cpu()._array()
        return arr if dtype is None else arr.astype(dtype)

    def item(self):
        if self._numel != 1:
            raise RuntimeError(f"a Tensor with {self._numel} elements cannot be converted to "
                               "Scalar")
        if self.is_meta:
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        return self.detach().cpu()._array().reshape(()).item()

    def tolist(self):
        return self.detach().cpu()._array().tolist()

    def __float__(self):
        return float(self._scalar_for_python())

    def __int__(self):
        return int(self._scalar_for_python())

    def __complex__(self):
        return complex(self._scalar_for_python())

    def _scalar_for_python(self):
        if self._numel != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

    def __bool__(self):
        if self._numel != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self._dtype.kind >= 2 or self._numel != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    def __len__(self):
        if not self._sizes:
            raise TypeError("len() of a 0-d tensor")
        return self._sizes[0]

    def __iter__(self):
        if not self._sizes:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self):
        return id(self)

    # ------------------------------------------------------------ pickle and copy
    def __reduce_ex__(self, protocol):
        """Pickle (and ``copy.copy``) as PyTorch: the storage object (so pickled once however
        many views of it are pickled together), sizes, strides, offset, dtype,
        requires_grad, the class and its attributes; not the history, nor ``.grad``."""
        return (_rebuild_tensor, (type(self), self._storage, self._offset, self._sizes,
                                  self._strides, self._dtype, self.requires_grad),
                self.__getstate__())

    # PyTorch's class default; a leaf's own dict of hooks replaces it when one is registered
    _post_accumulate_grad_hooks = None

    def __getstate__(self):
        """The attributes, as ``object.__getstate__``, without post-accumulate-grad hooks
        (a copy, like PyTorch's, carries no hooks)."""
        state = super().__getstate__()
        attrs = state[0] if isinstance(state, tuple) else state
        if not attrs or "_post_accumulate_grad_hooks" not in attrs:
            return state
        attrs = {k: v for k, v in attrs.items() if k != "_post_accumulate_grad_hooks"}
        return (attrs or None, state[1]) if isinstance(state, tuple) else (attrs or None)

    def __setstate__(self, state):
        _set_state(self, state)

    def __deepcopy__(self, memo):
        """``copy.deepcopy`` as PyTorch: graph leaves only; each storage is copied once per
        ``memo`` (views copied together stay views of one new storage), then requires_grad,
        ``.grad`` and the attributes."""
        if self._grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment.")
        if id(self) in memo:
            return memo[id(self)]
        new = memo[id(self)] = _rebuild_tensor(
            type(self), copy.deepcopy(self._storage, memo), self._offset, self._sizes,
            self._strides, self._dtype, self.requires_grad)
        if self._grad is not None:
            new.grad = copy.deepcopy(self._grad, memo)
        state = self.__getstate__()
        if state is not None:
            _set_state(new, copy.deepcopy(state, memo))
        return new

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use "
                               "tensor.detach()")
        if self.is_cuda:
            from microtensor.backends import cuda
            return cuda.dlpack_export(self._array(), stream, max_version, dl_device, copy)
        return self._array().__dlpack__(stream=stream, max_version=max_version,
                                        dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self.detach()._array().__dlpack_device__()

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def cfloat(self):
        return self.to(complex64)

    def cdouble(self):
        return self.to(complex128)

    def long(self):
        return self.to(int64)

    def int(self):
        return self.to(int32)

    def bool(self):
        return self.to(bool_)

    def half(self):
        return self.to(float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def byte(self):
        return self.to(uint8)

    def char(self):
        return self.to(int8)

    def short(self):
        return self.to(int16)

    def type(self, dtype=None, non_blocking=False):
        from microtensor import _legacy
        if dtype is None:
            return _legacy.type_name(self)
        return _legacy.convert_to_type(self, dtype, non_blocking)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to(device if device is not None else "cuda")

    # ------------------------------------------------------------ printing
    def __repr__(self):
        from microtensor._printing import tensor_repr
        return tensor_repr(self)

    def __format__(self, spec):
        if self.dim() == 0:
            return self.item().__format__(spec)
        return repr(self)

    # ------------------------------------------------------------ properties
    @property
    def T(self):
        return self.permute(tuple(range(self.dim() - 1, -1, -1)))

    @property
    def mT(self):
        if self.dim() < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                               f"Got {self.dim()}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def data(self):
        return self.detach()

    @data.setter
    def data(self, value):
        self._set_storage(value._storage, value._sizes, value._strides, value._offset,
                          value._dtype)

    # ------------------------------------------------------------ Python operators
    def __neg__(self):
        return call_by_name("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return call_by_name("abs", self)

    def __invert__(self):
        if self._dtype.is_floating_point:
            raise TypeError("~ (operator.invert) is only implemented on integer and "
                            "Boolean-type tensors")
        if self._dtype is bool_:
            return call_by_name("logical_not", self)
        return call_by_name("bitwise_not", self)

    def __pow__(self, exponent):
        return call_by_name("pow", self, exponent)

    def __rpow__(self, base):
        if type(base) in (int, float, bool):   # a number base, as in ``pow(2.0, t)``
            return call_by_name("pow", base, self)
        return call_by_name("pow", scalar_tensor_like(base, self), self)

    def __floordiv__(self, other):
        return call_by_name("div", self, other, rounding_mode="floor")

    def __rfloordiv__(self, other):
        return call_by_name("div", scalar_tensor_like(other, self), self, rounding_mode="floor")

    def __mod__(self, other):
        return call_by_name("remainder", self, other)

    def __rmod__(self, other):
        return call_by_name("remainder", scalar_tensor_like(other, self), self)

    # bitwise even for bools: bool & bool is bool, bool & int promotes to int as in PyTorch
    def __and__(self, other):
        return call_by_name("bitwise_and", self, other)

    def __or__(self, other):
        return call_by_name("bitwise_or", self, other)

    def __xor__(self, other):
        return call_by_name("bitwise_xor", self, other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __lshift__(self, other):
        return call_by_name("bitwise_left_shift", self, other)

    def __rshift__(self, other):
        return call_by_name("bitwise_right_shift", self, other)

    def __rlshift__(self, other):
        return call_by_name("bitwise_left_shift", scalar_tensor_like(other, self), self)

    def __rrshift__(self, other):
        return call_by_name("bitwise_right_shift", scalar_tensor_like(other, self), self)

    def __eq__(self, other):
        return call_by_name("eq", self, other)

    def __ne__(self, other):
        return call_by_name("ne", self, other)

    def __lt__(self, other):
        return call_by_name("lt", self, other)

    def __le__(self, other):
        return call_by_name("le", self, other)

    def __gt__(self, other):
        return call_by_name("gt", self, other)

    def __ge__(self, other):
        return call_by_name("ge", self, other)

    def __iadd__(self, other):
        return call_by_name("add_", self, other)

    def __isub__(self, other):
        return call_by_name("sub_", self, other)

    def __imul__(self, other):
        return call_by_name("mul_", self, other)

    def __itruediv__(self, other):
        return call_by_name("div_", self, other)

    def __ipow__(self, other):
        return call_by_name("pow_", self, other)

    def __ifloordiv__(self, other):
        return call_by_name("div_", self, other, rounding_mode="floor")

    def __imod__(self, other):
        return call_by_name("remainder_", self, other)

    def __iand__(self, other):
        return call_by_name("bitwise_and_", self, other)

    def __ior__(self, other):
        return call_by_name("bitwise_or_", self, other)

    def __ixor__(self, other):
        return call_by_name("bitwise_xor_", self, other)

    def __ilshift__(self, other):
        return call_by_name("bitwise_left_shift_", self, other)

    def __irshift__(self, other):
        return call_by_name("bitwise_right_shift_", self, other)

    def polygamma(self, n):
        return call_by_name("polygamma", n, self)   # the function takes ``n`` first

    def where(self, condition, other):
        """``self`` where ``condition`` holds, else ``other`` (``mt.where(condition, self,
        other)``, whose argument order differs)."""
        return call_by_name("where", condition, self, other)

    def __setitem__(self, index, value):
        from microtensor.ops.indexing import setitem
        setitem(self, index, value)


def _rebuild_tensor(cls, storage, offset, sizes, strides, dtype, requires_grad):
    """A leaf ``cls`` tensor over ``storage`` (its geometry bounds-checked against it)."""
    t = TensorBase.__new__(cls)
    t._dtype = dtype
    t._set_storage(storage, sizes, strides, offset)
    if requires_grad:
        t.requires_grad_()   # refuses integer dtypes, as PyTorch
    return t


def _set_state(t, state):
    """Restore what ``object.__getstate__`` returned: the ``__dict__``, or ``(__dict__,
    slots)`` for a subclass with ``__slots__``."""
    attrs, slots = state if isinstance(state, tuple) else (state, None)
    for name, value in list((attrs or {}).items()) + list((slots or {}).items()):
        setattr(t, name, value)


def _reduce_storage(storage):
    return Storage, (storage.data, storage.device)


# a storage pickles and deep-copies as its elements and device: a fresh version counter
copyreg.pickle(Storage, _reduce_storage)


def legacy_new(args, kwargs, dtype=None):
    """PyTorch's legacy constructor, what ``Tensor(...)`` builds: with no argument an empty
    1-D tensor; from sizes (ints or one ``Size``) an uninitialized tensor; from a tensor an
    alias of it (for ``Tensor.new``, of its dtype only); from a sequence or array a copy of its data.  New tensors
    take ``dtype`` (``Tensor.new``: the tensor's), else the default dtype, and live on the
    CPU."""
    from microtensor._C.tensor import Size, device, get_default_dtype
    from microtensor.ops.factory import empty, tensor
    kwargs = dict(kwargs)
    dev = kwargs.pop("device", None)
    if kwargs:
        raise TypeError(f"new() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if dev is not None and device(dev).type != "cpu":
        raise RuntimeError(f"legacy constructor expects device type: cpu but device type: "
                           f"{device(dev).type} was passed")
    dt = dtype or get_default_dtype()
    if len(args) == 1:
        data = args[0]
        if isinstance(data, TensorBase):
            if dtype is not None and data._dtype is not dtype:
                raise TypeError(f"expected {dtype} (got {data._dtype})")
            return data.alias()
        if isinstance(data, Size):
            return empty(data, dtype=dt)
        if isinstance(data, (list, tuple, np.ndarray)):
            return tensor(data, dtype=dt)
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        return empty(args or (0,), dtype=dt)
    if len(args) == 1:
        raise TypeError(f"new(): data must be a sequence (got {type(args[0]).__name__})")
    raise TypeError(f"new() received an invalid combination of arguments - got "
                    f"({', '.join(type(a).__name__ for a in args)}), but expected one of: "
                    f"(*, device), (Tensor other), (tuple of ints size, *, device), "
                    f"(object data, *, device)")


def _method(op):
    return _named(op_method(op), op, "Tensor." + op.name)


def _function(op):
    return _named(op_function(op), op, op.name)


def _named(fn, op, qualname):
    fn.__name__ = op.name
    fn.__qualname__ = qualname
    fn.__doc__ = op.kernel.__doc__
    return fn


def install_methods(registry, namespace):
    """Make every declared op a ``Tensor`` method and/or a ``microtensor.<name>`` function."""
    for name, op in registry.items():
        if op.method and name not in Tensor.__dict__ and not hasattr(TensorBase, name):
            setattr(Tensor, name, _method(op))
        if op.function and not name.startswith("_"):
            namespace.setdefault(name, _function(op))
