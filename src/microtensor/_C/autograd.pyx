"""The autograd graph's data structures and the engine's loop, in C.

A tensor made by a differentiable op points at the ``Node`` that made it (``grad_fn``)
and says which of the node's outputs it is (``output_nr``).  A node's
``next_functions`` are its *edges*: for each differentiable input, the ``(node,
input_nr)`` that produced it, an ``AccumulateGrad`` for a leaf, or ``(None, 0)`` when
the input needs no gradient.  ``SavedTensor`` keeps a value for backward and checks its
version counter; ``Geometry`` remembers a tensor's layout without its data.

Recording's per-op mechanics are here too: ``bind_arguments`` names a call's arguments
(``Op.bind``), ``attach_node`` binds a call's edges
(``gradient_edge``), the values its derivative's formulas read (by the op's
``Derivative.saved_plan``: only those of formulas whose input requires grad) and the
outputs' history.

``execute`` runs a graph: nodes run in dependency order (a node runs once every node
that feeds it gradient has run; ties go to the most recently created node, as in
PyTorch), incoming gradients for the same node input are summed, and
``validate_outputs`` is the single place where a gradient is summed back to the shape of
a broadcast input and cast to the input's dtype.

``OpNode``, the node of every recorded op (it runs the op's derivative), is here, with
``attach_node``, which makes one.  The other nodes with derivative formulas
(``CopySlices``, ``AsStridedBackward0``, ``Function``'s node), the recording rules
(rebasing history, installing ``CopySlices``) and the engine's public API are Python, in
``microtensor.autograd``; this module imports nothing above ``_C`` (recording installs its
node classes with ``install_nodes``).
"""
cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.weakref cimport PyWeakref_NewRef
import threading

from microtensor._C.tensor cimport (TensorBase, grad_mode_enabled, needs_grad, restore_numpy,
                                    silence_numpy)
from microtensor._C.tensor import set_grad_enabled
from microtensor import _dtype_table

RELEASED_ERROR = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")

# ``autograd.graph.saved_tensors_hooks`` keeps a per-thread stack of (pack, unpack) pairs
# (``_hook_stacks``); ``_hooks_pushed`` counts the pairs pushed in all threads, so that
# saving a tensor without hooks costs one C test.
cdef Py_ssize_t _hooks_pushed = 0
_hook_stacks = threading.local()


def push_saved_tensors_hooks(pack_hook, unpack_hook):
    global _hooks_pushed
    stack = getattr(_hook_stacks, "stack", None)
    if stack is None:
        stack = _hook_stacks.stack = []
    stack.append((pack_hook, unpack_hook))
    _hooks_pushed += 1


def pop_saved_tensors_hooks():
    global _hooks_pushed
    _hook_stacks.stack.pop()
    _hooks_pushed -= 1


cdef object _current_hooks():
    stack = getattr(_hook_stacks, "stack", None)
    return stack[len(stack) - 1] if stack else None


# Anomaly mode (``autograd.anomaly_mode``) installs two callables while it is on:
# ``_anomaly_record(node)`` when a node is made (it keeps the forward's stack trace) and
# ``_anomaly_apply(node, grads)`` to run a node in the engine (it names the failing node's
# forward); None when off.
cdef object _anomaly_record = None
cdef object _anomaly_apply = None


def set_anomaly_callbacks(record, apply):
    global _anomaly_record, _anomaly_apply
    _anomaly_record = record
    _anomaly_apply = apply


cdef Py_ssize_t _next_sequence_nr = 0
cdef Py_ssize_t _next_hook_id = 0


cdef class RemovableHandle:
    """Returned by ``register_hook``: ``remove()`` unregisters the hook."""
    cdef dict _hooks
    cdef Py_ssize_t _key

    def __init__(self, dict hooks, Py_ssize_t key):
        self._hooks = hooks
        self._key = key

    def remove(self):
        self._hooks.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


cdef RemovableHandle _add_hook(dict hooks, fn):
    global _next_hook_id
    key = _next_hook_id
    _next_hook_id += 1
    hooks[key] = fn
    return RemovableHandle(hooks, key)


# Post-accumulate-grad hooks: ``hook(leaf)`` after each accumulation into a leaf's
# ``.grad``, kept (as in PyTorch) in the leaf's ``_post_accumulate_grad_hooks`` dict.  The
# engine looks for them only once some tensor has had one.
cdef bint _post_accumulate_hooks = False


def add_post_accumulate_grad_hook(TensorBase leaf, hook):
    """Register ``hook`` on ``leaf`` (checked by the caller: a leaf that requires grad)."""
    global _post_accumulate_hooks
    hooks = leaf.__dict__.get("_post_accumulate_grad_hooks")
    if hooks is None:
        hooks = leaf.__dict__["_post_accumulate_grad_hooks"] = {}
    _post_accumulate_hooks = True
    return _add_hook(hooks, hook)


cpdef run_post_accumulate_grad_hooks(TensorBase leaf):
    """Run ``leaf``'s post-accumulate-grad hooks, in the order they were registered."""
    if not _post_accumulate_hooks:
        return
    hooks = getattr(leaf, "_post_accumulate_grad_hooks", None)
    if hooks:
        for hook in list(hooks.values()):
            hook(leaf)


