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
import weakref

from microtensor._C.meta import contiguous_format
from microtensor.autograd.grad_mode import state as grad_state

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
        self._hooks = hooks
        self._key = key

    def remove(self):
        self._hooks.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_hook_ids = itertools.count()


class Node:
    """A step of the backward pass: maps gradients of its outputs to those of its inputs.

    Hooks (rare) are kept in dicts made on first registration:
    ``_pre_hooks``: output_nr -> {id: fn(grad) -> grad | None} (tensor hooks);
    ``_node_pre_hooks``: {id: fn(grad_outputs) -> grad_outputs | None};
    ``_post_hooks``: {id: fn(grad_inputs, grad_outputs) -> grad_inputs | None}.
    """

    _pre_hooks = None
    _node_pre_hooks = None
    _post_hooks = None
    _metadata = None
    num_outputs = 1
    input_meta = None      # per edge (sizes, dtype) of the input, for engine.validate_outputs

    def __init__(self, next_functions):
        self.next_functions = tuple(next_functions)
        self.sequence_nr = next(_sequence)

    def name(self):
        return type(self).__name__

    def apply(self, grads):
        raise NotImplementedError

    def release(self):
        """Free saved values after a backward pass without ``retain_graph``."""

    @property
    def metadata(self):
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    def register_hook(self, fn):
        if self._post_hooks is None:
            self._post_hooks = {}
        return add_hook(self._post_hooks, fn)

    def register_prehook(self, fn):
        if self._node_pre_hooks is None:
            self._node_pre_hooks = {}
        return add_hook(self._node_pre_hooks, fn)

    def register_tensor_prehook(self, output_nr, fn):
        if self._pre_hooks is None:
            self._pre_hooks = {}
        return add_hook(self._pre_hooks.setdefault(output_nr, {}), fn)

    def __call__(self, *grads):
        return self.apply(grads)

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"


def add_hook(hooks, fn):
    key = next(_hook_ids)
    hooks[key] = fn
    return RemovableHandle(hooks, key)


class AccumulateGrad(Node):
    """The sink for a leaf tensor: adds the incoming gradient into ``variable.grad``."""

    def __init__(self, variable):
        super().__init__(())
        self.variable = variable

    # hooks registered on the leaf live on the tensor (which holds this node only weakly);
    # the engine runs them as this node's pre-hooks
    @property
    def _pre_hooks(self):
        hooks = self.variable._hooks
        return {0: hooks} if hooks else None

    def register_tensor_prehook(self, output_nr, fn):
        if self.variable._hooks is None:
            self.variable._hooks = {}
        return add_hook(self.variable._hooks, fn)

    def apply(self, grads):
        return ()


def detached_alias(tensor):
    """``tensor``'s memory (same storage, hence same version counter) with no history and
    no ``_base`` link back to ``tensor``, so a node may keep it without a reference cycle."""
    return tensor._make_alias_unchecked(tensor._sizes, tensor._strides, tensor._offset)


def _type_name(tensor):
    return "microtensor." + {"float32": "FloatTensor", "float64": "DoubleTensor",
                             "int64": "LongTensor", "int32": "IntTensor",
                             "bool": "BoolTensor"}.get(tensor._dtype.name, tensor._dtype.name)


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
        # an op's floating outputs are the ones its node is attached to
        self.had_grad = is_output and tensor._dtype.is_floating_point
        self.data = detached_alias(tensor) if is_output else tensor

    def unpack(self, node):
        data = self.data
        if data is None:
            raise RuntimeError(RELEASED_ERROR)
        if data._storage.version != self.version:
            raise RuntimeError(self._modified_message(node))
        if self.had_grad and grad_state.enabled:
            alias = detached_alias(data)
            alias._grad_fn = self._producer(node)
            alias._output_nr = self.output_nr
            alias._requires_grad = True
            return alias
        return data

    def _producer(self, node):
        return node

    def _modified_message(self, node):
        data = self.data
        producer = node if self.is_output else data._grad_fn
        output_nr = self.output_nr if self.is_output else data._output_nr
        which = f", which is output {output_nr} of {producer.name()}," if producer else ""
        return ("one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{_type_name(data)} {list(data._sizes)}]{which} is at "
                f"version {data._storage.version}; expected version {self.version} instead. "
                "Hint: the variable was changed in place after it was used by the operation "
                "whose backward failed; use out-of-place operations or .clone() it first.")


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


class OpNode(Node):
    """The backward of one registered op: calls the op's derivative formula.

    ``saved`` maps each name the formula asks for to its value (``SavedTensor``s for
    tensors); ``slots`` says how the formula's results map onto the edges (per input: 0
    for a non-tensor, n for a list input such as ``cat``'s; None when every input is one
    tensor); ``input_meta`` holds each edge's input (sizes, dtype) for
    ``engine.validate_outputs``.
    """

    def __init__(self, op, saved, next_functions, slots, input_meta, num_outputs):
        self.next_functions = tuple(next_functions)
        self.sequence_nr = next(_sequence)
        self.op = op
        self.saved = saved
        self.slots = slots
        self.input_meta = input_meta
        self.num_outputs = num_outputs

    def name(self):
        return self.op.node_name

    def unpacked(self):
        values = self.saved.copy()
        for name, value in values.items():
            if isinstance(value, SavedTensor):
                values[name] = value.unpack(self)
            elif type(value) is list:
                values[name] = [v.unpack(self) if isinstance(v, SavedTensor) else v
                                for v in value]
        return values

    def apply(self, grads):
        op = self.op
        derivative = op.derivative or op.inplace_of.derivative
        results = derivative(grads[0] if self.num_outputs == 1 else tuple(grads),
                             **self.unpacked())
        slots = self.slots
        expected = len(op.inputs)
        if len(results) != expected:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {expected}, got {len(results)})")
        if slots is None:
            return results if type(results) is tuple else tuple(results)
        flat = []
        for slot, result in zip(slots, results):
            if slot == 1:
                flat.append(result)
            elif slot > 1:
                flat.extend(result if result is not None else [None] * slot)
        return tuple(flat)

    def release(self):
        for value in self.saved.values():
            if isinstance(value, SavedTensor):
                value.data = None
            elif type(value) is list:
                for v in value:
                    if isinstance(v, SavedTensor):
                        v.data = None

    def __getattr__(self, name):
        # PyTorch exposes saved values as ``grad_fn._saved_<name>``
        if name.startswith("_saved_"):
            value = self.__dict__["saved"].get(name[len("_saved_"):])
            return value.unpack(self) if isinstance(value, SavedTensor) else value
        raise AttributeError(f"'{self.name()}' object has no attribute '{name}'")


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
