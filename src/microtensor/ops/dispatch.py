"""The dispatcher: the route every op call takes from the public API to its kernel.

1. If a transform has installed a handler (vmap does while it is active) and wants the
   call, the handler runs it (a batching rule turns it into ops on physical tensors,
   which come back through here).
2. If grad mode is on and an input requires grad, autograd records the call
   (``autograd.recording``) around the kernel.
3. Otherwise the kernel runs directly.

Layers above register themselves here, so this module imports nothing above ``ops``.
"""
from microtensor._C.tensor import TensorBase, is_grad_enabled

# Installed by microtensor.vmap: handler(op, args, kwargs) -> result or NotImplemented.
transform_handlers = []
# Installed by microtensor.autograd: record(op, args, kwargs) -> result.
record = None


def needs_recording(op, args):
    """Whether a differentiable positional input of ``op`` (lists looked into) requires
    grad, with grad mode on."""
    if not op.differentiable or not is_grad_enabled():
        return False
    for i in op.input_positions:
        if i < len(args):
            a = args[i]
            if isinstance(a, TensorBase):
                if a.requires_grad:
                    return True
            elif isinstance(a, (list, tuple)):
                for t in a:
                    if isinstance(t, TensorBase) and t.requires_grad:
                        return True
    return False


def call(op, args, kwargs):
    if op.kind == "composite":
        return op.kernel(*args, **(kwargs or {}))
    for handler in transform_handlers:
        result = handler(op, args, kwargs)
        if result is not NotImplemented:
            return result
    if needs_recording(op, args):
        return record(op, args, kwargs)
    return run_kernel(op, args, kwargs)


def run_kernel(op, args, kwargs):
    """Run the kernel; an in-place op then bumps its target's version counter."""
    if kwargs:
        result = op.kernel(*args, **kwargs)
    else:
        result = op.kernel(*args)
    if op.kind == "inplace":
        args[0]._storage.version += 1
    return result


_BINARY = {}


def binary(name, a, b):
    """The slow path of ``a + b`` and friends (the Cython fast path declined)."""
    op = _BINARY.get(name)
    if op is None:
        from microtensor.ops.registry import REGISTRY
        op = _BINARY[name] = REGISTRY[name]
    if not isinstance(a, TensorBase):
        if not isinstance(b, TensorBase):
            return NotImplemented
        from microtensor.ops.factory import scalar_tensor_like
        a = scalar_tensor_like(a, b)
    if not isinstance(b, TensorBase) and not isinstance(b, (int, float, bool)):
        return NotImplemented
    return call(op, (a, b), None)


def call_by_name(name, *args, **kwargs):
    from microtensor.ops.registry import REGISTRY
    return call(REGISTRY[name], args, kwargs)
