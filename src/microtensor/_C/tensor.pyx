# cython: freethreading_compatible = False
"""The tensor object: dtypes, devices, Storage and TensorBase.

This is the only module that turns (storage, sizes, strides, storage offset) into memory
access.  A ``TensorBase`` is pure metadata over a ``Storage`` (a flat 1-D array plus the
version counter that every view of it shares).  ``_make_view`` is the one place a new
geometry over an existing storage is created, and it refuses any geometry that would reach
outside the storage, so no view can ever touch foreign memory.

Everything an op *does* lives elsewhere: ``microtensor.ops`` declares the ops and
``microtensor.ops.dispatch`` routes a call through vmap and autograd to the op's kernel.
The number slots here (``+``, ``*``, ...) and a few hot methods run a C fast path when no
transform or gradient is involved, and otherwise hand the call to that dispatcher.
"""
cimport cython
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject, newfunc
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_INCREF
from libc.stdint cimport INT64_MAX
from libc.string cimport memcpy, memset

import numpy as np

from microtensor import _dtype_table
from microtensor._C cimport meta
from microtensor._C.meta import contiguous_format, preserve_format


from microtensor._C cimport kernels

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.dtype descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, object obj)


# --------------------------------------------------------------------------- dtypes

cdef class dtype:
    """A tensor element type (``microtensor.float32`` ...), mirroring ``torch.dtype``."""

    def __init__(self, name, npdtype, kind):
        self.name = name
        self.np = np.dtype(npdtype)
        self.itemsize = self.np.itemsize
        self.kind = kind
        self.is_floating_point = kind == 2
        self.is_signed = kind != 0 and self.np.kind != "u"
        self.typenum = self.np.num

    def __repr__(self):
        return "microtensor." + self.name

    def __reduce__(self):
        return self.name

    def to_complex(self):
        raise NotImplementedError("microtensor has no complex dtypes")


# every dtype by name, in the order of the table (widest floating type first)
DTYPES = {info.name: dtype(info.name, info.numpy, info.kind) for info in _dtype_table.DTYPES}
float64 = DTYPES["float64"]
float32 = DTYPES["float32"]
float16 = DTYPES["float16"]
bfloat16 = DTYPES["bfloat16"]
int64 = DTYPES["int64"]
int32 = DTYPES["int32"]
int16 = DTYPES["int16"]
int8 = DTYPES["int8"]
uint8 = DTYPES["uint8"]
bool_ = DTYPES["bool"]
cdef dict _dtype_by_np = {d.np: d for d in DTYPES.values()}

cdef dtype _default_float = float32


def get_default_dtype():
    return _default_float


def set_default_dtype(dtype d):
    global _default_float
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default_float = d


def dtype_from_numpy(npdtype):
    """The microtensor dtype storing ``npdtype``; TypeError for types microtensor lacks."""
    d = _dtype_by_np.get(np.dtype(npdtype))
    if d is None:
        names = [name for name in DTYPES if name != "bool"]
        raise TypeError(f"can't convert np.ndarray of type {np.dtype(npdtype)}. The only "
                        f"supported types are: {', '.join(names)}, and bool.")
    return d


cpdef object compute_numpy(dtype dt):
    """The NumPy type elementwise kernels compute ``dt`` in: float16 and bfloat16 compute
    in float32 and round once into the result, as PyTorch's CPU kernels do."""
    if dt.is_floating_point and dt.itemsize == 2:
        return float32.np
    return dt.np


# --------------------------------------------------------------------------- devices

cdef class device:
    """Where a tensor's storage lives: ``device("cpu")`` or ``device("cuda", 0)``."""

    def __init__(self, type_or_str, index=None):
        if isinstance(type_or_str, device):
            self.type = (<device>type_or_str).type
            self.index = (<device>type_or_str).index
            return
        text = str(type_or_str)
        if ":" in text:
            text, _, idx = text.partition(":")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type_or_str}'")
            index = int(idx)
        if text not in ("cpu", "cuda"):
            raise RuntimeError(
                f"Expected one of cpu, cuda device type at start of device string: {type_or_str}")
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self.type = text
        self.index = index

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        if not isinstance(other, device):
            return NotImplemented
        return self.type == (<device>other).type and self.index == (<device>other).index

    def __hash__(self):
        return hash((self.type, self.index))


cpu = device("cpu")


# --------------------------------------------------------------------------- storage

@cython.auto_pickle(False)  # no __setstate_cython__: nothing may set the fields to None
cdef class Storage:
    """A flat buffer shared by a tensor and all its views, with their shared version counter.

    ``data`` is a 1-D array of the element type (a NumPy array on the CPU; the CUDA backend
    stores a CuPy array).  ``version`` counts in-place writes; autograd compares it with
    the value it saw when it saved a tensor.
    """

    def __init__(self, data, device dev=cpu):
        self.data = data
        self.device = dev
        self.version = 0

    def nbytes(self):
        return self.data.nbytes

    def size(self):
        return self.data.shape[0]

    def data_ptr(self):
        if self.device.type == "cpu":
            return self.data.ctypes.data
        return self.data.data.ptr

    def __len__(self):
        return self.data.nbytes

    def __reduce__(self):
        return Storage, (self.data, self.device)


cdef tuple _NO_ARGS = ()

# Type slots that build objects.  Cython gives a cdef class one ``tp_new`` that leaves every
# field None, which the core fills at once; Python code reaching it (``Storage.__new__``,
# ``Tensor(...)``, a subclass) would get an object whose C fields the core dereferences
# unchecked.  So the core keeps the raw allocators for itself and points the types' slots at
# constructors that always return a fully built object.
cdef extern from *:
    """
    static void mt_set_tp_new(PyTypeObject *type, newfunc tp_new) {
        type->tp_new = tp_new;
        type->tp_vectorcall = NULL;  /* Cython's fast call of the type skips tp_new */
        PyType_Modified(type);
    }
    """
    void mt_set_tp_new(PyTypeObject* type, newfunc tp_new)


cdef newfunc _alloc_storage = (<PyTypeObject*>Storage).tp_new


cdef object _NO_DATA = np.empty(0, np.float32)  # what a Storage holds before __init__


cdef object _python_storage_new(type cls, PyObject* args, PyObject* kwargs):
    """``Storage.__new__`` from Python: an empty CPU storage (``__init__`` then sets it)."""
    cdef Storage storage = <Storage>_alloc_storage(cls, <PyObject*>_NO_ARGS, NULL)
    storage.data = _NO_DATA
    storage.device = cpu
    return storage


