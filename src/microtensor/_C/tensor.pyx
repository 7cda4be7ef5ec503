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
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.string cimport memcpy

import numpy as np


cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.dtype descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, object obj)


# --------------------------------------------------------------------------- dtypes

cdef class dtype:
    """A tensor element type (``microtensor.float32`` ...), mirroring ``torch.dtype``."""
    cdef readonly str name
    cdef readonly int itemsize
    cdef readonly bint is_floating_point
    cdef readonly bint is_signed
    cdef readonly int kind          # 0 bool, 1 integer, 2 floating: the promotion category
    cdef readonly object np         # the numpy dtype used for storage
    cdef readonly int typenum       # numpy's type number, for building ndarray views

    def __init__(self, name, npdtype, kind):
        self.name = name
        self.np = np.dtype(npdtype)
        self.itemsize = self.np.itemsize
        self.kind = kind
        self.is_floating_point = kind == 2
        self.is_signed = kind != 0
        self.typenum = self.np.num

    def __repr__(self):
        return "microtensor." + self.name

    def __reduce__(self):
        return self.name

    def to_complex(self):
        raise NotImplementedError("microtensor has no complex dtypes")


float32 = dtype("float32", np.float32, 2)
float64 = dtype("float64", np.float64, 2)
int64 = dtype("int64", np.int64, 1)
int32 = dtype("int32", np.int32, 1)
bool_ = dtype("bool", np.bool_, 0)
cdef dict _dtype_by_np = {d.np: d for d in (float32, float64, int64, int32, bool_)}

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
        raise TypeError(f"can't convert np.ndarray of type {np.dtype(npdtype)}. The only "
                        "supported types are: float64, float32, int64, int32, and bool.")
    return d


# --------------------------------------------------------------------------- devices

cdef class device:
    """Where a tensor's storage lives: ``device("cpu")`` or ``device("cuda", 0)``."""
    cdef readonly str type
    cdef readonly object index

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

cdef class Storage:
    """A flat buffer shared by a tensor and all its views, with their shared version counter.

    ``data`` is a 1-D array of the element type (a NumPy array on the CPU; the CUDA backend
    stores a CuPy array).  ``version`` counts in-place writes; autograd compares it with
    the value it saw when it saved a tensor.
    """
    cdef readonly object data
    cdef readonly device device
    cdef public Py_ssize_t version

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


# --------------------------------------------------------------------------- tensor

class Size(tuple):
    """A tensor's sizes: a tuple that prints like ``torch.Size``."""

    def __repr__(self):
        return "microtensor.Size([" + ", ".join(map(str, self)) + "])"

    def numel(self):
        cdef Py_ssize_t n = 1
        for s in self:
            n *= s
        return n


cdef object _tensor_cls = None      # microtensor.Tensor, the Python subclass users see
cdef object _dispatch_binary = None  # ops.dispatch.binary(name, a, b): the slow path of + - * ...
cdef object _dispatch_call = None    # ops.dispatch.call(name, *args): the slow path of methods
cdef object _grad_mode = None        # autograd.grad_mode's thread-local state (.enabled)


def _install(tensor_cls, dispatch_binary, dispatch_call, grad_mode):
    """Called once by the package: the Python pieces the fast paths defer to."""
    global _tensor_cls, _dispatch_binary, _dispatch_call, _grad_mode
    _tensor_cls = tensor_cls
    _dispatch_binary = dispatch_binary
    _dispatch_call = dispatch_call
    _grad_mode = grad_mode


