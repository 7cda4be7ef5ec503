"""Per-sample gradient clipping: ``clipped_grad_sum``, by ghost norms or through
materialised per-sample gradients.

Ghost clipping, in three steps (``docs/privacy.md`` explains the identities):

1. The per-sample loss runs once under ``vmap`` with the parameters unbatched, on a tape:
   a call of an op that declares a norm rule (``Op.def_norm_rule``) with a parameter is
   recorded with its activation (made batched if it was not) and its physical output.
   One backward pass of the summed loss gives every recorded output's gradient; samples
   never mix under vmap, so sample i's rows are ∂loss_i/∂out_i.
2. Each parameter whose every use is a recorded call (checked on the autograd graph: the
   edges into its ``AccumulateGrad`` all come from those calls) gets its per-sample norms
   from the op's rule (several calls: from their rows, stacked); every other parameter
   from ``vmap(grad)`` of the loss with respect to the fallback parameters alone.
3. A backward pass of ``Σ_i c_i · loss_i`` through the retained graph, with the clip
   factors ``c_i = min(1, C / (‖g_i‖ + 1e-6))``, gives the clipped sum.
"""
import numbers
import threading

from microtensor._C.autograd import Node, gradient_edge
from microtensor._C.tensor import TensorBase
from microtensor.autograd import engine
from microtensor.autograd.grad_mode import no_grad
from microtensor.func.autodiff import grad as func_grad
from microtensor.ops import dispatch
from microtensor.ops.factory import ones_like
from microtensor.ops.ghost import outer_product_norms, squared_norms
from microtensor.ops.shape import cat
from microtensor.vmap import vmap
from microtensor.vmap.batched import (BatchedTensor, active_levels, batch_size, to_front,
                                      wrap)

METHODS = ("ghost", "vmap")
EPSILON = 1e-6      # Opacus's: c_i = min(1, C / (‖g_i‖ + 1e-6))


def clipped_grad_sum(loss_fn, params, *batch, max_grad_norm, method="ghost"):
    """``Σ_i min(1, C / (‖g_i‖ + 1e-6)) · g_i`` over the samples ``i`` of ``batch`` and
    each sample's gradient norm ``‖g_i‖``, where ``g_i`` is the gradient of
    ``loss_fn(params, *sample_i)`` (the loss of one sample) with respect to ``params`` (a
    dict of tensors), over all of them.  Returns ``(summed, norms)``: a dict like
    ``params`` and a tensor of shape [B].

    ``method="ghost"`` never forms a per-sample gradient of a parameter whose ops declare
    norm rules; ``method="vmap"`` forms them all (``vmap(grad(loss_fn))``)."""
    _check_arguments(params, batch, max_grad_norm, method)
    keys = list(params)
    leaves = {k: params[k].detach().requires_grad_() for k in keys}
    if method == "vmap":
        return _by_vmap(loss_fn, leaves, batch, max_grad_norm)
    return _by_ghost_norms(loss_fn, leaves, batch, max_grad_norm)


def _check_arguments(params, batch, max_grad_norm, method):
    if not isinstance(params, dict) or not all(isinstance(v, TensorBase)
                                               for v in params.values()):
        raise TypeError(f"clipped_grad_sum(): params must be a dict of tensors, got "
                        f"{_describe(params)}")
    if not params:
        raise ValueError("clipped_grad_sum(): params must hold at least one tensor")
    if isinstance(max_grad_norm, bool) or not isinstance(max_grad_norm, numbers.Real):
        raise TypeError(f"clipped_grad_sum(): max_grad_norm must be a number, got "
                        f"{type(max_grad_norm).__name__}")
    if not max_grad_norm > 0:
        raise ValueError(f"clipped_grad_sum(): max_grad_norm must be positive, got "
                         f"{max_grad_norm}")
    if method not in METHODS:
        raise ValueError(f"clipped_grad_sum(): method must be one of {METHODS}, got "
                         f"{method!r}")
    if not batch:
        raise ValueError("clipped_grad_sum(): expected at least one batch tensor")
    for i, t in enumerate(batch):
        if not isinstance(t, TensorBase):
            raise TypeError(f"clipped_grad_sum(): batch argument {i} must be a Tensor, got "
                            f"{type(t).__name__}")
        if t.dim() == 0:
            raise ValueError(f"clipped_grad_sum(): batch argument {i} is 0-d: it has no "
                             f"batch dimension")
    sizes = [t.shape[0] for t in batch]
    if len(set(sizes)) > 1:
        raise ValueError(f"clipped_grad_sum(): batch tensors must have the same first "
                         f"size, got sizes {sizes}")


def _describe(value):
    if isinstance(value, dict):
        kinds = sorted({type(v).__name__ for v in value.values()})
        return f"a dict of {', '.join(kinds)}"
    return type(value).__name__


def _in_dims(batch):
    return (None,) + (0,) * len(batch)


def _clip_factors(norms, max_grad_norm):
    return (max_grad_norm / (norms + EPSILON)).clamp(max=1.0)


