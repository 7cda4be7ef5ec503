# Declarations of the stride math in meta.pyx, so other Cython modules can call it without
# going through Python attribute lookup (``from microtensor._C.meta cimport ...``).

cpdef tuple contiguous_strides(sizes)
cpdef tuple channels_last_strides(sizes)
cpdef tuple channels_last_3d_strides(sizes)
cpdef tuple strides_for_format(sizes, object memory_format)
cpdef bint is_contiguous(sizes, strides, object memory_format=*) except -1
cpdef bint is_non_overlapping_and_dense(sizes, strides) except -1
cpdef long long storage_size_for(sizes, strides) except -1
cpdef object suggest_memory_format(sizes, strides)
cpdef tuple infer_dense_strides(sizes, strides)
cpdef tuple preserve_format_strides(sizes, strides)
cpdef object view_strides(old_sizes, old_strides, new_sizes)
cpdef tuple infer_size(shape, long long numel)
cpdef tuple broadcast_pair(a, b)
cpdef tuple expand_geometry(sizes, strides, new_sizes)
cpdef tuple expand_strides(sizes, strides, new_sizes)
cpdef tuple elementwise_output_strides(out_sizes, inputs)
cpdef Py_ssize_t wrap_dim(long long dim, long long ndim) except -1
cpdef check_size_nonnegative(sizes)
