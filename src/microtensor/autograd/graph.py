"""The autograd graph's Python nodes: the two that in-place writes into views create.

``saved_tensors_hooks`` is the context manager for packing saved tensors; ``save_on_cpu``
is the one that keeps them on the CPU.

The graph's data structures (``Node`` with its edges and hooks, ``AccumulateGrad``,
``SavedTensor``, ``Geometry``) and ``OpNode``, which runs a registered op's derivative,
are in the Cython core (``microtensor._C.autograd``).  ``CopySlices`` and
``AsStridedBackward0`` here subclass ``Node`` (see ``autograd.recording``).

``to_text`` and ``to_dot`` draw the graph behind a tensor, for readers.
"""
import weakref

from microtensor._C.autograd import (RELEASED_ERROR, AccumulateGrad, Geometry, Node, OpNode,
                                     SavedTensor, gradient_edge, pop_saved_tensors_hooks,
                                     push_saved_tensors_hooks, validate_outputs)
from microtensor._C.meta import contiguous_format

__all__ = ["AccumulateGrad", "AsStridedBackward0", "CopySlices", "Geometry", "Node", "OpNode",
           "RELEASED_ERROR", "SavedInplaceViewOutput", "SavedTensor", "saved_tensors_hooks",
           "to_dot", "to_text"]
__all__ += ["save_on_cpu"]