def _total_norms(squares):
    total = squares[0]
    for s in squares[1:]:
        total = total + s
    return total.sqrt()


def _check_scalar_losses(losses, count):
    if tuple(losses.shape) != (count,):
        raise RuntimeError(f"clipped_grad_sum(): expected loss_fn(params, *sample) to return "
                           f"a scalar Tensor, got tensor with {losses.dim() - 1} dims")


# --------------------------------------------------------------------------- the reference

def _by_vmap(loss_fn, leaves, batch, max_grad_norm):
    per_sample = vmap(func_grad(loss_fn), in_dims=_in_dims(batch))(leaves, *batch)
    with no_grad():
        norms = _total_norms([squared_norms(g) for g in per_sample.values()])
        factors = _clip_factors(norms, max_grad_norm)
        summed = {k: _weighted_sum(g, factors) for k, g in per_sample.items()}
    return summed, norms


def _weighted_sum(per_sample, factors):
    count = per_sample.shape[0]
    flat = factors.unsqueeze(0).matmul(per_sample.reshape(count, -1))
    return flat.reshape(per_sample.shape[1:])


# --------------------------------------------------------------------------- ghost norms

class _Use:
    """One recorded call of an op with a norm rule: its arguments (the activation
    physical, batch first), the graph edge of its physical output as it was made (an
    in-place op on the output later moves the tensor's own edge), the output's batch dim,
    and the parameters it uses, with the number of graph edges into each that it made."""

    __slots__ = ("op", "arguments", "output", "bdim", "params", "edges")

    def __init__(self, op, arguments, output, bdim, params, edges):
        self.op = op
        self.arguments = arguments
        self.output = output          # (node, output number)
        self.bdim = bdim
        self.params = params          # argument name -> parameter key
        self.edges = edges            # parameter key -> edges into it made by this call


class _Tape:
    """What pass 1 records, for the thread that runs it."""

    def __init__(self, leaves):
        self.keys = {id(t): k for k, t in leaves.items()}
        self.leaves = leaves
        self.accumulators = {k: gradient_edge(t)[0] for k, t in leaves.items()}
        self.level = None
        self.busy = False
        self.uses = []


class _Local(threading.local):
    tape = None


_local = _Local()
_observers = 0
_observers_lock = threading.Lock()


def _observe(op, args, kwargs):
    """The dispatcher's observer during pass 1: records calls a norm rule can serve.

    An activation that is not batched (a recurrent layer's zero initial state, say) is
    made batched first, every sample the same: per sample nothing changes, and the
    output's gradient then comes out per sample, as the rule needs."""
    tape = _local.tape
    if tape is None or tape.busy or tape.level is None or \
            len(active_levels()) != tape.level:
        return NotImplemented
    rule = op.norm_rule
    arguments = op.bind(args, kwargs)
    activation = arguments.get(rule.activation)
    if type(activation) is BatchedTensor:
        if activation._level != tape.level:
            return NotImplemented
    elif isinstance(activation, TensorBase):
        size = batch_size(tape.level)
        arguments[rule.activation] = activation = wrap(
            activation.unsqueeze(0).expand((size,) + tuple(activation.shape)), 0, tape.level)
    else:
        return NotImplemented
    params = {}
    for name in rule.params:
        value = arguments.get(name)
        if type(value) is BatchedTensor:
            return NotImplemented
        key = tape.keys.get(id(value))
        if key is not None and tape.leaves[key] is value:
            params[name] = key
    if not params:
        return NotImplemented
    first_new = Node(()).sequence_nr
    tape.busy = True
    try:
        result = dispatch.call(op, tuple(arguments[n] for n in op.params),
                               {k: v for k, v in arguments.items() if k not in op.params})
    finally:
        tape.busy = False
    if type(result) is BatchedTensor and result._level == tape.level:
        arguments[rule.activation] = to_front(activation._value, activation._bdim)
        edges = _edges_into(tape, result._value.grad_fn, first_new)
        tape.uses.append(_Use(op, arguments, gradient_edge(result._value), result._bdim,
                              params, edges))
    return result


def _edges_into(tape, root, first_new=-1):
    """How many graph edges point into each parameter's ``AccumulateGrad``, from the nodes
    reachable from ``root`` whose sequence number is at least ``first_new``."""
    owners = {id(acc): k for k, acc in tape.accumulators.items()}
    counts = {}
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or node.sequence_nr < first_new:
            continue
        seen.add(id(node))
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            key = owners.get(id(nxt))
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
            else:
                stack.append(nxt)
    return counts


def _observing():
    global _observers
    with _observers_lock:
        _observers += 1
        dispatch.set_observer(_observe)


def _stop_observing():
    global _observers
    with _observers_lock:
        _observers -= 1
        if not _observers:
            dispatch.set_observer(None)


