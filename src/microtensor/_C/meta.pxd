# Declarations of the stride math in meta.pyx, so other Cython modules can call it without
# going through Python attribute lookup (``from microtensor._C.meta cimport ...``).

cpdef tuple contiguous_strides(sizes)
cpdef tuple channels_last_strides(sizes)
cpdef tuple channels_last_3d_strides(sizes)
cpdef tuple strides_for_format(sizes, object memory_format)
cpdef bint is_contiguous(sizes, strides, object memory_format=*) except -1
cpdef bint is_non_overlapping_and_dense(sizes, strides) except -1
cpdef long long storage_size_for(sizes, strides, long long itemsize=*) except -1
cpdef object suggest_memory_format(sizes, strides)
cpdef tuple infer_dense_strides(sizes, strides)
cpdef tuple preserve_format_strides(sizes, strides)
cpdef object view_strides(old_sizes, old_strides, new_sizes)
cpdef tuple infer_size(shape, long long numel)
cpdef tuple broadcast_pair(a, b)
cpdef tuple expand_geometry(sizes, strides, new_sizes)
cpdef tuple expand_strides(sizes, strides, new_sizes)
cpdef tuple elementwise_output_strides(out_sizes, inputs)
cpdef Py_ssize_t wrap_dim(object dim, long long ndim) except -1
cpdef check_size_nonnegative(sizes)
cpdef long long check_storage_nbytes(sizes, long long itemsize) except -1


# PyTorch's size arithmetic, shared by every module that forms a product of sizes: the
# product in uint64 with a sticky overflow flag (``c10::safe_multiplies_u64``), so a 0 after
# an overflowing prefix does not hide it, exactly as PyTorch decides.
cdef extern from *:
    """
    static inline int mt_u64_mul_overflow(unsigned long long a, unsigned long long b,
                                          unsigned long long *out) {
        return __builtin_mul_overflow(a, b, out);
    }
    """
    bint mt_u64_mul_overflow(unsigned long long a, unsigned long long b,
                             unsigned long long* out) noexcept nogil


cdef inline bint size_product_overflows(tuple sizes, unsigned long long* product) except -1:
    """The sizes' product (in ``product``) and whether forming it overflowed uint64.  The
    sizes must be non-negative int64 values."""
    cdef unsigned long long n = 1
    cdef bint overflow = False
    for s in sizes:
        overflow |= mt_u64_mul_overflow(n, <unsigned long long><long long>s, &n)
    product[0] = n
    return overflow
