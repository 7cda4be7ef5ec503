"""Recording: what happens when an op runs on tensors that require grad.

``record`` (installed into the dispatcher) runs the kernel with grad mode off, builds an
``OpNode`` holding what the derivative asked to save, and makes the node the outputs'
``grad_fn``.  In-place ops additionally *rebase history* (``rebase_history``): the
modified tensor gets the new node as its ``grad_fn``; if it is a view, its base gets a
``CopySlices`` node instead and the view's ``grad_fn`` is regenerated from the base.
"""
import weakref

from microtensor._C.tensor import TensorBase, set_grad_enabled
from microtensor.autograd.graph import (AccumulateGrad, AsStridedBackward0, CopySlices, Geometry,
                                        OpNode, SavedInplaceViewOutput, SavedTensor)
from microtensor.ops import dispatch
from microtensor.ops.registry import REGISTRY

_NONE_EDGE = (None, 0)


def grad_accumulator(tensor):
    """The (single, shared) AccumulateGrad node of a leaf that requires grad."""
    ref = tensor._grad_accumulator
    acc = ref() if ref is not None else None
    if acc is None:
        acc = AccumulateGrad(tensor)
        tensor._grad_accumulator = weakref.ref(acc)
    return acc


def current_grad_fn(tensor):
    """``tensor.grad_fn``, first regenerating it if ``tensor`` is a view whose base was
    modified in place since the view's ``grad_fn`` was made."""
    if tensor._is_diff_view:
        base = tensor._base
        if base._grad_fn is not tensor._view_info:
            if base._grad_fn is not None:
                tensor._grad_fn = AsStridedBackward0(Geometry(base), Geometry(tensor),
                                                     gradient_edge(base))
                tensor._output_nr = 0
                tensor._requires_grad = True
            tensor._view_info = base._grad_fn
    return tensor._grad_fn


def gradient_edge(tensor):
    """Where a gradient for ``tensor`` must be sent: ``(node, input_nr)`` or (None, 0)."""
    fn = current_grad_fn(tensor) if tensor._is_diff_view else tensor._grad_fn
    if fn is not None:
        return fn, tensor._output_nr
    if tensor._requires_grad:
        return grad_accumulator(tensor), 0
    if tensor._is_diff_view and tensor._base.requires_grad:
        return gradient_edge(tensor._base)
    return _NONE_EDGE


# ------------------------------------------------------------------ what a node keeps

def _save(op, bound, outputs):
    """The values ``op``'s derivative asks for (see ``Op.saved_plan``); ``outputs`` None:
    all but ``result`` (an in-place op saves its inputs before it runs)."""
    saved = {}
    for name, source, read in op.saved_plan:
        if source == "argument":
            if read is not None:
                partner = bound.get(read)
                if not (isinstance(partner, TensorBase) and partner.requires_grad):
                    saved[name] = None
                    continue
            value = bound[name]
            if isinstance(value, TensorBase):
                saved[name] = SavedTensor(value)
            elif isinstance(value, (list, tuple)) and any(isinstance(v, TensorBase)
                                                           for v in value):
                saved[name] = [SavedTensor(v) if isinstance(v, TensorBase) else v
                               for v in value]
            else:
                saved[name] = value
        elif source == "meta":
            value = bound[read[0]]
            saved[name] = read[1](value) if isinstance(value, TensorBase) else None
        elif outputs is not None:
            if read is not None:
                saved[name] = SavedTensor(outputs[read], True, read)
            elif len(outputs) == 1:
                saved[name] = SavedTensor(outputs[0], True)
            else:
                saved[name] = [SavedTensor(o, True, i) if isinstance(o, TensorBase) else o
                               for i, o in enumerate(outputs)]
    return saved


def _edges(op, bound):
    """Edges and input metadata for the op's differentiable inputs, and ``slots``: how
    many edges each input has (0 for a non-tensor, n for a list of n tensors), or None
    when every input is one tensor."""
    edges, metas, slots = [], [], []
    one_each = True
    for name in op.inputs:
        value = bound.get(name)
        if isinstance(value, TensorBase):
            edges.append(gradient_edge(value))
            metas.append((value._sizes, value._dtype))
            slots.append(1)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, TensorBase) for v in value):
            for v in value:
                edges.append(gradient_edge(v))
                metas.append((v._sizes, v._dtype))
            slots.append(len(value))
            one_each = False
        else:
            slots.append(0)
            one_each = False
    return edges, None if one_each else slots, metas