def _record(loss_fn, leaves, batch):
    """Pass 1: the per-sample losses [B] (graph kept) and the tape."""
    tape = _Tape(leaves)

    def per_sample(params, *sample):
        tape.level = len(active_levels())
        return loss_fn(params, *sample)

    outer, _local.tape = _local.tape, tape
    _observing()
    try:
        losses = vmap(per_sample, in_dims=_in_dims(batch))(leaves, *batch)
    finally:
        _stop_observing()
        _local.tape = outer
    _check_scalar_losses(losses, batch[0].shape[0])
    return losses, tape


def _rule_uses(tape, losses):
    """Which parameters take their rules: ``{key: [uses]}`` for each parameter that the
    recorded calls use and nothing else (every edge into it comes from those calls)."""
    total = _edges_into(tape, losses.grad_fn)
    uses_of = {}
    for use in tape.uses:
        for key in use.params.values():
            uses_of.setdefault(key, []).append(use)
    return {key: found for key, found in uses_of.items()
            if sum(u.edges.get(key, 0) for u in found) == total.get(key, 0) > 0}


def _rule_norms(tape, losses, chosen):
    """Per-parameter squared norms [B] from the rules, for the parameters in ``chosen``
    whose rules serve all their calls (the others are left out).  A parameter of several
    calls needs rows from each (``Op.def_norm_rule``): stacked, they are one gradient's."""
    uses = list({id(u): u for found in chosen.values() for u in found}.values())
    if not uses:
        return {}
    total = losses.sum()
    grads = engine.run_backward([gradient_edge(total)], [ones_like(total)], retain_graph=True,
                                create_graph=False, capture=[u.output for u in uses])
    squares = {}
    with no_grad():
        results = {id(use): NotImplemented if g is None else
                   use.op.norm_rule(to_front(g, use.bdim), use.arguments)
                   for use, g in zip(uses, grads)}
        for key, found in chosen.items():
            parts = [_part(results[id(u)], u, key) for u in found]
            if len(parts) == 1 and isinstance(parts[0], TensorBase):
                squares[key] = parts[0]
            elif len(parts) == 1 and isinstance(parts[0], tuple):
                squares[key] = outer_product_norms(*parts[0])
            elif all(isinstance(p, tuple) for p in parts) and _stackable(parts):
                squares[key] = outer_product_norms(cat([a for a, _ in parts], -2),
                                                   cat([g for _, g in parts], -2))
    return squares


def _stackable(rows):
    return len({(tuple(a.shape[:-2]), a.shape[-1], g.shape[-1]) for a, g in rows}) == 1


def _part(result, use, key):
    """What a rule gave for parameter ``key`` of its call: norms, rows, or None."""
    if result is NotImplemented:
        return None
    names = [name for name, k in use.params.items() if k == key]
    if len(names) != 1 or names[0] not in result:   # passed twice to one call, or no rule
        return None
    return result[names[0]]


def _fallback_norms(loss_fn, leaves, batch, keys):
    """Per-sample squared norms of the gradients with respect to ``keys`` alone, through
    ``vmap(grad)`` of the loss in those parameters (the others held constant)."""
    fixed = {k: t.detach() for k, t in leaves.items() if k not in keys}

    def restricted(chosen, *sample):
        return loss_fn({k: chosen[k] if k in chosen else fixed[k] for k in leaves}, *sample)

    chosen = {k: leaves[k].detach().requires_grad_() for k in keys}
    per_sample = vmap(func_grad(restricted), in_dims=_in_dims(batch))(chosen, *batch)
    with no_grad():
        return {k: squared_norms(per_sample[k]) for k in keys}


def ghost_plan(loss_fn, params, *batch):
    """How ghost clipping serves each parameter: ``{key: op name}`` for those whose norms
    come from that op's rule, ``"vmap"`` for the fallback (for tests and readers)."""
    leaves = {k: t.detach().requires_grad_() for k, t in params.items()}
    losses, tape = _record(loss_fn, leaves, batch)
    chosen = _rule_uses(tape, losses)
    served = _rule_norms(tape, losses, chosen)
    return {k: "+".join(sorted({u.op.name for u in chosen[k]})) if k in served else "vmap"
            for k in leaves}


def _by_ghost_norms(loss_fn, leaves, batch, max_grad_norm):
    losses, tape = _record(loss_fn, leaves, batch)
    squares = _rule_norms(tape, losses, _rule_uses(tape, losses))
    fallback = [k for k in leaves if k not in squares]
    if fallback:
        squares.update(_fallback_norms(loss_fn, leaves, batch, fallback))
    with no_grad():
        norms = _total_norms(list(squares.values()))
        factors = _clip_factors(norms, max_grad_norm)
    keys = list(leaves)
    grads = engine.grad(losses, [leaves[k] for k in keys], grad_outputs=factors,
                        allow_unused=True)
    summed = {k: g if g is not None else leaves[k].detach().new_zeros(leaves[k].shape)
              for k, g in zip(keys, grads)}
    return summed, norms


__all__ = ["clipped_grad_sum", "ghost_plan"]
