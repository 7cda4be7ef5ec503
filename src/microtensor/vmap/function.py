"""``autograd.Function`` under ``vmap``: the Function's own ``vmap`` staticmethod, or the
rule generated from its ``forward`` and ``backward`` (``generate_vmap_rule = True``), as in
PyTorch; a Function with neither runs once per sample (``fallback.function_fallback``).

Batching happens one level at a time, as for ops: the arguments are unwrapped at the
innermost level that batches one of them.

- ``vmap(info, in_dims, *args)`` gets the unwrapped arguments and their batch dims (None:
  not batched) and returns ``(outputs, out_dims)``.  It runs with grad mode as it is, so
  what it calls (typically the Function's ``apply`` on the unwrapped tensors) is recorded.
- The generated rule applies ``VmappedFunction``, a Function over the unwrapped tensors
  whose forward is ``vmap(forward)``, whose ``setup_context`` runs the user's on the
  per-sample views (keeping where each saved tensor's batch dim is) and whose backward is
  ``vmap(backward)`` over the saved tensors and the gradients.  The user's backward thus
  defines the gradient, also in ``vmap(grad(f))`` and ``grad(vmap(f))``; it runs under a
  vmap of its own, so the level of the forward may be gone by then.
"""
from collections import namedtuple

from microtensor._C.tensor import TensorBase
from microtensor.autograd.function import Function, FunctionCtx, overrides
from microtensor.vmap import api, fallback
from microtensor.vmap.batched import BatchedTensor, active_levels, unwrap, wrap

_DOCS = " For more details, please see https://pytorch.org/docs/main/notes/extending.func.html"

VmapInfo = namedtuple("VmapInfo", ["batch_size", "randomness"])


def batched_apply(cls, args):
    """``cls.apply(*args)`` when an argument is batched (else None)."""
    level = max((a._level for a in args if type(a) is BatchedTensor), default=0)
    if not level:
        return None
    has_rule = overrides(cls, "vmap")
    if not (has_rule or cls.generate_vmap_rule):
        return fallback.function_fallback(cls.apply, args)
    if not overrides(cls, "setup_context"):
        raise RuntimeError("In order to use an autograd.Function with functorch transforms "
                           "(vmap, grad, jvp, jacrev, ...), it must override the setup_context "
                           "staticmethod." + _DOCS)
    if has_rule and cls.generate_vmap_rule:
        raise RuntimeError(f"You tried to vmap over {cls.__name__}, but it has both "
                           "generate_vmap_rule=True and an overridden vmap staticmethod. Please "
                           "set generate_vmap_rule=False or delete the overridden vmap "
                           "staticmethod to avoid ambiguity." + _DOCS)
    values, in_dims = zip(*(unwrap(a, level) for a in args))
    current = active_levels()[level - 1]
    info = VmapInfo(current.size, current.randomness)
    if has_rule:
        return _own_rule(cls, level, info, values, in_dims)
    spec = _Spec(cls, in_dims, info)
    outputs = VmappedFunction.apply(spec, *values)
    if isinstance(outputs, tuple):
        return tuple(wrap(o, 0, level) if isinstance(o, TensorBase) else o for o in outputs)
    return wrap(outputs, 0, level)


def _own_rule(cls, level, info, values, in_dims):
    result = cls.vmap(info, in_dims, *values)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise RuntimeError("Expected the vmap staticmethod to have two returns, an output and "
                           "out_dims with pytree structure compatible with the output. Got a "
                           f"{type(result)} instead")
    outputs, out_dims = result
    flat, spec = api.tree_flatten(outputs)
    flat_dims = api.broadcast_to_and_flatten(out_dims, spec)
    if flat_dims is None:
        raise RuntimeError("The autograd.Function's vmap staticmethod returned an incompatible "
                           f"(output, out_dims) tuple. Expected out_dims={out_dims} to be "
                           "compatible with the structure of `output`. out_dims has structure "
                           f"{api.tree_flatten(out_dims)[1]} but output has structure {spec}."
                           + _DOCS)
    return api.tree_unflatten([o if d is None else wrap(o, d, level)
                               for o, d in zip(flat, flat_dims)], spec)


_Spec = namedtuple("_Spec", ["cls", "in_dims", "info"])


class VmappedFunction(Function):
    """The generated vmap rule of a Function (``spec.cls``), applied to the unwrapped
    arguments; outputs carry their batch dim at 0.  Itself batched by the same rule when
    the arguments are batched at older levels too (nested vmap)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(spec, *values):
        return api.vmap_call(spec.cls.forward, spec.in_dims, 0, spec.info.randomness, None,
                             values, {})

    @staticmethod
    def setup_context(ctx, inputs, output):
        spec, *values = inputs
        user_ctx = FunctionCtx()
        user_ctx.needs_input_grad = ctx.needs_input_grad[1:]
        outputs = output if isinstance(output, tuple) else (output,)
        level = api._push(spec.info.batch_size, spec.info.randomness)
        try:
            args = [v if d is None else wrap(v, d, level) for v, d in zip(values, spec.in_dims)]
            per_sample = [wrap(o, 0, level) if isinstance(o, TensorBase) else o for o in outputs]
            spec.cls.setup_context(user_ctx, tuple(args),
                                   tuple(per_sample) if isinstance(output, tuple)
                                   else per_sample[0])
            saved = [(None, None) if t is None else unwrap(t, level) for t in user_ctx._to_save]
        finally:
            api._pop()
        user_ctx._to_save = ()
        ctx.save_for_backward(*(t for t, _ in saved))
        ctx.saved_dims = tuple(d for _, d in saved)
        ctx.spec = spec
        ctx.user_ctx = user_ctx

    @staticmethod
    def backward(ctx, *grads):
        spec, user_ctx = ctx.spec, ctx.user_ctx

        def per_sample(saved, grads):
            user_ctx._to_save = saved
            try:
                result = spec.cls.backward(user_ctx, *grads)
            finally:
                user_ctx._to_save = ()
            return result if isinstance(result, tuple) else (result,)
        grad_dims = tuple(None if g is None else 0 for g in grads)
        results = api.vmap_call(per_sample, (ctx.saved_dims, grad_dims), 0,
                                spec.info.randomness, None, (ctx.saved_tensors, grads), {},
                                allow_none_outputs=True)
        return (None,) + tuple(_to_input_layout(g, d) for g, d in zip(results, spec.in_dims))


def _to_input_layout(grad, in_dim):
    """A per-sample gradient (batch dim 0) as the gradient of an unwrapped argument: summed
    over the batch for an unbatched argument, else with the batch dim where it was."""
    if grad is None:
        return None
    if in_dim is None:
        return grad.sum(0)
    return grad if in_dim == 0 else grad.movedim(0, in_dim)
