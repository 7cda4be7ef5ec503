"""The dispatcher's hot path, in C: the route every op call takes to its kernel.

While a profiler records (``set_profiler``), each call is timed between its begin and
end callbacks, and the C fast paths stand aside so that every op comes here.

0. While an observer is installed (``set_observer``: ghost clipping's tape, only for the
   duration of one pass), a call of an op that declares a norm rule goes to it first.
1. A call of a one-input pointwise op declared with a NumPy kernel (``set_unary_kernel``)
   on a float32/float64 CPU ``Tensor``, nothing else passed, runs that kernel in C
   (``tensor.unary_fast``), attaching the op's node when autograd records; any other call
   of it goes on below.
2. A composite op (written in other ops) runs its Python body (given ``out=``, inside the
   handler of step 4).
   While a dual level of forward AD is active (``set_forward_ad``), any other call goes to
   its handler first, which gives the outputs their tangents.
3. A call with a batched argument (or, while this thread is inside a vmap, one that draws
   random numbers) goes to vmap's handler, which runs the op's batching rule: ops on
   physical tensors, which come back through here.  Finding the batched arguments is done
   here, in C, because every call pays for it.  The commonest batched call, ``a + b`` and
   friends with ``a`` batched in front (``set_batched_binary``), is served here too, and
   an op whose rule the handler has resolved calls that rule directly (``serve_rules``).  vmap levels are per thread (as in
   PyTorch): this thread's depth is a C thread-local, and a batched argument of a level
   deeper than that escaped from a vmap that has returned and is refused.
4. A call with ``out=`` goes to the handler ``ops.dispatch`` installs (PyTorch's rules:
   refused when autograd would record, result written into ``out``, its version bumped).
5. If grad mode is on and a differentiable input requires grad, autograd records the call:
   the kernel runs with grad mode off and its node is attached to the outputs
   (``_C.autograd.attach_node``); in-place ops follow ``autograd.recording``'s rules
   (rebasing history), which it installs here.
6. Otherwise the kernel runs directly; an in-place op then bumps its target's version.

A call whose kernel failed on an argument that is no tensor goes, only then, to the
layout handler ``microtensor.sparse`` installs (a sparse operand: its sparse version, or
PyTorch's NotImplementedError), else gets PyTorch's TypeError for a non-tensor argument.

``microtensor.ops.dispatch`` is the Python face of this module (and documents the
layering); nothing here imports above ``_C``.
"""
from microtensor._C.tensor cimport (TensorBase, grad_mode_enabled, inference_mode_enabled,
                                    needs_grad, restore_numpy, set_grad_enabled, silence_numpy,
                                    unary_fast, unary_loops)

import numpy as np

from microtensor._C.autograd import attach_node
from microtensor._C.tensor import NoDataError, set_fast_paths_bypassed, without_dim

cdef object _batched_type = None   # vmap's BatchedTensor, once vmap is imported
cdef object _batching = None       # vmap's handler(op, level, args, kwargs)
cdef object _record_inplace = None
cdef object _call_with_out = None
cdef object _non_tensor_error = None  # PyTorch's TypeError for a non-tensor argument
cdef object _layout_handler = None # handler(op, args, kwargs) of a call with a sparse operand
cdef object _observer = None       # observer(op, args, kwargs) of ops with a norm rule
cdef object _forward_ad = None     # forward AD's handler(op, args, kwargs) while a level is active
cdef object _profile_begin = None  # a recording profiler's begin(op, args) and end()
cdef object _profile_end = None
cdef dict _unary_kernels = {}      # op -> (fn, is_ufunc, loops, quiet): one-input ops served in C
cdef dict _batched_binary = {}     # op -> fn(a, b): the binary ops vmap's common case runs here
cdef object _binary_handler = None # the handler those are a case of (served only while it is)
cdef dict _batch_rules = None      # op -> its batching rule, the handler's cache (serve_rules)

# The number of vmap levels active in this thread (a C thread-local, so that threads
# vmap independently and read it for free).
cdef extern from *:
    """
    static __thread Py_ssize_t mt_vmap_depth = 0;
    """
    Py_ssize_t mt_vmap_depth

ESCAPED_ERROR = (
    "vmap: a BatchedTensor of level {} was used after the vmap that made it returned: it "
    "escaped from inside the function being vmapped (through a global, a closure or an "
    "attribute, say). Return it from the function instead.")

