"""Module hook machinery, as PyTorch's ``torch.utils.hooks``: ``RemovableHandle`` and the
``BackwardHook`` that runs a module's full backward (pre-)hooks."""
import warnings
import weakref
from abc import ABCMeta
from collections import OrderedDict

from microtensor._C.autograd import RemovableHandle as _GraphHookHandle
from microtensor._C.tensor import TensorBase
from microtensor.autograd.function import Function
from microtensor.autograd.grad_mode import is_grad_enabled


class RemovableHandle(metaclass=ABCMeta):
    """Returned by the ``register_*_hook`` methods: ``remove()`` (or leaving a ``with``
    block) unregisters the hook.  Holds its tables weakly, so it keeps no module alive.
    Public as ``microtensor.utils.hooks.RemovableHandle``."""

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        extras = [] if extra_dict is None else \
            [extra_dict] if isinstance(extra_dict, dict) else extra_dict
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref,) + self.extra_dict_ref:
            table = ref()
            if table is not None:
                table.pop(self.id, None)

    def __getstate__(self):
        """The tables themselves (a deep copy of a module then holds handles onto the
        copy's tables, as in PyTorch), not the weak references."""
        return (self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state):
        hooks_dict, self.id, extras = state
        # a table already gone stays gone (a new one, referred to weakly, dies at once)
        self.hooks_dict_ref = weakref.ref(OrderedDict() if hooks_dict is None else hooks_dict)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras if d is not None)
        # ids unpickled in another process must not be handed out again
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# The handles of tensor and graph-node hooks (``Tensor.register_hook``,
# ``Node.register_hook``...) come from the C core, which holds its plain-dict tables
# strongly; they are RemovableHandles too, with ``remove()`` and the ``with`` block.
RemovableHandle.register(_GraphHookHandle)


class BackwardHookFunction(Function):
    """The identity, as a graph node on which a module's backward hooks hang."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return grads


def _pack_with_none(indices, values, size):
    packed = [None] * size
    for i, v in zip(indices, values):
        packed[i] = v
    return tuple(packed)


class BackwardHook:
    """One forward call's backward hooks, as PyTorch's: the module's tensor inputs and
    outputs pass through ``BackwardHookFunction``.  The outputs' node captures
    ``grad_output`` (running the backward pre-hooks, which may replace it); the inputs' node
    then calls ``hook(module, grad_input, grad_output)``, which may replace ``grad_input``."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = 0
        self.input_tensors_index = self.output_tensors_index = None

    @staticmethod
    def _apply_on_tensors(register, args):
        """``args`` with its tensors passed through the identity node (given to
        ``register``), and their positions; unchanged and None when nothing records."""
        index = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]
        if not (is_grad_enabled() and any(args[i].requires_grad for i in index)):
            return args, None
        new = BackwardHookFunction.apply(*(args[i] for i in index))
        register(next(t.grad_fn for t in new if t.grad_fn is not None))
        out = list(args)
        for i, t in zip(index, new):
            out[i] = t
        return tuple(out), index

    def setup_input_hook(self, args):
        self.n_inputs = len(args)
        args, self.input_tensors_index = self._apply_on_tensors(
            lambda node: node.register_hook(self._input_hook), args)
        return args

    def setup_output_hook(self, result):
        single = not isinstance(result, tuple)
        outputs = (result,) if single else result
        self.n_outputs = len(outputs)
        outputs, self.output_tensors_index = self._apply_on_tensors(
            lambda node: node.register_prehook(self._output_hook), outputs)
        return outputs[0] if single else outputs

    def _output_hook(self, grads):
        self.grad_outputs = _pack_with_none(self.output_tensors_index, grads, self.n_outputs)
        for hook in self.user_pre_hooks:
            result = hook(self.module, self.grad_outputs)
            if result is None:
                continue
            if len(result) != len(self.grad_outputs):
                raise RuntimeError("Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(result)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = tuple(result)
        grad_outputs = self.grad_outputs
        if self.input_tensors_index is None:
            # no input requires grad: the hook fires now, with grad_input all None
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients.",
                          stacklevel=2)
            grad_inputs = (None,) * self.n_inputs
            for hook in self.user_hooks:
                result = hook(self.module, grad_inputs, grad_outputs)
                if result is not None and not (isinstance(result, tuple) and
                                               all(r is None for r in result)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(grad_outputs[i] for i in self.output_tensors_index)

    def _input_hook(self, grad_inputs, _):
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs
            return None
        grads = _pack_with_none(self.input_tensors_index, grad_inputs, self.n_inputs)
        for hook in self.user_hooks:
            result = hook(self.module, grads, self.grad_outputs)
            if result is None:
                continue
            if len(result) != len(grads):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(result)}, but expected {len(grads)}")
            grads = tuple(result)
        self.grad_outputs = None
        return tuple(grads[i] for i in self.input_tensors_index)
