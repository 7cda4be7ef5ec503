# cython: freethreading_compatible = False
"""The tensor object: dtypes, devices, Storage and TensorBase.

This is the only module that turns (storage, sizes, strides, storage offset) into memory
access.  A ``TensorBase`` is pure metadata over a ``Storage`` (a flat 1-D array plus the
version counter that every view of it shares).  Every geometry over an existing storage
is made here, so no view can ever touch foreign memory: ``_make_view``, ``wrap_storage``
and ``_set_geometry`` refuse a geometry that would reach outside the storage; the
``_unchecked`` variants (and ``without_dim``) take geometries derived from an in-bounds
tensor's own, which reach only its elements, and refuse only values past int64.

Everything an op *does* lives elsewhere: ``microtensor.ops`` declares the ops and
``microtensor.ops.dispatch`` routes a call through vmap and autograd to the op's kernel.
The number slots here (``+``, ``*``, ...) and a few hot methods run a C fast path when no
transform or gradient is involved, and otherwise hand the call to that dispatcher; the fast
paths live in ``fast_paths.pxi``, which this module includes (same C module, no call cost).
"""
cimport cython
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject, newfunc
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.contextvars cimport PyContextVar_Reset, PyContextVar_Set, get_value
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
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
        self.kind = kind
        self.is_floating_point = kind == 2
        self.is_complex = kind == 3
        self.is_signed = kind != 0
        if isinstance(npdtype, _dtype_table.OptionalStorage):
            self._optional = npdtype
            self.itemsize = npdtype.itemsize
            self.typenum = cnp.NPY_NOTYPE
        else:
            _store_as(self, npdtype)

    @property
    def np(self):
        """The NumPy type of the storage: every array of this dtype is made with it, so
        this is where a dtype whose package is not installed refuses (``storage_numpy``)."""
        return storage_numpy(self)

    def __repr__(self):
        return "microtensor." + self.name

    def __reduce__(self):
        return self.name

    def to_complex(self):
        """The complex dtype whose parts are this floating dtype (complex ones stay)."""
        if self.is_complex:
            return self
        if self is float64:
            return complex128
        if self is float32 or self is bfloat16:     # (bfloat16 as PyTorch's)
            return complex64
        if self is float16:
            raise NotImplementedError("microtensor has no complex32 (chalf)")
        raise RuntimeError("Unknown Complex ScalarType for "
                           + _dtype_table.BY_NAME[self.name].scalar_name)

    def to_real(self):
        """The floating dtype of a complex dtype's parts (other dtypes stay)."""
        if self is complex128:
            return float64
        if self is complex64:
            return float32
        return self


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
complex64 = DTYPES["complex64"]
complex128 = DTYPES["complex128"]
cdef dict _dtype_by_np = {(<dtype>d)._np: d for d in DTYPES.values()
                          if (<dtype>d)._np is not None}


cdef _store_as(dtype dt, npdtype):
    """Give ``dt`` its NumPy storage type."""
    dt._np = np.dtype(npdtype)
    dt.itemsize = dt._np.itemsize
    dt.is_signed = dt.kind != 0 and dt._np.kind != "u"
    dt.typenum = dt._np.num


cpdef object storage_numpy(dtype dt):
    """``dt``'s NumPy storage type, for making its arrays.  A dtype from an optional package
    (bfloat16 from ``ml_dtypes``) imports it here, when its first array is made; if the
    package is missing this raises ImportError, before anything is allocated: the failure
    is a missing package, as for microtensor's other optional extras (``save_safetensors``
    without ``safetensors``), so code that handles absent extras catches one exception
    type; the dtype object itself exists regardless, so code that merely names it
    imports."""
    if dt._np is None:
        _store_as(dt, dt._optional.load())
        dt._optional = None
        _dtype_by_np[dt._np] = dt
    return dt._np

cdef dtype _default_float = float32


def get_default_dtype():
    return _default_float


