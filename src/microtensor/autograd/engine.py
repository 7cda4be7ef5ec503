"""The backward engine's public API: ``backward``, ``grad`` and ``run_backward``.

The loop that runs a graph, and ``validate_outputs`` (the single place where a gradient
is summed back to the shape of a broadcast input and cast to the input's dtype), are in
the Cython core (``microtensor._C.autograd.execute``); this module checks the arguments,
seeds the root gradients and owns what reaching a leaf means (``.grad`` accumulation).
With ``create_graph`` the pass runs in grad mode, so it is itself recorded.
"""
import sys
import threading

from microtensor._C import meta
from microtensor._C.meta import contiguous_format
from microtensor._C.autograd import (accumulation_lock, execute, run_post_accumulate_grad_hooks,
                                    validate_outputs)
from microtensor._C.tensor import TensorBase, empty_contiguous
from microtensor._tensor import Tensor
from microtensor.autograd.recording import gradient_edge
from microtensor.ops.factory import fill, ones_like


_capturing = threading.local()     # .depth: passes of this thread that capture gradients


def run_backward(roots, root_grads, *, retain_graph, create_graph, capture=None):
    """Execute the graph.

    ``roots``: edges ``(node, output_nr)`` of the outputs; ``root_grads``: their gradients.
    ``capture``: edges whose incoming gradient should be returned (``autograd.grad``), in
    which case nothing accumulates into ``.grad`` and only nodes leading to them run.
    """
    if capture is None:
        return execute(roots, root_grads, retain_graph, create_graph, None,
                       _accumulate_into_leaf)
    _capturing.depth = getattr(_capturing, "depth", 0) + 1
    try:
        return execute(roots, root_grads, retain_graph, create_graph, capture,
                       _accumulate_into_leaf)
    finally:
        _capturing.depth -= 1


def is_checkpoint_valid():
    """Whether a node's backward may run a backward pass of its own that accumulates into
    ``.grad`` (the reentrant checkpoint): not inside a pass that captures gradients
    (``autograd.grad``, ``backward(inputs=...)``), whose leaves must not change."""
    return getattr(_capturing, "depth", 0) == 0


def _can_steal(grad):
    """Whether ``grad`` may become a leaf's ``.grad`` as is: a fresh, dense tensor that no
    one else refers to, so that no one else can see (or write) the memory ``.grad`` will
    own.  A view qualifies when its base is referred to by the view alone
    (``sum_to_size``'s reshaped sum, for instance).

    The thresholds count the references this call path itself holds, so that anything
    above them is someone else's:

    * ``grad``, at most 4: the engine's local variable (``execute`` drops its own list of
      the node's gradients before the call), ``_accumulate_into_leaf``'s parameter, this
      function's parameter, and ``getrefcount``'s argument;
    * its storage, at most 2 (no base): the tensor's own field and ``getrefcount``'s
      argument; one more would be another tensor over the same memory;
    * with a base, at most 3 each: the base is held by the view's ``_base``, the local
      ``base`` and the argument; the storage by the base, the view and the argument.
    """
    if not grad._is_contig or sys.getrefcount(grad) > 4:
        return False
    base = grad._base
    if base is None:
        return sys.getrefcount(grad._storage) <= 2
    return sys.getrefcount(base) <= 3 and sys.getrefcount(grad._storage) <= 3


def _accumulate_into_leaf(variable, grad, create_graph):
    """``variable.grad += grad``, PyTorch's way (the engine steals a gradient in C first when
    it can: ``_C.autograd._steal_into``): the first gradient is stolen when nothing
    else refers to it (else cloned); with ``create_graph`` sums are out of place so that
    ``.grad`` stays differentiable."""
    if grad is None:
        return
    with accumulation_lock:
        if variable._grad is None:
            stealable = (create_graph or not grad._requires_grad) and _can_steal(grad) and \
                _obeys_layout(grad, variable)
            if not create_graph and grad._requires_grad:
                grad = grad.detach()
            variable._grad = grad if stealable else _clone_in_layout_of(grad, variable)
        elif create_graph or variable._grad._requires_grad:
            variable._grad = variable._grad + grad
        else:
            variable._grad.add_(grad.detach() if grad._requires_grad else grad)


def _obeys_layout(grad, variable):
    """PyTorch's layout contract for ``.grad`` (``obeys_layout_contract``): the
    parameter's strides when the parameter is dense, but on its size-1 dims, where any
    stride but 0 passes (a stride-0 size-1 dim may be a view); contiguous strides
    otherwise."""
    if meta.is_non_overlapping_and_dense(variable._sizes, variable._strides):
        for size, stride, own in zip(grad._sizes, grad._strides, variable._strides):
            if stride != own if size != 1 else stride == 0:
                return False
        return True
    return grad.is_contiguous()


