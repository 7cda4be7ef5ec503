"""The dispatcher's hot path, in C: the route every op call takes to its kernel.

1. A composite op (written in other ops) runs its Python body.
2. If a transform has installed a handler (vmap does while it is active) and wants the
   call, the handler runs it (a batching rule turns it into ops on physical tensors,
   which come back through here).
3. If grad mode is on and a differentiable input requires grad, autograd records the call
   (the ``record`` function that ``autograd.recording`` installs) around the kernel.
4. Otherwise the kernel runs directly; an in-place op then bumps its target's version.

``microtensor.ops.dispatch`` is the Python face of this module (and documents the
layering); nothing here imports above ``_C``.
"""
from microtensor._C.tensor cimport TensorBase, grad_mode_enabled, needs_grad

# handler(op, args, kwargs) -> result or NotImplemented; ``ops.dispatch.transform_handlers``
# is this very list, so that vmap's entry and exit change what the C code sees.
cdef list _handlers = []
cdef object _record = None


def transform_handlers():
    """The list of active transform handlers (the object itself, to append to)."""
    return _handlers


def install_record(record):
    """Called once by ``autograd.recording``: ``record(op, args, kwargs) -> result``."""
    global _record
    _record = record


cpdef bint needs_recording(op, args) except -1:
    """Whether a differentiable positional input of ``op`` (lists looked into) requires
    grad, with grad mode on."""
    cdef Py_ssize_t i, n = len(args)
    if not op.differentiable or not grad_mode_enabled():
        return False
    for i in op.input_positions:
        if i < n:
            a = args[i]
            if isinstance(a, TensorBase):
                if needs_grad(<TensorBase>a):
                    return True
            elif isinstance(a, (list, tuple)):
                for t in a:
                    if isinstance(t, TensorBase) and needs_grad(<TensorBase>t):
                        return True
    return False


cpdef object call(op, args, kwargs):
    """Run ``op`` on ``args`` (a tuple) and ``kwargs`` (a dict or None)."""
    if op.kind == "composite":
        return op.kernel(*args, **(kwargs or {}))
    for handler in _handlers:
        result = handler(op, args, kwargs)
        if result is not NotImplemented:
            return result
    if needs_recording(op, args):
        return _record(op, args, kwargs)
    return run_kernel(op, args, kwargs)


cpdef object run_kernel(op, args, kwargs):
    """Run the kernel; an in-place op then bumps its target's version counter."""
    if kwargs:
        result = op.kernel(*args, **kwargs)
    else:
        result = op.kernel(*args)
    if op.kind == "inplace":
        (<TensorBase?>args[0])._storage.version += 1
    return result