def set_default_dtype(dtype d):
    global _default_float
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    storage_numpy(d)     # refuse a default whose tensors could not be made, changing nothing
    _default_float = d


def dtype_from_numpy(npdtype):
    """The microtensor dtype storing ``npdtype``; TypeError for types microtensor lacks."""
    npdtype = np.dtype(npdtype)
    d = _dtype_by_np.get(npdtype)
    if d is None:
        optional = DTYPES.get(npdtype.name)
        if optional is not None and (<dtype>optional)._np is None:
            storage_numpy(optional)   # an array of its type exists: its package is there
            d = _dtype_by_np.get(npdtype)
    if d is None:
        names = [name for name in DTYPES if name != "bool"]
        raise TypeError(f"can't convert np.ndarray of type {np.dtype(npdtype)}. The only "
                        f"supported types are: {', '.join(names)}, and bool.")
    return d


cpdef object compute_numpy(dtype dt):
    """The NumPy type elementwise kernels compute ``dt`` in: float16 and bfloat16 compute
    in float32 and round once into the result, as PyTorch's CPU kernels do."""
    if dt.is_floating_point and dt.itemsize == 2:
        return (<dtype>float32)._np
    return storage_numpy(dt)


# --------------------------------------------------------------------------- devices

cdef class device:
    """Where a tensor's storage lives: ``device("cpu")``, ``device("cuda", 0)`` or
    ``device("meta")`` (sizes and strides without data, ``backends.meta``)."""

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
        if text not in ("cpu", "cuda", "meta"):
            raise RuntimeError(f"Expected one of cpu, cuda, meta device type at start of "
                               f"device string: {type_or_str}")
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

    def __reduce__(self):
        # copying and pickling give back the ``cpu`` singleton, which the fast paths test
        # storages for by identity (a copied model must not fall off them)
        return _device_of, (self.type, self.index)


cpu = device("cpu")


def _device_of(type, index):
    """The device of ``type`` and ``index``: ``cpu`` itself for the CPU."""
    return cpu if type == "cpu" and index is None else device(type, index)


class NoDataError(NotImplementedError):
    """A kernel asked for the elements of a meta tensor (``backends.meta``), which has none;
    the dispatcher answers it with the result's geometry alone."""


# --------------------------------------------------------------------------- storage

