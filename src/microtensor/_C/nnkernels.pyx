"""C kernels of the layers: softmax / log_softmax along the last dim and their backward,
layer_norm forward and backward, batch_norm's sums and per-channel affine maps,
tanh's and relu's backward, GELU forward and backward, 2-d max
pooling with indices and its backward, the maximum over box windows (adaptive and
fractional max pooling), 2-d average pooling and its backward, the im2col
of a 2-d convolution and the col2im of a unit-stride transposed one.

Each takes NumPy arrays of float32 or float64 (one dtype for all), writes into ``out`` and
returns it (the reductions ``batch_norm_sums`` and ``window_max`` return new arrays).  Inputs of any strides are accepted (a non-contiguous one is copied once);
``out`` of any strides too (a non-contiguous one is filled from a contiguous result).  The
loops themselves are in ``nnmath.h``: one pass per quantity over rows that stay in cache,
float32 with vectorised exp / erf.  Every other dtype is refused with a TypeError: the
ops keep their NumPy path for those.

The tensor fast paths (``softmax_rows``, ``log_softmax_backward_rows``,
``nll_loss_rows``, ``nll_loss_backward_rows``) take tensors and return a new result
tensor, or None for a call they do not serve (another dtype or device, a layout they do
not take), which the op's general path then computes: the op's Python around a
microsecond of C work is most of a small loss's time under ``vmap(grad)``.  The ops check
their arguments before calling them.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport INT32_MAX, int32_t, int64_t
from libc.string cimport memset

from microtensor._C.kernels cimport nll_rows, nll_rows_backward, row_weights
from microtensor._C.tensor cimport TensorBase
from microtensor._C.tensor import empty_contiguous

cnp.import_array()

cdef extern from "nnmath.h" nogil:
    void mt_softmax_f32(float* out, const float* x, Py_ssize_t rows, Py_ssize_t n, int log_of)
    void mt_softmax_f64(double* out, const double* x, Py_ssize_t rows, Py_ssize_t n,
                        int log_of)
    void mt_softmax_backward_f32(float* out, const float* g, const float* y, Py_ssize_t rows,
                                 Py_ssize_t n)
    void mt_softmax_backward_f64(double* out, const double* g, const double* y,
                                 Py_ssize_t rows, Py_ssize_t n)
    void mt_log_softmax_backward_f32(float* out, const float* g, const float* y,
                                     Py_ssize_t rows, Py_ssize_t n)
    void mt_log_softmax_backward_f64(double* out, const double* g, const double* y,
                                     Py_ssize_t rows, Py_ssize_t n)
    void mt_layer_norm_f32(float* out, const float* x, const float* w, const float* b,
                           Py_ssize_t rows, Py_ssize_t n, double eps)
    void mt_layer_norm_f64(double* out, const double* x, const double* w, const double* b,
                           Py_ssize_t rows, Py_ssize_t n, double eps)
    void mt_layer_norm_backward_f32(float* gx, float* gw, float* gb, const float* g,
                                    const float* x, const float* w, Py_ssize_t rows,
                                    Py_ssize_t n, double eps)
    void mt_layer_norm_backward_f64(double* gx, double* gw, double* gb, const double* g,
                                    const double* x, const double* w, Py_ssize_t rows,
                                    Py_ssize_t n, double eps)
    void mt_tanh_backward_f32(float* out, const float* g, const float* y, Py_ssize_t n)
    void mt_tanh_backward_f64(double* out, const double* g, const double* y, Py_ssize_t n)
    void mt_relu_backward_f32(float* out, const float* g, const float* y, Py_ssize_t n)
    void mt_relu_backward_f64(double* out, const double* g, const double* y, Py_ssize_t n)
    void mt_window_max_f32(float* out, int64_t* index, const float* x, Py_ssize_t R,
                           Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                           Py_ssize_t OH, Py_ssize_t OW, const int64_t* lo_d,
                           const int64_t* hi_d, const int64_t* lo_h, const int64_t* hi_h,
                           const int64_t* lo_w, const int64_t* hi_w, int per_plane_d,
                           int per_plane_h, int per_plane_w)
    void mt_window_max_f64(double* out, int64_t* index, const double* x, Py_ssize_t R,
                           Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD,
                           Py_ssize_t OH, Py_ssize_t OW, const int64_t* lo_d,
                           const int64_t* hi_d, const int64_t* lo_h, const int64_t* hi_h,
                           const int64_t* lo_w, const int64_t* hi_w, int per_plane_d,
                           int per_plane_h, int per_plane_w)
    void mt_bn_sums_f32(const float* x, const float* g, Py_ssize_t outer, Py_ssize_t C,
                        Py_ssize_t inner, const double* shift, double* s1, double* s2)
    void mt_bn_sums_f64(const double* x, const double* g, Py_ssize_t outer, Py_ssize_t C,
                        Py_ssize_t inner, const double* shift, double* s1, double* s2)
    void mt_bn_apply_f32(float* out, const float* x, const float* g, Py_ssize_t outer,
                         Py_ssize_t C, Py_ssize_t inner, const float* kx, const float* kg,
                         const float* k0)
    void mt_bn_apply_f64(double* out, const double* x, const double* g, Py_ssize_t outer,
                         Py_ssize_t C, Py_ssize_t inner, const double* kx, const double* kg,
                         const double* k0)
    void mt_gelu_f32(float* out, const float* x, Py_ssize_t n, int tanh_mode)
    void mt_gelu_f64(double* out, const double* x, Py_ssize_t n, int tanh_mode)
    void mt_gelu_backward_f32(float* out, const float* g, const float* x, Py_ssize_t n,
                              int tanh_mode)
    void mt_gelu_backward_f64(double* out, const double* g, const double* x, Py_ssize_t n,
                              int tanh_mode)
    void mt_max_pool2d_f32(float* out, int64_t* indices, const float* x, Py_ssize_t planes,
                           Py_ssize_t h, Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow,
                           Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                           Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw)
    void mt_max_pool2d_f64(double* out, int64_t* indices, const double* x, Py_ssize_t planes,
                           Py_ssize_t h, Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow,
                           Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                           Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw)
    void mt_max_pool2d_nhwc_f32(float* out, int64_t* indices, int32_t* at, const float* x,
                                Py_ssize_t batch, Py_ssize_t channels, Py_ssize_t h,
                                Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                                Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                                Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw)
    void mt_max_pool2d_nhwc_f64(double* out, int64_t* indices, int64_t* at, const double* x,
                                Py_ssize_t batch, Py_ssize_t channels, Py_ssize_t h,
                                Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                                Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                                Py_ssize_t pw, Py_ssize_t dh, Py_ssize_t dw)
    void mt_im2col_f32(float* out, const float* x, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h,
                       Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t oh,
                       Py_ssize_t ow, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh,
                       Py_ssize_t dw, int positions_major)
    void mt_im2col_f64(double* out, const double* x, Py_ssize_t n, Py_ssize_t c,
                       Py_ssize_t h, Py_ssize_t w, Py_ssize_t kh, Py_ssize_t kw,
                       Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t sh, Py_ssize_t sw,
                       Py_ssize_t dh, Py_ssize_t dw, int positions_major)
    void mt_col2im_f32(float* flat, const float* blocks, const int64_t* starts,
                       Py_ssize_t planes, Py_ssize_t total, Py_ssize_t k, Py_ssize_t length)
    void mt_col2im_f64(double* flat, const double* blocks, const int64_t* starts,
                       Py_ssize_t planes, Py_ssize_t total, Py_ssize_t k, Py_ssize_t length)
    void mt_avg_pool2d_f32(float* out, float* x, Py_ssize_t planes, Py_ssize_t h,
                           Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                           Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                           Py_ssize_t pw, int count_pad, Py_ssize_t divisor, int backward)
    void mt_avg_pool2d_f64(double* out, double* x, Py_ssize_t planes, Py_ssize_t h,
                           Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                           Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph,
                           Py_ssize_t pw, int count_pad, Py_ssize_t divisor, int backward)
    int mt_max_pool_backward_f32(float* grad_input, const float* grad, const int64_t* indices,
                                 Py_ssize_t planes, Py_ssize_t plane_size, Py_ssize_t per_plane)
    int mt_max_pool_backward_f64(double* grad_input, const double* grad,
                                 const int64_t* indices, Py_ssize_t planes,
                                 Py_ssize_t plane_size, Py_ssize_t per_plane)
    int mt_max_pool_backward_nhwc_f32(float* grad_input, const float* grad,
                                      const int64_t* indices, Py_ssize_t batch,
                                      Py_ssize_t channels, Py_ssize_t plane_size,
                                      Py_ssize_t per_plane)
    int mt_max_pool_backward_nhwc_f64(double* grad_input, const double* grad,
                                      const int64_t* indices, Py_ssize_t batch,
                                      Py_ssize_t channels, Py_ssize_t plane_size,
                                      Py_ssize_t per_plane)


def supports(*arrays):
    """Whether these kernels take ``arrays`` (None entries aside): NumPy arrays of one
    dtype, float32 or float64."""
    dtype = None
    for a in arrays:
        if a is None:
            continue
        if not isinstance(a, np.ndarray) or (dtype is not None and a.dtype != dtype):
            return False
        dtype = a.dtype
    return dtype == np.float32 or dtype == np.float64


cdef bint is_f32(object a, str kernel) except -1:
    """True for float32, False for float64; TypeError for any other dtype."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{kernel}: NumPy arrays expected")
    if a.dtype == np.float32:
        return True
    if a.dtype == np.float64:
        return False
    raise TypeError(f"{kernel}: float32 or float64 arrays expected, got {a.dtype}")