cdef class Node:
    """A step of the backward pass: maps gradients of its outputs to those of its inputs.

    ``input_meta``: per edge, the input's (sizes, dtype), for ``validate_outputs`` (None:
    the node's gradients need no fixing).  Hooks (rare) are kept in dicts made on first
    registration: tensor pre-hooks (output_nr -> {id: fn(grad) -> grad | None}),
    ``retain_grad``'s hooks (output_nr -> fn(grad), run after the tensor pre-hooks, as in
    PyTorch), node pre-hooks ({id: fn(grad_outputs) -> grad_outputs | None}) and
    post-hooks ({id: fn(grad_inputs, grad_outputs) -> grad_inputs | None}).
    """
    cdef readonly tuple next_functions
    cdef readonly Py_ssize_t sequence_nr
    cdef public Py_ssize_t num_outputs
    cdef public object input_meta
    cdef dict _tensor_pre_hooks
    cdef dict _retains_grad_hooks
    cdef dict _node_pre_hooks
    cdef dict _post_hooks
    cdef dict _metadata
    cdef object __weakref__

    def __init__(self, next_functions, input_meta=None, Py_ssize_t num_outputs=1):
        self._init(tuple(next_functions), input_meta, num_outputs)

    cdef int _init(self, tuple next_functions, input_meta, Py_ssize_t num_outputs) except -1:
        global _next_sequence_nr
        self.next_functions = next_functions
        self.sequence_nr = _next_sequence_nr
        _next_sequence_nr += 1
        self.input_meta = input_meta
        self.num_outputs = num_outputs
        if _anomaly_record is not None:
            _anomaly_record(self)
        return 0

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
        return _add_hook(self._post_hooks, fn)

    def register_prehook(self, fn):
        if self._node_pre_hooks is None:
            self._node_pre_hooks = {}
        return _add_hook(self._node_pre_hooks, fn)

    def register_tensor_prehook(self, output_nr, fn):
        if self._tensor_pre_hooks is None:
            self._tensor_pre_hooks = {}
        return _add_hook(self._tensor_pre_hooks.setdefault(output_nr, {}), fn)

    def set_retains_grad_hook(self, output_nr, fn):
        """``retain_grad``'s hook for output ``output_nr`` (one per output; None removes)."""
        if fn is None:
            if self._retains_grad_hooks is not None:
                self._retains_grad_hooks.pop(output_nr, None)
            return
        if self._retains_grad_hooks is None:
            self._retains_grad_hooks = {}
        self._retains_grad_hooks[output_nr] = fn

    cdef dict _output_hooks(self):
        return self._tensor_pre_hooks

    def __call__(self, *grads):
        return self.apply(grads)

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"


cdef class AccumulateGrad(Node):
    """The sink for a leaf tensor: adds the incoming gradient into ``variable.grad``."""
    cdef readonly TensorBase variable

    def __init__(self, TensorBase variable):
        self._init((), None, 1)
        self.variable = variable

    # hooks registered on the leaf live on the tensor (which holds this node only weakly);
    # the engine runs them as this node's pre-hooks
    cdef dict _output_hooks(self):
        hooks = self.variable._hooks
        return {0: hooks} if hooks else None

    def register_tensor_prehook(self, output_nr, fn):
        if self.variable._hooks is None:
            self.variable._hooks = {}
        return _add_hook(self.variable._hooks, fn)

    def apply(self, grads):
        return ()


def detached_alias(TensorBase tensor):
    """``tensor``'s memory (same storage, hence same version counter) with no history and
    no ``_base`` link back to ``tensor``, so a node may keep it without a reference cycle."""
    # Unchecked is safe: the geometry is ``tensor``'s own over the same storage, which was
    # bounds-checked when ``tensor`` was made, and a storage never shrinks.
    return tensor._make_alias_unchecked(tensor._sizes, tensor._strides, tensor._offset)


cdef str _type_name(TensorBase tensor):
    return f"microtensor.{_dtype_table.BY_NAME[tensor._dtype.name].scalar_name}Tensor"


