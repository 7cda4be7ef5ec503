"""Where each vmap level's batch dimension sits in a tensor's physical value.

A tensor inside ``vmap(vmap(f))`` is a chain of ``BatchedTensor`` wrappers, one per level
(``vmap.batched``).  The function transforms differentiate the *physical* tensor under
the chain, so they need to take a chain apart and put it back together, possibly with
dimensions added or moved.  The representation used for that is a *layout*: a dict
``{level number: physical dim}``; every physical dim not in it is a logical (per-sample)
dim, in order.
"""
from microtensor.vmap.batched import BatchedTensor, wrap


def physical(t):
    """``(value, layout)``: the plain tensor under all of ``t``'s wrappers and where each
    wrapper's batch dim is in it (``(t, {})`` for a plain tensor)."""
    if type(t) is not BatchedTensor:
        return t, {}
    chain = []
    while type(t) is BatchedTensor:
        chain.append((t._level, t._bdim))
        t = t._value
    free = list(range(len(t._sizes)))
    layout = {}
    for level, bdim in reversed(chain):     # innermost wrapper first
        layout[level] = free.pop(bdim)
    return t, layout


def batched(value, layout):
    """The inverse of ``physical``: ``value`` wrapped once per level of ``layout``."""
    if not layout:
        return value
    if len(layout) == 1:
        ((level, bdim),) = layout.items()
        return wrap(value, bdim, level)
    free = list(range(len(value._sizes)))
    for level in sorted(layout):
        bdim = free.index(layout[level])
        free.pop(bdim)
        value = wrap(value, bdim, level)
    return value


def expand_to_levels(value, layout, sizes):
    """``value`` given a batch dim (in front, expanded: no copy) for every level of
    ``sizes`` (level -> batch size) that ``layout`` lacks, and the new layout."""
    missing = []                  # a loop, not a comprehension: no frame of its own
    for level in sizes:
        if level not in layout:
            missing.append(level)
    if not missing:
        return value, layout
    if not layout and len(missing) == 1:     # an unbatched input under one vmap
        level = missing[0]
        return value.expand((sizes[level],) + value._sizes), {level: 0}
    m = len(missing)
    value = value.expand(tuple(sizes[level] for level in missing) + tuple(value._sizes))
    layout = {level: d + m for level, d in layout.items()}
    layout.update((level, i) for i, level in enumerate(missing))
    return value, layout


def with_layout(t, target, target_rank, sizes):
    """``t``'s levels that are in ``target`` turned into plain dims placed as ``target``
    says (a tensor of rank ``target_rank`` once the other levels are wrapped again);
    levels ``t`` lacks are expanded (``sizes``: level -> batch size).

    This is how a cotangent given inside a newer vmap meets a graph recorded under older
    levels: the older levels become ordinary dims of the graph's physical tensors and only
    the newer ones stay batched.
    """
    value, layout = expand_to_levels(*physical(t), {level: sizes[level] for level in target})
    newer = sorted(level for level in layout if level not in target)
    taken = set(layout.values())
    logical = iter(d for d in range(len(value._sizes)) if d not in taken)
    at = {d: level for level, d in target.items()}
    order = [layout[level] for level in newer]
    order += [layout[at[j]] if j in at else next(logical) for j in range(target_rank)]
    if order != list(range(len(order))):
        value = value.permute(order)
    return batched(value, {level: i for i, level in enumerate(newer)})


def merge(g, layout):
    """A gradient ``g`` of a physical tensor whose levels were ``layout`` back in logical
    form: its own (newer) levels stay, and ``layout``'s levels are read from the dims
    they occupy in the physical tensor."""
    if type(g) is not BatchedTensor:       # the common case, without physical's frame
        if len(layout) == 1:               # one level (every gradient under vmap(grad))
            ((level, bdim),) = layout.items()
            return wrap(g, bdim, level)
        return batched(g, layout)
    value, own = physical(g)
    taken = set(own.values())
    free = [d for d in range(len(value._sizes)) if d not in taken]
    combined = dict(own)
    combined.update((level, free[d]) for level, d in layout.items())
    return batched(value, combined)
