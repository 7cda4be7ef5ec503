"""How kernels compute: shared helpers that the op declarations call.

``pointwise`` runs a NumPy ufunc over zero-copy views of the operands, into a result laid
out by PyTorch's rule (the output follows the inputs' dimension order); ``reduce`` runs a
NumPy reduction; ``new_result`` and ``from_numpy_result`` make tensors.  NumPy only ever
sees views of microtensor storages, so results and in-place writes land where they should.
"""
import numbers

import numpy as np

from microtensor._C import kernels, meta
from microtensor._C.tensor import (Storage, TensorBase, bool_, cpu, empty_strided_unchecked,
                                   float32, from_array, get_default_dtype, pointwise_fast,
                                   compute_numpy, dtype_from_numpy, wrap_storage)
from microtensor._dtype import can_cast, result_type, wrap_scalar, info
from microtensor.backends import cuda
from microtensor.backends import meta as meta_backend
from microtensor.ops.arguments import int_tuple


def array_of(x, dev=None):
    """A NumPy view of a tensor, or the Python scalar itself (a 0-d CPU tensor in an op
    on ``dev``, a GPU, becomes a Python number)."""
    if not isinstance(x, TensorBase):
        return x
    if dev is not None and x.device != dev:
        return cuda.scalar_operand(x)
    return x._array()


def is_floating_array(arr):
    """Whether ``arr`` holds floating values (ml_dtypes' bfloat16 is no NumPy kind "f")."""
    return arr.dtype.kind not in "biu"


def array_module(arr):
    """NumPy, or CuPy for a GPU array: where to build index arrays that meet ``arr``."""
    return cuda.cupy() if cuda.is_device_array(arr) else np


def update_at(ufunc_name, target, where, source):
    """``np.<ufunc>.at``: an in-place update at ``where`` in which repeated positions all
    count.  CuPy has ``at`` for add, maximum and minimum but not for multiply: a product
    on the GPU is taken on the host."""
    xp = array_module(target)
    ufunc = getattr(xp, ufunc_name)
    if hasattr(ufunc, "at"):
        ufunc.at(target, where, source)
        return
    host = xp.asnumpy(target)
    getattr(np, ufunc_name).at(host, tuple(xp.asnumpy(w) for w in where),
                               source if np.isscalar(source) else xp.asnumpy(source))
    target[...] = xp.asarray(host)


def device_of(*operands):
    """The device an op on ``operands`` runs on; a 0-d CPU tensor may join a GPU op (like a
    Python number), any other mix raises PyTorch's error."""
    dev = None
    for x in operands:
        if isinstance(x, TensorBase):
            if dev is None:
                dev = x.device
            elif x.device != dev:
                if dev.type == "cpu" and not _has_dims(operands, dev):
                    dev = x.device
                elif x._sizes or x.device.type != "cpu":
                    raise RuntimeError("Expected all tensors to be on the same device, but "
                                       f"found at least two devices, {dev} and {x.device}!")
    return dev


def _has_dims(operands, dev):
    return any(isinstance(x, TensorBase) and x.device == dev and x._sizes for x in operands)


def new_result(shape, dtype, operands=(), device=None, wrapped_numbers=False):
    """A fresh tensor for an elementwise result: strides follow the tensor operands (and
    the numbers among them as 0-d ones when ``wrapped_numbers``: see ``pointwise``)."""
    layouts = []           # a loop, not a comprehension: no frame of its own
    for t in operands:
        if isinstance(t, TensorBase):
            layouts.append((t._sizes, t._strides))
        elif wrapped_numbers:
            layouts.append(((), ()))
    strides = meta.elementwise_output_strides(shape, layouts) if layouts else \
        meta.contiguous_strides(shape)
    return empty_strided_unchecked(tuple(shape), tuple(strides), dtype,
                                   device or device_of(*operands) or cpu)




def check_out(out, shape, dtype):
    """PyTorch's checks for writing a result into an existing tensor (in-place ops)."""
    if tuple(out._sizes) != tuple(shape):
        raise RuntimeError(f"output with shape {list(out._sizes)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    if not can_cast(dtype, out._dtype):
        raise RuntimeError(f"result type {_type_name(dtype)} can't be cast to the desired "
                           f"output type {_type_name(out._dtype)}")


def real_number_arg(fn, name, value):
    """PyTorch's TypeError for a parameter it parses as a float (``logit``'s ``eps``)
    given a complex number (None: not given)."""
    if value is not None and not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}(): argument '{name}' must be float, not {type(value).__name__}")