cdef class SavedTensor:
    """A tensor saved for backward, with the version it had when saved.

    An op's own output is saved as a detached alias (so the output and its node do not
    refer to each other); unpacking it while building a double-backward graph gives a
    tensor whose ``grad_fn`` is that node again (``_producer``, which subclasses change).

    Under ``saved_tensors_hooks`` the tensor is not kept: what ``pack_hook`` returned is,
    and ``unpack_hook`` turns it back into a tensor when backward needs it (no version
    check then, as in PyTorch); the edge a saved input had is kept so that a double
    backward still reaches its history.
    """
    cdef public TensorBase data
    cdef readonly Py_ssize_t version
    cdef readonly bint is_output
    cdef readonly int output_nr
    cdef readonly bint had_grad
    cdef readonly bint hooked
    cdef readonly bint released
    cdef object packed
    cdef object unpack_hook
    cdef tuple edge

    def __init__(self, TensorBase tensor, bint is_output=False, int output_nr=0):
        self._fill(tensor, is_output, output_nr)

    cdef SavedTensor _fill(self, TensorBase tensor, bint is_output, int output_nr):
        if tensor._storage.inference:
            raise RuntimeError(
                "Inference tensors cannot be saved for backward. Please do not use Tensors "
                "created in inference mode in computation tracked by autograd. To work "
                "around this, you can make a clone to get a normal tensor and use it in "
                "autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`.")
        self.version = tensor._storage.version
        self.is_output = is_output
        self.output_nr = output_nr
        # an op's floating and complex outputs are the ones its node is attached to
        self.had_grad = is_output and tensor._dtype.kind >= 2
        if _hooks_pushed:
            hooks = _current_hooks()
            if hooks is not None:
                self._pack(tensor, hooks)
                return self
        self.data = detached_alias(tensor) if is_output else tensor
        return self

    cdef void _pack(self, TensorBase tensor, tuple hooks) except *:
        pack_hook, unpack_hook = hooks
        if not self.is_output and tensor.requires_grad:
            self.edge = gradient_edge(tensor)
        self.hooked = True
        self.unpack_hook = unpack_hook
        self.packed = pack_hook(tensor)

    def release(self):
        """Free the saved value (a backward pass without ``retain_graph`` is over)."""
        self.released = True
        self.data = None
        self.packed = None
        self.unpack_hook = None

    def unpack(self, node):
        return self._unpack(node)

    cdef object _unpack(self, node):
        cdef TensorBase data = self.data, alias
        if self.hooked:
            return self._unpack_hooked(node)
        if data is None:
            raise RuntimeError(RELEASED_ERROR)
        if data._storage.version != self.version:
            raise RuntimeError(self._modified_message(node))
        if self.had_grad and grad_mode_enabled():
            alias = detached_alias(data)
            alias._grad_fn = self._producer(node)
            alias._output_nr = self.output_nr
            alias._requires_grad = True
            return alias
        return data

    cdef object _unpack_hooked(self, node):
        cdef TensorBase alias
        if self.released:
            raise RuntimeError(RELEASED_ERROR)
        value = self.unpack_hook(self.packed)
        if not isinstance(value, TensorBase):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got "
                            f"result of type {type(value).__name__}")
        if not grad_mode_enabled() or not (self.had_grad or self.edge is not None):
            return value
        alias = detached_alias(value)
        if self.had_grad:
            alias._grad_fn, alias._output_nr = self._producer(node), self.output_nr
        else:
            alias._grad_fn, alias._output_nr = self.edge
        alias._requires_grad = True
        return alias

    def _producer(self, node):
        return node

    cdef str _modified_message(self, node):
        cdef TensorBase data = self.data
        producer = node if self.is_output else data._grad_fn
        output_nr = self.output_nr if self.is_output else data._output_nr
        which = f", which is output {output_nr} of {producer.name()}," if producer else ""
        return ("one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{_type_name(data)} {list(data._sizes)}]{which} is at "
                f"version {data._storage.version}; expected version {self.version} instead. "
                "Hint: the variable was changed in place after it was used by the operation "
                "whose backward failed; use out-of-place operations or .clone() it first.")


cdef class Geometry:
    """Sizes, strides and storage offset of a tensor, remembered without its data."""
    cdef readonly tuple sizes
    cdef readonly tuple strides
    cdef readonly Py_ssize_t offset

    def __init__(self, TensorBase tensor):
        self.sizes = tensor._sizes
        self.strides = tensor._strides
        self.offset = tensor._offset


cdef class Formulas:
    """An op's derivative as the engine reads it (``ops.registry.Derivative`` plans it):
    ``formulas``, per input of ``op.inputs``, ``(formula, reads)`` (``reads``: positions
    in ``saved_names`` of the values it reads after the gradient) or None; or ``joint``,
    one formula returning every input's gradient; ``saved_plan``, per saved value,
    ``(name, source, read, needed_by)`` (see ``saved_values``).  ``unrecorded``, optional:
    ``(shortcut, reads)``, a shortcut of the per-input formulas for a pass that records
    nothing (grad mode off), ``shortcut(grad, wanted, *saved values at reads)`` with
    ``wanted`` a bool per input, returning a gradient per input (None where not wanted)
    or None to leave the call to the formulas."""
    cdef public tuple formulas
    cdef public object joint
    cdef public tuple saved_names
    cdef public tuple saved_plan
    cdef public tuple unrecorded


