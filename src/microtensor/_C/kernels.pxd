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