mt_set_tp_new(<PyTypeObject*>Storage, <newfunc>_python_storage_new)


# --------------------------------------------------------------------------- tensor

class Size(tuple):
    """A tensor's sizes: a tuple that prints like ``torch.Size``."""

    def __repr__(self):
        return "microtensor.Size([" + ", ".join(map(str, self)) + "])"

    def numel(self):
        n = 1
        for s in self:
            n *= s  # Python ints: exact even for sizes no tensor could have
        return n


cdef enum:
    MAX_DIMS = 64   # as NumPy: every tensor can be viewed as an ndarray


cdef object _tensor_cls = None      # microtensor.Tensor, the Python subclass users see
cdef object _dispatch_binary = None  # ops.dispatch.binary(name, a, b): the slow path of + - * ...
cdef object _dispatch_call = None    # ops.dispatch.call_by_name(name, *args): slow path of methods
cdef object _getitem = None          # ops.indexing.getitem: the slow path of tensor[index]
cdef object _attach_node = None     # autograd: attach_node(op, args, kwargs, result)
cdef dict _recorded_ops = None      # the Ops the fast paths record, by name, for _attach_node


def _install(tensor_cls, dispatch_binary, dispatch_call, getitem, attach_node,
             dict recorded_ops):
    """Called once by the package: the Python pieces the fast paths defer to."""
    global _tensor_cls, _dispatch_binary, _dispatch_call, _getitem, _attach_node, _recorded_ops
    _tensor_cls = tensor_cls
    _dispatch_binary = dispatch_binary
    _dispatch_call = dispatch_call
    _getitem = getitem
    _attach_node = attach_node
    _recorded_ops = recorded_ops


# Grad mode lives here, as a C thread-local, so that every fast path can read it for
# free; autograd.grad_mode exposes it.  It stores "disabled" so that new threads start
# with grad mode on, as in PyTorch.
cdef extern from *:
    """
    static __thread int mt_grad_disabled = 0;
    """
    int mt_grad_disabled


def is_grad_enabled():
    return not mt_grad_disabled


cdef bint grad_mode_enabled() noexcept:
    return not mt_grad_disabled


cpdef set_grad_enabled(bint enabled):
    global mt_grad_disabled
    mt_grad_disabled = not enabled


cdef inline bint _contiguous(tuple sizes, tuple strides):
    """Row-major contiguity.  Runs after ``_numel`` accepted ``sizes``, and past the 0-size
    test every partial product divides the numel, so ``expected`` cannot overflow."""
    cdef Py_ssize_t expected = 1, size
    cdef Py_ssize_t i
    for size in sizes:
        if size == 0:
            return True
    for i in range(len(sizes) - 1, -1, -1):
        size = sizes[i]
        if size != 1:
            if <Py_ssize_t>strides[i] != expected:
                return False
            expected *= size
    return True


cdef extern from *:
    """
    static inline int mt_tensor_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
        return __builtin_mul_overflow(a, b, out);
    }
    static inline int mt_tensor_add_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
        return __builtin_add_overflow(a, b, out);
    }
    """
    bint mt_tensor_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept nogil
    bint mt_tensor_add_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept nogil


cdef inline Py_ssize_t _numel(tuple sizes) except -1:
    """The element count of a tensor of ``sizes``: PyTorch's ``safe_compute_numel``, which
    refuses sizes whose product overflows (even when a later size is 0).  Every tensor is
    built through here, so every tensor's numel, and the product of any of its sizes when
    it has no 0 size, fits in int64: the bound the kernels' loops rely on."""
    cdef unsigned long long n
    if meta.size_product_overflows(sizes, &n) or n > <unsigned long long>INT64_MAX:
        raise RuntimeError("numel: integer multiplication overflow")
    return <Py_ssize_t>n


cdef inline tuple _contiguous_strides(tuple sizes):
    cdef Py_ssize_t n = len(sizes), acc = 1, i
    cdef list out = [1] * n
    for i in range(n - 1, -1, -1):
        out[i] = acc
        if i and mt_tensor_mul_overflow(acc, max(<Py_ssize_t>sizes[i], 1), &acc):
            raise RuntimeError("Stride calculation overflowed")  # only beside a 0 size
    return tuple(out)