cdef class OpNode(Node):
    """The backward of one registered op: runs the op's derivative formulas.

    ``saved`` holds the values the formulas read, in the order of ``saved_names`` (the
    op's ``Formulas``; ``SavedTensor``s for tensors, lists of them for list inputs, None
    for what no formula that will run reads); ``slots`` says how the formulas' results
    map onto the edges (per input: 0 for a non-tensor, n for a list input such as
    ``cat``'s; None when every input is one tensor); ``input_meta`` holds each edge's
    input (sizes, dtype) for ``validate_outputs``.  A per-input formula runs only when its
    input has an edge to send a gradient to (PyTorch's ``should_compute_output``).
    """
    cdef readonly object op
    cdef readonly list saved
    cdef readonly object slots
    cdef Formulas derivative

    def __init__(self, op, list saved, next_functions, slots, input_meta,
                 Py_ssize_t num_outputs):
        self._init(tuple(next_functions), input_meta, num_outputs)
        self.op = op
        self.saved = saved
        self.slots = slots
        self.derivative = op.derivative          # add_ shares add's

    @property
    def saved_names(self):
        return self.derivative.saved_names

    def name(self):
        return self.op.node_name

    def apply(self, grads):
        return self._apply(grads)

    cdef object _apply(self, grads):
        """``apply`` on ``grads`` (a sequence, one gradient per output)."""
        cdef list values = []
        for value in self.saved:
            if isinstance(value, SavedTensor):
                value = (<SavedTensor>value)._unpack(self)
            elif type(value) is list:
                value = [v.unpack(self) if isinstance(v, SavedTensor) else v for v in value]
            values.append(value)
        grad = grads[0] if self.num_outputs == 1 else tuple(grads)
        if self.derivative.joint is None:
            return self._per_input(grad, values)
        results = self.derivative.joint(grad, *values)
        cdef Py_ssize_t expected = len(self.op.inputs)
        if len(results) != expected:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {expected}, got {len(results)})")
        if self.slots is None:
            return results if type(results) is tuple else tuple(results)
        flat = []
        for slot, result in zip(self.slots, results):
            if slot == 1:
                flat.append(result)
            elif slot > 1:
                flat.extend(result if result is not None else [None] * slot)
        return tuple(flat)

    cdef tuple _per_input(self, grad, list values):
        """One gradient per edge: each input's formula on the values it reads, for the
        inputs with an edge that wants it (a list input's gradient spread over its
        edges); or, when nothing records, the derivative's ``unrecorded`` shortcut if it
        serves the call."""
        cdef list results = []
        cdef tuple edges = self.next_functions
        cdef tuple formulas = self.derivative.formulas
        cdef tuple unrecorded = self.derivative.unrecorded
        cdef Py_ssize_t i, k, n = len(formulas), edge = 0, count = 1
        cdef list wanted = [False] * n
        for i in range(n):
            if self.slots is not None:
                count = self.slots[i]
            for k in range(edge, edge + count):
                if (<tuple>edges[k])[0] is not None:
                    wanted[i] = True
                    break
            edge += count
        quick = None
        if unrecorded is not None and not grad_mode_enabled():
            quick = _run_formula(unrecorded, grad, values, tuple(wanted))
        count = 1
        for i in range(n):
            if self.slots is not None:
                count = self.slots[i]
            entry = formulas[i]
            if quick is not None:
                result = quick[i]
            elif wanted[i] and entry is not None:
                result = _run_formula(<tuple>entry, grad, values)
            else:
                result = None
            if count == 1:
                results.append(result)
            elif count > 1:
                results.extend(result if result is not None else [None] * count)
        return tuple(results)

    def release(self):
        self._release()

    cdef void _release(self) except *:
        for value in self.saved:
            if isinstance(value, SavedTensor):
                (<SavedTensor>value).release()
            elif type(value) is list:
                for v in value:
                    if isinstance(v, SavedTensor):
                        (<SavedTensor>v).release()

    def set_saved(self, str name, value):
        """Replace the saved value called ``name`` (an in-place op saves its result once
        history is rebased)."""
        self.saved[self.derivative.saved_names.index(name)] = value

    def __getattr__(self, name):
        # PyTorch exposes saved values as ``grad_fn._saved_<name>``
        if name.startswith("_saved_"):
            key = name[len("_saved_"):]
            names = self.derivative.saved_names
            value = self.saved[names.index(key)] if key in names else None
            return value.unpack(self) if isinstance(value, SavedTensor) else value
        raise AttributeError(f"'{self.name()}' object has no attribute '{name}'")


cdef object _run_formula(tuple entry, grad, list values, wanted=None):
    """``formula(grad, *the saved values it reads)`` for ``entry = (formula, reads)``
    (``formula(grad, wanted, *...)`` for an ``unrecorded`` shortcut)."""
    cdef tuple reads = <tuple>entry[1]
    cdef Py_ssize_t i, n = len(reads), first = 1 if wanted is None else 2
    cdef tuple arguments = PyTuple_New(n + first)
    Py_INCREF(grad)
    PyTuple_SET_ITEM(arguments, 0, grad)
    if wanted is not None:
        Py_INCREF(wanted)
        PyTuple_SET_ITEM(arguments, 1, wanted)
    for i in range(n):
        value = values[<Py_ssize_t>reads[i]]
        Py_INCREF(value)
        PyTuple_SET_ITEM(arguments, i + first, value)
    return entry[0](*arguments)


# --------------------------------------------------------------------------- recording

cdef tuple _NONE_EDGE = (None, 0)
cdef object _regenerated_view_node = None


def install_nodes(regenerated_view_node):
    """Called once by ``autograd.recording`` with the Python node class for a view's
    ``grad_fn`` after its base changed in place: ``regenerated_view_node(Geometry(base),
    Geometry(view), base_edge)`` (``AsStridedBackward0``)."""
    global _regenerated_view_node
    _regenerated_view_node = regenerated_view_node


cpdef dict bind_arguments(tuple params, dict defaults, varargs, args, dict kwargs):
    """A call's arguments by parameter name (``Op.bind``): ``defaults`` first, then the
    positional ``args`` by ``params`` (the rest, as a tuple, under ``varargs`` unless
    None), then ``kwargs``."""
    cdef tuple positional = args if type(args) is tuple else tuple(args)
    cdef dict values = defaults.copy()
    cdef Py_ssize_t i, n = min(len(params), len(positional))
    for i in range(n):
        values[params[i]] = positional[i]
    if varargs is not None:
        values[varargs] = positional[len(params):]
    if kwargs:
        values.update(kwargs)
    return values


