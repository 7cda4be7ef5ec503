"""The differentiation transforms of ``torch.func``: ``grad``, ``grad_and_value``, ``vjp``,
``jvp``, ``linearize``, ``jacrev``, ``jacfwd``, ``hessian``.

They are built on ``autograd`` and ``vmap`` with the layering called "autograd below
vmap" (docs/architecture.md): batching rules run ops on physical tensors and autograd
records the physical graph.  A transform call therefore works on physical tensors:

1. every differentiated input is taken out of its ``BatchedTensor`` wrappers and, if it is
   not batched at some active vmap level (a parameter under ``vmap(grad(f), in_dims=(None,
   0))``), expanded across that level without a copy, so that its gradient comes out per
   sample;
2. a fresh *handle* is made from it (``detach().requires_grad_()``, or a differentiable
   ``alias`` when an outer transform differentiates through it), wrapped again with the
   same levels and passed to ``f``.  Inner and outer transforms differentiate with respect
   to their own handles only, so a function closing over an outer input gets the right
   answer;
3. the backward pass runs on the physical graph from the physical output.  Samples never
   mix, so seeding it with ones of the physical shape gives every sample its own gradient.

``vjp_fn`` may be called inside a newer ``vmap`` (that is what ``jacrev`` does): the
cotangent's newer levels stay wrapped, the engine runs the backward nodes on
``BatchedTensor`` gradients, and the result is rewrapped with the primal's levels inside
the newer ones.  Forward mode (``jvp``, ``jacfwd``) is reverse mode twice, exactly: the
map ``u -> J^T u`` is linear, so its vjp with cotangent ``t`` is ``J t``.  It costs about
two backward passes instead of one forward-mode pass and gives exact values.
"""
from microtensor._C.autograd import detached_alias, reaches_other_leaves
# grad mode read and set in the core directly: the transforms check it several times a call
from microtensor._C.tensor import (TensorBase, empty_contiguous, is_grad_enabled,
                                  set_grad_enabled)
from microtensor.autograd.engine import run_backward
from microtensor.autograd.recording import gradient_edge
from microtensor.func.layout import expand_to_levels, merge, physical, with_layout
from microtensor.vmap.api import tree_flatten, tree_unflatten, vmap, vmap_call
from microtensor.vmap.batched import BatchedTensor, active_levels, wrap

_NOT_SCALAR = ("grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
               "tensor with {} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")


# --------------------------------------------------------------------------- one call

