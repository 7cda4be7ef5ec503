"""Typed, single-threaded loops over strided memory: copy with casting, fill, sum of all
elements, and the raw-pointer fast paths that the Tensor's number slots call.

Kernels take NumPy ndarrays (zero-copy views of storages), so they know nothing of Tensor.
Every strided kernel first builds a Layout: size-1 dims dropped, dims ordered by the
destination's strides (outermost first), and neighbouring dims merged wherever they are
contiguous with each other in every operand, so most calls reduce to one flat loop.
Supported dtypes: float32, float64, int64, int32, bool.
"""
from cython cimport floating
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef enum:
    MAX_DIMS = 64
    # Each of the SUM_LANES float accumulators sums SUM_BLOCK / SUM_LANES = 16 values before
    # blocks are combined pairwise, which bounds the rounding error like NumPy's pairwise sum.
    SUM_LANES = 16
    SUM_BLOCK = 256
    # Tiled copies walk TILE_BLOCK_BYTES-wide blocks in MICRO_TILE x MICRO_TILE pieces
    # (measured best for a transposed 4096 x 4096 float32 source).
    TILE_BLOCK_BYTES = 1024
    MICRO_TILE = 8
    # Below this many elements along either tiled dim, tiling costs more than it saves.
    MIN_TILED_EXTENT = 8

cdef enum DtypeCode:
    F32, F64, I64, I32, BOOL

ctypedef fused src_t:
    float
    double
    int64_t
    int32_t
    cnp.npy_bool

ctypedef fused dst_t:
    float
    double
    int64_t
    int32_t
    cnp.npy_bool

ctypedef fused integral:
    int64_t
    int32_t
    cnp.npy_bool


cdef struct Layout:
    int ndim
    Py_ssize_t shape[MAX_DIMS]
    Py_ssize_t strides[2][MAX_DIMS]  # bytes; operand 0 is the destination or the only operand


cdef struct OuterIter:
    # Walks dims [0, ndim) of a Layout in C order, tracking each operand's byte offset.
    int ndim
    Py_ssize_t index[MAX_DIMS]
    Py_ssize_t offset[2]


# ---------------------------------------------------------------------------------------
# Layout: loading, ordering, coalescing
# ---------------------------------------------------------------------------------------

cdef int dtype_code(cnp.ndarray a):
    """The kernel dtype of `a`, or -1 when the kernels cannot touch it directly."""
    if not (cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISNOTSWAPPED(a)):
        return -1
    cdef int type_num = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(a)
    if type_num == cnp.NPY_FLOAT:
        return F32
    if type_num == cnp.NPY_DOUBLE:
        return F64
    if type_num == cnp.NPY_BOOL:
        return BOOL
    if type_num in (cnp.NPY_LONG, cnp.NPY_LONGLONG, cnp.NPY_INT) and itemsize == 8:
        return I64
    if type_num in (cnp.NPY_INT, cnp.NPY_LONG) and itemsize == 4:
        return I32
    return -1


cdef bint load_layout(Layout* layout, cnp.ndarray a, cnp.ndarray b):
    """Fill `layout` from `a` (and `b`, which must have a's shape, or None); False if empty."""
    cdef int dim
    cdef Py_ssize_t size
    layout.ndim = 0
    for dim in range(cnp.PyArray_NDIM(a)):
        size = cnp.PyArray_DIM(a, dim)
        if size == 0:
            return False
        if size == 1:
            continue
        layout.shape[layout.ndim] = size
        layout.strides[0][layout.ndim] = cnp.PyArray_STRIDE(a, dim)
        layout.strides[1][layout.ndim] = 0 if b is None else cnp.PyArray_STRIDE(b, dim)
        layout.ndim += 1
    return True


cdef inline Py_ssize_t magnitude(Py_ssize_t x) noexcept nogil:
    return -x if x < 0 else x