class saved_tensors_hooks:
    """Context manager: while it is active, every tensor an op or a ``Function`` saves for
    backward is given to ``pack_hook(tensor)`` and what that returns is kept instead;
    backward gets the tensor back from ``unpack_hook(packed)``.  Nested contexts: the
    innermost pair applies.  Per thread, as in PyTorch.

    The unpacked tensor must have the values of the saved one (it may be another tensor:
    a copy moved elsewhere and back, say); in-place changes after saving are not
    detected under hooks."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        push_saved_tensors_hooks(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc):
        pop_saved_tensors_hooks()



class SavedInplaceViewOutput(SavedTensor):
    """The result of an in-place op on a view.  Unpacked for a double backward, it is the
    view read back out of its base, whose producer is the ``CopySlices`` node (held
    weakly: CopySlices holds the op's node, which holds this)."""

    __slots__ = ("copy_slices", "base", "view")

    def __init__(self, view, copy_slices):
        super().__init__(view, is_output=True)
        self.copy_slices = weakref.ref(copy_slices)
        self.base = Geometry(view._base)
        self.view = Geometry(view)

    def _producer(self, node):
        copy_slices = self.copy_slices()
        if copy_slices is None:
            raise RuntimeError(RELEASED_ERROR)
        return AsStridedBackward0(self.base, self.view, (copy_slices, 0))


class CopySlices(Node):
    """The base's new ``grad_fn`` after an in-place op ``fn`` wrote into a view of it.

    Backward: the base's gradient is the incoming gradient with the view's region
    replaced by ``fn``'s gradient for the view's old value.

    Why ``fn`` gets a clone of the region (``grad_slice``) rather than the region itself:
    right after ``fn`` runs, ``grad_slice.copy_(...)`` overwrites the region, and ``result``
    (the base's gradient, holding the region) flows on to be summed into.  But ``fn`` may
    keep its input: a derivative may return its incoming gradient as is (``add``'s does,
    for ``self`` and ``other`` both), which would make ``other``'s gradient an alias of
    the base's, changed by every later write; and with ``create_graph`` ``fn``'s own
    recording may save it for the second derivative, which the overwrite would
    invalidate.  A clone is memory no one else writes.

    Why ``contiguous_format`` and the other batch-safe calls: buffers come from
    ``grad.new_empty_strided`` and the clone is contiguous per sample, so that under vmap
    (batched gradients) the node runs unchanged: each sample gets exactly the strides
    asked for, and the batch dims stay outermost (see the batching rules of
    ``new_empty_strided``, ``as_strided`` and ``clone``).
    """

    def __init__(self, base, view, fn, base_edge):
        super().__init__((base_edge,) + fn.next_functions[1:])
        self.base = Geometry(base)
        self.view = Geometry(view)
        self.fn = fn

    def apply(self, grads):
        grad = grads[0]
        if grad is None:
            return (None,) * len(self.next_functions)
        if self.fn is None:
            raise RuntimeError(RELEASED_ERROR)
        result = grad.new_empty_strided(self.base.sizes, self.base.strides)
        result.copy_(grad)
        grad_slice = result.as_strided(self.view.sizes, self.view.strides,
                                       self.view.offset - self.base.offset)
        fn_grads = validate_outputs(self.fn, self.fn.apply(
            (grad_slice.clone(memory_format=contiguous_format),)))
        if fn_grads[0] is not None:
            grad_slice.copy_(fn_grads[0])
        else:
            grad_slice.zero_()
        return (result,) + tuple(fn_grads[1:])

    def release(self):
        if self.fn is not None:
            self.fn.release()


class AsStridedBackward0(Node):
    """A view's ``grad_fn`` regenerated after its base changed in place: the view read
    back out of the base's gradient with ``as_strided``."""

    def __init__(self, base, view, base_edge):
        """``base`` and ``view``: their ``Geometry``."""
        super().__init__((base_edge,))
        self.base = base
        self.view = view

    def apply(self, grads):
        from microtensor.ops.view import as_strided_backward
        grad = grads[0]
        return (as_strided_backward(grad, self.base.sizes, self.base.strides, 0,
                                    self.view.sizes, self.view.strides,
                                    self.view.offset - self.base.offset),)


# --------------------------------------------------------------------------- printing
# ``to_text`` and ``to_dot`` draw the graph behind a tensor (``python -m microtensor
# explain --graph``): node names as PyTorch's, what each node saved and at which version,
# and for ``CopySlices`` the view whose gradient it carves out of the base's.

def _root_node(root):
    """The node a tensor's gradient goes to first (``root`` may be a node already)."""
    if isinstance(root, Node):
        return root, 0
    node, nr = gradient_edge(root)
    if node is None:
        raise ValueError("the tensor does not require grad: it has no autograd graph")
    return node, nr


def _tensor_text(t):
    return f"tensor {tuple(t._sizes)} {t._dtype.name}"


def _saved_text(value):
    if isinstance(value, SavedTensor):
        if value.released:
            return "freed (by a backward pass without retain_graph)"
        if value.hooked:
            return "packed by a saved_tensors_hooks pack_hook"
        now = value.data._version
        changed = f"; now at version {now}: modified in place" if now != value.version else ""
        return f"{_tensor_text(value.data)}, saved at version {value.version}{changed}"
    if isinstance(value, list):
        return "[" + ", ".join(_saved_text(v) for v in value) + "]"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _geometry_text(g):
    return f"sizes {g.sizes}, strides {g.strides}, offset {g.offset}"


def _details(node):
    """Lines that say what ``node`` holds for backward."""
    if isinstance(node, AccumulateGrad):
        variable = node.variable
        grad = ", .grad set" if variable._grad is not None else ""
        return [f"leaf {_tensor_text(variable)}{grad}"]
    if isinstance(node, OpNode):
        plan = node.op.derivative.saved_plan
        return [f"{name}: not saved (the gradient that reads it is not needed)"
                if value is None and needed_by is not None
                else f"saved {name}: {_saved_text(value)}"
                for (name, _, _, needed_by), value in zip(plan, node.saved)]
    if isinstance(node, (CopySlices, AsStridedBackward0)):
        lines = [f"view: {_geometry_text(node.view)}", f"base: {_geometry_text(node.base)}"]
        if isinstance(node, CopySlices) and node.fn is not None:
            lines.append(f"fn: {node.fn.name()} (the in-place op, run on the view's gradient)")
            lines += ["  " + line for line in _details(node.fn)]
        return lines
    saved = getattr(node, "_saved", None)     # a Function's node
    return [f"saved: {_saved_text(v)}" for v in saved or ()]


def _walk(start):
    """Every node reachable from ``start``, and how many edges point at each."""
    incoming, order, stack = {start: 1}, [start], [start]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None:
                continue
            if nxt not in incoming:
                incoming[nxt] = 0
                order.append(nxt)
                stack.append(nxt)
            incoming[nxt] += 1
    return order, incoming


def to_text(root):
    """The graph behind tensor ``root`` (or from node ``root``) as an indented tree.

    Edges to inputs that need no gradient are left out; a node reached more than once is
    drawn the first time with a ``[#k]`` mark and referred to by it afterwards.
    """
    start, nr = _root_node(root)
    _, incoming = _walk(start)
    marks, lines = {}, []

    def draw(node, nr, prefix, child_prefix):
        output = f" (output {nr})" if nr or node.num_outputs > 1 else ""
        if node in marks:
            lines.append(f"{prefix}{node.name()}{output} -> see [#{marks[node]}] above")
            return
        mark = ""
        if incoming[node] > 1:
            marks[node] = len(marks) + 1
            mark = f" [#{marks[node]}]"
        lines.append(f"{prefix}{node.name()}{output}{mark}")
        edges = [(n, k) for n, k in node.next_functions if n is not None]
        bar = "| " if edges else "  "
        lines.extend(f"{child_prefix}{bar}{line}" for line in _details(node))
        for i, (nxt, k) in enumerate(edges):
            last = i == len(edges) - 1
            draw(nxt, k, child_prefix + ("`-- " if last else "|-- "),
                 child_prefix + ("    " if last else "|   "))

    draw(start, nr, "", "")
    return "\n".join(lines)


def _dot_label(lines):
    text = "\n".join(lines)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(root):
    """The graph behind tensor ``root`` (or from node ``root``) in Graphviz's DOT
    language: one box per node (with what it saved), an edge from each node to the nodes
    its gradients flow to, and for ``CopySlices`` a dashed edge to the in-place op's node
    it runs."""
    start, nr = _root_node(root)
    order, _ = _walk(start)
    ids = {node: f"n{i}" for i, node in enumerate(order)}
    out = ["digraph autograd {",
           '  node [shape=box, style=filled, fillcolor="#ffffff", fontname="monospace", '
           "fontsize=10];"]
    if not isinstance(root, Node):
        out.append(f'  output [label={_dot_label([_tensor_text(root)])}, fillcolor="#d9ead3"];')
        label = f' [label="{nr}"]' if nr or start.num_outputs > 1 else ""
        out.append(f"  output -> {ids[start]}{label};")
    for node in order:
        color = ', fillcolor="#cfe2f3"' if isinstance(node, AccumulateGrad) else ""
        out.append(f"  {ids[node]} [label={_dot_label([node.name()] + _details(node))}{color}];")
        for nxt, k in node.next_functions:
            if nxt is not None:
                label = f' [label="{k}"]' if k or nxt.num_outputs > 1 else ""
                out.append(f"  {ids[node]} -> {ids[nxt]}{label};")
        if isinstance(node, CopySlices) and node.fn is not None:
            fn_id = ids[node] + "_fn"
            out.append(f"  {fn_id} [label={_dot_label([node.fn.name()])}, style=dashed];")
            out.append(f'  {ids[node]} -> {fn_id} [style=dashed, label="fn"];')
    out.append("}")
    return "\n".join(out) + "\n"


class save_on_cpu(saved_tensors_hooks):
    """Context manager: the tensors saved for backward are kept on the CPU and moved back
    to their device when backward needs them, as PyTorch's.  A CPU tensor is kept as it
    is; with ``pin_memory=True`` every saved tensor is first copied into a new contiguous
    CPU tensor (pinned when ``device_type``'s backend, ``microtensor.<device_type>``, is
    available), and the copies travel back asynchronously."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        import microtensor
        backend = getattr(microtensor, device_type, microtensor.cuda)

        def to_cpu(tensor):
            if not pin_memory:
                return tensor.device, tensor.cpu()
            pinned = backend.is_available() and not tensor.is_sparse
            copy = microtensor.empty(tensor.size(), dtype=tensor.dtype, pin_memory=pinned)
            copy.copy_(tensor, non_blocking=pinned)
            return tensor.device, copy

        def back_to_device(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(to_cpu, back_to_device)
