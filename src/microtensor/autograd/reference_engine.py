"""The backward engine's loop in plain Python, to read beside the Cython one
(``microtensor._C.autograd.execute``), which does the same plus hooks, ``retain_graph``,
``create_graph`` and pruning to the nodes that lead to the requested inputs.

``grad(outputs, inputs, grad_outputs)`` gives the same gradients as
``microtensor.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True)`` for leaf
``inputs``; the tests check that they agree.
"""
import heapq

from microtensor._C.autograd import AccumulateGrad, gradient_edge, validate_outputs
from microtensor.autograd.grad_mode import no_grad


def grad(outputs, inputs, grad_outputs):
    roots = [gradient_edge(t) for t in outputs]
    # 1. how many edges point into each node: a node runs once all of them delivered
    dependencies, seen = {}, set()
    stack = [node for node, _ in roots if node is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                dependencies[nxt] = dependencies.get(nxt, 0) + 1
                stack.append(nxt)
    # 2. each node's input buffer: one slot per output of the node, gradients summed
    buffers = {}

    def deliver(node, slot, g):
        buffer = buffers.setdefault(node, [None] * node.num_outputs)
        if g is not None:
            buffer[slot] = g if buffer[slot] is None else buffer[slot] + g

    for (node, slot), g in zip(roots, grad_outputs):
        if node is not None:
            deliver(node, slot, g)
    # 3. run ready nodes, the most recently created first (as PyTorch does)
    ready = [(-node.sequence_nr, node) for node in buffers if not dependencies.get(node)]
    heapq.heapify(ready)
    reached = {}
    with no_grad():
        while ready:
            node = heapq.heappop(ready)[1]
            grads = buffers.pop(node)
            if isinstance(node, AccumulateGrad):
                reached[node] = grads[0]          # a leaf: its gradient is complete
                continue
            results = (None,) * len(node.next_functions)
            if any(g is not None for g in grads):
                results = validate_outputs(node, node.apply(tuple(grads)))
            for (nxt, slot), g in zip(node.next_functions, results):
                if nxt is not None:
                    deliver(nxt, slot, g)
                    dependencies[nxt] -= 1
                    if not dependencies[nxt]:
                        heapq.heappush(ready, (-nxt.sequence_nr, nxt))
    return tuple(reached.get(gradient_edge(x)[0]) for x in inputs)
