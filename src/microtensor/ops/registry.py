"""The op registry: every operator of microtensor is declared here exactly once.

An ``Op`` bundles what each layer needs to know about one operator:

* ``kernel``: the computation on plain tensors (no autograd, no vmap), written with the
  Cython kernels or with NumPy on zero-copy views of the tensors' storage;
* ``derivative``: the backward formula, written in microtensor ops so that it is itself
  differentiable and vmappable.  Its parameters name what it needs: ``grad`` first, then
  any forward argument by name, and ``result`` for the output (``result1`` for output 1
  alone of a multi-output op).  Autograd saves exactly
  those values (and checks their version counters), nothing more;
* ``batch_rule``: how vmap runs the op on batched tensors; most ops instead name a
  ``family`` ("pointwise", "reduction", "factory", "view", ...) whose shared rule vmap
  applies;
* ``samples``: sample inputs that the test suite runs through every check: a function
  ``samples(make)`` returning a list of ``Sample(*args, **kwargs)``, where
  ``make(*shape, dtype=float64, low=None, high=None)`` (supplied by
  ``microtensor.testing``) makes a random tensor.  The first argument is the tensor the
  method is called on.

The decorator ``op`` declares one; ``functions`` and ``methods`` become ``mt.<name>`` and
``Tensor.<name>``.
"""
import inspect
import re

from microtensor._C.autograd import bind_arguments
from microtensor._C.dispatch import call

REGISTRY = {}

# ``<input>_shape`` etc. in a derivative's parameters: metadata read at record time
_METADATA = {
    "_shape": lambda t: t._sizes,
    "_strides": lambda t: t._strides,
    "_offset": lambda t: t._offset,
    "_dtype": lambda t: t._dtype,
    "_device": lambda t: t.device,
}


def _camel(name):
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"_+", name.strip("_")))


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


class Op:
    """One operator.  See the module docstring for the fields."""

    def __init__(self, name, kernel, *, inputs=("self",), method=True, function=True,
                 kind="function", samples=None, batch_rule=None, family=None,
                 inplace_of=None, differentiable=True, random=False):
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
        self.derivative = None
        self.only_for = {}
        self.saved_names = ()
        self.saved_plan = ()                 # see ``def_derivative``
        self.saves_self = False
        self.node_name = _camel(inplace_of.name if inplace_of else name) + "Backward0"
        sig = inspect.signature(kernel)
        self.params = tuple(p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self.defaults = {p.name: p.default for p in sig.parameters.values()
                         if p.default is not p.empty}
        self.varargs = next((p.name for p in sig.parameters.values()
                             if p.kind is p.VAR_POSITIONAL), None)
        self.param_names = frozenset(sig.parameters)
        self.input_positions = tuple(self.params.index(n) for n in inputs
                                     if n in self.params)

    def def_derivative(self, fn=None, *, only_for=None):
        """Declare the backward formula (``@my_op.def_derivative`` above a function named
        like the op; the decorator returns the op, so the name keeps meaning the op).

        ``only_for={"self": "other"}`` says that the formula reads ``self`` only for the
        gradient of ``other``: when ``other`` needs no gradient, ``self`` is not saved (it
        arrives as None, and the formula returns None for ``other``).  That spares memory,
        false "modified by an inplace operation" errors and work, as PyTorch does.
        """
        if fn is None:
            return lambda f: self.def_derivative(f, only_for=only_for)
        names = tuple(inspect.signature(fn).parameters)[1:]
        self.derivative = fn
        self.only_for = dict(only_for or {})
        self.saved_names = names
        self.saved_plan = tuple(self._plan_saving(n) for n in names)
        self.saves_self = "self" in names
        return self

    def _plan_saving(self, name):
        """How autograd gets a derivative parameter when recording: ``(name, source,
        read)`` with source "result" (``read``: None for all outputs, ``i`` for
        ``result<i>``, output i alone), "argument" (``read``: the ``only_for`` input or
        None) or "meta" (``read`` = (argument, getter))."""
        if name == "result":
            return name, "result", None
        if name.startswith("result") and name[len("result"):].isdigit():
            return name, "result", int(name[len("result"):])
        if name in self.param_names:
            return name, "argument", self.only_for.get(name)
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


def op(name=None, **options):
    """Declare an Op from its kernel function: ``@op()`` or ``@op("name", inputs=...)``."""
    def declare(kernel):
        o = Op(name or kernel.__name__, kernel, **options)
        if o.name in REGISTRY:
            raise ValueError(f"op {o.name} declared twice")
        REGISTRY[o.name] = o
        return o
    return declare


def inplace_variant(base, name=None, **options):
    """Declare ``<base>_``: the same computation written into ``self``.

    Its kernel is ``base.kernel(..., out=self)``; its derivative is the base op's, with the
    old value of ``self`` saved when the formula needs it.
    """
    def kernel(*args, **kwargs):
        return base.kernel(*args, out=args[0], **kwargs)
    kernel.__signature__ = inspect.signature(base.kernel)
    o = Op(name or base.name + "_", kernel, inputs=base.inputs, kind="inplace",
           inplace_of=base, samples=base.samples, family=base.family, function=False,
           **options)
    REGISTRY[o.name] = o
    return o
