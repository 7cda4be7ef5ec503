"""BatchedTensor and vmap levels.

A ``BatchedTensor`` is what a function sees inside ``vmap``: a ``Tensor`` whose own
metadata (sizes, strides, offset, dtype) is the geometry of *one sample* over the
physical storage, and which holds the physical tensor (``_value``), the position of the
batch dimension in it (``_bdim``) and the vmap ``_level`` it belongs to.

Nesting follows torch.func: one batch dimension per wrapper.  Inside ``vmap(vmap(f))`` a
tensor batched at both levels is a level-2 ``BatchedTensor`` whose value is a level-1
``BatchedTensor`` whose value is the physical tensor.  A batching rule for level ``L``
only ever unwraps level ``L``; the ops it calls on the values come back through the
dispatcher and are batched again for the levels below.

Because the metadata is per sample, ``shape``, ``stride()``, ``is_contiguous()``,
``dim()`` and ``numel()`` answer per sample for free.  Reading memory (``item``,
``tolist``, ``numpy``, ``bool(t)``) would have to pick one sample, so it raises.
"""
import threading

from microtensor._C.dispatch import ESCAPED_ERROR
from microtensor._C.tensor import without_dim
from microtensor._tensor import Tensor


class Level:
    """One active ``vmap`` call: its level number, batch size and randomness mode."""

    __slots__ = ("number", "size", "randomness")

    def __init__(self, number, size, randomness):
        self.number = number
        self.size = size
        self.randomness = randomness


class _ThreadLevels(threading.local):
    def __init__(self):
        self.stack = []


_levels = _ThreadLevels()


def active_levels():
    """This thread's active vmaps, outermost first (``[i].number == i + 1``): each thread
    vmaps independently, as in PyTorch."""
    return _levels.stack


def _refuse(what):
    def method(self, *args, **kwargs):
        raise RuntimeError(what)
    return method


_ITEM = ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over "
         "calling .item() on a Tensor, please try to rewrite what you're doing with other "
         "operations.")
_CONTROL_FLOW = ("vmap: It looks like you're attempting to use a Tensor in some data-dependent "
                 "control flow. We don't support that under vmap: each sample could take a "
                 "different branch. Rewrite the condition with microtensor.where or other "
                 "operations.")
_MEMORY = ("vmap: cannot read the values of a batched Tensor ({what}) inside vmap: they differ "
           "per sample. Return the tensor from the vmapped function instead.")


class BatchedTensor(Tensor):
    """A tensor inside ``vmap``: per-sample metadata over a batched physical tensor."""

    __slots__ = ("_value", "_bdim", "_level")

    # --------------------------------------------------------------- autograd: physical
    @property
    def requires_grad(self):
        return self._value.requires_grad

    @property
    def grad_fn(self):
        return self._value.grad_fn

    @property
    def is_leaf(self):
        return self._value.is_leaf

    def requires_grad_(self, requires_grad=True):
        self._value.requires_grad_(requires_grad)
        return self

    # --------------------------------------------------------------- no memory reads
    item = _refuse(_ITEM)
    __float__ = _refuse(_ITEM)
    __int__ = _refuse(_ITEM)
    __index__ = _refuse(_ITEM)
    __bool__ = _refuse(_CONTROL_FLOW)
    _array = _refuse(_MEMORY.format(what="its memory"))
    numpy = _refuse(_MEMORY.format(what=".numpy()"))
    tolist = _refuse(_MEMORY.format(what=".tolist()"))
    __array__ = _refuse(_MEMORY.format(what="numpy conversion"))
    __dlpack__ = _refuse(_MEMORY.format(what="__dlpack__"))
    __reduce_ex__ = _refuse(_MEMORY.format(what="pickling"))

    def __repr__(self):
        # the physical value, labelled: printing inside vmap shows every sample
        body = repr(self._value).replace("\n", "\n    ")
        return f"BatchedTensor(lvl={self._level}, bdim={self._bdim}, value=\n    {body}\n)"

    def __format__(self, spec):
        return repr(self)


def wrap(value, bdim, level):
    """``value`` (physical at ``level``) seen per sample: its dim ``bdim`` hidden."""
    t = without_dim(value, bdim, BatchedTensor)
    t._value = value
    t._bdim = bdim
    t._level = level
    return t


def unwrap(t, level):
    """``(physical value, batch dim)`` of ``t`` at ``level``; ``(t, None)`` if ``t`` is not
    batched at that level."""
    if type(t) is BatchedTensor and t._level == level:
        return t._value, t._bdim
    return t, None


def batch_size(level):
    try:
        return _levels.stack[level - 1].size
    except IndexError:    # a tensor of a vmap that has returned (or of another thread's)
        raise RuntimeError(ESCAPED_ERROR.format(level)) from None


def to_front(value, bdim):
    """``value`` with its batch dim moved to dim 0 (a view; ``value`` itself if already)."""
    if bdim == 0:
        return value
    n = value.dim()
    return value.permute((bdim,) + tuple(d for d in range(n) if d != bdim))


def aligned(value, bdim, logical_rank, rank):
    """Batch dim first and size-1 dims inserted after it so that the per-sample dims are
    right-aligned with a per-sample rank of ``rank`` (how broadcasting stays per sample)."""
    value = to_front(value, bdim)
    if logical_rank < rank:
        sizes = value._sizes
        value = value.view(sizes[:1] + (1,) * (rank - logical_rank) + sizes[1:])
    return value
