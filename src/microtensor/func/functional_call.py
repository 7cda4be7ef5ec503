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
    parameters and buffers.  The module is restored afterwards, also on error."""
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
        expected = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing = sorted(expected - set(replacements))
        unexpected = sorted(set(replacements) - expected)
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}: "
                               f"Missing key(s): {missing}. Unexpected key(s): {unexpected}.")
    if not isinstance(args, tuple):
        args = (args,)
    saved = []
    try:
        for name, value in replacements.items():
            owner, leaf = _owner(module, name)
            for table in (owner._parameters, owner._buffers):
                if leaf in table:
                    saved.append((table, leaf, table[leaf]))
                    table[leaf] = value
                    break
            else:
                saved.append((owner.__dict__, leaf, owner.__dict__.get(leaf, _ABSENT)))
                owner.__dict__[leaf] = value
        return module(*args, **(kwargs or {}))
    finally:
        for table, leaf, old in reversed(saved):
            if old is _ABSENT:
                del table[leaf]
            else:
                table[leaf] = old


_ABSENT = object()
