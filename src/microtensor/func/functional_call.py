"""``functional_call``: run a module with some of its parameters and buffers replaced.

This is how a model becomes a function of its parameters, the form ``grad`` and ``vmap``
need: ``grad(lambda p, x: loss(functional_call(model, p, (x,))))(params, x)``.
"""


def _owner(module, name):
    """The sub-module holding dotted ``name`` and the name's last part."""
    *path, leaf = name.split(".")
    for part in path:
        module = module._modules[part]
    return module, leaf


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *,
                    tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (a dict
    from dotted names to tensors, or a sequence of such dicts) in place of the module's own
    parameters and buffers.  The module is restored afterwards, also on error.

    ``strict``: every parameter and buffer must be given, and nothing else.
    ``tie_weights``: a tensor registered under several names (tied weights) is replaced
    under all of them when one is given."""
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, dict):
        replacements = dict(dicts)
    else:
        replacements = {}
        for d in dicts:
            for name in d:
                if name in replacements:
                    raise ValueError(f"{name} appeared in multiple dictionaries; behavior of "
                                     "functional call is ambiguous")
            replacements.update(d)
    if strict:
        expected = {n for n, _ in module.named_parameters()}
        expected |= {n for n, _ in module.named_buffers()}
        missing = sorted(expected - set(replacements))
        unexpected = sorted(set(replacements) - expected)
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}: "
                               f"Missing key(s): {missing}. Unexpected key(s): {unexpected}.")
    if not isinstance(args, tuple):
        args = (args,)
    tied = _registrations(module) if tie_weights else {}
    places = []
    for name, value in replacements.items():
        owner, leaf = _owner(module, name)
        for table in (owner._parameters, owner._buffers):
            if leaf in table:
                places.append((table, leaf, value))
                places.extend((t, k, value) for t, k in tied.get(id(table[leaf]), ())
                              if t is not table or k != leaf)
                break
        else:
            places.append((owner.__dict__, leaf, value))
    saved = []
    try:
        for table, leaf, value in places:
            saved.append((table, leaf, table.get(leaf, _ABSENT)))
            table[leaf] = value
        return module(*args, **(kwargs or {}))
    finally:
        for table, leaf, old in reversed(saved):
            if old is _ABSENT:
                del table[leaf]
            else:
                table[leaf] = old


def _registrations(module):
    """For each tensor registered more than once in ``module`` or below (tied weights):
    id -> every (table, name) it is registered under."""
    found = {}
    stack, seen = [module], set()
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        for table in (sub._parameters, sub._buffers):
            for k, v in table.items():
                if v is not None:
                    found.setdefault(id(v), []).append((table, k))
        for child in sub._modules.values():
            if child is not None:
                stack.append(child)
    return {key: places for key, places in found.items() if len(places) > 1}


_ABSENT = object()
