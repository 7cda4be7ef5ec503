# The core's classes and grad mode, for other Cython modules (``_C.autograd``) to reach
# their fields and functions without Python attribute lookups.  Methods are in tensor.pyx.

cdef class dtype:
    cdef readonly str name
    cdef readonly int itemsize
    cdef readonly bint is_floating_point
    cdef readonly bint is_signed
    cdef readonly bint is_complex
    cdef readonly int kind          # 0 bool, 1 integer, 2 floating, 3 complex: the promotion category
    cdef object _np                 # the numpy dtype used for storage (None: see _optional)
    cdef object _optional           # the table's OptionalStorage until its package is loaded
    cdef readonly int typenum       # numpy's type number, for building ndarray views

cdef class device:
    cdef readonly str type
    cdef readonly object index

cdef class Storage:
    cdef readonly object data
    cdef readonly device device
    cdef public Py_ssize_t version
    cdef readonly bint inference    # made in inference mode: its tensors are inference tensors

cdef class TensorBase:
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
    cdef TensorBase _view_fast(self, tuple sizes, tuple strides, Py_ssize_t offset,
                               Py_ssize_t numel, int contiguous)


cdef bint grad_mode_enabled() noexcept
cdef bint inference_mode_enabled() noexcept
cpdef set_grad_enabled(bint enabled)
cdef bint needs_grad(TensorBase t) noexcept
cdef object unary_fast(object op, tuple kernel, object x)
cdef object unary_loops(object fn)
cdef object silence_numpy()
cdef int restore_numpy(object token) except -1
