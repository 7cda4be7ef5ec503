"""Forward-mode automatic differentiation, PyTorch's ``torch.autograd.forward_ad``: dual
levels (``dual_level``, ``enter_dual_level``, ``exit_dual_level``), ``make_dual`` and
``unpack_dual``.

Design.  A dual tensor is an ordinary tensor (an alias of its primal, as in PyTorch)
whose tangent the active level keeps in a table (tensor id -> tangent, an entry dropped
when its tensor dies), so nothing is added to the tensor itself and leaving the level
forgets every tangent at once.  While a level is active this module's handler is
installed in the dispatcher (``_C.dispatch.set_forward_ad``): the C fast paths then stand
aside, every op call reaches the handler, and with no level active the hot path pays one
pointer test in the dispatcher and one flag test in the fast paths.  The handler finds the
call's differentiable inputs that have a tangent; if there are none the call goes on as
usual.  Otherwise the op runs as usual (reverse-mode recording, vmap and all) and its
outputs get tangents, computed without a forward formula per op:

* a view op (``kind="view"``) applies itself to the input's tangent, so the tangent of a
  view is a view of the tangent, and an in-place op on the view updates the base's tangent
  as in PyTorch.  Tangents are laid out like their primals (``make_dual`` copies a tangent
  of another layout, as PyTorch does), so that ``as_strided`` and ``view`` apply to both
  alike;
* any other op gets the Jacobian-vector product of that one call through its registered
  derivative: ``func.jvp`` of the op alone, which is reverse mode twice, exactly (the map
  ``u -> J^T u`` is linear, so its vjp at any ``u`` with cotangent ``t`` is ``J t``).
  Composite ops never reach the handler (their body's ops do), so every op that has a
  derivative has forward AD, under ``vmap`` too, and the tangents are differentiable
  (reverse mode through ``J t`` reaches the primals and the tangents);
* an in-place op computes its new tangent from the old values (the op on a clone of its
  target), then runs, then writes that tangent into the target's tangent in place (or
  gives the target one: a view's base gets a zero tangent of which the view's is a view).

Tangents are independent of grad mode (they propagate under ``no_grad``, not under
``inference_mode``); ``out=`` calls (and an op with no derivative, of which the registry
has none today) refuse a dual input with PyTorch's error.  An ``autograd.Function`` call
with a dual argument uses the Function's ``jvp`` (``function_tangents``,
``run_function_jvp``), and ``vmap`` wraps a dual input's primal and tangent alike
(``wrap_for_vmap``, ``unwrap_for_vmap``).  As in PyTorch only one level can be active at a
time.  ``func``'s other transforms differentiate fresh copies of their inputs, whose
results carry no tangent (PyTorch's do).
"""
import weakref
from typing import NamedTuple

from microtensor._C.autograd import OpNode, SavedTensor
from microtensor._C.dispatch import call, set_forward_ad
from microtensor._C.tensor import TensorBase, is_grad_enabled, set_grad_enabled
from microtensor.autograd.grad_mode import _decorate, is_inference_mode_enabled

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual",
           "unpack_dual", "dual_level"]

_current_level = -1
_tangents = {}   # the active level's table: id(tensor) -> (weakref to it, tangent or None)


# --------------------------------------------------------------------------- levels

def enter_dual_level():
    """Enter a new forward grad level (the only one: nesting is refused, as in PyTorch)
    and return its number."""
    global _current_level
    if _current_level >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _current_level = 0
    _tangents.clear()
    set_forward_ad(_handle)
    return _current_level


def exit_dual_level(*, level=None):
    """Exit the forward grad level ``level`` (default: the current one), forgetting every
    tangent made in it."""
    global _current_level
    if level is None:
        level = _current_level
    if level != _current_level:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that "
                           "was created. This is not supported.")
    if level < 0:
        raise RuntimeError("Dual level must be a positive number.")
    set_forward_ad(None)
    _tangents.clear()
    _current_level = level - 1


