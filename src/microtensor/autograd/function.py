"""``autograd.Function``: user-defined ops with a hand-written backward.

A subclass defines static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``;
``MyFn.apply(*args)`` runs ``forward`` with grad mode off and, when an input requires
grad, makes a ``MyFnBackward`` node the outputs' ``grad_fn``.  As in PyTorch the node
*is* the ``ctx`` that ``forward`` and ``backward`` receive, so attributes set on ``ctx``
live exactly as long as the graph.  Under forward-mode AD (``autograd.forward_ad``) a
call with a dual argument runs ``forward`` without tangents and gives the outputs those of
a static ``jvp(ctx, *tangents)`` (which reads ``ctx.save_for_forward``'s tensors as
``ctx.saved_tensors``); a Function without one refuses, as in PyTorch.
"""
import functools

from microtensor._C.tensor import TensorBase
from microtensor.autograd import forward_ad
from microtensor.autograd.grad_mode import no_grad
from microtensor.autograd.grad_mode import state as grad_state
from microtensor._C.autograd import RELEASED_ERROR, Node, SavedTensor, detached_alias
from microtensor.autograd.recording import check_inplace, gradient_edge, rebase_history



# Installed by microtensor.vmap (``vmap.function.batched_apply``): applies a Function
# whose arguments are batched, else returns None.
batched_apply = None

class FunctionCtx:
    """What ``forward`` can tell autograd through ``ctx``."""

    _to_save = ()
    _saved = None
    _saved_for_forward = ()
    _in_jvp = False
    _dirty = ()
    _non_differentiable = ()
    materialize_grads = True
    needs_input_grad = ()

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, TensorBase):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._to_save = tensors

    def save_for_forward(self, *tensors):
        """Tensors ``jvp`` reads as ``ctx.saved_tensors`` (forward-mode AD)."""
        for t in tensors:
            if t is not None and not isinstance(t, TensorBase):
                raise TypeError("save_for_forward expects all arguments to be tensors; you "
                                "should save non-tensors as attributes on ctx.")
        self._saved_for_forward = tensors

    def mark_dirty(self, *tensors):
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        if self._in_jvp:
            return tuple(self._saved_for_forward)
        if self._saved is None:       # inside forward, before the tensors are packed
            return tuple(self._to_save)
        return tuple(s.unpack(self) if s is not None else None for s in self._saved)


class BackwardCFunction(FunctionCtx, Node):
    """The graph node of one ``Function.apply`` call (named ``<Function>Backward``)."""

    _forward_cls = None
    _released = False

    def name(self):
        return type(self).__name__

    def apply(self, grads):
        if self._released and self._saved is not None:
            raise RuntimeError(RELEASED_ERROR)
        if self.materialize_grads:
            grads = tuple(g if g is not None else _zeros(meta)
                          for g, meta in zip(grads, self.output_meta))
        results = self._forward_cls.backward(self, *grads)
        if not isinstance(results, tuple):
            results = (results,)
        return self._gradients_for_edges(results)

    def _gradients_for_edges(self, results):
        """One gradient per tensor argument of ``forward``, from ``backward``'s results
        (one per argument of ``forward``; trailing extra ``None``s are allowed)."""
        expected = len(self.is_tensor_arg)
        if len(results) > expected and all(r is None for r in results[expected:]):
            results = results[:expected]
        if len(results) != expected:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {expected}, got {len(results)})")
        grads = []
        for i, (is_tensor, g) in enumerate(zip(self.is_tensor_arg, results)):
            if is_tensor:
                grads.append(g)
            elif g is not None:
                raise RuntimeError(f"function {self.name()} returned a gradient different than "
                                   f"None at position {i + 1}, but the corresponding forward "
                                   "input was not a Variable")
        return tuple(grads)

    def release(self):
        self._released = True
        if self._saved is not None:
            for s in self._saved:
                if s is not None:
                    s.release()


def _zeros(meta):
    sizes, dtype, device = meta
    from microtensor.ops.factory import zeros
    return zeros(sizes, dtype=dtype, device=device)


