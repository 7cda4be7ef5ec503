"""The slow but correct path for ops without a batching rule (and for user
``autograd.Function``s, through ``function_fallback``): run the op once per sample and
stack the results.

It warns (once per op, through Python's warning registry) so that a missing rule is
noticed, and it refuses view and in-place ops: a per-sample loop cannot return a view of
the input or write through one.
"""
import warnings

from microtensor._C.tensor import TensorBase
from microtensor.ops import dispatch
from microtensor.vmap.batched import BatchedTensor, batch_size, wrap


def no_fallback(op):
    return RuntimeError(f"Batching rule not implemented for {op.name}; the fallback path "
                        "doesn't work on out= or view ops.")


def _sample(a, level, i):
    if type(a) is BatchedTensor and a._level == level:
        return a._value.select(a._bdim, i)
    if type(a) in (list, tuple):
        return type(a)(_sample(t, level, i) for t in a)
    return a


def _stack(shards):
    from microtensor.ops.registry import REGISTRY
    stack = REGISTRY.get("stack")
    if stack is not None:
        return dispatch.call(stack, (list(shards), 0), None)
    first = shards[0]
    out = first.new_empty((len(shards),) + tuple(first.shape))
    for i, shard in enumerate(shards):
        out.select(0, i).copy_(shard)
    return out


def _combine(name, shards, level):
    first = shards[0]
    if first is None:
        if any(s is not None for s in shards):
            raise _mixed_undefined()
        return None
    if isinstance(first, TensorBase):
        if any(s is None for s in shards):
            raise _mixed_undefined()
        return wrap(_stack(shards), 0, level)
    raise RuntimeError(f"Batching rule not implemented for {name}. We could not generate a "
                       "fallback.")


def _mixed_undefined():
    return RuntimeError("vmap: slow fallback received a mix of undefined and defined tensors "
                        "as the result of an operation. This is not supported.")


def fallback(op, level, args, kwargs):
    if op.kind in ("view", "inplace") or (kwargs and kwargs.get("out") is not None):
        raise no_fallback(op)
    return loop_and_stack(op.name, lambda *a, **k: dispatch.call(op, a, k or None), level,
                          args, kwargs)


def function_fallback(fn, args, kwargs=None):
    """For callables the dispatcher never sees (a user ``autograd.Function``'s ``apply``):
    the per-sample loop at the innermost level batching an argument, or None when no
    argument is batched."""
    level = max((a._level for a in args if type(a) is BatchedTensor), default=0)
    if not level:
        return None
    return loop_and_stack(getattr(fn, "__qualname__", repr(fn)), fn, level, args, kwargs)


def loop_and_stack(name, fn, level, args, kwargs):
    """Call ``fn`` once per sample of ``level`` and stack each output along a new dim 0."""
    size = batch_size(level)
    if size == 0:
        raise RuntimeError(f"Batching rule not implemented for {name}. The fallback path "
                           "does not support vmap over dims of size 0.")
    warnings.warn(f"Batching rule not implemented for {name} falling back to slow (for loop "
                  "and stack) implementation", UserWarning, stacklevel=5)
    results = []
    for i in range(size):
        sample_args = tuple(_sample(a, level, i) for a in args)
        sample_kwargs = {k: _sample(v, level, i) for k, v in kwargs.items()} if kwargs else {}
        results.append(fn(*sample_args, **sample_kwargs))
    first = results[0]
    if isinstance(first, tuple):
        combined = [_combine(name, [r[j] for r in results], level) for j in range(len(first))]
        return type(first)(*combined) if hasattr(first, "_fields") else tuple(combined)
    return _combine(name, results, level)