class _Differentiation:
    """One call of a reverse-mode transform: the handles of its inputs and the backward
    passes from its outputs to them."""

    def __init__(self, inputs):
        self.outer_grad = outer_grad = is_grad_enabled()
        self.sizes = sizes = {}
        for lv in active_levels():
            sizes[lv.number] = lv.size
        self.handles, self.layouts, self.inputs = handles, layouts, logical = [], [], []
        # the common call, vmap(grad(f)) with unbatched inputs: each expanded in front
        level, size = tuple(sizes.items())[0] if len(sizes) == 1 else (None, None)
        set_grad_enabled(True)
        try:
            for x in inputs:
                front = level is not None and type(x) is not BatchedTensor
                if front:
                    value, layout = x.expand((size,) + x._sizes), {level: 0}
                else:
                    value, layout = expand_to_levels(*physical(x), sizes)
                if value._dtype.kind < 2:
                    raise RuntimeError("only Tensors of floating point dtype can require "
                                       "gradients")
                if outer_grad and value.requires_grad:
                    handle = value.alias()
                else:
                    # a fresh floating-point leaf: requires_grad_()'s checks cannot fail
                    handle = detached_alias(value)
                    handle._requires_grad = True
                handles.append(handle)
                layouts.append(layout)
                if front:
                    logical.append(wrap(handle, 0, level))
                else:   # no layout (no vmap level): the handle is already logical
                    logical.append(merge(handle, layout) if layout else handle)
        finally:
            set_grad_enabled(outer_grad)
        self.connected = False

    def call(self, func, args, kwargs):
        prev = is_grad_enabled()
        set_grad_enabled(True)
        try:
            return func(*args, **kwargs)
        finally:
            set_grad_enabled(prev)

    def roots(self, outputs):
        """The physical outputs, expanded across every level active at this call (so that
        a cotangent batched there has somewhere to go); notes whether the graph reaches
        tensors other than the handles (then an outer transform wants it recorded)."""
        roots = []
        sizes = self.sizes
        for o in outputs:
            if type(o) is BatchedTensor and type(o._value) is not BatchedTensor and \
                    len(sizes) == 1 and o._level in sizes:
                # the common output: batched at the one active level, nothing to expand
                roots.append((o._value, {o._level: o._bdim}))
            else:
                roots.append(expand_to_levels(*physical(o), sizes))
        if self.outer_grad:
            values = []               # a loop, not a comprehension: no frame of its own
            for r, _ in roots:
                values.append(r)
            self.connected = reaches_other_leaves(values, self.handles)
        return roots

    def result(self, t):
        """An output or aux value as returned to the caller: detached unless an outer
        transform differentiates through it."""
        if self.connected or not isinstance(t, TensorBase):
            return t
        return t.detach()

    def backward(self, root_values, root_grads, create_graph, retain_graph):
        prev = is_grad_enabled()
        set_grad_enabled(True)
        try:
            captured = run_backward(list(map(gradient_edge, root_values)), root_grads,
                                    retain_graph=retain_graph, create_graph=create_graph,
                                    capture=list(map(gradient_edge, self.handles)))
            grads = []
            for handle, layout, g in zip(self.handles, self.layouts, captured):
                if g is None:
                    g = handle.new_zeros(handle._sizes)
                elif g._sizes != handle._sizes:
                    g = g.sum_to_size(handle._sizes)
                if len(layout) == 1 and type(g) is not BatchedTensor:
                    # one level (every gradient under vmap(grad)): wrapped without merge
                    ((level, bdim),) = layout.items()
                    grads.append(wrap(g, bdim, level))
                else:
                    # no layout (no older vmap level): ``g`` is already in logical form
                    grads.append(merge(g, layout) if layout else g)
            return grads
        finally:
            set_grad_enabled(prev)


def _tensor_leaves(tree):
    leaves, spec = tree_flatten(tree)
    for leaf in leaves:
        if not isinstance(leaf, TensorBase):
            raise ValueError(f"Thing passed to transform API must be Tensor, got {type(leaf)}")
    return leaves, spec


def _tensor_dict_keys(x):
    """The keys of ``x`` if it is a plain dict of tensors, else None."""
    if type(x) is not dict:
        return None
    for value in x.values():
        if not isinstance(value, TensorBase):
            return None
    return list(x)


def _split_aux(result, api):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) if "
                           "has_aux is True")
    return result


def _argnums(argnums, n):
    """``argnums`` as a tuple of non-negative positions, checked as torch.func does."""
    single = isinstance(argnums, int) and not isinstance(argnums, bool)
    if not single:
        if not isinstance(argnums, tuple) or not all(
                isinstance(a, int) and not isinstance(a, bool) for a in argnums):
            raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
        if not argnums:
            raise RuntimeError("argnums must be non-empty")
    positions = []
    for a in ((argnums,) if single else argnums):
        if not -n <= a < n:
            raise RuntimeError(f"Got argnum={a}, but only {n} positional inputs")
        positions.append(a % n)
    if len(set(positions)) != len(positions):
        raise RuntimeError(f"argnums must be unique, got {argnums}")
    return tuple(positions), single


def _replace(args, positions, values):
    args = list(args)
    for p, v in zip(positions, values):
        args[p] = v
    return tuple(args)


# --------------------------------------------------------------------------- grad