INFERENCE_INPLACE_ERROR = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
    "clone to get a normal tensor before doing inplace update.See "
    "https://github.com/pytorch/rfcs/pull/17 for more details.")
NO_GRAD_VIEW_ERROR = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
    "can clarify your code by moving both the view and the inplace either both inside the "
    "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
    "want the inplace to be tracked).")


def set_batching(handler, batched_type):
    """vmap's installation: calls with an argument of exactly ``batched_type`` (lists and
    tuples looked into), or of a random op while this thread is inside a vmap, go to
    ``handler(op, level, args, kwargs)`` with the highest ``_level`` among those arguments
    (0 if none); it may return NotImplemented to let the call go on as usual."""
    global _batching, _batched_type
    _batching = handler
    _batched_type = batched_type


def set_vmap_depth(Py_ssize_t depth):
    """vmap's entry and exit: the number of vmap levels now active in this thread."""
    global mt_vmap_depth
    mt_vmap_depth = depth


def batching():
    """The handler ``set_batching`` installed, while this thread is inside a vmap; else
    None."""
    return _batching if mt_vmap_depth else None


cdef Py_ssize_t _level_of(object value, Py_ssize_t level) except -1:
    cdef Py_ssize_t found
    kind = type(value)
    if kind is _batched_type:
        found = value._level
        return found if found > level else level
    if kind is list or kind is tuple:
        for item in value:
            if type(item) is _batched_type:
                found = item._level
                if found > level:
                    level = found
    return level


cdef Py_ssize_t _batch_level(args, kwargs) except -1:
    """The highest vmap level among the arguments' batched tensors (0: none)."""
    cdef Py_ssize_t level = 0
    for value in args:
        level = _level_of(value, level)
    if kwargs:
        for value in (<dict>kwargs).values():
            level = _level_of(value, level)
    return level


def install_inplace_recording(record_inplace):
    """Called once by ``autograd.recording``: ``record_inplace(op, args, kwargs) -> result``
    records an in-place op."""
    global _record_inplace
    _record_inplace = record_inplace


def install_non_tensor_error(non_tensor_error):
    """Called once by ``ops.dispatch``: ``non_tensor_error(op, args, kwargs, failure)``
    gives PyTorch's TypeError when a kernel's ``failure`` came from a tensor input given
    as something else (None otherwise)."""
    global _non_tensor_error
    _non_tensor_error = non_tensor_error


def install_layout_handler(layout_handler):
    """Called once by ``microtensor.sparse``: ``layout_handler(op, args, kwargs)`` runs (or
    refuses) a call whose kernel failed on a sparse operand, NotImplemented when it has
    none."""
    global _layout_handler
    _layout_handler = layout_handler


def install_out_call(call_with_out):
    """Called once by ``ops.dispatch``: ``call_with_out(op, args, kwargs) -> out`` runs a
    call that passed a tensor as ``out=``."""
    global _call_with_out
    _call_with_out = call_with_out


cdef inline bint _any_needs_grad(a) except -1:
    """Whether ``a``, a tensor or a list of them, has one that requires grad."""
    if isinstance(a, TensorBase):
        return needs_grad(<TensorBase>a)
    if isinstance(a, (list, tuple)):
        for t in a:
            if isinstance(t, TensorBase) and needs_grad(<TensorBase>t):
                return True
    return False


cpdef bint needs_recording(op, args, kwargs=None) except -1:
    """Whether a differentiable input of ``op`` (lists looked into), passed by position or
    by name, requires grad, with grad mode on."""
    cdef Py_ssize_t i, n = len(args)
    if not op.differentiable or not grad_mode_enabled():
        return False
    for i in op.input_positions:
        if i < n and _any_needs_grad(args[i]):
            return True
    if kwargs:
        for name in op.inputs:
            a = (<dict>kwargs).get(name)
            if a is not None and _any_needs_grad(a):
                return True
    return False


