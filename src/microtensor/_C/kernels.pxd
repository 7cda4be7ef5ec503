from cython cimport floating
from libc.stdint cimport int64_t

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
cdef bint sum_in_one_pass(int typenum, int ndim, const Py_ssize_t* shape,
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

# nll_loss over rows (strides in elements): each row's target weight into `weights` (0
# where the target is ignore_index; False, and the target in `bad`, at the first target
# outside [0, classes)); the losses -rows[i, target] * weight; the gradient rows
# (contiguous, zeroed by the caller) -grads[i] * weight * scale at each target.
cdef bint row_weights(const int64_t* targets, Py_ssize_t t_stride, Py_ssize_t n,
                      const floating* weight, Py_ssize_t w_stride, int64_t ignore_index,
                      Py_ssize_t classes, floating* weights, int64_t* bad) noexcept nogil
cdef void nll_rows(const floating* rows, Py_ssize_t r_stride, Py_ssize_t c_stride,
                   const int64_t* targets, Py_ssize_t t_stride, const floating* weights,
                   Py_ssize_t n, floating* losses) noexcept nogil
cdef void nll_rows_backward(floating* grad_rows, Py_ssize_t classes, const int64_t* targets,
                            Py_ssize_t t_stride, const floating* weights,
                            const floating* grads, Py_ssize_t g_stride, double scale,
                            Py_ssize_t n) noexcept nogil