def attach_node(op, args, kwargs, result):
    """Make an ``OpNode`` for ``op``'s call on ``args`` the ``grad_fn`` of its outputs,
    saving what its derivative's ``saved_plan`` asks for and an edge per tensor in
    ``op.inputs``."""
    cdef tuple recording = op.recording     # (params, defaults, varargs, inputs, is_view)
    cdef dict bound = bind_arguments(<tuple>recording[0], <dict>recording[1], recording[2],
                                     args, kwargs)
    cdef tuple outputs = result if type(result) is tuple else (result,)
    edges, slots, metas = input_edges(<tuple>recording[3], bound)
    cdef OpNode node = OpNode.__new__(OpNode)
    node._init(tuple(edges), metas, len(outputs))
    node.op = op
    node.slots = slots
    node.derivative = op.derivative
    set_history(node, outputs, recording[4] is True)
    # saved once the outputs have their history: a pack hook sees them as in PyTorch
    node.saved = saved_values(node.derivative.saved_plan, bound, outputs)
    return result


cpdef grad_accumulator(TensorBase tensor):
    """The (single, shared) AccumulateGrad node of a leaf that requires grad."""
    ref = tensor._grad_accumulator
    acc = ref() if ref is not None else None
    if acc is None:
        acc = AccumulateGrad(tensor)
        tensor._grad_accumulator = PyWeakref_NewRef(acc, None)
    return acc


# a view reading its base as another dtype (``x.real``, ``view_as_real``) has a geometry in
# other units than its base's, which the regenerated view node and ``CopySlices`` assume
DTYPE_VIEW_INPLACE_ERROR = (
    "microtensor does not differentiate through an in-place change of a tensor that has a "
    "view of another dtype (real, imag, view_as_real, view_as_complex) requiring grad, nor "
    "an in-place change of such a view: clone the tensor before the in-place op")


cpdef current_grad_fn(TensorBase tensor):
    """``tensor.grad_fn``, first regenerating it if ``tensor`` is a view whose base was
    modified in place since the view's ``grad_fn`` was made."""
    cdef TensorBase base
    if tensor._is_diff_view:
        base = tensor._base
        if base._grad_fn is not tensor._view_info:
            if base._grad_fn is not None:
                if tensor._dtype is not base._dtype:
                    raise RuntimeError(DTYPE_VIEW_INPLACE_ERROR)
                tensor._grad_fn = _regenerated_view_node(Geometry(base), Geometry(tensor),
                                                         gradient_edge(base))
                tensor._output_nr = 0
                tensor._requires_grad = True
            tensor._view_info = base._grad_fn
    return tensor._grad_fn


cpdef tuple gradient_edge(TensorBase tensor):
    """Where a gradient for ``tensor`` must be sent: ``(node, input_nr)`` or (None, 0)."""
    fn = current_grad_fn(tensor) if tensor._is_diff_view else tensor._grad_fn
    if fn is not None:
        return fn, tensor._output_nr
    if tensor._requires_grad:
        return grad_accumulator(tensor), 0
    if tensor._is_diff_view and tensor._base.requires_grad:
        return gradient_edge(tensor._base)
    return _NONE_EDGE


cpdef tuple input_edges(tuple inputs, dict bound):
    """Edges and input metadata for the differentiable inputs named ``inputs`` of a call
    whose arguments are ``bound``, and ``slots``: how many edges each input has (0 for a
    non-tensor, n for a list of n tensors), or None when every input is one tensor."""
    cdef list edges = [], metas = [], slots = []
    cdef bint one_each = True
    cdef TensorBase t
    for name in inputs:
        value = bound.get(name)
        if isinstance(value, TensorBase):
            t = <TensorBase>value
            edges.append(gradient_edge(t))
            metas.append((t._sizes, t._dtype))
            slots.append(1)
        elif isinstance(value, (list, tuple)) and _has_tensor(value):
            for v in value:
                t = <TensorBase?>v
                edges.append(gradient_edge(t))
                metas.append((t._sizes, t._dtype))
            slots.append(len(value))
            one_each = False
        else:
            slots.append(0)
            one_each = False
    return edges, None if one_each else slots, metas


cdef bint _has_tensor(values):
    for v in values:
        if isinstance(v, TensorBase):
            return True
    return False


cdef inline SavedTensor _saved(TensorBase tensor, bint is_output=False, int output_nr=0):
    return (<SavedTensor>SavedTensor.__new__(SavedTensor))._fill(tensor, is_output, output_nr)


cpdef list saved_values(tuple plan, dict bound, tuple outputs):
    """The values the formulas read, in order, by ``plan`` (``Derivative.saved_plan``:
    ``(name, source, read, needed_by)`` per value) from the call's ``bound`` arguments and
    its ``outputs`` (None: results are left None, as an in-place op saves its inputs
    before it runs); None for a value only formulas that will not run read."""
    cdef list saved = []
    for entry in plan:
        if is_needed(<tuple>entry, bound):
            saved.append(_saved_value(<tuple>entry, bound, outputs))
        else:
            saved.append(None)
    return saved


cpdef bint is_needed(tuple entry, dict bound) except -1:
    """Whether a formula that will run reads the saved value ``entry`` (a ``saved_plan``
    entry): one of the inputs whose formulas read it requires grad."""
    needed_by = entry[3]
    if needed_by is None:
        return True
    for name in <tuple>needed_by:
        value = bound.get(name)
        if isinstance(value, TensorBase):
            if needs_grad(<TensorBase>value):
                return True
        elif isinstance(value, (list, tuple)):
            for v in value:
                if isinstance(v, TensorBase) and needs_grad(<TensorBase>v):
                    return True
    return False