cdef inline bint _contiguous(tuple sizes, tuple strides):
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
    """
    bint mt_tensor_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) noexcept nogil


cdef inline Py_ssize_t _numel(tuple sizes) except -1:
    cdef Py_ssize_t n = 1
    cdef bint overflow = False
    for s in sizes:
        overflow |= mt_tensor_mul_overflow(n, <Py_ssize_t>s, &n)
    if overflow and n != 0:
        raise RuntimeError(f"numel: integer multiplication overflow (sizes {list(sizes)})")
    return n


cdef inline tuple _contiguous_strides(tuple sizes):
    cdef Py_ssize_t n = len(sizes), acc = 1, i
    cdef list out = [1] * n
    for i in range(n - 1, -1, -1):
        out[i] = acc
        acc *= max(<Py_ssize_t>sizes[i], 1)
    return tuple(out)


cdef class TensorBase:
    """Metadata of a strided tensor over a Storage, plus the fields autograd keeps on it.

    ``microtensor.Tensor`` (Python) subclasses this and adds the methods declared in
    ``microtensor.ops``; vmap's BatchedTensor subclasses that again.
    """
    cdef public Storage _storage
    cdef public tuple _sizes
    cdef public tuple _strides
    cdef public Py_ssize_t _offset
    cdef public dtype _dtype
    cdef public Py_ssize_t _numel
    cdef public bint _is_contig
    # autograd
    cdef public bint _requires_grad
    cdef public object _grad
    cdef public object _grad_fn
    cdef public int _output_nr
    cdef public object _base          # the tensor this is a view of (None if not a view)
    cdef public bint _is_diff_view    # a view autograd tracks (not made by detach or no_grad)
    cdef public object _view_info     # the base's grad_fn when this view's grad_fn was made
    cdef public bint _retains_grad
    cdef public object _hooks
    cdef public object _grad_accumulator
    cdef public object _name
    cdef object __weakref__

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
        return self._numel * self._dtype.itemsize

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
        return _requires_grad(self)

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

    def _make_view_unchecked(self, tuple sizes, tuple strides, Py_ssize_t offset):
        """Like _make_view for geometries derived from this tensor's own, so always in bounds."""
        cdef TensorBase t = _new_tensor(_tensor_cls, self._storage, sizes, strides, offset,
                                        self._dtype)
        cdef TensorBase base = self if self._base is None else self._base
        t._base = base
        if _grad_mode.enabled:
            t._is_diff_view = True
            t._view_info = base._grad_fn
        return t

    def _make_alias_unchecked(self, tuple sizes, tuple strides, Py_ssize_t offset):
        """A tensor over this storage (so sharing the version counter) that is not a view:
        no ``_base``, no autograd history (``detach``, ``_unsafe_view``)."""
        return _new_tensor(_tensor_cls, self._storage, sizes, strides, offset, self._dtype)

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
        return _binary(a, b, OP_ADD, "add")

    def __radd__(a, b):
        return _dispatch_binary("add", b, a)

    def __sub__(a, b):
        return _binary(a, b, OP_SUB, "sub")

    def __rsub__(a, b):
        return _dispatch_binary("sub", b, a)

    def __mul__(a, b):
        return _binary(a, b, OP_MUL, "mul")

    def __rmul__(a, b):
        return _dispatch_binary("mul", b, a)

    def __truediv__(a, b):
        return _binary(a, b, OP_DIV, "div")

    def __rtruediv__(a, b):
        return _dispatch_binary("div", b, a)


cdef enum:
    OP_ADD, OP_SUB, OP_MUL, OP_DIV


ctypedef fused real:
    float
    double


cdef inline void _loop(int opcode, real* out, const real* a, const real* b, Py_ssize_t n,
                       bint scalar) noexcept nogil:
    cdef Py_ssize_t i
    cdef real s = b[0]
    if scalar:
        if opcode == OP_ADD:
            for i in range(n): out[i] = a[i] + s
        elif opcode == OP_SUB:
            for i in range(n): out[i] = a[i] - s
        elif opcode == OP_MUL:
            for i in range(n): out[i] = a[i] * s
        else:
            for i in range(n): out[i] = a[i] / s
    elif opcode == OP_ADD:
        for i in range(n): out[i] = a[i] + b[i]
    elif opcode == OP_SUB:
        for i in range(n): out[i] = a[i] - b[i]
    elif opcode == OP_MUL:
        for i in range(n): out[i] = a[i] * b[i]
    else:
        for i in range(n): out[i] = a[i] / b[i]


cdef inline void _binary_loop(int opcode, int typenum, char* out, char* a, char* b,
                              Py_ssize_t n) noexcept nogil:
    if typenum == cnp.NPY_FLOAT:
        _loop(opcode, <float*>out, <float*>a, <float*>b, n, False)
    else:
        _loop(opcode, <double*>out, <double*>a, <double*>b, n, False)


cdef inline void _binary_scalar_loop(int opcode, int typenum, char* out, char* a, double b,
                                     Py_ssize_t n) noexcept nogil:
    cdef float bf = <float>b
    if typenum == cnp.NPY_FLOAT:
        _loop(opcode, <float*>out, <float*>a, &bf, n, True)
    else:
        _loop(opcode, <double*>out, <double*>a, &b, n, True)


cdef inline bint _requires_grad(TensorBase t):
    if t._requires_grad:
        return True
    return t._is_diff_view and _requires_grad(<TensorBase>t._base)


cdef inline bint _plain(object t):
    """True when ``t`` is an ordinary tensor that needs no autograd recording right now."""
    if type(t) is not _tensor_cls:
        return False
    return not _requires_grad(<TensorBase>t) or not _grad_mode.enabled


