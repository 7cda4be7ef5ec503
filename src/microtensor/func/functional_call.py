"""``functional_call``: run a module with some of its parameters and buffers replaced;
``stack_module_state``: the parameters and buffers of several alike modules stacked, for
``vmap(functional_call)`` over an ensemble.

This is how a model becomes a function of its parameters, the form ``grad`` and ``vmap``
need: ``grad(lambda p, x: loss(functional_call(model, p, (x,))))(params, x)``.
"""
from collections.abc import Sequence
from operator import is_

from microtensor.ops.shape import stack


def _owner(module, name):
    """The sub-module holding dotted ``name`` and the name's last part."""
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    return module, leaf


def _merged(dicts):
    """``parameter_and_buffer_dicts`` as one dict (the given dict itself when it is one)."""
    if isinstance(dicts, dict):
        return dicts
    if not isinstance(dicts, Sequence) or isinstance(dicts, str):
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(dicts)}")
    if not all(isinstance(d, dict) for d in dicts):
        raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                         "dictionaries")
    counts = {}
    for d in dicts:
        for k in d:
            counts[k] = counts.get(k, 0) + 1
    repeated = [k for k, n in counts.items() if n > 1]
    if repeated:
        raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                         "functional call is ambiguous")
    return {k: v for d in dicts for k, v in d.items()}


def _all_names(module):
    """Every dotted name of a parameter or buffer, tied ones under each of their names."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def _untied(tied, replacements):
    """``replacements`` with each given tied tensor also given under its other names
    (``tied``: name -> all names of its tensor); a ValueError when different values are
    given for names of one tied tensor."""
    given = [name for name in replacements if name in tied]
    if not given:
        return replacements
    for name in given:
        names = tied[name]
        values = {id(replacements[n]) for n in names if n in replacements}
        if len(values) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, "
                             "which are tied. Consider using tie_weights=False")
    untied = dict(replacements)
    for name in given:
        for other in tied[name]:
            untied[other] = replacements[name]
    return untied


class _Plan:
    """What ``functional_call`` needs to know of a module's tree, walked once and reused
    while no parameter, buffer or sub-module table of the tree changes: ``snapshot`` holds
    each such table with its keys and values at walk time; ``names`` every dotted name of a
    parameter or buffer; ``tied`` name -> all names of its tensor, for tensors registered
    under several names; ``spots`` name -> (the table holding it, its last part).  The
    tables empty at walk time are kept apart in ``empty``: most are (a leaf module has no
    sub-modules, most have no buffers) and they need only a truth test."""
    __slots__ = ("snapshot", "empty", "names", "tied", "spots")

    def __init__(self, module):
        tables = [table for m in module.modules()
                  for table in (m._parameters, m._buffers, m._modules)]
        self.snapshot = [(table, tuple(table), tuple(table.values()))
                         for table in tables if table]
        self.empty = [table for table in tables if not table]
        named = _all_names(module)
        self.names = frozenset(named)
        names_of = {}
        for name, tensor in named.items():
            names_of.setdefault(id(tensor), set()).add(name)
        self.tied = {name: names for names in names_of.values() if len(names) > 1
                     for name in names}
        self.spots = {}
        for name in named:
            owner, leaf = _owner(module, name)
            self.spots[name] = (_table(owner, leaf), leaf)

    def __reduce__(self):
        # a pickled or deep-copied module gets no plan (it walks its own tree afresh)
        return _no_plan, ()

    def current(self):
        """Whether every table still holds the same keys and the same objects."""
        for table in self.empty:
            if table:
                return False
        for table, keys, values in self.snapshot:
            if (len(table) != len(keys) or tuple(table) != keys
                    or not all(map(is_, table.values(), values))):
                return False
        return True


_PLAN = "_functional_call_plan"


def _no_plan():
    return None


def _plan(module):
    """The module's plan, kept in the module itself: a registry outside it would keep
    alive a module whose sub-module refers back to it (the plan holds the tree's tables);
    inside, that is an ordinary cycle the garbage collector frees."""
    plan = module.__dict__.get(_PLAN)
    if plan is None or not plan.current():
        plan = module.__dict__[_PLAN] = _Plan(module)
    return plan


def _check_keys(module, valid, replacements):
    missing = sorted(valid - set(replacements))
    unexpected = sorted(set(replacements) - valid)
    errors = []
    if unexpected:
        errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if errors:
        raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t"
                           + "\n\t".join(errors))


def _table(owner, leaf):
    """Where ``owner`` keeps attribute ``leaf``: its parameter or buffer table, or its
    ``__dict__`` (a plain attribute, or a name the module does not have)."""
    for table in (owner._parameters, owner._buffers):
        if leaf in table:
            return table
    return owner.__dict__


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (a dict
    from dotted names to tensors, or a sequence of such dicts with distinct keys) in place
    of the module's own parameters and buffers.  The module is restored afterwards, also on
    error; a tensor the module reassigns during the call (``self.count = self.count + 1``)
    is written back into the given dict, as PyTorch does.

    ``tie_weights``: a tensor registered under several names (tied weights) is replaced
    under all of them when one is given (different values for them: ValueError).
    ``strict``: every parameter and buffer must be given, and nothing else."""
    # one dict and no tied weights (the common call): no helper frames
    given = parameter_and_buffer_dicts if type(parameter_and_buffer_dicts) is dict else \
        _merged(parameter_and_buffer_dicts)
    plan = _plan(module)
    replacements = _untied(plan.tied, given) if tie_weights and plan.tied else given
    if strict:
        _check_keys(module, plan.names, replacements)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    spots = plan.spots
    saved = []
    try:
        # (a name that cannot be placed raises here: the finally clause below puts back
        # what was placed before it)
        for name, value in replacements.items():
            spot = spots.get(name)
            if spot is None:    # not a parameter or buffer: a plain attribute, or a new name
                owner, leaf = _owner(module, name)
                table = _table(owner, leaf)
            else:
                table, leaf = spot
            saved.append((name, table, leaf, table.get(leaf, _ABSENT)))
            table[leaf] = value
        return module(*args, **(kwargs or {}))
    finally:
        for name, table, leaf, old in reversed(saved):
            current = table.get(leaf, _ABSENT)
            if name in given and current is not _ABSENT:
                given[name] = current
            if old is _ABSENT:
                del table[leaf]
            else:
                table[leaf] = old


_ABSENT = object()


def _stacked_leaf(tensors, name):
    if all(t.requires_grad for t in tensors):
        requires_grad = True
    elif not any(t.requires_grad for t in tensors):
        requires_grad = False
    else:
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    stacked = stack(tensors)
    return stacked.detach().requires_grad_() if requires_grad else stacked


def stack_module_state(models):
    """``(params, buffers)``: for each name of ``models[0]``'s parameters (buffers), the
    tensors of all ``models`` stacked along a new dim 0.  Stacked parameters are new
    leaves (detached from the models' own, requiring grad), ready for an optimizer.

    The models must be of one class and all in training or all in eval mode."""
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or not any(m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(m.named_parameters()) for m in models]
    params = {k: _stacked_leaf([p[k] for p in all_params], k) for k in all_params[0]}
    all_buffers = [dict(m.named_buffers()) for m in models]
    buffers = {k: _stacked_leaf([b[k] for b in all_buffers], k) for k in all_buffers[0]}
    return params, buffers