@cython.auto_pickle(False)  # Tensor pickles itself; fields are never set from a state tuple
cdef class TensorBase:
    """Metadata of a strided tensor over a Storage, plus the fields autograd keeps on it.

    ``microtensor.Tensor`` (Python) subclasses this and adds the methods declared in
    ``microtensor.ops``; vmap's BatchedTensor subclasses that again.
    """

    # ---------------------------------------------------------------- metadata
    @property
    def shape(self):
        return Size(self._sizes)

    def size(self, dim=None):
        if dim is None:
            return Size(self._sizes)
        return self._sizes[_wrap_dim(dim, len(self._sizes))]

    def stride(self, dim=None):
        if dim is None:
            return self._strides
        return self._strides[_wrap_dim(dim, len(self._sizes))]

    def storage_offset(self):
        return self._offset

    def dim(self):
        return len(self._sizes)

    @property
    def ndim(self):
        return len(self._sizes)

    def ndimension(self):
        return len(self._sizes)

    def numel(self):
        return self._numel

    def nelement(self):
        return self._numel

    def element_size(self):
        return self._dtype.itemsize

    @property
    def itemsize(self):
        return self._dtype.itemsize

    @property
    def nbytes(self):
        return <object>self._numel * self._dtype.itemsize  # a Python int: cannot wrap

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return self._storage.device

    @property
    def is_cuda(self):
        return self._storage.device.type == "cuda"

    @property
    def is_cpu(self):
        return self._storage.device.type == "cpu"

    def untyped_storage(self):
        return self._storage

    def data_ptr(self):
        return self._storage.data_ptr() + self._offset * self._dtype.itemsize

    @property
    def _version(self):
        return self._storage.version

    def _bump_version(self):
        self._storage.version += 1

    def is_floating_point(self):
        return self._dtype.is_floating_point

    def _is_view(self):
        return self._base is not None

    # ---------------------------------------------------------------- autograd fields
    @property
    def requires_grad(self):
        return needs_grad(self)

    @property
    def grad_fn(self):
        return self._grad_fn

    @property
    def is_leaf(self):
        return self._grad_fn is None

    @property
    def output_nr(self):
        return self._output_nr

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            _check_assigned_grad(self, value)
        self._grad = value

    @property
    def retains_grad(self):
        return self._retains_grad

    @property
    def name(self):
        return self._name

    # ---------------------------------------------------------------- memory access
    def _array(self):
        """A zero-copy strided array over exactly this tensor's elements."""
        if self._storage.device.type != "cpu":
            return _device_view(self)
        return _ndarray_view(self)

    def _make_view(self, tuple sizes, tuple strides, Py_ssize_t offset):
        """A view of this tensor's storage (``_base`` set), after checking the bounds."""
        _check_geometry(self._storage, sizes, strides, offset, self._dtype.itemsize)
        return self._make_view_unchecked(sizes, strides, offset)

    def _make_view_unchecked(self, tuple sizes, tuple strides, offset):
        """Like _make_view for geometries derived from this tensor's own, so in bounds
        without a check: each view op (``ops/view.py``) reaches only elements this tensor
        reaches (a slice, a selected index, a permutation, a 0 stride for a broadcast dim).
        What a derivation can still break is int64 itself (a huge slice step or unfold
        step multiplies a stride, a huge offset or a size product overflows): that is
        refused here and in ``_new_tensor``, before any tensor exists."""
        return self._view_fast(sizes, strides, _int64_geometry(strides, offset))

    def _make_alias_unchecked(self, tuple sizes, tuple strides, offset):
        """A tensor over this storage (so sharing the version counter) that is not a view:
        no ``_base``, no autograd history (``detach``, ``_unsafe_view``); in bounds like
        ``_make_view_unchecked``."""
        return _new_tensor(_tensor_cls, self._storage, sizes, strides,
                           _int64_geometry(strides, offset), self._dtype)

    def _set_geometry(self, tuple sizes, tuple strides, Py_ssize_t offset):
        """In-place metadata change (``as_strided_``, ``squeeze_``, ``t_`` ...), bounds-checked."""
        _check_geometry(self._storage, sizes, strides, offset, self._dtype.itemsize)
        self._sizes = sizes
        self._strides = strides
        self._offset = offset
        self._numel = _numel(sizes)
        self._is_contig = _contiguous(sizes, strides)

    def _set_storage(self, Storage storage, tuple sizes, tuple strides, Py_ssize_t offset):
        """Point this tensor at another storage (``set_``/``data`` swaps), bounds-checked."""
        _check_geometry(storage, sizes, strides, offset, self._dtype.itemsize)
        self._storage = storage
        self._set_geometry(sizes, strides, offset)

    # ---------------------------------------------------------------- fast paths
    def __add__(a, b):
        return _binary(a, b, b"+", "add")

    def __radd__(a, b):
        return _binary(b, a, b"+", "add")

    def __sub__(a, b):
        return _binary(a, b, b"-", "sub")

    def __rsub__(a, b):
        return _binary(b, a, b"-", "sub")

    def __mul__(a, b):
        return _binary(a, b, b"*", "mul")

    def __rmul__(a, b):
        return _binary(b, a, b"*", "mul")

    def __truediv__(a, b):
        return _binary(a, b, b"/", "div")

    def __rtruediv__(a, b):
        return _binary(b, a, b"/", "div")

    # Hot methods: a C path for plain tensors (see ``_plain``; the views, arithmetic and
    # sums also for tensors that require grad, whose node they attach), else the
    # registered op.
    def __getitem__(self, index):
        cdef Py_ssize_t start, stop, step, length, size, i, new_stride, offset
        if _plain(self) and self._sizes:
            size = self._sizes[0]
            if type(index) is slice:
                if PySlice_Unpack(index, &start, &stop, &step) < 0:
                    raise
                if step > 0:
                    length = PySlice_AdjustIndices(size, &start, &stop, step)
                    # a stride times a huge step (or an empty slice's start) may leave
                    # int64: then the slow path (the ``slice`` op) refuses it
                    if not (mt_tensor_mul_overflow(self._strides[0], step, &new_stride) or
                            mt_tensor_mul_overflow(start, self._strides[0], &offset) or
                            mt_tensor_add_overflow(self._offset, offset, &offset)):
                        return self._view_fast((length,) + self._sizes[1:],
                                               (new_stride,) + self._strides[1:], offset)
            elif type(index) is int and -size <= <object>index < size:
                i = index
                if i < 0:
                    i += size
                # 0 <= i < size: offset + i * stride is an element of this (in-bounds)
                # tensor, so it lies in the storage and cannot overflow
                return self._view_fast(self._sizes[1:], self._strides[1:],
                                       self._offset + i * <Py_ssize_t>self._strides[0])
        return _getitem(self, index)

    def t(self):
        if _served(self) and len(self._sizes) == 2:
            return self._recorded_view("transpose", (self, 0, 1),
                                       (self._sizes[1], self._sizes[0]),
                                       (self._strides[1], self._strides[0]))
        return _dispatch_call("t", self)

    def transpose(self, dim0, dim1):
        cdef Py_ssize_t a, b, n = len(self._sizes)
        if not (_served(self) and n and type(dim0) is int and type(dim1) is int):
            return _dispatch_call("transpose", self, dim0, dim1)
        a, b = _wrap_dim(dim0, n), _wrap_dim(dim1, n)
        sizes, strides = list(self._sizes), list(self._strides)
        sizes[a], sizes[b] = sizes[b], sizes[a]
        strides[a], strides[b] = strides[b], strides[a]
        return self._recorded_view("transpose", (self, dim0, dim1), tuple(sizes),
                                   tuple(strides))

    def unsqueeze(self, dim):
        cdef Py_ssize_t d, n = len(self._sizes)
        if not (_served(self) and type(dim) is int):
            return _dispatch_call("unsqueeze", self, dim)
        d = _wrap_dim(dim, n + 1)
        stride = <Py_ssize_t>self._sizes[d] * <Py_ssize_t>self._strides[d] if d < n else 1
        return self._recorded_view("unsqueeze", (self, dim),
                                   self._sizes[:d] + (1,) + self._sizes[d:],
                                   self._strides[:d] + (stride,) + self._strides[d:])

    def view(self, *shape):
        result = self._reshaped_view(shape)
        return result if result is not None else _dispatch_call("view", self, *shape)

    def reshape(self, *shape):
        # a view whenever the strides allow one: the same as ``view`` (else the op copies)
        result = self._reshaped_view(shape)
        return result if result is not None else _dispatch_call("reshape", self, *shape)

    cdef object _reshaped_view(self, tuple shape):
        """The view to ``shape`` (recorded as ``view``) when the strides allow one, else
        None."""
        if not _served(self):
            return None
        sizes = _shape_arg(shape)
        if sizes is None:
            return None
        sizes = meta.infer_size(sizes, self._numel)
        strides = meta.view_strides(self._sizes, self._strides, sizes)
        return None if strides is None else \
            self._recorded_view("view", (self, sizes), sizes, strides)

    cdef object _recorded_view(self, str name, tuple args, tuple sizes, tuple strides):
        """A view in C; when autograd records it, the node of op ``name`` called on
        ``args`` is attached in C too."""
        out = self._view_fast(sizes, strides, self._offset)
        if not mt_grad_disabled and needs_grad(self):
            return _attach_node(_recorded_ops[name], args, None, out)
        return out

    def as_strided(self, size, stride, storage_offset=None):
        cdef Py_ssize_t offset
        if _plain(self) and type(size) is tuple and type(stride) is tuple and \
                _all_ints(<tuple>size) and _all_ints(<tuple>stride):
            offset = self._offset if storage_offset is None else storage_offset
            if len(<tuple>size) != len(<tuple>stride):
                raise RuntimeError(f"mismatch in length of strides and shape: size "
                                   f"{list(size)} and stride {list(stride)}")
            _check_geometry(self._storage, size, stride, offset, self._dtype.itemsize)
            return self._view_fast(size, stride, offset)
        return _dispatch_call("as_strided", self, size, stride, storage_offset)

    def clone(self, *, memory_format=None):
        cdef TensorBase out
        if _plain(self) and self._is_contig and self._storage.device is cpu and \
                (memory_format is None or memory_format is preserve_format or
                 memory_format is contiguous_format):
            # a contiguous tensor is dense, so preserve_format keeps its strides exactly
            out = _empty_with_strides(self, self._strides if memory_format is not
                                      contiguous_format else _contiguous_strides(self._sizes))
            memcpy(_ptr(out), _ptr(self), self._numel * self._dtype.itemsize)
            return out
        if memory_format is None:
            return _dispatch_call("clone", self)
        return _dispatch_call("clone", self, memory_format=memory_format)

    def contiguous(self, memory_format=None):
        cdef TensorBase out
        if memory_format is None or memory_format is contiguous_format:
            if self._is_contig and type(self) is _tensor_cls:
                return self
            if _plain(self) and self._storage.device is cpu:
                out = _new_tensor(_tensor_cls, _cpu_storage(self._sizes, self._dtype),
                                  self._sizes, _contiguous_strides(self._sizes), 0, self._dtype)
                _copy_disjoint(out, self)
                return out
            return _dispatch_call("contiguous", self)
        return _dispatch_call("contiguous", self, memory_format)

    def sum(self, *args, **kwargs):
        cdef TensorBase out
        cdef Py_ssize_t shape[MAX_DIMS]
        cdef Py_ssize_t strides[MAX_DIMS]
        cdef bint reduced[MAX_DIMS]
        cdef int ndim = len(self._sizes), d
        cdef double total
        if not _float_cpu(self) or len(args) > 2 or (kwargs and not _SUM_KEYWORDS.issuperset(
                kwargs)):
            return _dispatch_call("sum", self, *args, **kwargs)
        dim = args[0] if args else kwargs.get("dim")
        keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
        _load_geometry(self, ndim, shape, strides)
        if dim is None and not keepdim:
            total = kernels.sum_raw(self._dtype.typenum, _ptr(self), ndim, shape, strides)
            out = _new_tensor(_tensor_cls, _cpu_storage((), self._dtype), (), (), 0, self._dtype)
            if self._dtype.typenum == cnp.NPY_FLOAT:
                (<float*>_ptr(out))[0] = <float>total
            else:
                (<double*>_ptr(out))[0] = total
        else:
            # small reductions over chosen dims; large ones are NumPy's (it adds whole rows)
            if not self._numel or self._numel > _SMALL_REDUCTION or type(keepdim) is not bool \
                    or not _reduced_dims(dim, ndim, reduced):
                return _dispatch_call("sum", self, *args, **kwargs)
            sizes = tuple([1 if reduced[d] else self._sizes[d] for d in range(ndim)
                           if keepdim or not reduced[d]])
            out = _new_tensor(_tensor_cls, _cpu_storage(sizes, self._dtype), sizes,
                              _contiguous_strides(sizes), 0, self._dtype)
            kernels.sum_dims_raw(self._dtype.typenum, _ptr(self), ndim, shape, strides,
                                 reduced, _ptr(out))
        if not mt_grad_disabled and needs_grad(self):
            return _attach_node(_recorded_ops["sum"], (self,) + args, kwargs or None, out)
        return out

    def expand(self, *sizes):
        shape = _shape_arg(sizes) if sizes else None
        if shape is None or not _served(self):
            return _dispatch_call("expand", self, *sizes)
        expanded, strides = meta.expand_geometry(self._sizes, self._strides, shape)
        return self._recorded_view("expand", (self, shape), expanded, strides)

    def __matmul__(a, b):
        cdef TensorBase ta, tb, out
        cdef Py_ssize_t m, n, k, work, a_rs, a_cs, b_rs, b_cs
        if _plain(a) and _plain(b):
            ta, tb = <TensorBase>a, <TensorBase>b
            if len(ta._sizes) == 2 and len(tb._sizes) == 2 and ta._dtype is tb._dtype and \
                    (ta._dtype.typenum == cnp.NPY_FLOAT or ta._dtype.typenum == cnp.NPY_DOUBLE) \
                    and ta._sizes[1] == tb._sizes[0] and \
                    ta._storage.device is cpu and tb._storage.device is cpu:
                m, k, n = ta._sizes[0], ta._sizes[1], tb._sizes[1]
                sizes = (m, n)
                # the result's sizes are checked here, so m * n fits; m * n * k may not
                # (then it is no small product either)
                out = _new_tensor(_tensor_cls, _cpu_storage(sizes, ta._dtype), sizes,
                                  _contiguous_strides(sizes), 0, ta._dtype)
                if mt_tensor_mul_overflow(m * n, k, &work) or work > _SMALL_MATMUL:
                    _np_matmul(_ndarray_view(ta), _ndarray_view(tb), out=_ndarray_view(out))
                    return out
                a_rs, a_cs = ta._strides
                b_rs, b_cs = tb._strides
                if ta._dtype.typenum == cnp.NPY_FLOAT:
                    kernels.matmul_small(<float*>_ptr(out), <float*>_ptr(ta), a_rs, a_cs,
                                         <float*>_ptr(tb), b_rs, b_cs, m, n, k)
                else:
                    kernels.matmul_small(<double*>_ptr(out), <double*>_ptr(ta), a_rs, a_cs,
                                         <double*>_ptr(tb), b_rs, b_cs, m, n, k)
                return out
        return _dispatch_call("matmul", a, b)

    def __rmatmul__(a, b):
        return _dispatch_call("matmul", b, a)

    cdef TensorBase _view_fast(self, tuple sizes, tuple strides, Py_ssize_t offset):
        cdef TensorBase t = _new_tensor(_tensor_cls, self._storage, sizes, strides, offset,
                                        self._dtype)
        cdef TensorBase base = self if self._base is None else self._base
        t._base = base
        # a view of a view made in no_grad mode is not differentiable either (PyTorch's
        # creation meta is inherited): in-place writes into it are refused alike
        if not mt_grad_disabled and (self._base is None or self._is_diff_view):
            t._is_diff_view = True
            t._view_info = base._grad_fn
        return t