def _gradient(func, argnums, has_aux, with_value, args, kwargs):
    """One call of ``grad``/``grad_and_value``: ``(gradients, value or None, aux)``."""
    if type(argnums) is int and 0 <= argnums < len(args):   # the common call, unchecked
        positions, single = (argnums,), True
    else:
        positions, single = _argnums(argnums, len(args))
    # with respect to one dict of tensors (named parameters, the common call): its values
    # are the leaves, without the pytree functions
    keys = _tensor_dict_keys(args[positions[0]]) if single else None
    if keys is None:
        leaves, spec = _tensor_leaves(tuple(map(args.__getitem__, positions)))
    else:
        leaves = list(args[positions[0]].values())
    diff = _Differentiation(leaves)
    if keys is None:
        args = _replace(args, positions, tree_unflatten(diff.inputs, spec))
    else:
        p = positions[0]
        args = args[:p] + (dict(zip(keys, diff.inputs)),) + args[p + 1:]
    out = diff.call(func, args, kwargs)
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise RuntimeError("grad_and_value(f)(*args): output of function f should be a "
                               "tuple: (output, aux) if has_aux is True")
        out, aux = out
    if not isinstance(out, TensorBase):
        raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                           f"Tensor, got {type(out)}")
    if out.dim() != 0:
        raise RuntimeError(_NOT_SCALAR.format(out.dim()))
    ((root, _),) = diff.roots([out])
    create_graph = diff.connected
    grads = diff.backward([root], [_ones(root)], create_graph, create_graph)
    grads = tree_unflatten(grads, spec) if keys is None else (dict(zip(keys, grads)),)
    if has_aux:
        aux_leaves, aux_spec = tree_flatten(aux)
        aux = tree_unflatten([diff.result(a) for a in aux_leaves], aux_spec)
    return grads[0] if single else grads, diff.result(out) if with_value else None, aux


def grad_and_value(func, argnums=0, has_aux=False):
    """``func`` returning ``(gradient, value)`` (``((gradient, (value, aux)))`` with
    ``has_aux``); ``gradient`` has the structure of ``args[argnums]``."""
    def wrapper(*args, **kwargs):
        grads, value, aux = _gradient(func, argnums, has_aux, True, args, kwargs)
        return (grads, (value, aux)) if has_aux else (grads, value)
    return _named(wrapper, func)


def grad(func, argnums=0, has_aux=False):
    """The gradient of a scalar function (``torch.func.grad``): ``grad(f)(x)`` is df/dx at
    ``x``; with ``has_aux`` ``f`` returns ``(output, aux)`` and the call ``(grad, aux)``."""
    def wrapper(*args, **kwargs):
        grads, _, aux = _gradient(func, argnums, has_aux, False, args, kwargs)
        return (grads, aux) if has_aux else grads
    return _named(wrapper, func)


def _ones(t):
    """Ones shaped like the physical tensor ``t`` (the seed of a backward pass)."""
    seed = empty_contiguous(t._sizes, t._dtype, t.device)
    seed._array().fill(1)
    return seed


def _named(wrapper, func):
    wrapper.__wrapped__ = func
    wrapper.__name__ = wrapper.__qualname__ = getattr(func, "__name__", "transformed")
    wrapper.__doc__ = getattr(func, "__doc__", None)
    return wrapper


# --------------------------------------------------------------------------- vjp

