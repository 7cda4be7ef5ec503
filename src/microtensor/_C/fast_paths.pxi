# The C fast paths of TensorBase's number slots and hot methods: included by tensor.pyx,
# so they are compiled into the same module as the tensor model and call its helpers
# directly (no import, no Python-level lookup).
#
# Each path serves a plain ``Tensor`` (or ``nn.Parameter``) in the common case and hands
# anything else to the registered op through the dispatcher, which stays the reference
# semantics (``microtensor.ops``): tests/test_fast_paths.py checks that each path and its
# op agree (values, layout, dtype, errors, recorded nodes).  The views, arithmetic and sums
# also serve tensors that require grad, attaching the node the op would have recorded.


cdef object _dispatch_binary = None  # ops.dispatch.binary(name, a, b): + - * / on a non-tensor
cdef object _dispatch_call = None    # ops.dispatch.call_method(name, *args): slow path of methods
cdef object _getitem = None          # ops.indexing.getitem: the slow path of tensor[index]
cdef object _attach_node = None     # autograd: attach_node(op, args, kwargs, result)
cdef dict _recorded_ops = None      # the Ops the fast paths record, by name, for _attach_node
cdef object _op_call = None         # _C.dispatch.call(op, args, kwargs): the dispatcher itself


def _install(tensor_cls, dispatch_binary, dispatch_call, getitem, attach_node,
             dict recorded_ops, op_call):
    """Called once by the package: the Python pieces the fast paths defer to."""
    global _tensor_cls, _dispatch_binary, _dispatch_call, _getitem, _attach_node, \
        _recorded_ops, _op_call
    if mt_use_freelist(<PyTypeObject*>tensor_cls, <PyTypeObject*>TensorBase):
        for subclass in tensor_cls.__subclasses__():
            share_tensor_free(subclass)
    _tensor_cls = tensor_cls
    _op_call = op_call
    _dispatch_binary = dispatch_binary
    _dispatch_call = dispatch_call
    _getitem = getitem
    _attach_node = attach_node
    _recorded_ops = recorded_ops


