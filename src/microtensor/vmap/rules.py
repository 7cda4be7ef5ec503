"""Batching rules: how each op runs on ``BatchedTensor``s, as ordinary ops on the
physical tensors.

``handle`` is the hook vmap installs into the dispatcher (``ops.dispatch.set_batching``)
while it is active.  For a call with an argument batched at some level (the dispatcher
finds the innermost such level) it looks up the op's rule (an entry of ``RULES`` by op name, else the rule of the op's
``family``, else the per-sample ``fallback``) and runs it.  A rule unwraps only that level
(``batched.unwrap``), calls ops on the physical values (which come back through the
dispatcher, so autograd records them and lower vmap levels batch them) and wraps the
result.  Every rule has the signature ``rule(op, level, args, kwargs)``.

The per-sample semantics live here: dims are shifted past the batch dim, broadcasting is
right-aligned per sample, ``clone``/``contiguous`` make each sample contiguous with the
batch dims outermost, ``as_strided`` reads inside each sample's memory and
``new_empty_strided`` gives each sample exactly the strides asked for.
"""
import operator
from numbers import Integral

import numpy as np

from microtensor._C import meta
from microtensor._C.meta import contiguous_format, preserve_format
from microtensor._C.tensor import TensorBase, bool_, from_array
from microtensor._dtype import result_type
from microtensor.ops import dispatch
from microtensor.ops import copy as copy_ops
from microtensor.ops import linalg
from microtensor.ops import loss as loss_ops
from microtensor.ops import view as view_ops
from microtensor.ops.factory import arange
from microtensor.ops.reduction import EMPTY_DIM_REDUCES_NOTHING
from microtensor.ops.registry import REGISTRY
from microtensor.vmap.batched import (BatchedTensor, active_levels, aligned, batch_size,
                                      to_front, unwrap, wrap)
from microtensor.vmap.fallback import _no_fallback, fallback

call = dispatch.call
RULES = {}
FAMILY_RULES = {}


def rule(*names):
    """Register the decorated function as the batching rule of the named ops."""
    def register(fn):
        for name in names:
            RULES[name] = fn
        return fn
    return register


def family_rule(name):
    def register(fn):
        FAMILY_RULES[name] = fn
        return fn
    return register


# --------------------------------------------------------------------------- the handler

_resolved = {}


def rule_for(op):
    found = _resolved.get(op)
    if found is None:
        found = op.batch_rule or RULES.get(op.name) or FAMILY_RULES.get(op.family) or fallback
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


def wrap_result(result, bdim, level):
    if isinstance(result, TensorBase):
        return wrap(result, bdim, level)
    if isinstance(result, tuple):
        wrapped = [wrap(r, bdim, level) if isinstance(r, TensorBase) else r for r in result]
        return type(result)(*wrapped) if hasattr(result, "_fields") else tuple(wrapped)
    return result


def inplace_error(name):
    return RuntimeError(
        f"vmap: {name}(self, *extra_args) is not possible because there exists a Tensor "
        "`other` in extra_args that has more elements than `self`. This happened due to "
        "`other` being vmapped over but `self` not being vmapped over in a vmap. Please try "
        f"to use out-of-place operators instead of {name}. If said operator is being called "
        "inside the microtensor framework, please file a bug report instead.")


def _same_level(a, level):
    return type(a) is BatchedTensor and a._level == level


# --------------------------------------------------------------------------- pointwise

_OPERATORS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "div": operator.truediv}


@family_rule("pointwise")
def pointwise(op, level, args, kwargs):
    """Batch dims to the front and per-sample dims right-aligned, then one physical op."""
    if not kwargs:
        if len(args) == 1 and args[0]._bdim == 0:
            result = call(op, (args[0]._value,), None)
            return args[0] if op.kind == "inplace" else wrap_result(result, 0, level)
        if len(args) == 2:
            fast = _pointwise_binary(op, level, args[0], args[1])
            if fast is not None:
                return fast
    if kwargs and kwargs.get("out") is not None:
        raise _no_fallback(op)
    inplace = op.kind == "inplace"
    names = list(kwargs) if kwargs else []
    values = list(args) + [kwargs[k] for k in names]
    rank = 0
    for v in values:
        if isinstance(v, TensorBase) and len(v._sizes) > rank:
            rank = len(v._sizes)
    self = args[0]
    if inplace:
        if not _same_level(self, level):
            raise inplace_error(op.name)
        if len(self._sizes) < rank:
            shape = meta.broadcast_shapes(*[v._sizes for v in values if isinstance(v, TensorBase)])
            raise RuntimeError(f"output with shape {list(self._sizes)} doesn't match the "
                               f"broadcast shape {list(shape)}")
    physical = []
    scalar_batched = False
    for v in values:
        if _same_level(v, level):
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


@rule("fill_")
def fill_(op, level, args, kwargs):
    self, value = args[0], (args[1] if len(args) > 1 else kwargs["value"])
    if not _same_level(self, level):
        raise inplace_error("fill_")
    if isinstance(value, TensorBase) and value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    if _same_level(value, level):
        target = to_front(self._value, self._bdim)
        source = aligned(value._value, value._bdim, 0, self.dim())
        call(REGISTRY["copy_"], (target, source), None)
    else:
        call(op, (self._value, value), None)
    return self


@rule("masked_fill", "masked_fill_")
def masked_fill(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, mask, value = bound["self"], bound["mask"], bound["value"]
    if not _same_level(value, level):
        return pointwise(op, level, args, kwargs)
    if value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.dim()} dimension(s).")
    filled = REGISTRY["where"](mask, value.to(self.dtype), self)
    if op.kind == "inplace":
        return self.copy_(filled)
    return filled