def set_unary_kernel(op, fn, bint quiet=False):
    """Serve calls ``op(tensor)`` of a one-input pointwise op in C for float32/float64 CPU
    tensors: ``fn`` is the NumPy ufunc the op's kernel applies (called as ``fn(array,
    out)``), or a function ``fn(array, out=, dtype=, casting=)`` as ``loops.pointwise``
    calls it.  The op's declaration registers it, so that each op stays declared once.
    ``fn`` None: the op's calls go the general way again.  ``quiet``: ``fn`` raises no
    floating-point error (a maximum, a copy), so it runs without setting NumPy's error
    state."""
    if fn is None:
        _unary_kernels.pop(op, None)
    else:
        _unary_kernels[op] = (fn, isinstance(fn, np.ufunc), unary_loops(fn), quiet)


def unary_kernels():
    """``{op: fn}`` for the ops ``set_unary_kernel`` serves in C, in declaration order."""
    return {op: kernel[0] for op, kernel in _unary_kernels.items()}


def serve_rules(rules):
    """Call the batching rule of ``rules`` (a dict, op -> rule: the handler's own cache,
    which it fills) for an op found there, without the handler's frame, while the handler
    of ``set_batched_binary`` is installed; ops not found there (their first call), and
    random ops, go to the handler."""
    global _batch_rules
    _batch_rules = rules


def set_batched_binary(op, fn):
    """Serve ``op(a, b)`` here under vmap when ``a`` is batched at dim 0 of the innermost
    level and ``b`` is a Python number, an unbatched tensor of no higher rank (of ``a``'s
    dtype if ``a`` is per-sample 0-d), or a tensor batched like ``a`` of ``a``'s rank: the
    result is ``fn`` of the physical values, batched at dim 0.  This is the pointwise
    family rule's common case (every batched gradient of ``jacrev`` takes it) without its
    Python frames; any other call of ``op`` goes to the handler.  vmap registers the
    binary operators once its handler is installed; they are served only while that
    handler is (another one, a test's spy say, sees every call)."""
    global _binary_handler
    _batched_binary[op] = fn
    _binary_handler = _batching


cdef object _batched_in_front(fn, Py_ssize_t level, a, b):
    """``set_batched_binary``'s case, or None when the arguments are not of it."""
    if type(a) is not _batched_type or a._level != level or a._bdim != 0:
        return None
    cdef TensorBase ta = <TensorBase>a
    cdef Py_ssize_t n = len(ta._sizes)
    kind = type(b)
    if kind is float or kind is int or kind is bool:
        physical = b
    elif kind is _batched_type:
        if b._level != level or b._bdim != 0 or len((<TensorBase>b)._sizes) != n:
            return None
        physical = b._value
    elif isinstance(b, TensorBase):
        if len((<TensorBase>b)._sizes) > n or \
                (n == 0 and (<TensorBase>b)._dtype is not ta._dtype):
            return None
        physical = b
    else:
        return None
    value = fn(a._value, physical)
    result = without_dim(value, 0, _batched_type)
    result._value = value
    result._bdim = 0
    result._level = level
    return result


def set_observer(observer):
    """Install ``observer(op, args, kwargs)`` (None: remove it), called first for every op
    that declares a norm rule; it returns the result, or NotImplemented to let the call go
    on as usual.  Other ops, and every op while none is installed, pay one pointer test."""
    global _observer
    _observer = observer


def set_forward_ad(handler):
    """Install ``handler(op, args, kwargs)`` (None: remove it), called for every call of a
    non-composite op while it is installed (a dual level is active); it returns the
    result, or NotImplemented to let the call go on as usual.  The C fast paths stand
    aside meanwhile, so that every op reaches it; with none installed this costs one
    pointer test here and one flag test in the fast paths."""
    global _forward_ad
    _forward_ad = handler
    _bypass_fast_paths_while_handled()


cdef _bypass_fast_paths_while_handled():
    """The fast paths stand aside while forward AD or a profiler wants every op."""
    set_fast_paths_bypassed(_forward_ad is not None or _profile_begin is not None)


def set_profiler(begin, end):
    """Install ``begin(op, args)`` and ``end()`` (None, None: remove them), called around
    every op call while a profiler records (the C fast paths stand aside meanwhile);
    with none installed this costs one pointer test."""
    global _profile_begin, _profile_end
    _profile_begin, _profile_end = begin, end
    _bypass_fast_paths_while_handled()


cpdef object call(op, args, kwargs):
    """Run ``op`` on ``args`` (a tuple) and ``kwargs`` (a dict or None)."""
    if _profile_begin is None:
        return _call(op, args, kwargs)
    _profile_begin(op, args)
    try:
        return _call(op, args, kwargs)
    finally:
        _profile_end()