cdef inline bint is_inner_to(Layout* layout, int dim, int other) noexcept nogil:
    """True when `dim` should iterate faster than `other` (smaller |stride| in operand 0)."""
    cdef Py_ssize_t d0 = magnitude(layout.strides[0][dim])
    cdef Py_ssize_t o0 = magnitude(layout.strides[0][other])
    if d0 != o0:
        return d0 < o0
    return magnitude(layout.strides[1][dim]) < magnitude(layout.strides[1][other])


cdef inline void swap_dims(Layout* layout, int i, int j) noexcept nogil:
    cdef Py_ssize_t tmp
    cdef int op
    tmp = layout.shape[i]
    layout.shape[i] = layout.shape[j]
    layout.shape[j] = tmp
    for op in range(2):
        tmp = layout.strides[op][i]
        layout.strides[op][i] = layout.strides[op][j]
        layout.strides[op][j] = tmp


cdef void order_and_coalesce(Layout* layout) noexcept nogil:
    """Sort dims so operand 0's innermost dim comes last, then merge dims that are
    contiguous with each other in both operands."""
    cdef int i, j, kept
    for i in range(1, layout.ndim):
        j = i
        while j > 0 and is_inner_to(layout, j - 1, j):
            swap_dims(layout, j - 1, j)
            j -= 1
    if layout.ndim == 0:
        return
    kept = 0
    for i in range(1, layout.ndim):
        if (layout.strides[0][kept] == layout.strides[0][i] * layout.shape[i]
                and layout.strides[1][kept] == layout.strides[1][i] * layout.shape[i]):
            layout.shape[kept] *= layout.shape[i]
            layout.strides[0][kept] = layout.strides[0][i]
            layout.strides[1][kept] = layout.strides[1][i]
        else:
            kept += 1
            layout.shape[kept] = layout.shape[i]
            layout.strides[0][kept] = layout.strides[0][i]
            layout.strides[1][kept] = layout.strides[1][i]
    layout.ndim = kept + 1


cdef bint move_tile_dim(Layout* layout, Py_ssize_t src_itemsize) noexcept nogil:
    """When the source runs fastest along a dim other than the destination's innermost,
    move that dim next to the innermost so the copy can walk both in 2-D tiles."""
    cdef int inner = layout.ndim - 1
    cdef int dim, best = -1
    cdef Py_ssize_t best_stride
    if layout.ndim < 2 or magnitude(layout.strides[1][inner]) <= src_itemsize:
        return False
    best_stride = magnitude(layout.strides[1][inner])
    for dim in range(inner):
        if magnitude(layout.strides[1][dim]) < best_stride and layout.shape[dim] >= MIN_TILED_EXTENT:
            best = dim
            best_stride = magnitude(layout.strides[1][dim])
    if best < 0 or best_stride == 0 or layout.shape[inner] < MIN_TILED_EXTENT:
        return False
    while best < inner - 1:
        swap_dims(layout, best, best + 1)
        best += 1
    return True


cdef inline void start_outer(OuterIter* it, int ndim) noexcept nogil:
    cdef int dim
    it.ndim = ndim
    it.offset[0] = 0
    it.offset[1] = 0
    for dim in range(ndim):
        it.index[dim] = 0


cdef inline bint advance_outer(OuterIter* it, Layout* layout) noexcept nogil:
    """Step to the next outer position; False once every position has been visited."""
    cdef int dim
    for dim in range(it.ndim - 1, -1, -1):
        it.index[dim] += 1
        it.offset[0] += layout.strides[0][dim]
        it.offset[1] += layout.strides[1][dim]
        if it.index[dim] < layout.shape[dim]:
            return True
        it.index[dim] = 0
        it.offset[0] -= layout.strides[0][dim] * layout.shape[dim]
        it.offset[1] -= layout.strides[1][dim] * layout.shape[dim]
    return False


