"""The backward engine: runs the graph from some outputs back to leaves or chosen inputs.

Nodes run in dependency order (a node runs once every node that feeds it gradient has
run; ties go to the most recently created node, as in PyTorch).  Incoming gradients for
the same node input are summed.  ``validate_outputs`` is the single place where a
gradient is summed back to the shape of a broadcast input and cast to the input's dtype.
With ``create_graph`` the pass runs in grad mode, so it is itself recorded.
"""
import heapq

from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import state as grad_state
from microtensor.autograd.graph import AccumulateGrad, OpNode
from microtensor.autograd.recording import current_grad_fn, gradient_edge


def validate_outputs(node, grads):
    """Bring each gradient ``node`` produced to the shape and dtype of its input."""
    metas = getattr(node, "input_meta", None)
    if metas is None:
        return grads
    fixed = list(grads)
    for i, (g, meta) in enumerate(zip(grads, metas)):
        if g is None:
            continue
        sizes, dtype, _ = meta
        if tuple(g.shape) != tuple(sizes):
            try:
                g = g.sum_to_size(sizes)
            except RuntimeError:
                raise RuntimeError(f"Function {node.name()} returned an invalid gradient at "
                                   f"index {i} - got {list(g.shape)} but expected shape "
                                   f"compatible with {list(sizes)}") from None
        if g.dtype is not dtype:
            g = g.to(dtype)
        fixed[i] = g
    return tuple(fixed)


def _accumulate(buffer, slot, grad):
    existing = buffer[slot]
    buffer[slot] = grad if existing is None else existing + grad


def _collect(roots):
    """Number of incoming edges of every node reachable from ``roots``."""
    dependencies = {}
    seen = set()
    stack = [node for node, _ in roots if node is not None]
    for node in stack:
        seen.add(node)
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            dependencies[nxt] = dependencies.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return dependencies, seen


def _needed(nodes, targets):
    """Nodes from which some target node can be reached (only those need to run)."""
    needed = {}

    def reaches(node):
        if node in needed:
            return needed[node]
        needed[node] = False
        stack = [(node, iter(node.next_functions))]
        # iterative DFS: a node is needed if it is a target or any successor is needed
        while stack:
            current, it = stack[-1]
            advanced = False
            for nxt, _ in it:
                if nxt is None:
                    continue
                if nxt not in needed:
                    needed[nxt] = False
                    stack.append((nxt, iter(nxt.next_functions)))
                    advanced = True
                    break
                if needed[nxt]:
                    needed[current] = True
            if not advanced:
                stack.pop()
                if current in targets:
                    needed[current] = True
                if stack and needed[current]:
                    needed[stack[-1][0]] = True
        return needed[node]
    for node in nodes:
        reaches(node)
    return needed


def run_backward(roots, root_grads, *, retain_graph, create_graph, capture=None,
                 accumulate=True, accumulate_only=None):
    """Execute the graph.

    ``roots``: edges ``(node, output_nr)`` of the outputs; ``root_grads``: their gradients.
    ``capture``: edges whose incoming gradient should be returned (``autograd.grad``), in
    which case nothing accumulates into ``.grad`` and only nodes leading to them run.
    ``accumulate_only``: for ``backward(inputs=...)``, the AccumulateGrad nodes allowed to
    accumulate.
    """
    dependencies, nodes = _collect(roots)
    if capture:
        accumulate = False
    captured = [None] * len(capture) if capture else None
    capture_at = {}
    if capture:
        for i, edge in enumerate(capture):
            capture_at.setdefault(edge, []).append(i)
        needed = _needed(nodes, {node for node, _ in capture})
    elif accumulate_only is not None:
        needed = _needed(nodes, accumulate_only)
    else:
        needed = None

    buffers = {}
    ready = []
    for (node, nr), grad in zip(roots, root_grads):
        if node is None:
            continue
        buffer = buffers.setdefault(node, [None] * _num_inputs(node))
        _accumulate(buffer, nr, grad)
    for node in buffers:
        if dependencies.get(node, 0) == 0:
            heapq.heappush(ready, (-node.sequence_nr, id(node), node))

    prev = grad_state.enabled
    grad_state.enabled = create_graph
    try:
        while ready:
            _, _, node = heapq.heappop(ready)
            grads = buffers.pop(node)
            grads = _run_pre_hooks(node, grads)
            if capture_at:
                for nr, g in enumerate(grads):
                    for i in capture_at.get((node, nr), ()):
                        captured[i] = g
            if needed is not None and not needed.get(node, False):
                continue
            if isinstance(node, AccumulateGrad):
                if accumulate and (accumulate_only is None or node in accumulate_only):
                    _accumulate_into_leaf(node.variable, grads[0], create_graph)
                continue
            if all(g is None for g in grads):
                outputs = (None,) * len(node.next_functions)
            else:
                outputs = validate_outputs(node, node.apply(tuple(grads)))
            for hook in list(node._post_hooks.values()):
                hook(outputs, grads)
            if not retain_graph:
                node.release()
            for (nxt, nr), g in zip(node.next_functions, outputs):
                if nxt is None:
                    continue
                buffer = buffers.get(nxt)
                if buffer is None:
                    buffer = buffers[nxt] = [None] * _num_inputs(nxt)
                if g is not None:
                    _accumulate(buffer, nr, g)
                dependencies[nxt] -= 1
                if dependencies[nxt] == 0:
                    heapq.heappush(ready, (-nxt.sequence_nr, id(nxt), nxt))
    finally:
        grad_state.enabled = prev
    return captured


