"""Stride math of microtensor: pure functions on tuples of ints (sizes, strides in elements).

Owns memory formats, contiguity and density tests, the strides of fresh and
``preserve_format`` tensors, view and expand geometry, shape inference and broadcasting,
the output layout of elementwise ops, dimension wrapping and the size checks factories run
before allocating. Every rule follows PyTorch's; the tests compare against it.
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport INT64_MAX

from operator import index as _index
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_Check, PyTuple_New, PyTuple_SET_ITEM

cdef extern from *:
    """
    static inline int mt_mul_overflow(long long a, long long b, long long *out) {
        return __builtin_mul_overflow(a, b, out);
    }
    static inline int mt_add_overflow(long long a, long long b, long long *out) {
        return __builtin_add_overflow(a, b, out);
    }
    """
    bint mt_mul_overflow(long long a, long long b, long long* out) noexcept nogil
    bint mt_add_overflow(long long a, long long b, long long* out) noexcept nogil


class memory_format:
    """A memory layout request: ``contiguous_format``, ``preserve_format``, ``channels_last``
    or ``channels_last_3d`` (the only instances; compare them with ``is``)."""

    __slots__ = ("name",)

    def __init__(self, str name):
        self.name = name

    def __repr__(self):
        return "microtensor." + self.name

    def __reduce__(self):
        return self.name  # pickling and copying give back the module-level singleton


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


# ------------------------------------------------------------------------- small helpers

cdef enum:
    STACK_SLOTS = 64  # scratch integers kept on the C stack; larger requests use the heap


cdef inline long long* _scratch(Py_ssize_t count, long long* on_stack) except NULL:
    if count <= STACK_SLOTS:
        return on_stack
    cdef long long* buffer = <long long*>PyMem_Malloc(count * sizeof(long long))
    if buffer == NULL:
        raise MemoryError()
    return buffer


cdef inline void _release(long long* buffer, long long* on_stack) noexcept:
    if buffer != on_stack:
        PyMem_Free(buffer)


cdef inline tuple _as_tuple(object seq):
    if PyTuple_Check(seq):
        return <tuple>seq
    return tuple(seq)


cdef inline str _fmt(tuple shape):
    return "[" + ", ".join([str(s) for s in shape]) + "]"


cdef inline int _put(tuple result, Py_ssize_t i, long long value) except -1:
    """Fill slot ``i`` of a tuple fresh from ``PyTuple_New`` (which steals the reference)."""
    cdef object item = value
    Py_INCREF(item)
    PyTuple_SET_ITEM(result, i, item)
    return 0


cdef inline long long _stride_mul(long long a, long long b) except? -1:
    """One step of a dense stride computation (a stride times a size), overflow-checked."""
    cdef long long product
    if mt_mul_overflow(a, b, &product):
        raise RuntimeError("Stride calculation overflowed")
    return product


cdef inline int _check_same_rank(tuple sizes, tuple strides) except -1:
    if len(sizes) != len(strides):
        raise RuntimeError(f"dimensionality of sizes ({len(sizes)}) must match dimensionality "
                           f"of strides ({len(strides)})")
    return 0


cdef inline int _load(tuple values, long long* out) except -1:
    cdef Py_ssize_t i
    for i in range(len(values)):
        out[i] = values[i]
    return 0


cdef int _parse_all(tuple values) except -1:
    """Convert every value to int64 (OverflowError for one past it) before a size is judged:
    PyTorch parses its arguments first, so a size past int64 is the error even beside
    another bad size.  Called only on the way to raising, so that it costs nothing."""
    cdef long long value
    for item in values:
        value = item
    return 0


cdef inline bint _has_zero(tuple sizes) except -1:
    cdef Py_ssize_t i
    for i in range(len(sizes)):
        if <long long>sizes[i] == 0:
            return True
    return False


# ------------------------------------------------------------------ strides of fresh tensors

cpdef tuple contiguous_strides(sizes):
    """Row-major strides; size-0 and size-1 dims count as 1 for the dims to their left."""
    cdef tuple shape = _as_tuple(sizes)
    cdef Py_ssize_t i = len(shape)
    cdef tuple result = PyTuple_New(i)
    cdef long long size, stride = 1
    while i > 0:
        i -= 1
        _put(result, i, stride)
        size = shape[i]
        if size > 1 and i > 0:
            stride = _stride_mul(stride, size)
    return result


cpdef tuple channels_last_strides(sizes):
    """NHWC strides for NCHW sizes (raw sizes, as PyTorch: a 0 size zeroes the outer strides)."""
    cdef tuple shape = _as_tuple(sizes)
    if len(shape) != 4:
        raise RuntimeError("required rank 4 tensor to use channels_last format")
    cdef long long c = shape[1], h = shape[2], w = shape[3]
    cdef long long w_stride = c
    cdef long long h_stride = _stride_mul(w_stride, w)
    return (_stride_mul(h_stride, h), 1, h_stride, w_stride)


cpdef tuple channels_last_3d_strides(sizes):
    """NDHWC strides for NCDHW sizes."""
    cdef tuple shape = _as_tuple(sizes)
    if len(shape) != 5:
        raise RuntimeError("required rank 5 tensor to use channels_last_3d format")
    cdef long long c = shape[1], d = shape[2], h = shape[3], w = shape[4]
    cdef long long w_stride = c
    cdef long long h_stride = _stride_mul(w_stride, w)
    cdef long long d_stride = _stride_mul(h_stride, h)
    return (_stride_mul(d_stride, d), 1, d_stride, h_stride, w_stride)


cpdef tuple strides_for_format(sizes, memory_format):
    """Strides ``empty(sizes, memory_format=...)`` allocates with."""
    if memory_format is contiguous_format:
        return contiguous_strides(sizes)
    if memory_format is channels_last:
        return channels_last_strides(sizes)
    if memory_format is channels_last_3d:
        return channels_last_3d_strides(sizes)
    raise RuntimeError(f"unsupported memory format {memory_format!r}")


# ------------------------------------------------------------------- contiguity and density

cdef bint _contiguous_in_order(tuple sizes, tuple strides, const int* order, int rank) except -1:
    """Dims listed innermost first; size-1 dims may have any stride."""
    cdef long long expected = 1, size
    cdef int k, d
    for k in range(rank):
        d = order[k]
        size = sizes[d]
        if size != 1:
            if <long long>strides[d] != expected or mt_mul_overflow(expected, size, &expected):
                return False
    return True


cdef int[4] CL_ORDER = [1, 3, 2, 0]
cdef int[5] CL3D_ORDER = [1, 4, 3, 2, 0]


cdef bint _is_contiguous_rowmajor(tuple sizes, tuple strides) except -1:
    """Row-major contiguity; size-1 dims may have any stride and empty tensors always pass."""
    cdef Py_ssize_t d = len(sizes)
    cdef long long expected = 1, size
    if _has_zero(sizes):
        return True
    while d > 0:
        d -= 1
        size = sizes[d]
        if size != 1:
            if <long long>strides[d] != expected or mt_mul_overflow(expected, size, &expected):
                return False
    return True


cpdef bint is_contiguous(sizes, strides, memory_format=contiguous_format) except -1:
    """``Tensor.is_contiguous(memory_format)``: channels-last formats are False for other ranks."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    _check_same_rank(shape, stride)
    if memory_format is channels_last:
        return len(shape) == 4 and _contiguous_in_order(shape, stride, CL_ORDER, 4)
    if memory_format is channels_last_3d:
        return len(shape) == 5 and _contiguous_in_order(shape, stride, CL3D_ORDER, 5)
    if memory_format is contiguous_format or memory_format is preserve_format:
        return _is_contiguous_rowmajor(shape, stride)
    raise TypeError(f"is_contiguous(): memory_format must be a microtensor memory format, "
                    f"got {type(memory_format).__name__}")


