"""The dispatcher hook of vmap and the shared batching rules of the op families.

``handle`` is the hook vmap installs into the dispatcher (``ops.dispatch.set_batching``)
while it is active.  For a call with an argument batched at some level (the dispatcher
finds the innermost such level) it runs the op's batching rule (``rule_for``), in this
order: the rule declared with the op (``@my_op.def_batch_rule``, next to its kernel in
``microtensor/ops``), its base op's for an in-place variant, the rule of the op's
``family``, else the per-sample loop ``fallback``, which warns.  The answer is cached
per op, so a lookup costs one dict access.

The families are declared here, one rule each, and an op joins one with one word in its
declaration (``@op(family="pointwise")``), as JAX's ``defvectorized``/``defbroadcasting``
register whole families of primitives:

* ``pointwise``: batch dims to the front and per-sample dims right-aligned (broadcasting
  stays per sample), then one physical call;
* ``reduction``: ``dim`` shifted past the batch dim, ``dim=None`` meaning every
  per-sample dim.

Random ops are the dispatcher's to route here even without a batched argument
(``random_rule``): a draw per sample or one shared, as vmap's ``randomness`` says.
"""
import operator
from numbers import Integral

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import TensorBase, bool_, from_array
from microtensor._dtype import result_type
from microtensor.ops import dispatch
from microtensor.ops.factory import parse_size
from microtensor.ops.registry import REGISTRY
from microtensor.vmap.batched import active_levels
from microtensor.vmap.helpers import (BatchedTensor, aligned, call, fallback, inplace_error,
                                      no_fallback, same_level, to_front, wrap, wrap_result)

FAMILY_RULES = {}


def family_rule(name):
    """Register the decorated function as the rule of every op of family ``name``."""
    def register(fn):
        FAMILY_RULES[name] = fn
        return fn
    return register


# --------------------------------------------------------------------------- the handler

_resolved = {}


def rule_for(op):
    """The batching rule of ``op`` (see the module docstring for the order), cached."""
    found = _resolved.get(op)
    if found is None:
        base = op.inplace_of
        found = op.batch_rule or (base is not None and base.batch_rule) or \
            FAMILY_RULES.get(op.family) or fallback
        _resolved[op] = found
    return found


def handle(op, level, args, kwargs):
    """The dispatcher hook (``ops.dispatch.set_batching``): a call with an argument batched
    at ``level`` (the innermost such), or of a random op, which vmap must see even on
    unbatched arguments."""
    if op.random:
        return random_rule(op, level, args, kwargs)
    found = _resolved.get(op)
    if found is None:
        found = rule_for(op)
    return found(op, level, args, kwargs)


# --------------------------------------------------------------------------- pointwise

_OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "div": operator.truediv}


def serve_binary_in_core():
    """Let the dispatcher run ``_pointwise_binary``'s commonest case of these operators
    itself (``set_batched_binary``: no Python frame per batched ``a * b``), and call the
    rules ``handle`` has resolved without ``handle``'s frame (``serve_rules``); called with
    ``set_batching``, once every op is declared."""
    dispatch.serve_rules(_resolved)
    for name, fn in _OPERATORS.items():
        op = REGISTRY[name]
        if rule_for(op) is pointwise:
            dispatch.set_batched_binary(op, fn)


@family_rule("pointwise")
def pointwise(op, level, args, kwargs):
    """Batch dims to the front and per-sample dims right-aligned, then one physical op."""
    if not kwargs:
        if len(args) == 1 and args[0]._bdim == 0:
            result = call(op, (args[0]._value,), None)
            if op.kind == "inplace":
                return args[0]
            # a tensor (the common result) wrapped without wrap_result's frame
            return wrap(result, 0, level) if isinstance(result, TensorBase) else \
                wrap_result(result, 0, level)
        if len(args) == 2:
            fast = _pointwise_binary(op, level, args[0], args[1])
            if fast is not None:
                return fast
    if kwargs and kwargs.get("out") is not None:
        raise no_fallback(op)
    inplace = op.kind == "inplace"
    names = list(kwargs) if kwargs else []
    values = list(args) + [kwargs[k] for k in names]
    rank = 0
    for v in values:
        if isinstance(v, TensorBase) and len(v._sizes) > rank:
            rank = len(v._sizes)
    self = args[0]
    if inplace:
        if not same_level(self, level):
            raise inplace_error(op.name)
        if len(self._sizes) < rank:
            shape = meta.broadcast_shapes(*[v._sizes for v in values if isinstance(v, TensorBase)])
            raise RuntimeError(f"output with shape {list(self._sizes)} doesn't match the "
                               f"broadcast shape {list(shape)}")
    physical = []
    scalar_batched = False
    for v in values:
        if same_level(v, level):
            n = len(v._sizes)
            scalar_batched = scalar_batched or n == 0
            p = v._value
            if v._bdim != 0 or n < rank:
                p = aligned(p, v._bdim, n, rank)
            physical.append(p)
        else:
            physical.append(v)
    if scalar_batched:
        _promote_like_samples(op, args, kwargs, values, physical)
    n_args = len(args)
    result = call(op, tuple(physical[:n_args]), dict(zip(names, physical[n_args:])))
    if inplace:
        return self
    return wrap_result(result, 0, level)


