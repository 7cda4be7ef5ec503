"""Activation checkpointing, as ``torch.utils.checkpoint``: a part of the forward pass
keeps nothing of what its backward needs, and is run again when backward reaches it.
Memory for time: a checkpointed block's intermediate results are freed after its forward.

Two ways, chosen by ``use_reentrant`` as in PyTorch:

* **non-reentrant** (``use_reentrant=False``, PyTorch's recommendation): the forward
  records its graph as usual, but under ``saved_tensors_hooks`` that keep, for each tensor
  a node saves, only its position.  When backward first unpacks one, the function runs
  again on the same inputs with the same random state, and the tensors its nodes save
  are kept by position and handed out.  The graph is the forward's own, so
  ``autograd.grad``, ``backward(inputs=...)`` and hooks work as without checkpointing.
* **reentrant** (``use_reentrant=True``, what ``None`` means today, with PyTorch's
  warning): the forward runs without recording, as one ``autograd.Function``; that
  node's backward runs the function again with recording and calls ``backward`` on the
  new graph (the engine re-entered), accumulating into the leaves' ``.grad``, which is
  why ``autograd.grad`` and ``backward(inputs=...)`` are refused through it.
"""
import contextlib
import warnings

from microtensor._C.tensor import TensorBase
from microtensor.autograd import engine
from microtensor.autograd.function import Function
from microtensor.autograd.grad_mode import enable_grad, no_grad
from microtensor.autograd.graph import saved_tensors_hooks
from microtensor.ops.factory import get_rng_state, set_rng_state

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential", "detach_variable",
           "noop_context_fn"]

_REENTRANT_WARNING = (
    "microtensor.utils.checkpoint: the use_reentrant parameter should be passed explicitly. "
    "As in PyTorch, calling checkpoint without use_reentrant uses the reentrant variant; "
    "use_reentrant=False is recommended. Refer to docs for more details on the differences "
    "between the two variants.")


class CheckpointError(RuntimeError):
    """The recomputation of a checkpointed function did not save what its forward saved."""


def noop_context_fn():
    """The default ``context_fn``: no context around the forward nor the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def detach_variable(inputs):
    """``inputs`` with each tensor detached, keeping its ``requires_grad``."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: "
                           f"{type(inputs).__name__}")
    return tuple(x.detach().requires_grad_(x.requires_grad) if isinstance(x, TensorBase)
                 else x for x in inputs)


@contextlib.contextmanager
def _random_state(state):
    """The generator at ``state`` inside, and back where it was after (``state`` None:
    untouched)."""
    if state is None:
        yield
        return
    current = get_rng_state()
    set_rng_state(state)
    try:
        yield
    finally:
        set_rng_state(current)


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, **kwargs):
    """``function(*args, **kwargs)``, its intermediate results recomputed in backward
    instead of kept (see the module docstring).  ``preserve_rng_state`` (keyword, default
    True): the recomputation draws the same random numbers as the forward.  ``debug`` and
    ``early_stop`` are accepted; the recomputation always runs the whole function."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    if use_reentrant:
        if context_fn is not noop_context_fn or debug:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return CheckpointFunction.apply(function, preserve, *args)
    return _checkpoint_without_reentrant(function, preserve, context_fn,
                                         determinism_check == "default", args, kwargs)


class CheckpointFunction(Function):
    """The reentrant variant: one node whose backward reruns the function with recording
    and runs backward through it."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng_state = get_rng_state() if preserve_rng_state else None
        ctx.arguments = [None if isinstance(a, TensorBase) else a for a in args]
        ctx.tensor_positions = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]
        ctx.save_for_backward(*(args[i] for i in ctx.tensor_positions))
        with no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        if not engine.is_checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, microtensor.utils.checkpoint is incompatible with "
                ".grad() or passing an `inputs` parameter to .backward(). To resolve this "
                "error, you can either set use_reentrant=False, or call .backward() without "
                "passing the `inputs` argument.")
        inputs = list(ctx.arguments)
        for i, tensor in zip(ctx.tensor_positions, ctx.saved_tensors):
            inputs[i] = tensor.detach().requires_grad_(tensor.requires_grad)
        with _random_state(ctx.rng_state), enable_grad():
            outputs = ctx.run_function(*inputs)
        if isinstance(outputs, TensorBase):
            outputs = (outputs,)
        pairs = [(out, g) for out, g in zip(outputs, grads)
                 if isinstance(out, TensorBase) and out.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        engine.backward([out for out, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(x.grad if isinstance(x, TensorBase) else None
                                    for x in inputs)


class _Recomputation:
    """What one non-reentrant checkpoint call shares between its saved-tensor hooks: the
    function and its inputs, and the tensors the recomputation saved, by position."""

    def __init__(self, function, args, kwargs, rng_state, context, check):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng_state, self.context, self.check = rng_state, context, check
        self.forward_metadata = []      # (sizes, dtype, device) of each saved tensor
        self.recomputed = None

    def pack(self, tensor):
        self.forward_metadata.append((tensor.shape, tensor.dtype, tensor.device))
        return _Position(self, len(self.forward_metadata) - 1)

    def unpack(self, position):
        if self.recomputed is None:
            self._recompute()
        if position.index >= len(self.recomputed):
            raise CheckpointError(
                f"microtensor.utils.checkpoint: the recomputation saved "
                f"{len(self.recomputed)} tensors, fewer than the forward pass "
                f"({len(self.forward_metadata)}): the function did not do the same "
                f"operations again (does it depend on global state?)")
        return self.recomputed[position.index]

    def _recompute(self):
        saved = []

        def keep(tensor):
            saved.append(tensor.detach())
            return None

        def refuse(_):
            raise CheckpointError("microtensor.utils.checkpoint: a tensor saved by the "
                                  "recomputation was unpacked")
        with _random_state(self.rng_state), enable_grad(), self.context, \
                saved_tensors_hooks(keep, refuse):
            self.function(*self.args, **self.kwargs)
        if self.check:
            recomputed = [(t.shape, t.dtype, t.device) for t in saved]
            if recomputed[:len(self.forward_metadata)] != self.forward_metadata:
                differing = [f"tensor at position {i}:\nsaved metadata: {a}\nrecomputed "
                             f"metadata: {b}\n" for i, (a, b) in
                             enumerate(zip(self.forward_metadata, recomputed)) if a != b]
                raise CheckpointError(
                    "microtensor.utils.checkpoint: Recomputed values for the following "
                    "tensors have different metadata than during the forward pass.\n"
                    + "".join(differing))
        self.recomputed = saved


class _Position:
    """What a checkpointed node keeps instead of a saved tensor."""

    __slots__ = ("recomputation", "index")

    def __init__(self, recomputation, index):
        self.recomputation, self.index = recomputation, index


def _checkpoint_without_reentrant(function, preserve, context_fn, check, args, kwargs):
    forward_context, recompute_context = context_fn()
    state = _Recomputation(function, args, kwargs, get_rng_state() if preserve else None,
                           recompute_context, check)
    with forward_context, saved_tensors_hooks(state.pack, lambda p: p.recomputation.unpack(p)):
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """``functions`` (a ``Sequential`` or a list of modules / functions) run in order on
    ``input``, in ``segments`` checkpointed chunks, the last chunk not checkpointed (its
    results are needed at once by backward)."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())
    size = len(functions) // segments

    def run(start, end):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
