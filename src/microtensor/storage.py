"""PyTorch's storage classes: ``UntypedStorage`` and the deprecated ``TypedStorage``.

A tensor's storage is the core's ``Storage``: one object that the tensor and all its views
hold (``t.untyped_storage() is t[1:].untyped_storage()``), which PyTorch's
``UntypedStorage`` API reads as bytes (``size()`` and ``len`` in bytes, indexing a byte).
``UntypedStorage(...)`` builds one, and ``isinstance(s, UntypedStorage)`` holds for every
storage.  ``TypedStorage`` (``Tensor.storage()``) views a storage as elements of a dtype.
"""
import warnings

import numpy as np

from microtensor._C.tensor import Storage, device as _device, dtype_from_numpy, get_default_dtype
from microtensor._tensor import Tensor, _rebuild_tensor

__all__ = ["UntypedStorage", "TypedStorage"]

_TYPED_STORAGE_WARNING = (
    "TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be "
    "the only storage class. This should only matter to you if you are using storages "
    "directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead of "
    "tensor.storage()")
_warned = False


def _warn_typed_storage_removal(stacklevel=3):
    """PyTorch's deprecation warning, once per process as PyTorch gives it."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(_TYPED_STORAGE_WARNING, UserWarning, stacklevel=stacklevel)


def _on_device(data, device):
    """The core storage of the byte array ``data``, moved to ``device``."""
    storage = Storage(data)
    if device is None or _device(device).type == "cpu":
        return storage
    return _rebuild_tensor(Tensor, storage, 0, (data.shape[0],), (1,),
                           dtype_from_numpy(data.dtype), False).to(device).untyped_storage()


class _StorageType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Storage)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, Storage)


class UntypedStorage(metaclass=_StorageType):
    """``UntypedStorage(size)``: ``size`` bytes (zeroed); ``UntypedStorage(sequence)``:
    those byte values; ``UntypedStorage()``: empty.  Every tensor's storage is one."""

    def __new__(cls, *args, device=None):
        if len(args) > 1:
            raise TypeError(f"UntypedStorage(): expected at most 1 argument, got {len(args)}")
        source = args[0] if args else 0
        if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
            if source < 0:
                raise RuntimeError(f"Storage size must be non-negative, got {source}")
            data = np.zeros(int(source), np.uint8)
        else:
            values = list(source)
            if any(not isinstance(v, (int, np.integer)) or not 0 <= v < 256 for v in values):
                raise TypeError("UntypedStorage(sequence): the elements must be integers in "
                                "[0, 255] (bytes)")
            data = np.array(values, np.uint8)
        return _on_device(data, device)


class TypedStorage:
    """A storage seen as elements of ``dtype`` (PyTorch's deprecated typed storage; it
    warns once): ``TypedStorage(size, dtype=)``, ``TypedStorage(sequence, dtype=)`` or
    ``TypedStorage(wrap_storage=untyped, dtype=)``.  Indexing reads and writes elements,
    ``size()`` and ``len`` count them."""

    is_sparse = False

    def __init__(self, *args, device=None, dtype=None, wrap_storage=None, _internal=False):
        if not _internal:
            _warn_typed_storage_removal()
        self.dtype = get_default_dtype() if dtype is None else dtype
        if wrap_storage is not None:
            if args:
                raise RuntimeError("TypedStorage(): No positional arguments should be given "
                                   "when using `wrap_storage`")
            if not isinstance(wrap_storage, Storage):
                raise TypeError(f"expected a UntypedStorage for argument 'wrap_storage', but "
                                f"got {type(wrap_storage).__name__}")
            self._untyped_storage = wrap_storage
            return
        if len(args) > 1:
            raise TypeError(f"TypedStorage(): expected at most 1 argument, got {len(args)}")
        source = args[0] if args else 0
        if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
            storage = UntypedStorage(int(source) * self.dtype.itemsize, device=device)
        else:
            from microtensor.ops.factory import tensor
            storage = tensor(list(source), dtype=self.dtype, device=device).untyped_storage()
        self._untyped_storage = storage

    @property
    def device(self):
        return self._untyped_storage.device

    def untyped(self):
        return self._untyped_storage

    def _tensor(self):
        """A 1-D tensor over all of the storage's elements."""
        return _rebuild_tensor(Tensor, self._untyped_storage, 0, (self.size(),), (1,),
                               self.dtype, False)

    def size(self):
        return self._untyped_storage.nbytes() // self.dtype.itemsize

    def __len__(self):
        return self.size()

    def element_size(self):
        return self.dtype.itemsize

    def nbytes(self):
        return self._untyped_storage.nbytes()

    def data_ptr(self):
        return self._untyped_storage.data_ptr()

    def _index(self, idx):
        if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
            if isinstance(idx, slice):
                raise RuntimeError("slices are only supported in UntypedStorage.__getitem__")
            raise TypeError(f"can't index a TypedStorage with {type(idx).__name__}")
        n = self.size()
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        return int(idx) % n

    def __getitem__(self, idx):
        return self._tensor()[self._index(idx)].item()

    def __setitem__(self, idx, value):
        self._tensor()[self._index(idx)] = value

    def tolist(self):
        return self._tensor().tolist()

    def fill_(self, value):
        self._tensor().fill_(value)
        return self

    def __iter__(self):
        return iter(self.tolist())

    def __repr__(self):
        return (f"[microtensor.storage.TypedStorage(dtype={self.dtype}, device="
                f"{self.device}) of size {self.size()}]")


def storage(self):
    """The tensor's storage as a ``TypedStorage`` of its dtype (deprecated in PyTorch,
    which warns once)."""
    _warn_typed_storage_removal()
    return TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype, _internal=True)


def install(tensor_class):
    tensor_class.storage = storage