cdef object operand(object a, object dtype, tuple shape, str kernel):
    """``a`` as a C-contiguous array of ``dtype`` and ``shape`` (a copy only when strided)."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape:
        raise TypeError(f"{kernel}: arrays of one dtype and shape expected")
    return np.ascontiguousarray(a)


cdef object target(object out, str kernel):
    """Where to compute ``out``: itself when C-contiguous, else a scratch array copied to it
    by ``finish``."""
    if not out.flags.writeable:
        raise ValueError(f"{kernel}: out is read-only")
    return out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)


cdef object finish(object out, object result):
    if result is not out:
        np.copyto(out, result)
    return out


cdef Py_ssize_t last(object a):
    return a.shape[a.ndim - 1] if a.ndim else 1


cdef void* data(cnp.ndarray a):
    return cnp.PyArray_DATA(a)


def softmax(out, x, bint log_of):
    """softmax (``log_of``: log_softmax) of ``x`` along its last dim into ``out``."""
    cdef bint f32 = is_f32(out, "softmax")
    cdef object src = operand(x, out.dtype, out.shape, "softmax")
    cdef object res = target(out, "softmax")
    cdef Py_ssize_t n = last(src), rows = src.size // n if n else 0
    if f32:
        mt_softmax_f32(<float*>data(res), <const float*>data(src), rows, n, log_of)
    else:
        mt_softmax_f64(<double*>data(res), <const double*>data(src), rows, n, log_of)
    return finish(out, res)


def softmax_backward(out, grad, output, bint log_of):
    """The gradient of softmax (``log_of``: log_softmax) along the last dim for the incoming
    ``grad``, from the forward ``output``: ``output * (grad - sum(grad * output))``, or
    ``grad - exp(output) * sum(grad)``."""
    cdef bint f32 = is_f32(out, "softmax_backward")
    cdef object g = operand(grad, out.dtype, out.shape, "softmax_backward")
    cdef object y = operand(output, out.dtype, out.shape, "softmax_backward")
    cdef object res = target(out, "softmax_backward")
    cdef Py_ssize_t n = last(g), rows = g.size // n if n else 0
    if f32 and log_of:
        mt_log_softmax_backward_f32(<float*>data(res), <const float*>data(g),
                                    <const float*>data(y), rows, n)
    elif f32:
        mt_softmax_backward_f32(<float*>data(res), <const float*>data(g),
                                <const float*>data(y), rows, n)
    elif log_of:
        mt_log_softmax_backward_f64(<double*>data(res), <const double*>data(g),
                                    <const double*>data(y), rows, n)
    else:
        mt_softmax_backward_f64(<double*>data(res), <const double*>data(g),
                                <const double*>data(y), rows, n)
    return finish(out, res)


cdef tuple row_shape(object x, Py_ssize_t k, str kernel):
    if not 0 < k <= x.ndim:
        raise ValueError(f"{kernel}: normalise over 1 to {x.ndim} trailing dims, got {k}")
    return tuple(x.shape[x.ndim - k:])


cdef const void* optional(object a, object dtype, tuple shape, str kernel, list keep):
    """The data of an optional parameter array (NULL for None), kept alive in ``keep``."""
    if a is None:
        return NULL
    cdef object arr = operand(a, dtype, shape, kernel)
    keep.append(arr)
    return data(arr)


def layer_norm(out, x, Py_ssize_t k, weight, bias, double eps):
    """``layer_norm`` of ``x`` over its last ``k`` dims (biased variance), scaled by
    ``weight`` and shifted by ``bias`` (each None or of those dims' shape), into ``out``."""
    cdef bint f32 = is_f32(out, "layer_norm")
    cdef object src = operand(x, out.dtype, out.shape, "layer_norm")
    cdef tuple shape = row_shape(src, k, "layer_norm")
    cdef list keep = []
    cdef const void* w = optional(weight, out.dtype, shape, "layer_norm", keep)
    cdef const void* b = optional(bias, out.dtype, shape, "layer_norm", keep)
    cdef object res = target(out, "layer_norm")
    cdef Py_ssize_t n = int(np.prod(shape)), rows = src.size // n if n else 0
    if f32:
        mt_layer_norm_f32(<float*>data(res), <const float*>data(src), <const float*>w,
                          <const float*>b, rows, n, eps)
    else:
        mt_layer_norm_f64(<double*>data(res), <const double*>data(src), <const double*>w,
                          <const double*>b, rows, n, eps)
    return finish(out, res)


def layer_norm_backward(grad, x, Py_ssize_t k, weight, double eps):
    """``layer_norm``'s gradients for the incoming ``grad``: (input's, weight's (None
    without a weight), bias's), fresh contiguous arrays."""
    if not isinstance(x, np.ndarray):
        raise TypeError("layer_norm_backward: arrays expected")
    cdef object src = np.ascontiguousarray(x)
    cdef bint f32 = is_f32(src, "layer_norm_backward")
    cdef object g = operand(grad, src.dtype, src.shape, "layer_norm_backward")
    cdef tuple shape = row_shape(src, k, "layer_norm_backward")
    cdef list keep = []
    cdef const void* w = optional(weight, src.dtype, shape, "layer_norm_backward", keep)
    cdef object grad_input = np.empty(src.shape, src.dtype)
    cdef object grad_bias = np.zeros(shape, src.dtype)
    grad_weight = None if weight is None else np.zeros(shape, src.dtype)
    cdef void* gw = NULL if grad_weight is None else data(grad_weight)
    cdef Py_ssize_t n = int(np.prod(shape)), rows = src.size // n if n else 0
    if f32:
        mt_layer_norm_backward_f32(<float*>data(grad_input), <float*>gw,
                                   <float*>data(grad_bias), <const float*>data(g),
                                   <const float*>data(src), <const float*>w, rows, n, eps)
    else:
        mt_layer_norm_backward_f64(<double*>data(grad_input), <double*>gw,
                                   <double*>data(grad_bias), <const double*>data(g),
                                   <const double*>data(src), <const double*>w, rows, n,
                                   eps)
    return grad_input, grad_weight, grad_bias


ctypedef void (*output_backward_f32)(float*, const float*, const float*, Py_ssize_t)
ctypedef void (*output_backward_f64)(double*, const double*, const double*, Py_ssize_t)


cdef object output_backward(object out, object grad, object output, str kernel,
                            output_backward_f32 f32_loop, output_backward_f64 f64_loop):
    """An activation's gradient from its ``output`` and the incoming ``grad``, one pass of
    ``f32_loop`` or ``f64_loop`` into ``out``."""
    cdef bint f32 = is_f32(out, kernel)
    cdef object g = operand(grad, out.dtype, out.shape, kernel)
    cdef object y = operand(output, out.dtype, out.shape, kernel)
    cdef object res = target(out, kernel)
    if f32:
        f32_loop(<float*>data(res), <const float*>data(g), <const float*>data(y), g.size)
    else:
        f64_loop(<double*>data(res), <const double*>data(g), <const double*>data(y), g.size)
    return finish(out, res)


def tanh_backward(out, grad, output):
    """``grad * (1 - output ** 2)`` (tanh's gradient from its ``output``) into ``out``."""
    return output_backward(out, grad, output, "tanh_backward", mt_tanh_backward_f32,
                           mt_tanh_backward_f64)


def relu_backward(out, grad, output):
    """0 where ``output <= 0``, else ``grad`` (relu's gradient from its ``output``; a NaN
    output passes it), into ``out``."""
    return output_backward(out, grad, output, "relu_backward", mt_relu_backward_f32,
                           mt_relu_backward_f64)


cdef object window_bounds(object bounds, Py_ssize_t planes, Py_ssize_t size, str which):
    """Window bounds as a C-contiguous int64 array (1 or ``planes``, outputs) within
    [0, ``size``]."""
    b = np.ascontiguousarray(bounds, dtype=np.int64)
    if b.ndim != 2 or b.shape[0] not in (1, planes):
        raise ValueError(f"window_max: {which} bounds must be (1 or planes, outputs)")
    if b.size and (b.min() < 0 or b.max() > size):
        raise IndexError(f"window_max: {which} bounds must lie in [0, {size}]")
    return b


def window_max(x, lows, highs):
    """The maximum over box windows of planes ``x`` (R, D, H, W) and its flat index in the
    plane: ``lows[k]``/``highs[k]`` (1 or R, outputs along dim k) bound the windows along
    D, H and W.  PyTorch's NaN rule (a NaN is the maximum; the last one is picked); an
    empty window gives -inf at its start.  Returns (values (R, OD, OH, OW), int64 indices)."""
    cdef bint f32 = is_f32(x, "window_max")
    if x.ndim != 4:
        raise TypeError("window_max: planes (R, D, H, W) expected")
    cdef object src = np.ascontiguousarray(x)
    cdef Py_ssize_t R = src.shape[0]
    names = ("D", "H", "W")
    lo = [window_bounds(lows[k], R, src.shape[k + 1], names[k]) for k in range(3)]
    hi = [window_bounds(highs[k], R, src.shape[k + 1], names[k]) for k in range(3)]
    for k in range(3):
        if lo[k].shape != hi[k].shape:
            raise ValueError(f"window_max: {names[k]} bounds of different shapes")
    cdef Py_ssize_t OD = lo[0].shape[1], OH = lo[1].shape[1], OW = lo[2].shape[1]
    values = np.empty((R, OD, OH, OW), src.dtype)
    index = np.empty((R, OD, OH, OW), np.int64)
    if f32:
        mt_window_max_f32(<float*>data(values), <int64_t*>data(index), <const float*>data(src),
                          R, src.shape[1], src.shape[2], src.shape[3], OD, OH, OW,
                          <const int64_t*>data(lo[0]), <const int64_t*>data(hi[0]),
                          <const int64_t*>data(lo[1]), <const int64_t*>data(hi[1]),
                          <const int64_t*>data(lo[2]), <const int64_t*>data(hi[2]),
                          lo[0].shape[0] > 1, lo[1].shape[0] > 1, lo[2].shape[0] > 1)
    else:
        mt_window_max_f64(<double*>data(values), <int64_t*>data(index),
                          <const double*>data(src), R, src.shape[1], src.shape[2],
                          src.shape[3], OD, OH, OW,
                          <const int64_t*>data(lo[0]), <const int64_t*>data(hi[0]),
                          <const int64_t*>data(lo[1]), <const int64_t*>data(hi[1]),
                          <const int64_t*>data(lo[2]), <const int64_t*>data(hi[2]),
                          lo[0].shape[0] > 1, lo[1].shape[0] > 1, lo[2].shape[0] > 1)
    return values, index


cdef object channel_blocks(object x, str kernel):
    """``x`` as a C-contiguous (outer, C, inner) array (a copy only when strided)."""
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise TypeError(f"{kernel}: an (outer, C, inner) array expected")
    return np.ascontiguousarray(x)


cdef object per_channel(object k, object dtype, Py_ssize_t C, str kernel):
    if k is None:
        return None
    return operand(k, dtype, (C,), kernel)


def batch_norm_sums(x, grad, shift):
    """Per-channel sums of an (outer, C, inner) ``x``, in float64, shifted by ``shift``
    (C values near the channels' means): ``(sum(x - shift), sum((x - shift)**2))``, or
    with ``grad`` (x's shape and dtype) ``(sum(grad), sum(grad * (x - shift)))``."""
    cdef bint f32 = is_f32(x, "batch_norm_sums")
    cdef object src = channel_blocks(x, "batch_norm_sums")
    cdef object g = None if grad is None else operand(grad, src.dtype, src.shape,
                                                      "batch_norm_sums")
    cdef Py_ssize_t C = src.shape[1]
    cdef object sh = operand(shift, np.dtype(np.float64), (C,), "batch_norm_sums")
    cdef object s1 = np.empty(C, np.float64), s2 = np.empty(C, np.float64)
    cdef const void* gp = NULL if g is None else data(g)
    if f32:
        mt_bn_sums_f32(<const float*>data(src), <const float*>gp, src.shape[0], C,
                       src.shape[2], <const double*>data(sh), <double*>data(s1),
                       <double*>data(s2))
    else:
        mt_bn_sums_f64(<const double*>data(src), <const double*>gp, src.shape[0], C,
                       src.shape[2], <const double*>data(sh), <double*>data(s1),
                       <double*>data(s2))
    return s1, s2


def batch_norm_apply(out, x, kx, k0, grad=None, kg=None):
    """``out = kx * x + k0`` per channel of (outer, C, inner) arrays, plus ``kg * grad``
    with ``grad``; the coefficients have one value per channel, in x's dtype."""
    cdef bint f32 = is_f32(out, "batch_norm_apply")
    cdef object src = operand(x, out.dtype, out.shape, "batch_norm_apply")
    if src.ndim != 3:
        raise TypeError("batch_norm_apply: an (outer, C, inner) array expected")
    cdef object g = None if grad is None else operand(grad, out.dtype, out.shape,
                                                      "batch_norm_apply")
    cdef Py_ssize_t C = src.shape[1]
    cdef object a = per_channel(kx, out.dtype, C, "batch_norm_apply")
    cdef object b = per_channel(k0, out.dtype, C, "batch_norm_apply")
    cdef object w = per_channel(kg, out.dtype, C, "batch_norm_apply")
    if (g is None) != (w is None):
        raise TypeError("batch_norm_apply: grad and kg go together")
    cdef object res = target(out, "batch_norm_apply")
    cdef const void* gp = NULL if g is None else data(g)
    cdef const void* wp = NULL if w is None else data(w)
    if f32:
        mt_bn_apply_f32(<float*>data(res), <const float*>data(src), <const float*>gp,
                        src.shape[0], C, src.shape[2], <const float*>data(a),
                        <const float*>wp, <const float*>data(b))
    else:
        mt_bn_apply_f64(<double*>data(res), <const double*>data(src), <const double*>gp,
                        src.shape[0], C, src.shape[2], <const double*>data(a),
                        <const double*>wp, <const double*>data(b))
    return finish(out, res)


def gelu(out, x, bint tanh_mode):
    """GELU of ``x`` (``tanh_mode``: the tanh approximation) into ``out``."""
    cdef bint f32 = is_f32(out, "gelu")
    cdef object src = operand(x, out.dtype, out.shape, "gelu")
    cdef object res = target(out, "gelu")
    if f32:
        mt_gelu_f32(<float*>data(res), <const float*>data(src), src.size, tanh_mode)
    else:
        mt_gelu_f64(<double*>data(res), <const double*>data(src), src.size, tanh_mode)
    return finish(out, res)


def gelu_backward(out, grad, x, bint tanh_mode):
    """``grad`` times GELU's derivative at ``x`` into ``out``."""
    cdef bint f32 = is_f32(out, "gelu_backward")
    cdef object g = operand(grad, out.dtype, out.shape, "gelu_backward")
    cdef object src = operand(x, out.dtype, out.shape, "gelu_backward")
    cdef object res = target(out, "gelu_backward")
    if f32:
        mt_gelu_backward_f32(<float*>data(res), <const float*>data(g),
                             <const float*>data(src), src.size, tanh_mode)
    else:
        mt_gelu_backward_f64(<double*>data(res), <const double*>data(g),
                             <const double*>data(src), src.size, tanh_mode)
    return finish(out, res)


cdef object _channels_last(x):
    """``x`` (N, C, H, W) stored channels last, as its C-contiguous (N, H, W, C) array, or
    None for any other layout (a plain contiguous one included)."""
    if x.ndim != 4 or x.flags.c_contiguous:
        return None
    stored = x.transpose(0, 2, 3, 1)
    return stored if stored.flags.c_contiguous else None


cdef object _empty_channels_last(shape, dt):
    """A fresh (N, C, H, W) array stored channels last."""
    n, c, h, w = shape
    return np.empty((n, h, w, c), dt).transpose(0, 3, 1, 2)


def max_pool2d(x, kernel, stride, padding, dilation, out_size):
    """2-d max pooling of the last two dims of ``x`` (float32/float64): (values, int64 flat
    indices in each input plane), fresh arrays of the leading dims plus ``out_size``.
    Positions in the padding are skipped (PyTorch's kernel: the first maximum, the last
    NaN).  A 4-d ``x`` stored channels last is pooled as it lies, into results stored
    channels last (as PyTorch's channels-last kernel; float32 planes of fewer than 2**31
    positions); other layouts are made contiguous."""
    if not isinstance(x, np.ndarray) or x.ndim < 2:
        raise TypeError("max_pool2d: an array of at least 2 dims expected")
    cdef Py_ssize_t h = x.shape[x.ndim - 2], w = x.shape[x.ndim - 1]
    stored = _channels_last(x) if h * w <= INT32_MAX else None
    src = np.ascontiguousarray(x) if stored is None else stored
    cdef bint f32 = is_f32(src, "max_pool2d")
    cdef Py_ssize_t oh = out_size[0], ow = out_size[1]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1], dh = dilation[0], dw = dilation[1]
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(ph, pw, oh, ow) < 0 or h < 1 or w < 1 or \
            (oh - 1) * sh - ph >= h or (ow - 1) * sw - pw >= w or \
            (kh - 1) * dh < ph or (kw - 1) * dw < pw:
        raise ValueError("max_pool2d: every window must overlap the input")
    shape = x.shape[:x.ndim - 2] + (oh, ow)
    cdef Py_ssize_t batch, channels, planes
    if stored is not None:
        out, indices = _empty_channels_last(shape, src.dtype), \
            _empty_channels_last(shape, np.int64)
        batch, channels = x.shape[0], x.shape[1]
        at = np.empty(channels, np.int32 if f32 else np.int64)
        if f32:
            mt_max_pool2d_nhwc_f32(<float*>data(out), <int64_t*>data(indices),
                                   <int32_t*>data(at), <const float*>data(src), batch,
                                   channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
        else:
            mt_max_pool2d_nhwc_f64(<double*>data(out), <int64_t*>data(indices),
                                   <int64_t*>data(at), <const double*>data(src), batch,
                                   channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
        return out, indices
    out = np.empty(shape, src.dtype)
    indices = np.empty(shape, np.int64)
    planes = src.size // (h * w)
    cdef int64_t* idx = <int64_t*>data(indices)
    if f32:
        mt_max_pool2d_f32(<float*>data(out), idx, <const float*>data(src), planes, h, w, oh,
                          ow, kh, kw, sh, sw, ph, pw, dh, dw)
    else:
        mt_max_pool2d_f64(<double*>data(out), idx, <const double*>data(src), planes, h, w,
                          oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    return out, indices


def avg_pool2d(x, kernel, stride, padding, out_size, bint count_include_pad,
               divisor_override):
    """2-d average pooling of the last two dims of ``x`` (float32/float64): a fresh array of
    the leading dims plus ``out_size``.  Each window's sum over its positions inside the
    plane, over ``divisor_override`` (an int, or None: the window's size clipped to the
    padded plane, or to the plane itself without ``count_include_pad``)."""
    if not isinstance(x, np.ndarray) or x.ndim < 2:
        raise TypeError("avg_pool2d: an array of at least 2 dims expected")
    src = np.ascontiguousarray(x)    # only read: the forward never writes the plane
    out = np.empty(src.shape[:src.ndim - 2] + tuple(out_size), src.dtype)
    return _avg_pool2d(out, src, kernel, stride, padding, count_include_pad,
                       divisor_override, False, "avg_pool2d")


def avg_pool2d_backward(grad, tuple input_shape, kernel, stride, padding,
                        bint count_include_pad, divisor_override):
    """The gradient of ``avg_pool2d`` for ``grad`` (float32/float64, the pooled shape): a
    fresh array of ``input_shape``, each value of ``grad`` over its window's divisor added
    to the window's positions inside the plane."""
    if not isinstance(grad, np.ndarray) or grad.ndim < 2 or len(input_shape) != grad.ndim or \
            grad.shape[:grad.ndim - 2] != input_shape[:grad.ndim - 2]:
        raise TypeError("avg_pool2d_backward: grad with the input's leading dims expected")
    g = np.ascontiguousarray(grad)
    grad_input = np.empty(input_shape, g.dtype)
    _avg_pool2d(g, grad_input, kernel, stride, padding, count_include_pad, divisor_override,
                True, "avg_pool2d_backward")
    return grad_input


cdef object _avg_pool2d(pooled, plane, kernel, stride, padding, bint count_include_pad,
                        divisor_override, bint backward, str name):
    """Checks, then the C kernel: ``pooled`` from ``plane`` (or, ``backward``, the other way);
    both C-contiguous of one dtype, the leading dims checked by the callers."""
    cdef bint f32 = is_f32(plane, name)
    if pooled.dtype != plane.dtype:
        raise TypeError(f"{name}: arrays of one dtype expected")
    cdef Py_ssize_t h = plane.shape[plane.ndim - 2], w = plane.shape[plane.ndim - 1]
    cdef Py_ssize_t oh = pooled.shape[pooled.ndim - 2], ow = pooled.shape[pooled.ndim - 1]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], sh = stride[0], sw = stride[1]
    cdef Py_ssize_t ph = padding[0], pw = padding[1]
    cdef Py_ssize_t divisor = 0 if divisor_override is None else divisor_override
    if min(kh, kw, sh, sw) < 1 or min(ph, pw, oh, ow) < 0 or h < 1 or w < 1 or \
            (oh - 1) * sh - ph >= h or (ow - 1) * sw - pw >= w or 2 * ph > kh or \
            2 * pw > kw:
        raise ValueError(f"{name}: every window must overlap the input")
    if divisor_override is not None and divisor == 0:
        raise ValueError(f"{name}: divisor_override must not be zero")
    cdef Py_ssize_t planes = plane.size // (h * w)
    if f32:
        mt_avg_pool2d_f32(<float*>data(pooled), <float*>data(plane), planes, h, w, oh, ow,
                          kh, kw, sh, sw, ph, pw, count_include_pad, divisor, backward)
    else:
        mt_avg_pool2d_f64(<double*>data(pooled), <double*>data(plane), planes, h, w, oh,
                          ow, kh, kw, sh, sw, ph, pw, count_include_pad, divisor, backward)
    return plane if backward else pooled


def max_pool_backward(grad, indices, tuple input_shape, Py_ssize_t d):
    """Max pooling's gradient: ``grad`` added at its flat ``indices`` (int64, ``grad``'s
    shape) in each plane of the last ``d`` dims of a fresh zero array of ``input_shape``.
    When both are 4-d and stored channels last, so is the result (computed as they lie)."""
    if not isinstance(indices, np.ndarray) or indices.dtype != np.int64 or \
            not isinstance(grad, np.ndarray) or grad.shape != indices.shape or \
            not 0 < d <= len(input_shape) or grad.ndim < d or \
            grad.shape[:grad.ndim - d] != input_shape[:len(input_shape) - d]:
        raise TypeError("max_pool_backward: grad and int64 indices of one shape, with the "
                        "input's leading dims, expected")
    stored_grad = _channels_last(grad) if d == 2 else None
    stored_indices = _channels_last(indices) if stored_grad is not None else None
    channels_last = stored_indices is not None
    g = stored_grad if channels_last else np.ascontiguousarray(grad)
    cdef bint f32 = is_f32(g, "max_pool_backward")
    idx = stored_indices if channels_last else np.ascontiguousarray(indices)
    cdef Py_ssize_t plane = int(np.prod(input_shape[len(input_shape) - d:]))
    cdef Py_ssize_t planes = int(np.prod(input_shape[:len(input_shape) - d]))
    cdef Py_ssize_t per_plane = int(np.prod(g.shape[g.ndim - d:]))
    cdef Py_ssize_t batch, channels
    cdef int bad
    if channels_last:
        grad_input = _empty_channels_last(input_shape, g.dtype)
        batch, channels = grad.shape[0], grad.shape[1]
        per_plane = grad.shape[2] * grad.shape[3]
        if f32:
            bad = mt_max_pool_backward_nhwc_f32(<float*>data(grad_input), <const float*>data(g),
                                                <const int64_t*>data(idx), batch, channels,
                                                plane, per_plane)
        else:
            bad = mt_max_pool_backward_nhwc_f64(<double*>data(grad_input),
                                                <const double*>data(g),
                                                <const int64_t*>data(idx), batch, channels,
                                                plane, per_plane)
    else:
        grad_input = np.empty(input_shape, g.dtype)
        if f32:
            bad = mt_max_pool_backward_f32(<float*>data(grad_input), <const float*>data(g),
                                           <const int64_t*>data(idx), planes, plane,
                                           per_plane)
        else:
            bad = mt_max_pool_backward_f64(<double*>data(grad_input), <const double*>data(g),
                                           <const int64_t*>data(idx), planes, plane,
                                           per_plane)
    if bad:
        raise IndexError(f"max_pool_backward: an index is outside the plane of {plane}")
    return grad_input


def col2im(blocks, starts, Py_ssize_t total):
    """Rows of ``total`` (a fresh array (P, total)), row p the sum of the K blocks of
    ``blocks`` (P, K, L), block j added at ``starts[j]``: one pass per row over its blocks,
    while the row stays in cache."""
    if not isinstance(blocks, np.ndarray) or blocks.ndim != 3:
        raise TypeError("col2im: blocks (P, K, L) expected")
    b = np.ascontiguousarray(blocks)
    cdef bint f32 = is_f32(b, "col2im")
    offsets = np.ascontiguousarray(starts, dtype=np.int64)
    cdef Py_ssize_t planes = b.shape[0], k = b.shape[1], length = b.shape[2]
    if offsets.shape != (k,) or (k and (offsets.min() < 0 or offsets.max() + length > total)):
        raise ValueError(f"col2im: {k} starts in [0, {total - length}] expected")
    flat = np.empty((planes, total), b.dtype)
    if f32:
        mt_col2im_f32(<float*>data(flat), <const float*>data(b),
                      <const int64_t*>data(offsets), planes, total, k, length)
    else:
        mt_col2im_f64(<double*>data(flat), <const double*>data(b),
                      <const int64_t*>data(offsets), planes, total, k, length)
    return flat


def im2col2d(x, kernel, stride, dilation, out_size, bint positions_major, out=None):
    """The columns of a 2-d convolution of ``x`` (N, C, H, W), already padded: an array
    (N, C * kh * kw, oh * ow), or (N * oh * ow, C * kh * kw) if ``positions_major``
    (``out`` if given, C-contiguous, else a fresh one); element (n, c, i, j, y, z) is
    ``x[n, c, y * stride[0] + i * dilation[0], z * stride[1] + j * dilation[1]]``."""
    if not isinstance(x, np.ndarray) or x.ndim != 4:
        raise TypeError("im2col2d: an array (N, C, H, W) expected")
    src = np.ascontiguousarray(x)
    cdef bint f32 = is_f32(src, "im2col2d")
    cdef Py_ssize_t n = src.shape[0], c = src.shape[1], h = src.shape[2], w = src.shape[3]
    cdef Py_ssize_t kh = kernel[0], kw = kernel[1], oh = out_size[0], ow = out_size[1]
    cdef Py_ssize_t sh = stride[0], sw = stride[1], dh = dilation[0], dw = dilation[1]
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(oh, ow) < 0 or \
            (oh and (oh - 1) * sh + (kh - 1) * dh >= h) or \
            (ow and (ow - 1) * sw + (kw - 1) * dw >= w):
        raise ValueError("im2col2d: the windows must lie inside the input")
    cdef tuple shape = (n * oh * ow, c * kh * kw)
    if not positions_major:
        shape = (n, c * kh * kw, oh * ow)
    if out is None:
        out = np.empty(shape, src.dtype)
    elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != src.dtype or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise TypeError(f"im2col2d: out must be a writable C-contiguous {src.dtype} array of "
                        f"shape {shape}")
    if f32:
        mt_im2col_f32(<float*>data(out), <const float*>data(src), n, c, h, w, kh, kw, oh, ow,
                      sh, sw, dh, dw, positions_major)
    else:
        mt_im2col_f64(<double*>data(out), <const double*>data(src), n, c, h, w, kh, kw, oh,
                      ow, sh, sw, dh, dw, positions_major)
    return out


# --------------------------------------------------------------------------- tensor fast paths

cdef inline char* tensor_data(TensorBase t):
    return <char*>cnp.PyArray_DATA(<cnp.ndarray>t._storage.data) + t._offset * t._dtype.itemsize


cdef inline bint on_cpu_as(TensorBase t, int typenum):
    """Whether ``t`` is a CPU tensor of NumPy type ``typenum`` over a NumPy storage."""
    return t._dtype.typenum == typenum and t._storage.device.type == "cpu" and \
        cnp.PyArray_CheckExact(t._storage.data)


cdef inline int float_type(TensorBase t):
    """NPY_FLOAT or NPY_DOUBLE for a float32/float64 CPU tensor, else -1."""
    cdef int typenum = t._dtype.typenum
    if (typenum == cnp.NPY_FLOAT or typenum == cnp.NPY_DOUBLE) and on_cpu_as(t, typenum):
        return typenum
    return -1


cdef inline bint last_dim(object dim, Py_ssize_t ndim):
    """Whether ``dim`` is a plain int naming the last of ``ndim`` (>= 1) dims."""
    # compared as Python ints: a dim beyond C's range is left to the general path
    return type(dim) is int and ndim > 0 and (dim == ndim - 1 or dim == -1)


def softmax_rows(TensorBase x, dim, bint log_of):
    """softmax (``log_of``: log_softmax) of ``x`` along ``dim`` as a new tensor, when ``x``
    is a contiguous float32/float64 CPU tensor and ``dim`` its last dim; else None."""
    cdef int typenum = float_type(x)
    if typenum < 0 or not x._is_contig or not last_dim(dim, len(x._sizes)):
        return None
    cdef TensorBase out = empty_contiguous(x._sizes, x._dtype)
    cdef Py_ssize_t n = x._sizes[len(x._sizes) - 1]
    if x._numel == 0:
        return out
    if typenum == cnp.NPY_FLOAT:
        mt_softmax_f32(<float*>tensor_data(out), <const float*>tensor_data(x),
                       x._numel // n, n, log_of)
    else:
        mt_softmax_f64(<double*>tensor_data(out), <const double*>tensor_data(x),
                       x._numel // n, n, log_of)
    return out


def log_softmax_backward_rows(TensorBase grad, TensorBase output, dim):
    """log_softmax's gradient ``grad - exp(output) * sum(grad)`` along ``dim`` as a new
    tensor, when ``grad`` and ``output`` are contiguous float32/float64 CPU tensors of one
    shape and dtype and ``dim`` their last dim; else None."""
    cdef int typenum = float_type(grad)
    if typenum < 0 or not grad._is_contig or not output._is_contig or \
            grad._sizes != output._sizes or not on_cpu_as(output, typenum) or \
            not last_dim(dim, len(grad._sizes)):
        return None
    cdef TensorBase out = empty_contiguous(grad._sizes, grad._dtype)
    cdef Py_ssize_t n = grad._sizes[len(grad._sizes) - 1]
    if grad._numel == 0:
        return out
    if typenum == cnp.NPY_FLOAT:
        mt_log_softmax_backward_f32(<float*>tensor_data(out), <const float*>tensor_data(grad),
                                    <const float*>tensor_data(output), grad._numel // n, n)
    else:
        mt_log_softmax_backward_f64(<double*>tensor_data(out),
                                    <const double*>tensor_data(grad),
                                    <const double*>tensor_data(output), grad._numel // n, n)
    return out


cdef enum Reduction:
    NONE, MEAN, SUM


cdef int reduction_code(str reduction) except -1:
    if reduction == "none":
        return NONE
    if reduction == "mean":
        return MEAN
    if reduction == "sum":
        return SUM
    raise ValueError(f"{reduction} is not a valid value for reduction")


cdef class _NllOperands:
    """The strides (in elements) and pointers of nll_loss's targets and class weights, and
    each row's target weight once ``weigh`` has run."""
    cdef const int64_t* targets
    cdef Py_ssize_t t_stride, n, classes, w_stride
    cdef const char* weight
    cdef object weights     # each row's target weight (a NumPy array of the values' type)
    cdef int typenum

    cdef bint take(self, TensorBase target, object weight, Py_ssize_t classes, int typenum):
        """False when the targets or weights are not ones the fast paths serve."""
        cdef TensorBase w
        if not on_cpu_as(target, cnp.NPY_INT64) or len(target._sizes) > 1:
            return False
        self.targets = <const int64_t*>tensor_data(target)
        self.t_stride = target._strides[0] if target._sizes else 0
        self.n = target._numel
        self.classes = classes
        self.typenum = typenum
        self.weight = NULL
        self.w_stride = 0
        if weight is not None:
            if not isinstance(weight, TensorBase):
                return False
            w = weight
            if not on_cpu_as(w, typenum) or w._sizes != (classes,):
                return False
            self.weight = tensor_data(w)
            self.w_stride = w._strides[0]
        return True

    cdef object weigh(self, int64_t ignore_index):
        """Fills ``weights``; the first target outside [0, classes) (an int), else None."""
        cdef int64_t bad = 0
        cdef bint ok
        cdef cnp.npy_intp n = self.n
        self.weights = cnp.PyArray_EMPTY(1, &n, self.typenum, 0)
        if self.typenum == cnp.NPY_FLOAT:
            ok = row_weights(self.targets, self.t_stride, self.n, <const float*>self.weight,
                             self.w_stride, ignore_index, self.classes,
                             <float*>cnp.PyArray_DATA(self.weights), &bad)
        else:
            ok = row_weights(self.targets, self.t_stride, self.n, <const double*>self.weight,
                             self.w_stride, ignore_index, self.classes,
                             <double*>cnp.PyArray_DATA(self.weights), &bad)
        return None if ok else bad

    cdef double total_weight(self):
        cdef double total = 0
        cdef Py_ssize_t i
        cdef const char* w = <const char*>cnp.PyArray_DATA(self.weights)
        for i in range(self.n):
            total += (<const float*>w)[i] if self.typenum == cnp.NPY_FLOAT else \
                (<const double*>w)[i]
        return total


def nll_loss_rows(TensorBase self, TensorBase target, weight, str reduction,
                  int64_t ignore_index):
    """``nll_loss`` of float32/float64 CPU log-probabilities ``self`` ((N, C) of any
    strides, or (C,) with a 0-d target) for int64 CPU targets and optional class weights of
    ``self``'s dtype, as a new tensor; the first target outside [0, C) (an int: nothing is
    computed) or None (a call not served: also any whose shapes the op's checks refuse,
    which run first).  "mean" and "sum" add the losses in double."""
    cdef int typenum = float_type(self)
    cdef int code = reduction_code(reduction)
    cdef _NllOperands ops = _NllOperands()
    cdef Py_ssize_t ndim = len(self._sizes), i
    if typenum < 0 or ndim < 1 or ndim > 2 or \
            not ops.take(target, weight, self._sizes[ndim - 1], typenum) or \
            ops.n != (self._sizes[0] if ndim == 2 else 1):
        return None
    bad = ops.weigh(ignore_index)
    if bad is not None:
        return bad
    cdef cnp.npy_intp n = ops.n
    cdef object losses
    cdef TensorBase out
    cdef double total = 0, weight_sum
    cdef Py_ssize_t r_stride = self._strides[0] if ndim == 2 else 0
    cdef Py_ssize_t c_stride = self._strides[ndim - 1]
    cdef char* values
    if code == NONE:
        out = empty_contiguous(target._sizes, self._dtype)
        values = tensor_data(out)
    else:
        losses = cnp.PyArray_EMPTY(1, &n, typenum, 0)
        values = <char*>cnp.PyArray_DATA(losses)
    if typenum == cnp.NPY_FLOAT:
        nll_rows(<const float*>tensor_data(self), r_stride, c_stride, ops.targets,
                 ops.t_stride, <const float*>cnp.PyArray_DATA(ops.weights), ops.n,
                 <float*>values)
    else:
        nll_rows(<const double*>tensor_data(self), r_stride, c_stride, ops.targets,
                 ops.t_stride, <const double*>cnp.PyArray_DATA(ops.weights), ops.n,
                 <double*>values)
    if code == NONE:
        return out
    for i in range(ops.n):
        total += (<float*>values)[i] if typenum == cnp.NPY_FLOAT else (<double*>values)[i]
    if code == MEAN:
        weight_sum = ops.total_weight()
        # every target ignored (or of weight 0): 0 / 0, nan, as in PyTorch
        total = total / weight_sum if weight_sum != 0 else float("nan")
    out = empty_contiguous((), self._dtype)
    if typenum == cnp.NPY_FLOAT:
        (<float*>tensor_data(out))[0] = <float>total
    else:
        (<double*>tensor_data(out))[0] = total
    return out


def nll_loss_backward_rows(TensorBase grad, tuple self_shape, TensorBase target, weight,
                           str reduction, int64_t ignore_index):
    """``nll_loss_backward`` for a float32/float64 CPU ``grad`` (the loss's shape: the
    targets' for "none", else 0-d), int64 CPU targets and optional class weights of
    ``grad``'s dtype, as a new contiguous tensor of ``self_shape``; the first target
    outside [0, C) (an int) or None (a call not served), as ``nll_loss_rows``."""
    cdef int typenum = float_type(grad)
    cdef int code = reduction_code(reduction)
    cdef _NllOperands ops = _NllOperands()
    cdef Py_ssize_t ndim = len(self_shape)
    if typenum < 0 or ndim < 1 or ndim > 2 or len(grad._sizes) > 1:
        return None
    for size in self_shape:
        if type(size) is not int or size < 0:
            return None     # the general path's error
    if not ops.take(target, weight, self_shape[ndim - 1], typenum) or \
            ops.n != (self_shape[0] if ndim == 2 else 1):
        return None
    cdef Py_ssize_t g_stride = grad._strides[0] if grad._sizes else 0
    if grad._numel != (ops.n if code == NONE else 1):
        return None
    bad = ops.weigh(ignore_index)
    if bad is not None:
        return bad
    cdef double total = ops.total_weight() if code == MEAN else 1
    # all weights 0 (every target ignored): nothing is written, as in PyTorch
    cdef double scale = (1 / total if total != 0 else float("inf")) if code == MEAN else 1
    cdef TensorBase out = empty_contiguous(self_shape, grad._dtype)
    memset(tensor_data(out), 0, out._numel * out._dtype.itemsize)
    if typenum == cnp.NPY_FLOAT:
        nll_rows_backward(<float*>tensor_data(out), ops.classes, ops.targets, ops.t_stride,
                          <const float*>cnp.PyArray_DATA(ops.weights),
                          <const float*>tensor_data(grad), g_stride, scale, ops.n)
    else:
        nll_rows_backward(<double*>tensor_data(out), ops.classes, ops.targets, ops.t_stride,
                          <const double*>cnp.PyArray_DATA(ops.weights),
                          <const double*>tensor_data(grad), g_stride, scale, ops.n)
    return out


cdef object array_over(TensorBase t, int nd, cnp.npy_intp* dims, cnp.npy_intp* strides,
                       int typenum):
    """A NumPy array over ``t``'s memory (from its first element; strides in bytes) that
    keeps ``t``'s storage alive."""
    cdef cnp.ndarray a = cnp.PyArray_New(np.ndarray, nd, dims, typenum, strides,
                                         tensor_data(t), 0, cnp.NPY_ARRAY_WRITEABLE, None)
    cnp.set_array_base(a, t._storage.data)
    return a


cdef bint leading_zero_strides(TensorBase t, Py_ssize_t count):
    cdef Py_ssize_t i
    for i in range(count):
        if t._strides[i] != 0:
            return False
    return True


def linear_repeated_weight(TensorBase input, TensorBase weight, bias):
    """``linear`` of contiguous float32/float64 CPU rows ``input`` (..., r, in) with one
    (out, in) matrix repeated along the stack dims of ``weight`` (..., out, in) (stride 0
    there: a parameter expanded over a vmap batch), and a bias that is one (out,) vector
    (given as such, or repeated like the weight), as a new (..., r, out) tensor: one BLAS
    product of all the rows and the bias added row by row.  None for any other call (the
    op's general path, which also raises the errors): it serves only arguments that
    ``check_linear`` passes, so it may run before that check."""
    cdef Py_ssize_t nd = len(weight._sizes), stack = nd - 2, i, j, rows, n_out, n_in
    cdef int typenum = float_type(input)
    cdef TensorBase b = None
    if nd < 3 or typenum < 0 or not input._is_contig or len(input._sizes) != nd or \
            input._sizes[:stack] != weight._sizes[:stack] or \
            not on_cpu_as(weight, typenum) or not leading_zero_strides(weight, stack):
        return None
    n_out, n_in = weight._sizes[nd - 2], weight._sizes[nd - 1]
    if input._sizes[nd - 1] != n_in:
        return None
    if weight._strides[nd - 2] == 0 or weight._strides[nd - 1] == 0:
        return None      # a repeated row or column: NumPy's matmul would leave BLAS
    if bias is not None:
        if not isinstance(bias, TensorBase):
            return None
        b = bias
        if not on_cpu_as(b, typenum) or not (
                b._sizes == (n_out,) or (b._sizes == weight._sizes[:nd - 1] and
                                         leading_zero_strides(b, stack))):
            return None
    sizes = input._sizes[:nd - 1] + (n_out,)
    cdef TensorBase out = empty_contiguous(sizes, input._dtype)
    if out._numel == 0:
        return out
    rows = out._numel // n_out
    cdef Py_ssize_t item = input._dtype.itemsize
    cdef cnp.npy_intp row_dims[2]
    cdef cnp.npy_intp row_strides[2]
    cdef cnp.npy_intp matrix_dims[2]
    cdef cnp.npy_intp matrix_strides[2]
    cdef cnp.npy_intp out_dims[2]
    cdef cnp.npy_intp out_strides[2]
    row_dims[0], row_dims[1] = rows, n_in
    row_strides[0], row_strides[1] = n_in * item, item
    # the matrix transposed: (in, out), BLAS takes the transpose as a flag
    matrix_dims[0], matrix_dims[1] = n_in, n_out
    matrix_strides[0] = weight._strides[nd - 1] * item
    matrix_strides[1] = weight._strides[nd - 2] * item
    out_dims[0], out_dims[1] = rows, n_out
    out_strides[0], out_strides[1] = n_out * item, item
    np.matmul(array_over(input, 2, row_dims, row_strides, typenum),
              array_over(weight, 2, matrix_dims, matrix_strides, typenum),
              out=array_over(out, 2, out_dims, out_strides, typenum))
    if b is None:
        return out
    cdef Py_ssize_t step = b._strides[len(b._sizes) - 1]
    cdef char* o = tensor_data(out)
    cdef const char* v = tensor_data(b)
    if typenum == cnp.NPY_FLOAT:
        for i in range(rows):
            for j in range(n_out):
                (<float*>o)[i * n_out + j] += (<const float*>v)[j * step]
    else:
        for i in range(rows):
            for j in range(n_out):
                (<double*>o)[i * n_out + j] += (<const double*>v)[j * step]
    return out