def _num_inputs(node):
    if isinstance(node, OpNode):
        return node.num_outputs
    return getattr(node, "num_outputs", 1)


def _run_pre_hooks(node, grads):
    if not node._pre_hooks:
        return grads
    grads = list(grads)
    for nr, hooks in node._pre_hooks.items():
        for hook in list(hooks.values()):
            if nr < len(grads) and grads[nr] is not None:
                result = hook(grads[nr])
                if result is not None:
                    grads[nr] = result
    return grads


def _accumulate_into_leaf(variable, grad, create_graph):
    if grad is None:
        return
    if not create_graph:
        grad = grad.detach()
    if variable._grad is None:
        # keep the layout of the parameter, as PyTorch does (a fresh, non-aliasing grad)
        variable._grad = grad.clone() if not create_graph and grad._base is not None else grad
    elif create_graph:
        variable._grad = variable._grad + grad
    else:
        variable._grad.add_(grad)


# --------------------------------------------------------------------------- public API

def _as_tuple(x):
    if x is None:
        return ()
    if isinstance(x, TensorBase):
        return (x,)
    return tuple(x)


def _make_grads(outputs, grad_outputs, is_grads_batched=False):
    from microtensor.ops.factory import ones_like
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.requires_grad:
                if out._numel != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if not out._dtype.is_floating_point:
                    raise RuntimeError("grad can be implicitly created only for real scalar "
                                       f"outputs but got {out.dtype}")
                g = ones_like(out, memory_format=_contiguous())
        elif isinstance(g, TensorBase):
            shape = tuple(g.shape[1:]) if is_grads_batched else tuple(g.shape)
            if shape != tuple(out.shape):
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
        grads.append(g)
    return grads


def _contiguous():
    from microtensor._C.meta import contiguous_format
    return contiguous_format


def _root_edges(outputs):
    roots = []
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
        roots.append(gradient_edge(out))
    return roots


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves."""
    _refuse_inside_transforms("backward")
    outputs = _as_tuple(tensors)
    grad_tensors = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(outputs)
    if len(grad_tensors) != len(outputs):
        raise RuntimeError(f"got {len(grad_tensors)} tensors and {len(outputs)} gradients")
    grads = _make_grads(outputs, grad_tensors)
    roots = _root_edges(outputs)
    if retain_graph is None:
        retain_graph = create_graph
    accumulate_only = None
    if inputs is not None:
        inputs = _as_tuple(inputs)
        if not inputs:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        accumulate_only = set()
        for t in inputs:
            node, _ = gradient_edge(t)
            if node is None:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
            accumulate_only.add(node)
    run_backward(roots, grads, retain_graph=retain_graph, create_graph=create_graph,
                 accumulate_only=accumulate_only)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs`` (nothing accumulates)."""
    outputs = _as_tuple(outputs)
    single_input = isinstance(inputs, TensorBase)
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
        elif tuple(g.shape) != tuple(t.shape):
            g = g.sum_to_size(t.shape)
        out.append(g)
    return tuple(out)


# Installed by microtensor.vmap: the batched form of ``grad`` and the refusal inside vmap.
batched_grad_impl = None
transform_guard = None


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    if batched_grad_impl is None:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) needs microtensor.vmap")
    return batched_grad_impl(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)


def _refuse_inside_transforms(what, outputs=(), inputs=()):
    if transform_guard is not None:
        transform_guard(what, outputs, inputs)


__all__ = ["backward", "grad", "run_backward", "validate_outputs", "current_grad_fn"]