cdef object _call(op, args, kwargs):
    if _observer is not None and op.norm_rule is not None:
        result = _observer(op, args, kwargs)
        if result is not NotImplemented:
            return result
    if not kwargs and len(args) == 1:
        kernel = _unary_kernels.get(op)
        if kernel is not None:
            result = unary_fast(op, <tuple>kernel, args[0])   # as silent as the rest
            if result is not None:
                return result
    # NumPy's floating-point warnings off for the call, as PyTorch's kernels are silent
    token = silence_numpy()
    try:
        return _dispatch(op, args, kwargs)
    except (AttributeError, TypeError) as failure:   # a dict where a tensor goes, say
        # or a sparse tensor, which dense kernels cannot read: only failed calls pay for it
        if _layout_handler is not None:
            result = _layout_handler(op, args, kwargs)
            if result is not NotImplemented:
                return result
        error = None if _non_tensor_error is None else \
            _non_tensor_error(op, args, kwargs, failure)
        if error is None:
            raise
        raise error from None
    finally:
        restore_numpy(token)


cdef object _dispatch(op, args, kwargs):
    if op.kind == "composite":
        if kwargs and "out" in <dict>kwargs:
            return _call_with_out(op, args, kwargs)
        return op.kernel(*args, **(kwargs or {}))
    if _forward_ad is not None:
        result = _forward_ad(op, args, kwargs)
        if result is not NotImplemented:
            return result
    cdef Py_ssize_t level
    if _batched_type is not None:
        level = _batch_level(args, kwargs)
        if level or (mt_vmap_depth and op.random):
            if level > mt_vmap_depth:
                raise RuntimeError(ESCAPED_ERROR.format(level))
            rule = None
            if _batching is _binary_handler:
                if not kwargs and len(args) == 2:
                    fn = _batched_binary.get(op)
                    if fn is not None:
                        result = _batched_in_front(fn, level, args[0], args[1])
                        if result is not None:
                            return result
                if _batch_rules is not None:
                    rule = _batch_rules.get(op)
                    if rule is not None and op.random:
                        rule = None
            if rule is None:
                result = _batching(op, level, args, kwargs)
            else:
                result = rule(op, level, args, kwargs)
            if result is not NotImplemented:
                return result
    if kwargs and "out" in <dict>kwargs and op.kind != "inplace":
        return _call_with_out(op, args, kwargs)
    if needs_recording(op, args, kwargs):
        return _record(op, args, kwargs)
    return run_kernel(op, args, kwargs)


def op_method(op):
    """``Tensor.<name>`` for ``op``: a compiled function (no Python frame per call) that
    binds like a Python one, PyTorch's other names of keywords included (``axis=`` for
    ``dim=``: ``_keyword_aliases``)."""
    cdef tuple aliases = _keyword_aliases(op, False)
    if op.varargs is not None:
        def varargs_method(self, *args, **kwargs):
            args = (self,) + args
            if kwargs:
                args, kwargs = _renamed(op, aliases, args, kwargs)
                if op.varargs in kwargs:
                    args, kwargs = _spread_varargs(op, args, kwargs)
            return call(op, args, kwargs)
        return varargs_method
    if op.kind == "composite":
        kernel = op.kernel

        def composite_method(self, *args, **kwargs):
            if kwargs:
                args, kwargs = _renamed(op, aliases, (self,) + args, kwargs)
                return kernel(*args, **kwargs)
            return kernel(self, *args)   # the body, as the dispatcher would run it
        return composite_method

    def method(self, *args, **kwargs):
        if kwargs:
            args, kwargs = _renamed(op, aliases, (self,) + args, kwargs)
            return call(op, args, kwargs)
        return call(op, (self,) + args, None)
    return method


def op_function(op):
    """``microtensor.<name>`` for ``op``, compiled like ``op_method`` (``input=`` names
    the tensor a method is called on)."""
    cdef tuple aliases = _keyword_aliases(op, True)
    if op.varargs is not None:
        def varargs_function(*args, **kwargs):
            if kwargs:
                args, kwargs = _renamed(op, aliases, args, kwargs)
                if op.varargs in kwargs:
                    args, kwargs = _spread_varargs(op, args, kwargs)
            return call(op, args, kwargs)
        return varargs_function
    if op.kind == "composite":
        kernel = op.kernel

        def composite_function(*args, **kwargs):
            if kwargs:
                args, kwargs = _renamed(op, aliases, args, kwargs)
                if "out" in kwargs:
                    return call(op, args, kwargs)
            return kernel(*args, **kwargs)   # the body, as the dispatcher would run it
        return composite_function

    def function(*args, **kwargs):
        if kwargs:
            args, kwargs = _renamed(op, aliases, args, kwargs)
        return call(op, args, kwargs)
    return function