cdef void byte_extent(cnp.ndarray a, Py_ssize_t* lo, Py_ssize_t* hi):
    """[lo, hi): the addresses a non-empty array `a` can touch."""
    cdef Py_ssize_t step
    cdef int dim
    lo[0] = <Py_ssize_t>cnp.PyArray_DATA(a)
    hi[0] = lo[0] + cnp.PyArray_ITEMSIZE(a)
    for dim in range(cnp.PyArray_NDIM(a)):
        step = cnp.PyArray_STRIDE(a, dim) * (cnp.PyArray_DIM(a, dim) - 1)
        if step < 0:
            lo[0] += step
        else:
            hi[0] += step


# ---------------------------------------------------------------------------------------
# Copy with casting
# ---------------------------------------------------------------------------------------

cdef inline dst_t convert(src_t value, dst_t* target_type) noexcept nogil:
    # NumPy's unsafe cast: C conversion, except that bool means "non-zero".
    if dst_t is cnp.npy_bool:
        return value != 0
    else:
        return <dst_t>value


cdef inline void copy_row(dst_t* d, Py_ssize_t ds, const src_t* s, Py_ssize_t ss,
                          Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef dst_t value
    if ss == 0:
        value = convert(s[0], d)
        if ds == 1:
            for i in range(n):
                d[i] = value
        else:
            for i in range(n):
                d[i * ds] = value
    elif ds == 1 and ss == 1:
        if dst_t is src_t:
            memcpy(d, s, n * sizeof(dst_t))
        else:
            for i in range(n):
                d[i] = convert(s[i], d)
    else:
        for i in range(n):
            d[i * ds] = convert(s[i * ss], d)


cdef inline void copy_micro_tile(dst_t* d, Py_ssize_t d_rs, Py_ssize_t d_cs,
                                 const src_t* s, Py_ssize_t s_rs, Py_ssize_t s_cs,
                                 Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t r, c
    for r in range(rows):
        for c in range(cols):
            d[r * d_rs + c * d_cs] = convert(s[r * s_rs + c * s_cs], d)


cdef void copy_tiled_2d(dst_t* d, Py_ssize_t d_rs, Py_ssize_t d_cs,
                        const src_t* s, Py_ssize_t s_rs, Py_ssize_t s_cs,
                        Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t block) noexcept nogil:
    # Rows follow the source's fastest dim, columns the destination's. Two levels of
    # tiling: a block x block tile stays in L2 while it is walked in MICRO_TILE x MICRO_TILE
    # pieces whose few cache lines fit the L1 ways that power-of-two strides all map to.
    cdef Py_ssize_t r_block, c_block, r, c, r_block_end, c_block_end, micro_rows, micro_cols
    cdef bint unit_strides = d_cs == 1 and s_rs == 1
    c_block = 0
    while c_block < cols:
        c_block_end = min(c_block + block, cols)
        r_block = 0
        while r_block < rows:
            r_block_end = min(r_block + block, rows)
            r = r_block
            while r < r_block_end:
                micro_rows = min(<Py_ssize_t>MICRO_TILE, r_block_end - r)
                c = c_block
                while c < c_block_end:
                    micro_cols = min(<Py_ssize_t>MICRO_TILE, c_block_end - c)
                    if unit_strides:
                        copy_micro_tile(d + r * d_rs + c, d_rs, 1, s + r + c * s_cs, 1, s_cs,
                                        micro_rows, micro_cols)
                    else:
                        copy_micro_tile(d + r * d_rs + c * d_cs, d_rs, d_cs,
                                        s + r * s_rs + c * s_cs, s_rs, s_cs,
                                        micro_rows, micro_cols)
                    c += micro_cols
                r += micro_rows
            r_block = r_block_end
        c_block = c_block_end


cdef void copy_layout(dst_t* dst, const src_t* src, Layout* layout, bint tiled) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef Py_ssize_t ds, ss, d_rs = 0, s_rs = 0, block = 0
    cdef OuterIter it
    if layout.ndim == 0:
        dst[0] = convert(src[0], dst)
        return
    ds = layout.strides[0][inner] // <Py_ssize_t>sizeof(dst_t)
    ss = layout.strides[1][inner] // <Py_ssize_t>sizeof(src_t)
    if tiled:
        d_rs = layout.strides[0][inner - 1] // <Py_ssize_t>sizeof(dst_t)
        s_rs = layout.strides[1][inner - 1] // <Py_ssize_t>sizeof(src_t)
        block = TILE_BLOCK_BYTES // max(sizeof(dst_t), sizeof(src_t), 4)
    start_outer(&it, layout.ndim - 2 if tiled else layout.ndim - 1)
    while True:
        if tiled:
            copy_tiled_2d(<dst_t*>(<char*>dst + it.offset[0]), d_rs, ds,
                          <const src_t*>(<const char*>src + it.offset[1]), s_rs, ss,
                          layout.shape[inner - 1], layout.shape[inner], block)
        else:
            copy_row(<dst_t*>(<char*>dst + it.offset[0]), ds,
                     <const src_t*>(<const char*>src + it.offset[1]), ss, layout.shape[inner])
        if not advance_outer(&it, layout):
            break


cdef void copy_from(dst_t* dst, int src_code, const char* src, Layout* layout,
                    bint tiled) noexcept nogil:
    if src_code == F32:
        copy_layout(dst, <const float*>src, layout, tiled)
    elif src_code == F64:
        copy_layout(dst, <const double*>src, layout, tiled)
    elif src_code == I64:
        copy_layout(dst, <const int64_t*>src, layout, tiled)
    elif src_code == I32:
        copy_layout(dst, <const int32_t*>src, layout, tiled)
    else:
        copy_layout(dst, <const cnp.npy_bool*>src, layout, tiled)


cdef void run_copy(int dst_code, char* dst, int src_code, const char* src,
                   Layout* layout, bint tiled) noexcept nogil:
    if dst_code == F32:
        copy_from(<float*>dst, src_code, src, layout, tiled)
    elif dst_code == F64:
        copy_from(<double*>dst, src_code, src, layout, tiled)
    elif dst_code == I64:
        copy_from(<int64_t*>dst, src_code, src, layout, tiled)
    elif dst_code == I32:
        copy_from(<int32_t*>dst, src_code, src, layout, tiled)
    else:
        copy_from(<cnp.npy_bool*>dst, src_code, src, layout, tiled)


cdef void copy_disjoint(cnp.ndarray dst, int dst_code, cnp.ndarray src, int src_code):
    """Copy between same-shape arrays whose memory does not overlap."""
    cdef Layout layout
    cdef bint tiled
    if not load_layout(&layout, dst, src):
        return
    order_and_coalesce(&layout)
    tiled = move_tile_dim(&layout, cnp.PyArray_ITEMSIZE(src))
    with nogil:
        run_copy(dst_code, <char*>cnp.PyArray_DATA(dst), src_code,
                 <const char*>cnp.PyArray_DATA(src), &layout, tiled)


cdef int copy_raw(int typenum, Py_ssize_t itemsize, char* dst, const Py_ssize_t* dst_strides, const char* src,
                  const Py_ssize_t* src_strides, const Py_ssize_t* shape,
                  int ndim) noexcept nogil:
    """Same-dtype copy between disjoint strided buffers, from raw pointers (strides in
    bytes): the tensor's fast paths use it without building arrays.  Returns -1 when the
    dtype is not one of the kernel dtypes (nothing is copied then)."""
    cdef Layout layout
    cdef int code, dim
    if typenum == cnp.NPY_FLOAT:
        code = F32
    elif typenum == cnp.NPY_DOUBLE:
        code = F64
    elif typenum == cnp.NPY_INT64:
        code = I64
    elif typenum == cnp.NPY_INT32:
        code = I32
    elif typenum == cnp.NPY_BOOL:
        code = BOOL
    else:
        return -1
    layout.ndim = 0
    for dim in range(ndim):
        if shape[dim] == 0:
            return 0
        if shape[dim] == 1:
            continue
        layout.shape[layout.ndim] = shape[dim]
        layout.strides[0][layout.ndim] = dst_strides[dim]
        layout.strides[1][layout.ndim] = src_strides[dim]
        layout.ndim += 1
    order_and_coalesce(&layout)
    run_copy(code, dst, code, src, &layout, move_tile_dim(&layout, itemsize))
    return 0


cdef bint same_shape(cnp.ndarray a, cnp.ndarray b, bint and_strides):
    cdef int dim
    if cnp.PyArray_NDIM(a) != cnp.PyArray_NDIM(b):
        return False
    for dim in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, dim) != cnp.PyArray_DIM(b, dim):
            return False
        if and_strides and cnp.PyArray_STRIDE(a, dim) != cnp.PyArray_STRIDE(b, dim):
            return False
    return True


def copy_(cnp.ndarray dst not None, cnp.ndarray src not None):
    """Copy `src` into `dst` element by element, casting like NumPy's unsafe cast (to bool:
    value != 0). `src` is broadcast to dst's shape; the two may share memory."""
    cdef int dst_code, src_code
    cdef Py_ssize_t dst_lo, dst_hi, src_lo, src_hi
    cdef cnp.ndarray staged
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise RuntimeError("copy_(): the destination array is read-only")
    if not same_shape(dst, src, False):
        shape = (<object>dst).shape
        try:
            src = np.broadcast_to(src, shape)
        except ValueError:
            raise RuntimeError(
                f"copy_(): source of shape {list((<object>src).shape)} cannot be broadcast "
                f"to the destination's shape {list(shape)}") from None
    if dst.size == 0:
        return
    dst_code = dtype_code(dst)
    src_code = dtype_code(src)
    if dst_code < 0 or src_code < 0:
        np.copyto(dst, src, casting="unsafe")
        return
    byte_extent(dst, &dst_lo, &dst_hi)
    byte_extent(src, &src_lo, &src_hi)
    if dst_lo < src_hi and src_lo < dst_hi:
        if (dst_code == src_code and cnp.PyArray_DATA(dst) == cnp.PyArray_DATA(src)
                and same_shape(dst, src, True)):
            return
        staged = np.empty((<object>dst).shape, dtype=src.dtype)
        copy_disjoint(staged, src_code, src, src_code)
        src = staged
    copy_disjoint(dst, dst_code, src, src_code)


def fill_(cnp.ndarray dst not None, value):
    """Set every element of `dst` to `value` (a Python or NumPy scalar), cast to dst's dtype."""
    cdef Layout layout
    cdef int dst_code, src_code
    cdef cnp.ndarray scalar = np.asarray(value)
    if scalar.ndim != 0:
        raise TypeError(f"fill_() expects a scalar value, got an array of shape "
                        f"{(<object>scalar).shape}")
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise RuntimeError("fill_(): the destination array is read-only")
    if scalar.dtype.kind == "f":
        scalar = scalar.astype(np.float64)
    elif scalar.dtype.kind in "iu":
        scalar = scalar.astype(np.int64)
    elif scalar.dtype.kind != "b":
        raise TypeError(f"fill_(): unsupported value {value!r} of type {type(value).__name__}")
    dst_code = dtype_code(dst)
    src_code = dtype_code(scalar)
    if dst_code < 0:
        dst[...] = scalar
        return
    if not load_layout(&layout, dst, None):
        return
    order_and_coalesce(&layout)
    with nogil:
        run_copy(dst_code, <char*>cnp.PyArray_DATA(dst), src_code,
                 <const char*>cnp.PyArray_DATA(scalar), &layout, False)


# ---------------------------------------------------------------------------------------
# Sum of all elements
# ---------------------------------------------------------------------------------------

cdef inline floating block_sum(const floating* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    """Sum of n <= SUM_BLOCK elements in SUM_LANES independent accumulators, which lets the
    compiler vectorise the contiguous case; lanes are then combined pairwise."""
    cdef floating acc[SUM_LANES]
    cdef Py_ssize_t i, lane, width
    cdef Py_ssize_t n_full = n - n % SUM_LANES
    for lane in range(SUM_LANES):
        acc[lane] = 0
    if stride == 1:
        for i in range(0, n_full // SUM_LANES):
            for lane in range(SUM_LANES):
                acc[lane] += a[i * SUM_LANES + lane]
    else:
        for i in range(0, n_full // SUM_LANES):
            for lane in range(SUM_LANES):
                acc[lane] += a[(i * SUM_LANES + lane) * stride]
    for i in range(n_full, n):
        acc[i - n_full] += a[i * stride]
    width = SUM_LANES // 2
    while width > 0:
        for lane in range(width):
            acc[lane] += acc[lane + width]
        width //= 2
    return acc[0]


cdef double pairwise_sum(const floating* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    """Block sums combined pairwise in double: partial[level] holds the sum of 2**level
    consecutive blocks, merged like the carries of a binary counter."""
    cdef double partial[64]
    cdef double total
    cdef Py_ssize_t block, count
    cdef Py_ssize_t n_blocks = n // SUM_BLOCK
    cdef int level
    for block in range(n_blocks):
        total = block_sum(a + block * SUM_BLOCK * stride, SUM_BLOCK, stride)
        count = block + 1
        level = 0
        while count % 2 == 0:
            total += partial[level]
            count //= 2
            level += 1
        partial[level] = total
    total = block_sum(a + n_blocks * SUM_BLOCK * stride, n % SUM_BLOCK, stride)
    count = n_blocks
    level = 0
    while count:
        if count % 2:
            total += partial[level]
        count //= 2
        level += 1
    return total


cdef uint64_t integer_row_sum(const integral* a, Py_ssize_t n, Py_ssize_t stride) noexcept nogil:
    # Unsigned accumulators: wrap-around on overflow is defined, and matches int64's.
    cdef uint64_t acc[8]
    cdef Py_ssize_t i, lane
    cdef Py_ssize_t n_full = n - n % 8
    for lane in range(8):
        acc[lane] = 0
    if stride == 1:
        for i in range(0, n_full, 8):
            for lane in range(8):
                acc[lane] += <uint64_t>a[i + lane]
    else:
        for i in range(0, n_full, 8):
            for lane in range(8):
                acc[lane] += <uint64_t>a[(i + lane) * stride]
    for i in range(n_full, n):
        acc[0] += <uint64_t>a[i * stride]
    return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7]


cdef double float_layout_sum(const floating* a, Layout* layout) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef double total = 0
    cdef OuterIter it
    if layout.ndim == 0:
        return a[0]
    start_outer(&it, inner)
    while True:
        total += pairwise_sum(<const floating*>(<const char*>a + it.offset[0]),
                              layout.shape[inner],
                              layout.strides[0][inner] // <Py_ssize_t>sizeof(floating))
        if not advance_outer(&it, layout):
            return total


cdef int64_t integer_layout_sum(const integral* a, Layout* layout) noexcept nogil:
    cdef int inner = layout.ndim - 1
    cdef uint64_t total = 0
    cdef OuterIter it
    if layout.ndim == 0:
        return a[0]
    start_outer(&it, inner)
    while True:
        total += integer_row_sum(<const integral*>(<const char*>a + it.offset[0]),
                                 layout.shape[inner],
                                 layout.strides[0][inner] // <Py_ssize_t>sizeof(integral))
        if not advance_outer(&it, layout):
            return <int64_t>total


def sum_all(cnp.ndarray a not None):
    """Sum of every element: a Python float for floating dtypes (float32 is accumulated with
    float64 block combining), a Python int (int64, wrapping) for integer and bool dtypes."""
    cdef Layout layout
    cdef int code = dtype_code(a)
    cdef const char* data = <const char*>cnp.PyArray_DATA(a)
    cdef double float_total
    cdef int64_t integer_total
    if code < 0:
        return a.sum().item()
    if not load_layout(&layout, a, None):
        return 0.0 if code in (F32, F64) else 0
    order_and_coalesce(&layout)
    with nogil:
        if code == F32:
            float_total = float_layout_sum(<const float*>data, &layout)
        elif code == F64:
            float_total = float_layout_sum(<const double*>data, &layout)
        elif code == I64:
            integer_total = integer_layout_sum(<const int64_t*>data, &layout)
        elif code == I32:
            integer_total = integer_layout_sum(<const int32_t*>data, &layout)
        else:
            integer_total = integer_layout_sum(<const cnp.npy_bool*>data, &layout)
    if code in (F32, F64):
        return float_total
    return integer_total


# ---------------------------------------------------------------------------------------
# Raw-pointer fast paths for tiny contiguous tensors (declared in kernels.pxd)
# ---------------------------------------------------------------------------------------

cdef double sum_f32(const float* a, Py_ssize_t n) noexcept nogil:
    return pairwise_sum(a, n, 1)


cdef double sum_f64(const double* a, Py_ssize_t n) noexcept nogil:
    return pairwise_sum(a, n, 1)


cdef void add_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] + b[i]


cdef void sub_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] - b[i]


cdef void mul_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] * b[i]


cdef void div_f32(float* out, const float* a, const float* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] / b[i]


cdef void add_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] + b[i]


cdef void sub_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] - b[i]


cdef void mul_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] * b[i]


