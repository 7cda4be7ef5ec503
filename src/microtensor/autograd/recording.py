"""Recording: what happens when an op runs on tensors that require grad.

The dispatcher (``_C.dispatch``) runs the kernel with grad mode off and attaches an
``OpNode`` holding what the derivative asked to save to the outputs, as their ``grad_fn``
(``_C.autograd.attach_node``).  In-place ops are recorded here, by ``record_inplace``,
which the dispatcher calls: they additionally *rebase history* (``rebase_history``): the
modified tensor gets the new node as its ``grad_fn``; if it is a view, its base gets a
``CopySlices`` node instead and the view's ``grad_fn`` is regenerated from the base.

The per-op mechanics (``attach_node``, ``gradient_edge``, ``input_edges``,
``saved_values``, ``is_needed``) are in the Cython core (``microtensor._C.autograd``); the rules that
decide which of them runs are here.
"""
from microtensor._C.autograd import (DTYPE_VIEW_INPLACE_ERROR, OpNode, SavedTensor,
                                     current_grad_fn, gradient_edge,
                                     input_edges, install_nodes, is_needed,
                                     saved_values)
from microtensor._C.dispatch import NO_GRAD_VIEW_ERROR
from microtensor._C.tensor import set_grad_enabled
from microtensor.autograd.graph import AsStridedBackward0, CopySlices, SavedInplaceViewOutput
from microtensor.ops import dispatch


# ------------------------------------------------------------------ recording

def check_inplace(tensor):
    """PyTorch's refusals for an in-place op that autograd would have to record."""
    if tensor._is_diff_view:
        origin = getattr(tensor, "_multi_output_view", None)
        if origin is not None:
            raise RuntimeError(
                f"Output {tensor._output_nr} of {origin.removesuffix('Backward0')} is a view "
                "and is being modified inplace. This view is the output of a function that "
                "returns multiple views. Such functions do not allow the output views to be "
                "modified inplace. You should replace the inplace operation by an out-of-place "
                "one.")
        base = tensor._base
        if base._grad_fn is None and base._requires_grad:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.")
        if base._dtype is not tensor._dtype:     # before the kernel writes anything
            raise RuntimeError(DTYPE_VIEW_INPLACE_ERROR)
    elif tensor._base is not None:
        raise RuntimeError(NO_GRAD_VIEW_ERROR)
    elif tensor._grad_fn is None and tensor._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def rebase_history(tensor, node, metadata_only=False):
    """Make ``node`` (whose output 0 is ``tensor``'s new value) the producer of ``tensor``.

    For a view, the base gets ``CopySlices`` (base gradient = incoming gradient with the
    view's region replaced by ``node``'s gradient) and the view's ``grad_fn`` is then
    regenerated from the base, as are sibling views' when next asked for.  A metadata
    change (``transpose_``, ``as_strided_`` ...) writes no data: a view keeps its base's
    history and takes ``node`` as its own ``grad_fn``, made from the base's current one.
    """
    if tensor._is_diff_view and metadata_only:
        tensor._grad_fn = node
        tensor._output_nr = 0
        tensor._requires_grad = True
        tensor._view_info = tensor._base._grad_fn
        return
    if tensor._is_diff_view:
        base = tensor._base
        copy_slices = CopySlices(base, tensor, node, gradient_edge(base))
        base._grad_fn = copy_slices
        base._output_nr = 0
        base._requires_grad = True
        if base._retains_grad:
            move_retain_grad_hook(base)
        current_grad_fn(tensor)
    else:
        tensor._grad_fn = node
        tensor._output_nr = 0
        tensor._requires_grad = True
    if tensor._retains_grad:
        move_retain_grad_hook(tensor)


def move_retain_grad_hook(tensor):
    """After an in-place op gave ``tensor`` a new ``grad_fn``: its ``retain_grad`` hook
    moves there, so that ``.grad`` is the gradient of the new value (PyTorch's rule; other
    hooks stay with the old value)."""
    store, old_node, old_nr = tensor._retain_grad_hook
    old_node.set_retains_grad_hook(old_nr, None)
    node = current_grad_fn(tensor)
    node.set_retains_grad_hook(tensor._output_nr, store)
    tensor._retain_grad_hook = (store, node, tensor._output_nr)


def record_inplace(op, args, kwargs):
    """Record an in-place op: its formulas' values saved before the kernel overwrites
    ``self`` (the old ``self`` copied only when a formula that will run reads it:
    ``x.mul_(2.0)`` copies nothing), then ``self``'s history rebased onto the node."""
    self = args[0]
    if self._dtype.kind < 2:
        # an integer or bool tensor is not differentiable: no history (``int_t.copy_(x)``
        # with ``x`` requiring grad), as in PyTorch
        return _unrecorded(op, args, kwargs)
    check_inplace(self)
    bound = op.bind(args, kwargs)
    derivative = op.derivative
    edges, slots, metas = input_edges(op.inputs, bound)
    if derivative.self_entry is not None and is_needed(derivative.self_entry, bound):
        # recorded, so that a double backward differentiates through the old value too
        bound["self"] = self.clone()
    saved = saved_values(derivative.saved_plan, bound, None)
    result = _unrecorded(op, args, kwargs)
    node = OpNode(op, saved, edges, slots, metas, 1)
    rebase_history(self, node, op.inplace_of is not None and op.inplace_of.kind == "view")
    if derivative.result_entry is not None and is_needed(derivative.result_entry, bound):
        node.set_saved("result", SavedInplaceViewOutput(self, self._base._grad_fn)
                       if self._is_diff_view else SavedTensor(self, True))
    return result


def _unrecorded(op, args, kwargs):
    set_grad_enabled(False)
    try:
        return dispatch.run_kernel(op, args, kwargs)
    finally:
        set_grad_enabled(True)


install_nodes(AsStridedBackward0)
dispatch.install_inplace_recording(record_inplace)