cdef object _binary(object a, object b, int opcode, str name):
    """``a <op> b`` in C when both are contiguous same-shape float tensors (or b a float)."""
    cdef TensorBase ta, tb, out
    cdef int typenum
    if _plain(a) and (<TensorBase>a)._is_contig:
        ta = <TensorBase>a
        typenum = ta._dtype.typenum
        if (typenum == cnp.NPY_FLOAT or typenum == cnp.NPY_DOUBLE) \
                and ta._storage.device.type == "cpu":
            if type(b) is float:
                out = _empty_like_contiguous(ta)
                _binary_scalar_loop(opcode, typenum, _ptr(out), _ptr(ta), <double>b, ta._numel)
                return out
            if _plain(b):
                tb = <TensorBase>b
                if tb._is_contig and tb._dtype is ta._dtype and tb._sizes == ta._sizes \
                        and tb._storage.device is ta._storage.device:
                    out = _empty_like_contiguous(ta)
                    _binary_loop(opcode, typenum, _ptr(out), _ptr(ta), _ptr(tb), ta._numel)
                    return out
    return _dispatch_binary(name, a, b)


# --------------------------------------------------------------------------- construction

cdef inline char* _ptr(TensorBase t):
    return <char*>cnp.PyArray_DATA(<cnp.ndarray>t._storage.data) + t._offset * t._dtype.itemsize


cdef TensorBase _new_tensor(object cls, Storage storage, tuple sizes, tuple strides,
                            Py_ssize_t offset, dtype dt):
    cdef TensorBase t = <TensorBase>cls.__new__(cls)
    t._storage = storage
    t._sizes = sizes
    t._strides = strides
    t._offset = offset
    t._dtype = dt
    t._numel = _numel(sizes)
    t._is_contig = _contiguous(sizes, strides)
    return t


cdef TensorBase _empty_like_contiguous(TensorBase t):
    """A fresh contiguous CPU tensor with ``t``'s sizes and dtype."""
    data = cnp.PyArray_EMPTY(1, [t._numel], t._dtype.typenum, 0)
    return _new_tensor(_tensor_cls, Storage(data, cpu), t._sizes,
                       _contiguous_strides(t._sizes), 0, t._dtype)


def wrap_storage(Storage storage, tuple sizes, tuple strides, Py_ssize_t offset, dtype dt,
                 cls=None):
    """A tensor over ``storage`` (bounds-checked): how factories and kernels build results."""
    _check_geometry(storage, sizes, strides, offset, dt.itemsize)
    return _new_tensor(_tensor_cls if cls is None else cls, storage, sizes, strides, offset, dt)


def empty_contiguous(tuple sizes, dtype dt, device dev=cpu):
    """A fresh tensor with contiguous strides; ``sizes`` must already be validated."""
    return empty_strided_unchecked(sizes, _contiguous_strides(sizes), dt, dev)


def empty_strided_unchecked(tuple sizes, tuple strides, dtype dt, device dev=cpu):
    """A fresh tensor with exactly ``strides``; storage sized to what the strides reach."""
    cdef Py_ssize_t n = 0 if _numel(sizes) == 0 else 1
    cdef Py_ssize_t i
    if n:
        for i in range(len(sizes)):
            n += (<Py_ssize_t>sizes[i] - 1) * <Py_ssize_t>strides[i]
    if dev.type == "cpu":
        try:
            data = cnp.PyArray_EMPTY(1, [n], dt.typenum, 0)
        except MemoryError:
            raise RuntimeError(f"not enough memory: you tried to allocate "
                               f"{n * dt.itemsize} bytes") from None
    else:
        from microtensor.backends import cuda
        dev = cuda.resolve_device(dev)
        data = cuda.empty_buffer(n, dt.np, dev)
    return _new_tensor(_tensor_cls, Storage(data, dev), sizes, strides, 0, dt)


def from_array(arr, dev=None):
    """A tensor sharing ``arr``'s memory (zero-copy; strides must be non-negative multiples
    of the item size).  Arrays with other strides are copied first."""
    cdef dtype dt = dtype_from_numpy(arr.dtype)
    cdef Py_ssize_t item = dt.itemsize
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
    cdef cnp.npy_intp dims[64]
    cdef cnp.npy_intp strides[64]
    cdef Py_ssize_t item = t._dtype.itemsize
    for i in range(nd):
        dims[i] = t._sizes[i]
        strides[i] = <Py_ssize_t>t._strides[i] * item
    cdef cnp.dtype descr = cnp.PyArray_DescrFromType(t._dtype.typenum)
    Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
    # a storage over read-only memory (a read-only array given to from_numpy) stays
    # read-only, so writes raise instead of touching memory nobody may write
    cdef int flags = cnp.NPY_ARRAY_WRITEABLE \
        if cnp.PyArray_ISWRITEABLE(<cnp.ndarray>t._storage.data) else 0
    arr = PyArray_NewFromDescr(<PyTypeObject*>np.ndarray, descr, nd, dims, strides,
                               <void*>_ptr(t), flags, None)
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

MAX_DIMS = 64


cdef inline Py_ssize_t _wrap_dim(object dim, Py_ssize_t ndim) except? -1:
    cdef Py_ssize_t d = dim
    cdef Py_ssize_t lo, hi
    cdef Py_ssize_t n = ndim if ndim > 0 else 1
    if d < -n or d >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {d})")
    return d + n if d < 0 else d


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