# --------------------------------------------------------------------------- reductions

@family_rule("reduction")
def reduction(op, level, args, kwargs):
    """Shift ``dim`` past the batch dim; ``dim=None`` (or ``()``) means every per-sample
    dim.  A per-sample scalar gets a size-1 dim to reduce over, removed afterwards."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if not _same_level(self, level):
        return fallback(op, level, args, kwargs)
    value = to_front(self._value, self._bdim)
    n = self.dim()
    dim = bound.get("dim")
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


@rule("_log_softmax_backward_data")
def log_softmax_backward(op, level, args, kwargs):
    """Both tensors with the batch dim first and ``dim`` shifted past it; per-sample
    scalars get a size-1 dim to work along, removed afterwards."""
    bound = op.bind(args, kwargs)
    grad, output = bound["grad"], bound["output"]
    size = batch_size(level)
    grads = _front_or_expanded(grad, level, size)
    outputs = _front_or_expanded(output, level, size)
    if grad.dim() == 0:
        meta.wrap_dim(bound["dim"], 0)
        result = call(op, (grads.unsqueeze(1), outputs.unsqueeze(1), 1), None)
        return wrap(result.squeeze(1), 0, level)
    dim = meta.wrap_dim(bound["dim"], grad.dim()) + 1
    return wrap(call(op, (grads, outputs, dim), None), 0, level)


def _drop_dim_1(result):
    if isinstance(result, tuple):
        return type(result)(*map(_drop_dim_1, result)) if hasattr(result, "_fields") else \
            tuple(map(_drop_dim_1, result))
    return result.squeeze(1) if isinstance(result, TensorBase) and result.dim() == 2 else result


@rule("argmax", "argmin")
def arg_extremum(op, level, args, kwargs):
    """``dim=None`` indexes the flattened sample: flatten each sample, then reduce dim 1."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    if bound["dim"] is not None:
        return reduction(op, level, args, kwargs)
    value = to_front(self._value, self._bdim)
    flat = value.reshape(value._sizes[0], -1)
    index = call(op, (flat, 1, False), None)
    if bound["keepdim"]:
        index = index.view((value._sizes[0],) + (1,) * self.dim())
    return wrap(index, 0, level)


# --------------------------------------------------------------------------- factories

def _size_args(size):
    from microtensor.ops.factory import parse_size
    return parse_size(size)


@rule("new_empty", "new_zeros", "new_ones")
def new_sized(op, level, args, kwargs):
    value = args[0]._value
    sizes = _size_args(args[1:])
    return wrap(call(op, (value, (batch_size(level),) + sizes), kwargs), 0, level)