# ------------------------------------------------------------------ recording

def record(op, args, kwargs):
    if op.kind == "inplace":
        return record_inplace(op, args, kwargs)
    set_grad_enabled(False)
    try:
        result = dispatch.run_kernel(op, args, kwargs)
    finally:
        set_grad_enabled(True)
    return attach_node(op, args, kwargs, result)


def record_computed(name, a, b, result):
    """``record`` for ``a <op> b`` whose result the core's C fast path already computed."""
    return attach_node(REGISTRY[name], (a, b), None, result)


def attach_node(op, args, kwargs, result):
    """Make an ``OpNode`` for ``op``'s call on ``args`` the ``grad_fn`` of its outputs."""
    bound = op.bind(args, kwargs)
    outputs = result if type(result) is tuple else (result,)
    edges, slots, metas = _edges(op, bound)
    node = OpNode(op, _save(op, bound, outputs), edges, slots, metas, len(outputs))
    for i, out in enumerate(outputs):
        if isinstance(out, TensorBase) and out._dtype.is_floating_point:
            out._grad_fn = node
            out._output_nr = i
            out._requires_grad = True
    if op.kind == "view":
        for out in outputs:
            out._is_diff_view = True
            out._view_info = out._base._grad_fn
            if len(outputs) > 1:
                out._multi_output_view = node.name()
    return result


NO_GRAD_VIEW_ERROR = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
    "can clarify your code by moving both the view and the inplace either both inside the "
    "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
    "want the inplace to be tracked).")


def check_inplace(tensor):
    """PyTorch's refusals for an in-place op that autograd would have to record."""
    if tensor._is_diff_view:
        origin = getattr(tensor, "_multi_output_view", None)
        if origin is not None:
            raise RuntimeError(
                f"Output {tensor._output_nr} of {origin} is a view and is being modified "
                "inplace. This view is the output of a function that returns multiple views. "
                "Such functions do not allow the output views to be modified inplace. You "
                "should replace the inplace operation by an out-of-place one.")
        base = tensor._base
        if base._grad_fn is None and base._requires_grad:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.")
    elif tensor._base is not None:
        raise RuntimeError(NO_GRAD_VIEW_ERROR)
    elif tensor._grad_fn is None and tensor._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def rebase_history(tensor, node):
    """Make ``node`` (whose output 0 is ``tensor``'s new value) the producer of ``tensor``.

    For a view, the base gets ``CopySlices`` (base gradient = incoming gradient with the
    view's region replaced by ``node``'s gradient) and the view's ``grad_fn`` is then
    regenerated from the base, as are sibling views' when next asked for.
    """
    if tensor._is_diff_view:
        base = tensor._base
        copy_slices = CopySlices(base, tensor, node, gradient_edge(base))
        base._grad_fn = copy_slices
        base._output_nr = 0
        base._requires_grad = True
        current_grad_fn(tensor)
    else:
        tensor._grad_fn = node
        tensor._output_nr = 0
        tensor._requires_grad = True


def record_inplace(op, args, kwargs):
    self = args[0]
    check_inplace(self)
    bound = op.bind(args, kwargs)
    base_op = op.inplace_of or op
    edges, slots, metas = _edges(base_op, bound)
    if base_op.saves_self:
        # recorded, so that a double backward differentiates through the old value too
        bound["self"] = self.clone()
    saved = _save(base_op, bound, None)
    set_grad_enabled(False)
    try:
        result = dispatch.run_kernel(op, args, kwargs)
    finally:
        set_grad_enabled(True)
    node = OpNode(op, saved, edges, slots, metas, 1)
    rebase_history(self, node)
    if "result" in base_op.saved_names:
        saved["result"] = SavedInplaceViewOutput(self, self._base._grad_fn) \
            if self._is_diff_view else SavedTensor(self, True)
    return result


dispatch.record = record