class dual_level:
    """Context manager (and decorator) in which forward AD computation happens:
    ``with dual_level(): ...`` enters a level and exits it, tangents and all."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()

    def __call__(self, fn):
        return _decorate(fn, dual_level)


def _checked_level(level, function):
    if level is None:
        level = _current_level
    if level >= 0 and level != _current_level:
        raise RuntimeError(f"Invalid level given to {function}")
    return level


# --------------------------------------------------------------------------- the API

class UnpackedDualTensor(NamedTuple):
    """What ``unpack_dual`` returns: the primal (a view) and the tangent (or None)."""
    primal: TensorBase
    tangent: TensorBase | None


def make_dual(tensor, tangent, *, level=None):
    """A new tensor aliasing ``tensor`` with ``tangent`` as its forward gradient (kept as
    it is when laid out like ``tensor``, else copied into that layout).  Differentiable in
    reverse mode."""
    level = _checked_level(level, "_make_dual")
    if level < 0:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, "
                           "make sure to enter_dual_level() first.")
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype}")
    if not (tangent.is_floating_point() or tangent.is_complex()):
        raise ValueError(f"Expected tangent to be floating point or complex, but got: "
                         f"{tangent.dtype}")
    if tensor.is_complex() or tangent.is_complex():
        raise _unsupported("make_dual", _NO_COMPLEX)
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError("Trying to set a forward gradient that has a different size than "
                           "that of the original Tensor, this is not supported. Tensor is of "
                           f"size {list(tensor.shape)} while the given forward gradient is of "
                           f"size {list(tangent.shape)}.")
    if _tangent_of(tensor) is not None:
        raise RuntimeError("Making a dual Tensor based on a Tensor that already has a forward "
                           f"gradient at the same level {level} is not supported.")
    with suspended():
        dual = call(_op("alias"), (tensor,), None)
        _set_tangent(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor``: the primal a view of it without tangent, the
    tangent as it is kept (None outside a level or for a tensor without one)."""
    level = _checked_level(level, "_fw_primal")
    if level < 0:
        return UnpackedDualTensor(tensor, None)
    if not isinstance(tensor, TensorBase):
        raise TypeError(f"_unpack_dual(): argument 'dual' (position 1) must be Tensor, not "
                        f"{type(tensor).__module__}.{type(tensor).__name__}")
    tangent = _tangent_of(tensor)
    with suspended():
        primal = call(_op("alias"), (tensor,), None)
    _remember(primal, None)
    return UnpackedDualTensor(primal, tangent)


# --------------------------------------------------------------------------- the table

def _remember(tensor, tangent):
    """Keep ``tangent`` for ``tensor`` (None: it has none, not even through its base)."""
    key = id(tensor)
    table = _tangents
    _tangents[key] = (weakref.ref(tensor, lambda _, key=key: table.pop(key, None)), tangent)


def _saved_outputs(tensor):
    """The values ``tensor``'s node saved of it, when ``tensor`` is an output of an op
    whose derivative reads it (an alias: backward unpacks that one, or an alias of it)."""
    node = tensor._grad_fn
    if type(node) is not OpNode:
        return []
    found = []
    for value in node.saved:
        for saved in value if type(value) is list else (value,):
            if type(saved) is SavedTensor and saved.is_output and saved.data is not None \
                    and saved.output_nr == tensor._output_nr:
                found.append(saved.data)
    return found


def _tangent_of(tensor):
    """``tensor``'s tangent at the active level: its own; for a view that has none, the
    view of its base's tangent (a base that got a tangent after the view was taken); for
    an op's output unpacked from its node in backward, the one the node's saved alias of
    it has (so that a backward pass run on duals, forward-over-reverse, sees it)."""
    entry = _tangents.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        return entry[1]
    if tensor._grad_fn is not None and tensor._base is None:
        for saved in _saved_outputs(tensor):
            entry = _tangents.get(id(saved))
            if entry is not None and entry[0]() is saved:
                return entry[1]
    base = tensor._base
    if base is not None and not _batched(tensor):
        entry = _tangents.get(id(base))
        if entry is not None and entry[0]() is base and entry[1] is not None:
            tangent = _same_geometry_view(entry[1], tensor)
            _remember(tensor, tangent)
            return tangent
    return None


