"""The op registry: every operator of microtensor is declared here exactly once.

An ``Op`` bundles what each layer needs to know about one operator:

* ``kernel``: the computation on plain tensors (no autograd, no vmap), written with the
  Cython kernels or with NumPy on zero-copy views of the tensors' storage;
* ``derivative``: the backward formulas, written in microtensor ops so that they are
  themselves differentiable and vmappable: one per differentiable input, as PyTorch's
  ``derivatives.yaml`` and HIPS autograd's ``defvjp`` tables read
  (``@mul.def_derivative("other")`` above ``def mul(grad, self): return grad * self``),
  or one joint formula returning every input's gradient, for ops whose gradients share
  work (``def_joint_derivative``).  A formula's parameters name what it reads: ``grad``
  first (a tuple for a multi-output op), then any forward argument by name, ``result``
  for the output (``result1`` for output 1 alone of a multi-output op) and
  ``<argument>_shape`` etc. for metadata.  Autograd saves (and version-checks) exactly
  what the formulas of the inputs that require grad read, and runs only those formulas;
  see ``Derivative``;
* ``batch_rule``: how vmap runs the op on batched tensors, declared next to the kernel
  with ``@my_op.def_batch_rule`` (or ``op(..., batch_rule=...)``) and written with the
  helpers of ``microtensor.vmap.helpers``.  Most ops instead name a ``family``
  ("pointwise" or "reduction"): one word in the declaration, and vmap applies that
  family's shared rule (``vmap.rules``).  An in-place variant takes its base op's rule
  (or family); a random op (``random=True``) takes vmap's random-op rule; an op with
  neither rule nor family takes vmap's per-sample loop, which warns;
* ``norm_rule``: optional, for ghost clipping (``microtensor.privacy``): how the norm of
  each sample's gradient of the op's parameters follows from the sample's activation and
  output gradient, without forming that gradient (``def_norm_rule``);
* ``samples``: sample inputs that the test suite runs through every check: a function
  ``samples(make)`` returning a list of ``Sample(*args, **kwargs)``, where
  ``make(*shape, dtype=float64, low=None, high=None)`` (supplied by
  ``microtensor.testing``) makes a random tensor.  The first argument is the tensor the
  method is called on;
* ``out``, ``out_casting`` and ``out_layout``: PyTorch's ``out=`` for the op.  ``out``:
  whether its function takes one (True, False, or a function of the bound arguments
  where only some overloads do: ``sum`` with a ``dim``).  ``out_casting``: True, the
  result may be cast into an ``out`` of another dtype that does not lose its category
  (elementwise ops and some others); False, ``out`` must have the result's dtype (most
  others); "kind", only into the same kind (real FFTs); "dtype", the op computes in
  ``out``'s dtype (``sum``, ``cumsum``: their ``dtype`` argument); or a function of the
  bound arguments giving one of these (``max(input, other)`` casts, ``max(input)`` does
  not).  ``out_layout``: how an ``out`` of another shape is laid out as it is resized.
  The dispatcher computes the result and writes it in (``dispatch.write_out``), the same
  for every op; a kernel's own ``out`` parameter serves its in-place variant (and the
  few composites that write their own).

The decorator ``op`` declares one; ``functions`` and ``methods`` become ``mt.<name>`` and
``Tensor.<name>``.
"""
import inspect
import re
from operator import attrgetter

from microtensor._C.autograd import Formulas, bind_arguments
from microtensor._C.dispatch import call
from microtensor._C.tensor import TensorBase
from microtensor._dtype import can_cast, info, result_type

REGISTRY = {}

# ``<input>_shape`` etc. in a derivative's parameters: metadata read at record time
# (attrgetters: read in C, no Python frame per recorded op)
_METADATA = {
    "_shape": attrgetter("_sizes"),
    "_strides": attrgetter("_strides"),
    "_offset": attrgetter("_offset"),
    "_dtype": attrgetter("_dtype"),
    "_device": attrgetter("device"),
}


def _camel(name):
    """``max_pool2d_with_indices`` -> ``MaxPool2DWithIndices``: PyTorch's node names
    capitalise the ``d`` of a dimension count."""
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"_+", name.strip("_")))
    return re.sub(r"(?<=\d)d(?=[A-Z]|$)", "D", camel)


