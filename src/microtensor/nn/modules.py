"""``Module`` and the layers: ``Linear``, ``Sequential``, activations, ``Dropout``,
``Embedding``."""
import math
import operator
from collections import OrderedDict, namedtuple

from microtensor._C.tensor import TensorBase
from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.parameter import Parameter


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _typename(obj):
    """How PyTorch's messages name the type of ``obj``."""
    if isinstance(obj, TensorBase):
        return obj.type()
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


class Module:
    """Base class of layers: tracks parameters, buffers and sub-modules by attribute."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        """As PyTorch: a Parameter or a Module registers under ``name``; a name already
        registered keeps its kind (a reassigned buffer stays a buffer, persistent or not)
        and accepts only that kind or None; anything else is a plain attribute."""
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
        elif name in self.__dict__.get("_buffers", ()):
            if value is not None and not isinstance(value, TensorBase):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                "(microtensor.Tensor or None expected)")
            self.register_buffer(name, value, name not in self._non_persistent_buffers_set)
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
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name("parameter", name, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(microtensor.nn.Parameter or None required)")
        self._parameters[name] = param

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        self._check_new_name("module", name, self._modules)
        self._modules[name] = module

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

    def modules(self):
        for _, m in self.named_modules():
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

    # ------------------------------------------------------------ state
    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """Parameters and persistent buffers by dotted name, module by module as PyTorch
        (a tensor registered twice appears under both names); detached unless
        ``keep_vars``."""
        if destination is None:
            destination = OrderedDict()
        for table, skip in ((self._parameters, ()), (self._buffers,
                                                      self._non_persistent_buffers_set)):
            for name, value in table.items():
                if value is not None and name not in skip:
                    destination[prefix + name] = value if keep_vars else value.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True):
        """Copy ``state_dict`` into the parameters and persistent buffers.  Every check is
        made first, so a refused load changes nothing."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = [f"size mismatch for {name}: copying a param with shape {value.shape} from "
                  f"checkpoint, the shape in current model is {own[name].shape}."
                  for name, value in state_dict.items()
                  if name in own and tuple(own[name].shape) != tuple(value.shape)]
        if strict:
            for keys, what in ((unexpected, "Unexpected"), (missing, "Missing")):
                if keys:
                    errors.insert(0, f"{what} key(s) in state_dict: "
                                     + ", ".join(f'"{k}"' for k in keys) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        from microtensor.autograd.grad_mode import no_grad
        with no_grad():
            for name, value in state_dict.items():
                if name in own:
                    own[name].copy_(value)
        return IncompatibleKeys(missing, unexpected)

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  "\"forward\" function")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ")
                 for name, m in self._modules.items()]
        if not lines:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with PyTorch's default initialisation."""

    def __init__(self, in_features, out_features, bias=True, dtype=None, device=None):
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
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

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
        # PyTorch renumbers the remaining modules
        object.__setattr__(self, "_modules", OrderedDict(
            (str(i), m) for i, m in enumerate(self._modules.values())))

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, dtype=None, device=None):
        super().__init__()
        from microtensor.ops.factory import randn
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype,
                                      device=device))

    def forward(self, indices):
        return F.embedding(indices, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


__all__ = ["Module", "Linear", "Sequential", "ReLU", "Tanh", "Sigmoid", "Dropout", "Embedding",
           "Identity"]
