"""Batching rules of the ``torch.linalg`` decompositions and solvers (``ops.linalg_decomp``):
their kernels batch over leading dims, so the vmap dim is one more leading dim of one
call (an unbatched operand of ``linalg_solve`` is expanded, without a copy)."""
from microtensor.ops.linalg_decomp import _vector_rhs
from microtensor.vmap.batched import batch_size
from microtensor.vmap.rules import _front_or_expanded, _same_level, call, rule, wrap


def _wrap_all(result, level):
    if isinstance(result, tuple):
        return tuple(wrap(r, 0, level) for r in result)
    return wrap(result, 0, level)


@rule("linalg_inv", "linalg_det", "linalg_slogdet", "linalg_cholesky", "linalg_eigh",
      "linalg_qr", "linalg_svd")
def one_matrix(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    A = bound.pop("A")
    physical = _front_or_expanded(A, level, batch_size(level))
    result = call(op, (physical,), bound)
    if op.name == "linalg_qr" and bound["mode"] == "r":
        # Q is an empty placeholder: one per sample
        q, r = result
        result = (q.new_empty((batch_size(level), 0)), r)
    return _wrap_all(result, level)


@rule("linalg_solve")
def solve(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    A, B = bound["A"], bound["B"]
    size = batch_size(level)
    vector = _vector_rhs(A, B)
    a = _front_or_expanded(A, level, size)
    # a vector right-hand side per sample stays one after the batch dim is added
    b = _front_or_expanded(B.unsqueeze(-1) if vector else B, level, size)
    result = call(op, (a, b), {"left": bound["left"]})
    return wrap(result.squeeze(-1) if vector else result, 0, level)