cdef object _saved_value(tuple entry, dict bound, tuple outputs):
    name, source, read, _ = entry
    if source == "argument":
        value = bound[name]
        if isinstance(value, TensorBase):
            return _saved(value)
        if isinstance(value, (list, tuple)) and _has_tensor(value):
            return [_saved(v) if isinstance(v, TensorBase) else v for v in value]
        return value
    if source == "meta":
        value = bound[read[0]]
        return read[1](value) if isinstance(value, TensorBase) else None
    if outputs is None:
        return None
    if read is not None:
        return _saved(outputs[read], True, read)
    if len(outputs) == 1:
        return _saved(outputs[0], True)
    return [_saved(o, True, i) if isinstance(o, TensorBase) else o
            for i, o in enumerate(outputs)]


cdef set_history(Node node, tuple outputs, bint is_view):
    """Make ``node`` the ``grad_fn`` of the floating and complex tensors among ``outputs``
    (output i is ``node``'s output i); the outputs of a view op become differentiable
    views."""
    cdef TensorBase t
    cdef Py_ssize_t i
    for i in range(len(outputs)):
        out = outputs[i]
        if isinstance(out, TensorBase) and (<TensorBase>out)._dtype.kind >= 2:
            t = <TensorBase>out
            t._grad_fn = node
            t._output_nr = i
            t._requires_grad = True
    if is_view:
        for out in outputs:
            t = <TensorBase?>out
            t._is_diff_view = True
            t._view_info = (<TensorBase>t._base)._grad_fn
            if len(outputs) > 1:
                out._multi_output_view = node.name()


cpdef bint reaches_other_leaves(roots, handles) except -1:
    """Whether the graph behind the tensors ``roots`` reaches a leaf (an ``AccumulateGrad``)
    of a tensor other than ``handles``: then an outer differentiation sees this graph."""
    cdef set own = {id(h) for h in handles}
    cdef list stack = []
    cdef set seen
    cdef Node node
    for root in roots:
        edge = gradient_edge(<TensorBase?>root)
        if (<tuple>edge)[0] is not None:
            stack.append((<tuple>edge)[0])
    seen = set(stack)
    while stack:
        node = stack.pop()
        if type(node) is AccumulateGrad:
            if id((<AccumulateGrad>node).variable) not in own:
                return True
            continue
        for edge in node.next_functions:
            nxt = (<tuple>edge)[0]
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


# --------------------------------------------------------------------------- the engine

def validate_outputs(Node node, grads):
    """Bring each gradient ``node`` produced to the shape and dtype of its input."""
    return _validate(node, grads)


cdef object _validate(Node node, grads):
    metas = node.input_meta
    if metas is None:
        return grads
    if len(grads) != len(metas):
        raise RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                           f"(expected {len(metas)}, got {len(grads)})")
    cdef list fixed = None
    cdef TensorBase t
    cdef tuple meta
    cdef Py_ssize_t i
    for i in range(len(grads)):
        g = grads[i]
        if g is None:
            continue
        t = <TensorBase?>g
        meta = <tuple?>metas[i]
        sizes, dtype = meta[0], meta[1]
        if t._sizes != sizes or t._dtype is not dtype:
            if fixed is None:
                fixed = list(grads)
            fixed[i] = _conform(node, i, t, sizes, dtype)
    return grads if fixed is None else tuple(fixed)


cdef object _conform(Node node, i, TensorBase g, tuple sizes, dtype):
    if g._sizes != sizes:
        if not _expandable_to(sizes, g._sizes):
            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index "
                               f"{i} - got {list(g._sizes)} but expected shape compatible "
                               f"with {list(sizes)}")
        g = g.sum_to_size(sizes)
    if g._dtype is not dtype:
        if g._dtype.is_complex and not dtype.is_complex:
            g = g.real      # a real input of a complex op: its gradient is the real part
        g = g.to(dtype)
    return g


cdef bint _expandable_to(tuple sizes, tuple target):
    """Whether a tensor of ``sizes`` broadcasts to ``target`` (so a gradient of ``target``
    sums back to ``sizes``)."""
    cdef Py_ssize_t n = len(sizes), lead = len(target) - n, i
    if lead < 0:
        return False
    for i in range(n):
        if sizes[i] != 1 and sizes[i] != target[lead + i]:
            return False
    return True


@cython.final
cdef class _Pending:
    """A node's state during one pass: how many of the edges into it have still to
    deliver, and the gradients of its outputs delivered so far (None until the first)."""
    cdef Py_ssize_t remaining
    cdef list grads
    cdef Py_ssize_t unvisited      # scratch for ``_mark_needed``
    cdef bint needed               # with captured edges: whether the node must run


cdef dict _collect(roots):
    """A ``_Pending`` for every node reachable from ``roots``, with its count of incoming
    edges."""
    cdef dict pending = {}
    cdef list stack = list(dict.fromkeys(edge[0] for edge in roots if edge[0] is not None))
    cdef Node node
    cdef _Pending state
    for node in stack:
        pending[node] = _Pending.__new__(_Pending)
    while stack:
        node = stack.pop()
        for edge in node.next_functions:
            nxt = (<tuple>edge)[0]
            if nxt is None:
                continue
            found = pending.get(nxt)
            if found is None:
                state = _Pending.__new__(_Pending)
                pending[nxt] = state
                stack.append(nxt)
            else:
                state = <_Pending>found
            state.remaining += 1
    return pending


