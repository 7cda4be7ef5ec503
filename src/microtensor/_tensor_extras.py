"""Tensor methods and attributes of PyTorch that are no op of the registry: the layout and
backend flags (a dense strided CPU tensor's answers), ``mH``/``H``, ``dim_order``, the
legacy constructor ``new``, storage changes (``resize_``, ``resize_as_``, ``set_``,
``share_memory_``) and the per-element Python callables ``apply_``/``map_``/``map2_``.

Storage changes keep PyTorch's model: a storage that grows or moves into shared memory
stays the one object all its tensors hold (``Storage._replace_data``), so views see it;
they refuse tensors that require grad as PyTorch does, and bump the version counter.
"""
import mmap
import numbers
import warnings

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import Storage, TensorBase, is_grad_enabled
from microtensor.ops.arguments import size_arg
from microtensor.storage import TypedStorage


class layout:
    """A tensor's memory layout; microtensor's tensors are all ``strided``."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"microtensor.{self._name}"

    def __reduce__(self):
        return self._name   # pickles as the module attribute


strided = layout("strided")

# PyTorch's flags of other layouts and backends: False for a dense strided tensor here
FALSE_FLAGS = ("is_sparse", "is_sparse_csr", "is_quantized", "is_nested", "is_mkldnn",
               "is_xpu", "is_mps", "is_vulkan", "is_ipu", "is_maia", "is_mtia", "is_xla")


def _false(self):
    return False


def mH(self):
    if self.dim() < 2:
        raise RuntimeError(f"tensor.mH is only supported on matrices or batches of matrices. "
                           f"Got {self.dim()}-D tensor.")
    return self.adjoint()


def H(self):
    if self.dim() == 0:
        warnings.warn("Tensor.H is deprecated on 0-D tensors. Consider using x.conj().",
                      UserWarning, stacklevel=2)
        return self
    if self.dim() != 2:
        hint = ". For batches of matrices, consider using tensor.mH" if self.dim() > 2 else "."
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.dim()}-D tensor{hint}")
    return self.adjoint()


def _stride_order(sizes, strides, a, b):
    """PyTorch's comparison of dims ``a`` and ``b`` for the physical order: -1 when ``a``
    is outer, 1 when inner, 0 when the strides cannot tell (a 0 stride, or a tie of
    strides that the sizes do not break)."""
    if strides[a] == 0 or strides[b] == 0:
        return 0
    if strides[a] == strides[b]:
        return 0 if sizes[b] >= sizes[a] else 1
    return -1 if strides[b] > strides[a] else 1


def dim_order(self, *, ambiguity_check=False):
    """The dims from outermost to innermost in memory (PyTorch's insertion sort of the
    strides, ties kept in logical order); ``ambiguity_check``: refuse a tensor whose order
    is not unique (True), or that is not exactly one of the listed memory formats."""
    if not isinstance(ambiguity_check, bool) and not (
            isinstance(ambiguity_check, list) and
            all(isinstance(f, meta.memory_format) for f in ambiguity_check)):
        raise TypeError("The ambiguity_check argument must be a bool or a list of memory "
                        "formats.")
    sizes, strides, n = self._sizes, self._strides, self.dim()
    if ambiguity_check is not False:
        formats = ambiguity_check if isinstance(ambiguity_check, list) else []
        several = any(x == y for x, y in zip(strides, strides[1:])) or 1 in sizes
        fits = sum(meta.is_contiguous(sizes, strides, f) for f in formats)
        if several and fits != 1:
            raise RuntimeError("The tensor does not have unique dim order, or cannot map to "
                               "exact one of the given memory formats.")
    if n < 2:
        return tuple(range(n))
    contiguous = meta.is_contiguous(sizes, strides)
    channels_last = n == 4 and meta.is_contiguous(sizes, strides, meta.channels_last)
    if contiguous and not channels_last:
        return tuple(range(n))
    if channels_last and not contiguous:
        return (0, 2, 3, 1)
    perm = list(range(n - 1, -1, -1))     # innermost first, as PyTorch sorts
    for i in range(1, n):
        j = i
        for k in range(i - 1, -1, -1):
            order = _stride_order(sizes, strides, perm[k], perm[j])
            if order > 0:
                perm[k], perm[j] = perm[j], perm[k]
                j = k
            elif order < 0:
                break
    if ambiguity_check is not False and any(
            _stride_order(sizes, strides, inner, outer) != -1
            for inner, outer in zip(perm, perm[1:])):
        raise RuntimeError("The tensor does not have unique dim order.")
    return tuple(reversed(perm))


def is_inference(self):
    """Whether this is an inference tensor: its memory was made inside ``inference_mode``."""
    return self._storage.inference


def pin_memory(self, device=None):
    """A copy in page-locked memory for transfers to an accelerator; PyTorch refuses when
    none is available."""
    from microtensor import cuda
    if not cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return self.clone(memory_format=meta.contiguous_format)


def is_pinned(self, device=None):
    return False


def share_memory_(self):
    """Move the storage into shared memory (an anonymous shared mapping, which child
    processes made by fork share); a no-op when it is there already."""
    storage = self._storage
    if self.device.type == "cpu" and not _is_shared(storage):
        data = storage.data
        buffer = mmap.mmap(-1, max(data.nbytes, 1))
        shared = np.frombuffer(buffer, dtype=data.dtype, count=data.shape[0])
        shared[...] = data
        storage._replace_data(shared)
    return self


def _is_shared(storage):
    base = getattr(storage.data, "base", None)      # NumPy's view of the mapping's buffer
    return isinstance(getattr(base, "obj", None), mmap.mmap)


def is_shared(self):
    return _is_shared(self._storage)


def is_set_to(self, tensor):
    """Whether ``self`` and ``tensor`` are the same elements: one storage, offset, shape
    and strides."""
    return self._storage is tensor._storage and self._offset == tensor._offset and \
        self._sizes == tensor._sizes and self._strides == tensor._strides


def as_subclass(self, cls):
    """An alias of ``self`` (a view on its storage, attached to its autograd graph) that is
    an instance of ``cls``, a subclass of ``Tensor``."""
    if not (isinstance(cls, type) and issubclass(cls, TensorBase)):
        raise TypeError("Creating a Tensor subclass from a class that does not inherit from "
                        "Tensor is not possible. Make sure your class inherits from Tensor.")
    alias = self.alias()
    alias.__class__ = cls
    return alias


def new(self, *args, **kwargs):
    """PyTorch's legacy ``Tensor.new``: ``legacy_new`` with this tensor's dtype."""
    from microtensor._tensor import legacy_new
    return legacy_new(args, kwargs, self._dtype)


# --------------------------------------------------------------------------- storage changes

def _refuse_grad(self):
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")


def _ensure_elements(storage, count, itemsize):
    """Grow ``storage`` to hold ``count`` elements of ``itemsize`` bytes at least, its
    values kept at the front (its own element type may be another: a byte storage)."""
    from microtensor.ops.loops import array_module
    data = storage.data
    count = -(-count * itemsize // data.itemsize)
    if count <= data.shape[0]:
        return
    try:
        grown = array_module(data).empty(count, dtype=data.dtype)
    except MemoryError:     # PyTorch's allocator error (nothing changed yet)
        raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                           f"{count * data.dtype.itemsize} bytes.") from None
    grown[:data.shape[0]] = data
    storage._replace_data(grown)


def _set_geometry_growing(self, sizes, strides, offset, storage=None, bump=True):
    """Point ``self`` at ``storage`` (its own by default) with this geometry, the storage
    grown to hold it, and bump the version counter once (when ``bump``)."""
    storage = self._storage if storage is None else storage
    numel = 1
    for size in sizes:
        numel *= size
    if numel:
        count = offset + meta.storage_size_for(sizes, strides)
        if count * self._dtype.itemsize >= 2 ** 63:
            raise RuntimeError(f"Storage size calculation overflowed with sizes={list(sizes)}" +
                               (f" and strides={list(strides)}" if storage is not self._storage
                                else ""))
        _ensure_elements(storage, count, self._dtype.itemsize)
    self._set_storage(storage, sizes, strides, offset)
    storage.version += bump
    return self


def _checked_sizes(sizes):
    if any(size < 0 for size in sizes):
        raise RuntimeError("numel: integer multiplication overflow")
    return sizes


def resize_(self, *sizes, memory_format=None):
    """Give ``self`` the shape ``sizes`` with contiguous strides (of ``memory_format``)
    from its storage offset; the storage grows when too small (new elements are
    uninitialized) and keeps its size otherwise.  The same shape without a
    ``memory_format`` leaves ``self`` as it is."""
    _refuse_grad(self)
    if memory_format is meta.preserve_format:
        raise RuntimeError("Unsupported memory formatPreserve")
    sizes = _checked_sizes(size_arg(sizes))
    if sizes == self._sizes and memory_format is None:
        return self
    # PyTorch's version counter moves when the shape changes, not for a restride alone
    return _set_geometry_growing(self, sizes, meta.strides_for_format(
        sizes, memory_format or meta.contiguous_format), self._offset,
        bump=sizes != self._sizes)


def resize_as_(self, the_template, *, memory_format=None):
    """``resize_`` to the shape of ``the_template`` (``preserve_format``: in its memory
    format)."""
    _refuse_grad(self)
    if memory_format is meta.preserve_format:
        memory_format = meta.suggest_memory_format(the_template._sizes, the_template._strides)
    return resize_(self, the_template._sizes, memory_format=memory_format)


def set_(self, source=None, storage_offset=0, size=None, stride=None):
    """Make ``self`` a tensor over ``source``'s storage (a tensor's: with its geometry
    unless one is given; a ``Storage``: from ``storage_offset``, contiguous unless
    ``stride`` is given), or over a new empty storage when ``source`` is None.  The
    storage grows when the geometry reaches past its end; the version counter, shared with
    every tensor over the storage, moves once."""
    from microtensor.autograd.recording import check_inplace
    if is_grad_enabled() and self.requires_grad:
        check_inplace(self)     # a leaf: PyTorch's in-place refusal
        raise RuntimeError("set_ is not differentiable: call it on a tensor that does not "
                           "require grad (detach() it first)")
    if source is None:
        return _set_geometry_growing(self, (0,), (1,), 0, Storage(np.empty(0, self._dtype.np)))
    if isinstance(source, TensorBase):
        if source._dtype is not self._dtype:
            from microtensor._dtype import info
            raise RuntimeError(f"Could not set tensor of type {info(source._dtype).cpp_name} "
                               f"to a tensor of type {info(self._dtype).cpp_name}")
        if size is None:
            return _set_geometry_growing(self, source._sizes, source._strides, source._offset,
                                         source._storage)
        storage = source._storage
    elif isinstance(source, Storage):
        storage = source
    elif isinstance(source, TypedStorage):
        if source.dtype is not self._dtype:
            from microtensor._dtype import info
            raise RuntimeError(f"Expected a Storage of type {info(self._dtype).scalar_name.lower()}"
                               f" or an UntypedStorage, but got type "
                               f"{info(source.dtype).scalar_name} for argument 1 'storage'")
        storage = source.untyped()
    else:
        raise TypeError(f"set_(): argument 'source' must be Tensor or Storage, not "
                        f"{type(source).__name__}")
    sizes = _checked_sizes(size_arg((size,)) if size is not None else (storage.nbytes() // self._dtype.itemsize,))
    strides = meta.contiguous_strides(sizes) if stride is None else size_arg((stride,), "stride")
    if any(s < 0 for s in strides):
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(sizes)} and "
                           f"strides={list(strides)}")
    return _set_geometry_growing(self, sizes, strides, storage_offset, storage)


# --------------------------------------------------------------------------- Python callables

def _python_value(dtype):
    """How a callable's result becomes an element: PyTorch's conversions (a float or int
    tensor takes a real number, truncated for ints; a bool tensor any truth value)."""
    if dtype.is_floating_point:
        kind = float
    elif dtype.name == "bool":
        return bool
    else:
        kind = int

    def convert(value):
        if not isinstance(value, numbers.Real):
            raise TypeError(f"must be real number, not {type(value).__name__}")
        return kind(value)
    return convert


def _per_element(name, self, others, fn):
    """``self``'s elements replaced by ``fn(element, *others' elements)`` (``others``
    broadcast to ``self``'s shape, of its dtype), with Python numbers in and out, element
    by element as PyTorch calls it.  The version counter does not move, as in PyTorch."""
    from microtensor._legacy import type_name
    if any(t.requires_grad for t in (self,) + others):
        raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use "
                           f"var.detach().{name}() instead.")
    if self.device.type != "cpu":
        raise RuntimeError(f"{name}_ is only implemented on CPU tensors")
    labels = ("'other'",) if len(others) == 1 else ("argument 'x'", "argument 'y'")
    for label, other in zip(labels, others):
        if other._dtype is not self._dtype:
            raise TypeError(f"{name}: expected {type_name(self)} for {label} (got "
                            f"{type_name(other)})")
    columns = [t.expand(self.shape)._array().ravel().tolist() for t in (self,) + others]
    convert = _python_value(self._dtype)
    values = [convert(fn(*row)) for row in zip(*columns)]
    if values:
        self._array()[...] = np.array(values, dtype=self._dtype.np).reshape(self._sizes)
    return self


def apply_(self, callable):
    return _per_element("apply_", self, (), callable)


def map_(self, tensor, callable):
    return _per_element("map_", self, (tensor,), callable)


def map2_(self, x, y, callable):
    return _per_element("map2_", self, (x, y), callable)


def install(tensor_class, namespace):
    for flag in FALSE_FLAGS:
        setattr(tensor_class, flag, property(_false))
    tensor_class.is_distributed = _false
    tensor_class.layout = property(lambda self: strided)
    tensor_class.mH = property(mH)
    tensor_class.H = property(H)
    for fn in (dim_order, is_inference, pin_memory, is_pinned, share_memory_, is_shared,
               is_set_to, as_subclass, new, resize_, resize_as_, set_, apply_, map_, map2_):
        setattr(tensor_class, fn.__name__, fn)
    tensor_class.const_data_ptr = tensor_class.data_ptr
    namespace.update(layout=layout, strided=strided, is_inference=is_inference,
                     resize_as_=resize_as_, detach_=tensor_class.detach_)
