"""``Module`` and the layers: ``Linear``, ``Sequential``, activations, ``Flatten``,
``Dropout``, ``Embedding`` and the losses (module forms of ``nn.functional``)."""
import math
import operator
import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from microtensor._C.tensor import TensorBase, bfloat16, float16, float32, float64
from microtensor._C.tensor import device as device_cls
from microtensor._C.tensor import dtype as dtype_cls
from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.hooks import BackwardHook, RemovableHandle
from microtensor.nn.parameter import Parameter, is_buffer, is_lazy


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns; prints as PyTorch's (``_IncompatibleKeys(...)``,
    or ``<All keys matched successfully>`` when both lists are empty)."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (f"_IncompatibleKeys(missing_keys={self.missing_keys!r}, "
                f"unexpected_keys={self.unexpected_keys!r})")

    __str__ = __repr__


def _typename(obj):
    """How PyTorch's messages name the type of ``obj``."""
    if isinstance(obj, TensorBase):
        return obj.type()
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


# The per-module hook tables (OrderedDicts: a RemovableHandle refers to them weakly).
_HOOK_TABLES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                "_backward_pre_hooks", "_backward_hooks", "_state_dict_pre_hooks",
                "_state_dict_hooks", "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks")


def _add_hook(table, hook, prepend=False, extra_dict=None):
    handle = RemovableHandle(table, extra_dict=extra_dict)
    table[handle.id] = hook
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def _parse_to(*args, **kwargs):
    """``(device, dtype, non_blocking, memory_format)`` from ``Module.to``'s arguments:
    ``to(device=None, dtype=None, non_blocking=False)``, ``to(dtype, non_blocking=False)``
    or ``to(tensor, non_blocking=False)``, as PyTorch parses them."""
    if "copy" in kwargs:
        raise RuntimeError(".to() does not accept copy argument")
    options = dict(kwargs)
    non_blocking = options.pop("non_blocking", False)
    memory_format = options.pop("memory_format", None)
    rest = list(args)
    if rest and isinstance(rest[0], TensorBase):
        tensor = rest.pop(0)
        device, dtype = tensor.device, tensor.dtype
        dtype_given = True
    else:
        device = rest.pop(0) if rest and isinstance(rest[0], (str, device_cls)) else None
        dtype = rest.pop(0) if rest and isinstance(rest[0], dtype_cls) else None
        device_given, dtype_given = device is not None, dtype is not None
    if rest and isinstance(rest[0], bool):
        non_blocking = rest.pop(0)
    if not dtype_given:     # to(device=, dtype=): keywords only where no dtype came first
        if "device" in options and not device_given:
            device = options.pop("device")
        if "dtype" in options:
            dtype = options.pop("dtype")
    if rest or options or not isinstance(non_blocking, bool) or \
            (device is not None and not isinstance(device, (str, device_cls))) or \
            (dtype is not None and not isinstance(dtype, dtype_cls)):
        got = [type(a).__name__ for a in args] + \
            [f"{k}={type(v).__name__}" for k, v in kwargs.items()]
        raise TypeError("to() received an invalid combination of arguments - got "
                        f"({', '.join(got)})")
    if isinstance(device, str):
        device = device_cls(device)
    return device, dtype, non_blocking, memory_format


class _HookWithoutModule:
    """A hook called as ``hook(*args)`` where the module's hooks are called as
    ``hook(module, *args)``; ``.hook`` is the hook given."""

    def __init__(self, hook):
        self.hook = hook

    def __call__(self, module, *args):
        return self.hook(*args)


