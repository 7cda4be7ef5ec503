"""The ``vmap`` transform: validate ``in_dims``/``out_dims``, wrap the inputs as
``BatchedTensor``s of a new level, call the function once, unwrap the outputs.

Installs vmap's hook into the dispatcher (``rules.handle``), the batching of user
``autograd.Function``s (``function.batched_apply``), and vmap's two hooks into the
autograd engine: the guard that refuses ``backward()`` (and ``autograd.grad`` of batched
outputs or inputs) inside vmap, and the implementation of
``autograd.grad(..., is_grads_batched=True)`` as a vmap over the grad_outputs.
"""
import functools

from microtensor._C import meta
from microtensor._C.tensor import TensorBase
from microtensor.autograd import engine, forward_ad
from microtensor.autograd import function as _autograd_function
from microtensor.ops import dispatch
from microtensor.vmap import function as _function
from microtensor.vmap import rules
from microtensor.vmap.batched import BatchedTensor, Level, _levels, active_levels, unwrap, wrap

RANDOMNESS = ("error", "different", "same")


# --------------------------------------------------------------------------- pytrees

class TreeSpec:
    """The structure of a nest of tuples, lists and dicts; ``None`` children are leaves."""

    __slots__ = ("kind", "context", "children")

    def __init__(self, kind, context, children):
        self.kind = kind          # the container type, or None for a leaf
        self.context = context    # dict keys
        self.children = children

    def num_leaves(self):
        if self.kind is None:
            return 1
        return sum(c.num_leaves() for c in self.children)

    def __repr__(self):
        if self.kind is None:
            return "*"
        children = ", ".join(map(repr, self.children))
        return f"TreeSpec({self.kind.__name__}, {self.context}, [{children}])"


LEAF = TreeSpec(None, None, ())


def _is_node(x):
    return type(x) in (tuple, list, dict) or (isinstance(x, tuple) and hasattr(x, "_fields"))


def tree_flatten(tree):
    leaves = []
    return leaves, _flatten_into(tree, leaves)


def _flatten_into(x, leaves):
    # module-level recursion: a recursive closure would be a reference cycle that keeps
    # every leaf (large gradients, say) alive until the garbage collector runs
    # loops rather than comprehensions, and leaves handled in place: a Python frame fewer
    # per node and per leaf, on the path every transform call takes
    kind = type(x)
    if kind is dict:
        keys = list(x)
        children = list(x.values())
    elif kind is tuple or kind is list or (isinstance(x, tuple) and hasattr(x, "_fields")):
        keys = None
        children = x
    else:
        leaves.append(x)
        return LEAF
    specs = []
    for c in children:
        if isinstance(c, TensorBase):
            leaves.append(c)
            specs.append(LEAF)
        else:
            specs.append(_flatten_into(c, leaves))
    return TreeSpec(kind, keys, specs)


def tree_unflatten(leaves, spec):
    return _build(spec, iter(leaves))


def _build(spec, leaves):
    if spec.kind is None:
        return next(leaves)
    children = []
    for c in spec.children:
        children.append(next(leaves) if c.kind is None else _build(c, leaves))
    if spec.kind is dict:
        return dict(zip(spec.context, children))
    if spec.kind in (tuple, list):
        return spec.kind(children)
    return spec.kind(*children)


def broadcast_to_and_flatten(prefix, spec):
    """``prefix`` (a tree whose leaves apply to whole subtrees) as one value per leaf of
    ``spec``; None when the structures do not match."""
    if not _is_node(prefix):
        return [prefix] * spec.num_leaves()
    if spec.kind is None or type(prefix) is not spec.kind:
        return None
    if spec.kind is dict:
        if set(prefix) != set(spec.context):
            return None
        parts = [prefix[k] for k in spec.context]
    else:
        if len(prefix) != len(spec.children):
            return None
        parts = list(prefix)
    out = []
    for part, child in zip(parts, spec.children):
        flat = broadcast_to_and_flatten(part, child)
        if flat is None:
            return None
        out.extend(flat)
    return out


# --------------------------------------------------------------------------- levels

def _push(size, randomness):
    levels = _levels.stack   # active_levels(), without its frame: twice per vmap call
    number = len(levels) + 1
    levels.append(Level(number, size, randomness))
    dispatch.set_vmap_depth(number)
    return number