cdef newfunc _alloc_tensor = (<PyTypeObject*>TensorBase).tp_new


cdef object _python_tensor_new(type cls, PyObject* args, PyObject* kwargs):
    """``Tensor(...)``, ``Tensor.__new__(cls, ...)`` and subclasses from Python: PyTorch's
    legacy constructor (``microtensor._tensor.legacy_new``), so Python never holds a tensor
    without storage.  ``_new_tensor`` allocates through ``_alloc_tensor`` instead."""
    cdef TensorBase t, source
    if cls is TensorBase:
        raise RuntimeError("Cannot directly construct TensorBase; subclass it and then "
                           "construct that")
    from microtensor._tensor import legacy_new
    source = legacy_new(<object>args if args != NULL else (),
                        <object>kwargs if kwargs != NULL else {})
    if type(source) is cls:
        return source
    t = <TensorBase>_alloc_tensor(cls, <PyObject*>_NO_ARGS, NULL)
    t._storage = source._storage
    t._sizes = source._sizes
    t._strides = source._strides
    t._offset = source._offset
    t._dtype = source._dtype
    t._numel = source._numel
    t._is_contig = source._is_contig
    return t


mt_set_tp_new(<PyTypeObject*>TensorBase, <newfunc>_python_tensor_new)


cdef extern from "Python.h":
    int PySlice_Unpack(object slice, Py_ssize_t* start, Py_ssize_t* stop,
                       Py_ssize_t* step) except -1
    Py_ssize_t PySlice_AdjustIndices(Py_ssize_t length, Py_ssize_t* start, Py_ssize_t* stop,
                                     Py_ssize_t step) noexcept


