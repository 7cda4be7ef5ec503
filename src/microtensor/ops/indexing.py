"""Indexing: ``tensor[index]`` and ``tensor[index] = value``.

Basic indices (ints, slices with positive steps, None, Ellipsis) make views through
``select``/``slice``/``unsqueeze``, so reads share storage and writes go through the view
(which autograd turns into CopySlices).  Advanced indices (integer or bool tensors, lists)
are handled by ``index``/``index_put_``.
"""
from microtensor._C.tensor import TensorBase
from microtensor.ops.dispatch import call_by_name


def _is_basic(item):
    return item is None or item is Ellipsis or isinstance(item, (int, slice)) and \
        not isinstance(item, bool)


def _expand_ellipsis(index, ndim):
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    out = []
    for i in index:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - consumed))
        else:
            out.append(i)
    return out


def basic_index(self, index):
    """Apply a tuple of basic indices as a chain of views."""
    result = self
    dim = 0
    for item in _expand_ellipsis(index, self.dim()):
        if item is None:
            result = result.unsqueeze(dim)
            dim += 1
        elif isinstance(item, int):
            size = result.shape[dim]
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of bounds for dimension {dim} with "
                                 f"size {size}")
            result = result.select(dim, item)
        else:
            start, stop, step = item.start, item.stop, item.step
            if step is not None and step <= 0:
                raise ValueError("step must be greater than zero")
            if not (start in (None, 0) and stop is None and step in (None, 1)):
                result = call_by_name("slice", result, dim, start, stop, step or 1)
            dim += 1
    if result is self:
        result = self.alias()
    return result


def _normalize(index):
    if not isinstance(index, tuple):
        index = (index,)
    return tuple(i.item() if isinstance(i, TensorBase) and i.dim() == 0 and
                 not i.dtype.is_floating_point and i.dtype.name != "bool" else i
                 for i in index)


def getitem(self, index):
    index = _normalize(index)
    if all(_is_basic(i) for i in index):
        return basic_index(self, index)
    return call_by_name("index", self, index)


def setitem(self, index, value):
    index = _normalize(index)
    if all(_is_basic(i) for i in index):
        target = basic_index(self, index)
        if isinstance(value, TensorBase):
            target.copy_(value)
        else:
            target.fill_(value)
        return
    call_by_name("index_put_", self, index, value)