def _pop():
    levels = _levels.stack
    levels.pop()
    dispatch.set_vmap_depth(len(levels))


# --------------------------------------------------------------------------- the transform

def _name(func):
    if hasattr(func, "__name__"):
        return func.__name__
    if isinstance(func, functools.partial):
        return f"functools.partial({_name(func.func)}, ...)"
    return repr(func)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` vectorised over a batch dimension of its inputs (``torch.func.vmap``).

    ``in_dims``: which dim of each input is the batch (an int for all, ``None`` for
    unbatched, or a tuple/list/dict matching the arguments); ``out_dims``: where the
    batch dim goes in each output.  ``randomness`` ('error', 'different', 'same') governs
    random ops inside; ``chunk_size`` runs the batch that many samples at a time.
    """
    if randomness not in RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    def vmapped(*args, **kwargs):
        return vmap_call(func, in_dims, out_dims, randomness, chunk_size, args, kwargs)
    vmapped.__wrapped__ = func
    vmapped.__name__ = vmapped.__qualname__ = _name(func)
    vmapped.__doc__ = getattr(func, "__doc__", None)
    return vmapped


def vmap_call(func, in_dims, out_dims, randomness, chunk_size, args, kwargs,
              allow_none_outputs=False):
    if type(out_dims) is not int:
        _check_out_dims(func, out_dims)
    simple = _simple_inputs(in_dims, args) if args else None
    size, flat_in_dims, flat_args, spec = (simple if simple is not None
                                           else _process_inputs(func, in_dims, args))
    if chunk_size is not None and chunk_size < size:
        return _chunked(func, size, flat_in_dims, flat_args, spec, kwargs, out_dims,
                        randomness, chunk_size, allow_none_outputs)
    return _run(func, size, flat_in_dims, flat_args, spec, kwargs, out_dims, randomness,
                allow_none_outputs)


def _run(func, size, flat_in_dims, flat_args, spec, kwargs, out_dims, randomness,
         allow_none_outputs):
    level = _push(size, randomness)
    try:
        batched = []
        for a, d in zip(flat_args, flat_in_dims):
            batched.append(a if d is None else forward_ad.wrap_for_vmap(a, d, level, wrap))
        outputs = func(*(batched if spec is None else tree_unflatten(batched, spec)), **kwargs)
        return _unwrap_outputs(func, outputs, out_dims, level, size, allow_none_outputs)
    finally:
        _pop()


def _process_inputs(func, in_dims, args):
    """The general path of the inputs (pytrees), with every check and error; the common
    calls take ``_simple_inputs``."""
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): expected "
                         f"`in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    if not args:
        raise ValueError(f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to "
                         "add inputs, or you are trying to vmap over a function with no inputs. "
                         "The latter is unsupported.")
    flat_args, spec = tree_flatten(args)
    flat_in_dims = broadcast_to_and_flatten(in_dims, spec)
    if flat_in_dims is None:
        raise ValueError(f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): in_dims is "
                         f"not compatible with the structure of `inputs`. in_dims has structure "
                         f"{tree_flatten(in_dims)[1]} but inputs has structure {spec}.")
    sizes = []
    for i, (arg, d) in enumerate(zip(flat_args, flat_in_dims)):
        if d is None:
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(_in_dims_prefix(func, in_dims) + f"Got in_dim={d} for an input but in_dim must be either an "
                             "integer dimension or None.")
        if not isinstance(arg, TensorBase):
            raise ValueError(_in_dims_prefix(func, in_dims) + f"Got in_dim={d} for an input but the input is of type "
                             f"{type(arg)}. We cannot vmap over non-Tensor arguments, please "
                             "use None as the respective in_dim")
        n = arg.dim()
        if not -n <= d < n:
            raise ValueError(_in_dims_prefix(func, in_dims) + f"Got in_dim={d} for some input, but that input is a "
                             f"Tensor of dimensionality {n} so expected in_dim to satisfy "
                             f"-{n} <= in_dim < {n}.")
        if d < 0:
            flat_in_dims[i] = d % n
        sizes.append(arg._sizes[flat_in_dims[i]])
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return sizes[0], flat_in_dims, flat_args, spec


