"""The op registry: every operator of microtensor is declared here exactly once.

An ``Op`` bundles what each layer needs to know about one operator:

* ``kernel``: the computation on plain tensors (no autograd, no vmap), written with the
  Cython kernels or with NumPy on zero-copy views of the tensors' storage;
* ``derivative``: the backward formula, written in microtensor ops so that it is itself
  differentiable and vmappable.  Its parameters name what it needs: ``grad`` first, then
  any forward argument by name, and ``result`` for the output.  Autograd saves exactly
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

REGISTRY = {}


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
        self.saved_names = ()
        sig = inspect.signature(kernel)
        self.params = tuple(p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self.defaults = {p.name: p.default for p in sig.parameters.values()
                         if p.default is not p.empty}
        self.input_positions = tuple(self.params.index(n) for n in inputs
                                     if n in self.params)

    def def_derivative(self, fn):
        """Declare the backward formula (``@my_op.def_derivative`` above a function named
        like the op; the decorator returns the op, so the name keeps meaning the op)."""
        names = tuple(inspect.signature(fn).parameters)[1:]
        self.derivative = fn
        self.saved_names = names
        return self

    def bind(self, args, kwargs):
        """Forward arguments by parameter name, defaults filled in."""
        values = dict(self.defaults)
        values.update(zip(self.params, args))
        if kwargs:
            values.update(kwargs)
        return values

    def __call__(self, *args, **kwargs):
        from microtensor.ops.dispatch import call
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
