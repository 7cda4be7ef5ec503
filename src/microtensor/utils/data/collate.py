"""Turning a list of samples into a batch (``default_collate``) and NumPy data into
tensors (``default_convert``), with PyTorch's rules for every kind of element."""
import collections.abc
import copy
import re

import numpy as np

# NumPy dtypes that cannot become tensors: bytes, str, void and object
_np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
    "found {}")


def _rebuild_mapping(mapping, convert):
    """``mapping`` with each value converted, of the same type where it can be rebuilt."""
    values = {key: convert(key) for key in mapping}
    try:
        if isinstance(mapping, collections.abc.MutableMapping):
            # copy and update, so that a mapping type with extra attributes keeps them
            clone = copy.copy(mapping)
            clone.update(values)
            return clone
        return type(mapping)(values)
    except TypeError:
        return values


def _rebuild_sequence(sequence, items):
    """The list ``items`` as ``sequence``'s type where it can be rebuilt."""
    try:
        if isinstance(sequence, collections.abc.MutableSequence):
            clone = copy.copy(sequence)
            clone[:] = items
            return clone
        return type(sequence)(items)
    except TypeError:
        return items


def collate(batch, *, collate_fn_map=None):
    """Collate ``batch`` (a list of samples of one structure) element type by element
    type: ``collate_fn_map`` maps a type (or tuple of types) to the function collating a
    list of such elements; mappings and sequences are collated field by field."""
    elem = batch[0]
    if collate_fn_map is not None:
        if type(elem) in collate_fn_map:
            return collate_fn_map[type(elem)](batch, collate_fn_map=collate_fn_map)
        for collate_type, fn in collate_fn_map.items():
            if isinstance(elem, collate_type):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, lambda key: collate([d[key] for d in batch],
                                                          collate_fn_map=collate_fn_map))
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple
        return type(elem)(*(collate(samples, collate_fn_map=collate_fn_map)
                            for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        # each field's samples stay a tuple, as PyTorch's (a field of strings collates
        # into that tuple)
        items = [collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)]
        # PyTorch collates a batch of tuples into a list
        return items if isinstance(elem, tuple) else _rebuild_sequence(elem, items)
    raise TypeError(default_collate_err_msg_format.format(type(elem)))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    from microtensor import stack
    return stack(batch, 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    from microtensor import as_tensor
    if _np_str_obj_array_pattern.search(batch[0].dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(batch[0].dtype))
    return collate([as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    from microtensor import as_tensor
    return as_tensor(np.array(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    from microtensor import float64, tensor
    return tensor(batch, dtype=float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    from microtensor import tensor
    return tensor(batch)   # int64, or bool for a batch of bools


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


def _default_collate_fn_map():
    from microtensor._tensor import Tensor
    return {Tensor: collate_tensor_fn,
            np.ndarray: collate_numpy_array_fn,
            (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
            float: collate_float_fn,
            int: collate_int_fn,
            str: collate_str_fn,
            bytes: collate_str_fn}


default_collate_fn_map = _default_collate_fn_map()


def default_collate(batch):
    """A batch of samples as one sample of batches: tensors and NumPy arrays stacked along
    a new first dimension, Python floats into a float64 tensor, ints into int64 (bools
    into bool), strings left as a list; dicts, namedtuples and lists collated field by
    field (a tuple of fields comes back as a list, as PyTorch's)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def default_convert(data):
    """NumPy arrays and scalars in ``data`` (at any depth of mappings and sequences) made
    tensors; everything else unchanged.  The collate function when batching is off."""
    from microtensor import as_tensor
    from microtensor._tensor import Tensor
    if isinstance(data, Tensor):
        return data
    if type(data).__module__ == "numpy" and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray) and \
                _np_str_obj_array_pattern.search(data.dtype.str) is not None:
            return data
        return as_tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, lambda key: default_convert(data[key]))
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data