def check_scale_factor(name, value, dt):
    """PyTorch's checks of a scale factor (``add``'s ``alpha``, ``addr``'s ``beta``)
    against the result's dtype ``dt``: a bool one only for bool results, a floating one
    not for integer or bool results, a complex one only for complex results."""
    if isinstance(value, bool) and dt is not bool_:
        raise RuntimeError(f"Boolean {name} only supported for Boolean results.")
    if isinstance(value, (float, complex)) and dt.kind < 2:
        raise RuntimeError(f"For integral input tensors, argument {name} must not be a "
                           f"floating point number.")
    if isinstance(value, complex) and not dt.is_complex:
        raise RuntimeError(f"For non-complex input tensors, argument {name} must not be a "
                           f"complex number.")


def _type_name(dt):
    """PyTorch's ScalarType name of ``dt`` (``Float``), as its messages print it."""
    return info(dt).scalar_name


def refuse_complex(t, kernel, *, bool_too=False):
    """PyTorch's error for a kernel that has no complex version (ordering ops: NumPy
    would order complex numbers lexicographically, PyTorch refuses), nor a bool one when
    ``bool_too``.  ``t``: a tensor or a dtype (that of several inputs promoted)."""
    dt = t._dtype if isinstance(t, TensorBase) else t
    if dt.is_complex or bool_too and dt is bool_:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_type_name(dt)}\'')


def refuse_integral(dt, kernel):
    """PyTorch's error for a kernel that has floating and complex versions only."""
    if dt.kind < 2:     # (neither floating nor complex)
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_type_name(dt)}\'')


def refuse_unless_floating(dt, kernel):
    """PyTorch's error for a kernel that has real floating versions only."""
    if not dt.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_type_name(dt)}\'')


def has_internal_overlap(t):
    """Whether two elements of ``t`` share a memory location (a stretched, stride-0 dim).
    An empty tensor has no elements (a batched gradient of an empty sample has batch
    stride 0)."""
    return t._numel and any(size > 1 and stride == 0 for size, stride in zip(t._sizes, t._strides))


def may_overlap(sizes, strides):
    """Whether two indices of a geometry may reach one memory location: False when, with
    the stepped dims sorted by stride, each stride is beyond the reach of the smaller ones
    (then every index has its own location); True otherwise, which may be a false alarm
    (sizes (2, 2) with strides (3, 2) never meet).  No elements, no overlap."""
    if 0 in sizes:
        return False
    reach = 0
    for stride, size in sorted((abs(st), s) for s, st in zip(sizes, strides) if s > 1):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def check_no_internal_overlap(dst):
    """PyTorch refuses to write into a tensor where two elements share a memory location:
    the result would depend on the order of the writes."""
    if has_internal_overlap(dst):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")


def memory_overlap(a, b):
    """PyTorch's ``get_overlap_status``: "full" when ``a`` and ``b`` are the same elements
    in the same order, "partial" when their memory otherwise meets, None when it does not
    (or when that is too hard to tell cheaply, as for non-dense tensors: PyTorch then
    allows the write)."""
    if a is b:
        return "full"
    if a._storage is not b._storage or a._numel == 0 or b._numel == 0:
        return None
    if not (a.is_non_overlapping_and_dense() and b.is_non_overlapping_and_dense()):
        return None
    a_begin = a._offset * a._dtype.itemsize
    b_begin = b._offset * b._dtype.itemsize
    a_end = a_begin + a._numel * a._dtype.itemsize
    b_end = b_begin + b._numel * b._dtype.itemsize
    if (a_begin, a_end) == (b_begin, b_end):
        return "full" if a._strides == b._strides else "partial"
    return "partial" if a_begin < b_end and b_begin < a_end else None


_SHARED_WITH_INPUT = ("unsupported operation: some elements of the input tensor and the "
                      "written-to tensor refer to a single memory location. Please clone() the "
                      "tensor before performing the operation.")


def check_writable(out, operands):
    """Refuse an in-place write whose result would depend on the order of the writes: into
    overlapping memory, or from an operand that partially overlaps the target (an
    elementwise op reads each element before writing it, so the very same elements are
    fine)."""
    check_no_internal_overlap(out)
    for x in operands:
        if isinstance(x, TensorBase) and memory_overlap(out, x) == "partial":
            raise RuntimeError(_SHARED_WITH_INPUT)


def check_no_overlap(out, operands):
    """Refuse a write into ``out`` from operands that share any of its memory: the index
    ops (``index_put_``, ``scatter_``, ``index_add_`` ...) read their sources while they
    write elsewhere, so even the very same elements would be read after being written."""
    for x in operands:
        if isinstance(x, TensorBase) and memory_overlap(out, x) is not None:
            raise RuntimeError(_SHARED_WITH_INPUT)