_np_matmul = np.matmul
_SMALL_MATMUL = 4096   # multiply-adds below which a plain loop beats calling BLAS


cdef inline bint _all_ints(tuple values):
    for v in values:
        if type(v) is not int:
            return False
    return True


cdef inline tuple _shape_arg(tuple shape):
    """``(2, 3)`` from ``view(2, 3)``, ``view((2, 3))`` or ``view(t.shape)`` (a ``Size``, a
    tuple subclass); None for anything unusual."""
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = tuple(shape[0])
    return shape if _all_ints(shape) else None


cdef inline Py_ssize_t _byte_stride(Py_ssize_t stride, Py_ssize_t itemsize) noexcept:
    """A stride in bytes.  Only a dim that is never stepped (size 0 or 1) can have a stride
    whose byte count overflows (a stepped one stays inside an allocation); it gets 0, which
    reaches the same elements."""
    cdef Py_ssize_t result
    if mt_tensor_mul_overflow(stride, itemsize, &result):
        return 0
    return result


cdef void _copy_disjoint(TensorBase dst, TensorBase src) except *:
    """Copy ``src`` into a fresh CPU tensor ``dst`` of the same sizes and dtype."""
    cdef Py_ssize_t shape[MAX_DIMS]
    cdef Py_ssize_t dst_strides[MAX_DIMS]
    cdef Py_ssize_t src_strides[MAX_DIMS]
    cdef Py_ssize_t item = src._dtype.itemsize
    cdef int i, ndim = len(src._sizes)
    for i in range(ndim):
        shape[i] = src._sizes[i]
        dst_strides[i] = _byte_stride(dst._strides[i], item)
        src_strides[i] = _byte_stride(src._strides[i], item)
    if kernels.copy_raw(src._dtype.typenum, item, _ptr(dst), dst_strides, _ptr(src),
                        src_strides, shape, ndim) < 0:
        raise TypeError(f"no copy kernel for {src._dtype}")


cdef bint needs_grad(TensorBase t) noexcept:
    """Whether ``t`` requires grad: itself, or as a differentiable view of a base that does."""
    if t._requires_grad:
        return True
    return t._is_diff_view and needs_grad(<TensorBase>t._base)


cdef _check_assigned_grad(TensorBase tensor, value):
    """PyTorch's checks of ``tensor.grad = value``: a tensor of the same dtype, device and
    size, not ``tensor`` itself."""
    if not isinstance(value, TensorBase):
        raise TypeError("assigned grad expected to be a Tensor or None but got grad of type "
                        f"{type(value).__name__}")
    cdef TensorBase grad = <TensorBase>value
    if grad is tensor:
        raise RuntimeError("can't assign Variable as its own grad")
    if grad._dtype is not tensor._dtype:
        raise RuntimeError(
            f"attempting to assign a gradient with dtype "
            f"'{_dtype_table.BY_NAME[grad._dtype.name].cpp_name}' to a tensor with grad_dtype "
            f"'{_dtype_table.BY_NAME[tensor._dtype.name].scalar_name}'. The "
            "gradient must match the tensor's grad_dtype (defaults to the tensor's dtype).")
    if grad._storage.device != tensor._storage.device:
        raise RuntimeError(
            f"attempting to assign a gradient with device type '{grad._storage.device.type}' "
            f"to a tensor with device type '{tensor._storage.device.type}'. Please ensure "
            "that the gradient and the tensor are on the same device")
    if grad._sizes != tensor._sizes:
        raise RuntimeError(
            f"attempting to assign a gradient of size '{list(grad._sizes)}' to a tensor of "
            f"size '{list(tensor._sizes)}'. Please ensure that the gradient and the tensor "
            "are the same size")


cdef object _parameter_cls = None   # nn.Parameter: served by the fast paths like Tensor


def register_parameter_class(cls):
    """Called by ``microtensor.nn``: parameters take the fast paths too (their results are
    plain tensors, as in PyTorch)."""
    global _parameter_cls
    _parameter_cls = cls


cdef inline bint _served(object t):
    """Whether ``t``'s type is one the fast paths serve: ``Tensor`` or ``nn.Parameter``
    (not subclasses such as vmap's ``BatchedTensor``, whose ops must be dispatched)."""
    return type(t) is _tensor_cls or type(t) is _parameter_cls