cpdef bint is_non_overlapping_and_dense(sizes, strides) except -1:
    """True when the elements exactly tile a block of storage in some dim order."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    _check_same_rank(shape, stride)
    cdef Py_ssize_t n = len(shape), count = 0, i, j
    cdef long long size, key_stride, expected = 1
    if n == 1:
        return <long long>shape[0] < 2 or <long long>stride[0] == 1
    if _has_zero(shape):
        return True
    cdef long long on_stack[STACK_SLOTS]
    # sizes in the first half, strides in the second, of the dims with size >= 2, by stride
    cdef long long* buffer = _scratch(2 * n, on_stack)
    cdef long long* by_size = buffer
    cdef long long* by_stride = buffer + n
    try:
        for i in range(n):
            size = shape[i]
            if size < 2:
                continue
            key_stride = stride[i]
            j = count
            while j > 0 and by_stride[j - 1] > key_stride:
                by_stride[j] = by_stride[j - 1]
                by_size[j] = by_size[j - 1]
                j -= 1
            by_stride[j] = key_stride
            by_size[j] = size
            count += 1
        for i in range(count):
            if by_stride[i] != expected or mt_mul_overflow(expected, by_size[i], &expected):
                return False
        return True
    finally:
        _release(buffer, on_stack)


cpdef long long storage_size_for(sizes, strides, long long itemsize=1) except -1:
    """Elements of storage a tensor of these sizes and strides spans from its offset:
    PyTorch's ``computeStorageNbytes``, which refuses an extent whose size in bytes (of
    ``itemsize``-byte elements) overflows int64."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    _check_same_rank(shape, stride)
    cdef Py_ssize_t i, n = len(shape)
    cdef long long extent = 1, term
    if _has_zero(shape):
        return 0
    for i in range(n):
        if <long long>stride[i] < 0:
            raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, "
                               f"got strides: {_fmt(stride)}")
        if (mt_mul_overflow(<long long>shape[i] - 1, stride[i], &term)
                or mt_add_overflow(extent, term, &extent)
                or (i == n - 1 and mt_mul_overflow(extent, itemsize, &term))):
            raise RuntimeError(f"Storage size calculation overflowed with sizes={_fmt(shape)} "
                               f"and strides={_fmt(stride)}")
    return extent