def tangent_for_printing(tensor):
    """``tensor``'s tangent when a level is active (``repr`` shows it), else None."""
    return _tangent_of(tensor) if _current_level >= 0 else None


def _batched(tensor):
    from microtensor.vmap.batched import BatchedTensor
    return type(tensor) is BatchedTensor


def _same_geometry_view(tangent, tensor):
    """The view of ``tangent`` (laid out like ``tensor``'s storage) over ``tensor``'s
    elements."""
    with suspended():
        return tangent.as_strided(tensor._sizes, tensor._strides, tensor._offset)


def _storage_numel(tensor):
    return tensor._storage.nbytes() // tensor._dtype.itemsize


def _laid_out_like(tangent, tensor):
    return (tangent._strides == tensor._strides and tangent._offset == tensor._offset
            and _storage_numel(tangent) == _storage_numel(tensor))


def _shadow(tensor, like):
    """Zeros laid out like ``tensor`` over a storage the size of ``tensor``'s, of
    ``like``'s dtype and device: a tangent's layout."""
    from microtensor.ops.factory import zeros
    storage = zeros(_storage_numel(tensor), dtype=like.dtype, device=like.device)
    return storage.as_strided(tensor._sizes, tensor._strides, tensor._offset)


def _set_tangent(tensor, tangent):
    """Give ``tensor`` the tangent ``tangent``, copied into ``tensor``'s layout (over a
    storage the size of ``tensor``'s) unless already laid out so.  Under vmap a tangent
    is kept as it is (batched, it has a layout per sample)."""
    if not (_batched(tensor) or _batched(tangent) or _laid_out_like(tangent, tensor)):
        with suspended():
            tangent = _shadow(tensor, tangent).copy_(tangent)
    _remember(tensor, tangent)
    _remember_saved(tensor, tangent)


def _remember_saved(tensor, tangent):
    """The same tangent for the aliases of ``tensor`` its node saved."""
    for saved in _saved_outputs(tensor):
        _remember(saved, tangent)


# --------------------------------------------------------------------------- the handler

_suspensions = 0   # how many ``suspended`` blocks are open


class suspended:
    """The handler off (ops run as without forward AD) for the duration of a block, when
    ``active``; blocks nest."""

    def __init__(self, active=True):
        self.active = active

    def __enter__(self):
        global _suspensions
        if self.active:
            _suspensions += 1
            set_forward_ad(None)

    def __exit__(self, *exc):
        global _suspensions
        if self.active:
            _suspensions -= 1
            if not _suspensions and _current_level >= 0:
                set_forward_ad(_handle)


_OPS = {}


def _op(name):
    op = _OPS.get(name)
    if op is None:
        from microtensor.ops import REGISTRY
        op = _OPS[name] = REGISTRY[name]
    return op


def _duals(op, args, kwargs):
    """``[(where, tensor, tangent)]`` for the differentiable inputs of the call that have a
    tangent; ``where`` is ``(position or name, index in a list or None)``."""
    found = []

    def visit(key, value):
        if isinstance(value, TensorBase):
            tangent = _tangent_of(value)
            if tangent is not None:
                found.append(((key, None), value, tangent))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, TensorBase):
                    tangent = _tangent_of(item)
                    if tangent is not None:
                        found.append(((key, i), item, tangent))

    n = len(args)
    for position in op.input_positions:
        if position < n:
            visit(position, args[position])
    if kwargs:
        for name in op.inputs:
            if name in kwargs:
                visit(name, kwargs[name])
    if op.varargs is not None and op.varargs in op.inputs:
        for position in range(len(op.params), n):
            visit(position, args[position])
    return found


# complex tangents need the conjugate convention worked through every op's jvp: not done
_NO_COMPLEX = "microtensor's forward AD does not cover complex tensors yet"


def _unsupported(name, why="it has not been implemented yet"):
    return NotImplementedError(f"Trying to use forward AD with {name} that does not support it "
                               f"because {why}.")


