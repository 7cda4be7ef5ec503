"""PyTorch's ``torch._foreach_*`` functions: one op applied to each tensor of a list (with a
number, a list of numbers, a list of tensors or a 0-d tensor as the other operand), as
gradient clipping utilities, EMA helpers and optimizers call them.

Every name is generated from the tables below over the existing ops, so each element's
result, dtype, autograd and vmap behaviour are that op's.  Out-of-place forms return a
tuple of new tensors (differentiable, as in PyTorch); in-place forms (``_foreach_add_``)
update the tensors one by one and return the list given.  The argument checks and their
messages are PyTorch's: an empty list, lists of different lengths, a scalar list of the
wrong length, a non-0-d tensor operand.
"""
import numbers

import microtensor as mt
from microtensor._tensor import Tensor

# Unary: _foreach_<name> and _foreach_<name>_ call Tensor.<name> and Tensor.<name>_.
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")

# Binary: the forms of the other operand each takes (PyTorch's overloads): "scalar" a
# number, "scalars" a list of numbers, "list" a list of tensors, "tensor" a 0-d tensor;
# "alpha" when the list and tensor forms take alpha= (other scaled by it).
_BINARY = {
    "add": ("scalar", "scalars", "list", "tensor", "alpha"),
    "sub": ("scalar", "scalars", "list", "alpha"),
    "mul": ("scalar", "scalars", "list", "tensor"),
    "div": ("scalar", "scalars", "list", "tensor"),
    "maximum": ("scalar", "scalars", "list"),
    "minimum": ("scalar", "scalars", "list"),
    "clamp_min": ("scalar", "scalars", "list"),
    "clamp_max": ("scalar", "scalars", "list"),
    "pow": ("scalar", "scalars", "list"),
}