cdef inline bint _plain(object t):
    """True when ``t`` is an ordinary tensor that needs no autograd recording right now."""
    if not _served(t):
        return False
    return mt_grad_disabled or not needs_grad(<TensorBase>t)


cdef inline bint _float_cpu(object t):
    """Whether ``t`` is a float32 or float64 CPU ``Tensor`` (the fast paths' dtypes)."""
    cdef int typenum
    if not _served(t):
        return False
    typenum = (<TensorBase>t)._dtype.typenum
    return (<TensorBase>t)._storage.device is cpu and (typenum == cnp.NPY_FLOAT or
                                                       typenum == cnp.NPY_DOUBLE)


cdef inline bint _int_fits(object x, dtype dt):
    """Whether NumPy takes the Python int ``x`` beside a ``dt`` tensor as PyTorch does:
    not for bool, nor beyond ``dt``'s range (PyTorch wraps there or refuses; the slow
    path decides)."""
    cdef int overflow, bits
    cdef long long value = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow or dt is bool_:
        return False
    if dt.is_floating_point or dt.itemsize == 8:
        return True
    bits = 8 * dt.itemsize
    if dt.is_signed:
        return -(1LL << (bits - 1)) <= value < (1LL << (bits - 1))
    return 0 <= value < (1LL << bits)


cdef inline bint _exact_number(object x):
    """A Python float, or an int that a double holds exactly (bool is not a number here)."""
    return type(x) is float or (type(x) is int and -_EXACT_INT <= <object>x <= _EXACT_INT)


cdef void _load_geometry(TensorBase t, int ndim, Py_ssize_t* shape, Py_ssize_t* strides):
    """``t``'s strides (and sizes, unless ``shape`` is NULL) right-aligned to ``ndim``
    dims, with stride 0 for missing leading dims and size-1 dims, so that ``t`` reads as
    broadcast to any shape it broadcasts to."""
    cdef int lead = ndim - len(t._sizes), i
    cdef Py_ssize_t size
    for i in range(lead):
        strides[i] = 0
    for i in range(len(t._sizes)):
        size = t._sizes[i]
        strides[lead + i] = 0 if size == 1 else <Py_ssize_t>t._strides[i]
        if shape != NULL:
            shape[lead + i] = size


cdef char* _operand(object value, bint tensor, bint flat, int ndim, Py_ssize_t* strides,
                    double* number) except? NULL:
    """A binary operand's data and strides: a tensor's own (loaded unless ``flat``), or
    for a number, its value in ``number`` and stride 0 everywhere (NULL data: the caller
    points it at the number in the result's dtype)."""
    if tensor:
        if not flat:
            _load_geometry(<TensorBase>value, ndim, NULL, strides)
        return _ptr(<TensorBase>value)
    number[0] = value
    memset(strides, 0, max(ndim, 1) * sizeof(Py_ssize_t))
    return NULL


cdef object _binary(object left, object right, char opcode, str name):
    """``left <op> right`` in C when both are float32/float64 CPU tensors of one dtype
    (broadcast, any strides) or one is such a tensor and the other a Python number (rounded
    to the tensor's dtype first, as PyTorch does).  When an operand requires grad, autograd
    then only attaches its node to the result.  Anything else takes the registered op."""
    cdef TensorBase ta, tb, out
    cdef Py_ssize_t shape[MAX_DIMS]
    cdef Py_ssize_t out_strides[MAX_DIMS]
    cdef Py_ssize_t a_strides[MAX_DIMS]
    cdef Py_ssize_t b_strides[MAX_DIMS]
    cdef double number_f64[1]
    cdef float number_f32[1]
    cdef int ndim
    cdef char* a_ptr
    cdef char* b_ptr
    cdef char* number
    cdef bint left_tensor = _float_cpu(left), right_tensor = _float_cpu(right), flat
    if left_tensor and right_tensor and (<TensorBase>left)._dtype is (<TensorBase>right)._dtype:
        ta, tb = <TensorBase>left, <TensorBase>right
        flat = ta._sizes == tb._sizes and ta._is_contig and tb._is_contig
        if not flat:
            sizes = meta.broadcast_pair(ta._sizes, tb._sizes)
            strides = meta.elementwise_output_strides(
                sizes, ((ta._sizes, ta._strides), (tb._sizes, tb._strides)))
    elif (left_tensor and _exact_number(right)) or (right_tensor and _exact_number(left)):
        ta = tb = <TensorBase>(left if left_tensor else right)
        flat = ta._is_contig
        if not flat:
            sizes = ta._sizes
            strides = meta.elementwise_output_strides(sizes, ((sizes, ta._strides),))
    else:
        return _dispatch_binary(name, left, right)
    if flat:   # every tensor operand contiguous with the result's sizes: one flat loop
        sizes = ta._sizes
        strides = ta._strides if _canonical(sizes, ta._strides) else _contiguous_strides(sizes)
        ndim = 1
        shape[0] = ta._numel
        out_strides[0] = a_strides[0] = b_strides[0] = 1
    else:
        ndim = len(sizes)
    out = _new_tensor(_tensor_cls, _cpu_storage(sizes, ta._dtype), sizes, strides, 0,
                      ta._dtype)
    if not flat:
        _load_geometry(out, ndim, shape, out_strides)
    number_f64[0] = 0
    a_ptr = _operand(left, left_tensor, flat, ndim, a_strides, number_f64)
    b_ptr = _operand(right, right_tensor, flat, ndim, b_strides, number_f64)
    if not (left_tensor and right_tensor):
        number_f32[0] = <float>number_f64[0]
        number = <char*>number_f32 if ta._dtype.typenum == cnp.NPY_FLOAT else <char*>number_f64
        if not left_tensor:
            a_ptr = number
        else:
            b_ptr = number
    kernels.binary_raw(opcode, ta._dtype.typenum, ndim, shape, _ptr(out), out_strides, a_ptr,
                       a_strides, b_ptr, b_strides)
    if not mt_grad_disabled and (needs_grad(ta) or needs_grad(tb)):
        return _attach_node(_recorded_ops[name], (left, right), None, out)
    return out


_EXACT_INT = 1 << 53
_SUM_KEYWORDS = frozenset(("dim", "keepdim"))
_SMALL_REDUCTION = 1 << 16   # elements; above it NumPy's row-wise reductions are faster