def conj_if_complex(x):
    """``x``'s complex conjugate when it is complex, else ``x`` (no op call): derivatives
    of holomorphic functions take the conjugate of their local derivative (PyTorch's
    convention for complex gradients), a no-op for real values."""
    if isinstance(x, TensorBase):
        return x.conj() if x._dtype.kind == 3 else x
    return x.conjugate() if type(x) is complex else x


def float_dtype(dt):
    """The dtype a float-only op computes in: integers and bool promote to the default."""
    return dt if dt.kind >= 2 else get_default_dtype()


def store(fn):
    """A ``pointwise`` loop from ``fn(*arrays)`` computing in the compute dtype.  Kernels
    call NumPy's functions, which CuPy's arrays take to CuPy's own."""
    def loop(*arrays, out, dtype, casting):
        # (a Python bool would make NumPy compute in float16: np.log1p(True))
        operands = [a.astype(dtype, copy=False) if hasattr(a, "astype") else
                    np.dtype(dtype).type(a) if type(a) is bool else a for a in arrays]
        np.copyto(out, fn(*operands), casting=casting)
        return out
    return loop


def pointwise(ufunc, *operands, out=None, dtype=None, compute_dtype=None,
              wrapped_numbers=False):
    """Apply ``ufunc`` elementwise with broadcasting and PyTorch's type promotion.

    ``dtype`` is the result dtype (default: promotion of the operands); ``compute_dtype``
    the dtype NumPy computes in (default: ``dtype``; comparisons pass the promoted type).
    ``wrapped_numbers``: Python numbers count as 0-d operands in the result's layout, as
    in PyTorch's binary ops (see ``pointwise_fast``).
    """
    if out is None:
        result = pointwise_fast(ufunc, operands, dtype, compute_dtype, wrapped_numbers)
        if result is not None:
            return result
    promoted = result_type(*operands)
    if dtype is None:
        dtype = promoted
    operands = [wrap_scalar(x, compute_dtype or dtype) for x in operands]
    shape = meta.broadcast_shapes(*[x._sizes for x in operands if isinstance(x, TensorBase)])
    dev = device_of(*operands)
    if out is None:
        out = new_result(shape, dtype, operands, wrapped_numbers=wrapped_numbers)
    else:
        check_out(out, shape, dtype)
        check_writable(out, operands)
        dev = device_of(out, *operands)
    if out._numel:
        compute = compute_numpy(compute_dtype or dtype)
        ufunc(*[array_of(x, dev) for x in operands], out=out._array(), dtype=compute,
              casting="unsafe")
    return out


def dims_of(dim, ndim):
    """``dim`` argument of a reduction as a sorted tuple of wrapped dims (None = all)."""
    if dim is None:
        return tuple(range(ndim))
    listed = isinstance(dim, (tuple, list))
    if not listed:
        dim = (dim,)  # an int, or an integer scalar such as a NumPy int
    try:
        wrapped = tuple(map(meta.wrap_dim, dim, (ndim,) * len(dim)))   # no generator frame
    except ValueError:
        if listed:      # a dim past int64 in a list: PyTorch's TypeError
            int_tuple(dim, "dim")
        raise
    if len(set(wrapped)) != len(wrapped):
        raise repeated_dim_error(wrapped)
    return tuple(sorted(wrapped)) if wrapped else tuple(range(ndim))


def repeated_dim_error(wrapped):
    """PyTorch's error for a list of dims naming one twice: it names the first dim seen
    again."""
    seen = set()
    repeated = next(d for d in wrapped if d in seen or seen.add(d))   # (add returns None)
    return RuntimeError(f"dim {repeated} appears multiple times in the list of dims")


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def from_numpy_result(arr, dtype=None, memory_format=None):
    """Wrap an array (or scalar) that a kernel computed as a new tensor that owns it:
    contiguous, or strided as ``empty_in_format`` lays ``memory_format`` out (zero-copy
    when the array already lies so, as NumPy's element-wise results over a view of an
    input in that format do)."""
    if type(arr) is not np.ndarray and cuda.is_device_array(arr):
        out = cuda.from_result(arr, dtype)
        return out if memory_format in (None, meta.contiguous_format) else \
            out.clone(memory_format=memory_format)
    if memory_format not in (None, meta.contiguous_format):
        return _in_format(arr, dtype, memory_format)
    arr = np.asarray(arr, dtype=None if dtype is None else dtype.np)
    if arr.base is not None or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C")
    return from_array(arr)


def memory_format_of(t):
    """PyTorch's ``suggest_memory_format()``: channels_last(_3d) when ``t``'s strides look
    like it (ambiguous size-1 dims included), else contiguous_format."""
    return meta.suggest_memory_format(t._sizes, t._strides)


