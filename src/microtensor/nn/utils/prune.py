"""Pruning, as PyTorch's ``torch.nn.utils.prune``: the pruning methods (``Identity``,
``RandomUnstructured``, ``L1Unstructured``, ``RandomStructured``, ``LnStructured``,
``CustomFromMask``, their base ``BasePruningMethod`` and the ``PruningContainer`` that
chains them), the functions applying them to a module's tensor (``l1_unstructured``,
``global_unstructured``...), ``remove`` and ``is_pruned``.

Pruning ``module.<name>`` moves the parameter to ``<name>_orig``, registers the 0/1 buffer
``<name>_mask`` and a forward pre-hook (the method itself) that recomputes
``module.<name> = <name>_orig * <name>_mask`` before each forward, so the state-dict keys
are PyTorch's.  Pruning the same tensor again prunes only among the entries (or channels)
still unpruned."""
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import microtensor as mt

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured",
           "L1Unstructured", "RandomStructured", "LnStructured", "CustomFromMask", "identity",
           "random_unstructured", "l1_unstructured", "random_structured", "ln_structured",
           "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


class BasePruningMethod(ABC):
    """A pruning method: ``compute_mask`` says which entries to keep; ``apply`` prunes a
    module's tensor with it and installs it as that module's forward pre-hook."""

    # set by ``apply`` (the name of the tensor pruned); unset until then, as in PyTorch
    _tensor_name: str

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask for ``t`` (importance scores), on top of ``default_mask`` (the mask of
        earlier pruning, ones at first), of ``t``'s shape."""

    def apply_mask(self, module):
        """``<name>_orig`` times ``<name>_mask`` (the mask cast to the tensor's dtype)."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with ``cls(*args, **kwargs)``, on top of any pruning
        already there (the methods then form a ``PruningContainer``); returns the method
        installed as the hook.  ``importance_scores`` (``<name>``'s shape) rank the entries
        in place of the tensor itself.  A refused pruning leaves the module as it was."""
        earlier = [key for key, hook in module._forward_pre_hooks.items()
                   if isinstance(hook, BasePruningMethod) and hook._tensor_name == name]
        if len(earlier) > 1:
            raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor "
                                 f"{name} of module {module}. Use a PruningContainer.")
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if earlier:
            method = _joined(module._forward_pre_hooks[earlier[0]], method)
        try:
            _prune_with(method, module, name, importance_scores, first=not earlier)
        except Exception:
            if earlier and method is module._forward_pre_hooks[earlier[0]]:
                method._pruning_methods = method._pruning_methods[:-1]   # the append undone
            raise
        if earlier:
            del module._forward_pre_hooks[earlier[0]]
        module.register_forward_pre_hook(method)
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` with this method's mask applied (``importance_scores``, ``t``'s shape,
        ranking its entries in place of ``t``)."""
        if importance_scores is not None:
            if importance_scores.shape != t.shape:
                raise AssertionError(f"importance_scores should have the same shape as tensor "
                                     f"t, got {importance_scores.shape} vs {t.shape}")
        else:
            importance_scores = t
        default_mask = default_mask if default_mask is not None else mt.ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module):
        """Make the pruning permanent: ``<name>`` is a parameter again (the pruned values,
        in the ``<name>_orig`` Parameter object); ``<name>_orig`` and ``<name>_mask`` go.
        The hook itself stays for the caller to take off (``prune.remove`` does)."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be "
                                 "removed")
        weight = self.apply_mask(module)
        if hasattr(module, self._tensor_name):
            delattr(module, self._tensor_name)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.data
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


def _joined(earlier, method):
    """``method`` appended to the ``earlier`` pruning of the same tensor: to the container
    itself, or to a new container holding a single earlier method."""
    container = earlier if isinstance(earlier, PruningContainer) else \
        PruningContainer(earlier)
    container.add_pruning_method(method)
    return container


def _prune_with(method, module, name, importance_scores, first):
    """Set ``<name>_mask`` to ``method``'s mask and ``module.<name>`` to the masked
    tensor, moving the parameter to ``<name>_orig`` at the ``first`` pruning.  The mask
    is computed before anything changes, so a refused one leaves the module as it was."""
    orig = getattr(module, name)
    if importance_scores is not None:
        if importance_scores.shape != orig.shape:
            raise AssertionError(f"importance_scores should have the same shape as parameter "
                                 f"{name} of {module}, got {importance_scores.shape} vs "
                                 f"{orig.shape}")
    else:
        importance_scores = orig
    if first:
        default_mask = mt.ones_like(orig)
    else:
        default_mask = getattr(module, name + "_mask").detach().clone(
            memory_format=mt.contiguous_format)
    mask = method.compute_mask(importance_scores, default_mask=default_mask)
    if first:
        module.register_parameter(name + "_orig", orig)
        del module._parameters[name]
    module.register_buffer(name + "_mask", mask)
    setattr(module, name, method.apply_mask(module))


class PruningContainer(BasePruningMethod):
    """The pruning methods applied in turn to one tensor; its mask is the last method's,
    computed on what the earlier ones left (see ``compute_mask``)."""

    def __init__(self, *args):
        self._pruning_methods = ()
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
        for method in args:
            self.add_pruning_method(method)

    def add_pruning_method(self, method):
        """Append ``method``, which must prune the container's tensor."""
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError("Can only add pruning methods acting on the parameter named "
                             f"'{self._tensor_name}' to PruningContainer {self}. Found "
                             f"'{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        """``default_mask`` (in ``t``'s dtype) with the last method's mask computed on the
        part still unpruned: the entries where the mask is 1 (``"unstructured"``), the
        channels along the method's ``dim`` not all zero (``"structured"``), or all of
        ``t`` (``"global"``)."""
        method = self._pruning_methods[-1]
        part = _unpruned_part(method, t, default_mask)
        mask = default_mask.to(dtype=t.dtype)
        mask[part] = method.compute_mask(t[part], default_mask=default_mask[part]).to(
            dtype=mask.dtype)
        return mask


def _unpruned_part(method, t, mask):
    """The index of the part of ``t`` that ``method`` (by its ``PRUNING_TYPE``) prunes
    next, given the earlier ``mask``."""
    kind = method.PRUNING_TYPE
    if kind == "unstructured":
        return mask == 1
    if kind == "structured":
        if not hasattr(method, "dim"):
            raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have '
                                 "the attribute `dim` defined.")
        ndim = t.dim()
        dim = method.dim + ndim if method.dim < 0 else method.dim
        if dim < 0:
            raise IndexError(f"Index is out of bounds for tensor with dimensions {ndim}")
        index = [slice(None)] * ndim
        index[dim] = mask.sum(dim=[d for d in range(ndim) if d != dim]) != 0
        return tuple(index)
    if kind == "global":
        return (slice(None),) * t.dim()
    raise ValueError(f"Unrecognized PRUNING_TYPE {kind}")


class Identity(BasePruningMethod):
    """Prunes nothing: the reparametrization with a mask of ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class _AmountMethod(BasePruningMethod):
    """A method pruning ``amount`` entries or channels: an int (how many) or a fraction
    in [0, 1] (of those it prunes among, rounded half to even)."""

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def _count(self, size):
        """How many of ``size`` units to prune, refused when more than ``size``."""
        amount = self.amount
        count = amount if isinstance(amount, numbers.Integral) else round(amount * size)
        if count > size:
            raise ValueError(f"amount={count} should be smaller than the number of parameters "
                             f"to prune={size}")
        return count


class RandomUnstructured(_AmountMethod):
    """Prunes ``amount`` entries drawn at random (microtensor's generator)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        count = self._count(t.nelement())
        mask = default_mask.clone(memory_format=mt.contiguous_format)
        if count:
            drawn = mt.topk(mt.rand_like(t).view(-1), k=count).indices
            mask.view(-1)[drawn] = 0
        return mask

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_AmountMethod):
    """Prunes the ``amount`` entries of smallest magnitude.  Among equal magnitudes the
    earlier entries go first; PyTorch's choice among ties depends on its sorting
    internals (docs/porting.md, "Pruning")."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        count = self._count(t.nelement())
        mask = default_mask.clone(memory_format=mt.contiguous_format)
        if count:
            smallest = mt.topk(mt.abs(t).view(-1), k=count, largest=False).indices
            mask.view(-1)[smallest] = 0
        return mask

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class _StructuredMethod(_AmountMethod):
    """A method pruning ``amount`` whole channels along ``dim``: its mask has ones on the
    channels ``_kept_channels`` returns (times the earlier mask)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        super().__init__(amount)
        self.dim = dim

    def compute_mask(self, t, default_mask):
        if t.dim() <= 1:
            raise ValueError("Structured pruning can only be applied to multidimensional "
                             f"tensors. Found tensor of shape {t.shape} with {t.dim()} dims")
        if self.dim >= t.dim():
            raise IndexError(f"Invalid index {self.dim} for tensor of size {t.shape}")
        channels = t.shape[self.dim]
        count = self._count(channels)
        kept = self._kept_channels(t, channels, count)
        if not count:
            return default_mask
        mask = mt.zeros_like(t)
        index = [slice(None)] * t.dim()
        index[self.dim] = kept
        mask[tuple(index)] = 1
        mask *= default_mask.to(dtype=mask.dtype)
        return mask


class RandomStructured(_StructuredMethod):
    """Prunes ``amount`` channels along ``dim`` drawn at random (microtensor's
    generator)."""

    def _kept_channels(self, t, channels, count):
        if not count:
            return None         # nothing drawn when nothing is pruned
        draws = mt.rand(channels)
        return draws > mt.kthvalue(draws, k=count).values

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_StructuredMethod):
    """Prunes the ``amount`` channels along ``dim`` of smallest ``n``-norm (``n`` as
    ``p`` of ``microtensor.norm``: a number, ``inf``, ``-inf``, ``"fro"``, ``"nuc"``).
    Among equal norms the earlier channels are kept (PyTorch's choice among ties depends
    on its sorting internals)."""

    def __init__(self, amount, n, dim=-1):
        super().__init__(amount, dim)
        self.n = n

    def _kept_channels(self, t, channels, count):
        dim = self.dim + t.dim() if self.dim < 0 else self.dim
        norms = mt.norm(t, p=self.n, dim=[d for d in range(t.dim()) if d != dim])
        return mt.topk(norms, k=channels - count, largest=True).indices

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where the given ``mask`` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise AssertionError(f"default_mask shape {default_mask.shape} must match "
                                 f"self.mask shape {self.mask.shape}")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def _check_amount(amount):
    """PyTorch's checks of ``amount`` when a method is made."""
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if isinstance(amount, numbers.Integral):
        refused = amount < 0
    else:
        refused = not 0.0 <= float(amount) <= 1.0
    if refused:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")


# --------------------------------------------------------------------------- the functions

def identity(module, name):
    """The pruning reparametrization of ``module.<name>`` with a mask of ones; returns
    ``module``."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` entries of ``module.<name>`` at random; returns ``module``."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` entries of ``module.<name>`` of smallest magnitude (of
    ``importance_scores`` when given); returns ``module``."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune ``amount`` channels along ``dim`` of ``module.<name>`` at random; returns
    ``module``."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` channels along ``dim`` of ``module.<name>`` of smallest
    ``n``-norm; returns ``module``."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune the tensors ``parameters`` (``(module, name)`` pairs) together, as one flat
    vector, with the unstructured ``pruning_method`` class made with ``kwargs`` (e.g.
    ``amount``); ``importance_scores`` maps pairs to their scores."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    scores = mt.nn.utils.parameters_to_vector(
        [importance_scores.get((module, name), getattr(module, name))
         for module, name in parameters])
    default_mask = mt.nn.utils.parameters_to_vector(
        [getattr(module, name + "_mask", mt.ones_like(getattr(module, name)))
         for module, name in parameters])
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
                        f"Found method {pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    final_mask = container.compute_mask(scores, default_mask)
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        custom_from_mask(module, name,
                         mask=final_mask[start:start + param.numel()].view_as(param))
        start += param.numel()


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` where ``mask`` is 0; returns ``module``."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make the pruning of ``module.<name>`` permanent and take its hook off; returns
    ``module``."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning "
                     "can be removed")


def is_pruned(module):
    """Whether ``module`` or one of its submodules has a pruning hook."""
    return any(isinstance(hook, BasePruningMethod)
               for _, submodule in module.named_modules()
               for hook in submodule._forward_pre_hooks.values())