cdef bint _reduced_dims(object dim, int ndim, bint* reduced) except -1:
    """Flag the dims named by ``dim`` (an int, or a non-empty tuple or list of distinct
    ints) in ``reduced``; False for anything else (the registered op then decides)."""
    cdef int d
    for d in range(ndim):
        reduced[d] = False
    if type(dim) is int:
        dim = (dim,)
    elif not (type(dim) is tuple or type(dim) is list) or not dim:
        return False
    for value in dim:
        if type(value) is not int or ndim == 0:
            return False
        d = _wrap_dim(value, ndim)
        if reduced[d]:
            return False
        reduced[d] = True
    return True


def pointwise_fast(ufunc, tuple operands, dtype result_dtype, dtype compute_dtype):
    """``ufunc`` over ``operands`` into a fresh result, when no type promotion is needed:
    CPU tensors of one dtype, with Python numbers that do not promote it (an int beside a
    non-bool dtype, a float beside a floating one).  The result has ``result_dtype`` (None:
    the operands'), NumPy computes in ``compute_dtype`` (None: the result's), and the
    layout follows PyTorch's rule for elementwise outputs.  None when the operands do not
    qualify (``ops.loops.pointwise`` then promotes and checks devices in Python)."""
    cdef TensorBase first = None, t
    cdef bint alike = True
    cdef list layouts = None
    for x in operands:
        if isinstance(x, TensorBase):
            t = <TensorBase>x
            if t._storage.device is not cpu:
                return None
            if first is None:
                first = t
            elif t._dtype is not first._dtype:
                return None
            elif t._sizes != first._sizes or not t._is_contig:
                alike = False
        elif not (type(x) is int or type(x) is float):
            return None
    if first is None or not first._is_contig:
        alike = False
    for x in operands:
        if (type(x) is float and not first._dtype.is_floating_point) or \
                (type(x) is int and not _int_fits(x, first._dtype)):
            return None
    if alike:
        sizes, strides = first._sizes, _contiguous_strides(first._sizes)
    else:
        sizes = ()
        layouts = []
        for x in operands:
            if isinstance(x, TensorBase):
                t = <TensorBase>x
                sizes = meta.broadcast_pair(sizes, t._sizes)
                layouts.append((t._sizes, t._strides))
        strides = meta.elementwise_output_strides(sizes, layouts)
    if result_dtype is None:
        result_dtype = first._dtype
    out = _new_tensor(_tensor_cls, _cpu_storage(sizes, result_dtype), sizes, strides,
                      0, result_dtype)
    if out._numel:
        arrays = [_ndarray_view(<TensorBase>x) if isinstance(x, TensorBase) else x
                  for x in operands]
        ufunc(*arrays, out=_ndarray_view(out),
              dtype=compute_numpy(compute_dtype if compute_dtype is not None else result_dtype),
              casting="unsafe")
    return out


# --------------------------------------------------------------------------- construction

cdef inline char* _ptr(TensorBase t):
    return <char*>cnp.PyArray_DATA(<cnp.ndarray>t._storage.data) + t._offset * t._dtype.itemsize


cdef TensorBase _new_tensor(object cls, Storage storage, tuple sizes, tuple strides,
                            Py_ssize_t offset, dtype dt):
    cdef TensorBase t
    if len(sizes) > MAX_DIMS:
        raise RuntimeError(f"tensors may have at most {MAX_DIMS} dimensions, got {len(sizes)}")
    t = <TensorBase>_alloc_tensor(cls, <PyObject*>_NO_ARGS, NULL)
    t._storage = storage
    t._sizes = sizes
    t._strides = strides
    t._offset = offset
    t._dtype = dt
    t._numel = _numel(sizes)
    t._is_contig = _contiguous(sizes, strides)
    return t


cdef object _cpu_buffer(Py_ssize_t numel, dtype dt):
    """A fresh 1-D array of ``numel`` elements; ``numel * itemsize`` must be known to fit in
    int64 (checked by the caller), so NumPy can only fail for want of memory."""
    cdef cnp.npy_intp n = numel
    try:
        return cnp.PyArray_EMPTY(1, &n, dt.typenum, 0)
    except MemoryError:
        raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to "
                           f"allocate {numel * dt.itemsize} bytes.") from None