def _simple_inputs(in_dims, args):
    """The common calls without the pytree machinery: ``in_dims`` an int, or a tuple with
    an int or None per argument, and every batched argument a tensor with that dim in range
    (arguments with None pass through whole, whatever they hold).  None when it is not such
    a call (the general path then checks everything and raises the errors)."""
    if type(in_dims) is int:
        in_dims = (in_dims,) * len(args)
    elif type(in_dims) is not tuple or len(in_dims) != len(args):
        return None
    size = None
    dims = []
    for a, d in zip(args, in_dims):
        if d is None:
            dims.append(None)
            continue
        if type(d) is not int or not isinstance(a, TensorBase):
            return None
        n = len(a._sizes)
        if not -n <= d < n:
            return None
        wrapped = d % n
        if size is None:
            size = a._sizes[wrapped]
        elif a._sizes[wrapped] != size:
            return None
        dims.append(wrapped)
    if size is None:
        return None
    return size, dims, list(args), None


def _in_dims_prefix(func, in_dims):
    return f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): "


def _check_out_dims(func, out_dims):
    if isinstance(out_dims, int):
        return
    for leaf in tree_flatten(out_dims)[0]:
        if leaf is not None and not isinstance(leaf, int):
            raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must "
                             "be an int, None or a python collection of ints representing where "
                             "in the outputs the vmapped dimension should appear.")


def _unwrap_outputs(func, outputs, out_dims, level, size, allow_none_outputs):
    if type(out_dims) is int:
        if type(outputs) is BatchedTensor and outputs._level == level and \
                outputs._bdim == out_dims:
            if forward_ad._current_level >= 0:
                forward_ad.unwrap_for_vmap(outputs, outputs._value, out_dims, level, unwrap)
            return outputs._value             # already where out_dims puts the batch
        if isinstance(outputs, TensorBase):
            return _unwrap_output(None, outputs, out_dims, level, size, False)
        if type(outputs) is dict:
            # a dict of tensors (per-sample gradients of named parameters): no pytree, and
            # a loop rather than comprehensions (no frame of their own)
            unwrapped = {}
            for k, v in outputs.items():
                if type(v) is BatchedTensor and v._level == level and v._bdim == out_dims:
                    if forward_ad._current_level >= 0:
                        forward_ad.unwrap_for_vmap(v, v._value, out_dims, level, unwrap)
                    unwrapped[k] = v._value       # already where out_dims puts the batch
                    continue
                if not isinstance(v, TensorBase):
                    break
                unwrapped[k] = _unwrap_output(None, v, out_dims, level, size, False)
            else:
                return unwrapped
    flat_outputs, spec = tree_flatten(outputs)
    if isinstance(outputs, TensorBase):
        if isinstance(out_dims, int) or out_dims is None:
            flat_out_dims = [out_dims]
        elif isinstance(out_dims, tuple) and len(out_dims) == 1:
            flat_out_dims = list(out_dims)
        else:
            flat_out_dims = None
    else:
        flat_out_dims = broadcast_to_and_flatten(out_dims, spec)
    if flat_out_dims is None:
        raise ValueError(f"vmap({_name(func)}, ..., out_dims={out_dims})(<inputs>): out_dims is "
                         f"not compatible with the structure of `outputs`. out_dims has "
                         f"structure {tree_flatten(out_dims)[1]} but outputs has structure "
                         f"{spec}.")
    name = _name(func)
    unwrapped = [_unwrap_output(name, out, d, level, size, allow_none_outputs)
                 for out, d in zip(flat_outputs, flat_out_dims)]
    return tree_unflatten(unwrapped, spec)


