"""``Module`` and the layers: ``Linear``, ``Sequential``, activations, ``Dropout``,
``Embedding``."""
import math
from collections import OrderedDict

from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.parameter import Parameter


class Module:
    """Base class of layers: tracks parameters, buffers and sub-modules by attribute."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        if params is None:
            raise AttributeError("cannot assign before Module.__init__() call")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

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
                return
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor, persistent=True):
        self._buffers[name] = tensor

    def register_parameter(self, name, param):
        if param is None:
            self._parameters[name] = None
        else:
            setattr(self, name, param)

    def add_module(self, name, module):
        self._modules[name] = module

    # ------------------------------------------------------------ traversal
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def children(self):
        return iter(self._modules.values())

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            for name, p in module._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield mod_prefix + ("." if mod_prefix else "") + name, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix=""):
        for mod_prefix, module in self.named_modules(prefix):
            for name, b in module._buffers.items():
                if b is not None:
                    yield mod_prefix + ("." if mod_prefix else "") + name, b

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    # ------------------------------------------------------------ state
    def state_dict(self):
        state = OrderedDict()
        for name, p in self.named_parameters():
            state[name] = p.detach()
        for name, b in self.named_buffers():
            state[name] = b.detach()
        return state

    def load_state_dict(self, state_dict, strict=True):
        own = dict(self.named_parameters())
        own.update(self.named_buffers())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: "
                               f"missing keys {missing}, unexpected keys {unexpected}")
        from microtensor.autograd.grad_mode import no_grad
        with no_grad():
            for name, value in state_dict.items():
                if name in own:
                    if tuple(own[name].shape) != tuple(value.shape):
                        raise RuntimeError(f"size mismatch for {name}: copying a param with "
                                           f"shape {value.shape} from checkpoint, the shape in "
                                           f"current model is {own[name].shape}.")
                    own[name].copy_(value)
        return missing, unexpected

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

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


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
