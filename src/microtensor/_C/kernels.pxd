from cython cimport floating

# Raw-pointer kernels other Cython modules call without Python overhead (tensor number slots).
# All are contiguous, single-threaded and safe to call without the GIL.

cdef void add_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil
cdef void sub_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil
cdef void mul_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil
cdef void div_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil
cdef void add_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil
cdef void sub_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil
cdef void mul_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil
cdef void div_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil

# `a op scalar`; the scalar is rounded to the tensor's dtype first, as PyTorch does.
cdef void add_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void sub_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void mul_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void div_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void add_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil
cdef void sub_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil
cdef void mul_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil
cdef void div_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil

# `scalar op a`, for the reflected number slots (__rsub__, __rtruediv__).
cdef void rsub_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void rdiv_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil
cdef void rsub_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil
cdef void rdiv_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil

cdef void neg_f32(float* out, const float* a, Py_ssize_t n) noexcept nogil
cdef void neg_f64(double* out, const double* a, Py_ssize_t n) noexcept nogil

# Sums returned in double: float32 is summed in float32 blocks combined in double.
cdef double sum_f32(const float* a, Py_ssize_t n) noexcept nogil
cdef double sum_f64(const double* a, Py_ssize_t n) noexcept nogil

# Same-dtype strided copy between disjoint buffers (strides in bytes); -1 for other dtypes.
cdef int copy_raw(int typenum, Py_ssize_t itemsize, char* dst, const Py_ssize_t* dst_strides,
                  const char* src, const Py_ssize_t* src_strides, const Py_ssize_t* shape,
                  int ndim) noexcept nogil

# out (m x n, contiguous) = a (m x k) @ b (k x n), strides in elements; for small sizes only.
cdef void matmul_small(floating* out, const floating* a, Py_ssize_t a_rs, Py_ssize_t a_cs,
                       const floating* b, Py_ssize_t b_rs, Py_ssize_t b_cs,
                       Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) noexcept nogil