def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)`` (and ``aux``): ``vjp_fn(cotangents)`` gives the
    vector-Jacobian product for each primal (a tuple).  ``vjp_fn`` may be called many
    times, and inside ``vmap`` with batched cotangents."""
    leaves, spec = _tensor_leaves(primals)
    diff = _Differentiation(leaves)
    out = diff.call(func, tree_unflatten(diff.inputs, spec), {})
    aux = None
    if has_aux:
        out, aux = _split_aux(out, "vjp(f, *primals)")
    return _vjp_of_call(diff, spec, out, has_aux, aux)


def _vjp_of_call(diff, spec, out, has_aux, aux):
    """``vjp``'s result once ``func`` has run on ``diff``'s inputs (``spec``: the primals'
    structure) and returned ``out`` (and ``aux``)."""
    outputs, out_spec = tree_flatten(out)
    for o in outputs:
        if not isinstance(o, TensorBase):
            raise RuntimeError(f"vjp(f, *primals): Expected f to be a function that has "
                               f"non-empty output and returns only Tensors, got {type(o)}")
    roots = diff.roots(outputs)
    shapes = [o.shape for o in outputs]

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        cts, ct_spec = tree_flatten(cotangents)
        if repr(ct_spec) != repr(out_spec):
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function. cotangents: "
                               f"{ct_spec}, primal output: {out_spec}")
        root_grads = []
        for i, (ct, shape, (root, layout)) in enumerate(zip(cts, shapes, roots)):
            if not isinstance(ct, TensorBase):
                raise RuntimeError(f"vjp_fn: Expected cotangents to be Tensors, got {type(ct)}")
            if ct.shape != shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{ct.shape} and output[{i}] has a shape of {shape}.")
            root_grads.append(with_layout(ct, layout, root.dim(), diff.sizes))
        if create_graph is None:
            create_graph = is_grad_enabled() and (
                diff.connected or any(ct.requires_grad for ct in cts))
        grads = diff.backward([r for r, _ in roots], root_grads, create_graph,
                              retain_graph or create_graph)
        return tree_unflatten(grads, spec)

    out = tree_unflatten([diff.result(o) for o in outputs], out_spec)
    if has_aux:
        aux_leaves, aux_spec = tree_flatten(aux)
        return out, vjp_fn, tree_unflatten([diff.result(a) for a in aux_leaves], aux_spec)
    return out, vjp_fn


# --------------------------------------------------------------------------- forward mode

def _zeros_like(t):
    from microtensor.ops.factory import zeros_like
    return zeros_like(t)


def _linearized(out, vjp_fn):
    """The map ``tangents -> J tangents`` from ``vjp_fn`` (``u -> J^T u``): being linear in
    ``u``, its vjp at any point with cotangent ``t`` is ``J t``.

    The graph of ``vjp_fn`` reaches the handles of the first pass, so the result would
    always look differentiable.  It is detached unless ``out`` (``vjp``'s output, kept
    differentiable only when the function reaches tensors an outer transform or the
    caller differentiates: the primals, or tensors it closes over) or a tangent requires
    grad."""
    outputs, out_spec = tree_flatten(out)
    start = tree_unflatten([_zeros_like(o) for o in outputs], out_spec)
    _, transposed = vjp(vjp_fn, start)
    connected = any(o.requires_grad for o in outputs)

    def forward(tangents):
        result = transposed(tangents)[0]
        if connected or any(t.requires_grad for t in tree_flatten(tangents)[0]):
            return result
        leaves, spec = tree_flatten(result)
        return tree_unflatten([t.detach() for t in leaves], spec)
    return forward


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J tangents)``: the Jacobian-vector product (forward mode, computed
    exactly by two reverse passes; see the module docstring)."""
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. E.g. it "
                           "should be valid to call f(*primals).")
    if not isinstance(tangents, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected tangents to be a tuple.")
    primal_leaves, primal_spec = _tensor_leaves(primals)
    tangent_leaves, tangent_spec = _tensor_leaves(tangents)
    if repr(primal_spec) != repr(tangent_spec):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure. For example, if primals is a tuple of 3 "
                           "tensors, tangents also must be. Got primals with structure "
                           f"{primal_spec} and tangents with structure {tangent_spec}")
    for p, t in zip(primal_leaves, tangent_leaves):
        if p.shape != t.shape:
            raise RuntimeError("Trying to set a forward gradient that has a different size "
                               "than that of the original Tensor, this is not supported. "
                               f"Tensor is of size {list(p.shape)} while the given forward "
                               f"gradient is of size {list(t.shape)}.")
    result = vjp(func, *primals, has_aux=has_aux)
    out, vjp_fn = result[0], result[1]
    tangent_out = _linearized(out, vjp_fn)(tangents)
    if has_aux:
        return out, tangent_out, result[2]
    return out, tangent_out


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` is the Jacobian-vector product
    of ``func`` at ``primals`` (``jvp``'s second result), computed from a graph recorded
    once, so that it is cheap to call many times.  ``func`` runs twice, as in PyTorch:
    once for the output returned, once to record that graph."""
    output = func(*primals)
    _, output_spec = tree_flatten(output)
    flat_primals, primal_spec = _tensor_leaves(primals)
    out, vjp_fn = vjp(func, *primals)
    linear = _linearized(out, vjp_fn)
    metas = [(p.shape, p.device, p.dtype) for p in flat_primals]

    def jvp_fn(*tangents):
        flat_tangents, tangent_spec = tree_flatten(tangents)
        if repr(tangent_spec) != repr(primal_spec):
            raise RuntimeError(f"Expected the tangents {tangent_spec} to have the same argspec "
                               f"as the primals {primal_spec}")
        for i, (t, meta) in enumerate(zip(flat_tangents, metas)):
            for what, mine, theirs in zip(("shape", "device", "dtype"),
                                          (t.shape, t.device, t.dtype), meta):
                if mine != theirs:
                    raise RuntimeError(f"tangent:{i} with {what} {mine} in flattened pytree "
                                       f"doesn't match the {what} {theirs} of the "
                                       "corresponding primal.")
        flat_out, _ = tree_flatten(linear(tangents))
        return tree_unflatten(flat_out, output_spec)

    return output, jvp_fn


# --------------------------------------------------------------------------- Jacobians

def _restricted(func, args, positions):
    """``func`` as a function of the arguments at ``positions`` only."""
    def restricted(*chosen):
        return func(*_replace(args, positions, chosen))
    return restricted


def _identity(n, dtype, device):
    """A new ``n x n`` identity matrix (filled in place: ``eye``'s argument checks are not
    needed here)."""
    identity = empty_contiguous((n, n), dtype, device)
    if not identity.is_meta:
        values = identity._array()
        values.fill(0)
        values.reshape(-1)[::n + 1] = 1
    return identity


def _basis(leaves, dtype):
    """Rows of the identity over all elements of ``leaves``, cut into one batched tensor per
    leaf (``[total, *leaf.shape]``)."""
    numels = [leaf.numel() for leaf in leaves]
    total = sum(numels)
    identity = _identity(total, dtype, leaves[0].device)
    pieces, start = [], 0
    for leaf, n in zip(leaves, numels):
        pieces.append(identity[:, start:start + n].reshape((total,) + tuple(leaf.shape)))
        start += n
    return pieces, numels


def _rows(batched_result, numels):
    """``batched_result`` (``[total, ...]``) split back into one block per basis piece."""
    blocks, start = [], 0
    for n in numels:
        blocks.append(batched_result[start:start + n])
        start += n
    return blocks


def _jacrev_of_tensor(func, args, kwargs, position, has_aux, chunk_size):
    """``jacrev`` with respect to one tensor argument (the common call), without the pytree
    path: one ``_Differentiation``, and for a tensor output one backward vmapped over the
    rows of the identity viewed as ``[n, *out.shape]``.  Other outputs (pytrees) take
    ``vjp``'s general path from the recorded graph."""
    x = args[position]
    diff = _Differentiation((x,))
    out = diff.call(func, args[:position] + (diff.inputs[0],) + args[position + 1:], kwargs)
    aux = None
    if has_aux:
        out, aux = _split_aux(out, "vjp(f, *primals)")
    if isinstance(out, TensorBase):
        ((root, layout),) = diff.roots([out])
        create_graph = is_grad_enabled() and diff.connected
        rank = root.dim()

        def one_row(row):
            # with no older levels the row is already the cotangent of the physical root
            ct = with_layout(row, layout, rank, diff.sizes) if layout else row
            return diff.backward([root], [ct], create_graph, True)[0]
        # shapes as the tensors' own size tuples (a logical one for a BatchedTensor): no
        # ``Size`` made per read
        n = out._numel
        basis = _identity(n, out._dtype, out.device)
        if out._sizes != (n,):
            basis = basis.reshape((n,) + out._sizes)
        # one row needs no vmap level; the rows are reshaped only when their shape is not
        # already the Jacobian's (no view recorded for an outer transform, as hessian's,
        # to differentiate)
        if n == 1:
            jac = one_row(basis[0])
        else:
            jac = vmap_call(one_row, 0, 0, "error", chunk_size, (basis,), {})
        shape = out._sizes + x._sizes
        if jac._sizes != shape:
            jac = jac.reshape(shape)
        if has_aux:
            aux_leaves, aux_spec = tree_flatten(aux)
            return jac, tree_unflatten([diff.result(a) for a in aux_leaves], aux_spec)
        return jac
    spec = tree_flatten((x,))[1]
    return _jacobian(_vjp_of_call(diff, spec, out, has_aux, aux), [x], spec, True, has_aux,
                     chunk_size)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """The Jacobian of ``func`` by reverse mode: ``vmap`` of its vjp over the rows of the
    identity (``chunk_size`` rows at a time).  ``jac[out][arg]`` has shape
    ``out.shape + arg.shape``."""
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    def wrapper(*args, **kwargs):
        positions, single = _argnums(argnums, len(args))
        if single and isinstance(args[positions[0]], TensorBase):
            return _jacrev_of_tensor(func, args, kwargs, positions[0], has_aux, chunk_size)
        result = vjp(_restricted(lambda *a: func(*a, **kwargs), args, positions),
                     *(args[p] for p in positions), has_aux=has_aux)
        inputs, in_spec = tree_flatten(tuple(args[p] for p in positions))
        return _jacobian(result, inputs, in_spec, single, has_aux, chunk_size)
    return _named(wrapper, func)


def _jacobian(result, inputs, in_spec, single, has_aux, chunk_size):
    """``jacrev``'s result from ``vjp``'s: its ``vjp_fn`` vmapped over the identity's rows."""
    out, vjp_fn = result[0], result[1]
    outputs, out_spec = tree_flatten(out)
    pieces, numels = _basis(outputs, outputs[0].dtype)

    def one_row(*row):
        return tree_flatten(vjp_fn(tree_unflatten(list(row), out_spec)))[0]
    if sum(numels) == 1:
        # one row (a scalar function): no vmap level needed
        grads = [g.unsqueeze(0) for g in one_row(*(p[0] for p in pieces))]
    else:
        grads = vmap(one_row, chunk_size=chunk_size)(*pieces)
    per_output = []
    for i, o in enumerate(outputs):
        blocks = [_rows(g, numels)[i].reshape(tuple(o.shape) + tuple(x.shape))
                  for g, x in zip(grads, inputs)]
        jac = tree_unflatten(blocks, in_spec)
        per_output.append(jac[0] if single else jac)
    jac = tree_unflatten(per_output, out_spec)
    return (jac, result[2]) if has_aux else jac


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of ``func`` by forward mode (``vmap`` of ``jvp`` over the identity's
    rows; forward mode is exact reverse-over-reverse here).  Same layout as ``jacrev``."""
    def wrapper(*args, **kwargs):
        positions, single = _argnums(argnums, len(args))
        result = vjp(_restricted(lambda *a: func(*a, **kwargs), args, positions),
                     *(args[p] for p in positions), has_aux=has_aux)
        out, vjp_fn = result[0], result[1]
        outputs, out_spec = tree_flatten(out)
        inputs, in_spec = _tensor_leaves(tuple(args[p] for p in positions))
        forward = _linearized(out, vjp_fn)
        pieces, numels = _basis(inputs, inputs[0].dtype)

        def one_column(*column):
            return tree_flatten(forward(tree_unflatten(list(column), in_spec)))[0]
        columns = vmap(one_column, randomness=randomness)(*pieces)
        per_output = []
        for o, col in zip(outputs, columns):
            blocks = []
            for x, block in zip(inputs, _rows(col, numels)):
                block = block.reshape(tuple(x.shape) + tuple(o.shape))
                nx, no = x.dim(), o.dim()
                blocks.append(block.permute(tuple(range(nx, nx + no)) + tuple(range(nx))))
            jac = tree_unflatten(blocks, in_spec)
            per_output.append(jac[0] if single else jac)
        jac = tree_unflatten(per_output, out_spec)
        return (jac, result[2]) if has_aux else jac
    return _named(wrapper, func)


def hessian(func, argnums=0):
    """The Hessian of a scalar function: the Jacobian of its gradient.

    ``torch.func`` computes it as ``jacfwd(jacrev(f))``.  Here forward mode is itself two
    reverse passes, so ``jacrev(jacrev(f))`` gives the same matrix with one pass less
    (about 1.5x faster)."""
    return jacrev(jacrev(func, argnums), argnums)


__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian"]