cdef tuple _keyword_aliases(op, bint function):
    """PyTorch's other names for ``op``'s keywords, as ``(alias, name)`` pairs: its
    argument parser takes NumPy's ``axis`` for ``dim`` and ``keepdims`` for ``keepdim``,
    and a function takes the tensor a method is called on as ``input`` (``self`` here)."""
    names = op.param_names
    pairs = []
    if function and "self" in names and "input" not in names:
        pairs.append(("input", "self"))
    if "dim" in names and "axis" not in names:
        pairs.append(("axis", "dim"))
    if "keepdim" in names and "keepdims" not in names:
        pairs.append(("keepdims", "keepdim"))
    return tuple(pairs)


cdef tuple _renamed(op, tuple aliases, tuple args, dict kwargs):
    """``(args, kwargs)`` with each alias of ``aliases`` in ``kwargs`` under its name
    (``self`` as the only positional argument when it is the first parameter, so that it
    binds before ``*args``)."""
    for alias, name in aliases:
        if alias in kwargs:
            kwargs = dict(kwargs)
            value = kwargs.pop(alias)
            first = name == "self" and op.params and op.params[0] == "self"
            if (args if first else name in kwargs):
                raise TypeError(f"{op.name}() got multiple values for argument '{alias}'")
            if first:
                args = (value,)
            else:
                kwargs[name] = value
    return args, kwargs


cdef tuple _spread_varargs(op, tuple args, dict kwargs):
    """PyTorch's size and dims lists are ordinary parameters, so it takes them by keyword
    too (``flip(x, dims=[1])``, ``randn(size=(2, 3))``); the kernels take them as
    ``*args``: pass the keyword's value positionally, after the other arguments."""
    if len(args) > len(op.params):
        raise TypeError(f"{op.name}() got multiple values for argument '{op.varargs}'")
    kwargs = dict(kwargs)
    value = kwargs.pop(op.varargs)
    return args + (value,), kwargs


cdef object _record(op, args, kwargs):
    if op.kind == "inplace":
        return _record_inplace(op, args, kwargs)
    set_grad_enabled(False)
    try:
        result = run_kernel(op, args, kwargs)
    finally:
        set_grad_enabled(True)
    return attach_node(op, args, kwargs, result)


def set_shape_only(runner):
    """Install ``runner(op, args, kwargs)``, which gives an op's result on meta tensors
    (``backends.meta.run_shape_only``)."""
    global _shape_only
    _shape_only = runner


cdef object _shape_only = None


cpdef object run_kernel(op, args, kwargs):
    """Run the kernel; an in-place op then bumps its target's version counter.  A kernel
    that reached a meta tensor's (absent) data gets its result from the meta backend."""
    cdef bint inplace = op.kind == "inplace"
    if inplace and grad_mode_enabled():
        _refuse_no_grad_view(<TensorBase?>args[0])
    if inplace and (<TensorBase?>args[0])._storage.inference and not inference_mode_enabled():
        raise RuntimeError(INFERENCE_INPLACE_ERROR)
    try:
        if kwargs:
            result = op.kernel(*args, **kwargs)
        else:
            result = op.kernel(*args)
    except NoDataError:
        return _shape_only(op, args, kwargs)
    if inplace:
        (<TensorBase?>args[0])._storage.version += 1
    return result


cdef inline int _refuse_no_grad_view(TensorBase target) except -1:
    """PyTorch's refusal of an in-place op, in grad mode, on a view made in no_grad mode of
    a tensor that requires grad (whether autograd should see the write is ambiguous).
    (Recorded in-place ops are refused by ``autograd.recording.check_inplace``.)"""
    if target._base is not None and not target._is_diff_view and \
            needs_grad(<TensorBase>target._base):
        raise RuntimeError(NO_GRAD_VIEW_ERROR)
    return 0