cdef void _mark_needed(dict pending, targets) except *:
    """Mark the nodes that must run for gradient to reach ``targets``: those with an edge
    to a target or to another needed node (a target itself runs only if it is also
    needed).  The nodes are visited children first: the reverse of a topological order
    (Kahn's, on a scratch copy of the incoming-edge counts)."""
    cdef list order = [], stack = []
    cdef _Pending state
    cdef Node node
    cdef Py_ssize_t i
    for node, found in pending.items():
        state = <_Pending>found
        state.unvisited = state.remaining
        if not state.unvisited:
            stack.append(node)
    while stack:
        node = stack.pop()
        order.append(node)
        for edge in node.next_functions:
            nxt = (<tuple>edge)[0]
            if nxt is not None:
                state = <_Pending>pending[nxt]
                state.unvisited -= 1
                if not state.unvisited:
                    stack.append(nxt)
    for i in range(len(order) - 1, -1, -1):
        node = order[i]
        for edge in node.next_functions:
            nxt = (<tuple>edge)[0]
            if nxt is not None and (nxt in targets or (<_Pending>pending[nxt]).needed):
                (<_Pending>pending[node]).needed = True
                break


cdef object _node_begin = None   # a recording profiler's begin(node) and end()
cdef object _node_end = None


def set_node_profiler(begin, end):
    """Install ``begin(node)`` and ``end()`` (None, None: remove them), called around the
    backward of every node while a profiler records."""
    global _node_begin, _node_end
    _node_begin, _node_end = begin, end


def execute(roots, root_grads, bint retain_graph, bint create_graph, capture,
            accumulate_into_leaf):
    """Run the graph from ``roots`` (edges of the outputs) seeded with ``root_grads``.

    ``capture``: edges whose incoming gradient is returned (one list entry each); then
    only nodes leading to them run.  ``accumulate_into_leaf(variable, grad,
    create_graph)`` receives what reaches a leaf's ``AccumulateGrad``.
    """
    cdef dict pending, capture_at = None
    cdef list captured = None, ready = []
    cdef Node node
    cdef _Pending state
    cdef Py_ssize_t i
    pending = _collect(roots)
    if capture is not None:
        captured = [None] * len(capture)
        capture_at = {}
        for i, (target, nr) in enumerate(capture):
            capture_at.setdefault(target, []).append((nr, i))
        _mark_needed(pending, capture_at)
    for root in _seed(pending, roots, root_grads):
        if (<_Pending>pending[root]).remaining == 0:
            _push(ready, <Node>root)

    prev = grad_mode_enabled()
    set_grad_enabled(create_graph)
    numpy_errors = silence_numpy()   # as in the dispatcher: the formulas' shortcuts use NumPy
    try:
        while ready:
            node = _pop(ready)
            state = <_Pending>pending.pop(node)
            grads = state.grads
            state.grads = None   # the leaf may steal a gradient only if no one else holds it
            if node._output_hooks() or node._retains_grad_hooks or node._node_pre_hooks:
                grads = _run_pre_hooks(node, grads)
            if capture_at is not None:
                for nr, i in capture_at.get(node, ()):
                    if nr < len(grads):
                        captured[i] = grads[nr]
                if not state.needed:
                    continue
            if type(node) is AccumulateGrad:
                grad = grads[0]
                grads = None
                if grad is not None:
                    if create_graph or not _steal_into((<AccumulateGrad>node).variable,
                                                       <TensorBase?>grad):
                        accumulate_into_leaf((<AccumulateGrad>node).variable, grad,
                                             create_graph)
                    if _post_accumulate_hooks:
                        run_post_accumulate_grad_hooks((<AccumulateGrad>node).variable)
                continue
            if _node_begin is None:
                _run_node(node, grads, pending, ready, retain_graph)
                continue
            _node_begin(node)
            try:
                _run_node(node, grads, pending, ready, retain_graph)
            finally:
                _node_end()
    finally:
        set_grad_enabled(prev)
        restore_numpy(numpy_errors)
    return captured


# Threads may run backward passes into the same leaves at once: each read-modify-write of
# a ``.grad`` holds this lock, so that no contribution is lost (PyTorch locks each
# AccumulateGrad node; one lock is as good here, where the GIL serialises the work anyway).
accumulation_lock = threading.Lock()
cdef object _try_lock = accumulation_lock.acquire
cdef object _unlock = accumulation_lock.release


cdef inline Py_ssize_t _references(PyObject* value) noexcept:
    """``value``'s reference count, read through a borrowed pointer (passing an attribute
    as an object would count the temporary reference Cython makes for it)."""
    return value.ob_refcnt


cdef bint _steal_into(TensorBase variable, TensorBase grad) except -1:
    """The commonest accumulation in C: ``variable.grad = grad`` when the leaf has no
    ``.grad`` yet and ``grad`` may become it as is: it does not require grad, has the
    leaf's (contiguous) strides, is no view, and no one else refers to it or to its
    storage (the caller's variable is ``grad``'s one reference, the tensor's field its
    storage's one), so that no one else sees the memory ``.grad`` owns.  False: nothing
    done, the engine's Python accumulation (which clones what it may not steal) takes it.
    Under ``accumulation_lock``, as that one; a busy lock is left to it too."""
    if variable._grad is not None or grad._requires_grad or grad._base is not None or \
            not variable._is_contig or grad._strides != variable._strides or \
            _references(<PyObject*>grad) > 1 or _references(<PyObject*>grad._storage) > 1:
        return False
    if not _try_lock(False):
        return False
    try:
        if variable._grad is not None:
            return False
        variable._grad = grad
    finally:
        _unlock()
    return True