def _pointwise_binary(op, level, a, b):
    """The common case: ``a`` batched at dim 0 and ``b`` a number, an unbatched tensor of
    no higher rank, or batched at dim 0 with no higher rank (padded with size-1 dims after
    the batch dim; a per-sample 0-d ``b`` only of ``a``'s dtype, as promotion would differ
    physically)."""
    if type(a) is not BatchedTensor or a._level != level or a._bdim != 0:
        return None
    n = len(a._sizes)
    kind = type(b)
    if kind is float or kind is int or kind is bool:
        pb = b
    elif kind is BatchedTensor:
        rank = len(b._sizes)
        if b._level != level or b._bdim != 0 or rank > n or \
                (rank < n and rank == 0 and b._dtype is not a._dtype):
            return None
        pb = b._value if rank == n else aligned(b._value, 0, rank, n)
    elif isinstance(b, TensorBase):
        if len(b._sizes) > n or (n == 0 and b._dtype is not a._dtype):
            return None
        pb = b
    else:
        return None
    if op.kind == "inplace":
        call(op, (a._value, pb), None)
        return a
    fast = _OPERATORS.get(op.name)
    result = fast(a._value, pb) if fast is not None else call(op, (a._value, pb), None)
    return wrap(result, 0, level)


def _operand_positions(op, args, kwargs):
    positions = [i for i in op.input_positions if i < len(args)]
    if kwargs:
        names = list(kwargs)
        positions += [len(args) + i for i, k in enumerate(names) if k in op.inputs]
    return positions


def _promote_like_samples(op, args, kwargs, values, physical):
    """A per-sample 0-d tensor is physically 1-d, which would raise its priority in type
    promotion; cast it so that the physical op computes in the per-sample result type."""
    positions = _operand_positions(op, args, kwargs)
    logical = result_type(*[values[i] for i in positions])
    actual = result_type(*[physical[i] for i in positions])
    if logical is actual:
        return
    for i in positions:
        v = values[i]
        if isinstance(v, TensorBase) and not v._sizes and v._dtype is not logical \
                and v._dtype is not bool_:
            physical[i] = physical[i].to(logical)


# --------------------------------------------------------------------------- reductions

# Ops for which ``dim=()`` reduces over no dim (each element tested alone), as in PyTorch,
# where the other reductions take it for every dim.
EMPTY_DIM_REDUCES_NOTHING = frozenset({"all", "any"})