cdef void div_f64(double* out, const double* a, const double* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] / b[i]


cdef void add_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = a[i] + scalar


cdef void sub_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = a[i] - scalar


cdef void mul_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = a[i] * scalar


cdef void div_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = a[i] / scalar


cdef void rsub_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = scalar - a[i]


cdef void rdiv_scalar_f32(float* out, const float* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float scalar = <float>b
    for i in range(n):
        out[i] = scalar / a[i]


cdef void add_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] + b


cdef void sub_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] - b


cdef void mul_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] * b


cdef void div_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = a[i] / b


cdef void rsub_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = b - a[i]


cdef void rdiv_scalar_f64(double* out, const double* a, double b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = b / a[i]


cdef void neg_f32(float* out, const float* a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = -a[i]


cdef void neg_f64(double* out, const double* a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out[i] = -a[i]


cdef Py_ssize_t contiguous_size(cnp.ndarray out, cnp.ndarray a) except -1:
    """Checks shared by the Python entry points to the raw-pointer kernels."""
    if not (cnp.PyArray_IS_C_CONTIGUOUS(out) and cnp.PyArray_IS_C_CONTIGUOUS(a)
            and cnp.PyArray_ISBEHAVED(out) and cnp.PyArray_ISBEHAVED_RO(a)):
        raise ValueError("expected aligned, writeable, C-contiguous native-endian arrays")
    if out.dtype != a.dtype or out.dtype not in (np.float32, np.float64):
        raise TypeError(f"expected float32 or float64 arrays of one dtype, got {out.dtype} "
                        f"and {a.dtype}")
    if out.size != a.size:
        raise ValueError(f"expected arrays of one size, got {out.size} and {a.size}")
    return out.size


ctypedef void (*array_op_f32)(float*, const float*, const float*, Py_ssize_t) noexcept nogil
ctypedef void (*array_op_f64)(double*, const double*, const double*, Py_ssize_t) noexcept nogil
ctypedef void (*scalar_op_f32)(float*, const float*, double, Py_ssize_t) noexcept nogil
ctypedef void (*scalar_op_f64)(double*, const double*, double, Py_ssize_t) noexcept nogil


def binary_contiguous_(str op, cnp.ndarray out not None, cnp.ndarray a not None, b):
    """out = a `op` b on contiguous float32/float64 arrays, through the raw-pointer kernels.
    op is one of add, sub, mul, div (b an array or a number) or rsub, rdiv (b a number)."""
    cdef Py_ssize_t n = contiguous_size(out, a)
    cdef array_op_f32 array_f32
    cdef array_op_f64 array_f64
    cdef scalar_op_f32 scalar_f32
    cdef scalar_op_f64 scalar_f64
    if isinstance(b, np.ndarray):
        contiguous_size(out, b)
        if op == "add":
            array_f32, array_f64 = add_f32, add_f64
        elif op == "sub":
            array_f32, array_f64 = sub_f32, sub_f64
        elif op == "mul":
            array_f32, array_f64 = mul_f32, mul_f64
        elif op == "div":
            array_f32, array_f64 = div_f32, div_f64
        else:
            raise ValueError(f"binary_contiguous_(): unknown op {op!r} for an array operand")
        if out.dtype == np.float32:
            array_f32(<float*>cnp.PyArray_DATA(out), <float*>cnp.PyArray_DATA(a),
                      <float*>cnp.PyArray_DATA(b), n)
        else:
            array_f64(<double*>cnp.PyArray_DATA(out), <double*>cnp.PyArray_DATA(a),
                      <double*>cnp.PyArray_DATA(b), n)
        return
    if op == "add":
        scalar_f32, scalar_f64 = add_scalar_f32, add_scalar_f64
    elif op == "sub":
        scalar_f32, scalar_f64 = sub_scalar_f32, sub_scalar_f64
    elif op == "mul":
        scalar_f32, scalar_f64 = mul_scalar_f32, mul_scalar_f64
    elif op == "div":
        scalar_f32, scalar_f64 = div_scalar_f32, div_scalar_f64
    elif op == "rsub":
        scalar_f32, scalar_f64 = rsub_scalar_f32, rsub_scalar_f64
    elif op == "rdiv":
        scalar_f32, scalar_f64 = rdiv_scalar_f32, rdiv_scalar_f64
    else:
        raise ValueError(f"binary_contiguous_(): unknown op {op!r} for a scalar operand")
    if out.dtype == np.float32:
        scalar_f32(<float*>cnp.PyArray_DATA(out), <float*>cnp.PyArray_DATA(a), b, n)
    else:
        scalar_f64(<double*>cnp.PyArray_DATA(out), <double*>cnp.PyArray_DATA(a), b, n)


def neg_contiguous_(cnp.ndarray out not None, cnp.ndarray a not None):
    """out = -a on contiguous float32/float64 arrays, through the raw-pointer kernels."""
    cdef Py_ssize_t n = contiguous_size(out, a)
    if out.dtype == np.float32:
        neg_f32(<float*>cnp.PyArray_DATA(out), <float*>cnp.PyArray_DATA(a), n)
    else:
        neg_f64(<double*>cnp.PyArray_DATA(out), <double*>cnp.PyArray_DATA(a), n)


def empty_buffer(Py_ssize_t numel, dtype):
    """An uninitialised 1-D ndarray of `numel` elements. NumPy's allocator already asks the
    kernel for huge pages on large buffers, which is what fresh tensor results want."""
    if numel < 0:
        raise RuntimeError(f"empty_buffer(): numel must be non-negative, got {numel}")
    return np.empty(numel, dtype=dtype)


# ---------------------------------------------------------------------------------------
# Small matrix products: below a few thousand multiply-adds a plain loop beats the cost of
# calling BLAS through NumPy.
# ---------------------------------------------------------------------------------------

cdef void matmul_small(floating* out, const floating* a, Py_ssize_t a_rs, Py_ssize_t a_cs,
                       const floating* b, Py_ssize_t b_rs, Py_ssize_t b_cs,
                       Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    cdef Py_ssize_t i, j, p
    cdef floating acc
    for i in range(m):
        for j in range(n):
            acc = 0
            for p in range(k):
                acc = acc + a[i * a_rs + p * a_cs] * b[p * b_rs + j * b_cs]
            out[i * n + j] = acc
