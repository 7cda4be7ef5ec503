"""The dispatcher: the route every op call takes from the public API to its kernel.

``call``, ``needs_recording`` and ``run_kernel`` are in the Cython core
(``microtensor._C.dispatch``) because every op call takes them; the steps are:

1. A composite op (written in other ops) runs its Python body: the ops it calls are
   dispatched in turn.
2. A call with a batched argument, or a random op while this thread is inside a vmap
   (``set_batching``, ``set_vmap_depth``), goes to vmap's handler, which runs the op's
   batching rule: ops on physical tensors, which come back through here.
3. A call with ``out=`` is ``call_with_out``'s: the same for every op (a composite op's
   too), as PyTorch's rules for ``out=`` are (``write_out``).
4. If grad mode is on and an input requires grad, autograd records the call: the kernel
   runs with grad mode off and a node is attached to its outputs (in-place ops by the
   rules of ``autograd.recording``).
5. Otherwise the kernel runs directly; an in-place op then bumps its target's version.

Layers above register themselves here, so this module imports nothing above ``ops``.
"""
import functools
import numbers
import warnings

from microtensor._C import dispatch as _core
from microtensor._C import meta
from microtensor._C.dispatch import (batching, call, run_kernel, serve_rules,  # noqa: F401
                                     set_batched_binary, set_batching, set_observer,
                                     set_vmap_depth)
from microtensor._C.tensor import TensorBase, empty_contiguous, is_grad_enabled
from microtensor._dtype import NotATensor, can_cast, info
from microtensor.ops.loops import _type_name, check_writable, scalar_tensor_like
from microtensor.ops.registry import REGISTRY

__all__ = ["batching", "binary", "call", "call_by_name", "call_method", "call_with_out",
           "install_inplace_recording", "run_kernel", "set_batching", "set_vmap_depth",
           "takes_out", "write_out"]

# Installed by microtensor.autograd: how an in-place op is recorded.
install_inplace_recording = _core.install_inplace_recording


def binary(name, a, b):
    """The slow path of ``a + b`` and friends when ``a`` is not a tensor (a number on the
    left) or ``b`` neither a tensor nor a number: the core's fast path sends calls on two
    tensors, or a tensor and a number, to the dispatcher itself."""
    op = REGISTRY[name]
    if not isinstance(a, TensorBase):
        if not isinstance(b, TensorBase):
            return NotImplemented
        a = scalar_tensor_like(a, b)
    if not isinstance(b, TensorBase) and not isinstance(b, (int, float, bool, complex)):
        return NotImplemented
    return call(op, (a, b), None)


def call_by_name(name, *args, **kwargs):
    return call(REGISTRY[name], args, kwargs)


_METHODS = {}


def call_method(name, *args, **kwargs):
    """``Tensor.<name>(*args[1:], **kwargs)`` on ``args[0]``, bound as the op's method
    binds (PyTorch's keyword aliases included): the slow path of the methods the core
    serves in C (``sum``, ``view`` ...)."""
    method = _METHODS.get(name)
    if method is None:
        method = _METHODS[name] = _core.op_method(REGISTRY[name])
    return method(*args, **kwargs)


def _tensors(values):
    for value in values:
        if isinstance(value, TensorBase):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, TensorBase))


