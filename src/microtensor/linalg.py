"""``microtensor.linalg``: PyTorch's linear-algebra namespace, as far as microtensor goes
(the vector norm)."""
import numbers

from microtensor.ops.reduction import norm as _norm


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The vector ``ord``-norm of ``x`` over ``dim`` (None: all elements); ``ord`` is any
    number, ``inf`` or ``-inf`` (0 counts the nonzero elements)."""
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, "
                        f"not {type(ord).__name__}")
    return _norm(x, ord, dim, keepdim, dtype)


__all__ = ["vector_norm"]