def _handle(op, args, kwargs):
    """The dispatcher's forward-AD hook (see the module docstring)."""
    if is_inference_mode_enabled():
        return NotImplemented     # as in PyTorch, inference mode computes no tangents
    if not op.differentiable:
        target = args[0] if op.kind == "inplace" and args else None
        if isinstance(target, TensorBase) and _tangent_of(target) is not None:
            with suspended():    # a random fill, say: the new values have no derivative
                result = call(op, args, kwargs)
                _tangent_of(target).zero_()
            return result
        return NotImplemented
    duals = _duals(op, args, kwargs)
    if not duals:
        if op.kind == "view" and args and isinstance(args[0], TensorBase) \
                and id(args[0]) in _tangents and _tangent_of(args[0]) is None:
            with suspended():    # a view of an unpacked primal: no tangent either
                result = call(op, args, kwargs)
            for out in _tensors(result):
                _remember(out, None)
            return result
        return NotImplemented
    if kwargs and kwargs.get("out") is not None and op.kind != "inplace":
        raise _unsupported(f"{op.name}_out", "it is an out= function")
    if op.derivative is None:
        raise _unsupported(op.name)
    if op.kind == "inplace":
        return _inplace(op, args, kwargs, duals)
    with suspended():
        result = call(op, args, kwargs)
        if any(out.is_complex() for out in _tensors(result)):
            raise _unsupported(op.name, _NO_COMPLEX)
        if not _floating(result):
            return result
        if op.kind == "view":
            tangents = _view_tangents(op, args, kwargs, duals, result)
        else:
            tangents = _jvp(op, args, kwargs, duals)
        for out, tangent in zip(_floating(result), tangents):
            if not any(out is d[1] for d in duals):   # an input returned keeps its tangent
                _set_tangent(out, tangent)
    return result


def _tensors(result):
    if isinstance(result, TensorBase):
        return [result]
    if isinstance(result, (tuple, list)):
        return [r for r in result if isinstance(r, TensorBase)]
    return []


def _floating(result):
    return [r for r in _tensors(result) if r.is_floating_point()]


def _view_tangents(op, args, kwargs, duals, result):
    """A view's tangent: the same view of the input's tangent."""
    (where, index), _, tangent = duals[0]
    if len(duals) != 1 or where not in (0, "self") or index is not None:
        return _jvp(op, args, kwargs, duals)
    if any(out.dtype is not args[0].dtype for out in _floating(result)):
        raise _unsupported(op.name, "it reinterprets the data as another dtype")
    if where == 0:
        viewed = call(op, (tangent,) + tuple(args[1:]), kwargs)
    else:
        viewed = call(op, args, dict(kwargs, self=tangent))
    return _tensors(viewed)


def _substituted(args, kwargs, duals, values):
    """``args`` and ``kwargs`` with the dual inputs replaced by ``values``."""
    args, kwargs = list(args), dict(kwargs or {})
    for ((where, index), _, _), value in zip(duals, values):
        container = args if isinstance(where, int) else kwargs
        if index is None:
            container[where] = value
        else:
            items = list(container[where])
            items[index] = value
            container[where] = items
    return args, kwargs


def _jvp(op, args, kwargs, duals, inplace=False):
    """The tangents of the call's floating outputs: ``func.jvp`` of the op alone (of the op
    on a clone of its target for an in-place op)."""
    from microtensor.func.autodiff import jvp

    def one_call(*primals):
        call_args, call_kwargs = _substituted(args, kwargs, duals, primals)
        if inplace:
            call_args[0] = call_args[0].clone()
        return tuple(_floating(op(*call_args, **call_kwargs)))

    recording = is_grad_enabled()
    set_grad_enabled(True)
    try:
        _, tangents = jvp(one_call, tuple(d[1] for d in duals), tuple(d[2] for d in duals))
    finally:
        set_grad_enabled(recording)
    # an output's tangent must not alias an input's (the jvp of ``clone`` is its tangent)
    storages = [d[2]._storage for d in duals]
    tangents = tuple(t.clone() if any(t._storage is s for s in storages) else t
                     for t in tangents)
    return tangents if recording else tuple(t.detach() for t in tangents)