def _clone_in_layout_of(grad, variable):
    if meta.is_non_overlapping_and_dense(variable._sizes, variable._strides):
        return grad.new_empty_strided(variable._sizes, variable._strides).copy_(grad)
    return grad.clone(memory_format=meta.contiguous_format)


# --------------------------------------------------------------------------- public API

def _as_tuple(x):
    if x is None:
        return ()
    if isinstance(x, TensorBase):
        return (x,)
    return tuple(x)


def _ones_like(out):
    """The implicit gradient of a scalar ``out``: a fresh contiguous one (a plain tensor
    directly, without the op's dispatch; others, such as a vmap's batched tensor, through
    ``ones_like``)."""
    if type(out) is not Tensor:
        return ones_like(out, memory_format=contiguous_format)
    g = empty_contiguous(out._sizes, out._dtype, out.device)
    fill(g, 1)
    return g


def _make_grads(outputs, grad_outputs, is_grads_batched=False):
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.requires_grad:
                if out._numel != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if not out._dtype.is_floating_point:
                    raise RuntimeError("grad can be implicitly created only for real scalar "
                                       f"outputs but got {out.dtype}")
                g = _ones_like(out)
        elif isinstance(g, TensorBase):
            shape = g._sizes[1:] if is_grads_batched else g._sizes
            if shape != out._sizes:
                if is_grads_batched:
                    raise RuntimeError(
                        "If `is_grads_batched=True`, we interpret the first dimension of each "
                        "grad_output as the batch dimension. The sizes of the remaining "
                        "dimensions are expected to match the shape of corresponding output, "
                        f"but a mismatch was detected: grad_output[{i}] has a shape of "
                        f"{g.shape} and output[{i}] has a shape of {out.shape}. If you only "
                        "want some tensors in `grad_output` to be considered batched, "
                        "consider using vmap.")
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{g.shape} and output[{i}] has a shape of {out.shape}.")
        else:
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
        grads.append(g)
    return grads


def _root_edges(outputs):
    roots = []
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
        roots.append(gradient_edge(out))
    return roots


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (or of
    ``inputs`` only, which may be non-leaves)."""
    _refuse_inside_transforms("backward")
    if grad_tensors is None and inputs is None and type(tensors) is Tensor and \
            tensors._grad_fn is not None and not tensors._is_diff_view and \
            tensors._numel == 1 and tensors._dtype.is_floating_point:
        # ``loss.backward()``, every training step's call: one output with a history and
        # its implicit gradient, without the general argument handling below
        execute(((tensors._grad_fn, tensors._output_nr),), (_ones_like(tensors),),
                create_graph if retain_graph is None else retain_graph, create_graph, None,
                _accumulate_into_leaf)
        return
    outputs = _as_tuple(tensors)
    grad_tensors = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(outputs)
    if len(grad_tensors) != len(outputs):
        raise RuntimeError(f"got {len(grad_tensors)} tensors and {len(outputs)} gradients")
    grads = _make_grads(outputs, grad_tensors)
    roots = _root_edges(outputs)
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is None:
        run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph)
        return
    inputs = _as_tuple(inputs)
    if not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    captured = run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph,
                            capture=[gradient_edge(t) for t in inputs])
    for t, g in zip(inputs, captured):
        if g is not None:
            _accumulate_into_leaf(t, g if g._sizes == t._sizes else g.sum_to_size(t._sizes),
                                  create_graph)
            run_post_accumulate_grad_hooks(t)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs`` (nothing accumulates)."""
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    if not allow_unused and materialize_grads:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    grad_outputs = _as_tuple(grad_outputs) if grad_outputs is not None \
        else (None,) * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grad_outputs)} "
                           f"grad_outputs and {len(outputs)} outputs")
    if is_grads_batched:
        _make_grads(outputs, grad_outputs, is_grads_batched=True)
        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)
    _refuse_inside_transforms("grad", outputs, inputs)
    grads = _make_grads(outputs, grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    roots = _root_edges(outputs)
    capture = [gradient_edge(t) for t in inputs]
    result = run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph,
                          capture=capture)
    out = []
    for t, g in zip(inputs, result):
        if g is None:
            if not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been "
                                   "used in the graph. Set allow_unused=True if this is the "
                                   "desired behavior.")
            if materialize_grads:
                g = t.new_zeros(t.shape)
        elif g._sizes != t._sizes:
            g = g.sum_to_size(t.shape)
        out.append(g)
    return tuple(out)


# Installed by microtensor.vmap: the batched form of ``grad`` and the refusal inside vmap.
batched_grad_impl = None
transform_guard = None


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    if batched_grad_impl is None:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) needs microtensor.vmap, "
                                  "which is not available yet")
    return batched_grad_impl(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)


def _refuse_inside_transforms(what, outputs=(), inputs=()):
    if transform_guard is not None:
        transform_guard(what, outputs, inputs)


__all__ = ["backward", "grad", "run_backward", "validate_outputs"]