@cython.auto_pickle(False)  # no __setstate_cython__: nothing may set the fields to None
@cython.freelist(64)        # every fresh tensor makes one: freed ones are reused
cdef class Storage:
    """A flat buffer shared by a tensor and all its views, with their shared version counter.

    ``data`` is a 1-D array of the element type (a NumPy array on the CPU; the CUDA backend
    stores a CuPy array).  ``version`` counts in-place writes; autograd compares it with
    the value it saw when it saved a tensor.  ``inference``: made inside inference mode,
    so every tensor over it is an inference tensor.
    """

    def __init__(self, data, device dev=cpu):
        self.data = data
        self.device = dev
        self.version = 0

    def nbytes(self):
        return self.data.nbytes

    def _replace_data(self, data):
        """Swap the buffer for ``data`` (1-D, the same element type): a storage that grows
        (``resize_``) or moves into shared memory (``share_memory_``) stays the one object
        that every tensor over it holds, as PyTorch's storage does."""
        self.data = data

    def size(self):
        """The size in bytes, as PyTorch's ``UntypedStorage.size()``."""
        return self.data.nbytes

    def data_ptr(self):
        if self.device.type == "cpu":
            return self.data.ctypes.data
        if self.device.type == "meta":
            return 0   # as PyTorch: a meta storage has no memory
        return self.data.data.ptr

    def __len__(self):
        return self.data.nbytes

    # PyTorch's ``UntypedStorage`` API: the storage seen as bytes (``microtensor.storage``
    # builds storages and the typed view, ``TypedStorage``, on these)

    def element_size(self):
        return 1

    def untyped(self):
        return self

    def _bytes(self):
        """The storage's memory as a 1-D array of bytes (zero-copy)."""
        if self.device.type == "meta":
            raise NotImplementedError("Cannot access the bytes of a meta storage")
        return self.data.view("uint8")

    def _byte_index(self, idx):
        n = self.data.nbytes
        if not isinstance(idx, int):
            raise TypeError(f"can't index a {type(self).__name__} with "
                            f"{type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"index {idx} out of range for storage of size {n}")
        return idx + n if idx < 0 else idx

    def __getitem__(self, idx):
        return int(self._bytes()[self._byte_index(idx)])

    def __setitem__(self, idx, value):
        self._bytes()[self._byte_index(idx)] = int(value) % 256
        self.version += 1

    def tolist(self):
        return [int(b) for b in self._bytes().tolist()]

    def fill_(self, value):
        self._bytes().fill(int(value) % 256)
        self.version += 1
        return self

    def __repr__(self):
        return (f"[microtensor.storage.UntypedStorage(device={self.device}) of size "
                f"{self.data.nbytes}]")

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


# A freelist of ``microtensor.Tensor`` objects.  Every op and view makes a tensor, and for a
# Python-level class CPython's allocator (``PyType_GenericAlloc``: a pymalloc block, a
# memset, the collector's bookkeeping) and ``PyObject_GC_Del`` are a fifth of a tiny view's
# cost; a freed tensor is kept instead and reinitialised as ``PyType_GenericAlloc`` would.
# By then the collector has untracked it (its GC header is clear) and ``subtype_dealloc``
# has released its attribute dict and the type reference that ``PyObject_Init`` takes
# back (for ``Tensor`` itself a shorter deallocator below does the same).  What CPython keeps in front of the object for the
# attribute dict (two pointers) is laid out this way in CPython 3.11 and 3.12 only, and a
# build without the GIL would need a list per thread: elsewhere tensors keep CPython's
# allocator.
cdef extern from *:
    """
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
    #define MT_TENSOR_FREELIST_SIZE 256
    static PyTypeObject *mt_freelist_type = NULL;
    static PyObject *mt_freelist[MT_TENSOR_FREELIST_SIZE];
    static int mt_freelist_count = 0;

    static PyObject *mt_freelist_alloc(PyTypeObject *type, Py_ssize_t nitems) {
        if (type == mt_freelist_type && mt_freelist_count > 0) {
            PyObject *o = mt_freelist[--mt_freelist_count];
            ((void **)o)[-1] = NULL;  /* the GC header: untracking keeps the "finalized" */
            ((void **)o)[-2] = NULL;  /* flag, which would skip a reused object's __del__ */
            ((void **)o)[-3] = NULL;  /* the managed dict */
            ((void **)o)[-4] = NULL;  /* its inline values */
            memset(o, 0, (size_t)type->tp_basicsize);
            PyObject_Init(o, type);
            PyObject_GC_Track(o);
            return o;
        }
        return PyType_GenericAlloc(type, nitems);
    }

    static void mt_freelist_free(void *p) {
        PyObject *o = (PyObject *)p;
        if (Py_TYPE(o) == mt_freelist_type && mt_freelist_count < MT_TENSOR_FREELIST_SIZE) {
            mt_freelist[mt_freelist_count++] = o;
            return;
        }
        PyObject_GC_Del(p);
    }

    /* What CPython's ``subtype_dealloc`` does for a tensor, shortened: run a finalizer if
       the class has one, drop the attribute dict if there is one (made from the inline
       values first, so that one reference releases everything), let the base's
       deallocator untrack the object and clear its weak references and fields, then drop
       the type reference.  The trashcan defers deep chains of frees (a tensor whose
       attribute holds a tensor ...).  A subclass keeps ``subtype_dealloc``, which calls
       this as its base's deallocator: then only the base's part runs. */
    static destructor mt_base_dealloc;

    static void mt_drop_attributes(PyObject *o) {
        PyObject *dict = PyObject_GenericGetDict(o, NULL);
        if (dict == NULL) {
            PyErr_WriteUnraisable(o);
            return;
        }
        Py_DECREF(dict);  /* the object still holds it */
        ((void **)o)[-3] = NULL;
        ((void **)o)[-4] = NULL;
        Py_DECREF(dict);
    }

    static void mt_tensor_dealloc(PyObject *o) {
        PyTypeObject *type = Py_TYPE(o);
        if (type != mt_freelist_type) {
            /* a subclass's ``subtype_dealloc`` leaves the type reference to this, its
               nearest base with another deallocator, as it does to any static base */
            mt_base_dealloc(o);
            Py_DECREF(type);
            return;
        }
        if (type->tp_finalize != NULL && PyObject_CallFinalizerFromDealloc(o) < 0)
            return;  /* resurrected */
        PyObject_GC_UnTrack(o);
        Py_TRASHCAN_BEGIN(o, mt_tensor_dealloc)
        if (((void **)o)[-3] != NULL || ((void **)o)[-4] != NULL)
            mt_drop_attributes(o);
        mt_base_dealloc(o);
        Py_DECREF(type);
        Py_TRASHCAN_END
    }

    /* Serve ``type``'s objects (exactly: its subclasses keep CPython's slots) from the
       freelist, when its layout is the one described above. */
    static int mt_use_freelist(PyTypeObject *type, PyTypeObject *base) {
        unsigned long layout = Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_MANAGED_DICT;
        if (type->tp_basicsize != base->tp_basicsize || (type->tp_flags & layout) != layout
                || type->tp_weaklistoffset != base->tp_weaklistoffset
                || type->tp_base != base)
            return 0;
        mt_freelist_type = type;
        mt_base_dealloc = base->tp_dealloc;
        type->tp_alloc = mt_freelist_alloc;
        type->tp_free = mt_freelist_free;
        type->tp_dealloc = mt_tensor_dealloc;
        PyType_Modified(type);
        return 1;
    }

    /* A subclass of the served class gets its ``tp_free`` (which frees the subclass's
       objects as CPython does): CPython lets ``__class__`` move an object between two
       classes only when their ``tp_free`` is the same. */
    static void mt_share_free(PyTypeObject *type) {
        if (mt_freelist_type != NULL && type->tp_free == PyObject_GC_Del) {
            type->tp_free = mt_freelist_free;
            PyType_Modified(type);
        }
    }
    #else
    static int mt_use_freelist(PyTypeObject *type, PyTypeObject *base) { return 0; }
    static void mt_share_free(PyTypeObject *type) { }
    #endif
    """
    bint mt_use_freelist(PyTypeObject* type, PyTypeObject* base)
    void mt_share_free(PyTypeObject* type)


def share_tensor_free(type cls):
    """Called for every subclass of ``Tensor`` (``Tensor.__init_subclass__``, and at install
    for those made before): see ``mt_share_free``."""
    mt_share_free(<PyTypeObject*>cls)
    for subclass in cls.__subclasses__():
        share_tensor_free(subclass)


cdef object _NO_DATA = np.empty(0, np.float32)  # what a Storage holds before __init__


cdef object _python_storage_new(type cls, PyObject* args, PyObject* kwargs):
    """``Storage.__new__`` from Python: an empty CPU storage (``__init__`` then sets it)."""
    cdef Storage storage = <Storage>_alloc_storage(cls, <PyObject*>_NO_ARGS, NULL)
    storage.data = _NO_DATA
    storage.device = cpu
    storage.inference = mt_inference_mode
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


# NumPy's floating-point error state.  PyTorch's kernels are silent (log(0) is -inf, 1/0
# inf, with no warning), so ops run with NumPy's errors ignored: set here around each op
# call (``silence_numpy``/``restore_numpy``), not globally, so that the user's own NumPy
# code keeps its warnings.  NumPy 2 keeps the state in a context variable (set and reset
# in C, about 0.05 us); NumPy 1 in a per-thread error object.
cdef object _numpy_errors = None    # NumPy 2's context variable of the error state
cdef object _numpy_geterrobj = None  # NumPy 1's accessors of the thread's error object
cdef object _numpy_seterrobj = None
cdef object _errors_ignored = None  # the state with every floating-point error ignored

try:
    from numpy._core.umath import _extobj_contextvar as _numpy_errors
    with np.errstate(all="ignore"):
        _errors_ignored = _numpy_errors.get()
except ImportError:
    from numpy.core.umath import geterrobj as _numpy_geterrobj, seterrobj as _numpy_seterrobj
    with np.errstate(all="ignore"):
        _errors_ignored = _numpy_geterrobj()


cdef object silence_numpy():
    """Ignore NumPy's floating-point errors until ``restore_numpy(token)``.  The token is
    None (nothing to restore) when they are ignored already: for an op called by an op,
    or by the engine, a read of the variable is all it costs."""
    if _numpy_errors is not None:
        if get_value(_numpy_errors) is _errors_ignored:
            return None
        return PyContextVar_Set(_numpy_errors, _errors_ignored)
    token = _numpy_geterrobj()
    _numpy_seterrobj(_errors_ignored)
    return token


cdef int restore_numpy(object token) except -1:
    if token is None:
        return 0
    if _numpy_errors is not None:
        return PyContextVar_Reset(_numpy_errors, token)
    _numpy_seterrobj(token)
    return 0


# Inference mode, a C thread-local as grad mode: each new storage copies it (one store, no
# test), which makes the tensors over a storage made in the mode inference tensors, and
# their views too, while views made in the mode of a normal tensor stay normal.
cdef extern from *:
    """
    static __thread int mt_inference_mode = 0;
    """
    int mt_inference_mode


def is_inference_mode_enabled():
    return bool(mt_inference_mode)


cdef bint inference_mode_enabled() noexcept:
    return mt_inference_mode


cpdef set_inference_mode(bint enabled):
    global mt_inference_mode
    mt_inference_mode = enabled


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
        return self._sizes[_wrap_dim_of_sizes(dim, self._sizes)]

    def stride(self, dim=None):
        if dim is None:
            return self._strides
        return self._strides[_wrap_dim_of_sizes(dim, self._sizes)]

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

    @property
    def is_meta(self):
        return self._storage.device.type == "meta"

    def untyped_storage(self):
        return self._storage

    def data_ptr(self):
        return self._storage.data_ptr() + self._offset * self._dtype.itemsize

    @property
    def _version(self):
        if self._storage.inference:
            raise RuntimeError("Inference tensors do not track version counter.")
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
        return self._view_fast(sizes, strides, _int64_geometry(strides, offset), _numel(sizes),
                               -1)

    def _make_dtype_view(self, dtype dt, tuple sizes, tuple strides, Py_ssize_t offset):
        """A view (``_base`` set) reading this tensor's storage as ``dt``, its geometry in
        ``dt``'s elements (``view_as_real``: a complex tensor read as float pairs),
        bounds-checked."""
        _check_geometry(self._storage, sizes, strides, offset, dt.itemsize)
        cdef TensorBase view = self._make_view_unchecked(sizes, strides, offset)
        view._dtype = dt
        return view

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

    def _set_storage(self, Storage storage, tuple sizes, tuple strides, Py_ssize_t offset,
                     dtype dt=None):
        """Point this tensor at another storage (``set_``/``data`` swaps), with dtype ``dt``
        (default: its own), bounds-checked first."""
        if dt is None:
            dt = self._dtype
        _check_geometry(storage, sizes, strides, offset, dt.itemsize)
        self._dtype = dt
        self._storage = storage
        self._set_geometry(sizes, strides, offset)

    # ---------------------------------------------------------------- fast paths
    # The number slots and hot methods run their C fast path (fast_paths.pxi) for plain
    # tensors, and otherwise the registered op through the dispatcher.
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

    def __matmul__(a, b):
        return _fast_matmul(a, b)

    def __rmatmul__(a, b):
        return _dispatch_call("matmul", b, a)

    def __getitem__(self, index):
        return _fast_getitem(self, index)

    def t(self):
        return _fast_t(self)

    def transpose(self, dim0, dim1):
        return _fast_transpose(self, dim0, dim1)

    def unsqueeze(self, dim):
        return _fast_unsqueeze(self, dim)

    # binding=False: a method descriptor takes ``*shape`` as a tuple without repacking
    @cython.binding(False)
    def view(self, *shape):
        result = _reshaped_view(self, shape)
        return result if result is not None else _dispatch_call("view", self, *shape)

    @cython.binding(False)
    def reshape(self, *shape):
        # a view whenever the strides allow one: the same as ``view`` (else the op copies)
        result = _reshaped_view(self, shape)
        return result if result is not None else _dispatch_call("reshape", self, *shape)

    def expand(self, *sizes):
        return _fast_expand(self, sizes)

    def as_strided(self, size, stride, storage_offset=None):
        return _fast_as_strided(self, size, stride, storage_offset)

    def clone(self, *, memory_format=None):
        return _fast_clone(self, memory_format)

    def contiguous(self, memory_format=None):
        return _fast_contiguous(self, memory_format)

    def sum(self, *args, **kwargs):
        return _fast_sum(self, args, kwargs)

    cdef TensorBase _view_fast(self, tuple sizes, tuple strides, Py_ssize_t offset,
                               Py_ssize_t numel, int contiguous):
        """A view of this tensor's storage with ``numel`` elements (the product of
        ``sizes``, which the caller knows: most views keep their base's); ``contiguous`` is
        1 or 0 when the caller knows whether the view is contiguous, -1 to compute it."""
        cdef TensorBase t = _tensor_with_numel(_tensor_cls, self._storage, sizes, strides,
                                               offset, self._dtype, numel, contiguous)
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


include "fast_paths.pxi"


cdef inline Py_ssize_t _byte_stride(Py_ssize_t stride, Py_ssize_t itemsize) noexcept:
    """A stride in bytes.  Only a dim that is never stepped (size 0 or 1) can have a stride
    whose byte count overflows (a stepped one stays inside an allocation); it gets 0, which
    reaches the same elements."""
    cdef Py_ssize_t result
    if mt_tensor_mul_overflow(stride, itemsize, &result):
        return 0
    return result


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


# --------------------------------------------------------------------------- construction

cdef inline char* _ptr(TensorBase t):
    return <char*>cnp.PyArray_DATA(<cnp.ndarray>t._storage.data) + t._offset * t._dtype.itemsize


cdef inline int _check_ndim(tuple sizes) except -1:
    if len(sizes) > MAX_DIMS:
        raise RuntimeError(f"tensors may have at most {MAX_DIMS} dimensions, got {len(sizes)}")
    return 0


cdef TensorBase _new_tensor(object cls, Storage storage, tuple sizes, tuple strides,
                            Py_ssize_t offset, dtype dt):
    _check_ndim(sizes)
    return _tensor_with_numel(cls, storage, sizes, strides, offset, dt, _numel(sizes), -1)


cdef TensorBase _tensor_with_numel(object cls, Storage storage, tuple sizes, tuple strides,
                                   Py_ssize_t offset, dtype dt, Py_ssize_t numel,
                                   int contiguous):
    """``_new_tensor`` for a caller that already knows the product of ``sizes`` (and
    whether the strides are contiguous, when ``contiguous`` is not -1)."""
    cdef TensorBase t
    _check_ndim(sizes)
    t = <TensorBase>_alloc_tensor(cls, <PyObject*>_NO_ARGS, NULL)
    t._storage = storage
    t._sizes = sizes
    t._strides = strides
    t._offset = offset
    t._dtype = dt
    t._numel = numel
    t._is_contig = _contiguous(sizes, strides) if contiguous < 0 else contiguous
    return t


cdef object _cpu_buffer(Py_ssize_t numel, dtype dt):
    """A fresh 1-D array of ``numel`` elements; ``numel * itemsize`` must be known to fit in
    int64 (checked by the caller), so NumPy can only fail for want of memory."""
    cdef cnp.npy_intp n = numel
    storage_numpy(dt)     # a dtype whose package is missing refuses here
    try:
        return cnp.PyArray_EMPTY(1, &n, dt.typenum, 0)
    except MemoryError:
        raise RuntimeError(f"DefaultCPUAllocator: can't allocate memory: you tried to "
                           f"allocate {numel * dt.itemsize} bytes.") from None


cdef TensorBase _fresh_tensor(tuple sizes, tuple strides, dtype dt, int contiguous):
    """A tensor of ``sizes`` with dense ``strides`` over a fresh CPU storage of exactly its
    elements: the one product of the sizes and the itemsize is checked before anything is
    allocated, and gives the tensor its numel.  ``contiguous`` as for
    ``_tensor_with_numel``."""
    cdef Py_ssize_t numel = meta.check_storage_nbytes(sizes, dt.itemsize) // dt.itemsize
    cdef Storage storage = <Storage>_alloc_storage(Storage, <PyObject*>_NO_ARGS, NULL)
    storage.data = _cpu_buffer(numel, dt)
    storage.device = cpu
    storage.inference = mt_inference_mode
    return _tensor_with_numel(_tensor_cls, storage, sizes, strides, 0, dt, numel, contiguous)


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
    elif dev.type == "meta":
        from microtensor.backends import meta as meta_backend
        data = meta_backend.empty_buffer(n, dt.np)
    else:
        from microtensor.backends import cuda
        dev = cuda.resolve_device(dev)
        data = cuda.empty_buffer(n, dt.np, dev)
    cdef Storage storage = <Storage>_alloc_storage(Storage, <PyObject*>_NO_ARGS, NULL)
    storage.data = data
    storage.device = dev
    storage.inference = mt_inference_mode
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
    """The backend's strided array over a GPU tensor (``backends.cuda.array_view``); a
    meta tensor has none (``backends.meta.array_view`` raises)."""
    global _cuda_array_view
    if t._storage.device.type == "meta":
        from microtensor.backends.meta import array_view
        return array_view(t)
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
    try:
        d = dim
    except OverflowError:
        return meta.wrap_dim(dim, ndim)  # PyTorch's ValueError
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {d})")
    return d + n if d < 0 else d


cdef inline Py_ssize_t _wrap_dim_of_sizes(object dim, tuple sizes) except? -1:
    """``_wrap_dim`` for indexing ``sizes`` (or the strides): a 0-d tensor has no dim to
    read, where ``_wrap_dim`` accepts 0 and -1 for it."""
    if not sizes:
        if type(dim) is not int:
            _wrap_dim(dim, 0)      # refuses what is not an integer
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return _wrap_dim(dim, len(sizes))


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
    cdef bint negative = False
    for i in range(n):   # every value converted (a value past int64 raised) before any is judged
        size = sizes[i]
        stride = strides[i]
        negative = negative or size < 0 or stride < 0
    for i in range(n if negative else 0):
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
    # in bytes: a view may read the storage as another dtype (``view_as_real``)
    if need * itemsize > storage.data.nbytes:
        raise RuntimeError(
            f"setStorage: sizes {list(sizes)}, strides {list(strides)}, storage offset "
            f"{offset}, and itemsize {itemsize} requiring a storage size of "
            f"{need * itemsize} are out of bounds for storage of size "
            f"{storage.data.nbytes}")