# ------------------------------------------------------------------------ layout suggestion

cdef bint _strides_like_channels_last(tuple sizes, tuple strides, const int* order,
                                      int rank) except -1:
    """PyTorch's is_channels_last_strides_2d/3d: a layout that *looks* channels-last,
    with ambiguous cases (C stride 0, N111-like ties) falling back to contiguous."""
    cdef long long min_stride = 0, size, stride
    cdef long long channel_stride = strides[1]
    cdef int k, d
    if channel_stride == 0:
        return False
    for k in range(rank):
        d = order[k]
        size = sizes[d]
        stride = strides[d]
        if size == 0 or stride < min_stride:
            return False
        if d == 0 and min_stride == channel_stride:
            return False
        if size <= 1:
            min_stride = stride
        elif mt_mul_overflow(stride, size, &min_stride):
            min_stride = INT64_MAX  # saturate: no later stride reaches past this extent
    return True


cpdef object suggest_memory_format(sizes, strides):
    """``Tensor.suggest_memory_format()``: channels_last(_3d) when the strides look like it."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    _check_same_rank(shape, stride)
    if len(shape) == 4 and _strides_like_channels_last(shape, stride, CL_ORDER, 4):
        return channels_last
    if len(shape) == 5 and _strides_like_channels_last(shape, stride, CL3D_ORDER, 5):
        return channels_last_3d
    return contiguous_format


cdef int _stride_order_compare(long long* sizes, long long* strides, long long dim0,
                               long long dim1) noexcept:
    """-1: dim0 is inner to dim1; 1: it is outer; 0: undecided (a stride is 0, or a tie
    that the smaller-size-first rule does not break)."""
    cdef long long stride0 = strides[dim0], stride1 = strides[dim1]
    if stride0 == 0 or stride1 == 0:
        return 0
    if stride0 < stride1:
        return -1
    if stride0 > stride1:
        return 1
    return 1 if sizes[dim0] > sizes[dim1] else 0


cdef void _sort_dims_inner_first(long long* perm, Py_ssize_t n, long long* sizes,
                                 long long* strides, Py_ssize_t operands) noexcept:
    """PyTorch's insertion sort of dims (start order n-1..0) by stride: an undecided comparison
    neither swaps nor stops, so a dim can hop over dims it cannot be ordered against.
    ``strides`` holds ``operands`` rows of ``n``; the first row that decides wins."""
    cdef Py_ssize_t i, dim0, dim1, op
    cdef long long tmp
    cdef int comparison
    for i in range(n):
        perm[i] = n - 1 - i
    for i in range(1, n):
        dim1 = i
        dim0 = i - 1
        while dim0 >= 0:
            comparison = 0
            for op in range(operands):
                comparison = _stride_order_compare(sizes, strides + op * n, perm[dim0], perm[dim1])
                if comparison != 0:
                    break
            if comparison > 0:
                tmp = perm[dim0]
                perm[dim0] = perm[dim1]
                perm[dim1] = tmp
                dim1 = dim0
            elif comparison < 0:
                break
            dim0 -= 1


cpdef tuple infer_dense_strides(sizes, strides):
    """Dense strides ordering the dims like the given strides (used for non-dense inputs)."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    _check_same_rank(shape, stride)
    cdef Py_ssize_t n = len(shape), i
    if n == 0:
        return ()
    if n == 1:
        return (1,)
    cdef long long on_stack[STACK_SLOTS]
    cdef long long* buffer = _scratch(3 * n, on_stack)
    cdef long long* c_sizes = buffer
    cdef long long* c_strides = buffer + n
    cdef long long* perm = buffer + 2 * n
    cdef long long next_stride = 1, dim
    cdef tuple result
    try:
        _load(shape, c_sizes)
        _load(stride, c_strides)
        _sort_dims_inner_first(perm, n, c_sizes, c_strides, 1)
        result = PyTuple_New(n)
        for i in range(n):
            dim = perm[i]
            _put(result, dim, next_stride)
            if c_sizes[dim] > 1 and i + 1 < n:
                next_stride = _stride_mul(next_stride, c_sizes[dim])
        return result
    finally:
        _release(buffer, on_stack)