cdef object _fast_getitem(TensorBase self, object index):
    cdef Py_ssize_t start, stop, step, length, size, i, new_stride, offset
    if _plain(self) and self._sizes:
        size = self._sizes[0]
        if type(index) is slice:
            if PySlice_Unpack(index, &start, &stop, &step) < 0:
                raise
            if step > 0:
                length = PySlice_AdjustIndices(size, &start, &stop, step)
                # a stride times a huge step (or an empty slice's start) may leave
                # int64: then the slow path (the ``slice`` op) refuses it
                if not (mt_tensor_mul_overflow(self._strides[0], step, &new_stride) or
                        mt_tensor_mul_overflow(start, self._strides[0], &offset) or
                        mt_tensor_add_overflow(self._offset, offset, &offset)):
                    # (tuples are immutable: the base's serve where nothing changes)
                    return self._view_fast(self._sizes if length == size else
                                           _with_first(self._sizes, length),
                                           self._strides if step == 1 else
                                           _with_first(self._strides, new_stride), offset,
                                           self._numel // size * length if self._numel else 0,
                                           1 if self._is_contig and step == 1 else -1)
        elif type(index) is int and -size <= <object>index < size:
            i = index
            if i < 0:
                i += size
            # 0 <= i < size: offset + i * stride is an element of this (in-bounds)
            # tensor, so it lies in the storage and cannot overflow
            return self._view_fast(self._sizes[1:], self._strides[1:],
                                   self._offset + i * <Py_ssize_t>self._strides[0],
                                   self._numel // size, 1 if self._is_contig else -1)
    return _getitem(self, index)


cdef object _fast_t(TensorBase self):
    cdef Py_ssize_t n_rows, n_cols
    if _served(self) and len(self._sizes) == 2:
        rows, cols = self._sizes
        n_rows, n_cols = rows, cols
        # a square matrix's transpose has its sizes: the (immutable) tuple is shared.  A
        # contiguous matrix's transpose is contiguous exactly when it is a row, a column or
        # empty; other layouts are checked
        out = self._view_fast(self._sizes if n_rows == n_cols else (cols, rows),
                              (self._strides[1], self._strides[0]), self._offset, self._numel,
                              (n_rows <= 1 or n_cols <= 1) if self._is_contig else -1)
        return _record("transpose", (self, 0, 1), out) if _records(self) else out
    return _dispatch_call("t", self)


cdef object _fast_transpose(TensorBase self, object dim0, object dim1):
    cdef Py_ssize_t a, b, n = len(self._sizes)
    if not (_served(self) and n and type(dim0) is int and type(dim1) is int):
        return _dispatch_call("transpose", self, dim0, dim1)
    a, b = _wrap_dim(dim0, n), _wrap_dim(dim1, n)
    sizes, strides = list(self._sizes), list(self._strides)
    sizes[a], sizes[b] = sizes[b], sizes[a]
    strides[a], strides[b] = strides[b], strides[a]
    out = self._view_fast(tuple(sizes), tuple(strides), self._offset, self._numel, -1)
    return _record("transpose", (self, dim0, dim1), out) if _records(self) else out


cdef object _fast_unsqueeze(TensorBase self, object dim):
    cdef Py_ssize_t d, n = len(self._sizes)
    if not (_served(self) and type(dim) is int):
        return _dispatch_call("unsqueeze", self, dim)
    d = _wrap_dim(dim, n + 1)
    stride = <Py_ssize_t>self._sizes[d] * <Py_ssize_t>self._strides[d] if d < n else 1
    out = self._view_fast(self._sizes[:d] + (1,) + self._sizes[d:],
                          self._strides[:d] + (stride,) + self._strides[d:], self._offset,
                          self._numel, 1 if self._is_contig else -1)
    return _record("unsqueeze", (self, dim), out) if _records(self) else out


cdef object _reshaped_view(TensorBase self, tuple shape):
    """The view to ``shape`` (recorded as ``view``) when the strides allow one, else
    None."""
    if not _served(self) or not shape:   # no shape: the op refuses the call
        return None
    sizes = _shape_arg(shape)
    if sizes is None:
        return None
    try:
        sizes = meta.infer_size(sizes, self._numel)
    except OverflowError:   # a size past int64: the op raises PyTorch's TypeError
        return None
    strides = meta.view_strides(self._sizes, self._strides, sizes)
    if strides is None:
        return None
    out = self._view_fast(sizes, strides, self._offset, self._numel,
                          1 if self._is_contig else -1)
    return _record("view", (self, sizes), out) if _records(self) else out


cdef inline bint _records(TensorBase self) noexcept:
    """Whether autograd records an op on ``self`` now.  The fast paths ask first and
    build the recorded call's arguments only when it does."""
    return needs_grad(self) and not mt_grad_disabled


cdef object _record(str name, tuple args, out):
    """``out`` with the node of op ``name`` called on ``args`` attached."""
    return _attach_node(_recorded_ops[name], args, None, out)


cdef tuple _with_first(tuple values, object first):
    """``values`` with its first item replaced: ``(first,) + values[1:]`` in one tuple."""
    cdef Py_ssize_t i, n = len(values)
    cdef tuple out = PyTuple_New(n)
    Py_INCREF(first)
    PyTuple_SET_ITEM(out, 0, first)
    for i in range(1, n):
        item = values[i]
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    return out


cdef object _fast_as_strided(TensorBase self, object size, object stride,
                             object storage_offset):
    cdef Py_ssize_t offset
    if _plain(self) and type(size) is tuple and type(stride) is tuple and \
            _all_ints(<tuple>size) and _all_ints(<tuple>stride):
        try:
            offset = self._offset if storage_offset is None else storage_offset
            if len(<tuple>size) != len(<tuple>stride):
                raise RuntimeError(f"mismatch in length of strides and shape: size "
                                   f"{list(size)} and stride {list(stride)}")
            _check_geometry(self._storage, size, stride, offset, self._dtype.itemsize)
            return self._view_fast(size, stride, offset, _numel(size), -1)
        except OverflowError:   # a value past int64: the op raises PyTorch's error
            pass
    return _dispatch_call("as_strided", self, size, stride, storage_offset)


cdef object _fast_clone(TensorBase self, object memory_format):
    cdef TensorBase out
    if _plain(self) and self._is_contig and self._storage.device is cpu and \
            (memory_format is None or memory_format is preserve_format or
             memory_format is contiguous_format):
        # a contiguous tensor is dense, so preserve_format keeps its strides exactly
        out = _fresh_tensor(self._sizes, self._strides if memory_format is not
                            contiguous_format else _contiguous_strides(self._sizes),
                            self._dtype, 1)
        memcpy(_ptr(out), _ptr(self), self._numel * self._dtype.itemsize)
        return out
    if memory_format is None:
        return _dispatch_call("clone", self)
    return _dispatch_call("clone", self, memory_format=memory_format)


cdef object _fast_contiguous(TensorBase self, object memory_format):
    cdef TensorBase out
    if memory_format is None or memory_format is contiguous_format:
        if self._is_contig and type(self) is _tensor_cls:
            return self
        if _plain(self) and self._storage.device is cpu:
            out = _fresh_tensor(self._sizes, _contiguous_strides(self._sizes), self._dtype, 1)
            _copy_disjoint(out, self)
            return out
        return _dispatch_call("contiguous", self)
    return _dispatch_call("contiguous", self, memory_format)


cdef object _fast_sum(TensorBase self, tuple args, dict kwargs):
    cdef TensorBase out
    cdef Py_ssize_t shape[MAX_DIMS]
    cdef Py_ssize_t strides[MAX_DIMS]
    cdef bint reduced[MAX_DIMS]
    cdef int ndim = len(self._sizes), d
    cdef double total
    if not _float_cpu(self) or len(args) > 2 or (kwargs and not _SUM_KEYWORDS.issuperset(
            kwargs)):
        return _dispatch_call("sum", self, *args, **kwargs)
    dim = args[0] if args else kwargs.get("dim")
    keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    _load_geometry(self, ndim, shape, strides)
    if dim is None and not keepdim:
        total = kernels.sum_raw(self._dtype.typenum, _ptr(self), ndim, shape, strides)
        out = _fresh_tensor((), (), self._dtype, 1)
        if self._dtype.typenum == cnp.NPY_FLOAT:
            (<float*>_ptr(out))[0] = <float>total
        else:
            (<double*>_ptr(out))[0] = total
    else:
        # small reductions over chosen dims, and large ones that read the source once in
        # order; other large ones are NumPy's (it adds whole rows)
        if not self._numel or type(keepdim) is not bool or \
                not _reduced_dims(dim, ndim, reduced) or \
                (self._numel > _SMALL_REDUCTION and not kernels.sum_in_one_pass(
                    self._dtype.typenum, ndim, shape, strides, reduced)):
            return _dispatch_call("sum", self, *args, **kwargs)
        sizes = tuple([1 if reduced[d] else self._sizes[d] for d in range(ndim)
                       if keepdim or not reduced[d]])
        out = _fresh_tensor(sizes, _contiguous_strides(sizes), self._dtype, 1)
        kernels.sum_dims_raw(self._dtype.typenum, _ptr(self), ndim, shape, strides,
                             reduced, _ptr(out))
    if not mt_grad_disabled and needs_grad(self):
        return _attach_node(_recorded_ops["sum"], (self,) + args, kwargs or None, out)
    return out


cdef object _fast_expand(TensorBase self, tuple sizes):
    shape = _shape_arg(sizes) if sizes else None
    if shape is None or not _served(self):
        return _dispatch_call("expand", self, *sizes)
    try:
        expanded, strides = meta.expand_geometry(self._sizes, self._strides, shape)
    except OverflowError:   # a size past int64: the op raises PyTorch's TypeError
        return _dispatch_call("expand", self, *sizes)
    out = self._view_fast(expanded, strides, self._offset, _numel(expanded), -1)
    return _record("expand", (self, shape), out) if _records(self) else out


cdef object _fast_matmul(object a, object b):
    cdef TensorBase ta, tb, out
    cdef Py_ssize_t m, n, k, work, a_rs, a_cs, b_rs, b_cs
    if _plain(a) and _plain(b):
        ta, tb = <TensorBase>a, <TensorBase>b
        if len(ta._sizes) == 2 and len(tb._sizes) == 2 and ta._dtype is tb._dtype and \
                (ta._dtype.typenum == cnp.NPY_FLOAT or ta._dtype.typenum == cnp.NPY_DOUBLE) \
                and ta._sizes[1] == tb._sizes[0] and \
                ta._storage.device is cpu and tb._storage.device is cpu:
            m, k, n = ta._sizes[0], ta._sizes[1], tb._sizes[1]
            sizes = (m, n)
            # the result's sizes are checked here, so m * n fits; m * n * k may not
            # (then it is no small product either)
            out = _fresh_tensor(sizes, _contiguous_strides(sizes), ta._dtype, 1)
            if mt_tensor_mul_overflow(m * n, k, &work) or work > _SMALL_MATMUL:
                _np_matmul(_ndarray_view(ta), _ndarray_view(tb), out=_ndarray_view(out))
                return out
            a_rs, a_cs = ta._strides
            b_rs, b_cs = tb._strides
            if ta._dtype.typenum == cnp.NPY_FLOAT:
                kernels.matmul_small(<float*>_ptr(out), <float*>_ptr(ta), a_rs, a_cs,
                                     <float*>_ptr(tb), b_rs, b_cs, m, n, k)
            else:
                kernels.matmul_small(<double*>_ptr(out), <double*>_ptr(ta), a_rs, a_cs,
                                     <double*>_ptr(tb), b_rs, b_cs, m, n, k)
            return out
        if len(ta._sizes) == 3 and len(tb._sizes) == 3 and tb._strides[0] == 0 and \
                ta._is_contig and ta._numel and ta._sizes[0] == tb._sizes[0] and \
                tb._sizes[2] and ta._sizes[2] == tb._sizes[1] and ta._dtype is tb._dtype and \
                (ta._dtype.typenum == cnp.NPY_FLOAT or ta._dtype.typenum == cnp.NPY_DOUBLE) \
                and ta._storage.device is cpu and tb._storage.device is cpu:
            # a stack of one repeated matrix (a parameter expanded over a vmap batch, as in
            # the backward of per-sample gradients): every row of ``a`` times it, one product
            n = tb._sizes[2]
            sizes = (ta._sizes[0], ta._sizes[1], n)
            out = _fresh_tensor(sizes, _contiguous_strides(sizes), ta._dtype, 1)
            _np_matmul(_ndarray_view(ta).reshape(-1, ta._sizes[2]), _ndarray_view(tb)[0],
                       out=_ndarray_view(out).reshape(-1, n))
            return out
    if _float_cpu(a) and _float_cpu(b):
        ta, tb = <TensorBase>a, <TensorBase>b
        if len(ta._sizes) == 2 and len(tb._sizes) == 1 and ta._dtype is tb._dtype and \
                ta._sizes[1] == tb._sizes[0]:
            # matrix @ vector (``W @ v`` in the functions jacrev and hessian take): one BLAS
            # call, recorded here when autograd records (the vector is usually the input)
            sizes = (ta._sizes[0],)
            out = _fresh_tensor(sizes, _contiguous_strides(sizes), ta._dtype, 1)
            _np_matmul(_ndarray_view(ta), _ndarray_view(tb), out=_ndarray_view(out))
            if not mt_grad_disabled and (needs_grad(ta) or needs_grad(tb)):
                return _attach_node(_recorded_ops["matmul"], (a, b), None, out)
            return out
    return _dispatch_call("matmul", a, b)


cdef extern from "Python.h":
    int PySlice_Unpack(object slice, Py_ssize_t* start, Py_ssize_t* stop,
                       Py_ssize_t* step) except -1
    Py_ssize_t PySlice_AdjustIndices(Py_ssize_t length, Py_ssize_t* start, Py_ssize_t* stop,
                                     Py_ssize_t step) noexcept


_np_matmul = np.matmul
_SMALL_MATMUL = 4096   # multiply-adds below which a plain loop beats calling BLAS


cdef inline bint _all_ints(tuple values):
    for v in values:
        if type(v) is not int:
            return False
    return True


cdef inline tuple _shape_arg(tuple shape):
    """``(2, 3)`` from ``view(2, 3)``, ``view((2, 3))`` or ``view(t.shape)`` (a ``Size``, a
    tuple subclass); None for anything unusual."""
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = tuple(shape[0])
    return shape if _all_ints(shape) else None


cdef void _copy_disjoint(TensorBase dst, TensorBase src) except *:
    """Copy ``src`` into a fresh CPU tensor ``dst`` of the same sizes and dtype."""
    cdef Py_ssize_t shape[MAX_DIMS]
    cdef Py_ssize_t dst_strides[MAX_DIMS]
    cdef Py_ssize_t src_strides[MAX_DIMS]
    cdef Py_ssize_t item = src._dtype.itemsize
    cdef int i, ndim = len(src._sizes)
    for i in range(ndim):
        shape[i] = src._sizes[i]
        dst_strides[i] = _byte_stride(dst._strides[i], item)
        src_strides[i] = _byte_stride(src._strides[i], item)
    if kernels.copy_raw(src._dtype.typenum, item, _ptr(dst), dst_strides, _ptr(src),
                        src_strides, shape, ndim) < 0:
        # no raw kernel moves elements of this width (complex128): NumPy copies them
        dst._array()[...] = src._array()


cdef object _parameter_cls = None   # nn.Parameter: served by the fast paths like Tensor


def register_parameter_class(cls):
    """Called by ``microtensor.nn``: parameters take the fast paths too (their results are
    plain tensors, as in PyTorch)."""
    global _parameter_cls
    _parameter_cls = cls


cdef bint _fast_paths_bypassed = False   # a dual level is entered, or a profiler records


def set_fast_paths_bypassed(bint bypassed):
    """The dispatcher's switch while it hands every op to a handler (forward AD's, for
    the tangents; the profiler's, to time each op): the fast paths then stand aside so
    that every op reaches it."""
    global _fast_paths_bypassed
    _fast_paths_bypassed = bypassed


cdef inline bint _served(object t):
    """Whether ``t``'s type is one the fast paths serve: ``Tensor`` or ``nn.Parameter``
    (not subclasses such as vmap's ``BatchedTensor``, whose ops must be dispatched), and
    the dispatcher does not want every op."""
    return (type(t) is _tensor_cls or type(t) is _parameter_cls) and not _fast_paths_bypassed


cdef inline bint _plain(object t):
    """True when ``t`` is an ordinary tensor that needs no autograd recording right now."""
    if not _served(t):
        return False
    return not needs_grad(<TensorBase>t) or mt_grad_disabled   # fields first: TLS is a call


cdef inline bint _float_cpu(object t):
    """Whether ``t`` is a float32 or float64 CPU ``Tensor`` (the fast paths' dtypes)."""
    cdef int typenum
    if not _served(t):
        return False
    typenum = (<TensorBase>t)._dtype.typenum
    return (<TensorBase>t)._storage.device is cpu and (typenum == cnp.NPY_FLOAT or
                                                       typenum == cnp.NPY_DOUBLE)


cdef inline bint _int_fits(object x, dtype dt):
    """Whether NumPy takes the Python int ``x`` beside a ``dt`` tensor as PyTorch does:
    not for bool, nor beyond ``dt``'s range (PyTorch wraps there or refuses; the slow
    path decides)."""
    cdef int overflow, bits
    cdef long long value = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow or dt is bool_:
        return False
    if dt.is_floating_point or dt.itemsize == 8:
        return True
    bits = 8 * dt.itemsize
    if dt.is_signed:
        return -(1LL << (bits - 1)) <= value < (1LL << (bits - 1))
    return 0 <= value < (1LL << bits)


cdef inline bint _exact_number(object x):
    """A Python float, or an int that a double holds exactly (bool is not a number here)."""
    return type(x) is float or (type(x) is int and -_EXACT_INT <= <object>x <= _EXACT_INT)


cdef void _load_geometry(TensorBase t, int ndim, Py_ssize_t* shape, Py_ssize_t* strides):
    """``t``'s strides (and sizes, unless ``shape`` is NULL) right-aligned to ``ndim``
    dims, with stride 0 for missing leading dims and size-1 dims, so that ``t`` reads as
    broadcast to any shape it broadcasts to."""
    cdef int lead = ndim - len(t._sizes), i
    cdef Py_ssize_t size
    for i in range(lead):
        strides[i] = 0
    for i in range(len(t._sizes)):
        size = t._sizes[i]
        strides[lead + i] = 0 if size == 1 else <Py_ssize_t>t._strides[i]
        if shape != NULL:
            shape[lead + i] = size


cdef char* _operand(object value, bint tensor, bint flat, int ndim, Py_ssize_t* strides,
                    double* number) except? NULL:
    """A binary operand's data and strides: a tensor's own (loaded unless ``flat``), or
    for a number, its value in ``number`` and stride 0 everywhere (NULL data: the caller
    points it at the number in the result's dtype)."""
    if tensor:
        if not flat:
            _load_geometry(<TensorBase>value, ndim, NULL, strides)
        return _ptr(<TensorBase>value)
    number[0] = value
    memset(strides, 0, max(ndim, 1) * sizeof(Py_ssize_t))
    return NULL


cdef object _binary(object left, object right, char opcode, str name):
    """``left <op> right`` in C when both are float32/float64 CPU tensors of one dtype
    (broadcast, any strides) or one is such a tensor and the other a Python number (rounded
    to the tensor's dtype first, as PyTorch does).  When an operand requires grad, autograd
    then only attaches its node to the result.  Anything else takes the registered op."""
    cdef TensorBase ta, tb, out
    cdef Py_ssize_t shape[MAX_DIMS]
    cdef Py_ssize_t out_strides[MAX_DIMS]
    cdef Py_ssize_t a_strides[MAX_DIMS]
    cdef Py_ssize_t b_strides[MAX_DIMS]
    cdef double number_f64[1]
    cdef float number_f32[1]
    cdef int ndim
    cdef char* a_ptr
    cdef char* b_ptr
    cdef char* number
    cdef bint left_tensor = _float_cpu(left), right_tensor = _float_cpu(right), flat
    strides = None
    if left_tensor and right_tensor and (<TensorBase>left)._dtype is (<TensorBase>right)._dtype:
        ta, tb = <TensorBase>left, <TensorBase>right
        flat = ta._sizes == tb._sizes and ta._is_contig and tb._is_contig
        if not flat:
            sizes = meta.broadcast_pair(ta._sizes, tb._sizes)
            strides = meta.elementwise_output_strides(
                sizes, ((ta._sizes, ta._strides), (tb._sizes, tb._strides)))
    elif (left_tensor and _exact_number(right)) or (right_tensor and _exact_number(left)):
        ta = tb = <TensorBase>(left if left_tensor else right)
        flat = ta._is_contig
        sizes = ta._sizes
        if flat and _canonical(sizes, ta._strides):
            strides = ta._strides
        elif not flat or left_tensor or opcode != b"/":
            # PyTorch wraps the number as a 0-d operand: no same-shape fast setup, so the
            # layout follows the tensor's strides, size-1 dims included (``number / t`` is
            # a reciprocal, then a product: contiguous).  Still one flat loop when dense.
            strides = meta.elementwise_output_strides(sizes, ((sizes, ta._strides), ((), ())))
    elif isinstance(left, TensorBase) and (isinstance(right, TensorBase) or
                                           isinstance(right, (int, float, bool))):
        # the registered op, straight to the dispatcher (a batched operand under vmap, say)
        return _op_call(_recorded_ops[name], (left, right), None)
    else:
        return _dispatch_binary(name, left, right)
    if flat:   # every tensor operand contiguous with the result's sizes: one flat loop
        if strides is None:
            sizes = ta._sizes
            strides = ta._strides if _canonical(sizes, ta._strides) else \
                _contiguous_strides(sizes)
        ndim = 1
        shape[0] = ta._numel
        out_strides[0] = a_strides[0] = b_strides[0] = 1
    else:
        ndim = len(sizes)
    out = _fresh_tensor(sizes, strides, ta._dtype, -1)
    if not flat:
        _load_geometry(out, ndim, shape, out_strides)
    number_f64[0] = 0
    a_ptr = _operand(left, left_tensor, flat, ndim, a_strides, number_f64)
    b_ptr = _operand(right, right_tensor, flat, ndim, b_strides, number_f64)
    if not (left_tensor and right_tensor):
        number_f32[0] = <float>number_f64[0]
        number = <char*>number_f32 if ta._dtype.typenum == cnp.NPY_FLOAT else <char*>number_f64
        if not left_tensor:
            a_ptr = number
        else:
            b_ptr = number
    kernels.binary_raw(opcode, ta._dtype.typenum, ndim, shape, _ptr(out), out_strides, a_ptr,
                       a_strides, b_ptr, b_strides)
    if not mt_grad_disabled and (needs_grad(ta) or needs_grad(tb)):
        return _attach_node(_recorded_ops[name], (left, right), None, out)
    return out


cdef class _UnaryLoops:
    """A ufunc's own inner loops for float32 and float64 (NULL: none found)."""
    cdef cnp.PyUFuncGenericFunction f32
    cdef cnp.PyUFuncGenericFunction f64
    cdef void* f32_data
    cdef void* f64_data


cdef object unary_loops(object fn):
    """The inner loops NumPy runs for ``fn``'s float32 and float64 calls (a one-input
    ufunc), for ``unary_fast`` to call directly on whole storages: no argument parsing,
    no type resolution, and no floating-point error check, so no warning (PyTorch's
    kernels are silent).  Each loop is kept only if it gives the ufunc's own results on
    a probe of ordinary and special values; None when none is."""
    if not isinstance(fn, np.ufunc) or fn.nin != 1 or fn.nout != 1:
        return None
    cdef cnp.ufunc u = <cnp.ufunc>fn
    cdef _UnaryLoops loops = _UnaryLoops()
    cdef int i
    found = False
    for i in range(u.ntypes):   # the type numbers of each loop's input and output
        if u.types[2 * i] != u.types[2 * i + 1]:
            continue
        if u.types[2 * i] == cnp.NPY_FLOAT and loops.f32 == NULL:
            loops.f32, loops.f32_data = u.functions[i], u.data[i]
        elif u.types[2 * i] == cnp.NPY_DOUBLE and loops.f64 == NULL:
            loops.f64, loops.f64_data = u.functions[i], u.data[i]
    for dt in (np.float32, np.float64):
        probe = np.array([0.0, -0.0, 0.5, -1.5, 2.0, 1e-30, 88.0, 710.0, -710.0, np.inf,
                          -np.inf, np.nan, 3.0, 0.25, -7.0, 100.0, 1e6, -3e-8], dtype=dt)
        expected = np.empty_like(probe)
        with np.errstate(all="ignore"):
            fn(probe, expected)
        got = np.empty_like(probe)
        if not _run_loop(loops, probe, got) or not np.array_equal(got, expected,
                                                                  equal_nan=True):
            if dt is np.float32:
                loops.f32 = NULL
            else:
                loops.f64 = NULL
        else:
            found = True
    return loops if found else None


cdef bint _run_loop(_UnaryLoops loops, cnp.ndarray source, cnp.ndarray target):
    """``target[:] = f(source)`` by the loop for their dtype (contiguous arrays of one
    float dtype and size); False when there is no such loop."""
    cdef cnp.PyUFuncGenericFunction loop
    cdef void* data
    cdef char* pointers[2]
    cdef cnp.npy_intp count[1]
    cdef cnp.npy_intp steps[2]
    if cnp.PyArray_TYPE(source) == cnp.NPY_FLOAT:
        loop, data = loops.f32, loops.f32_data
    else:
        loop, data = loops.f64, loops.f64_data
    if loop == NULL:
        return False
    pointers[0], pointers[1] = <char*>cnp.PyArray_DATA(source), <char*>cnp.PyArray_DATA(target)
    count[0] = cnp.PyArray_SIZE(source)
    steps[0] = steps[1] = cnp.PyArray_ITEMSIZE(source)
    loop(pointers, count, steps, data)
    return True


cdef object unary_fast(object op, tuple kernel, object x):
    """``op(x)`` for a one-input pointwise op whose ``kernel`` is ``(fn, is_ufunc,
    loops, quiet)`` (see ``dispatch.set_unary_kernel``), when ``x`` is a float32/float64 CPU
    tensor: ``fn`` over NumPy arrays of the tensors (or, for a whole contiguous storage,
    the ufunc's own inner loop, ``unary_loops``), into a fresh result laid out as
    ``loops.pointwise`` lays it out (the input's dimension order, dense), with NumPy's
    floating-point warnings off.  When ``x`` requires grad, autograd then only attaches
    the op's node.  None for any other ``x`` (the dispatcher then runs the op)."""
    cdef TensorBase t, out
    if not _float_cpu(x):
        return None
    t = <TensorBase>x
    sizes = t._sizes
    if t._is_contig:
        strides = t._strides if _canonical(sizes, t._strides) else _contiguous_strides(sizes)
    else:
        strides = meta.elementwise_output_strides(sizes, ((sizes, t._strides),))
    out = _fresh_tensor(sizes, strides, t._dtype, 1 if t._is_contig else -1)
    if out._numel:
        fn, is_ufunc, loops, quiet = kernel
        if t._is_contig and _whole_storage(t):
            # the arrays themselves, flat: no view to build (a fresh result's storage is
            # exactly its elements)
            source, target = t._storage.data, out._storage.data
            if loops is not None and _run_loop(<_UnaryLoops>loops, source, target):
                fn = None
        else:
            source, target = _ndarray_view(t), _ndarray_view(out)
        if fn is not None:
            token = None if quiet else silence_numpy()
            try:
                if is_ufunc:   # the input's dtype picks NumPy's loop: the result's own;
                    fn(source, target)   # ``out`` passed by position: parsed faster
                else:
                    fn(source, out=target, dtype=compute_numpy(t._dtype), casting="unsafe")
            finally:
                restore_numpy(token)
    if not mt_grad_disabled and needs_grad(t):
        return _attach_node(op, (x,), None, out)
    return out


cdef inline bint _whole_storage(TensorBase t):
    """Whether ``t`` is all of its storage's array, element for element (offset 0, the
    same number of elements and the same dtype: not a reinterpreting view)."""
    cdef cnp.ndarray data = <cnp.ndarray>t._storage.data
    return t._offset == 0 and cnp.PyArray_SIZE(data) == t._numel and \
        cnp.PyArray_TYPE(data) == t._dtype.typenum


_EXACT_INT = 1 << 53
_SUM_KEYWORDS = frozenset(("dim", "keepdim"))
_SMALL_REDUCTION = 1 << 16   # elements; above it NumPy's row-wise reductions are faster


cdef bint _reduced_dims(object dim, int ndim, bint* reduced) except -1:
    """Flag the dims named by ``dim`` (an int, or a non-empty tuple or list of distinct
    ints) in ``reduced``; False for anything else (the registered op then decides)."""
    cdef int d
    for d in range(ndim):
        reduced[d] = False
    if type(dim) is int:
        dim = (dim,)
    elif not (type(dim) is tuple or type(dim) is list) or not dim:
        return False
    for value in dim:
        if type(value) is not int or ndim == 0:
            return False
        try:
            d = _wrap_dim(value, ndim)
        except ValueError:   # past int64: the op raises PyTorch's error (a list's TypeError)
            return False
        if reduced[d]:
            return False
        reduced[d] = True
    return True


def pointwise_fast(ufunc, tuple operands, dtype result_dtype, dtype compute_dtype,
                   bint wrapped_numbers=False):
    """``ufunc`` over ``operands`` into a fresh result, when no type promotion is needed:
    CPU tensors of one dtype, with Python numbers that do not promote it (an int beside a
    non-bool dtype, a float beside a floating one).  The result has ``result_dtype`` (None:
    the operands'), NumPy computes in ``compute_dtype`` (None: the result's), and the
    layout follows PyTorch's rule for elementwise outputs, in which the numbers are 0-d
    operands when ``wrapped_numbers`` (PyTorch's binary ops wrap them so; ops that take a
    number as a parameter, such as ``pow`` or ``clamp``, do not).  None when the operands
    do not qualify (``ops.loops.pointwise`` then promotes and checks devices in Python)."""
    cdef TensorBase first = None, t
    cdef bint alike = True, numbers = False
    cdef list layouts = None
    for x in operands:
        if isinstance(x, TensorBase):
            t = <TensorBase>x
            if t._storage.device is not cpu:
                return None
            if first is None:
                first = t
            elif t._dtype is not first._dtype:
                return None
            elif t._sizes != first._sizes or not t._is_contig:
                alike = False
        elif not (type(x) is int or type(x) is float):
            return None
        else:
            numbers = wrapped_numbers
    if first is None or not first._is_contig or \
            (numbers and not _canonical(first._sizes, first._strides)):
        alike = False
    for x in operands:
        if (type(x) is float and not first._dtype.is_floating_point) or \
                (type(x) is int and not _int_fits(x, first._dtype)):
            return None
    if alike:
        sizes, strides = first._sizes, _contiguous_strides(first._sizes)
    else:
        sizes = ()
        layouts = []
        for x in operands:
            if isinstance(x, TensorBase):
                t = <TensorBase>x
                sizes = meta.broadcast_pair(sizes, t._sizes)
                layouts.append((t._sizes, t._strides))
        if numbers:
            layouts.append(((), ()))
        strides = meta.elementwise_output_strides(sizes, layouts)
    if result_dtype is None:
        result_dtype = first._dtype
    out = _fresh_tensor(sizes, strides, result_dtype, -1)
    if out._numel:
        arrays = [_ndarray_view(<TensorBase>x) if isinstance(x, TensorBase) else x
                  for x in operands]
        ufunc(*arrays, out=_ndarray_view(out),
              dtype=compute_numpy(compute_dtype if compute_dtype is not None else result_dtype),
              casting="unsafe")
    return out


cdef inline bint _canonical(tuple sizes, tuple strides):
    """Whether contiguous ``strides`` are exactly the ones PyTorch would give ``sizes``."""
    cdef Py_ssize_t expected = 1, i
    for i in range(len(sizes) - 1, -1, -1):
        if <Py_ssize_t>strides[i] != expected or \
                mt_tensor_mul_overflow(expected, max(<Py_ssize_t>sizes[i], 1), &expected):
            return False  # an overflowing product (beside a 0 size) matches no stride
    return True
