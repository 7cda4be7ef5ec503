"""The dispatcher: the route every op call takes from the public API to its kernel.

``call``, ``needs_recording`` and ``run_kernel`` are in the Cython core
(``microtensor._C.dispatch``) because every op call takes them; the steps are:

1. A composite op (written in other ops) runs its Python body: the ops it calls are
   dispatched in turn.
2. A call with a batched argument, or a random op while this thread is inside a vmap
   (``set_batching``, ``set_vmap_depth``), goes to vmap's handler, which runs the op's
   batching rule: ops on physical tensors, which come back through here.
3. A call with ``out=`` is ``call_with_out``'s: the same for every op.
4. If grad mode is on and an input requires grad, autograd records the call: the kernel
   runs with grad mode off and a node is attached to its outputs (in-place ops by the
   rules of ``autograd.recording``).
5. Otherwise the kernel runs directly; an in-place op then bumps its target's version.

Layers above register themselves here, so this module imports nothing above ``ops``.
"""
import numbers
import warnings

from microtensor._C import dispatch as _core
from microtensor._C import meta
from microtensor._C.dispatch import (batching, call, run_kernel, serve_rules,  # noqa: F401
                                     set_batched_binary, set_batching, set_observer,
                                     set_vmap_depth)
from microtensor._C.tensor import TensorBase, empty_contiguous, is_grad_enabled
from microtensor._dtype import NotATensor, can_cast, info
from microtensor.ops.loops import _type_name, check_writable, scalar_tensor_like
from microtensor.ops.registry import REGISTRY

__all__ = ["batching", "binary", "call", "call_by_name", "call_with_out",
           "install_inplace_recording", "run_kernel", "set_batching", "set_vmap_depth"]

# Installed by microtensor.autograd: how an in-place op is recorded.
install_inplace_recording = _core.install_inplace_recording


def binary(name, a, b):
    """The slow path of ``a + b`` and friends when ``a`` is not a tensor (a number on the
    left) or ``b`` neither a tensor nor a number: the core's fast path sends calls on two
    tensors, or a tensor and a number, to the dispatcher itself."""
    op = REGISTRY[name]
    if not isinstance(a, TensorBase):
        if not isinstance(b, TensorBase):
            return NotImplemented
        a = scalar_tensor_like(a, b)
    if not isinstance(b, TensorBase) and not isinstance(b, (int, float, bool, complex)):
        return NotImplemented
    return call(op, (a, b), None)


def call_by_name(name, *args, **kwargs):
    return call(REGISTRY[name], args, kwargs)


def _tensors(values):
    for value in values:
        if isinstance(value, TensorBase):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, TensorBase))


def call_with_out(op, args, kwargs):
    """``op(*args, **kwargs)`` with a tensor ``out``, by PyTorch's rules for every op:
    refused when autograd would have to record it (an argument requires grad in grad
    mode); else the result is computed and checked against ``out`` (dtype: the same, or
    for elementwise ops one of no lower category; no memory shared with the inputs),
    ``out`` is resized to it when the shapes differ (with a warning if ``out`` had
    elements) and the result is copied in, which bumps ``out``'s version.  Computing into
    a fresh tensor first keeps each kernel's ``out`` parameter for its in-place variant
    alone (where ``out`` is ``self``)."""
    if "out" not in op.param_names:
        return run_kernel(op, args, kwargs)   # the kernel refuses the unknown keyword
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    if not isinstance(out, TensorBase):
        raise TypeError(f"{op.name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    inputs = list(_tensors(list(args) + list(kwargs.values())))
    if op.differentiable and is_grad_enabled() and \
            any(t.requires_grad for t in inputs + [out]):
        raise RuntimeError(f"{op.name}(): functions with out=... arguments don't support "
                           f"automatic differentiation, but one of the arguments requires grad.")
    result = run_kernel(op, args, kwargs)
    if op.family != "pointwise" and result._dtype is not out._dtype:
        # only elementwise kernels cast their result (PyTorch's TensorIterator)
        raise RuntimeError(f"Expected out tensor to have dtype {info(result._dtype).cpp_name}, "
                           f"but got {info(out._dtype).cpp_name} instead")
    if not can_cast(result._dtype, out._dtype):
        raise RuntimeError(f"result type {_type_name(result._dtype)} can't be cast to the "
                           f"desired output type {_type_name(out._dtype)}")
    target = out if out._sizes == result._sizes else _resized(out, result._sizes)
    check_writable(target, inputs)
    if target is not out:
        if out._numel:
            warnings.warn(f"An output with one or more elements was resized since it had shape "
                          f"{list(out._sizes)}, which does not match the required output shape "
                          f"{list(result._sizes)}. This behavior is deprecated, and in a future "
                          f"release outputs will not be resized unless they have zero elements.",
                          UserWarning, stacklevel=3)
        target._storage.version = out._storage.version   # one counter, as for a resize_
        out._set_storage(target._storage, target._sizes, target._strides, target._offset)
    run_kernel(REGISTRY["copy_"], (out, result), None)
    return out


def _resized(out, sizes):
    """A tensor with ``out``'s dtype and the contiguous geometry ``sizes``: over ``out``'s
    storage from its offset when that holds enough elements, else over a new storage."""
    strides = tuple(meta.contiguous_strides(sizes))
    numel = 1
    for size in sizes:
        numel *= size
    if (out._offset + numel) * out._dtype.itemsize <= out._storage.nbytes():
        # in bounds: a contiguous run of numel elements from the offset
        return out._make_alias_unchecked(sizes, strides, out._offset)
    return empty_contiguous(sizes, out._dtype, out.device)


_core.install_out_call(call_with_out)


def non_tensor_error(op, args, kwargs, failure):
    """PyTorch's TypeError for a call whose kernel failed (``failure``: an
    AttributeError, or promotion's NotATensor) on a tensor input given as something else
    (a dict, a string, a list of numbers...): "exp(): argument 'input' (position 1) must
    be Tensor, not dict"; None for any other failure, or when every input is a tensor, a
    number, None or a sequence of tensors (the failure is then the kernel's own)."""
    if not isinstance(failure, (AttributeError, NotATensor)):
        return None
    try:
        bound = op.bind(args, kwargs)
    except TypeError:
        return None
    for name in op.inputs:
        value = bound.get(name)
        if value is None or isinstance(value, (TensorBase, numbers.Number)) or (
                isinstance(value, (list, tuple)) and value and
                all(isinstance(v, TensorBase) for v in value)):
            continue
        shown = "input" if name == "self" else name
        position = op.params.index(name) + 1 if name in op.params else 1
        return TypeError(f"{op.name}(): argument '{shown}' (position {position}) must be "
                         f"Tensor, not {type(value).__name__}")
    return None


_core.install_non_tensor_error(non_tensor_error)