cpdef tuple preserve_format_strides(sizes, strides):
    """Strides of ``empty_like``/``clone`` with ``preserve_format``: kept when dense,
    otherwise the dense strides in the same dim order."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    if is_non_overlapping_and_dense(shape, stride):
        return stride
    return infer_dense_strides(shape, stride)


# ------------------------------------------------------------------------- views and shapes

cpdef object view_strides(old_sizes, old_strides, new_sizes):
    """Strides of ``view(new_sizes)`` sharing storage, or None when no view can express it
    (a new dim would span two non-mergeable runs of old dims)."""
    cdef tuple old_shape = _as_tuple(old_sizes), old_stride = _as_tuple(old_strides)
    cdef tuple new_shape = _as_tuple(new_sizes)
    _check_same_rank(old_shape, old_stride)
    cdef Py_ssize_t old_n = len(old_shape), new_n = len(new_shape)
    cdef Py_ssize_t old_d, new_d = new_n - 1
    cdef long long chunk_base_stride, chunk_numel = 1, view_numel = 1, new_size
    cdef tuple result
    if old_n == 0:
        return (1,) * new_n
    if _has_zero(old_shape):
        if old_shape == new_shape:
            return old_stride
        return contiguous_strides(new_shape)
    result = PyTuple_New(new_n)
    chunk_base_stride = old_stride[old_n - 1]
    old_d = old_n
    while old_d > 0:
        old_d -= 1
        if mt_mul_overflow(chunk_numel, old_shape[old_d], &chunk_numel):
            return None
        # a chunk is a run of old dims that merge into one; it ends where the next outer
        # (non-size-1) dim does not continue it
        if old_d == 0 or (<long long>old_shape[old_d - 1] != 1
                          and <long long>old_stride[old_d - 1] != chunk_numel * chunk_base_stride):
            while new_d >= 0:
                new_size = new_shape[new_d]
                if not (view_numel < chunk_numel or new_size == 1):
                    break
                _put(result, new_d, view_numel * chunk_base_stride)
                if mt_mul_overflow(view_numel, new_size, &view_numel):
                    return None
                new_d -= 1
            if view_numel != chunk_numel:
                return None
            if old_d > 0:
                chunk_base_stride = old_stride[old_d - 1]
                chunk_numel = 1
                view_numel = 1
    if new_d != -1:
        return None
    return result


cpdef tuple infer_size(shape, long long numel):
    """Resolve one ``-1`` in a view/reshape shape for a tensor of ``numel`` elements."""
    cdef tuple requested = _as_tuple(shape)
    cdef Py_ssize_t n = len(requested), i, infer_dim = -1
    cdef long long size, known = 1
    cdef bint overflow = False, has_zero = False
    cdef tuple result
    for i in range(n):
        size = requested[i]
        if size == -1:
            if infer_dim >= 0:
                _parse_all(requested)
                raise RuntimeError("only one dimension can be inferred")
            infer_dim = i
        elif size >= 0:
            has_zero = has_zero or size == 0
            overflow = overflow or mt_mul_overflow(known, size, &known)
        else:
            _parse_all(requested)
            raise RuntimeError(f"invalid shape dimension {size} at index {i} of shape "
                               f"{_fmt(requested)}")
    if has_zero:
        known = 0
    elif overflow:
        raise RuntimeError(f"shape '{_fmt(requested)}' is invalid for input of size {numel}")
    if infer_dim < 0:
        if known != numel:
            raise RuntimeError(f"shape '{_fmt(requested)}' is invalid for input of size {numel}")
        return requested
    if known == 0:
        if numel == 0:
            raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {_fmt(requested)} "
                               "because the unspecified dimension size -1 can be any value and "
                               "is ambiguous")
        raise RuntimeError(f"shape '{_fmt(requested)}' is invalid for input of size {numel}")
    if numel % known != 0:
        raise RuntimeError(f"shape '{_fmt(requested)}' is invalid for input of size {numel}")
    result = PyTuple_New(n)
    for i in range(n):
        _put(result, i, numel // known if i == infer_dim else <long long>requested[i])
    return result


cpdef tuple broadcast_pair(a, b):
    """The broadcast of two shapes (right-aligned; size 1 stretches, even to 0)."""
    cdef tuple shape_a = _as_tuple(a), shape_b = _as_tuple(b)
    if shape_a == shape_b:
        return shape_a
    cdef Py_ssize_t n_a = len(shape_a), n_b = len(shape_b)
    cdef Py_ssize_t n = n_a if n_a > n_b else n_b, i, offset
    cdef long long size_a, size_b
    cdef tuple result = PyTuple_New(n)
    i = n
    while i > 0:  # innermost first, so a mismatch is reported at the last such dim
        i -= 1
        offset = n - 1 - i
        size_a = shape_a[n_a - 1 - offset] if offset < n_a else 1
        size_b = shape_b[n_b - 1 - offset] if offset < n_b else 1
        if size_a < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {size_a}: "
                               f"{_fmt(shape_a)}")
        if size_b < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {size_b}: "
                               f"{_fmt(shape_b)}")
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise RuntimeError(f"The size of tensor a ({size_a}) must match the size of tensor b "
                               f"({size_b}) at non-singleton dimension {i}")
        _put(result, i, size_b if size_a == 1 else size_a)
    return result


def broadcast_shapes(*shapes):
    """``torch.broadcast_shapes``: the shape all arguments (shapes or ints) broadcast to."""
    cdef tuple result = ()
    for shape in shapes:
        result = broadcast_pair(result, (shape,) if isinstance(shape, int) else shape)
    return result


cpdef tuple expand_geometry(sizes, strides, new_sizes):
    """``(sizes, strides)`` of ``expand(new_sizes)``: ``-1`` keeps a size, stretched size-1
    dims and new leading dims get stride 0."""
    cdef tuple shape = _as_tuple(sizes), stride = _as_tuple(strides)
    cdef tuple target = _as_tuple(new_sizes)
    _check_same_rank(shape, stride)
    cdef Py_ssize_t n = len(target), old_n = len(shape), i, d
    cdef long long size, dim_stride, target_size, inner_size = 1, inner_stride = 1
    if n < old_n:
        _parse_all(target)
        raise RuntimeError(f"expand({_fmt(shape)}, size={_fmt(target)}): the number of sizes "
                           f"provided ({n}) must be greater or equal to the number of dimensions "
                           f"in the tensor ({old_n})")
    cdef tuple out_sizes = PyTuple_New(n), out_strides = PyTuple_New(n)
    i = n
    while i > 0:
        i -= 1
        d = i - (n - old_n)
        if d >= 0:
            size = shape[d]
            dim_stride = stride[d]
        else:
            size = 1
            dim_stride = inner_size * inner_stride if old_n else 0  # a 0-d source: all strides 0
        target_size = target[i]
        if target_size == -1:
            if d < 0:
                _parse_all(target)
                raise RuntimeError(f"The expanded size of the tensor (-1) isn't allowed in a "
                                   f"leading, non-existing dimension {i}")
            target_size = size
        elif target_size < 0:
            _parse_all(target)
            raise RuntimeError(f"Trying to create tensor with negative dimension {target_size}: "
                               f"{_fmt(target)}")
        if size != target_size:
            if size != 1:
                _parse_all(target)
                raise RuntimeError(f"The expanded size of the tensor ({target_size}) must match the "
                                   f"existing size ({size}) at non-singleton dimension {i}.  "
                                   f"Target sizes: {_fmt(target)}.  Tensor sizes: {_fmt(shape)}")
            size = target_size
            dim_stride = 0
        _put(out_sizes, i, size)
        _put(out_strides, i, dim_stride)
        inner_size = size
        inner_stride = dim_stride
    return (out_sizes, out_strides)


cpdef tuple expand_strides(sizes, strides, new_sizes):
    """Strides of ``expand(new_sizes)`` (see ``expand_geometry`` for the sizes too)."""
    return expand_geometry(sizes, strides, new_sizes)[1]


# ------------------------------------------------------------------------ elementwise output

cpdef tuple elementwise_output_strides(out_sizes, inputs):
    """Strides PyTorch's TensorIterator gives the output of an elementwise op over ``inputs``
    (``(sizes, strides)`` pairs broadcastable to ``out_sizes``): the inputs' common layout
    when they share one, else dense strides in the dim order the inputs' strides suggest."""
    cdef tuple shape = _as_tuple(out_sizes)
    cdef tuple operands = _as_tuple(inputs), op_shape, op_stride
    cdef Py_ssize_t n = len(shape), k = len(operands), op, i, offset
    cdef bint same_shape = True, contiguous = True, cl_contiguous = True, dense = True
    cdef bint same_strides = True, inverted = True
    cdef tuple first_stride = None
    for op in range(k):
        op_shape, op_stride = operands[op]
        op_shape = _as_tuple(op_shape)
        op_stride = _as_tuple(op_stride)
        _check_same_rank(op_shape, op_stride)
        if len(op_shape) > n:
            raise RuntimeError(f"operand {op} has {len(op_shape)} dims, more than the output's {n}")
        same_shape = same_shape and op_shape == shape
    if n == 0:
        return ()
    if same_shape:
        # PyTorch's fast setup: a layout all operands share is reused as-is
        for op in range(k):
            op_stride = _as_tuple(operands[op][1])
            contiguous = contiguous and _is_contiguous_rowmajor(shape, op_stride)
            cl_contiguous = cl_contiguous and n == 4 and _contiguous_in_order(shape, op_stride,
                                                                              CL_ORDER, 4)
            dense = dense and is_non_overlapping_and_dense(shape, op_stride)
            if first_stride is None:
                first_stride = op_stride
            else:
                same_strides = same_strides and op_stride == first_stride
        if contiguous:
            return contiguous_strides(shape)
        if cl_contiguous:
            return channels_last_strides(shape)
        if dense and same_strides:
            return first_stride
    cdef long long on_stack[STACK_SLOTS]
    cdef long long* buffer = _scratch((k + 2) * n, on_stack)
    cdef long long* c_sizes = buffer
    cdef long long* perm = buffer + n
    cdef long long* c_strides = buffer + 2 * n
    cdef long long* row
    cdef long long next_stride = 1
    cdef tuple result
    try:
        _load(shape, c_sizes)
        for op in range(k):
            op_shape, op_stride = operands[op]
            op_shape = _as_tuple(op_shape)
            op_stride = _as_tuple(op_stride)
            row = c_strides + op * n
            offset = n - len(op_shape)
            for i in range(offset):
                row[i] = 0
            for i in range(len(op_shape)):
                # a size-1 dim stretched by broadcasting does not move through memory
                if <long long>op_shape[i] == 1 and c_sizes[offset + i] != 1:
                    row[offset + i] = 0
                else:
                    row[offset + i] = op_stride[i]
        _sort_dims_inner_first(perm, n, c_sizes, c_strides, k)
        for i in range(n):
            if perm[i] != n - 1 - i:
                inverted = False
                break
        if inverted:
            return contiguous_strides(shape)
        result = PyTuple_New(n)
        for i in range(n):
            _put(result, perm[i], next_stride)
            if i + 1 < n:  # the raw size, as PyTorch: a 0 size zeroes the outer strides
                next_stride = _stride_mul(next_stride, c_sizes[perm[i]])
        return result
    finally:
        _release(buffer, on_stack)


