"""The autograd graph's Python nodes: the two that in-place writes into views create.

The graph's data structures (``Node`` with its edges and hooks, ``AccumulateGrad``,
``SavedTensor``, ``Geometry``) and ``OpNode``, which runs a registered op's derivative,
are in the Cython core (``microtensor._C.autograd``).  ``CopySlices`` and
``AsStridedBackward0`` here subclass ``Node`` (see ``autograd.recording``).
"""
import weakref

from microtensor._C.autograd import (RELEASED_ERROR, AccumulateGrad, Geometry, Node, OpNode,
                                     SavedTensor, validate_outputs)
from microtensor._C.meta import contiguous_format

__all__ = ["AccumulateGrad", "AsStridedBackward0", "CopySlices", "Geometry", "Node", "OpNode",
           "RELEASED_ERROR", "SavedInplaceViewOutput", "SavedTensor"]


class SavedInplaceViewOutput(SavedTensor):
    """The result of an in-place op on a view.  Unpacked for a double backward, it is the
    view read back out of its base, whose producer is the ``CopySlices`` node (held
    weakly: CopySlices holds the op's node, which holds this)."""

    __slots__ = ("copy_slices", "base", "view")

    def __init__(self, view, copy_slices):
        super().__init__(view, is_output=True)
        self.copy_slices = weakref.ref(copy_slices)
        self.base = Geometry(view._base)
        self.view = Geometry(view)

    def _producer(self, node):
        copy_slices = self.copy_slices()
        if copy_slices is None:
            raise RuntimeError(RELEASED_ERROR)
        return AsStridedBackward0(self.base, self.view, (copy_slices, 0))


class CopySlices(Node):
    """The base's new ``grad_fn`` after an in-place op ``fn`` wrote into a view of it.

    Backward: the base's gradient is the incoming gradient with the view's region
    replaced by ``fn``'s gradient for the view's old value.  Buffers come from
    ``grad.new_empty_strided`` and the slice is cloned with ``contiguous_format`` so that
    the node runs unchanged on batched gradients under vmap.
    """

    def __init__(self, base, view, fn, base_edge):
        super().__init__((base_edge,) + fn.next_functions[1:])
        self.base = Geometry(base)
        self.view = Geometry(view)
        self.fn = fn

    def apply(self, grads):
        grad = grads[0]
        if grad is None:
            return (None,) * len(self.next_functions)
        if self.fn is None:
            raise RuntimeError(RELEASED_ERROR)
        result = grad.new_empty_strided(self.base.sizes, self.base.strides)
        result.copy_(grad)
        grad_slice = result.as_strided(self.view.sizes, self.view.strides,
                                       self.view.offset - self.base.offset)
        fn_grads = validate_outputs(self.fn, self.fn.apply(
            (grad_slice.clone(memory_format=contiguous_format),)))
        if fn_grads[0] is not None:
            grad_slice.copy_(fn_grads[0])
        else:
            grad_slice.zero_()
        return (result,) + tuple(fn_grads[1:])

    def release(self):
        if self.fn is not None:
            self.fn.release()


class AsStridedBackward0(Node):
    """A view's ``grad_fn`` regenerated after its base changed in place: the view read
    back out of the base's gradient with ``as_strided``."""

    def __init__(self, base, view, base_edge):
        """``base`` and ``view``: their ``Geometry``."""
        super().__init__((base_edge,))
        self.base = base
        self.view = view

    def apply(self, grads):
        from microtensor.ops.view import as_strided_backward
        grad = grads[0]
        return (as_strided_backward(grad, self.base.sizes, self.base.strides, 0,
                                    self.view.sizes, self.view.strides,
                                    self.view.offset - self.base.offset),)
