"""Recording: what happens when an op runs on tensors that require grad.

``record`` (installed into the dispatcher) runs the kernel with grad mode off, builds an
``OpNode`` holding what the derivative asked to save, and makes the node the outputs'
``grad_fn``.  In-place ops additionally *rebase history*: the modified tensor gets the
new node as its ``grad_fn``; if it is a view, its base gets a ``CopySlices`` node instead
and the view's ``grad_fn`` is regenerated from the base.
"""
import weakref

from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import state as grad_state
from microtensor.autograd.graph import (AccumulateGrad, AsStridedBackward0, CopySlices, OpNode,
                                        SavedTensor)
from microtensor.ops import dispatch

_META = {
    "_shape": lambda t: tuple(t._sizes),
    "_strides": lambda t: tuple(t._strides),
    "_offset": lambda t: t._offset,
    "_dtype": lambda t: t._dtype,
    "_device": lambda t: t.device,
}


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
                tensor._grad_fn = AsStridedBackward0(base, tensor, gradient_edge(base))
                tensor._output_nr = 0
                tensor._requires_grad = True
            tensor._view_info = base._grad_fn
    return tensor._grad_fn


def gradient_edge(tensor):
    """Where a gradient for ``tensor`` must be sent: ``(node, input_nr)`` or (None, 0)."""
    fn = current_grad_fn(tensor)
    if fn is not None:
        return fn, tensor._output_nr
    if tensor._requires_grad:
        return grad_accumulator(tensor), 0
    if tensor._is_diff_view and tensor._base.requires_grad:
        return gradient_edge(tensor._base)
    return None, 0


def _save(op, bound, outputs):
    saved = {}
    for name in op.saved_names:
        if name == "result":
            if len(outputs) == 1:
                saved[name] = SavedTensor(outputs[0], is_output=True)
            else:
                saved[name] = tuple(SavedTensor(o, True, i) if isinstance(o, TensorBase) else o
                                    for i, o in enumerate(outputs))
            continue
        if name not in bound:
            for suffix, get in _META.items():
                if name.endswith(suffix) and name[:-len(suffix)] in bound:
                    value = bound[name[:-len(suffix)]]
                    saved[name] = get(value) if isinstance(value, TensorBase) else None
                    break
            else:
                raise TypeError(f"derivative of {op.name} asks for unknown value '{name}'")
            continue
        value = bound[name]
        if isinstance(value, TensorBase):
            saved[name] = SavedTensor(value)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], TensorBase):
            saved[name] = [SavedTensor(v) for v in value]
        else:
            saved[name] = value
    return saved


def _edges(op, bound):
    """Edges, per-input slot sizes and input metadata for the op's differentiable inputs."""
    edges, slots, metas = [], [], []
    for name in op.inputs:
        value = bound.get(name)
        if isinstance(value, TensorBase):
            edges.append(gradient_edge(value))
            metas.append((value._sizes, value._dtype, value.device))
            slots.append(1)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, TensorBase) for v in value):
            for v in value:
                edges.append(gradient_edge(v))
                metas.append((v._sizes, v._dtype, v.device))
            slots.append(len(value))
        else:
            slots.append(0)
    return edges, slots, metas


def _attach(outputs, node):
    for i, out in enumerate(outputs):
        if isinstance(out, TensorBase) and out._dtype.is_floating_point:
            out._grad_fn = node
            out._output_nr = i
            out._requires_grad = True


def record(op, args, kwargs):
    if op.kind == "inplace":
        return record_inplace(op, args, kwargs)
    bound = op.bind(args, kwargs)
    prev = grad_state.enabled
    grad_state.enabled = False
    try:
        result = dispatch.run_kernel(op, args, kwargs)
    finally:
        grad_state.enabled = prev
    outputs = result if isinstance(result, tuple) else (result,)
    edges, slots, metas = _edges(op, bound)
    node = OpNode(op, _save(op, bound, outputs), edges, slots, metas, len(outputs))
    _attach(outputs, node)
    if op.kind == "view":
        for out in outputs:
            out._is_diff_view = True
            out._view_info = out._base._grad_fn
            if len(outputs) > 1:
                out._multi_output_view = op.name
    return result


def _check_inplace(tensor):
    if tensor._is_diff_view:
        base = tensor._base
        if base._grad_fn is None and base._requires_grad:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.")
        origin = getattr(tensor, "_multi_output_view", None)
        if origin is not None:
            raise RuntimeError(
                f"Output {tensor._output_nr} of {origin.capitalize()}Backward0 is a view and is "
                "being modified inplace. This view is the output of a function that returns "
                "multiple views. Such functions do not allow the output views to be modified "
                "inplace. You should replace the inplace operation by an out-of-place one.")
    elif tensor._grad_fn is None and tensor._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")


def record_inplace(op, args, kwargs):
    self = args[0]
    _check_inplace(self)
    bound = op.bind(args, kwargs)
    base_op = op.inplace_of or op
    needs_old_self = "self" in base_op.saved_names
    prev = grad_state.enabled
    grad_state.enabled = False
    try:
        if needs_old_self:
            bound["self"] = self.clone()
        edges, slots, metas = _edges(base_op, bound if not needs_old_self else
                                     dict(bound, self=self))
        result = dispatch.run_kernel(op, args, kwargs)
    finally:
        grad_state.enabled = prev
    node = OpNode(op, _save(base_op, bound, (self,)), edges, slots, metas, 1)
    if self._is_diff_view:
        base = self._base
        copy_slices = CopySlices(base, self, node, gradient_edge(base))
        base._grad_fn = copy_slices
        base._output_nr = 0
        base._requires_grad = True
        current_grad_fn(self)
    else:
        self._grad_fn = node
        self._output_nr = 0
        self._requires_grad = True
    return result


dispatch.record = record