# ------------------------------------------------------------------------- argument checks

cpdef Py_ssize_t wrap_dim(object dim, long long ndim) except -1:
    """A dim in ``[-ndim, ndim)`` as a non-negative index (0-d tensors accept -1 and 0).
    As in PyTorch, a dim is an integer (a NumPy integer or a one-element integer tensor
    too); a float or a bool is a TypeError."""
    cdef long long d
    if type(dim) is not int and (isinstance(dim, bool) or not hasattr(type(dim), "__index__")):
        raise TypeError(f"argument 'dim' must be int, not {type(dim).__name__}")
    try:
        d = dim if type(dim) is int else _index(dim)
    except OverflowError:
        raise ValueError(f"argument 'dim' must fit in 64 bits (Overflow when unpacking "
                         f"long long), got {dim}") from None
    if ndim <= 0:
        ndim = 1
    if d < -ndim or d >= ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, "
                         f"{ndim - 1}], but got {d})")
    return d + ndim if d < 0 else d


cpdef check_size_nonnegative(sizes):
    """Refuse sizes a factory cannot allocate: negative ones, or a product of sizes that
    overflows (PyTorch's rule: a 0 after an overflowing prefix does not excuse it)."""
    cdef tuple shape = _as_tuple(sizes)
    cdef Py_ssize_t i
    cdef unsigned long long numel
    cdef bint overflow = False
    for i in range(len(shape)):
        if shape[i] < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {shape[i]}: "
                               f"{_fmt(shape)}")
        overflow = overflow or shape[i] > INT64_MAX
    if overflow or size_product_overflows(shape, &numel) or numel > INT64_MAX:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={_fmt(shape)}")


cpdef long long check_storage_nbytes(sizes, long long itemsize) except -1:
    """Bytes of a contiguous storage for ``sizes`` (non-negative int64 values) of
    ``itemsize``-byte elements: PyTorch's ``computeStorageNbytesContiguous``, which refuses
    any product that overflows, itemsize included."""
    cdef tuple shape = _as_tuple(sizes)
    cdef unsigned long long nbytes
    cdef bint overflow = size_product_overflows(shape, &nbytes)
    overflow |= mt_u64_mul_overflow(nbytes, <unsigned long long>itemsize, &nbytes)
    if overflow or nbytes > INT64_MAX:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={_fmt(shape)}")
    return nbytes
