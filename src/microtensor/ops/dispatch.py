"""The dispatcher: the route every op call takes from the public API to its kernel.

``call``, ``needs_recording`` and ``run_kernel`` are in the Cython core
(``microtensor._C.dispatch``) because every op call takes them; the steps are:

1. A call with a batched argument, or a random op while this thread is inside a vmap
   (``set_batching``, ``set_vmap_depth``), goes to vmap's handler, which runs the op's
   batching rule: ops on physical tensors, which come back through here.
2. If grad mode is on and an input requires grad, autograd records the call: the kernel
   runs with grad mode off and a node is attached to its outputs (in-place ops by the
   rules of ``autograd.recording``).
3. Otherwise the kernel runs directly.

Layers above register themselves here, so this module imports nothing above ``ops``.
"""
from microtensor._C import dispatch as _core
from microtensor._C.dispatch import batching, call, run_kernel, set_batching, set_vmap_depth
from microtensor._C.tensor import TensorBase
from microtensor.ops.registry import REGISTRY

# Installed by microtensor.autograd: how an in-place op is recorded.
install_inplace_recording = _core.install_inplace_recording


def binary(name, a, b):
    """The slow path of ``a + b`` and friends (the Cython fast path declined)."""
    op = REGISTRY[name]
    if not isinstance(a, TensorBase):
        if not isinstance(b, TensorBase):
            return NotImplemented
        from microtensor.ops.factory import scalar_tensor_like
        a = scalar_tensor_like(a, b)
    if not isinstance(b, TensorBase) and not isinstance(b, (int, float, bool)):
        return NotImplemented
    return call(op, (a, b), None)


def call_by_name(name, *args, **kwargs):
    return call(REGISTRY[name], args, kwargs)
