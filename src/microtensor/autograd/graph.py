"""The autograd graph: nodes, edges and saved tensors.

A tensor made by a differentiable op points at the ``Node`` that made it (``grad_fn``)
and says which of the node's outputs it is (``output_nr``).  A node's
``next_functions`` are its *edges*: for each differentiable input, the ``(node,
input_nr)`` that produced it, an ``AccumulateGrad`` for a leaf, or ``(None, 0)`` when
the input needs no gradient.

``CopySlices`` and ``AsStridedBackward0`` are the two nodes in-place writes into views
create (see ``autograd.recording``).
"""
import itertools
import re
import weakref

from microtensor._C.meta import contiguous_format

_sequence = itertools.count()

RELEASED_ERROR = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


class RemovableHandle:
    """Returned by ``register_hook``: ``remove()`` unregisters the hook."""

    def __init__(self, hooks, key):
        self._hooks = weakref.ref(hooks)
        self._key = key

    def remove(self):
        hooks = self._hooks()
        if hooks is not None:
            hooks.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_hook_ids = itertools.count()


class Node:
    """A step of the backward pass: maps gradients of its outputs to those of its inputs."""

    def __init__(self, next_functions):
        self.next_functions = tuple(next_functions)
        self.sequence_nr = next(_sequence)
        self._pre_hooks = {}          # output_nr -> {id: fn(grad) -> grad | None}
        self._post_hooks = {}         # id -> fn(grad_inputs, grad_outputs)
        self.metadata = {}

    def name(self):
        return type(self).__name__

    def apply(self, grads):
        raise NotImplementedError

    def release(self):
        """Free saved values after a backward pass without ``retain_graph``."""

    def register_hook(self, fn):
        key = next(_hook_ids)
        self._post_hooks[key] = fn
        return RemovableHandle(self._post_hooks, key)

    def register_prehook(self, fn):
        return self.register_tensor_prehook(0, fn)

    def register_tensor_prehook(self, output_nr, fn):
        hooks = self._pre_hooks.setdefault(output_nr, {})
        key = next(_hook_ids)
        hooks[key] = fn
        return RemovableHandle(hooks, key)

    def __call__(self, *grads):
        return self.apply(grads)

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"


class AccumulateGrad(Node):
    """The sink for a leaf tensor: adds the incoming gradient into ``variable.grad``."""

    def __init__(self, variable):
        super().__init__(())
        self.variable = variable

    def apply(self, grads):
        return ()


def _camel(name):
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"_+", name.strip("_")))


class SavedTensor:
    """A tensor saved for backward, with the version it had when saved.

    An op's own output is saved as a detached alias (so the output and its node do not
    refer to each other); unpacking it while building a double-backward graph gives a
    tensor whose ``grad_fn`` is that node again.
    """

    __slots__ = ("data", "version", "is_output", "output_nr", "had_grad")

    def __init__(self, tensor, is_output=False, output_nr=0):
        self.version = tensor._storage.version
        self.is_output = is_output
        self.output_nr = output_nr
        self.had_grad = tensor.requires_grad
        self.data = tensor.detach() if is_output else tensor

    def unpack(self, node):
        data = self.data
        if data is None:
            raise RuntimeError(RELEASED_ERROR)
        if data._storage.version != self.version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [microtensor.{data._dtype.name} {list(data._sizes)}], "
                f"which is output {self.output_nr} of {node.name()}, is at version "
                f"{data._storage.version}; expected version {self.version} instead. Hint: the "
                "backtrace further above can point to the operation that failed to compute its "
                "gradient. The variable in question was changed in there or anywhere later.")
        if self.is_output and self.had_grad:
            from microtensor.autograd.grad_mode import state
            if state.enabled:
                alias = data.detach()
                alias._grad_fn = node
                alias._output_nr = self.output_nr
                alias._requires_grad = True
                return alias
        return data


class OpNode(Node):
    """The backward of one registered op: calls the op's derivative formula.

    ``saved`` maps each name the formula asks for to its value (``SavedTensor``s for
    tensors); ``slots`` says how the formula's results map onto the edges (a list input
    such as ``cat``'s has one edge per tensor).
    """

    def __init__(self, op, saved, next_functions, slots, input_meta, num_outputs):
        super().__init__(next_functions)
        self.op = op
        self.saved = saved
        self.slots = slots
        self.input_meta = input_meta
        self.num_outputs = num_outputs
        self.released = False

    def name(self):
        return _camel(self.op.inplace_of.name if self.op.inplace_of else self.op.name) + \
            "Backward0"

    def unpacked(self):
        if self.released:
            raise RuntimeError(RELEASED_ERROR)
        values = {}
        for name, value in self.saved.items():
            if isinstance(value, SavedTensor):
                value = value.unpack(self)
            elif isinstance(value, list) and value and isinstance(value[0], SavedTensor):
                value = [v.unpack(self) for v in value]
            values[name] = value
        return values

    def apply(self, grads):
        derivative = self.op.derivative or self.op.inplace_of.derivative
        grad = grads[0] if self.num_outputs == 1 else tuple(grads)
        results = derivative(grad, **self.unpacked())
        flat = []
        for slot, result in zip(self.slots, results):
            if slot == 1:
                flat.append(result)
            elif slot > 1:
                flat.extend(result if result is not None else [None] * slot)
        return tuple(flat)

    def release(self):
        self.saved = {k: None if isinstance(v, SavedTensor) else v
                      for k, v in self.saved.items()}
        self.released = True

    def __getattr__(self, name):
        # PyTorch exposes saved values as ``grad_fn._saved_<name>``
        if name.startswith("_saved_"):
            value = self.__dict__["saved"].get(name[len("_saved_"):])
            return value.unpack(self) if isinstance(value, SavedTensor) else value
        raise AttributeError(name)


class Geometry:
    """Sizes, strides and storage offset of a tensor, remembered without its data."""

    __slots__ = ("sizes", "strides", "offset")

    def __init__(self, tensor):
        self.sizes = tuple(tensor._sizes)
        self.strides = tuple(tensor._strides)
        self.offset = tensor._offset


class CopySlices(Node):
    """The base's new ``grad_fn`` after an in-place op ``fn`` wrote into a view of it.

    Backward: the base's gradient is the incoming gradient with the view's region
    replaced by ``fn``'s gradient for the view's old value.  Buffers come from
    ``grad.new_empty_strided`` and the slice is cloned with ``contiguous_format`` so that
    the node runs unchanged on batched gradients under vmap.
    """

    def __init__(self, base, view, fn, base_edge):
        super().__init__((base_edge,) + fn.next_functions[1:])
        self.base = Geometry(base)
        self.view = Geometry(view)
        self.fn = fn

    def apply(self, grads):
        from microtensor.autograd.engine import validate_outputs
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
        super().__init__((base_edge,))
        self.base = Geometry(base)
        self.view = Geometry(view)

    def apply(self, grads):
        from microtensor.ops.view import as_strided_backward
        grad = grads[0]
        return (as_strided_backward(grad, self.base.sizes, self.base.strides, 0,
                                    self.view.sizes, self.view.strides,
                                    self.view.offset - self.base.offset),)
