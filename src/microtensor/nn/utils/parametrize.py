"""``nn.utils.parametrize``, as PyTorch's: a module's parameter or buffer replaced by a
function (a chain of modules) of an ``original`` tensor.

``register_parametrization(module, "weight", p)`` moves ``module.weight`` to
``module.parametrizations.weight.original`` (or ``original0``, ``original1``... when
``p.right_inverse`` returns several tensors), gives the module a class of its own
(``ParametrizedLinear``) whose ``weight`` property computes ``p(original)`` on each access,
and assigning to ``module.weight`` runs ``right_inverse``.  The state-dict keys are
PyTorch's (``parametrizations.weight.original``), so PyTorch checkpoints load.
"""
import copyreg
from collections.abc import Sequence
from contextlib import contextmanager
from copy import deepcopy

from microtensor._C.tensor import TensorBase
from microtensor.autograd.grad_mode import no_grad
from microtensor.nn.containers import ModuleDict, ModuleList
from microtensor.nn.parameter import Parameter

__all__ = ["cached", "ParametrizationList", "register_parametrization", "is_parametrized",
           "remove_parametrizations", "type_before_parametrizations",
           "transfer_parametrizations_and_params"]

_cache_enabled = 0
_cache = {}


@contextmanager
def cached():
    """Inside this context each parametrized tensor is computed once (on first access) and
    reused; the cache empties when the outermost context exits."""
    global _cache, _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache = {}


def _register_parameter_or_buffer(module, name, tensor):
    if isinstance(tensor, Parameter):
        module.register_parameter(name, tensor)
    else:
        module.register_buffer(name, tensor)


def _maybe_set(dest, src):
    """PyTorch's ``dest.set_(src)``: ``dest`` (the same object, so an optimizer holding it
    still sees it) takes ``src``'s storage, shape and dtype."""
    dest.data = src


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, with the unparametrized
    tensor(s) as ``original`` (or ``original0``, ``original1``...: what the first
    parametrization's ``right_inverse`` returned).  ``unsafe``: skip the checks that the
    result keeps the tensor's shape and dtype."""

    def __init__(self, modules, original, unsafe=False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        original_shape, original_dtype = original.shape, original.dtype
        with no_grad():
            new = original
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, (TensorBase, Sequence)):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, TensorBase)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change "
                                 f"the dtype.\noriginal.dtype: {original.dtype}\n"
                                 f"right_inverse(original).dtype: {new.dtype}")
            if original.device != new.device:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change "
                                 f"the device.\noriginal.device: {original.device}\n"
                                 f"right_inverse(original).device: {new.device}")
            with no_grad():
                _maybe_set(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, original_i in enumerate(new):
                if not isinstance(original_i, TensorBase):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of "
                                     "tensors (list, tuple...). Got element "
                                     f"{i} of the sequence with type {type(original_i).__name__}.")
                if isinstance(original, Parameter):
                    original_i = Parameter(original_i, original.requires_grad)
                original_i.requires_grad_(original.requires_grad)
                _register_parameter_or_buffer(self, f"original{i}", original_i)
        if not self.unsafe:
            result = self()
            if not isinstance(result, TensorBase):
                raise ValueError("A parametrization must return a tensor. Got "
                                 f"{type(result).__name__}.")
            if result.dtype != original_dtype:
                raise ValueError("Registering a parametrization may not change the dtype of "
                                 "the tensor, unless `unsafe` flag is enabled.\nunparametrized "
                                 f"dtype: {original_dtype}\nparametrized dtype: {result.dtype}")
            if result.shape != original_shape:
                raise ValueError("Registering a parametrization may not change the shape of "
                                 "the tensor, unless `unsafe` flag is enabled.\nunparametrized "
                                 f"shape: {original_shape}\nparametrized shape: {result.shape}")

    def right_inverse(self, value):
        """Set the original tensor(s) so that this list computes ``value``: each
        parametrization's ``right_inverse``, last to first."""
        with no_grad():
            for module in reversed(self):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       "implement right_inverse.")
                value = module.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, TensorBase):
                    raise ValueError("`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(f"The tensor returned by `right_inverse` has dtype "
                                     f"{value.dtype} while `original` has dtype "
                                     f"{self.original.dtype}")
                _maybe_set(self.original, value)
                return
            if not isinstance(value, Sequence):
                raise ValueError("'right_inverse' must return a sequence of tensors. Got "
                                 f"{type(value).__name__}.")
            if len(value) != self.ntensors:
                raise ValueError("'right_inverse' must return a sequence of tensors of length "
                                 f"{self.ntensors}. Got a sequence of length {len(value)}.")
            for i, tensor in enumerate(value):
                original_i = getattr(self, f"original{i}")
                if not isinstance(tensor, TensorBase):
                    raise ValueError("'right_inverse' must return a sequence of tensors "
                                     "or reference-type opaques. Got element "
                                     f"{i} of type {type(tensor).__name__}.")
                if original_i.dtype != tensor.dtype:
                    raise ValueError(f"Tensor {i} returned by `right_inverse` has dtype "
                                     f"{tensor.dtype} while `original{i}` has dtype "
                                     f"{original_i.dtype}")
                _maybe_set(original_i, tensor)

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _default_deepcopy(self, memo):
    """A deep copy through ``__dict__`` (a parametrized module refuses ``__getstate__``)."""
    found = memo.get(id(self))
    if found is not None:
        return found
    replica = self.__new__(self.__class__)
    memo[id(self)] = replica
    replica.__dict__ = deepcopy(self.__dict__, memo)
    for slot in copyreg._slotnames(self.__class__):
        if hasattr(self, slot):
            setattr(replica, slot, deepcopy(getattr(self, slot), memo))
    return replica