class Module:
    """Base class of layers: tracks parameters, buffers and sub-modules by attribute, with
    PyTorch's hooks, conversions (``to``, ``float``...) and state-dict protocol."""

    _version = 1

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        for table in _HOOK_TABLES:
            object.__setattr__(self, table, OrderedDict())

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        """As PyTorch: a Parameter, a Module or a ``Buffer`` registers under ``name``; a
        name already registered keeps its kind (a reassigned buffer stays a buffer,
        persistent or not, unless a ``Buffer`` says otherwise) and accepts only that kind
        or None; anything else is a plain attribute."""
        params = self.__dict__.get("_parameters")
        modules = self.__dict__.get("_modules")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._unregister(name, self.__dict__, self._buffers, self._modules)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(microtensor.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._unregister(name, self.__dict__, self._parameters, self._buffers)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                "(microtensor.nn.Module or None expected)")
            modules[name] = value
        elif name in self.__dict__.get("_buffers", ()) or is_buffer(value):
            if value is not None and not isinstance(value, TensorBase):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                "(microtensor.nn.Buffer, microtensor.Tensor or None "
                                "expected)")
            persistent = value.persistent if is_buffer(value) else \
                name not in self._non_persistent_buffers_set
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def _unregister(self, name, *tables):
        for table in tables:
            table.pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def _check_new_name(self, kind, name, table):
        """PyTorch's checks of a name about to be registered in ``table``."""
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in table:
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor of the module's state that is not learnable; ``persistent=False`` keeps
        it out of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name("buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, TensorBase):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(microtensor Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name, param):
        """Register ``param`` (a Parameter, or None for an absent one) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name("parameter", name, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(microtensor.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as "
                             "a function of another Tensor, compute the value in the forward() "
                             "method.")
        self._parameters[name] = param

    def add_module(self, name, module):
        """Register ``module`` (or None) as a child under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        # PyTorch checks module names in its own order, with the name in the message
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    def register_module(self, name, module):
        """Alias of ``add_module``."""
        self.add_module(name, module)

    def get_submodule(self, target):
        """The module at dotted path ``target`` (``""``: this module)."""
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def _get_member(self, target, kind, is_kind):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        if not is_kind(module, name):
            raise AttributeError(f"`{name}` is not {kind}")
        return getattr(module, name)

    def get_parameter(self, target):
        """The Parameter at dotted path ``target``."""
        return self._get_member(target, "an nn.Parameter",
                                lambda m, name: isinstance(getattr(m, name), Parameter))

    def get_buffer(self, target):
        """The buffer at dotted path ``target``."""
        return self._get_member(target, "a buffer", lambda m, name: name in m._buffers)

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """This module and every module below it, each once (unless ``remove_duplicate``
        is False) under its first dotted name."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name,
                                                remove_duplicate)

    def modules(self, remove_duplicate=True):
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and module not in seen:
                seen.add(module)
                yield name, module

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, table, prefix, recurse, remove_duplicate):
        """The entries of ``table`` (``"_parameters"`` or ``"_buffers"``) of this module (and
        below if ``recurse``) by dotted name, each tensor once unless ``remove_duplicate``
        is False."""
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------ conversion
    def _apply(self, fn, recurse=True):
        """Replace every tensor ``t`` of this module (and below) by ``fn(t)``, as PyTorch:
        a Parameter stays the same object with its data swapped (so optimizers holding it
        still see it), its ``.grad`` likewise; buffers are replaced."""
        from microtensor.autograd.grad_mode import no_grad
        if recurse:
            for module in self.children():
                module._apply(fn)
        with no_grad():
            for param in self._parameters.values():
                if param is None:
                    continue
                param.data = fn(param)
                if param.grad is not None:
                    param.grad.data = fn(param.grad)
            for key, buf in self._buffers.items():
                if buf is not None:
                    self._buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs):
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (each with
        ``non_blocking``): moves every tensor, casts only the floating-point ones; in
        place, returns ``self``."""
        device, dtype, non_blocking, memory_format = _parse_to(*args, **kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={dtype}")

        def convert(t):
            target = dtype if t.is_floating_point() else None
            if memory_format is not None and t.dim() in (4, 5):
                return t.to(device=device, dtype=target, non_blocking=non_blocking,
                            memory_format=memory_format)
            return t.to(device=device, dtype=target, non_blocking=non_blocking)
        return self._apply(convert)

    def to_empty(self, *, device, recurse=True):
        """Move every parameter and buffer to ``device`` without copying its values (a
        module made on the meta device gets real, uninitialized tensors)."""
        from microtensor.ops.factory import empty_like
        return self._apply(lambda t: empty_like(t, device=device), recurse=recurse)

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def type(self, dst_type):
        """Cast every parameter and buffer (integer ones too) to ``dst_type``."""
        return self._apply(lambda t: t.type(dst_type))

    def _cast_floating(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self):
        return self._cast_floating(float32)

    def double(self):
        return self._cast_floating(float64)

    def half(self):
        return self._cast_floating(float16)

    def bfloat16(self):
        return self._cast_floating(bfloat16)

    # ------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with ``with_kwargs``)
        before each ``forward``; a non-None result replaces the arguments."""
        handle = _add_hook(self._forward_pre_hooks, hook, prepend,
                           extra_dict=self._forward_pre_hooks_with_kwargs)
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``)
        after each ``forward``; a non-None result replaces the output.  ``always_call``:
        run it even when ``forward`` raises."""
        handle = _add_hook(self._forward_hooks, hook, prepend,
                           extra_dict=[self._forward_hooks_with_kwargs,
                                       self._forward_hooks_always_called])
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` when the gradients of the module's outputs are
        known; a non-None result replaces ``grad_output``."""
        return _add_hook(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` when the gradients of the module's
        tensor inputs are known; a non-None result replaces ``grad_input``."""
        return _add_hook(self._backward_hooks, hook, prepend)

    def register_state_dict_pre_hook(self, hook):
        """``hook(module, prefix, keep_vars)`` before ``state_dict`` saves this module."""
        return _add_hook(self._state_dict_pre_hooks, hook)

    def register_state_dict_post_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata)`` after ``state_dict`` saved
        this module and its children; may edit ``state_dict`` in place, returns None."""
        def public(module, state_dict, prefix, local_metadata):
            if hook(module, state_dict, prefix, local_metadata) is not None:
                raise RuntimeError("state_dict post-hook must return None")
        return _add_hook(self._state_dict_hooks, public)

    def _register_state_dict_hook(self, hook):
        """As ``register_state_dict_post_hook``, but a non-None result replaces the state
        dict (PyTorch's private form, used by libraries)."""
        return _add_hook(self._state_dict_hooks, hook)

    def register_load_state_dict_pre_hook(self, hook):
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before ``load_state_dict`` checks this module's
        entries; may edit ``state_dict`` in place."""
        return _add_hook(self._load_state_dict_pre_hooks, hook)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """PyTorch's private form of ``register_load_state_dict_pre_hook``: ``hook`` takes
        the module first only ``with_module`` (libraries register such hooks)."""
        if with_module:
            return self.register_load_state_dict_pre_hook(hook)
        return self.register_load_state_dict_pre_hook(_HookWithoutModule(hook))

    def register_load_state_dict_post_hook(self, hook):
        """``hook(module, incompatible_keys)`` after ``load_state_dict`` loaded this module;
        may edit the missing/unexpected key lists in place (before ``strict`` judges them),
        must return None."""
        return _add_hook(self._load_state_dict_post_hooks, hook)

    # ------------------------------------------------------------ state
    def _state_entries(self, prefix=""):
        """``(key, module, name, tensor, is_parameter)`` for every parameter and persistent
        buffer, module by module in ``state_dict``'s order (a shared tensor under each
        name)."""
        for name, value in self._parameters.items():
            if value is not None:
                yield prefix + name, self, name, value, True
        for name, value in self._buffers.items():
            if value is not None and name not in self._non_persistent_buffers_set:
                yield prefix + name, self, name, value, False
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_entries(prefix + name + ".")

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """Parameters and persistent buffers by dotted name, module by module as PyTorch
        (a tensor registered twice appears under both names); detached unless
        ``keep_vars``.  Runs the state-dict pre and post hooks."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        for table, skip in ((self._parameters, ()), (self._buffers,
                                                      self._non_persistent_buffers_set)):
            for name, value in table.items():
                if value is not None and name not in skip:
                    # an uninitialized tensor is saved as itself (it refuses detach)
                    keep = keep_vars or is_lazy(value)
                    destination[prefix + name] = value if keep else value.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if result is not None:
                destination = result
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy ``state_dict`` into the parameters and persistent buffers (``assign``: make
        its tensors the module's own, Parameters keeping ``requires_grad``).  Every check is
        made first, so a refused load changes nothing; the one exception is PyTorch's
        order where load post-hooks may forgive missing or unexpected keys: with such a
        hook registered, ``strict`` judges the keys after loading and the hooks."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        missing, unexpected, errors = [], [], []
        for prefix, module in self.named_modules():
            prefix = prefix + "." if prefix else ""
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            module._upgrade_state_dict(state_dict, prefix, local_metadata)
            for hook in module._load_state_dict_pre_hooks.values():
                hook(module, state_dict, prefix, local_metadata, strict, missing,
                     unexpected, errors)
        entries = list(self._state_entries())
        own = {key for key, *_ in entries}
        missing += [key for key in own if key not in state_dict]
        unexpected += [key for key in state_dict if key not in own]
        for key, _, _, tensor, is_param in entries:
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, TensorBase):
                errors.append(f'While copying the parameter named "{key}", expected '
                              "microtensor.Tensor or Tensor-like object from checkpoint but "
                              f"received {type(value)}")
            elif not is_lazy(tensor) and tuple(value.shape) != tuple(tensor.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{value.shape} from checkpoint, the shape in current model is "
                              f"{tensor.shape}.")
        post_hooks = any(m._load_state_dict_post_hooks for m in self.modules())
        self._raise_load_errors(errors, missing, unexpected, strict and not post_hooks)
        self._load_entries(entries, state_dict, assign)
        if post_hooks:
            keys = IncompatibleKeys(missing, unexpected)
            for module in self.modules():
                for hook in module._load_state_dict_post_hooks.values():
                    if hook(module, keys) is not None:
                        raise AssertionError(
                            "Hooks registered with ``register_load_state_dict_post_hook`` are "
                            "not expected to return new values, if incompatible_keys need to "
                            "be modified, it should be done inplace.")
            self._raise_load_errors([], missing, unexpected, strict)
        return IncompatibleKeys(missing, unexpected)

    def _upgrade_state_dict(self, state_dict, prefix, local_metadata):
        """Bring this module's entries of ``state_dict`` (saved at
        ``local_metadata["version"]``, None when unknown) up to ``_version``, in place,
        before loading: what PyTorch's modules do first in ``_load_from_state_dict``."""

    def _raise_load_errors(self, errors, missing, unexpected, strict):
        errors = list(errors)
        if strict:
            for keys, what in ((unexpected, "Unexpected"), (missing, "Missing")):
                if keys:
                    errors.insert(0, f"{what} key(s) in state_dict: "
                                     + ", ".join(f'"{k}"' for k in keys) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))

    @staticmethod
    def _load_entries(entries, state_dict, assign):
        from microtensor.autograd.grad_mode import no_grad
        with no_grad():
            for key, module, name, tensor, is_param in entries:
                if key not in state_dict:
                    continue
                value = state_dict[key]
                if not assign:
                    tensor.copy_(value)
                elif is_param:
                    if not isinstance(value, Parameter):
                        value = Parameter(value, requires_grad=tensor.requires_grad)
                    else:
                        value.requires_grad_(tensor.requires_grad)
                    setattr(module, name, value)
                else:
                    setattr(module, name, value)

    # ------------------------------------------------------------ modes and gradients
    def train(self, mode=True):
        """Set training mode on this module and (through their ``train``) its children."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def _unique_parameters(self):
        """Every parameter of this module and below, each once, in ``parameters()``'s
        order, as a list made in one frame (``parameters()`` is a chain of generators,
        a dozen frames for a three-layer model): what ``zero_grad`` walks every step."""
        found, seen, visited, stack = [], set(), set(), [self]
        while stack:
            module = stack.pop()
            if module in visited:
                continue
            visited.add(module)
            for p in module._parameters.values():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    found.append(p)
            stack.extend(m for m in reversed(module._modules.values()) if m is not None)
        return found

    def zero_grad(self, set_to_none=True):
        """Drop (``set_to_none``) or zero every parameter's ``.grad``."""
        for p in self._unique_parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    def apply(self, fn):
        """Call ``fn`` on every child (recursively), then on this module; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  "\"forward\" function")

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args, kwargs):
        """``forward`` between the forward (pre-)hooks, with the backward hooks attached,
        in PyTorch's order."""
        result = None
        called = set()
        try:
            for hook_id, hook in list(self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    new = hook(self, args, kwargs)
                    if new is not None:
                        if not (isinstance(new, tuple) and len(new) == 2):
                            raise RuntimeError("forward pre-hook must return None or a tuple "
                                               f"of (new_args, new_kwargs), but got {new}.")
                        args, kwargs = new
                else:
                    new = hook(self, args)
                    if new is not None:
                        args = new if isinstance(new, tuple) else (new,)
            backward_hook = None
            if self._backward_hooks or self._backward_pre_hooks:
                backward_hook = BackwardHook(self, list(self._backward_hooks.values()),
                                             list(self._backward_pre_hooks.values()))
                args = backward_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in list(self._forward_hooks.items()):
                called.add(hook_id)
                result = self._run_forward_hook(hook_id, hook, args, kwargs, result)
            if backward_hook is not None:
                if not isinstance(result, (TensorBase, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a "
                                  "Tensor or a tuple of Tensors but received "
                                  f"{type(result)}", stacklevel=2)
                else:
                    result = backward_hook.setup_output_hook(result)
            return result
        except Exception:
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called and hook_id not in called:
                    try:
                        result = self._run_forward_hook(hook_id, hook, args, kwargs, result)
                    except Exception as e:  # noqa: BLE001 - forward's error is the one raised
                        warnings.warn("module forward hook with ``always_call=True`` raised an "
                                      "exception that was silenced as another error was raised "
                                      f"in forward: {e}", stacklevel=2)
            raise

    def _run_forward_hook(self, hook_id, hook, args, kwargs, result):
        if hook_id in self._forward_hooks_with_kwargs:
            new = hook(self, args, kwargs, result)
        else:
            new = hook(self, args, result)
        return result if new is None else new

    # ------------------------------------------------------------ printing
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """The text inside this module's parentheses in ``repr`` (layers override it)."""
        return ""

    def __repr__(self):
        """PyTorch's layout: ``Name(extra)`` or one line per extra-repr line and child."""
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + repr(m).replace("\n", "\n  ")
                       for name, m in self._modules.items()]
        lines = extra_lines + child_lines
        if not lines:
            return f"{self._get_name()}()"
        if len(extra_lines) == 1 and not child_lines:
            return f"{self._get_name()}({extra_lines[0]})"
        return f"{self._get_name()}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


class Identity(Module):
    """Returns its input; accepts (and ignores) any constructor arguments, as PyTorch."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with PyTorch's default initialisation."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        from microtensor.ops.factory import empty
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        params = self._parameters
        if "weight" in params and "bias" in params:
            # read from their table: ``self.weight`` fails the instance lookup before
            # ``__getattr__`` finds it (0.7 against 0.05 us, twice a call)
            return F.linear(x, params["weight"], params["bias"])
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Sequential(Module):
    """Modules called in order, each on the previous one's output; built from modules or
    from an ``OrderedDict`` of named modules.  Indexing, slicing (a Sequential), and
    ``append``/``insert``/``extend``/``pop``/``+``/``*`` as PyTorch's."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def _key(self, index):
        """The name of the module at integer ``index`` (negative from the end)."""
        size = len(self._modules)
        index = operator.index(index)
        if not -size <= index < size:
            raise IndexError(f"index {index} is out of range")
        return list(self._modules)[index]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(OrderedDict(list(self._modules.items())[index]))
        return self._modules[self._key(index)]

    def __setitem__(self, index, module):
        setattr(self, self._key(index), module)

    def __delitem__(self, index):
        keys = list(self._modules)[index] if isinstance(index, slice) else [self._key(index)]
        for key in keys:
            delattr(self, key)
        _renumber(self)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index, module):
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        _insert(self, index + n if index < 0 else index, module)
        return self

    def extend(self, sequential):
        for module in sequential:
            self.append(module)
        return self

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def _check_sequential(self, other):
        if not isinstance(other, Sequential):
            raise ValueError("add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")

    def __add__(self, other):
        self._check_sequential(other)
        return Sequential().extend(self).extend(other)

    def __iadd__(self, other):
        self._check_sequential(other)
        return self.extend(list(other))

    def _check_factor(self, other):
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")

    def __mul__(self, other):
        self._check_factor(other)
        return Sequential().extend(list(self) * other)

    __rmul__ = __mul__

    def __imul__(self, other):
        self._check_factor(other)
        return self.extend(list(self) * (other - 1))