def _invalid(name, *args, **kwargs):
    got = ", ".join([type(a).__name__ for a in args]
                    + [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
    return TypeError(f"{name}() received an invalid combination of arguments - got ({got})")


def _tensors(name, value, *args):
    """``value`` as a non-empty list of tensors, or PyTorch's error."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Tensor)
                                                       for t in value):
        raise _invalid(name, value, *args)
    if not value:
        raise RuntimeError("Tensor list must have at least one tensor.")
    return value


def _same_length(tensors, others):
    if len(tensors) != len(others):
        raise RuntimeError("Tensor lists must have the same number of tensors, got "
                           f"{len(tensors)} and {len(others)}")


def _is_number(value):
    return isinstance(value, numbers.Number) and not isinstance(value, Tensor)


def _operands(name, forms, tensors, other):
    """The other operand of each tensor, and whether alpha applies to it."""
    if isinstance(other, Tensor) and "tensor" in forms:
        if other.dim() != 0:
            raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {other.dim()} "
                               f"dimensions and {other.numel()} elements.")
        return [other] * len(tensors), True
    if isinstance(other, (list, tuple)):
        if "list" in forms and other and all(isinstance(o, Tensor) for o in other):
            _same_length(tensors, other)
            return list(other), True
        if "scalars" in forms and all(_is_number(o) for o in other):
            if len(other) != len(tensors):
                raise RuntimeError("Tensor list must have same number of elements as scalar "
                                   "list.")
            return list(other), False
    elif _is_number(other) and "scalar" in forms:
        return [other] * len(tensors), False
    elif isinstance(other, Tensor) and other.dim() == 0 and "scalar" in forms:
        return [other.item()] * len(tensors), False      # read as a number, as PyTorch
    raise _invalid(name, tensors, other)


def _tensor_operand(t, other):
    """maximum/minimum take tensors: a number becomes a 0-d tensor of the result dtype."""
    if isinstance(other, Tensor):
        return other
    return mt.tensor(other, dtype=mt.result_type(t, other))


def _binary_op(op):
    """The out-of-place and in-place function of each element for ``op``."""
    if op in ("maximum", "minimum"):     # no Tensor.maximum_: computed, then written back
        fn = getattr(mt, op)
        return (lambda t, o: fn(t, _tensor_operand(t, o)),
                lambda t, o: t.copy_(fn(t, _tensor_operand(t, o))))
    return getattr(mt, op), getattr(Tensor, op + "_")


def _make_binary(op, forms, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"

    def foreach(self, other, *, alpha=1):
        tensors = _tensors(name, self, other)
        others, takes_alpha = _operands(name, forms, tensors, other)
        if alpha != 1 and not (takes_alpha and "alpha" in forms):
            raise _invalid(name, tensors, other, alpha=alpha)
        out_of_place, in_place = _binary_op(op)
        extra = {"alpha": alpha} if alpha != 1 else {}
        if inplace:
            for t, o in zip(tensors, others):
                in_place(t, o, **extra)
            return self
        return tuple(out_of_place(t, o, **extra) for t, o in zip(tensors, others))

    if op == "pow" and not inplace:
        def foreach_pow(self, exponent):
            # PyTorch's extra overload: a number raised to each tensor of a list.
            if _is_number(self):
                exponents = _tensors(name, exponent, self)
                return tuple(mt.pow(self, e) for e in exponents)
            return foreach(self, exponent)
        return _named(foreach_pow, name)
    return _named(foreach, name)


def _make_unary(op, inplace):
    name = f"_foreach_{op}{'_' if inplace else ''}"
    method = getattr(Tensor, op + ("_" if inplace else ""))

    def foreach(self):
        tensors = _tensors(name, self)
        if inplace:
            for t in tensors:
                method(t)
            return self
        return tuple(method(t) for t in tensors)
    return _named(foreach, name)


def _make_pointwise3(op, inplace):
    """addcmul/addcdiv: self + value * t1 (*|/) t2, value a number, a list of numbers or a
    1-d tensor of one number per tensor."""
    name = f"_foreach_{op}{'_' if inplace else ''}"

    def foreach(self, tensor1, tensor2, value=1, *, scalars=None):
        tensors = _tensors(name, self, tensor1, tensor2)
        first, second = _tensors(name, tensor1), _tensors(name, tensor2)
        _same_length(tensors, first)
        _same_length(tensors, second)
        values = _values(tensors, value if scalars is None else scalars, name)
        fn = getattr(Tensor, op + ("_" if inplace else ""))
        results = [fn(t, a, b, value=v) for t, a, b, v in zip(tensors, first, second, values)]
        return self if inplace else tuple(results)
    return _named(foreach, name)


def _values(tensors, value, name):
    if isinstance(value, Tensor):
        if value.dim() != 1 or value.numel() != len(tensors):
            raise RuntimeError(f"Expected length of scalars to match input of length "
                               f"{len(tensors)} but got {value.numel()} instead.")
        return value.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != len(tensors):
            raise RuntimeError("Tensor list must have same number of elements as scalar "
                               "list.")
        return list(value)
    if _is_number(value):
        return [value] * len(tensors)
    raise _invalid(name, tensors, value)


def _make_lerp(inplace):
    name = f"_foreach_lerp{'_' if inplace else ''}"

    def foreach(self, tensors1, weight=None, *, weights=None):
        tensors = _tensors(name, self, tensors1, weight)
        ends = _tensors(name, tensors1)
        _same_length(tensors, ends)
        weight = weights if weights is not None else weight
        if isinstance(weight, (list, tuple)) and weight and \
                all(isinstance(w, Tensor) for w in weight):
            _same_length(tensors, weight)
            steps = list(weight)
        else:
            steps = _values(tensors, weight, name)
        fn = Tensor.lerp_ if inplace else Tensor.lerp
        results = [fn(t, e, w) for t, e, w in zip(tensors, ends, steps)]
        return self if inplace else tuple(results)
    return _named(foreach, name)


def _foreach_norm(self, ord=2, dtype=None):
    """Each tensor's vector norm (``linalg.vector_norm``), 0-d tensors."""
    tensors = _tensors("_foreach_norm", self, ord)
    return tuple(mt.linalg.vector_norm(t, ord, dtype=dtype) for t in tensors)


def _foreach_powsum(self, ord=2, dtype=None):
    """Each tensor's ``sum(|x| ** ord)`` (so ``0 ** 0`` counts 1), 0-d tensors."""
    tensors = _tensors("_foreach_powsum", self, ord)
    return tuple((t if dtype is None else t.to(dtype)).abs().pow(ord).sum() for t in tensors)


def _foreach_max(self):
    """Each tensor's largest element, 0-d tensors."""
    tensors = _tensors("_foreach_max", self)
    if any(t.numel() == 0 for t in tensors):
        raise RuntimeError("_foreach_max cannot compute the maximum of an empty tensor; max "
                           "over zero elements is undefined.")
    return tuple(t.max() for t in tensors)


def _foreach_mm(self, mat2):
    tensors, others = _tensors("_foreach_mm", self, mat2), _tensors("_foreach_mm", mat2)
    if len(tensors) != len(others):
        raise RuntimeError("_foreach_mm: self and mat2 must have the same number of tensors")
    return tuple(mt.mm(a, b) for a, b in zip(tensors, others))


def _foreach_copy_(self, src, non_blocking=False):
    tensors = _tensors("_foreach_copy_", self, src)
    sources = _tensors("_foreach_copy_", src)
    _same_length(tensors, sources)
    for t, s in zip(tensors, sources):
        t.copy_(s, non_blocking=non_blocking)
    return self


def _foreach_zero_(self):
    for t in _tensors("_foreach_zero_", self):
        t.zero_()
    return self


def _foreach_clone(self, *, memory_format=None):
    tensors = _tensors("_foreach_clone", self)
    if memory_format is None:
        return tuple(t.clone() for t in tensors)
    return tuple(t.clone(memory_format=memory_format) for t in tensors)


def _named(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return fn


_GENERATED = {}
for _op in _UNARY:
    for _inplace in (False, True):
        _fn = _make_unary(_op, _inplace)
        _GENERATED[_fn.__name__] = _fn
for _op, _forms in _BINARY.items():
    for _inplace in (False, True):
        _fn = _make_binary(_op, _forms, _inplace)
        _GENERATED[_fn.__name__] = _fn
for _op in ("addcmul", "addcdiv"):
    for _inplace in (False, True):
        _fn = _make_pointwise3(_op, _inplace)
        _GENERATED[_fn.__name__] = _fn
for _inplace in (False, True):
    _fn = _make_lerp(_inplace)
    _GENERATED[_fn.__name__] = _fn
globals().update(_GENERATED)

__all__ = sorted(_GENERATED) + ["_foreach_norm", "_foreach_powsum", "_foreach_max",
                                "_foreach_mm", "_foreach_copy_", "_foreach_zero_",
                                "_foreach_clone"]
