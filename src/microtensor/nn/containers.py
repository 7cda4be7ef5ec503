"""The containers besides ``Sequential``, as PyTorch's: ``ModuleList``, ``ModuleDict``,
``ParameterList``, ``ParameterDict``.  Their entries are registered, so ``parameters()``,
``state_dict()``, ``to()`` and the rest see them."""
import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from microtensor._C.tensor import TensorBase
from microtensor.nn.modules import Module, _insert, _renumber
from microtensor.nn.parameter import Parameter


def _abs_index(container, index):
    """``index`` (negative from the end) as the container's string key, checked."""
    index = operator.index(index)
    if not -len(container) <= index < len(container):
        raise IndexError(f"index {index} is out of range")
    return str(index + len(container) if index < 0 else index)


def _pairs(kind, entries):
    """The ``(key, value)`` pairs of an ``update`` argument that is not a mapping."""
    for j, pair in enumerate(entries):
        if not isinstance(pair, Iterable):
            raise TypeError(f"{kind} update sequence element #{j} should be Iterable; is"
                            + type(pair).__name__)
        if len(pair) != 2:
            raise ValueError(f"{kind} update sequence element #{j} has length {len(pair)}; "
                             "2 is required")
        yield pair[0], pair[1]


def _tensor_line(key, value, type_name):
    """One line of ``ParameterList``/``ParameterDict``'s repr (the first names a tensor's
    dtype, the second its type: PyTorch's difference)."""
    if not isinstance(value, TensorBase):
        return f"  ({key}): Object of type: {type(value).__name__}"
    size = "x".join(str(s) for s in value.shape)
    where = f" ({value.device})" if value.device.type == "cuda" else ""
    kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
    return f"  ({key}): {kind} containing: [{type_name(value)} of size {size}{where}]"


def _as_parameter(value):
    """A plain tensor put into a parameter container becomes a Parameter, as PyTorch."""
    if isinstance(value, TensorBase) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ModuleList(Module):
    """Modules in a list: indexing, slicing (a ModuleList), ``append``, ``extend``,
    ``insert``, ``pop``, ``+``, ``+=``.  It has no ``forward``."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self += modules

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(list(self._modules.values())[index])
        return self._modules[_abs_index(self, index)]

    def __setitem__(self, index, module):
        setattr(self, _abs_index(self, index), module)

    def __delitem__(self, index):
        if isinstance(index, slice):
            for k in range(len(self._modules))[index]:
                delattr(self, str(k))
        else:
            delattr(self, _abs_index(self, index))
        _renumber(self)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        combined = ModuleList()
        for i, module in enumerate([*self, *other]):
            combined.add_module(str(i), module)
        return combined

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def insert(self, index, module):
        _insert(self, index, module)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def extend(self, modules):
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got "
                            + type(modules).__name__)
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self

    def __repr__(self):
        """PyTorch's: a run of identical modules prints once, as ``(0-2): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks = []          # [first index, last index, repr]
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = [(f"({start}): {r}" if start == end else
                  f"({start}-{end}): {end - start + 1} x {r}").replace("\n", "\n  ")
                 for start, end, r in blocks]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """Modules by name, in insertion order, with the dict API (``keys``, ``items``,
    ``values``, ``update``, ``pop``, ``clear``, ``in``)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value "
                            "pairs, but got " + type(modules).__name__)
        pairs = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else \
            _pairs("ModuleDict", modules)
        for key, module in pairs:
            self[key] = module


class ParameterList(Module):
    """Parameters (or any values) in a list; a plain tensor put in becomes a Parameter."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def __getitem__(self, index):
        if isinstance(index, slice):
            out = type(self)()
            for i in range(*index.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, _abs_index(self, index))

    def __setitem__(self, index, value):
        setattr(self, _abs_index(self, index), _as_parameter(value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value):
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        if not isinstance(values, Iterable) or isinstance(values, TensorBase):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            + type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self):
        return "\n".join(_tensor_line(i, p, lambda t: str(t.dtype))
                         for i, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """Parameters (or any values) by string key, with the dict API; a plain tensor put in
    becomes a Parameter.  A plain ``dict`` given to ``update`` is taken in sorted key
    order, as PyTorch does."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _check_key(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is not "
                            f"a string (type is '{type(key).__name__}'). Open an issue on "
                            "github if you need non-string keys.")
        return key

    def __getitem__(self, key):
        return getattr(self, self._check_key(key))

    def __setitem__(self, key, value):
        self._check_key(key)
        setattr(self, key, _as_parameter(value))
        self._keys[key] = None

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, key)

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for key in list(self._keys):
            del self[key]

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        if not self._keys:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        return ParameterDict((k, default) for k in keys)

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
        if not isinstance(parameters, Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of "
                            "key/value pairs, but got " + type(parameters).__name__)
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = _pairs("ParameterDict", parameters)
        for key, value in pairs:
            self[key] = value

    def extra_repr(self):
        return "\n".join(_tensor_line(k, p, lambda t: t.type()) for k, p in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other):
        combined = self.copy()
        combined.update(other)
        return combined

    def __ror__(self, other):
        combined = other.copy()
        combined.update(self)
        return combined

    def __ior__(self, other):
        self.update(other)
        return self


__all__ = ["ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


class Container(Module):
    """Deprecated: a Module whose keyword arguments become its children (warns when made,
    as PyTorch's)."""

    def __init__(self, **kwargs):
        import warnings
        warnings.warn("`nn.Container` is deprecated. All of its functionality is now "
                      "implemented in `nn.Module`. Subclass that instead.", FutureWarning,
                      stacklevel=2)
        super().__init__()
        for key, value in kwargs.items():
            self.add_module(key, value)


__all__ += ["Container"]
