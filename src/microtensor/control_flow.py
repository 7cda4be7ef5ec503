"""PyTorch's control-flow operators, run eagerly: ``cond`` and ``while_loop``.

``cond(pred, true_fn, false_fn, operands)`` returns the chosen branch's outputs;
``while_loop(cond_fn, body_fn, carried_inputs)`` runs ``body_fn`` while ``cond_fn`` holds.
Both check their arguments as PyTorch does, and both branches of ``cond`` must return the
same structure of tensors of the same dtype, rank and device (the branch not taken runs
once, without recording gradients, for that check).  Autograd records the ops the chosen
code runs.  Under ``vmap`` a batched predicate decides per sample: ``cond`` runs both
branches and selects with ``where`` (as ``torch.func``'s rule), and ``while_loop`` runs
the body while any sample goes on, keeping the finished samples' values.
"""
from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import no_grad
from microtensor.vmap.api import tree_flatten, tree_unflatten
from microtensor.vmap.batched import BatchedTensor, active_levels
from microtensor.vmap.helpers import every_level_in_front

__all__ = ["cond", "while_loop"]


def _batched(t):
    return type(t) is BatchedTensor


def _check_operands(operands):
    leaves, _ = tree_flatten(operands)
    if not isinstance(operands, (tuple, list)) or \
            any(not isinstance(t, TensorBase) for t in leaves):
        raise RuntimeError("Expect operands to be a tuple of possibly nested dict/list/tuple "
                           f"that only consists of tensor leaves, but got {operands}.")


def _check_same_outputs(true_out, false_out):
    """PyTorch's checks that two branches' outputs merge: one structure, and per tensor
    the same dtype, device and rank (sizes may differ)."""
    true_leaves, true_spec = tree_flatten(true_out)
    false_leaves, false_spec = tree_flatten(false_out)
    if len(true_leaves) != len(false_leaves):
        raise RuntimeError(f"Expected to return same number of outputs but got:"
                           f"\n  true branch returns {len(true_leaves)} item(s)"
                           f"\n  false branch returns {len(false_leaves)} item(s)")
    if repr(true_spec) != repr(false_spec):
        raise RuntimeError(f"Unmatched output spec from torch.cond branches: true branch "
                           f"tree_spec {true_spec} vs false branch tree_spec {false_spec}.")
    for a, b in zip(true_leaves, false_leaves):
        if not (isinstance(a, TensorBase) and isinstance(b, TensorBase)):
            raise RuntimeError(f"Expect branches to return tensors, but got {a!r} and {b!r}.")
        for name, left, right in (("dtype", a.dtype, b.dtype), ("device", a.device, b.device),
                                  ("dim", a.dim(), b.dim())):
            if left != right:
                raise RuntimeError(f"When merging two branches' output in torch.cond, "
                                   f"expected same {name} but got {left} and {right}.")
    return true_leaves, false_leaves, true_spec


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` holds, else ``false_fn(*operands)``; ``pred`` is
    a bool or a one-element tensor (under vmap, possibly one per sample)."""
    if not isinstance(pred, (bool, TensorBase)):
        raise RuntimeError(f"Expected pred to be bool or tensor, but got {pred}.")
    if isinstance(pred, TensorBase) and pred.numel() != 1:
        raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got "
                           f"{pred}.")
    if not callable(true_fn) or not callable(false_fn):
        raise RuntimeError("Expect both branches to be callable.")
    _check_operands(operands)
    if _batched(pred):
        from microtensor.ops.pointwise import where
        true_leaves, false_leaves, spec = _check_same_outputs(true_fn(*operands),
                                                              false_fn(*operands))
        choice = pred.reshape(())
        return tree_unflatten([where(choice, a, b) for a, b in zip(true_leaves, false_leaves)],
                              spec)
    taken, other = (true_fn, false_fn) if pred else (false_fn, true_fn)
    result = taken(*operands)
    with no_grad():
        untaken = other(*operands)
    _check_same_outputs(*((result, untaken) if pred else (untaken, result)))
    return result


def _check_predicate(pred):
    if isinstance(pred, bool) or (isinstance(pred, TensorBase) and pred.dim() == 0 and
                                  pred.dtype.name == "bool"):
        return pred
    raise RuntimeError(f"cond_fn must return a boolean scalar tensor or a boolean but got "
                       f"{pred}")


def _any_sample(pred):
    """Whether any sample's predicate holds (``pred`` batched at some vmap levels)."""
    physical, _ = every_level_in_front(pred, active_levels())
    return bool(physical.any())


def while_loop(cond_fn, body_fn, carried_inputs):
    """Run ``carried = body_fn(*carried)`` while ``cond_fn(*carried)`` holds; returns the
    final carried values (a tuple; tensors copied when the body never runs)."""
    if not callable(cond_fn) or not callable(body_fn):
        raise RuntimeError("Expect cond_fn and body_fn to be callable.")
    if not isinstance(carried_inputs, (tuple, list)):
        raise RuntimeError(f"carried_inputs must be a tuple or list but got "
                           f"{type(carried_inputs)}")
    leaves, _ = tree_flatten(carried_inputs)
    if any(not isinstance(x, (TensorBase, int)) for x in leaves):
        raise RuntimeError("Expect carried_inputs to be a tuple of possibly nested "
                           "dict/list/tuple that only consists of tensor or int leaves, but got "
                           f"{carried_inputs}.")
    carried = tuple(x.clone() if isinstance(x, TensorBase) else x for x in carried_inputs)
    while True:
        pred = _check_predicate(cond_fn(*carried))
        if not (_any_sample(pred) if _batched(pred) else pred):
            return carried
        out = body_fn(*carried)
        if not isinstance(out, tuple):
            raise RuntimeError(f"body_fn should return a tuple but got {type(out)}")
        if len(out) != len(carried):
            raise RuntimeError(f"body_fn should return the same number of elements as "
                               f"carried_inputs, got {len(out)} vs {len(carried)}")
        carried = _keep_finished(pred, out, carried) if _batched(pred) else out


def _keep_finished(pred, new, old):
    """Per sample: the body's new values where its predicate held, the old ones where its
    loop had finished."""
    from microtensor.ops.pointwise import where
    new_leaves, spec = tree_flatten(new)
    old_leaves, _ = tree_flatten(old)
    if any(not isinstance(x, TensorBase) for x in new_leaves + old_leaves):
        raise RuntimeError("while_loop under vmap with a batched predicate needs tensor "
                           "carried values (an int cannot differ per sample)")
    return tree_unflatten([where(pred, a, b) for a, b in zip(new_leaves, old_leaves)], spec)
