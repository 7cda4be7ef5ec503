"""Copies: ``copy_`` between any two layouts, ``clone``, ``contiguous`` and dtype/device moves
(``to``, ``type_as``), with the questions about a tensor's dtype, device and size that
PyTorch answers next to them (``is_signed``, ``is_complex``, ``get_device`` ...).

``copy_`` is the one strided copy of the library; its kernel (``_C.kernels.copy_``)
coalesces dimensions and tiles when the source and destination orders differ (the call
itself is ``ops.loops.strided_copy``, which the factories share).
"""
from microtensor._C import meta
from microtensor._C.meta import contiguous_format, preserve_format
from microtensor._C.tensor import (TensorBase, complex128, device, dtype,
                                   empty_strided_unchecked, float64, int64, is_grad_enabled)
from microtensor.ops.loops import check_writable, strided_copy
from microtensor.ops.registry import REGISTRY, Sample, op
from microtensor.vmap.helpers import (aligned, call, empty_per_sample, inplace_error, same_level,
                                      to_front, unwrap, wrap)


def check_broadcastable_to(src, dst):
    """``copy_``'s shape check, with PyTorch's message: ``src`` must expand to ``dst``."""
    try:
        meta.expand_strides(src._sizes, src._strides, dst._sizes)
    except RuntimeError:
        raise RuntimeError(f"The size of tensor a ({dst._sizes[-1] if dst._sizes else 1}) "
                           f"must match the size of tensor b "
                           f"({src._sizes[-1] if src._sizes else 1}) at non-singleton dimension "
                           f"{max(dst.dim() - 1, 0)}") from None


def _copy_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(3, 4), make(4)),
            Sample(make(3, 4), make(4, 3).t()), Sample(make(3, 4), make(3, 4, dtype=int64)),
            Sample(make(2, 3, dtype=int64), make(2, 3))]


@op(inputs=("self", "src"), kind="inplace", samples=_copy_samples)
def copy_(self, src, non_blocking=False):
    if not isinstance(src, TensorBase):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src is self:
        return self
    check_broadcastable_to(src, self)
    check_writable(self, (src,))
    strided_copy(self, src)
    return self


@copy_.def_derivative("self")
def copy_(grad):
    return grad.new_zeros(grad.shape)


@copy_.def_derivative("src")
def copy_(grad, src_shape):
    return grad.sum_to_size(src_shape)


@copy_.def_batch_rule
def copy_(op, level, args, kwargs):
    self, src = args[0], (args[1] if len(args) > 1 else kwargs["src"])
    if not same_level(self, level):
        raise inplace_error("copy_")
    if isinstance(src, TensorBase):
        check_broadcastable_to(src, self)
    n = self.dim()
    target = to_front(self._value, self._bdim)
    if same_level(src, level):
        src = aligned(src._value, src._bdim, src.dim(), n)
    call(op, (target, src), None)
    return self


@op(samples=lambda make: [
    Sample(make(3, 4)), Sample(make(4, 3).t()), Sample(make(()), memory_format=contiguous_format),
    Sample(make(4, 3).t(), memory_format=contiguous_format), Sample(make(2, 3, dtype=int64))])
def clone(self, *, memory_format=preserve_format):
    if memory_format is preserve_format:
        strides = meta.preserve_format_strides(self._sizes, self._strides)
    else:
        strides = meta.strides_for_format(self._sizes, memory_format)
    out = empty_strided_unchecked(self._sizes, tuple(strides), self._dtype, self.device)
    strided_copy(out, self)
    return out


@clone.def_derivative("self")
def clone(grad):
    return grad


@op(kind="composite")
def contiguous(self, memory_format=contiguous_format):
    """``self`` when already contiguous in ``memory_format``, else a copy that is."""
    if self.is_contiguous(memory_format=memory_format):
        return self
    if memory_format is preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    return self.clone(memory_format=memory_format)


@op(samples=lambda make: [
    Sample(make(3, 4), dtype=float64), Sample(make(4, 3).t(), memory_format=contiguous_format),
    Sample(make(2, 3, dtype=int64), dtype=float64), Sample(make(2, 3), dtype=int64)])
def _to_copy(self, dtype=None, device=None, memory_format=preserve_format):
    target_dtype = dtype or self._dtype
    target_device = device or self.device
    strides = meta.preserve_format_strides(self._sizes, self._strides) \
        if memory_format is preserve_format else meta.strides_for_format(self._sizes,
                                                                           memory_format)
    out = empty_strided_unchecked(self._sizes, tuple(strides), target_dtype, target_device)
    strided_copy(out, self)
    return out


@_to_copy.def_derivative("self")
def _to_copy(grad, self_dtype, self_device):
    if grad._dtype.is_complex and not self_dtype.is_complex:
        grad = grad.real      # a real input's gradient: the real part (no discarding cast)
    return grad.to(dtype=self_dtype, device=self_device)


def _copy_with_format(op, level, self, memory_format, options):
    """``clone``/``_to_copy`` of a batched tensor in ``memory_format``, per sample.

    ``preserve_format`` keeps the physical layout, batch dim where it was.  Any other
    format is about each *sample*: ``contiguous_format`` copies with the batch dim moved
    outermost, and the channels-last formats lay each sample out in that format behind an
    outermost batch dim (``empty_per_sample``).

    Why outermost: a per-sample function asking for a contiguous copy then views or
    strides into it by the per-sample contiguous strides (``CopySlices`` hands a
    contiguous clone of a gradient region to a derivative that may ``view`` it).  With
    the batch dim first, sample ``b`` is the block ``[b * numel, (b + 1) * numel)`` with
    exactly the strides of a contiguous sample, so ``is_contiguous()`` is true per sample
    and every view a sample may take is valid.  Left in place (say at dim 1), each
    sample's elements would interleave with the others' and the per-sample strides would
    not be contiguous.
    """
    if memory_format is preserve_format:
        # the physical layout is kept, batch dim where it was
        options["memory_format"] = preserve_format
        return wrap(call(op, (self._value,), options), self._bdim, level)
    value = to_front(self._value, self._bdim)
    if memory_format is contiguous_format:
        options["memory_format"] = contiguous_format
        return wrap(call(op, (value,), options), 0, level)
    out = empty_per_sample(value, self._sizes, memory_format, options.get("dtype"),
                           options.get("device"))
    return wrap(out.copy_(value), 0, level)