def _refuse_getstate(self):
    raise RuntimeError("Serialization of parametrized modules is only supported through "
                       "state_dict(). See:\nhttps://pytorch.org/tutorials/beginner/"
                       "saving_loading_models.html#saving-loading-a-general-checkpoint-for-"
                       "inference-and-or-resuming-training")


def _inject_new_class(module):
    """Give ``module`` a class of its own, ``Parametrized<Class>`` (a subclass of its
    class), to hold the parametrized tensors' properties."""
    cls = module.__class__
    members = {"__getstate__": _refuse_getstate}
    if not hasattr(cls, "__deepcopy__"):
        members["__deepcopy__"] = _default_deepcopy
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), members)


def _inject_property(module, tensor_name):
    """``module.<tensor_name>`` becomes a property: reading computes the parametrization
    (cached inside ``cached()``), assigning runs its ``right_inverse``."""
    if hasattr(module, tensor_name):
        raise AssertionError(f"Module already has an attribute named '{tensor_name}'")

    def get_parametrized(self):
        parametrization = self.parametrizations[tensor_name]
        if not _cache_enabled:
            return parametrization()
        key = (id(self), tensor_name)
        tensor = _cache.get(key)
        if tensor is None:
            tensor = _cache[key] = parametrization()
        return tensor

    def set_original(self, value):
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def _check_appended(tensor_name, parametrization, current):
    """PyTorch's checks of a parametrization appended to an already parametrized tensor
    (with value ``current``): it keeps the shape and dtype, and so does its
    ``right_inverse``."""
    result = parametrization(current)
    if not isinstance(result, TensorBase):
        raise ValueError(f"A parametrization must return a tensor. Got {type(result).__name__}.")
    for what, got in (("dtype", result.dtype), ("shape", result.shape)):
        expected = getattr(current, what)
        if got != expected:
            raise ValueError(f"Registering a parametrization may not change the {what} of the "
                             "tensor, unless the `unsafe` flag is enabled.\n"
                             f"module.{tensor_name}.{what}: {expected}\n"
                             f"parametrization(module.{tensor_name}).{what}: {got}")
    if not hasattr(parametrization, "right_inverse"):
        return
    try:
        inverse = parametrization.right_inverse(result)
    except NotImplementedError:
        return
    if not isinstance(inverse, TensorBase):
        raise ValueError("parametrization.right_inverse must return a tensor. Got: "
                         f"{type(inverse).__name__}")
    for what, got in (("dtype", inverse.dtype), ("shape", inverse.shape)):
        expected = getattr(current, what)
        if got != expected:
            raise ValueError(f"The tensor returned by parametrization.right_inverse must have "
                             f"the same {what} as module.{tensor_name}, unless the `unsafe` "
                             f"flag is enabled.\nmodule.{tensor_name}.{what}: {expected}\n"
                             f"returned {what}: {got}")


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Parametrize ``module.<tensor_name>`` (a parameter, a buffer, or an already
    parametrized tensor, whose chain then grows) by the module ``parametrization``;
    returns ``module``.  Unless ``unsafe``, the result must keep the tensor's shape and
    dtype."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            _check_appended(tensor_name, parametrization, getattr(module, tensor_name))
        chain = module.parametrizations[tensor_name]
        chain.append(parametrization)
        chain.unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        chain = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = chain
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def is_parametrized(module, tensor_name=None):
    """Whether ``module`` has any parametrization (or one on ``tensor_name``)."""
    parametrizations = getattr(module, "parametrizations", None)
    if not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo the parametrizations of ``module.<tensor_name>``: it becomes a parameter (or
    buffer) again, holding its current parametrized value (``leave_parametrized``) or the
    original tensor.  The module gets its class back when nothing is left parametrized."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    chain = module.parametrizations[tensor_name]
    if chain.is_tensor:
        original = chain.original
        if leave_parametrized:
            with no_grad():
                _maybe_set(original, getattr(module, tensor_name))
    elif leave_parametrized:
        value = getattr(module, tensor_name)
        original = Parameter(value) if value.requires_grad else value
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                         "that is parametrized in terms of a sequence of tensors.")
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module):
    """The module's class before parametrizations gave it its own."""
    if is_parametrized(module):
        return module.__class__.__bases__[0]
    return type(module)


def transfer_parametrizations_and_params(from_module, to_module, tensor_name=None):
    """Register on ``to_module`` the parametrizations of ``from_module`` (all, or those of
    ``tensor_name``) with the same original tensors (shared, not copied); a tensor
    ``to_module`` lacks is first created from ``from_module``'s value."""
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name)))
        source = from_module.parametrizations[name]
        for parametrization in source:
            register_parametrization(to_module, name, parametrization)
        target = to_module.parametrizations[name]
        if hasattr(source, "original"):
            target.original = source.original
        else:
            i = 0
            while hasattr(source, f"original{i}"):
                setattr(target, f"original{i}", getattr(source, f"original{i}"))
                i += 1
    return to_module
