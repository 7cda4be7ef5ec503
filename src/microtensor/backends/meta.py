"""The meta backend: storages that record a size and an element type but hold no data.

A meta tensor has sizes, strides, a storage offset, a dtype and autograd flags, so every
view and metadata op works on it; anything that would read or write its elements raises,
as PyTorch's ``meta`` device does.  ``Storage.data`` is a ``NoData`` here: it answers the
questions the core asks a buffer (``shape``, ``nbytes``, ``dtype``) and nothing else.
"""
import numpy as np

from microtensor._C.dispatch import set_shape_only
from microtensor._C.tensor import (NoDataError, Storage, TensorBase, cpu, device,
                                   empty_strided_unchecked, wrap_storage)

NO_DATA_MESSAGE = "Cannot copy out of meta tensor; no data!"
META = device("meta")
# ops whose result size depends on the values: stand-ins would give a meaningless size
_DYNAMIC_SHAPE = frozenset({"nonzero", "unique", "masked_select"})


class NoData:
    """The buffer of a meta storage: ``n`` elements of ``np_dtype``, none of them stored."""

    __slots__ = ("shape", "dtype")

    def __init__(self, n, np_dtype):
        self.shape = (n,)
        self.dtype = np.dtype(np_dtype)

    @property
    def nbytes(self):
        return self.shape[0] * self.dtype.itemsize

    def __reduce__(self):
        return NoData, (self.shape[0], self.dtype)


def empty_buffer(n, np_dtype):
    return NoData(n, np_dtype)


def array_view(t):
    """No array exists over a meta tensor's elements: every kernel that needs one stops here."""
    raise NoDataError(NO_DATA_MESSAGE)


def copy_(dst, src):
    """``dst.copy_(src)`` when either is a meta tensor: into meta, nothing is written (as
    PyTorch, only the shapes are checked, by the caller); out of meta, there is no data."""
    if src.device.type == "meta" and dst.device.type != "meta":
        raise NotImplementedError(NO_DATA_MESSAGE)


def run_shape_only(op, args, kwargs):
    """``op``'s result when its kernel reached a meta tensor: the kernel runs on CPU stand-ins
    that hold one value per input (every element reads the same 1, through stride 0), so
    only the result's sizes, strides and dtype are kept, on meta.  An in-place op's target
    stands in densely (a write needs distinct elements) and is returned itself."""
    if op.name == "repeat_interleave" and _has_meta(args[1:]):
        raise RuntimeError("cannot repeat_interleave a meta tensor without output_size")
    if op.name in _DYNAMIC_SHAPE:
        raise NotImplementedError(f"aten::{op.name}: attempted to run this operator with Meta "
                                  "tensors, but the size of its result depends on their "
                                  "values, which meta tensors do not have")
    inplace = op.kind == "inplace"
    stand_ins = tuple(_stand_in(x, dense=inplace and i == 0) for i, x in enumerate(args))
    kw = {k: _stand_in(v) for k, v in kwargs.items()} if kwargs else {}
    result = op.kernel(*stand_ins, **kw)
    if inplace:
        return args[0]
    return _on_meta(op, result)


def _has_meta(values):
    return any(isinstance(v, TensorBase) and v.is_meta for v in values)


def _stand_in(x, dense=False):
    if isinstance(x, (list, tuple)):
        return type(x)(_stand_in(v) for v in x)
    if not isinstance(x, TensorBase) or not x.is_meta:
        return x
    if dense:
        return empty_strided_unchecked(x._sizes, x._strides, x._dtype, cpu).fill_(1)
    one = Storage(np.ones(1, x._dtype.np), cpu)
    return wrap_storage(one, x._sizes, (0,) * len(x._sizes), 0, x._dtype)


def _on_meta(op, result):
    if isinstance(result, (list, tuple)):
        return type(result)(_on_meta(op, r) for r in result)
    if not isinstance(result, TensorBase):
        raise NotImplementedError(f"{op.name}: its result depends on the values of a meta "
                                  "tensor, which has none")
    return empty_strided_unchecked(result._sizes, result._strides, result._dtype, META)


set_shape_only(run_shape_only)