def empty_in_format(sizes, memory_format, dtype, device=cpu):
    """A fresh tensor strided as ``empty(sizes, memory_format=...)``: how PyTorch allocates
    the results of normalisation, pooling, upsampling and padding, in the input's
    ``memory_format_of``.  Unlike ``contiguous(memory_format=)``, which keeps a tensor that
    already qualifies, this gives the size-1 dims the format's own strides too."""
    sizes = tuple(sizes)
    return empty_strided_unchecked(sizes, meta.strides_for_format(sizes, memory_format),
                                   dtype, device)


def in_format(t, memory_format):
    """``t`` when it is strided as ``empty_in_format`` lays ``memory_format`` out, else a
    copy that is (``clone``: differentiable, for composites)."""
    if t._strides == meta.strides_for_format(t._sizes, memory_format):
        return t
    return t.clone(memory_format=memory_format)


def _in_format(arr, dtype, memory_format):
    sizes = tuple(np.shape(arr))
    strides = meta.strides_for_format(sizes, memory_format)
    if dtype is None:
        dtype = dtype_from_numpy(arr.dtype)
    owner = arr if type(arr) is not np.ndarray or arr.base is None else arr.base
    if type(owner) is np.ndarray and owner.flags.owndata and owner.nbytes == arr.nbytes and \
            arr.dtype == dtype.np and all(n == 1 or s == t * arr.itemsize
                                          for n, s, t in zip(sizes, arr.strides, strides)):
        # all of a fresh block, already in the format's order: adopt its memory
        flat = np.lib.stride_tricks.as_strided(arr, (arr.size,), (arr.itemsize,))
        return wrap_storage(Storage(flat, cpu), sizes, strides, 0, dtype)
    out = empty_strided_unchecked(sizes, strides, dtype)
    if out._numel:
        out._array()[...] = arr
    return out


def reduce(np_reduction, self, dim, keepdim, dtype, *, round_each_step=False, **np_kwargs):
    """A reduction over ``dim`` (None = all dims) into a new contiguous tensor.  float16
    and bfloat16 reduce in float32 and round the result once, as PyTorch's CPU does,
    unless ``round_each_step``: then NumPy's loop of the dtype itself runs (PyTorch's
    ``prod`` rounds after every product; ml_dtypes' bfloat16 loop does too, NumPy's
    float16 loop rounds once)."""
    dims = dims_of(dim, self.dim())
    arr = self._array()
    result_dtype = dtype or self._dtype
    compute = result_dtype.np if round_each_step else compute_numpy(result_dtype)
    if compute != result_dtype.np:
        arr = arr.astype(compute)
    kw = dict(np_kwargs)
    if dtype is not None:
        kw["dtype"] = compute
    if self.dim() == 0:
        result = np_reduction(arr, axis=None, **kw)
    else:
        result = np_reduction(arr, axis=dims, keepdims=keepdim, **kw)
    return from_numpy_result(result, result_dtype)


__all__ = ["pointwise", "reduce", "new_result", "from_numpy_result", "dims_of", "float32"]


def strided_copy(dst, src):
    """Copy ``src`` (broadcast to ``dst``'s shape) into ``dst``, casting the dtype."""
    if dst._numel == 0:
        return
    if src.device != dst.device or dst.is_meta:
        if src.is_meta or dst.is_meta:
            meta_backend.copy_(dst, src)
        else:
            cuda.copy_between_devices(dst, src)
        return
    src_arr = src._array()
    if src._sizes != dst._sizes:
        src_arr = np.broadcast_to(src_arr, dst._sizes)
    if dst.device.type == "cpu":
        kernels.copy_(dst._array(), src_arr)
    else:
        cuda.copy_(dst, dst._array(), src_arr)


def scalar_tensor_like(value, other):
    """A 0-d tensor for the Python number on the left of ``2 - t`` (it promotes as a scalar)."""
    if not isinstance(value, TensorBase):
        # a bool stays bool (it promotes alike), so that ``True - t`` is refused as PyTorch does
        dt = bool_ if type(value) is bool else result_type(value, other)
        value = from_array(np.array(wrap_scalar(value, dt), dtype=dt.np))
    return value.to(other.device) if other.device.type != "cpu" else value


def owned(result):
    """``result`` (a tensor or a tuple of them, nested), computed as a view of the op's own
    temporary, made a tensor of its own, its history kept (``_base`` None), as PyTorch's
    result is: no caller can reach the temporary, and a view is refused what a tensor is
    allowed (``detach_()``; an in-place change in grad mode after a call in no_grad mode).
    Never call it on a result that may be an input or a view of one."""
    if isinstance(result, tuple):
        for t in result:
            owned(t)
    elif isinstance(result, TensorBase) and result._base is not None:
        result._base = result._view_info = None
        result._is_diff_view = False
    return result