class Function:
    """Base class of user-defined differentiable functions (see the module docstring).

    ``forward`` may instead be written without ``ctx`` together with a static
    ``setup_context(ctx, inputs, output)``, as in PyTorch 2.  That style is needed under
    ``vmap`` with either a static ``vmap(info, in_dims, *args) -> (outputs, out_dims)`` or
    ``generate_vmap_rule = True`` (see ``microtensor.vmap.function``); a Function with
    neither runs once per sample under ``vmap``.
    """

    generate_vmap_rule = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(cls.__name__ + "Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls})

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("To use autograd.Function with vmap, you must either "
                                  "override the vmap staticmethod or set "
                                  "generate_vmap_rule=True.")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    @staticmethod
    def jvp(ctx, *tangents):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply() takes positional arguments only")
        if batched_apply is not None:
            result = batched_apply(cls, args)
            if result is not None:
                return result
        ctx = cls._backward_cls.__new__(cls._backward_cls)
        is_tensor_arg = tuple(isinstance(a, TensorBase) for a in args)
        recording = grad_state.enabled and any(
            t and a.requires_grad for t, a in zip(is_tensor_arg, args))
        ctx.needs_input_grad = tuple(recording and t and a.requires_grad
                                     for t, a in zip(is_tensor_arg, args))
        tangents = None                     # the arguments' tangents, when one has one
        if forward_ad._current_level >= 0:
            tangents = forward_ad.function_tangents(cls, args)
        with no_grad(), forward_ad.suspended(tangents is not None):
            if overrides(cls, "setup_context"):
                result = cls.forward(*args)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args)
        if recording:
            Node.__init__(ctx, [gradient_edge(a) if t else (None, 0)
                                for t, a in zip(is_tensor_arg, args) if t])
            ctx.is_tensor_arg = is_tensor_arg
            ctx.input_meta = [(a._sizes, a._dtype) for t, a in zip(is_tensor_arg, args) if t]
            result = _attach_outputs(ctx, args, result)
        if tangents is not None:
            forward_ad.run_function_jvp(cls, ctx, tangents, result)
        return result


def overrides(cls, name):
    return getattr(cls, name) is not getattr(Function, name)


def _attach_outputs(ctx, args, result):
    """Make ``ctx`` the ``grad_fn`` of ``forward``'s outputs, then pack saved tensors."""
    single = not isinstance(result, tuple)
    outputs = [result] if single else list(result)
    dirty = {id(t) for t in ctx._dirty}
    non_diff = {id(t) for t in ctx._non_differentiable}
    inputs = {id(a) for a in args if isinstance(a, TensorBase)}
    ctx.num_outputs = len(outputs)
    ctx.output_meta = []
    for i, out in enumerate(outputs):
        if not isinstance(out, TensorBase):
            ctx.output_meta.append(((), None, None))
            continue
        ctx.output_meta.append((out._sizes, out._dtype, out.device))
        differentiable = out._dtype.kind >= 2 and id(out) not in non_diff
        if id(out) in dirty:
            check_inplace(out)
            if out._is_diff_view and (len(outputs) > 1 or out is not args[0]):
                raise NotImplementedError(
                    "microtensor: a custom Function may modify a view in place only when the "
                    "view is its first argument and its only output")
            if differentiable:
                rebase_history(out, ctx)
                if out._is_diff_view:
                    continue
        elif id(out) in inputs:
            # returning an input unchanged: the output is a new tensor over the same memory
            out = outputs[i] = detached_alias(out)
        if differentiable:
            out._grad_fn = ctx
            out._output_nr = i
            out._requires_grad = True
    for t in ctx._dirty:
        if id(t) not in {id(o) for o in outputs if isinstance(o, TensorBase)}:
            raise RuntimeError("Some elements marked as dirty during the forward method were "
                               "not returned as output. The inputs that are modified inplace "
                               "must all be outputs of the Function.")
    _pack_saved(ctx, outputs)
    return outputs[0] if single else tuple(outputs)


def _pack_saved(ctx, outputs):
    output_nr = {id(o): i for i, o in enumerate(outputs) if isinstance(o, TensorBase)}
    saved = []
    for t in ctx._to_save:
        if t is None:
            saved.append(None)
        elif id(t) in output_nr:
            saved.append(SavedTensor(t, is_output=True, output_nr=output_nr[id(t)]))
        else:
            saved.append(SavedTensor(t))
    ctx._saved = saved
    ctx._to_save = ()


class DelayedError(Node):
    """A node whose backward raises ``message``: put after a backward that cannot itself be
    differentiated, so that only an attempt to differentiate it fails."""

    def __init__(self, message, num_outputs):
        super().__init__(((None, 0),) * num_outputs, num_outputs=num_outputs)
        self.message = message

    def name(self):
        return "Error"

    def apply(self, grads):
        raise RuntimeError(self.message)


def once_differentiable(backward):
    """Decorator for a ``Function``'s ``backward`` that is not differentiable itself: it runs
    without recording, and when a graph is being built (``create_graph``) its gradients
    lead to a node that raises if a double backward reaches it."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            outputs = backward(ctx, *grads)
        if not grad_state.enabled or not any(
                isinstance(g, TensorBase) and g.requires_grad for g in grads):
            return outputs
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        error = DelayedError("trying to differentiate twice a function that was marked with "
                             "@once_differentiable", len(outputs))
        delayed = []
        for i, out in enumerate(outputs):
            if isinstance(out, TensorBase):
                out = detached_alias(out)
                out._grad_fn, out._output_nr, out._requires_grad = error, i, True
            delayed.append(out)
        return delayed[0] if single else tuple(delayed)
    return wrapper


__all__ = ["Function", "FunctionCtx", "BackwardCFunction", "DelayedError", "once_differentiable"]