def call_with_out(op, args, kwargs):
    """``op(*args, **kwargs)`` given ``out`` (a tensor, or a tuple of them for an op with
    several outputs; None is the call without it), by PyTorch's rules for every op:
    refused where PyTorch's function has no ``out=`` (``op.out``), and when autograd
    would have to record the call (``_checked_outs``); else the result is computed into
    fresh tensors and written into ``out`` (``write_out``).  Computing into a fresh tensor
    first keeps each kernel's ``out`` parameter for its in-place variant alone (where
    ``out`` is ``self``)."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    if out is None:   # PyTorch's default, given by name
        return call(op, args, kwargs)
    if op.kind == "composite" and "out" in op.param_names:
        return op.kernel(*args, out=out, **kwargs)   # one that writes its own out
    takes_out = op.out
    if callable(takes_out):
        takes_out = takes_out(op.bind(args, kwargs))
    if not takes_out:
        raise TypeError(f"{op.name}() got an unexpected keyword argument 'out' (PyTorch's "
                        f"{op.name} takes none with these arguments)")
    inputs = list(_tensors(list(args) + list(kwargs.values())))
    outs = _checked_outs(op.name, out, inputs, op.differentiable)
    factory = op.kind == "factory"
    if factory or op.out_casting == "dtype":
        _factory_dtype(kwargs, outs[0])
    result = op.kernel(*args, **kwargs) if op.kind == "composite" else \
        run_kernel(op, args, kwargs)
    casting = op.out_casting
    if callable(casting):
        casting = casting(op.bind(args, kwargs))
    return write_out(op.name, result, out, inputs, casting, op.out_layout, warn=not factory)


def _checked_outs(name, out, inputs, differentiable=True):
    """``out`` as a tuple of tensors; refused when it is something else, or when autograd
    would have to record the call (a differentiable one, with an input or an out that
    requires grad in grad mode)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not outs or not all(isinstance(o, TensorBase) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be Tensor or a tuple of Tensors, "
                        f"not {type(out).__name__}")
    if differentiable and is_grad_enabled() and \
            any(t.requires_grad for t in inputs + list(outs)):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           f"automatic differentiation, but one of the arguments requires grad.")
    return outs


def _factory_dtype(kwargs, out):
    """A factory (or a reduction that takes a ``dtype``) given ``out`` computes in
    ``out``'s dtype; another one asked for is refused."""
    dtype = kwargs.get("dtype")
    if dtype is None:
        kwargs["dtype"] = out._dtype
    elif dtype is not out._dtype:
        raise RuntimeError(f"dtype {_type_name(dtype)} does not match dtype of out parameter "
                           f"({_type_name(out._dtype)})")


