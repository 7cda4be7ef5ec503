"""Batching rules of ``searchsorted`` (``bucketize`` is a composite of it) and the error of
the ops whose result shape depends on the data (``nonzero``, ``unique``), as torch.func."""
from microtensor.vmap.batched import batch_size, to_front, unwrap, wrap
from microtensor.vmap.rules import call, rule


def _front(value, bdim, size):
    if bdim is None:
        return value.unsqueeze(0).expand((size,) + tuple(value._sizes))
    return to_front(value, bdim)


@rule("searchsorted")
def searchsorted(op, level, args, kwargs):
    """A shared 1-D sequence: the values keep their batch dim.  Otherwise both (and the
    sorter) get the batch dim first; a per-sample 1-D sequence then searches each sample's
    values flattened into one row."""
    bound = op.bind(args, kwargs)
    seq, seq_b = unwrap(bound["sorted_sequence"], level)
    values, val_b = unwrap(bound["self"], level)
    sorter = bound.get("sorter")
    sorter, sorter_b = unwrap(sorter, level) if sorter is not None else (None, None)
    options = {k: bound[k] for k in ("out_int32", "right", "side")}
    if seq_b is None and sorter_b is None and seq.dim() == 1:
        result = call(op, (seq, values), dict(options, sorter=sorter))
        return wrap(result, val_b, level)
    size = batch_size(level)
    seq = _front(seq, seq_b, size)
    sorter = None if sorter is None else _front(sorter, sorter_b, size)
    values = _front(values, val_b, size) if hasattr(values, "_sizes") else values
    if seq.dim() == 2:
        sample_shape = tuple(values._sizes[1:])
        result = call(op, (seq, values.reshape(size, -1)), dict(options, sorter=sorter))
        return wrap(result.reshape((size,) + sample_shape), 0, level)
    return wrap(call(op, (seq, values), dict(options, sorter=sorter)), 0, level)


@rule("nonzero", "unique")
def dynamic_shape(op, level, args, kwargs):
    aten = {"unique": "_unique2"}.get(op.name, op.name)
    raise RuntimeError(
        "vmap: We do not support batching operators that can output dynamic shape. "
        f"Attempted to vmap over aten::{aten}. Please file an issue at "
        "https://github.com/pytorch/pytorch/issues if you need this feature.")


@rule("repeat_interleave")
def repeat_interleave(op, level, args, kwargs):
    """Per-sample ``dim`` shifted past the batch dim (``dim=None``: each sample flattened).
    Repeats that differ per sample would give samples of different sizes: refused."""
    bound = op.bind(args, kwargs)
    self, bdim = unwrap(bound["self"], level)
    repeats, rbdim = unwrap(bound["repeats"], level)
    if rbdim is not None:
        raise RuntimeError(
            "vmap: We do not support batching operators that can output dynamic shape. "
            "Attempted to vmap over aten::repeat_interleave. Please file an issue at "
            "https://github.com/pytorch/pytorch/issues if you need this feature.")
    size = batch_size(level)
    value = _front(self, bdim, size)
    logical = bound["self"].dim()
    dim = bound["dim"]
    if dim is None:
        value, dim = value.reshape(size, -1), 1
    elif logical == 0:
        value, dim = value.reshape(size, 1), 1
    else:
        from microtensor._C import meta
        dim = meta.wrap_dim(dim, logical) + 1
    result = call(op, (value, repeats, dim), {"output_size": bound["output_size"]})
    return wrap(result, 0, level)