@family_rule("reduction")
def reduction(op, level, args, kwargs):
    """Shift ``dim`` past the batch dim; ``dim=None`` (or ``()``) means every per-sample
    dim.  A per-sample scalar gets a size-1 dim to reduce over, removed afterwards."""
    if not kwargs and len(args) == 2 and type(args[1]) is int and op.params[1] == "dim":
        # the common call, ``x.log_softmax(1)``: no binding, the dim shifted positionally
        self = args[0]
        n = len(self._sizes)
        if n and type(self) is BatchedTensor and self._level == level:
            value = to_front(self._value, self._bdim)
            result = call(op, (value, meta.wrap_dim(args[1], n) + 1), None)
            return wrap(result, 0, level) if isinstance(result, TensorBase) else \
                wrap_result(result, 0, level)
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if not same_level(self, level):
        return fallback(op, level, args, kwargs)
    value = to_front(self._value, self._bdim)
    n = self.dim()
    dim = bound.get("dim")
    if type(dim) is int and n:    # the common call, without the Integral checks (slow ABCs)
        bound["dim"] = meta.wrap_dim(dim, n) + 1
        return wrap_result(call(op, (value,), bound), 0, level)
    if n == 0:
        for d in () if dim is None else (dim,) if isinstance(dim, Integral) else dim:
            meta.wrap_dim(d, 0)
        bound["dim"] = 1 if dim is None or isinstance(dim, Integral) else (1,)
        if "keepdim" in bound:
            bound["keepdim"] = False
        result = call(op, (value.unsqueeze(1),), bound)
        return wrap_result(_drop_dim_1(result), 0, level)
    if dim is not None and not isinstance(dim, Integral) and len(dim) == 0 and \
            op.name in EMPTY_DIM_REDUCES_NOTHING:
        bound["dim"] = ()
    elif dim is None or (not isinstance(dim, Integral) and len(dim) == 0):
        bound["dim"] = tuple(range(1, n + 1))
    elif isinstance(dim, Integral):
        bound["dim"] = meta.wrap_dim(dim, n) + 1
    else:
        bound["dim"] = tuple(meta.wrap_dim(d, n) + 1 for d in dim)
    return wrap_result(call(op, (value,), bound), 0, level)


def _drop_dim_1(result):
    if isinstance(result, tuple):
        return type(result)(*map(_drop_dim_1, result)) if hasattr(result, "_fields") else \
            tuple(map(_drop_dim_1, result))
    return result.squeeze(1) if isinstance(result, TensorBase) and result.dim() == 2 else result


# --------------------------------------------------------------------------- random

_RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either "
                 "use the 'same' or 'different' randomness flags on vmap or perform the "
                 "randomness operation out of vmap")


def _random_request(op, args, kwargs):
    """The per-sample shape a random op asks for and ``draw(shape)`` making a plain tensor."""
    kwargs = dict(kwargs or {})
    if op.name in ("rand", "randn"):
        return parse_size(args), lambda shape: dispatch.run_kernel(op, shape, kwargs)
    if op.name == "randint":
        bound = op.bind(args, kwargs)
        low, high, size = bound.pop("low"), bound.pop("high"), bound.pop("size")
        if size is None:
            low, high, size = 0, low, high
        return parse_size((size,)), \
            lambda shape: dispatch.run_kernel(op, (low, high, shape), bound)
    if op.name == "randperm":
        n = args[0] if args else kwargs.pop("n")

        def permutations(shape):
            count = int(np.prod(shape[:-1], dtype=np.int64))
            rows = [dispatch.run_kernel(op, (n,), kwargs)._array() for _ in range(count)]
            stacked = np.stack(rows) if rows else np.empty((0, n), rows and rows[0].dtype
                                                             or np.int64)
            return from_array(np.ascontiguousarray(stacked.reshape(shape)))
        return (n,), permutations
    if op.name in ("rand_like", "randn_like"):
        self = args[0]
        base = REGISTRY[op.name[:-len("_like")]]
        options = {k: v for k, v in kwargs.items() if k != "memory_format"}
        options.setdefault("dtype", self.dtype)
        options.setdefault("device", self.device)
        return tuple(self.shape), lambda shape: dispatch.run_kernel(base, shape, options)
    if op.name == "randint_like":
        # the op itself, on an unbatched stand-in of the drawn shape (its dtype and device)
        bound = op.bind(args, kwargs)
        self = bound.pop("self")
        bound.pop("memory_format")

        def draw(shape):
            template = REGISTRY["new_empty"].kernel(getattr(self, "_value", self), shape)
            return dispatch.run_kernel(op, (template,), bound)
        return tuple(self.shape), draw
    return None, None


def random_rule(op, level, args, kwargs):
    levels = active_levels()
    if any(lv.randomness == "error" for lv in levels):
        raise RuntimeError(_RANDOM_ERROR)
    if op.batch_rule is not None:        # a random op with tensor parameters: its own rule
        return op.batch_rule(op, level, args, kwargs)
    sample_shape, draw = _random_request(op, args, kwargs)
    if draw is None:
        return fallback(op, level, args, kwargs) if level else NotImplemented
    different = [lv for lv in levels if lv.randomness == "different"]
    result = draw(tuple(lv.size for lv in different) + tuple(sample_shape))
    for lv in different:
        result = wrap(result, 0, lv.number)
    return result
