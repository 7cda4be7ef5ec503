"""Autograd's methods on ``Tensor``: ``backward``, ``requires_grad_``, hooks, ``retain_grad``.

They live with autograd (not in ``_tensor.py``) because they only make sense in terms of
the graph; ``install`` attaches them to the class.
"""
import weakref

from microtensor._C.autograd import (add_post_accumulate_grad_hook, current_grad_fn,
                                    grad_accumulator)
from microtensor._C.tensor import TensorBase, is_inference_mode_enabled
from microtensor.autograd import engine


def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    engine.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def requires_grad_(self, requires_grad=True):
    if not self.is_leaf and not requires_grad:
        raise RuntimeError("you can only change requires_grad flags of leaf variables. If you "
                           "want to use a computed variable in a subgraph that doesn't require "
                           "differentiation use var_no_grad = var.detach().")
    if requires_grad and self._dtype.kind < 2:
        raise RuntimeError("only Tensors of floating point and complex dtype can require "
                           "gradients")
    if requires_grad and self._storage.inference and not is_inference_mode_enabled():
        raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                           "InferenceMode is not allowed.")
    self._requires_grad = bool(requires_grad)
    return self


def detach_(self):
    if self._is_diff_view:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    self._grad_fn = None
    self._requires_grad = False
    return self


def retain_grad(self):
    if self.is_leaf:
        return
    if self._retains_grad:
        return
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    ref = weakref.ref(self)

    def store(grad):
        tensor = ref()
        if tensor is not None:
            with engine.accumulation_lock:
                tensor._grad = grad.detach().clone() if tensor._grad is None \
                    else tensor._grad + grad
    node = current_grad_fn(self)
    node.set_retains_grad_hook(self._output_nr, store)
    self._retain_grad_hook = (store, node, self._output_nr)
    self._retains_grad = True


def register_hook(self, hook):
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    fn = current_grad_fn(self)
    if fn is not None:
        return fn.register_tensor_prehook(self._output_nr, hook)
    return grad_accumulator(self).register_tensor_prehook(0, hook)


def register_post_accumulate_grad_hook(self, hook):
    """``hook(self)`` after each backward pass has accumulated into this leaf's ``.grad``
    (``backward``, not ``autograd.grad``, which accumulates nothing)."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if current_grad_fn(self) is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                           "tensors")
    return add_post_accumulate_grad_hook(self, hook)


def _set_requires_grad(self, requires_grad):
    requires_grad_(self, requires_grad)


def _grad_fn(self):
    return current_grad_fn(self)


def _is_leaf(self):
    return current_grad_fn(self) is None


def install(tensor_cls):
    for fn in (backward, requires_grad_, detach_, retain_grad, register_hook,
               register_post_accumulate_grad_hook):
        setattr(tensor_cls, fn.__name__, fn)
    tensor_cls.requires_grad = property(TensorBase.requires_grad.__get__, _set_requires_grad)
    tensor_cls.grad_fn = property(_grad_fn)
    tensor_cls.is_leaf = property(_is_leaf)