# The ready queue: a binary heap of nodes, the most recently created (highest
# ``sequence_nr``) on top, compared in C.
cdef void _push(list heap, Node node) except *:
    cdef Py_ssize_t i = len(heap), parent
    cdef Py_ssize_t sequence_nr = node.sequence_nr
    heap.append(node)
    while i > 0:
        parent = (i - 1) >> 1
        above = heap[parent]
        if (<Node>above).sequence_nr >= sequence_nr:
            break
        heap[i] = above
        i = parent
    heap[i] = node


cdef Node _pop(list heap):
    cdef Node top = heap[0]
    cdef Node last = heap.pop()
    cdef Py_ssize_t n = len(heap), i = 0, child
    if not n:
        return top
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and \
                (<Node>heap[child + 1]).sequence_nr > (<Node>heap[child]).sequence_nr:
            child += 1
        if (<Node>heap[child]).sequence_nr <= last.sequence_nr:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = last
    return top


cdef list _seed(dict pending, roots, root_grads):
    """Deliver the root gradients; the root nodes, each once."""
    cdef list seeded = []
    cdef _Pending state
    for (root, nr), grad in zip(roots, root_grads):
        if root is not None:
            state = <_Pending>pending[root]
            if state.grads is None:
                state.grads = [None] * (<Node>root).num_outputs
                seeded.append(root)
            _accumulate(state.grads, nr, grad)
    return seeded


cdef void _run_node(Node node, grads, dict pending, list ready, bint retain_graph) except *:
    """Apply ``node`` and pass its gradients along its edges, queueing the nodes that
    thereby have all their inputs.  (A function of its own so that no gradient outlives
    it in a local variable: ``accumulate_into_leaf`` steals only unshared gradients.)"""
    cdef Node nxt
    cdef _Pending state
    cdef tuple edges = node.next_functions
    cdef Py_ssize_t i
    for g in grads:
        if g is not None:
            if _anomaly_apply is not None:
                outputs = _anomaly_apply(node, grads)
            elif type(node) is OpNode:
                outputs = _validate(node, (<OpNode>node)._apply(grads))
            else:
                outputs = _validate(node, node.apply(tuple(grads)))
            break
    else:
        outputs = (None,) * len(edges)
    if node._post_hooks:
        outputs = _run_post_hooks(node, outputs, grads)
    if not retain_graph:
        if type(node) is OpNode:
            (<OpNode>node)._release()
        else:
            node.release()
    for i in range(min(len(edges), len(outputs))):
        edge = edges[i]
        target = (<tuple>edge)[0]
        if target is None:
            continue
        nxt = <Node>target
        state = <_Pending>pending[nxt]
        if state.grads is None:
            state.grads = [None] * nxt.num_outputs
        g = outputs[i]
        if g is not None:
            _accumulate(state.grads, (<tuple>edge)[1], g)
        state.remaining -= 1
        if not state.remaining:
            _push(ready, nxt)


cdef inline void _accumulate(list buffer, Py_ssize_t slot, grad) except *:
    existing = buffer[slot]
    buffer[slot] = grad if existing is None else existing + grad


cdef list _run_pre_hooks(Node node, grads):
    grads = list(grads)
    for nr, hooks in (node._output_hooks() or {}).items():
        for hook in list(hooks.values()):
            if nr < len(grads) and grads[nr] is not None:
                result = hook(grads[nr])
                if result is not None:
                    _check_hook_value(hook, grads[nr], result)
                    grads[nr] = result
    for nr, hook in list((node._retains_grad_hooks or {}).items()):
        if nr < len(grads) and grads[nr] is not None:
            hook(grads[nr])
    for hook in list((node._node_pre_hooks or {}).values()):
        result = hook(tuple(grads))
        if result is not None:
            grads = list(_checked_hook_values(hook, grads, result))
    return grads


cdef object _run_post_hooks(Node node, grad_inputs, grad_outputs):
    for hook in list(node._post_hooks.values()):
        result = hook(grad_inputs, tuple(grad_outputs))
        if result is not None:
            grad_inputs = tuple(_checked_hook_values(hook, grad_inputs, result))
    return grad_inputs


# A hook's gradients enter the graph as they are (no ``validate_outputs`` after it), so
# what it returns is checked against what it replaces, as PyTorch does.

cdef str _hook_name(hook):
    return getattr(hook, "__name__", "")


cdef object _checked_hook_values(hook, originals, result):
    """A node hook's ``result`` (a sequence replacing ``originals``), checked."""
    if not isinstance(result, (tuple, list)):
        raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
    if len(result) != len(originals):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of "
                           f"values (got {len(result)}, but expected {len(originals)})")
    for original, value in zip(originals, result):
        _check_hook_value(hook, original, value)
    return result


cdef void _check_hook_value(hook, original, value) except *:
    """A gradient ``value`` a hook returned in place of ``original``: same type, same size."""
    if value is None:
        return
    if original is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if not isinstance(value, TensorBase):
        raise TypeError(f"expected Variable, but hook returned '{type(value).__name__}'")
    cdef TensorBase before = <TensorBase>original, after = <TensorBase>value
    if after._dtype is not before._dtype or after._storage.device != before._storage.device:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                           f"{_type_name(before)} got {_type_name(after)})")
    if after._sizes != before._sizes:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")