def _inplace(op, args, kwargs, duals):
    """An in-place op on (or with) duals: the new tangent from the old values, then the op,
    then the target's tangent updated in place."""
    target = args[0]
    with suspended():
        if op.inplace_of is not None and op.inplace_of.kind == "view":
            # a metadata change (transpose_, squeeze_...): the same change of the tangent
            result = call(op, args, kwargs)
            tangent = _tangent_of(target)
            if tangent is not None:
                call(op, (tangent,) + tuple(args[1:]), kwargs)
            return result
        if is_grad_enabled() and any(d[1].requires_grad or d[2].requires_grad
                                     for d in duals):
            # the tangent's graph must not keep what the op and the update overwrite
            duals = [(where, x.clone(), t.clone()) for where, x, t in duals]
        tangents = _jvp(op, args, kwargs, duals, inplace=True)
        result = call(op, args, kwargs)
        if not tangents:
            return result
        tangent = _tangent_of(target)
        if tangent is None:
            tangent = _fresh_tangent(target, tangents[0])
        tangent.copy_(tangents[0])
    _remember_saved(target, tangent)
    return result


def _fresh_tangent(target, like):
    """A zero tangent for ``target``, which had none: for a view, a view of a zero tangent
    given to its base."""
    if _batched(target):
        tangent = like.new_zeros(like.shape)
    else:
        tangent = _shadow(target, like)
        base = target._base
        if base is not None:
            _remember(base, _same_geometry_view(tangent, base))
    _remember(target, tangent)
    return tangent


# --------------------------------------------------------------------------- vmap

def wrap_for_vmap(value, bdim, level, wrap):
    """vmap's wrapping of an input, ``wrap(value, bdim, level)``; for a dual ``value`` a
    ``BatchedTensor`` of its primal whose tangent is the tangent wrapped alike (batching
    rules then see no dual among their physical tensors)."""
    tangent = _tangent_of(value) if _current_level >= 0 else None
    if tangent is None:
        return wrap(value, bdim, level)
    with suspended():
        primal = call(_op("alias"), (value,), None)
    _remember(primal, None)
    batched = wrap(primal, bdim, level)
    _remember(batched, wrap(tangent, bdim, level))
    return batched


def unwrap_for_vmap(out, value, bdim, level, unwrap):
    """vmap's unwrapping of an output ``out`` into ``value`` (batched at ``bdim``): a
    tangent ``out`` has becomes ``value``'s, unwrapped and batched at ``bdim`` too."""
    tangent = _tangent_of(out) if _current_level >= 0 else None
    if tangent is None:
        return
    physical, tangent_bdim = unwrap(tangent, level)
    with suspended():
        if tangent_bdim is None:
            physical = physical.unsqueeze(bdim).expand(value.shape)
        elif tangent_bdim != bdim:
            physical = physical.movedim(tangent_bdim, bdim)
    _set_tangent(value, physical)


# --------------------------------------------------------------------------- Function

def function_tangents(cls, args):
    """The tangents of ``cls.apply``'s arguments (zeros for a tensor without one, None for
    a non-tensor), or None when none has one; a Function without ``jvp`` refuses them."""
    if is_inference_mode_enabled():
        return None
    tangents = [_tangent_of(a) if isinstance(a, TensorBase) else None for a in args]
    if all(t is None for t in tangents):
        return None
    from microtensor.autograd.function import Function
    if cls.jvp is Function.jvp:
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")
    with suspended():
        return [t if t is not None or not isinstance(a, TensorBase)
                else a.new_zeros(a.shape) for a, t in zip(args, tangents)]


def run_function_jvp(cls, ctx, tangents, result):
    """Give ``cls.apply``'s floating outputs ``result`` the tangents ``cls.jvp`` returns."""
    ctx._in_jvp = True
    try:
        with suspended():
            out = cls.jvp(ctx, *tangents)
    finally:
        ctx._in_jvp = False
    outputs = result if isinstance(result, tuple) else (result,)
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(outputs):
        raise RuntimeError(f"{cls.__name__}.jvp returned {len(out)} tangents for "
                           f"{len(outputs)} outputs")
    for o, t in zip(outputs, out):
        if isinstance(o, TensorBase) and o.is_floating_point() and t is not None:
            _set_tangent(o, t)