cdef Storage _cpu_storage(tuple sizes, dtype dt):
    """A fresh CPU storage for a contiguous tensor of ``sizes``: the one product of the
    sizes and the itemsize is checked before anything is allocated."""
    cdef Storage storage = <Storage>_alloc_storage(Storage, <PyObject*>_NO_ARGS, NULL)
    storage.data = _cpu_buffer(meta.check_storage_nbytes(sizes, dt.itemsize) // dt.itemsize, dt)
    storage.device = cpu
    return storage


cdef TensorBase _empty_with_strides(TensorBase t, tuple strides):
    """A fresh CPU tensor with ``t``'s sizes and dtype and the given dense strides."""
    return _new_tensor(_tensor_cls, _cpu_storage(t._sizes, t._dtype), t._sizes, strides, 0,
                       t._dtype)


cdef inline bint _canonical(tuple sizes, tuple strides):
    """Whether contiguous ``strides`` are exactly the ones PyTorch would give ``sizes``."""
    cdef Py_ssize_t expected = 1, i
    for i in range(len(sizes) - 1, -1, -1):
        if <Py_ssize_t>strides[i] != expected or \
                mt_tensor_mul_overflow(expected, max(<Py_ssize_t>sizes[i], 1), &expected):
            return False  # an overflowing product (beside a 0 size) matches no stride
    return True


def wrap_storage(Storage storage, tuple sizes, tuple strides, Py_ssize_t offset, dtype dt,
                 cls=None):
    """A tensor over ``storage`` (bounds-checked): how factories and kernels build results."""
    _check_geometry(storage, sizes, strides, offset, dt.itemsize)
    return _new_tensor(_tensor_cls if cls is None else cls, storage, sizes, strides, offset, dt)


def without_dim(TensorBase value, Py_ssize_t dim, cls):
    """A ``cls`` tensor over ``value``'s memory with dim ``dim`` left out (the elements at
    index 0 of that dim, so inside ``value``'s extent: no bounds check is needed).  This is
    how vmap sees one sample of a batched value."""
    if not 0 <= dim < len(value._sizes):
        raise IndexError(f"without_dim: dim {dim} of a {len(value._sizes)}-d tensor")
    return _new_tensor(cls, value._storage, value._sizes[:dim] + value._sizes[dim + 1:],
                       value._strides[:dim] + value._strides[dim + 1:], value._offset,
                       value._dtype)


def empty_contiguous(tuple sizes, dtype dt, device dev=cpu):
    """A fresh tensor with contiguous strides; ``sizes`` must already be validated."""
    return empty_strided_unchecked(sizes, _contiguous_strides(sizes), dt, dev)


def empty_strided_unchecked(tuple sizes, tuple strides, dtype dt, device dev=cpu):
    """A fresh tensor with exactly ``strides``; storage sized to what the strides reach,
    that extent checked for overflow (and negative strides refused) first.  "Unchecked":
    the strides are taken as given (the callers compute dense ones), not tested for
    overlap."""
    _numel(sizes)  # PyTorch refuses these sizes even when the extent is fine (a 0 size)
    if _contiguous(sizes, strides):  # dense factories: PyTorch's message names the sizes only
        meta.check_storage_nbytes(sizes, dt.itemsize)
    cdef Py_ssize_t n = meta.storage_size_for(sizes, strides, dt.itemsize)
    if dev.type == "cpu":
        data = _cpu_buffer(n, dt)
    else:
        from microtensor.backends import cuda
        dev = cuda.resolve_device(dev)
        data = cuda.empty_buffer(n, dt.np, dev)
    cdef Storage storage = <Storage>_alloc_storage(Storage, <PyObject*>_NO_ARGS, NULL)
    storage.data = data
    storage.device = dev
    return _new_tensor(_tensor_cls, storage, sizes, strides, 0, dt)


def from_array(arr, dev=None):
    """A tensor sharing ``arr``'s memory (zero-copy; strides must be non-negative multiples
    of the item size).  Arrays with other strides are copied first."""
    cdef dtype dt = dtype_from_numpy(arr.dtype)
    cdef Py_ssize_t item = dt.itemsize
    if arr.flags.c_contiguous:   # the common case: a kernel's fresh result
        sizes = tuple(arr.shape)
        return _new_tensor(_tensor_cls, Storage(arr.reshape(-1), cpu), sizes,
                           _contiguous_strides(sizes), 0, dt)
    if any(s < 0 or s % item for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    strides = tuple(s // item for s in arr.strides)
    sizes = tuple(arr.shape)
    # the storage is a flat view of the whole span the array reaches, starting at its first element
    extent = 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) if arr.size else 0
    flat = np.lib.stride_tricks.as_strided(arr, shape=(extent,), strides=(item,)) \
        if arr.size else np.empty(0, dt.np)
    return _new_tensor(_tensor_cls, Storage(flat, cpu), sizes, strides, 0, dt)


cdef object _ndarray_view(TensorBase t):
    cdef int nd = len(t._sizes), i
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef cnp.npy_intp strides[MAX_DIMS]
    cdef Py_ssize_t item = t._dtype.itemsize
    for i in range(nd):
        dims[i] = t._sizes[i]
        strides[i] = _byte_stride(t._strides[i], item)
    cdef cnp.dtype descr = cnp.PyArray_DescrFromType(t._dtype.typenum)
    Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
    # a storage over read-only memory (a read-only array given to from_numpy) stays
    # read-only, so writes raise instead of touching memory nobody may write
    cdef int flags = cnp.NPY_ARRAY_WRITEABLE \
        if cnp.PyArray_ISWRITEABLE(<cnp.ndarray>t._storage.data) else 0
    try:
        arr = PyArray_NewFromDescr(<PyTypeObject*>np.ndarray, descr, nd, dims, strides,
                                   <void*>_ptr(t), flags, None)
    except ValueError:  # a broadcast tensor can have more elements than NumPy can count
        raise RuntimeError(f"a tensor of {t._numel} elements of {item} bytes is too large "
                           f"to be viewed as a NumPy array") from None
    Py_INCREF(t._storage.data)  # PyArray_SetBaseObject steals a reference
    cnp.PyArray_SetBaseObject(<cnp.ndarray>arr, t._storage.data)
    return arr


cdef object _cuda_array_view = None


cdef object _device_view(TensorBase t):
    """The backend's strided array over a GPU tensor (``backends.cuda.array_view``)."""
    global _cuda_array_view
    if _cuda_array_view is None:
        from microtensor.backends.cuda import array_view
        _cuda_array_view = array_view
    return _cuda_array_view(t)


# --------------------------------------------------------------------------- checks



cdef inline Py_ssize_t _wrap_dim(object dim, Py_ssize_t ndim) except? -1:
    cdef Py_ssize_t d
    cdef Py_ssize_t n = ndim if ndim > 0 else 1
    if type(dim) is not int:
        return meta.wrap_dim(dim, ndim)  # NumPy ints accepted, floats and bools refused
    d = dim
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {d})")
    return d + n if d < 0 else d


cdef Py_ssize_t _int64_geometry(tuple strides, object offset) except? -1:
    """``offset``, once it and every stride are known to fit in int64 (RuntimeError if not:
    a stride times a huge step, say, that PyTorch would let wrap)."""
    for value in strides + (offset,):
        if not -_INT64_LIMIT <= value < _INT64_LIMIT:
            raise RuntimeError(f"stride or storage offset {value} of a view does not fit in "
                               f"int64 (strides {list(strides)}, storage offset {offset})")
    return offset


_INT64_LIMIT = 1 << 63


cdef _check_geometry(Storage storage, tuple sizes, tuple strides, Py_ssize_t offset,
                     Py_ssize_t itemsize):
    """Refuse any geometry that reaches outside ``storage`` (before memory is touched)."""
    cdef Py_ssize_t n = len(sizes), i, size, stride, extent = 1
    if n != len(strides):
        raise RuntimeError(f"mismatch in length of strides and shape: sizes {list(sizes)} "
                           f"has {n} dims but strides {list(strides)} has {len(strides)}")
    if n > MAX_DIMS:
        raise RuntimeError(f"tensors may have at most {MAX_DIMS} dimensions, got {n}")
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    for i in range(n):
        size = sizes[i]
        stride = strides[i]
        if size < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {size}: "
                               f"{list(sizes)}")
        if stride < 0:
            raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, "
                               f"got strides: {list(strides)}")
    for i in range(n):
        if <Py_ssize_t>sizes[i] == 0:
            return
    cdef object need = offset + 1
    for i in range(n):
        need += (sizes[i] - 1) * strides[i]      # Python ints: cannot overflow
    if need > storage.data.shape[0]:
        raise RuntimeError(
            f"setStorage: sizes {list(sizes)}, strides {list(strides)}, storage offset "
            f"{offset}, and itemsize {itemsize} requiring a storage size of "
            f"{need * itemsize} are out of bounds for storage of size "
            f"{storage.data.shape[0] * itemsize}")