def takes_out(fn=None, *, factory=False, casting=False, layout=None):
    """PyTorch's ``out=`` for a function written in Python over ops (``linalg.svdvals``,
    ``zeros``...): a decorator (``factory``: the function makes ``out``'s dtype, and
    resizes ``out`` without a warning; ``casting`` and ``layout``: as ``Op.out_casting``
    and ``Op.out_layout``); the result is written into ``out`` by the rules of every op
    (``write_out``)."""
    if fn is None:
        return lambda f: takes_out(f, factory=factory, casting=casting, layout=layout)

    @functools.wraps(fn)
    def with_out(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        inputs = list(_tensors(list(args) + list(kwargs.values())))
        outs = _checked_outs(fn.__name__, out, inputs)
        if factory:
            _factory_dtype(kwargs, outs[0])
        return write_out(fn.__name__, fn(*args, **kwargs), out, inputs, casting, layout,
                         warn=not factory)
    return with_out


def write_out(name, result, out, inputs, casting, layout=None, warn=True):
    """Write ``result`` (a tensor, or a tuple of them) into ``out`` (a tensor, or a tuple
    of as many) and return ``out``, by PyTorch's rules for ``out=``: each ``out`` must
    have its result's dtype, or with ``casting`` one the result casts to without losing
    its category (with ``casting="kind"``: of the same kind, real or complex); it must
    share no memory with the inputs but the very same elements;
    one of another shape is resized (with a warning if it had elements, unless ``warn`` is
    false: PyTorch's factories resize silently) over its own storage when that holds
    enough, laid out by ``layout``: None, as its result (an elementwise result follows its
    inputs' layout); "contiguous"; "column-major" (each matrix, as LAPACK writes them);
    "lapack", as its result when ``out`` was empty and of its dtype, else contiguous
    (PyTorch's linear algebra, which writes LAPACK's results straight into such an
    ``out`` only).  The copy in bumps ``out``'s version.
    Every check runs before anything is written."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if isinstance(result, (tuple, list)) != isinstance(out, (tuple, list)) or \
            len(outs) != len(results):
        wanted = f"a tuple of {len(results)} Tensors" if isinstance(result, (tuple, list)) \
            else "Tensor"
        raise TypeError(f"{name}(): argument 'out' must be {wanted}, not "
                        f"{type(out).__name__}" + (f" of {len(outs)}" if
                                                     isinstance(out, (tuple, list)) else ""))
    targets = []
    for value, target in zip(results, outs):
        if value._dtype is not target._dtype:
            if not casting or casting == "kind" and value._dtype.kind != target._dtype.kind:
                raise RuntimeError(f"Expected out tensor to have dtype "
                                   f"{info(value._dtype).cpp_name}, but got "
                                   f"{info(target._dtype).cpp_name} instead")
            if not can_cast(value._dtype, target._dtype):
                raise RuntimeError(f"result type {_type_name(value._dtype)} can't be cast "
                                   f"to the desired output type {_type_name(target._dtype)}")
        if target._sizes != value._sizes:
            target = _resized(target, value, layout)
        check_writable(target, inputs)
        targets.append(target)
    for value, target, given in zip(results, targets, outs):
        if target is not given:
            if given._numel and warn:
                warnings.warn(f"An output with one or more elements was resized since it had "
                              f"shape {list(given._sizes)}, which does not match the required "
                              f"output shape {list(value._sizes)}. This behavior is deprecated, "
                              f"and in a future release outputs will not be resized unless "
                              f"they have zero elements.", UserWarning, stacklevel=4)
            target._storage.version = given._storage.version   # one counter, as for resize_
            given._set_storage(target._storage, target._sizes, target._strides, target._offset)
        run_kernel(REGISTRY["copy_"], (given, value), None)
    if not isinstance(out, (tuple, list)):
        return out
    return type(result)(*outs) if hasattr(result, "_fields") else tuple(outs)


def _resized(out, like, layout):
    """A tensor with ``out``'s dtype and ``like``'s sizes, laid out by ``layout`` (see
    ``write_out``; contiguous where ``like``'s strides leave gaps or overlap): over
    ``out``'s storage from its offset when that holds enough elements, else over a new
    storage."""
    sizes = like._sizes
    if layout == "column-major" and len(sizes) >= 2:
        strides = _column_major(sizes)
    elif (layout is None or layout == "lapack" and not out._numel and
          out._dtype is like._dtype) and meta.is_non_overlapping_and_dense(sizes, like._strides):
        strides = like._strides
    else:
        strides = tuple(meta.contiguous_strides(sizes))
    numel = 1
    for size in sizes:
        numel *= size
    if (out._offset + numel) * out._dtype.itemsize <= out._storage.nbytes():
        # in bounds: a dense run of numel elements from the offset
        return out._make_alias_unchecked(sizes, strides, out._offset)
    fresh = empty_contiguous(sizes, out._dtype, out.device)
    return fresh._make_alias_unchecked(sizes, strides, 0)   # the same elements, dense


def _column_major(sizes):
    """Strides of a stack of column-major matrices of ``sizes``."""
    rows, columns = sizes[-2], sizes[-1]
    batch = tuple(stride * max(rows * columns, 1)
                  for stride in meta.contiguous_strides(sizes[:-2]))
    return batch + (1, max(rows, 1))


_core.install_out_call(call_with_out)


def non_tensor_error(op, args, kwargs, failure):
    """PyTorch's TypeError for a call whose kernel failed (``failure``: an
    AttributeError, or promotion's NotATensor) on a tensor input given as something else
    (a dict, a string, a list of numbers...): "exp(): argument 'input' (position 1) must
    be Tensor, not dict"; None for any other failure, or when every input is a tensor, a
    number, None or a sequence of tensors (the failure is then the kernel's own)."""
    if not isinstance(failure, (AttributeError, NotATensor)):
        return None
    try:
        bound = op.bind(args, kwargs)
    except TypeError:
        return None
    for name in op.inputs:
        value = bound.get(name)
        if value is None or isinstance(value, (TensorBase, numbers.Number)) or (
                isinstance(value, (list, tuple)) and value and
                all(isinstance(v, TensorBase) for v in value)):
            continue
        shown = "input" if name == "self" else name
        position = op.params.index(name) + 1 if name in op.params else 1
        return TypeError(f"{op.name}(): argument '{shown}' (position {position}) must be "
                         f"Tensor, not {type(value).__name__}")
    return None


_core.install_non_tensor_error(non_tensor_error)
