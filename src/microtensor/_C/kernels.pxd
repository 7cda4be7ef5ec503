from cython cimport floating

# Raw-pointer kernels other Cython modules call without Python overhead (the tensor's fast
# paths).  All are single-threaded and safe to call without the GIL; strides in elements.

# out = a `opcode` b (b"+", b"-", b"*" or b"/") for float32/float64 (`typenum`), operands
# broadcast to `shape` by stride-0 dims; `out` must not overlap a or b.
cdef void binary_raw(char opcode, int typenum, int ndim, const Py_ssize_t* shape,
                     char* out, const Py_ssize_t* out_strides, const char* a,
                     const Py_ssize_t* a_strides, const char* b,
                     const Py_ssize_t* b_strides) noexcept nogil

# Sum of a float32/float64 strided buffer in double (float32 summed in float32 blocks
# combined in double).
cdef double sum_raw(int typenum, const char* a, int ndim, const Py_ssize_t* shape,
                    const Py_ssize_t* strides) noexcept nogil

# Sums over the dims flagged in `reduced` into `out`, contiguous over the other dims in
# order (no dim may be empty).
cdef bint sums_whole_rows(int typenum, int ndim, const Py_ssize_t* shape,
                          const Py_ssize_t* strides, const bint* reduced) noexcept nogil
cdef void sum_dims_raw(int typenum, const char* src, int ndim, const Py_ssize_t* shape,
                       const Py_ssize_t* strides, const bint* reduced,
                       char* out) noexcept nogil

# Same-dtype strided copy between disjoint buffers (strides in bytes); -1 for other dtypes.
cdef int copy_raw(int typenum, Py_ssize_t itemsize, char* dst, const Py_ssize_t* dst_strides,
                  const char* src, const Py_ssize_t* src_strides, const Py_ssize_t* shape,
                  int ndim) noexcept nogil

# out (m x n, contiguous) = a (m x k) @ b (k x n), strides in elements; for small sizes only.
cdef void matmul_small(floating* out, const floating* a, Py_ssize_t a_rs, Py_ssize_t a_cs,
                       const floating* b, Py_ssize_t b_rs, Py_ssize_t b_cs,
                       Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) noexcept nogil