class Sample:
    """One sample call of an op: positional and keyword arguments."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __repr__(self):
        def short(a):
            return f"Tensor{tuple(a.shape)}" if hasattr(a, "_sizes") else repr(a)
        parts = [short(a) for a in self.args] + [f"{k}={short(v)}" for k, v in self.kwargs.items()]
        return "Sample(" + ", ".join(parts) + ")"


class NormRule:
    """An op's ghost-norm rule: the function, its activation argument and the parameter
    arguments it gives norms for (see ``Op.def_norm_rule``)."""

    def __init__(self, fn, activation, params):
        self.fn = fn
        self.activation = activation
        self.params = params
        self.names = tuple(inspect.signature(fn).parameters)[1:]

    def __call__(self, grad, arguments):
        return self.fn(grad, *(arguments[name] for name in self.names))


class Derivative(Formulas):
    """The backward formulas of one op and the saving plan they imply (the fields the
    engine reads are ``Formulas``', in the Cython core).

    ``formulas``: per input of ``op.inputs``, ``(formula, reads)`` (``reads``: the
    positions in ``saved_names`` of the formula's parameters after ``grad``), or None
    for an input without a formula (its gradient is None); ``joint``: instead, one
    formula returning every input's gradient.  ``saved_plan``: per saved name, ``(name,
    source, read, needed_by)`` (see ``Op._plan_saving``), where ``needed_by`` names the
    inputs whose formulas read it: recording saves it only when one of those requires
    grad (None: always).
    """

    def __init__(self, op):
        self.op = op
        self.formulas = (None,) * len(op.inputs)
        self.joint = None
        self.saved_names = ()
        self.saved_plan = ()
        self.self_entry = self.result_entry = None   # their plan entries, for in-place ops
        self.shortcut = None     # the ``unrecorded`` shortcut's function, once declared

    def functions(self):
        """The formulas, in input order (the joint one alone for a joint derivative)."""
        if self.joint is not None:
            return [self.joint]
        return [entry[0] for entry in self.formulas if entry is not None]

    def _set(self, formulas, joint):
        """Store the formulas (per input, or one ``joint``) and plan the saving: every value
        a formula reads, in the order first read, with the inputs whose formulas read it."""
        served = [(None, joint)] if joint else \
            [(name, fn) for name, fn in zip(self.op.inputs, formulas) if fn]
        reads = {fn: tuple(inspect.signature(fn).parameters)[1:] for _, fn in served}
        readers = {}                         # value -> the inputs whose formulas read it
        for name, fn in served:
            for value in reads[fn]:
                readers.setdefault(value, []).append(name)
        every = [name for name, _ in served]
        names = tuple(readers)
        self.saved_names = names
        # needed_by None when every formula reads it: saved whenever the op is recorded
        self.saved_plan = tuple(
            self.op._plan_saving(value) +
            (None if readers[value] == every else tuple(readers[value]),) for value in names)
        entries = dict(zip(names, self.saved_plan))
        self.self_entry, self.result_entry = entries.get("self"), entries.get("result")
        self.joint = joint
        self.formulas = (None,) * len(self.op.inputs) if joint else tuple(
            (fn, tuple(names.index(value) for value in reads[fn])) if fn else None
            for fn in formulas)
        self._plan_shortcut()

    def _plan_shortcut(self):
        """``unrecorded`` (the engine's field) from ``shortcut``: the function and the
        positions in ``saved_names`` of what it reads after ``grad`` and ``wanted``."""
        if self.shortcut is None:
            self.unrecorded = None
            return
        reads = tuple(inspect.signature(self.shortcut).parameters)[2:]
        unknown = [name for name in reads if name not in self.saved_names]
        if unknown:
            raise TypeError(f"the unrecorded backward of {self.op.name} reads {unknown}, "
                            f"which no formula saves (saved: {self.saved_names})")
        self.unrecorded = (self.shortcut,
                           tuple(self.saved_names.index(name) for name in reads))


class Op:
    """One operator.  See the module docstring for the fields."""

    def __init__(self, name, kernel, *, inputs=("self",), method=True, function=True,
                 kind="function", samples=None, batch_rule=None, family=None,
                 inplace_of=None, differentiable=True, random=False, out=None,
                 out_casting=None, out_layout=None):
        self.name = name
        self.kernel = kernel
        self.inputs = inputs                 # parameters that can carry gradients
        self.method = method
        self.function = function
        self.kind = kind                     # "function", "view", "inplace" or "factory"
        self.samples = samples
        self.batch_rule = batch_rule
        self.family = family
        self.inplace_of = inplace_of         # for ``add_``: the ``add`` Op
        self.differentiable = differentiable
        self.random = random
        # a ``Derivative`` once declared; an in-place variant shares its base op's (a plain
        # attribute: recording reads it for every op)
        self.derivative = inplace_of.derivative if inplace_of else None
        self.norm_rule = None
        self.variants = []                   # in-place variants declared from this op
        if inplace_of is not None:
            inplace_of.variants.append(self)
        self.node_name = _camel(inplace_of.name if inplace_of else name) + "Backward0"
        sig = inspect.signature(kernel)
        self.params = tuple(p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self.defaults = {p.name: p.default for p in sig.parameters.values()
                         if p.default is not p.empty}
        self.varargs = next((p.name for p in sig.parameters.values()
                             if p.kind is p.VAR_POSITIONAL), None)
        self.param_names = frozenset(sig.parameters)
        # a kernel's own ``out`` parameter serves its in-place variant, and tells that
        # PyTorch has an out= variant unless ``out`` says otherwise
        self.out = "out" in self.param_names if out is None else out
        self.out_casting = family == "pointwise" if out_casting is None else out_casting
        self.out_layout = out_layout
        self.input_positions = tuple(self.params.index(n) for n in inputs
                                     if n in self.params)
        # what recording reads of the op on every recorded call, as one attribute
        self.recording = (self.params, self.defaults, self.varargs, inputs, kind == "view")

    @property
    def saved_names(self):
        """What backward may keep alive: the union of the formulas' parameters."""
        return self.derivative.saved_names if self.derivative else ()

    def def_derivative(self, input):
        """Declare the gradient formula for the input called ``input``:
        ``@my_op.def_derivative("other")`` above a function named like the op (the
        decorator returns the op, so the name keeps meaning the op).  The formula returns
        that input's gradient; it runs, and what it reads is saved, only when that input
        requires grad."""
        if input not in self.inputs:
            raise TypeError(f"{self.name} has no differentiable input '{input}' "
                            f"(inputs: {self.inputs})")

        def declare(fn):
            derivative = self._own_derivative()
            if derivative.joint is not None:
                raise TypeError(f"{self.name} already has a joint derivative")
            formulas = [entry[0] if entry else None for entry in derivative.formulas]
            formulas[self.inputs.index(input)] = fn
            derivative._set(formulas, None)
            return self
        return declare

    def def_joint_derivative(self, fn):
        """Declare one formula returning a tuple with every input's gradient, for ops whose
        gradients share work (a decorator, like ``def_derivative``).  Everything it reads
        is saved whichever inputs require grad, as PyTorch does for its joint formulas."""
        derivative = self._own_derivative()
        if any(derivative.formulas):
            raise TypeError(f"{self.name} already has per-input derivatives")
        derivative._set(None, fn)
        return self

    def def_unrecorded_backward(self, fn):
        """Declare a shortcut of the per-input formulas for backward passes that record
        nothing (grad mode off: every ``.backward()`` without ``create_graph``), below
        them (a decorator, like ``def_derivative``).  ``fn(grad, wanted, *saved values by
        name)``, with ``wanted`` a bool per input of ``op.inputs``, returns a gradient per
        input (None where not wanted) equal to what the formulas give, or None when it
        cannot serve the call (then the formulas run).  It may read only values the
        formulas save."""
        derivative = self._own_derivative()
        if derivative.joint is not None:
            raise TypeError(f"{self.name} has a joint derivative")
        derivative.shortcut = fn
        derivative._plan_shortcut()
        return self

    def def_norm_rule(self, fn=None, *, activation="input", params=("weight", "bias")):
        """Declare the ghost-norm rule (``@my_op.def_norm_rule`` above a function named like
        the op; returns the op).  The rule applies to a call under ghost clipping's vmap
        whose ``activation`` argument is batched and whose ``params`` arguments are
        unbatched; its parameters name what it needs: ``grad`` (the output's gradient)
        first, then forward arguments by name, the activation and ``grad`` with the batch
        first.  It returns, for the ``params`` given, ``{param: per-sample squared norms
        [B]}``, or ``{param: (a, g)}``: rows ``a`` [B, T, i] and ``g`` [B, T, o] whose
        ``Σ_t g_t a_tᵀ`` is each sample's gradient (the rows of several calls that share
        the parameter then combine); or NotImplemented for a call it cannot serve."""
        if fn is None:
            return lambda f: self.def_norm_rule(f, activation=activation, params=params)
        self.norm_rule = NormRule(fn, activation, tuple(params))
        return self

    def def_batch_rule(self, fn):
        """Declare how vmap runs this op (``@my_op.def_batch_rule`` above a function named
        like the op; the decorator returns the op, as ``def_derivative`` does).

        A rule has the signature ``rule(op, level, args, kwargs)``: ``args`` and
        ``kwargs`` as the op was called, some of them ``BatchedTensor``s of vmap level
        ``level``.  It unwraps that level only, calls ops on the physical values (they
        come back through the dispatcher: autograd records them, lower vmap levels batch
        them) and wraps the result.  A rule shared by several ops is a plain function
        declared for each, one line per op: ``other.def_batch_rule(shared_rule)``.
        """
        self.batch_rule = fn
        return self

    def _own_derivative(self):
        if self.derivative is None:
            self.derivative = Derivative(self)
            for variant in self.variants:
                variant.derivative = self.derivative
        return self.derivative

    def _plan_saving(self, name):
        """How autograd gets a derivative parameter when recording: ``(name, source,
        read)`` with source "result" (``read``: None for all outputs, ``i`` for
        ``result<i>``, output i alone), "argument" (``read`` unused) or "meta" (``read`` =
        (argument, getter))."""
        if name == "result":
            return name, "result", None
        if name.startswith("result") and name[len("result"):].isdigit():
            return name, "result", int(name[len("result"):])
        if name in self.param_names:
            return name, "argument", None
        for suffix, getter in _METADATA.items():
            argument = name[:-len(suffix)]
            if name.endswith(suffix) and argument in self.param_names:
                return name, "meta", (argument, getter)
        raise TypeError(f"derivative of {self.name} asks for unknown value '{name}'")

    def bind(self, args, kwargs):
        """Forward arguments by parameter name, defaults filled in."""
        return bind_arguments(self.params, self.defaults, self.varargs, args, kwargs)

    def __call__(self, *args, **kwargs):
        return call(self, args, kwargs)

    def __repr__(self):
        return f"<op {self.name}>"


def out_with_dim(arguments):
    """``op(..., out=out_with_dim)``: PyTorch's form that reduces every element (``sum``,
    ``prod``, ``median`` without a ``dim``) takes no ``out=``; the one along ``dim`` does."""
    return arguments["dim"] is not None


def op(name=None, **options):
    """Declare an Op from its kernel function: ``@op()`` or ``@op("name", inputs=...)``."""
    def declare(kernel):
        o = Op(name or kernel.__name__, kernel, **options)
        if o.name in REGISTRY:
            raise ValueError(f"op {o.name} declared twice")
        REGISTRY[o.name] = o
        return o
    return declare


def _refuse_uncastable(base, args, kwargs):
    """PyTorch's first check of an elementwise op written into ``self``: the inputs'
    promoted type must cast into ``self``'s dtype (before any kernel is looked for)."""
    bound = base.bind(args, kwargs)
    # a number counts as the second operand (``add_(0.5)``), not as a third (``lerp_``'s
    # weight, which PyTorch's kernel takes aside)
    promoted = result_type(*[bound[name] for i, name in enumerate(base.inputs)
                             if bound.get(name) is not None and
                             (i < 2 or isinstance(bound[name], TensorBase))])
    target = args[0]._dtype
    if not can_cast(promoted, target):
        raise RuntimeError(f"result type {info(promoted).scalar_name} can't be cast to the "
                           f"desired output type {info(target).scalar_name}")


def inplace_variant(base, name=None, **options):
    """Declare ``<base>_``: the same computation written into ``self``.

    Its kernel is ``base.kernel(..., out=self)`` and its samples the base op's unless
    ``samples`` is given; its derivative is the base op's (declared before this), with the
    old value of ``self`` copied and saved only when a formula that will run reads it.
    ``refuse``, when given, is called with the arguments first: it raises PyTorch's error
    for what the in-place form refuses and the out-of-place one accepts.  An elementwise
    op's inputs must promote to a type that casts into ``self``'s, as PyTorch checks first
    (so its refusal names that, not a missing kernel), unless ``predicate`` (a comparison:
    its truth values are written in ``self``'s dtype).
    """
    refuse = options.pop("refuse", None)
    casts = base.family == "pointwise" and not options.pop("predicate", False)

    def kernel(*args, **kwargs):
        if refuse is not None:
            refuse(*args, **kwargs)
        try:
            return base.kernel(*args, out=args[0], **kwargs)
        except NotImplementedError:
            if casts:
                _refuse_uncastable(base, args, kwargs)
            raise
    kernel.__signature__ = inspect.signature(base.kernel)
    options.setdefault("samples", base.samples)
    o = Op(name or base.name + "_", kernel, inputs=base.inputs, kind="inplace",
           inplace_of=base, family=base.family, function=False, **options)
    REGISTRY[o.name] = o
    return o