def _unwrap_output(name, out, out_dim, level, size, allow_none_outputs):
    if out_dim is None:
        if type(out) is BatchedTensor and out._level == level:
            raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when "
                             "out_dim is None")
        return out
    if not isinstance(out, TensorBase):
        if out is None and allow_none_outputs:
            return None
        raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type "
                         f"{type(out)}. Did you mean to set out_dims= to None for output?")
    value, bdim = unwrap(out, level)
    if bdim is not None and forward_ad._current_level >= 0:
        forward_ad.unwrap_for_vmap(out, value, bdim, level, unwrap)
    if bdim is None:
        # never met the batch: the same value for every sample, expanded without a copy
        d = meta.wrap_dim(out_dim, out.dim() + 1)
        sizes = list(out.shape)
        sizes.insert(d, size)
        return out.unsqueeze(d).expand(sizes)
    d = meta.wrap_dim(out_dim, value.dim())
    if d == bdim:
        return value
    return value.movedim(bdim, d)


# --------------------------------------------------------------------------- chunks

def _chunked(func, size, flat_in_dims, flat_args, spec, kwargs, out_dims, randomness,
             chunk_size, allow_none_outputs):
    from microtensor.ops.factory import default_generator
    rng_state = default_generator.get_state() if randomness == "same" else None
    results = []
    for start in range(0, size, chunk_size):
        length = min(chunk_size, size - start)
        chunk_args = [a if d is None else a.narrow(d, start, length)
                      for a, d in zip(flat_args, flat_in_dims)]
        if rng_state is not None:
            default_generator.set_state(rng_state)
        results.append(_run(func, length, flat_in_dims, chunk_args, spec, kwargs, out_dims,
                            randomness, allow_none_outputs))
    flat_chunks = [tree_flatten(r)[0] for r in results]
    flat_first, out_spec = tree_flatten(results[0])
    if isinstance(results[0], TensorBase):
        flat_out_dims = [out_dims if not isinstance(out_dims, tuple) else out_dims[0]]
    else:
        flat_out_dims = broadcast_to_and_flatten(out_dims, out_spec)
    joined = []
    for j, d in enumerate(flat_out_dims):
        pieces = [chunk[j] for chunk in flat_chunks]
        if d is None or pieces[0] is None:
            joined.append(pieces[0])
        else:
            joined.append(_concatenate(pieces, d))
    return tree_unflatten(joined, out_spec)


def _concatenate(pieces, dim):
    from microtensor.ops.registry import REGISTRY
    cat = REGISTRY.get("cat")
    if cat is not None:
        return dispatch.call(cat, (list(pieces), dim), None)
    d = meta.wrap_dim(dim, pieces[0].dim())
    sizes = list(pieces[0].shape)
    sizes[d] = sum(p.shape[d] for p in pieces)
    out = pieces[0].new_empty(sizes)
    start = 0
    for p in pieces:
        out.narrow(d, start, p.shape[d]).copy_(p)
        start += p.shape[d]
    return out


# --------------------------------------------------------------------------- autograd hooks

def _refuse_inside_vmap(what, outputs, inputs):
    if not active_levels():
        return
    if what == "backward":
        raise RuntimeError("backward() called inside vmap. This is not supported, please call "
                           "backward() outside vmap or instead use microtensor.autograd.grad "
                           "(or microtensor.func.grad/vjp) inside vmap")
    for kind, tensors in (("outputs", outputs), ("inputs", inputs)):
        for i, t in enumerate(tensors):
            if type(t) is BatchedTensor:
                raise RuntimeError(
                    f"microtensor.autograd.grad(outputs, inputs, grad_outputs) called inside "
                    f"vmap. We do not support the case where any {kind} are vmapped tensors "
                    f"({kind[:-1]} {i} is being vmapped over). Please call autograd.grad() "
                    "outside vmap or file a bug report with your use case.")


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    """``autograd.grad(..., is_grads_batched=True)``: one backward pass vmapped over dim 0 of
    every grad_output."""
    def one_row(*rows):
        return engine.grad(outputs, inputs, rows, retain_graph=retain_graph,
                           create_graph=create_graph, allow_unused=allow_unused,
                           materialize_grads=materialize_grads)
    in_dims = tuple(None if g is None else 0 for g in grad_outputs)
    return vmap_call(one_row, in_dims, 0, "error", None, tuple(grad_outputs), {},
                     allow_none_outputs=True)


dispatch.set_batching(rules.handle, BatchedTensor)
rules.serve_binary_in_core()
_autograd_function.batched_apply = _function.batched_apply
engine.transform_guard = _refuse_inside_vmap
engine.batched_grad_impl = _batched_grad