@rule("new_full")
def new_full(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    value = bound.pop("self")._value
    size = (batch_size(level),) + _size_args((bound.pop("size"),))
    return wrap(call(op, (value, size), bound), 0, level)


@rule("new_tensor")
def new_tensor(op, level, args, kwargs):
    # the data does not depend on the sample: an unbatched tensor, as in PyTorch
    return dispatch.run_kernel(op, args, kwargs)


@rule("new_empty_strided")
def new_empty_strided(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    value = bound.pop("self")._value
    sizes = _size_args((bound.pop("size"),))
    strides = tuple(int(s) for s in bound.pop("stride"))
    if len(sizes) != len(strides):
        raise RuntimeError(f"new_empty_strided(sizes, strides): dimensionality of sizes "
                           f"({len(sizes)}) must match dimensionality of strides "
                           f"({len(strides)})")
    extent = meta.storage_size_for(sizes, strides)
    physical = call(op, (value, (batch_size(level),) + sizes, (extent,) + strides), bound)
    return wrap(physical, 0, level)


def _empty_per_sample(value, sample_sizes, memory_format, dtype=None, device=None):
    """A fresh physical tensor, batch dim outermost, each sample laid out in
    ``memory_format`` (the channels-last formats act on the sample's own dims)."""
    strides = meta.strides_for_format(tuple(sample_sizes), memory_format)
    numel = 1
    for s in sample_sizes:
        numel *= s
    kwargs = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device is not None:
        kwargs["device"] = device
    return value.new_empty_strided((value.shape[0],) + tuple(sample_sizes),
                                   (numel,) + tuple(strides), **kwargs)


@family_rule("factory")
def factory(op, level, args, kwargs):
    """A factory op declared later: ``new_*`` take per-sample sizes, ``*_like`` copy the
    per-sample shape."""
    if op.name.endswith("_like"):
        return like(op, level, args, kwargs)
    if op.name.startswith("new_"):
        return new_sized(op, level, args, kwargs)
    return fallback(op, level, args, kwargs)


@rule("empty_like", "zeros_like", "ones_like", "full_like")
def like(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    fmt = bound.get("memory_format", preserve_format)
    if fmt is preserve_format:
        return wrap(call(op, (self._value,), bound), self._bdim, level)
    value = to_front(self._value, self._bdim)
    if fmt is contiguous_format:
        return wrap(call(op, (value,), bound), 0, level)
    out = _empty_per_sample(value, self._sizes, fmt, bound.get("dtype"), bound.get("device"))
    fill = {"zeros_like": 0, "ones_like": 1}.get(op.name, bound.get("fill_value"))
    if fill is not None:
        out.fill_(fill)
    if bound.get("requires_grad"):
        out.requires_grad_()
    return wrap(out, 0, level)


# --------------------------------------------------------------------------- random

_RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either "
                 "use the 'same' or 'different' randomness flags on vmap or perform the "
                 "randomness operation out of vmap")


def _random_request(op, args, kwargs):
    """The per-sample shape a random op asks for and ``draw(shape)`` making a plain tensor."""
    kwargs = dict(kwargs or {})
    if op.name in ("rand", "randn"):
        return _size_args(args), lambda shape: dispatch.run_kernel(op, shape, kwargs)
    if op.name == "randint":
        bound = op.bind(args, kwargs)
        low, high, size = bound.pop("low"), bound.pop("high"), bound.pop("size")
        if size is None:
            low, high, size = 0, low, high
        return _size_args((size,)), \
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
    return None, None


def random_rule(op, level, args, kwargs):
    levels = active_levels()
    if any(lv.randomness == "error" for lv in levels):
        raise RuntimeError(_RANDOM_ERROR)
    sample_shape, draw = _random_request(op, args, kwargs)
    if draw is None:
        return fallback(op, level, args, kwargs) if level else NotImplemented
    different = [lv for lv in levels if lv.randomness == "different"]
    result = draw(tuple(lv.size for lv in different) + tuple(sample_shape))
    for lv in different:
        result = wrap(result, 0, lv.number)
    return result


# --------------------------------------------------------------------------- copies

def _copy_with_format(op, level, self, memory_format, options):
    """``clone``/``_to_copy`` of a batched tensor in ``memory_format``, per sample."""
    if memory_format is preserve_format:
        # the physical layout is kept, batch dim where it was
        options["memory_format"] = preserve_format
        return wrap(call(op, (self._value,), options), self._bdim, level)
    value = to_front(self._value, self._bdim)
    if memory_format is contiguous_format:
        options["memory_format"] = contiguous_format
        return wrap(call(op, (value,), options), 0, level)
    out = _empty_per_sample(value, self._sizes, memory_format, options.get("dtype"),
                            options.get("device"))
    return wrap(out.copy_(value), 0, level)


@rule("clone")
def clone(op, level, args, kwargs):
    fmt = kwargs.get("memory_format", preserve_format) if kwargs else preserve_format
    return _copy_with_format(op, level, args[0], fmt, {})


@rule("_to_copy")
def to_copy(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    fmt = bound.pop("memory_format", preserve_format)
    return _copy_with_format(op, level, self, fmt, bound)


@rule("copy_")
def copy_(op, level, args, kwargs):
    self, src = args[0], (args[1] if len(args) > 1 else kwargs["src"])
    if not _same_level(self, level):
        raise inplace_error("copy_")
    if isinstance(src, TensorBase):
        copy_ops.check_broadcastable_to(src, self)
    n = self.dim()
    target = to_front(self._value, self._bdim)
    if _same_level(src, level):
        src = aligned(src._value, src._bdim, src.dim(), n)
    call(op, (target, src), None)
    return self


# --------------------------------------------------------------------------- views

def _actual(d, bdim):
    return d if d < bdim else d + 1


def _logical_dim(dim, self):
    return meta.wrap_dim(dim, len(self._sizes))


def _sizes_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


@rule("view", "_unsafe_view")
def view(op, level, args, kwargs):
    self, shape = args[0], args[1:]
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        raise TypeError("view(dtype) is not supported; use .to(dtype)")
    sizes = tuple(meta.infer_size(_sizes_arg(shape), self._numel))
    if meta.view_strides(self._sizes, self._strides, sizes) is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride "
                           "(at least one dimension spans across two contiguous subspaces). "
                           "Use .reshape(...) instead.")
    value = to_front(self._value, self._bdim)
    return wrap(call(op, (value, (value._sizes[0],) + sizes), None), 0, level)


@rule("transpose")
def transpose(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, dim0, dim1 = bound["self"], bound["dim0"], bound["dim1"]
    if not self._sizes:
        meta.wrap_dim(dim0, 0), meta.wrap_dim(dim1, 0)
        return self
    b = self._bdim
    a0 = _actual(_logical_dim(dim0, self), b)
    a1 = _actual(_logical_dim(dim1, self), b)
    return wrap(call(op, (self._value, a0, a1), None), b, level)


@rule("permute")
def permute(op, level, args, kwargs):
    self = args[0]
    wrapped = view_ops.permutation(_sizes_arg(args[1:] if not kwargs else (kwargs["dims"],)),
                                   self.dim())
    b = self._bdim
    order = [_actual(d, b) for d in wrapped]
    order.insert(b, b)
    return wrap(call(op, (self._value, tuple(order)), None), b, level)


@rule("select")
def select(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    d, index = view_ops.selected(self, bound["dim"], bound["index"])
    b = self._bdim
    p = _actual(d, b)
    return wrap(call(op, (self._value, p, index), None), b if p > b else b - 1, level)


@rule("narrow", "slice")
def narrow_or_slice(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if op.name == "narrow" and self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    bound["dim"] = _actual(_logical_dim(bound["dim"], self), self._bdim)
    return wrap(call(op, (self._value,), bound), self._bdim, level)


@rule("unsqueeze")
def unsqueeze(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    d = meta.wrap_dim(bound["dim"], self.dim() + 1)
    b = self._bdim
    p = d if d < b else d + 1
    return wrap(call(op, (self._value, p), None), b + 1 if p <= b else b, level)


@rule("squeeze")
def squeeze(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, dim = bound["self"], bound.get("dim")
    n = self.dim()
    if dim is None:
        dims = [i for i, s in enumerate(self._sizes) if s == 1]
    else:
        dims = [meta.wrap_dim(d, n) for d in ((dim,) if isinstance(dim, Integral) else dim)]
        dims = [d for d in dims if self._sizes[d] == 1]
    b = self._bdim
    physical = tuple(_actual(d, b) for d in dims)
    new_bdim = b - sum(1 for p in physical if p < b)
    return wrap(call(op, (self._value, physical), None), new_bdim, level)


@rule("expand")
def expand(op, level, args, kwargs):
    self = args[0]
    sizes = _sizes_arg(args[1:] if not kwargs else (kwargs["sizes"],))
    n = self.dim()
    meta.expand_strides(self._sizes, self._strides, sizes)
    final = tuple(s if s != -1 else self._sizes[i - (len(sizes) - n)]
                  for i, s in enumerate(sizes))
    value = aligned(self._value, self._bdim, n, len(sizes))
    return wrap(call(op, (value, (value._sizes[0],) + final), None), 0, level)


@rule("diagonal")
def diagonal(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    n = self.dim()
    d1, d2 = meta.wrap_dim(bound["dim1"], n), meta.wrap_dim(bound["dim2"], n)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {bound['dim1']}, "
                           f"{bound['dim2']}")
    b = self._bdim
    p1, p2 = _actual(d1, b), _actual(d2, b)
    new_bdim = b - (p1 < b) - (p2 < b)
    return wrap(call(op, (self._value, bound["offset"], p1, p2), None), new_bdim, level)


@rule("unfold")
def unfold(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, size, step = bound["self"], bound["size"], bound["step"]
    n = self.dim()
    d = meta.wrap_dim(bound["dimension"], max(n, 1))
    dim_size = self._sizes[d] if n else 1
    if size > dim_size:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {dim_size} but size "
                           f"is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    b = self._bdim
    if n == 0:
        value = to_front(self._value, b).unsqueeze(1)
        return wrap(call(op, (value, 1, size, step), None).squeeze(1), 0, level)
    return wrap(call(op, (self._value, _actual(d, b), size, step), None), b, level)


@rule("as_strided")
def as_strided(op, level, args, kwargs):
    """Each sample gets ``size``/``stride``; ``storage_offset`` is read inside each sample's
    own memory (sample ``i`` is shifted by its distance from sample 0)."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    sizes = tuple(int(s) for s in bound["size"])
    strides = tuple(int(s) for s in bound["stride"])
    if len(sizes) != len(strides):
        raise RuntimeError(f"Tensor.as_strided(size, stride, ...): size and stride must have "
                           f"the same length! Got size {list(sizes)} and stride "
                           f"{list(strides)}")
    value = self._value
    base = value._offset
    offset = base if bound["storage_offset"] is None else int(bound["storage_offset"])
    _check_inside_sample(self, sizes, strides, offset, base)
    physical = call(op, (value, (value._sizes[self._bdim],) + sizes,
                         (value._strides[self._bdim],) + strides, offset), None)
    return wrap(physical, 0, level)


def _check_inside_sample(self, sizes, strides, offset, base):
    needed = meta.storage_size_for(sizes, strides)
    if not needed:
        return
    request = f"result = tensor.as_strided({list(sizes)}, {list(strides)}, {offset}) "
    available = meta.storage_size_for(self._sizes, self._strides)
    if not available:
        raise RuntimeError(
            request + "can access memory outside of `tensor`. `tensor` has no storage but the "
            "passed-in (size, stride, storage_offset) imply a result with some storage. This "
            "is not supported inside of vmap, please try to rewrite the `as_strided` call as a "
            "sequence of view operations")
    if offset < base or offset + needed > base + available:
        raise RuntimeError(
            request + f"can access memory outside of `tensor`. `result` can access some memory "
            f"in range [{offset}, {offset + needed}], but `tensor` can only access some memory "
            f"in range [{base}, {base + available}]. This is not supported inside of vmap, "
            "please try to rewrite the `as_strided` call as a sequence of view operations")


@rule("alias", "detach")
def alias(op, level, args, kwargs):
    self = args[0]
    return wrap(call(op, (self._value,), None), self._bdim, level)


# --------------------------------------------------------------------------- linalg

_FIXED_RANKS = {"mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1)}
_RANK_ERRORS = {
    "mm": lambda a, b: "self must be a matrix" if a != 2 else "mat2 must be a matrix",
    "bmm": lambda a, b: "batch1 must be a 3D tensor" if a != 3 else "batch2 must be a 3D tensor",
    "mv": lambda a, b: f"vector + matrix @ vector expected, got 1, {a}, {b}",
    "dot": lambda a, b: f"1D tensors expected, but got {a}D and {b}D tensors",
}


def _check_product(op, a, b):
    """The op's own errors, raised for one sample's shapes."""
    ranks = _FIXED_RANKS.get(op.name)
    if ranks is not None and (a.dim(), b.dim()) != ranks:
        raise RuntimeError(_RANK_ERRORS[op.name](a.dim(), b.dim()))
    if op.name == "bmm" and (a._sizes[0], a._sizes[2]) != (b._sizes[0], b._sizes[1]):
        raise linalg._batch_size_error(a._sizes[0], a._sizes[2], b._sizes[0], b._sizes[1])
    linalg._matmul_shape(a, b)
    kind = "bmm" if op.name == "bmm" else "dot" if a.dim() == b.dim() == 1 else "mm"
    linalg._check_same_dtype(a, b, kind)


@rule("matmul", "mm", "bmm", "mv", "dot")
def matmul(op, level, args, kwargs):
    """Every matrix product as one physical ``matmul``: vectors become 1-row/1-column
    matrices, batched operands get the batch dim first and equal per-sample ranks, and
    unbatched operands broadcast over the batch."""
    a, b = op.bind(args, kwargs)[op.params[0]], op.bind(args, kwargs)[op.params[1]]
    _check_product(op, a, b)
    ra, rb = a.dim(), b.dim()
    folded = _fold_batch_into_rows(a, b, level)
    if folded is not None:
        return folded
    rank = max(ra, rb, 2)
    pa = _as_matrix_operand(a, level, rank, -2 if ra == 1 else None)
    pb = _as_matrix_operand(b, level, rank, -1 if rb == 1 else None)
    result = call(REGISTRY["matmul"], (pa, pb), None)
    if rb == 1:
        result = result.squeeze(-1)
    if ra == 1:
        result = result.squeeze(-1 if rb == 1 else -2)
    return wrap(result, 0, level)


@rule("linear")
def linear(op, level, args, kwargs):
    """Shared weights: the samples are just more rows of one call.  Per-sample weights: one
    call on the stacked weights ``(B, ..., out, in)``, which the kernel broadcasts."""
    bound = op.bind(args, kwargs)
    x, w, b = bound["input"], bound["weight"], bound["bias"]
    linalg.check_linear(x, w, b)
    if not _same_level(w, level) and not _same_level(b, level):
        return wrap(call(op, (to_front(x._value, x._bdim), w, b), None), 0, level)
    if w.dim() == 1:       # per-sample weight vectors: a product and a sum, batched as such
        out = call(REGISTRY["matmul"], (x, w), None)
        return out if b is None else out + b
    size = batch_size(level)
    # per sample, the weights may already be stacked (..., out, in) by an outer level:
    # inputs (rows of them), weights and bias are right-aligned behind the batch dim
    rank = max(x.dim(), 2, w.dim())
    inputs = aligned(_front_or_expanded(x, level, size), 0, x.dim(), rank)
    weights = aligned(_front_or_expanded(w, level, size), 0, w.dim(), rank)
    biases = None if b is None else aligned(_front_or_expanded(b, level, size), 0, b.dim(),
                                            rank - 1)   # stacked like the weights
    out = call(op, (inputs, weights, biases), None)
    return wrap(out.squeeze(-2) if x.dim() == 1 else out, 0, level)


def _fold_batch_into_rows(a, b, level):
    """One big matrix product instead of a batch of small ones, when one operand is a
    plain (unbatched) matrix: per-sample rows ``(B, ..., k) @ (k, m)`` are just more rows
    (``x @ W.T`` in every per-sample linear layer), and ``W @ v`` per sample is
    ``V @ W.T`` with the batch as rows."""
    a_batched, b_batched = _same_level(a, level), _same_level(b, level)
    if a_batched and not b_batched and b.dim() == 2:
        rows = to_front(a._value, a._bdim)
        count = 1
        for size in rows.shape[:-1]:
            count *= size
        flat = rows.reshape(count, rows.shape[-1])
        product = call(REGISTRY["matmul"], (flat, b), None)
        return wrap(product.reshape(tuple(rows.shape[:-1]) + (b.shape[1],)), 0, level)
    if b_batched and not a_batched and a.dim() == 2 and b.dim() == 1:
        vectors = to_front(b._value, b._bdim)
        return wrap(call(REGISTRY["matmul"], (vectors, a.mT), None), 0, level)
    return None


def _as_matrix_operand(t, level, rank, vector_dim):
    value, bdim = unwrap(t, level)
    if bdim is not None:
        value = to_front(value, bdim)
    if vector_dim is not None:
        value = value.unsqueeze(vector_dim)
    if bdim is None:
        return value
    return aligned(value, 0, 2 if vector_dim is not None else t.dim(), rank)


# --------------------------------------------------------------------------- joining, splitting

def _front_or_expanded(t, level, size):
    """``t`` physically with the batch dim first: moved there if batched, else expanded
    (stride 0, no copy)."""
    if _same_level(t, level):
        return to_front(t._value, t._bdim)
    return t.unsqueeze(0).expand((size,) + tuple(t.shape))


@rule("_cat")
def cat(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    size = batch_size(level)
    # the samples' legacy empty tensors (skipped: size None) are left out of the physical
    # call, where they are no longer 1-D and their gradient could not be an empty 1-D one
    kept = [(t, n) for t, n in zip(bound["tensors"], bound["sizes"]) if n is not None]
    tensors = [_front_or_expanded(t, level, size) for t, _ in kept]
    return wrap(call(op, (tensors, bound["dim"] + 1, [n for _, n in kept]), None), 0, level)


@rule("split", "split_with_sizes", "unbind")
def split(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    n, b = self.dim(), self._bdim
    if n == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor") \
            if op.name != "unbind" else IndexError("Dimension specified as 0 but tensor has no "
                                                   "dimensions")
    p = _actual(meta.wrap_dim(bound["dim"], n), b)
    bound["dim"] = p
    pieces = call(op, (self._value,), bound)
    new_bdim = b - 1 if op.name == "unbind" and p < b else b
    return tuple(wrap(piece, new_bdim, level) for piece in pieces)


@rule("roll")
def roll(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, shifts, dims = bound["self"], bound["shifts"], bound["dims"]
    value = to_front(self._value, self._bdim)
    if dims is None or (not isinstance(dims, Integral) and len(dims) == 0):
        flat = value.reshape(value._sizes[0], -1)
        rolled = call(op, (flat, shifts, 1), None)
        return wrap(rolled.view(value._sizes), 0, level)
    dims = (dims,) if isinstance(dims, Integral) else tuple(dims)
    n = max(self.dim(), 1)
    if self.dim() == 0:
        return wrap(value.clone(), 0, level)
    return wrap(call(op, (value, shifts, tuple(meta.wrap_dim(d, n) + 1 for d in dims)), None),
                0, level)


@rule("flip")
def flip(op, level, args, kwargs):
    self = args[0]
    dims = _sizes_arg(args[1:] if not kwargs else (kwargs["dims"],))
    b = self._bdim
    physical = tuple(_actual(meta.wrap_dim(d, self.dim()), b) for d in dims) if self.dim() \
        else ()
    return wrap(call(op, (self._value,) + physical, None), b, level)


@rule("repeat")
def repeat(op, level, args, kwargs):
    self = args[0]
    sizes = _sizes_arg(args[1:] if not kwargs else (kwargs["sizes"],))
    if len(sizes) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    value = aligned(self._value, self._bdim, self.dim(), len(sizes))
    return wrap(call(op, (value, (1,) + sizes), None), 0, level)


# --------------------------------------------------------------------------- matrices

@rule("tril", "triu", "tril_", "triu_")
def triangle(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    if not _same_level(self, level):
        raise inplace_error(op.name)
    if self.dim() < 2:
        raise RuntimeError(f"{op.name.rstrip('_')}: input tensor must have at least 2 dimensions")
    if bound.pop("out", None) is not None:
        raise _no_fallback(op)
    result = call(op, (to_front(self._value, self._bdim),), bound)
    return self if op.kind == "inplace" else wrap(result, 0, level)


@rule("trace")
def trace(op, level, args, kwargs):
    self = args[0]
    if self.dim() != 2:
        raise RuntimeError("trace: expected a matrix, but got tensor with dim " f"{self.dim()}")
    value = to_front(self._value, self._bdim)
    return wrap(value.diagonal(0, 1, 2).sum(-1), 0, level)


@rule("diag")
def diag(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, offset = bound["self"], bound["diagonal"]
    value = to_front(self._value, self._bdim)
    if self.dim() == 1:
        return wrap(REGISTRY["diag_embed"](value, offset, -2, -1), 0, level)
    if self.dim() != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " f"{self.dim()}D")
    return wrap(value.diagonal(offset, 1, 2).clone(), 0, level)


@rule("diag_embed")
def diag_embed(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound["self"]
    n = self.dim() + 1
    d1, d2 = meta.wrap_dim(bound["dim1"], n), meta.wrap_dim(bound["dim2"], n)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {bound['dim1']}, "
                           f"{bound['dim2']}")
    value = to_front(self._value, self._bdim)
    return wrap(call(op, (value, bound["offset"], d1 + 1, d2 + 1), None), 0, level)


# --------------------------------------------------------------------------- indexing

def _prepared(bound, names, level, size):
    """The named tensor arguments with the batch dim first (per-sample scalars as
    1-element vectors, as the dim-wise index ops treat them)."""
    for name in names:
        t = bound.get(name)
        if isinstance(t, TensorBase):
            p = _front_or_expanded(t, level, size)
            bound[name] = p.unsqueeze(1) if t.dim() == 0 else p


def _check_indexed_write(op, bound, self, level):
    """An in-place variant needs ``self`` batched; ``out=`` has no batching rule."""
    if op.kind == "inplace" and not _same_level(self, level):
        raise inplace_error(op.name)
    if bound.pop("out", None) is not None:
        raise _no_fallback(op)


@rule("gather", "scatter", "scatter_", "scatter_add", "scatter_add_")
def dimwise_index(op, level, args, kwargs):
    """Every tensor argument batched (unbatched ones expanded) and ``dim`` shifted."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    _check_indexed_write(op, bound, self, level)
    result_rank = bound["index"].dim() if op.name == "gather" else self.dim()
    bound["dim"] = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    _prepared(bound, ("self", "index", "src"), level, batch_size(level))
    result = call(op, (bound.pop("self"),), bound)
    if op.kind == "inplace":
        return self
    return wrap(result.squeeze(1) if result_rank == 0 else result, 0, level)


def _index_spread(index, like, d):
    """A per-sample 1-D ``index`` (physical ``(B, k)``) placed at dim ``d`` of ``like``'s
    shape, for gather/scatter."""
    shape = [index._sizes[0]] + [1] * (like.dim() - 1)
    shape[d] = index._sizes[1]
    sizes = list(like._sizes)
    sizes[d] = index._sizes[1]
    return index.view(shape).expand(sizes)


# --------------------------------------------------------------------------- losses

def _targets_and_weights(target, weight, ignore_index, level, size, dtype):
    """Physical targets (batch dim first) and each row's class weight (0 where ignored),
    or the targets as they are and None without class weights (the op itself then drops
    ignored targets).  Class weights may be batched: ignored targets read class 0."""
    targets = _front_or_expanded(target, level, size)
    if weight is None:
        return targets, None
    valid = targets != ignore_index
    picked = targets.masked_fill(~valid, 0)
    per_sample = _front_or_expanded(weight, level, size)
    weights = valid.to(dtype) * per_sample.gather(1, picked.reshape(size, -1)).reshape(
        targets.shape)
    return picked, weights


def _total_weight(targets, weights, ignore_index, size):
    """Each sample's total target weight, "mean"'s denominator: a number, the rows per
    sample, when there are no class weights and no target is ignored (read from the
    physical targets when they hold concrete values), else a tensor of totals."""
    rows = targets._numel // size
    if weights is None:
        values = targets._array() if type(targets) is not BatchedTensor else None
        if isinstance(values, np.ndarray) and not (values == ignore_index).any():
            return rows
        return (targets != ignore_index).reshape(size, rows).sum(1)
    return weights.reshape(size, rows).sum(1)


def _over(values, total):
    """``values / total``, skipped for a total of exactly one row."""
    return values if type(total) is int and total == 1 else values / total


def _sample_sums(losses, size):
    """Per-sample sums of the flat physical ``losses`` (the samples' rows in order)."""
    rows = losses._numel // size
    return losses if rows == 1 else losses.reshape(size, rows).sum(1)


@rule("nll_loss")
def nll_loss(op, level, args, kwargs):
    """Every sample's rows in one unweighted call with reduction "none", then weighted and
    reduced per sample (over the sample's own total weight for "mean")."""
    bound = op.bind(args, kwargs)
    self, target, weight = bound["self"], bound["target"], bound["weight"]
    ignore_index = bound["ignore_index"]
    loss_ops.check_arguments(self._sizes, self._dtype, target, weight, bound["reduction"])
    size = batch_size(level)
    inputs = _front_or_expanded(self, level, size)
    targets, weights = _targets_and_weights(target, weight, ignore_index, level, size,
                                            inputs.dtype)
    losses = call(op, (inputs.reshape(-1, inputs.shape[-1]), targets.reshape(-1)),
                  {"reduction": "none", "ignore_index": ignore_index})
    if weights is not None:
        losses = losses * weights.reshape(-1)
    if bound["reduction"] == "none":
        return wrap(losses.reshape(targets.shape), 0, level)
    losses = _sample_sums(losses, size)
    if bound["reduction"] == "mean":
        losses = _over(losses, _total_weight(targets, weights, ignore_index, size))
    return wrap(losses, 0, level)


@rule("nll_loss_backward")
def nll_loss_backward(op, level, args, kwargs):
    """A reduced loss's per-sample gradient spread over the sample's rows (over its total
    weight for "mean"), weighted, then one unweighted call with reduction "none"."""
    bound = op.bind(args, kwargs)
    ignore_index = bound["ignore_index"]
    size = batch_size(level)
    grads = _front_or_expanded(bound["grad"], level, size)
    targets, weights = _targets_and_weights(bound["target"], bound["weight"], ignore_index,
                                            level, size, grads.dtype)
    if bound["reduction"] != "none":
        if bound["reduction"] == "mean":
            grads = _over(grads, _total_weight(targets, weights, ignore_index, size))
        grads = grads.reshape((size,) + (1,) * (targets.dim() - 1)).expand(targets.shape)
    if weights is not None:
        grads = grads * weights
    sample_shape = tuple(bound["self_shape"])
    result = call(op, (grads.reshape(-1), (targets._numel, sample_shape[-1]),
                       targets.reshape(-1)),
                  {"reduction": "none", "ignore_index": ignore_index})
    return wrap(result.reshape((size,) + sample_shape), 0, level)


@rule("index_select")
def index_select(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index = bound["self"], bound["index"]
    size = batch_size(level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    value = _front_or_expanded(self, level, size)
    if self.dim() == 0:
        value = value.unsqueeze(1)
    if not _same_level(index, level):
        result = call(op, (value, d, index), None)
    else:
        positions = to_front(index._value, index._bdim).reshape(size, -1)
        result = REGISTRY["gather"](value, d, _index_spread(positions, value, d))
    return wrap(result.squeeze(1) if self.dim() == 0 else result, 0, level)


@rule("index_add", "index_add_")
def index_add(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index, source = bound["self"], bound["index"], bound["source"]
    _check_indexed_write(op, bound, self, level)
    size = batch_size(level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1)) + 1
    bound["self"], bound["source"] = self, source
    _prepared(bound, ("self", "source"), level, size)
    target, values = bound["self"], bound["source"]
    if not _same_level(index, level):
        result = call(op, (target, d, index, values), {"alpha": bound["alpha"]})
    else:
        positions = _index_spread(to_front(index._value, index._bdim).reshape(size, -1),
                                  values, d)
        if bound["alpha"] != 1:
            values = values * bound["alpha"]
        scatter = REGISTRY["scatter_add_" if op.kind == "inplace" else "scatter_add"]
        result = call(scatter, (target, d, positions, values), None)
    if op.kind == "inplace":
        return self
    return wrap(result.squeeze(1) if self.dim() == 0 else result, 0, level)


@rule("index_fill", "index_fill_")
def index_fill(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index, value = bound["self"], bound["index"], bound["value"]
    _check_indexed_write(op, bound, self, level)
    d = meta.wrap_dim(bound["dim"], max(self.dim(), 1))
    if self.dim() and _same_level(self, level) and not _same_level(index, level) \
            and not _same_level(value, level):
        result = call(op, (to_front(self._value, self._bdim), d + 1, index, value), None)
        return self if op.kind == "inplace" else wrap(result, 0, level)
    # a per-sample value or index: fill through a mask of the chosen positions
    mask = _index_mask(self, d, index, level)
    filled = REGISTRY["where"](mask, value, self).to(self.dtype)
    return self.copy_(filled) if op.kind == "inplace" else filled


def _index_mask(self, d, index, level):
    """True where ``index_fill(d, index)`` writes, per sample."""
    shape = tuple(self.shape) or (1,)
    if not _same_level(index, level):
        mask = index.new_zeros(shape, dtype=bool_).index_fill_(d, index, True)
        return mask.view(tuple(self.shape))
    size = batch_size(level)
    mask = index._value.new_zeros((size,) + shape, dtype=bool_)
    positions = to_front(index._value, index._bdim).reshape(size, -1)
    positions = REGISTRY["where"](positions < 0, positions + shape[d], positions)
    mask.scatter_(d + 1, _index_spread(positions, mask, d + 1), value=True)
    return wrap(mask.view((size,) + tuple(self.shape)), 0, level)


@rule("take")
def take(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, index = bound["self"], bound["index"]
    size = batch_size(level)
    flat = _front_or_expanded(self, level, size).reshape(size, -1)
    positions = _front_or_expanded(index, level, size).reshape(size, -1)
    positions = REGISTRY["where"](positions < 0, positions + max(self.numel(), 1), positions)
    picked = REGISTRY["gather"](flat, 1, positions)
    return wrap(picked.view((size,) + tuple(index.shape)), 0, level)


def _index_result_bdim(indices):
    """Where NumPy's advanced indexing puts the batch dim (a leading full slice): first,
    unless the index tensors are not adjacent, in which case their broadcast dims go first."""
    positions = [i for i, e in enumerate(indices) if e is not None]
    if not positions or positions[-1] - positions[0] + 1 == len(positions):
        return 0
    return max(1 if e._dtype is bool_ else e.dim() for e in indices if e is not None)


def _per_sample_indices(indices, level, size):
    """Physical indices for ``self[indices]`` per sample when some index tensors differ
    per sample (``self`` physical with its batch dim first): a leading ``arange`` index
    picks each sample, broadcast against the index tensors (the batched ones aligned after
    their batch dim).  Also where the result's per-sample dims must move: NumPy puts the
    broadcast dims first once the ``arange`` makes the index tensors non-adjacent, while
    per sample they stay in place when adjacent.  Returns (indices, (from, to) or None)."""
    rank = max(e.dim() for e in indices if e is not None)
    physical = []
    for e in indices:
        if _same_level(e, level):
            e = aligned(e._value, e._bdim, e.dim(), rank)
        physical.append(e)
    first = next(e for e in physical if e is not None)
    picks = arange(size, device=first.device).view((size,) + (1,) * rank)
    positions = [i for i, e in enumerate(indices) if e is not None]
    move = None
    if positions[0] > 0 and positions == list(range(positions[0], positions[-1] + 1)):
        move = (tuple(range(1, 1 + rank)),
                tuple(range(1 + positions[0], 1 + positions[0] + rank)))
    return (picks,) + tuple(physical), move


def _per_sample_masks(indices, level):
    """Boolean masks that differ per sample (each sample may select a different number of
    elements, so no single physical op computes them), or 0-d masks beside index tensors
    that do."""
    masks = [e for e in indices if e is not None and e.dtype is bool_]
    return any(_same_level(e, level) for e in masks) or \
        (any(e.dim() == 0 for e in masks) and any(_same_level(e, level) for e in indices))


def _masks_as_positions(indices):
    """Boolean masks (the same for every sample) as the integer index tensors of their True
    positions, as NumPy reads them, so that they broadcast with per-sample index tensors."""
    out = []
    for e in indices:
        if e is None or e.dtype is not bool_:
            out.append(e)
            continue
        for j, n in enumerate(e.shape):     # the j-th coordinate of each True, row-major
            along = arange(n, device=e.device).view((n,) + (1,) * (e.dim() - 1 - j))
            out.append(REGISTRY["masked_select"](along, e))
    return tuple(out)


@rule("index")
def index(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, indices = bound["self"], tuple(bound["indices"])
    if _per_sample_masks(indices, level):
        return fallback(op, level, args, kwargs)
    if not any(_same_level(e, level) for e in indices):
        result = call(op, (to_front(self._value, self._bdim), (None,) + indices), None)
        return wrap(result, _index_result_bdim(indices), level)
    size = batch_size(level)
    physical, move = _per_sample_indices(_masks_as_positions(indices), level, size)
    result = call(op, (_front_or_expanded(self, level, size), physical), None)
    return wrap(result if move is None else result.movedim(*move), 0, level)


def _index_result_rank(self, indices):
    """The rank of ``self[indices]`` per sample, without reading the indices (they may be
    batched at an outer level): a mask is one dim in place of the ``dim()`` it covers."""
    tensors = [e for e in indices if e is not None]
    covered = sum(e.dim() if e.dtype is bool_ else 1 for e in tensors)
    rank = max((1 if e.dtype is bool_ else e.dim() for e in tensors), default=0)
    return rank + self.dim() - covered


@rule("index_put", "index_put_")
def index_put(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self, indices, values = bound["self"], tuple(bound["indices"]), bound["values"]
    _check_indexed_write(op, bound, self, level)
    if _per_sample_masks(indices, level):
        raise RuntimeError(f"Batching rule not implemented for {op.name} with boolean masks "
                           "that differ per sample; use where instead.")
    size = batch_size(level)
    target = _front_or_expanded(self, level, size)
    if not any(_same_level(e, level) for e in indices):
        physical, bdim, move = (None,) + indices, _index_result_bdim(indices), None
    else:
        indices = _masks_as_positions(indices)
        (physical, move), bdim = _per_sample_indices(indices, level, size), 0
    if isinstance(values, TensorBase):
        values = _front_or_expanded(values, level, size)
        values = aligned(values, 0, values.dim() - 1, _index_result_rank(self, indices))
        # the values' per-sample dims in the order NumPy's physical result has them
        values = values.movedim(0, bdim) if move is None else values.movedim(move[1], move[0])
    result = call(op, (target, physical, values, bound["accumulate"]), None)
    return self if op.kind == "inplace" else wrap(result, 0, level)


# Each sample may select a different number of elements, so there is no single physical
# op; the loop is correct whenever the counts agree (and warns).
RULES["masked_select"] = fallback
from microtensor.vmap import rules_norm  # noqa: E402,F401
from microtensor.vmap import rules_activation  # noqa: E402,F401
from microtensor.vmap import rules_conv  # noqa: E402,F401
from microtensor.vmap import rules_layout  # noqa: E402,F401
from microtensor.vmap import rules_linalg  # noqa: E402,F401
from microtensor.vmap import rules_contraction  # noqa: E402,F401
from microtensor.vmap import rules_selection2  # noqa: E402,F401
from microtensor.vmap import rules_scatter_reduce  # noqa: E402,F401