@clone.def_batch_rule
def clone(op, level, args, kwargs):
    fmt = kwargs.get("memory_format", preserve_format) if kwargs else preserve_format
    return _copy_with_format(op, level, args[0], fmt, {})


@_to_copy.def_batch_rule
def _to_copy(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    fmt = bound.pop("memory_format", preserve_format)
    return _copy_with_format(op, level, self, fmt, bound)


def _parse_to(args, kwargs):
    target_dtype = kwargs.pop("dtype", None)
    target_device = kwargs.pop("device", None)
    for a in args:
        if isinstance(a, dtype):
            target_dtype = a
        elif isinstance(a, (str, device)):
            target_device = device(a)
        elif isinstance(a, TensorBase):
            target_dtype, target_device = a._dtype, a.device
        else:
            raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
    if isinstance(target_device, str):
        target_device = device(target_device)
    return target_dtype, target_device


@op(kind="composite", function=False)
def to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(other)``: ``self`` when nothing changes."""
    copy = kwargs.pop("copy", False)
    memory_format = kwargs.pop("memory_format", preserve_format)
    kwargs.pop("non_blocking", None)
    target_dtype, target_device = _parse_to(args, kwargs)
    same_dtype = target_dtype is None or target_dtype is self._dtype
    same_device = target_device is None or target_device == self.device \
        or (target_device.type == self.device.type and target_device.index is None)
    keeps_layout = memory_format is preserve_format or \
        meta.suggest_memory_format(self._sizes, self._strides) is memory_format
    if same_dtype and same_device and keeps_layout and not copy:
        return self
    return self._to_copy(target_dtype, target_device if not same_device else None,
                         memory_format)


# --------------------------------------------------------------------------- type_as, predicates

def _require_tensor(function, argument, position, value):
    if not isinstance(value, TensorBase):
        raise TypeError(f"{function}(): argument '{argument}' (position {position}) must be "
                        f"Tensor, not {type(value).__name__}")


@op(kind="composite", function=False)
def type_as(self, other):
    """``self`` in ``other``'s dtype and on its device (``self`` when both match)."""
    _require_tensor("type_as", "other", 1, other)
    return to(self, dtype=other._dtype, device=other.device)


@op(kind="composite")
def is_signed(self):
    """Whether the dtype holds negative values (bool and uint8 do not)."""
    _require_tensor("is_signed", "input", 1, self)
    return self._dtype.is_signed


@op(kind="composite")
def is_complex(self):
    """Whether the dtype is complex64 or complex128."""
    _require_tensor("is_complex", "input", 1, self)
    return self._dtype.is_complex


@op(kind="composite")
def is_nonzero(self):
    """``bool(self)`` of a one-element tensor; PyTorch's errors for any other size."""
    _require_tensor("is_nonzero", "input", 1, self)
    if self._numel == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if self._numel > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(self.item())


@op(kind="composite")
def is_same_size(self, other):
    """Whether ``self`` and ``other`` have the same shape."""
    _require_tensor("is_same_size", "input", 1, self)
    _require_tensor("is_same_size", "other", 2, other)
    return self._sizes == other._sizes


@op(kind="composite")
def get_device(self):
    """The device index of a GPU tensor; -1 for a CPU tensor."""
    _require_tensor("get_device", "input", 1, self)
    return -1 if self.device.type == "cpu" else (self.device.index or 0)


# --------------------------------------------------------------------------- zero-derivative link

def _link_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(2, 3), make(4)),
            Sample(make(3, dtype=complex128), make(2, 3))]


@op(inputs=("self", "input"), method=False, function=False, samples=_link_samples)
def _with_zero_derivative(self, input):
    """A copy of ``self``, recorded as a function of ``input`` too with a zero derivative.

    PyTorch's gradients of piecewise-linear ops (``threshold_backward``,
    ``max_pool2d_with_indices_backward``, ``nll_loss_backward`` ...) are ops that take the
    forward input, with a zero derivative wrt it: built with ``create_graph``, such a
    gradient has a graph whenever the input requires grad, and differentiating it again
    gives zeros for the input, not an error.  Their formulas here end with ``linked``."""
    return clone.kernel(self)


@_with_zero_derivative.def_derivative("self")
def _with_zero_derivative(grad):
    return grad


@_with_zero_derivative.def_derivative("input")
def _with_zero_derivative(grad, input):
    return REGISTRY["zeros_like"](input)


@_with_zero_derivative.def_batch_rule
def _with_zero_derivative(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    value, bdim = unwrap(bound["self"], level)
    return wrap(call(op, (value, unwrap(bound["input"], level)[0]), {}), bdim, level)


def linked(grad_input, *inputs):
    """A gradient formula's result ``grad_input``, linked by ``_with_zero_derivative`` to
    each of the op's ``inputs`` (None: absent) that requires grad, while a graph of the
    backward pass is being built (else as it is: the plain backward pays one test)."""
    if is_grad_enabled():
        for input in inputs:
            if input is not None and input.requires_grad:
                grad_input = _with_zero_derivative(grad_input, input)
    return grad_input