def _renumber(container):
    """Name a list-like container's modules ``"0"``, ``"1"``... again, as PyTorch does
    after a deletion."""
    object.__setattr__(container, "_modules", OrderedDict(
        (str(i), m) for i, m in enumerate(container._modules.values())))


def _insert(container, index, module):
    """Shift a list-like container's modules from ``index`` on up by one and put
    ``module`` at ``index``."""
    modules = container._modules
    for i in range(len(modules), index, -1):
        modules[str(i)] = modules[str(i - 1)]
    modules[str(index)] = module


# ------------------------------------------------------------------ activations
class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    def forward(self, input):
        return input.tanh()


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


def _legacy_softmax_dim(name, ndim):
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else _legacy_softmax_dim("softmax", input.dim())
        return F.softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else \
            _legacy_softmax_dim("log_softmax", input.dim())
        return F.log_softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


# ------------------------------------------------------------------ shapes, regularisation
class Flatten(Module):
    """``input.flatten(start_dim, end_dim)``; by default keeps the batch dimension."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """``input.unflatten(dim, unflattened_size)``."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if not isinstance(dim, int):
            raise TypeError(f"invalid argument type for dim parameter, got {type(dim)}")
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError("unflattened_size must be tuple of ints, but found type "
                            f"{type(unflattened_size).__name__}")
        for i, size in enumerate(unflattened_size):
            if not isinstance(size, int):
                raise TypeError("unflattened_size must be tuple of ints, but found element of "
                                f"type {type(size).__name__} at pos {i}")
        self.dim = dim
        self.unflattened_size = unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class _DropoutNd(Module):
    """``p`` and ``inplace``, checked and printed as PyTorch does: the dropout layers'
    base."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        from microtensor.autograd.grad_mode import no_grad
        from microtensor.ops.factory import randn
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if padding_idx > 0:
                assert padding_idx < num_embeddings, "Padding_idx must be within num_embeddings"
            elif padding_idx < 0:
                assert padding_idx >= -num_embeddings, \
                    "Padding_idx must be within num_embeddings"
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype,
                                          device=device), requires_grad=not _freeze)
            if padding_idx is not None:
                with no_grad():
                    self.weight[padding_idx].fill_(0)
        else:
            assert list(_weight.shape) == [num_embeddings, embedding_dim], \
                "Shape of weight does not match num_embeddings and embedding_dim"
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        assert embeddings.dim() == 2, "Embeddings parameter is expected to be 2-dimensional"
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s


# ------------------------------------------------------------------ losses
def _reduction(size_average, reduce, reduction):
    """PyTorch's mapping of the deprecated ``size_average``/``reduce`` flags."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    legacy = "none" if not reduce else "mean" if size_average else "sum"
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  f"reduction='{legacy}' instead.", stacklevel=3)
    return legacy


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = _reduction(size_average, reduce, reduction)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight,
                               ignore_index=self.ignore_index, reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


__all__ = ["Module", "Identity", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "Softmax",
           "LogSoftmax", "Flatten", "Unflatten", "Dropout", "Embedding", "MSELoss", "L1Loss",
           "NLLLoss", "CrossEntropyLoss", "BCELoss", "BCEWithLogitsLoss", "IncompatibleKeys"]
