"""The batching rule of ``_einsum``: the vmap dim becomes one more letter, in front of
the batched operands' subscripts and of the output; one physical einsum, never a loop."""
import string

from microtensor.vmap.batched import to_front, wrap
from microtensor.vmap.rules import _same_level, call, rule


@rule("_einsum")
def einsum(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    operands, equation = list(bound["operands"]), bound["equation"]
    lhs, out = equation.split("->")
    subs = lhs.split(",")
    fresh = next(c for c in string.ascii_letters if c not in equation)
    for i, t in enumerate(operands):
        if _same_level(t, level):
            operands[i] = to_front(t._value, t._bdim)
            subs[i] = fresh + subs[i]
    return wrap(call(op, (operands, ",".join(subs) + "->" + fresh + out), None), 0, level)
