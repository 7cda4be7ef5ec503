"""Factories: tensors made from sizes, data or another tensor, and random numbers.

Plain factories (``zeros``, ``tensor``, ``arange`` ...) have no tensor input, so they are
ordinary functions.  The ``new_*`` methods and ``*_like`` functions take a tensor whose
dtype, device (and, under vmap, batch) the result inherits, so they are declared as ops;
so are the random factories, which vmap must see to apply its ``randomness`` setting.
"""
import functools
import math
import numbers
import os
import warnings

import numpy as np

from microtensor import _dtype_table
from microtensor._C import meta
from microtensor._C.meta import contiguous_format, preserve_format
from microtensor._C.tensor import (TensorBase, bool_, cpu, device, dtype, dtype_from_numpy,
                                   empty_strided_unchecked, float32, float64, from_array,
                                   get_default_dtype, int64, uint8)
from microtensor._dtype import (check_scalar_fits, default_complex_dtype, promote_types,
                                scalar_dtype, wrap_scalar)
from microtensor.backends import cuda
from microtensor.ops.arguments import int_arg, int_tuple, size_arg
from microtensor.ops.dispatch import run_kernel, takes_out
from microtensor.ops.loops import strided_copy
from microtensor.ops import special_math
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import batch_size, call, empty_per_sample, to_front, wrap


# --------------------------------------------------------------------------- arguments

def parse_size(size):
    """``zeros(2, 3)``, ``zeros((2, 3))`` and ``zeros([2, 3])`` all mean sizes (2, 3)."""
    sizes = size_arg(size, required=False)
    meta.check_size_nonnegative(sizes)
    return sizes


def pick_dtype(requested, default):
    """``requested`` when given (it must be a microtensor dtype), else ``default``."""
    if requested is None:
        return default
    if not isinstance(requested, dtype):
        raise TypeError(f"argument 'dtype' must be microtensor.dtype, not "
                        f"{type(requested).__name__}")
    return requested


def to_device(dev):
    if dev is None or isinstance(dev, device):
        return dev
    return device(dev)


_default_device = None   # set by set_default_device; None: factories make CPU tensors


def set_default_device(device):
    """Make factories (``zeros``, ``tensor``, ``randn`` ...) called without ``device=``
    create their tensors on ``device`` ("cpu", or "cuda" with the CuPy backend); None
    goes back to the CPU.  Tensors made from another (``*_like``, ``new_*``) keep its
    device."""
    global _default_device
    _default_device = to_device(device)


def get_default_device():
    """The device factories use when called without ``device=``; "cuda" comes with the
    current GPU's index, as the tensors made there report it."""
    if _default_device is not None and _default_device.type == "cuda" \
            and _default_device.index is None:
        return cuda.resolve_device(device("cuda"))
    return _default_device or cpu


def on_device(dev):
    """A factory's ``device=`` argument, or the default device when it is None (which
    may itself be None: no default set)."""
    return to_device(dev) if dev is not None else _default_device


def finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def empty_contiguous(sizes, dt, dev):
    return empty_strided_unchecked(sizes, tuple(meta.contiguous_strides(sizes)), dt, dev or cpu)



def _quiet_conversion(factory):
    """Numbers and arrays become tensors as PyTorch converts them: 1e300 in float32 is
    inf, without NumPy's overflow warning (the dispatcher keeps ops as silent)."""
    @functools.wraps(factory)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):   # a fresh one per call: NumPy 1's does not nest
            return factory(*args, **kwargs)
    return quiet

def tensor_of(values):
    """A tensor taking over a fresh C-ordered array (NumPy gives empty arrays stride 0;
    PyTorch gives them contiguous strides)."""
    if values.size == 0:
        return empty_contiguous(values.shape, dtype_from_numpy(values.dtype), cpu)
    return from_array(values)


def fill(t, value):
    """Set every element of the fresh tensor ``t`` to ``value`` (a meta tensor has none)."""
    if t._numel and not t.is_meta:
        t._array().fill(value)


def fill_new(sizes, dt, dev, value, requires_grad=False):
    check_scalar_fits(value, dt)
    t = empty_contiguous(sizes, dt, dev)
    fill(t, wrap_scalar(value, dt))
    return finish(t, requires_grad)


def _strided_only(name, layout):
    """PyTorch's ``layout=`` argument (given): ``strided``, the default, is what every
    factory here makes; a sparse tensor is made with ``sparse_coo_tensor`` or
    ``Tensor.to_sparse``."""
    from microtensor._tensor_extras import layout as layout_type, strided
    if layout is strided:
        return
    if not isinstance(layout, layout_type):
        raise TypeError(f"{name}(): argument 'layout' must be microtensor.layout, not "
                        f"{type(layout).__name__}")
    # (PyTorch's filled tensors and windows check the layout first: a RuntimeError)
    error = RuntimeError if name in ("ones", "full") or name.endswith("_window") else \
        NotImplementedError
    raise error(f"{name}(): layout={layout} is not supported here: a sparse tensor is made "
                f"with sparse_coo_tensor() or Tensor.to_sparse()")


# --------------------------------------------------------------------------- from sizes

@takes_out(factory=True)
def empty(*size, dtype=None, layout=None, device=None, requires_grad=False,
          memory_format=contiguous_format, pin_memory=False):
    if layout is not None:
        _strided_only("empty", layout)
    sizes = parse_size(size)
    dt = pick_dtype(dtype, get_default_dtype())
    strides = meta.strides_for_format(sizes, memory_format) \
        if memory_format is not preserve_format else meta.contiguous_strides(sizes)
    t = empty_strided_unchecked(sizes, tuple(strides), dt, on_device(device) or cpu)
    return finish(t, requires_grad)


@takes_out(factory=True)
def zeros(*size, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("zeros", layout)
    return fill_new(parse_size(size), pick_dtype(dtype, get_default_dtype()), on_device(device),
                    0, requires_grad)


@takes_out(factory=True)
def ones(*size, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("ones", layout)
    return fill_new(parse_size(size), pick_dtype(dtype, get_default_dtype()), on_device(device),
                    1, requires_grad)


@takes_out(factory=True)
def full(size, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("full", layout)
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"full(): argument 'size' must be tuple of ints, not "
                        f"{type(size).__name__}")
    if isinstance(fill_value, TensorBase):
        fill_value = fill_value.item()
    dt = pick_dtype(dtype, scalar_dtype(fill_value))
    return fill_new(parse_size((size,)), dt, on_device(device), fill_value, requires_grad)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("empty_strided", layout)
    sizes = parse_size((size,))
    strides = int_tuple(stride, "stride")
    if len(sizes) != len(strides):
        raise RuntimeError(f"dimensionality of sizes ({len(sizes)}) must match dimensionality "
                           f"of strides ({len(strides)})")
    if any(s < 0 for s in strides):
        raise RuntimeError(f"empty_strided: strides must be non-negative, got {list(strides)}")
    storage_elems = meta.storage_size_for(sizes, strides)
    meta.check_size_nonnegative((storage_elems,))
    t = empty_strided_unchecked(sizes, strides, pick_dtype(dtype, get_default_dtype()),
                                on_device(device) or cpu)
    return finish(t, requires_grad)


@takes_out(factory=True)
def eye(n, m=None, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("eye", layout)
    m = n if m is None else m
    for name, value in (("n", n), ("m", m)):
        if isinstance(value, numbers.Integral) and int_arg(value, name) < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {value}")
    sizes = parse_size((n, m))
    t = fill_new(sizes, pick_dtype(dtype, get_default_dtype()), on_device(device), 0)
    if t._numel and not t.is_meta:
        np.fill_diagonal(t._array(), 1)
    return finish(t, requires_grad)


def _range_bounds(start, end, step):
    """``arange``'s and ``range``'s bounds as numbers, with PyTorch's checks."""
    start, end, step = (x.item() if isinstance(x, TensorBase) else x for x in (start, end, step))
    for x in (start, end, step):    # PyTorch's Scalar: an int64 or a uint64
        if isinstance(x, int) and not -2 ** 63 <= x < 2 ** 64:
            raise OverflowError("can't convert negative int to unsigned" if x < 0 else
                                "int too big to convert")
        if isinstance(x, int) and x >= 2 ** 63:
            raise RuntimeError("value cannot be converted to type int64_t without overflow")
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not all(math.isfinite(x) for x in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (end - start) / step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    return start, end, step


@_quiet_conversion
@takes_out(factory=True)
def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("arange", layout)
    if end is None:
        start, end = 0, start
    start, end, step = _range_bounds(start, end, step)
    if dtype is bool_ or dtype is not None and dtype.is_complex:
        raise NotImplementedError("\"arange_cpu\" not implemented for "
                                  f"'{_scalar_name(dtype)}'")
    if dtype is None:
        is_float = any(isinstance(x, float) for x in (start, end, step))
        dtype = get_default_dtype() if is_float else int64
    length = max(0, math.ceil((end - start) / step))
    if length >= 2 ** 63:
        raise RuntimeError("invalid size, possible overflow?")
    result = empty_contiguous((length,), dtype, cpu)  # refuses a size NumPy cannot hold
    result._array()[...] = start + step * np.arange(
        length, dtype=np.float64 if dtype.is_floating_point else np.int64)
    return finish(result, requires_grad).to(on_device(device) or cpu)


@_quiet_conversion
@takes_out(factory=True)
def linspace(start, end, steps, *, dtype=None, layout=None, device=None, requires_grad=False):
    """PyTorch's formula: the first half counts up from ``start``, the second half down
    from ``end`` (so both ends are exact), in the result's float type."""
    if layout is not None:
        _strided_only("linspace", layout)
    if int_arg(steps, "steps") < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = pick_dtype(dtype, get_default_dtype())
    result = empty_contiguous(parse_size((steps,)), dt, cpu)   # refuses what cannot be held
    if not dt.is_floating_point and steps:
        for end_point in (start, end) if steps > 1 else (start,):
            check_scalar_fits(end_point, dt)
    result._array()[...] = _linspace_values(start, end, steps, dt)
    return finish(result, requires_grad).to(on_device(device) or cpu)


def _linspace_values(start, end, steps, dt):
    """PyTorch's linspace in the result's float type (float64 for other dtypes): the first
    half of the points is ``start + step * i``, the second ``end - step * (steps - 1 - i)``
    (so that both ends are exact), each point computed as PyTorch's kernel computes it
    (``_point``)."""
    if dt.is_floating_point:
        compute = dt.np
        first, last = compute.type(start), compute.type(end)
    else:   # the ends in the result's type first, then the points in float64
        compute = np.dtype(np.float64)
        first, last = (compute.type(np.int64(_truncated(x)).astype(dt.np)) for x in (start, end))
    step = (last - first) / compute.type(max(steps - 1, 1))
    index = np.arange(steps, dtype=np.float64)
    return np.where((index < steps // 2) | (steps == 1), _point(step, index, first),
                    _point(-step, (steps - 1) - index, last))


def _truncated(x):
    return math.trunc(x) if isinstance(x, float) else x


def _point(step, count, base):
    """``base + step * count`` in the type of ``base``: float32 and float64 rounded once,
    as PyTorch's fused multiply-add (rounding the product first would leave an error of
    the ends' size where the points pass through zero); float16 and bfloat16 rounding the
    product and then the sum, bfloat16 with the count rounded to it first."""
    kind = np.result_type(base)   # (a scalar, or a column of them: histogram's edges)
    if kind.itemsize == 2:
        count = count.astype(np.float32)
        if kind != np.float16:
            count = count.astype(kind).astype(np.float32)
        product = (np.float32(step) * count).astype(kind)
        return (np.float32(base) + product.astype(np.float32)).astype(kind)
    if kind.itemsize == 4:   # exact product in float64, one rounding (but at a tie) to float32
        return (np.float64(step) * count + np.float64(base)).astype(kind)
    return _fused_multiply_add(step, count, base)


_SPLITTER = 134217729.0   # 2^27 + 1: splits a float64 into two halves of 26 bits


def _fused_multiply_add(a, b, c):
    """``a * b + c`` for float64, rounded once but in rare ties: the product's rounding
    error recovered by Dekker's splitting and the sum's by Knuth's two-sum, both added
    back."""
    product = a * b
    a_high = a * _SPLITTER - (a * _SPLITTER - a)
    b_high = b * _SPLITTER - (b * _SPLITTER - b)
    a_low, b_low = a - a_high, b - b_high
    error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
    total = product + c
    total_error = (product - (total - (total - product))) + (c - (total - product))
    fused = total + (total_error + error)
    return np.where(np.isfinite(fused), fused, product + c)   # (splitting overflows near max)


@_quiet_conversion
@takes_out(factory=True)
def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
             requires_grad=False):
    """``base ** linspace(start, end, steps)``, computed in the result's float type."""
    if layout is not None:
        _strided_only("logspace", layout)
    if int_arg(steps, "steps") < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = pick_dtype(dtype, get_default_dtype())
    result = empty_contiguous(parse_size((steps,)), dt, cpu)
    exponents = _linspace_values(start, end, steps, dt)
    with np.errstate(over="ignore", invalid="ignore"):
        result._array()[...] = np.power(exponents.dtype.type(base), exponents)
    return finish(result, requires_grad).to(on_device(device) or cpu)


# --------------------------------------------------------------------------- from data

def _infer_dtype(data):
    """The dtype ``tensor(data)`` takes: floats anywhere make it the default float type."""
    kinds = set()

    def visit(x, depth=0):
        if isinstance(x, (list, tuple)):
            _check_depth(x, depth)
            for y in x:
                visit(y, depth + 1)
        elif isinstance(x, TensorBase):
            kinds.add(x._dtype)
        elif isinstance(x, (np.ndarray, np.generic)):
            kinds.add(dtype_from_numpy(x.dtype))
        elif isinstance(x, (bool, np.bool_)):
            kinds.add(bool_)
        elif isinstance(x, (numbers.Integral, np.integer)):
            kinds.add(int64)
        elif isinstance(x, (numbers.Real, np.floating)):
            kinds.add(get_default_dtype())
        elif isinstance(x, numbers.Complex):
            kinds.add(default_complex_dtype())
        else:
            raise TypeError(f"Could not infer dtype of {type(x).__name__}")
    visit(data)
    result = None
    for k in kinds:
        result = k if result is None else promote_types(result, k)
    return result or get_default_dtype()


MAX_DIMS = 64  # a tensor's most dimensions (as NumPy's)


def _check_depth(sequence, depth):
    """Nested sequences deeper than a tensor can be are PyTorch's ValueError (before
    Python's recursion limit could be reached)."""
    if depth >= MAX_DIMS:
        raise ValueError(f"too many dimensions '{type(sequence).__name__}'")


def _to_nested(data, depth=0):
    if isinstance(data, TensorBase):
        return data._array()
    if isinstance(data, (list, tuple)):
        _check_depth(data, depth)
        return [_to_nested(x, depth + 1) for x in data]
    return data


def _leading_shape(data):
    """The shape PyTorch reads off the first element at each depth."""
    shape = []
    while isinstance(data, (list, tuple)):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    return shape


def _check_rectangular(data, shape, dim):
    if dim == len(shape):
        return
    if not isinstance(data, (list, tuple)) or len(data) != shape[dim]:
        got = len(data) if isinstance(data, (list, tuple)) else type(data).__name__
        raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} (got {got})")
    for item in data:
        _check_rectangular(item, shape, dim + 1)


@_quiet_conversion
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    if isinstance(data, TensorBase):
        result = data.detach().clone()
        if dtype is not None:
            result = result.to(dtype)
        return finish(result.to(on_device(device) or data.device), requires_grad)
    pick_dtype(dtype, None)
    if isinstance(data, np.ndarray) and dtype is None:
        dt = _infer_dtype(data)
    else:
        dt = dtype if dtype is not None else _infer_dtype(data)
    nested = _to_nested(data)
    try:
        arr = np.array(nested, dtype=dt.np)
    except ValueError:
        _check_rectangular(data, _leading_shape(data), 0)
        raise
    except OverflowError:   # a Python int outside the dtype's range
        if any(not -2**63 <= v < 2**63 for v in np.ravel(np.array(nested, dtype=object))
               if isinstance(v, int)):
            raise ValueError("Overflow when unpacking long long") from None
        raise RuntimeError(f"value cannot be converted to type {dt.name} without "
                           f"overflow") from None
    t = tensor_of(arr)
    dev = on_device(device)
    if dev is not None and dev.type != "cpu":
        t = t.to(dev)
    return finish(t, requires_grad)


@_quiet_conversion
def as_tensor(data, dtype=None, device=None):
    dev = on_device(device)
    if isinstance(data, TensorBase):
        result = data if dtype is None else data.to(dtype)
        return result if dev is None else result.to(dev)
    if isinstance(data, np.ndarray) and (dtype is None or np.dtype(dtype.np) == data.dtype) \
            and (dev is None or dev.type == "cpu"):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=dev)


def from_numpy(ndarray):
    """A tensor sharing ``ndarray``'s memory (writes show through both ways); an array a
    tensor cannot alias is refused (ValueError), never copied."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    if not ndarray.flags.writeable:
        warnings.warn("The given NumPy array is not writable: the tensor shares its memory "
                      "read-only, so writing to the tensor raises. You may want to copy the "
                      "array or make it writable before converting it to a tensor.",
                      UserWarning, stacklevel=2)
    return _alias_numpy(ndarray)


def _alias_numpy(ndarray):
    """A tensor over ``ndarray``'s memory, or PyTorch's ValueError (in its order) for the
    layouts a tensor cannot describe."""
    if any(s % ndarray.itemsize for s in ndarray.strides):   # a field of a structured array
        raise ValueError("given numpy array strides not a multiple of the element byte size. "
                         "Copy the numpy array to reallocate the memory.")
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative, and "
                         "tensors with negative strides are not currently supported. (You can "
                         "probably work around this by making a copy of your array  with "
                         "array.copy().) ")
    if not ndarray.dtype.isnative:
        raise ValueError("given numpy array has byte order different from the native byte "
                         "order. Conversion between byte orders is currently not supported.")
    return from_array(ndarray)


def from_dlpack(ext_tensor, *, device=None, copy=None):
    """A tensor sharing memory with any object that exports DLPack (a NumPy or CuPy array,
    a PyTorch tensor, ...) or with a DLPack capsule (``utils.dlpack.to_dlpack``'s), on the
    CPU or a GPU: writes show through both ways.  ``device``: the result's device (a copy
    when it is another); ``copy=True``: always a copy."""
    if isinstance(ext_tensor, TensorBase):
        shared = ext_tensor.detach()
    else:
        if type(ext_tensor).__name__ == "PyCapsule":
            from microtensor.utils.dlpack import CapsuleExporter
            ext_tensor = CapsuleExporter(ext_tensor)
        if ext_tensor.__dlpack_device__()[0] == cuda.DLPACK_CUDA:
            shared = cuda.from_dlpack(ext_tensor)
        elif hasattr(ext_tensor, "host_array"):      # a capsule
            shared = _alias_numpy(ext_tensor.host_array())
        else:
            shared = _alias_numpy(np.from_dlpack(ext_tensor))
    target = to_device(device) or shared.device
    if target != shared.device:
        if copy is False:
            raise BufferError(f"from_dlpack: copy=False, but the data is on {shared.device}, "
                              f"not on the requested device {target}")
        return shared.to(target)
    return shared.clone() if copy else shared


def scalar_tensor(value, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("scalar_tensor", layout)
    return tensor(value, dtype=pick_dtype(dtype, get_default_dtype()), device=device,
                  requires_grad=requires_grad)


# --------------------------------------------------------------------------- samples

def _like_samples(make):
    return [Sample(make(2, 3)), Sample(make(4, 3).t()), Sample(make(3), dtype=int64),
            Sample(make(2, dtype=int64), dtype=float64), Sample(make())]


def _new_samples(make):
    return [Sample(make(2), 2, 3), Sample(make(2), (3,)), Sample(make(2, dtype=int64), 2),
            Sample(make(2), (2, 2), dtype=int64)]


# --------------------------------------------------------------------------- random numbers

class Generator:
    """A source of random numbers (``mt.Generator().manual_seed(0)``)."""

    def __init__(self, device="cpu"):
        self.device = to_device(device)
        self._seed = 67280421310721
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed):
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise ValueError("Overflow when unpacking long long")
        self._seed = seed % 2 ** 64     # PyTorch keeps a uint64: a negative seed wraps
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self):
        self.manual_seed(np.random.SeedSequence().entropy % (2 ** 63))
        return self._seed

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """The generator's state (its seed and NumPy PCG64 state) as a 1-D uint8 tensor,
        for ``set_state``."""
        numpy_state = self._rng.bit_generator.state
        fields = dict(numpy_state["state"], has_uint32=numpy_state["has_uint32"],
                      uinteger=numpy_state["uinteger"], seed=self._seed)
        raw = b"".join(fields[name].to_bytes(size, "little", signed=signed)
                       for name, size, signed in _STATE_LAYOUT)
        return from_array(np.frombuffer(raw, np.uint8).copy())

    def set_state(self, new_state):
        """Restore a state from ``get_state``: the same random numbers come again."""
        if not isinstance(new_state, TensorBase):
            raise TypeError(f"expected a microtensor.ByteTensor, but got "
                            f"{type(new_state).__name__}")
        if new_state.dtype is not uint8:
            raise TypeError("RNG state must be a microtensor.ByteTensor")
        values = new_state.detach().cpu().numpy().ravel()
        if values.size != _STATE_BYTES:
            raise RuntimeError(f"Expected a generator state of size {_STATE_BYTES} but found "
                               f"the input RNG state size to be {values.size}")
        raw, fields, start = values.tobytes(), {}, 0
        for name, size, signed in _STATE_LAYOUT:
            fields[name] = int.from_bytes(raw[start:start + size], "little", signed=signed)
            start += size
        self._rng.bit_generator.state = {
            "bit_generator": "PCG64", "state": {"state": fields["state"], "inc": fields["inc"]},
            "has_uint32": fields["has_uint32"], "uinteger": fields["uinteger"]}
        self._seed = fields["seed"]
        return self


# The bytes of a generator state, in order: (field, bytes, signed)
_STATE_LAYOUT = (("state", 16, False), ("inc", 16, False), ("has_uint32", 1, False),
                 ("uinteger", 4, False), ("seed", 16, True))
_STATE_BYTES = sum(size for _, size, _ in _STATE_LAYOUT)


default_generator = Generator()


def manual_seed(seed):
    return default_generator.manual_seed(seed)


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    """The default generator's state: a 1-D uint8 tensor, for ``set_rng_state``."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restore the default generator to a state from ``get_rng_state``."""
    default_generator.set_state(new_state)


def floating_only(dt, name, complex_ok=False):
    if not (dt.is_floating_point or complex_ok and dt.is_complex):
        raise NotImplementedError(f"\"{name}\" not implemented for '{dt.name}'")
    return dt


def _complex_sample(sample, scale=1.0):
    """Draws for a complex dtype: real and imaginary parts drawn independently by
    ``sample`` and scaled (PyTorch's complex randn has parts of variance 1/2)."""
    def draw(rng, s):
        pairs = sample(rng, tuple(s) + (2,)) * scale
        return pairs[..., 0] + 1j * pairs[..., 1]
    return draw


def _random(sample, size, dtype, dev, generator, requires_grad):
    sizes = parse_size(size)
    meta.check_storage_nbytes(sizes, dtype.itemsize)
    if dev is not None and dev.type == "meta":   # no values, so no draw from the generator
        return finish(empty_contiguous(sizes, dtype, dev), requires_grad)
    rng = (generator or default_generator)._rng
    try:
        arr = np.asarray(sample(rng, sizes), dtype=dtype.np)
    except MemoryError:
        raise RuntimeError(f"not enough memory for a tensor of sizes {list(sizes)}") from None
    t = tensor_of(np.asarray(arr, order="C"))   # not ascontiguousarray: it makes 0-d 1-d
    if dev is not None and dev.type != "cpu":
        t = t.to(dev)
    return finish(t, requires_grad)


@op(inputs=(), method=False, random=True, differentiable=False, kind="factory", out=True,
    family="factory",
    samples=lambda make: [Sample(2, 3), Sample((4,)), Sample(3, dtype=float64), Sample(())])
def rand(*size, generator=None, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("rand", layout)
    dt = floating_only(pick_dtype(dtype, get_default_dtype()), "rand", complex_ok=True)
    sample = lambda rng, s: rng.random(s)   # noqa: E731
    return _random(_complex_sample(sample) if dt.is_complex else sample, size, dt,
                   on_device(device), generator, requires_grad)


@op(inputs=(), method=False, random=True, differentiable=False, kind="factory", out=True,
    family="factory",
    samples=lambda make: [Sample(2, 3), Sample((4,)), Sample(3, dtype=float64), Sample(())])
def randn(*size, generator=None, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("randn", layout)
    dt = floating_only(pick_dtype(dtype, get_default_dtype()), "randn", complex_ok=True)
    sample = lambda rng, s: rng.standard_normal(s)   # noqa: E731
    return _random(_complex_sample(sample, 0.5 ** 0.5) if dt.is_complex else sample, size, dt,
                   on_device(device), generator, requires_grad)


@op(inputs=(), method=False, random=True, differentiable=False, kind="factory", out=True,
    family="factory",
    samples=lambda make: [Sample(0, 10, (3,)), Sample(5, (2, 2)), Sample(-3, 3, (4,)),
                          Sample(0, 5, ())])
def randint(low, high=None, size=None, *, generator=None, dtype=None, layout=None, device=None,
            requires_grad=False):
    if layout is not None:
        _strided_only("randint", layout)
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    low, high = int_arg(low, "low"), int_arg(high, "high")
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    return _random(lambda rng, s: rng.integers(low, high, s), (size,), pick_dtype(dtype, int64),
                   on_device(device), generator, requires_grad)


@op(inputs=(), method=False, random=True, differentiable=False, kind="factory", out=True,
    family="factory",
    samples=lambda make: [Sample(5), Sample(0)])
def randperm(n, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("randperm", layout)
    rng = (generator or default_generator)._rng
    meta.check_storage_nbytes(parse_size((int_arg(n, "n"),)), pick_dtype(dtype, int64).itemsize)
    values = rng.permutation(n).astype(pick_dtype(dtype, int64).np)
    return finish(tensor_of(values).to(on_device(device) or cpu), requires_grad)


def _like_strides(self, memory_format):
    if memory_format is preserve_format:
        return tuple(meta.preserve_format_strides(self._sizes, self._strides))
    return tuple(meta.strides_for_format(self._sizes, memory_format))


def _fill_from_host(t, values):
    """Write NumPy ``values`` into ``t``, which may live on a GPU (or on meta: nothing to
    write)."""
    strided_copy(t, from_array(np.asarray(values, dtype=t._dtype.np, order="C")))


def _new_like(self, dtype, device, memory_format):
    return empty_strided_unchecked(self._sizes, _like_strides(self, memory_format),
                                   pick_dtype(dtype, self._dtype),
                                   to_device(device) or self.device)


@op(inputs=("self",), method=False, random=True, differentiable=False, kind="factory",
    family="factory",
    samples=_like_samples)
def rand_like(self, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=preserve_format, generator=None):
    if layout is not None:
        _strided_only("rand_like", layout)
    t = _new_like(self, dtype, device, memory_format)
    floating_only(t._dtype, "rand_like")
    if t._numel:
        _fill_from_host(t, (generator or default_generator)._rng.random(t._sizes))
    return finish(t, requires_grad)


@op(inputs=("self",), method=False, random=True, differentiable=False, kind="factory",
    family="factory",
    samples=_like_samples)
def randn_like(self, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=preserve_format, generator=None):
    if layout is not None:
        _strided_only("randn_like", layout)
    t = _new_like(self, dtype, device, memory_format)
    floating_only(t._dtype, "randn_like")
    if t._numel:
        _fill_from_host(t, (generator or default_generator)._rng.standard_normal(t._sizes))
    return finish(t, requires_grad)


# --------------------------------------------------------------------------- from a tensor

def _filled_like(self, value, dtype, device, requires_grad, memory_format):
    t = _new_like(self, dtype, device, memory_format)
    check_scalar_fits(value, t._dtype)
    if value is not None:
        fill(t, value)
    return finish(t, requires_grad)


@op(method=False, differentiable=False, kind="factory",
    family="factory",
    samples=_like_samples)
def empty_like(self, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=preserve_format):
    if layout is not None:
        _strided_only("empty_like", layout)
    return _filled_like(self, None, dtype, device, requires_grad, memory_format)


@op(method=False, differentiable=False, kind="factory",
    family="factory",
    samples=_like_samples)
def zeros_like(self, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=preserve_format):
    if layout is not None:
        _strided_only("zeros_like", layout)
    return _filled_like(self, 0, dtype, device, requires_grad, memory_format)


@op(method=False, differentiable=False, kind="factory",
    family="factory",
    samples=_like_samples)
def ones_like(self, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=preserve_format):
    if layout is not None:
        _strided_only("ones_like", layout)
    return _filled_like(self, 1, dtype, device, requires_grad, memory_format)


@op(method=False, differentiable=False, kind="factory",
    family="factory",
    samples=lambda make: [
        Sample(make(2, 3), 2.5), Sample(make(3, dtype=int64), 4),
        Sample(make(2, 3), 7, dtype=int64)])
def full_like(self, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=preserve_format):
    if layout is not None:
        _strided_only("full_like", layout)
    return _filled_like(self, fill_value, dtype, device, requires_grad, memory_format)


def like_batch_rule(op, level, args, kwargs):
    """``*_like``: the per-sample shape; ``preserve_format`` keeps the physical layout
    (batch dim where it was), any other format is laid out per sample, batch dim first."""
    bound = op.bind(args, kwargs)
    self = bound.pop("self")
    fmt = bound.get("memory_format", preserve_format)
    if fmt is preserve_format:
        return wrap(call(op, (self._value,), bound), self._bdim, level)
    value = to_front(self._value, self._bdim)
    if fmt is contiguous_format:
        return wrap(call(op, (value,), bound), 0, level)
    out = empty_per_sample(value, self._sizes, fmt, bound.get("dtype"), bound.get("device"))
    fill = {"zeros_like": 0, "ones_like": 1}.get(op.name, bound.get("fill_value"))
    if fill is not None:
        out.fill_(fill)
    if bound.get("requires_grad"):
        out.requires_grad_()
    return wrap(out, 0, level)


empty_like.def_batch_rule(like_batch_rule)
zeros_like.def_batch_rule(like_batch_rule)
ones_like.def_batch_rule(like_batch_rule)
full_like.def_batch_rule(like_batch_rule)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=_new_samples)
def new_empty(self, *size, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("new_empty", layout)
    return finish(empty_contiguous(parse_size(size), pick_dtype(dtype, self._dtype),
                                   to_device(device) or self.device), requires_grad)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=_new_samples)
def new_zeros(self, *size, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("new_zeros", layout)
    return fill_new(parse_size(size), pick_dtype(dtype, self._dtype),
                    to_device(device) or self.device, 0, requires_grad)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=_new_samples)
def new_ones(self, *size, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("new_ones", layout)
    return fill_new(parse_size(size), pick_dtype(dtype, self._dtype),
                    to_device(device) or self.device, 1, requires_grad)


def new_sized_batch_rule(op, level, args, kwargs):
    """``new_empty``/``new_zeros``/``new_ones``: the per-sample sizes behind a batch dim."""
    value = args[0]._value
    sizes = parse_size(args[1:])
    return wrap(call(op, (value, (batch_size(level),) + sizes), kwargs), 0, level)


new_empty.def_batch_rule(new_sized_batch_rule)
new_zeros.def_batch_rule(new_sized_batch_rule)
new_ones.def_batch_rule(new_sized_batch_rule)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=lambda make: [
        Sample(make(2), (2, 3), 1.5), Sample(make(2, dtype=int64), (3,), 4),
        Sample(make(2), (2,), 2, dtype=int64)])
def new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False):
    if layout is not None:
        _strided_only("new_full", layout)
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"new_full(): argument 'size' must be tuple of ints, not "
                        f"{type(size).__name__}")
    return fill_new(parse_size((size,)), pick_dtype(dtype, self._dtype),
                    to_device(device) or self.device, fill_value, requires_grad)


@new_full.def_batch_rule
def new_full(op, level, args, kwargs):
    bound = op.bind(args, kwargs)
    value = bound.pop("self")._value
    size = (batch_size(level),) + parse_size((bound.pop("size"),))
    return wrap(call(op, (value, size), bound), 0, level)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=lambda make: [
        Sample(make(2), [1.0, 2.0]), Sample(make(2, dtype=int64), [[1, 2]]),
        Sample(make(2), [3], dtype=int64)])
def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype=pick_dtype(dtype, self._dtype), device=device or self.device,
                  requires_grad=requires_grad)


@new_tensor.def_batch_rule
def new_tensor(op, level, args, kwargs):
    # the data does not depend on the sample: an unbatched tensor, as in PyTorch
    return run_kernel(op, args, kwargs)


@op(function=False, differentiable=False, kind="factory",
    family="factory",
    samples=lambda make: [
        Sample(make(2), (2, 3), (1, 2)), Sample(make(2), (2,), (3,))])
def new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None,
                      requires_grad=False):
    if layout is not None:
        _strided_only("new_empty_strided", layout)
    return empty_strided(size, stride, dtype=pick_dtype(dtype, self._dtype),
                         device=to_device(device) or self.device, requires_grad=requires_grad)


@new_empty_strided.def_batch_rule
def new_empty_strided(op, level, args, kwargs):
    """Each sample gets exactly ``stride``; the batch dim goes outermost with stride
    ``extent = storage_size_for(size, stride)``, the number of cells one sample's strides
    reach (1 + sum((size_i - 1) * stride_i), 0 for an empty sample).

    Why that stride: sample ``b`` starts at ``b * extent`` and reaches the cells
    ``[b * extent, b * extent + extent)``, so samples never share a cell (any smaller
    batch stride would make sample ``b``'s last cell sample ``b + 1``'s first), and no
    cell lies between them (a larger one would waste memory and make the physical tensor
    non-dense).  Callers such as ``CopySlices`` then address each sample's memory with the
    per-sample strides they asked for, exactly as without vmap.
    """
    bound = op.bind(args, kwargs)
    value = bound.pop("self")._value
    sizes = parse_size((bound.pop("size"),))
    strides = tuple(int(s) for s in bound.pop("stride"))
    if len(sizes) != len(strides):
        raise RuntimeError(f"new_empty_strided(sizes, strides): dimensionality of sizes "
                           f"({len(sizes)}) must match dimensionality of strides "
                           f"({len(strides)})")
    extent = meta.storage_size_for(sizes, strides)
    physical = call(op, (value, (batch_size(level),) + sizes, (extent,) + strides), bound)
    return wrap(physical, 0, level)


__all__ = ["tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "empty", "full",
           "arange", "linspace", "logspace", "eye", "empty_strided", "manual_seed", "seed", "initial_seed",
           "Generator", "default_generator", "scalar_tensor", "float64"]


# --------------------------------------------------------------------------- more factories
# ``asarray``, ``frombuffer``, ``range``, ``empty_permuted`` and ``randint_like``

def _scalar_name(dt):
    return _dtype_table.BY_NAME[dt.name].scalar_name


@_quiet_conversion
def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None):
    """``obj`` as a tensor, sharing its memory when it can: a tensor (itself, or an alias
    without autograd history when ``requires_grad=False``), a NumPy array, an object
    exporting DLPack, or a buffer (its bytes read as ``dtype``, by default the default
    dtype, as ``frombuffer``); anything else (numbers, nested sequences) is copied.
    ``copy=True`` always copies, ``copy=False`` refuses (ValueError) what would need a
    copy; ``requires_grad`` defaults to the tensor's own (else False).  A copy or a
    conversion of a tensor stays differentiable, as PyTorch's."""
    pick_dtype(dtype, None)
    dev = to_device(device)
    if isinstance(obj, TensorBase):
        return _asarray_tensor(obj, dtype, dev, copy, requires_grad)
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__dlpack__") and
                                       not isinstance(obj, np.generic)):
        shared = from_numpy(obj) if isinstance(obj, np.ndarray) else from_dlpack(obj)
        return _asarray_tensor(shared, dtype, dev, copy, bool(requires_grad))
    if isinstance(obj, (bytes, bytearray, memoryview)) or _is_buffer(obj):
        shared = frombuffer(obj, dtype=dtype or get_default_dtype())
        return _asarray_tensor(shared, None, dev, copy, bool(requires_grad))
    if copy is False:
        if isinstance(obj, np.generic):
            raise RuntimeError("can't alias NumPy scalars. Either remove copy=False or "
                               "transform it in a ndarray. ")
        raise ValueError("can't alias arbitrary sequence into a tensor.")
    return tensor(obj, dtype=dtype, device=dev, requires_grad=bool(requires_grad))


def _is_buffer(obj):
    try:
        memoryview(obj)
    except TypeError:
        return False
    return not isinstance(obj, np.generic)


def _asarray_tensor(t, dt, dev, copy, requires_grad):
    changes_dtype = dt is not None and dt is not t.dtype
    changes_device = dev is not None and dev != t.device
    if copy is False and changes_dtype:
        raise ValueError(f"can't alias tensor with dtype '{_scalar_name(t.dtype)}' into "
                         f"dtype '{_scalar_name(dt)}'.")
    if copy is False and changes_device:
        raise ValueError(f"can't alias tensor from device '{t.device}' to '{dev}'.")
    if requires_grad is None:
        requires_grad = t.requires_grad
        if requires_grad and copy is None and dt is None and dev is None:
            warnings.warn("torch.asarray: unspecified requires_grad now defaults to "
                          "obj.requires_grad instead of False. Pass requires_grad=False "
                          "explicitly to get the old behavior and silence this warning.",
                          UserWarning, stacklevel=3)
    if not (copy or changes_dtype or changes_device):
        if requires_grad == t.requires_grad:
            return t
        if not t.is_leaf:
            return t.detach()
        return t.requires_grad_(requires_grad)   # as PyTorch: the flag of ``obj`` itself
    source = t if requires_grad else t.detach()
    result = source.to(dtype=dt, device=dev, copy=bool(copy)) \
        if changes_dtype or changes_device else source.clone()
    if requires_grad and not result.requires_grad:
        result.requires_grad_(True)
    return result


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor over the bytes of an object with Python's buffer protocol (``bytes``,
    ``bytearray``, ``array.array``, ``memoryview`` ...), read as ``dtype`` from byte
    ``offset``: ``count`` elements, or all that remain (``count`` < 0).  It shares the
    buffer's memory (writes show through both ways; a read-only buffer gives a tensor that
    refuses writes, with a warning)."""
    pick_dtype(dtype, None)
    try:
        view = memoryview(buffer)
    except TypeError:
        raise ValueError("object does not implement Python buffer protocol.") from None
    if not view.c_contiguous:
        raise RuntimeError("could not retrieve buffer from object")
    length, item = view.nbytes, dtype.itemsize
    if length == 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if not 0 <= offset < length:
        raise ValueError(f"offset ({offset} bytes) must be non-negative and no greater than "
                         f"buffer length ({length} bytes) minus 1")
    if count < 0:
        if (length - offset) % item:
            raise ValueError(f"buffer length ({length - offset} bytes) after offset ({offset} "
                             f"bytes) must be a multiple of element size ({item})")
        count = (length - offset) // item
    elif offset + count * item > length:
        raise ValueError(f"requested buffer length ({count} * {item} bytes) after offset "
                         f"({offset} bytes) must not be greater than actual buffer length "
                         f"({length} bytes)")
    raw = np.frombuffer(view.cast("B"), dtype=np.uint8, count=count * item, offset=offset)
    if not raw.flags.writeable:
        warnings.warn("The given buffer is not writable: the tensor shares its memory "
                      "read-only, so writing to the tensor raises. You may want to copy the "
                      "buffer or make it writable before converting it to a tensor.",
                      UserWarning, stacklevel=2)
    return finish(_alias_numpy(raw.view(dtype.np)), requires_grad)


@takes_out(factory=True)
def range_inclusive(start, end, step=1, *, dtype=None, layout=None, device=None,
                    requires_grad=False):
    """``range``, deprecated in PyTorch and here: ``start`` to ``end`` *inclusive* by
    ``step`` (``floor((end - start) / step) + 1`` values), in the default dtype unless
    ``dtype`` is given.  Use ``arange``, which stops before ``end``."""
    if layout is not None:
        _strided_only("range_inclusive", layout)
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).", UserWarning,
                  stacklevel=2)
    dt = pick_dtype(dtype, get_default_dtype())
    if dt is bool_:
        raise NotImplementedError("\"range_cpu\" not implemented for 'Bool'")
    start, end, step = _range_bounds(start, end, step)
    length = int(math.floor((end - start) / step)) + 1
    result = empty_contiguous(parse_size((length,)), dt, cpu)
    result._array()[...] = start + step * np.arange(length, dtype=np.float64)
    return finish(result, requires_grad).to(on_device(device) or cpu)


# a module-level ``range`` would hide the builtin from the rest of this module: the function
# is ``mt.range`` under its PyTorch name
range_inclusive.__name__ = range_inclusive.__qualname__ = "range"


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False):
    """An uninitialised tensor of sizes ``size`` whose memory is laid out in the dim order
    ``physical_layout`` (outermost first): ``empty(size[p] for p in physical_layout)``
    permuted back, so ``empty_permuted((N, C, H, W), (0, 2, 3, 1))`` is channels-last."""
    if layout is not None:
        _strided_only("empty_permuted", layout)
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"empty_permuted(): argument 'size' (position 1) must be tuple of "
                        f"ints, not {type(size).__name__}")
    sizes = parse_size((size,))
    order = int_tuple(physical_layout, "physical_layout")
    if len(order) != len(sizes):
        raise RuntimeError(f"Number of dimensions in size does not match the length of the "
                           f"physical_layout; i.e. len(size) = {len(sizes)} is not equal to "
                           f"len(physical_layout) = {len(order)}")
    for i, d in enumerate(order):
        if not 0 <= d < len(sizes):
            raise RuntimeError(f"Dimension out of range (expected to be between 0 and "
                               f"{len(sizes) - 1}, but got {d} at index {i}).  NB: negative "
                               f"dims not currently supported; file an issue if you want it.")
    if len(set(order)) != len(order):
        raise RuntimeError("Duplicate dim not allowed")
    physical = meta.contiguous_strides(tuple(sizes[d] for d in order))
    strides = [0] * len(sizes)
    for d, stride in zip(order, physical):
        strides[d] = stride
    t = empty_strided_unchecked(sizes, tuple(strides), pick_dtype(dtype, get_default_dtype()),
                                on_device(device) or cpu)
    return finish(t, requires_grad)


_C_INTEGER_NAMES = {"uint8": "unsigned char", "int8": "signed char", "int16": "short",
                    "int32": "int", "int64": "long", "bool": "bool"}


def _check_random_bounds(low, high, dt):
    """PyTorch's refusals for ``random_(from, to)``: an empty range, or bounds the dtype
    cannot hold."""
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    if dt.name in _C_INTEGER_NAMES:
        lo, hi = (0, 1) if dt is bool_ else (int(np.iinfo(dt.np).min), int(np.iinfo(dt.np).max))
        if not lo <= low <= hi:
            raise RuntimeError(f"from is out of bounds for {_C_INTEGER_NAMES[dt.name]}")
        if not lo <= high - 1 <= hi:
            raise RuntimeError(f"to - 1 is out of bounds for {_C_INTEGER_NAMES[dt.name]}")


def _integer_bound(value, name):
    if isinstance(value, TensorBase):
        value = value.item()
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"randint_like(): argument '{name}' must be int, not "
                        f"{type(value).__name__}")
    return int(value)


@op(inputs=("self",), method=False, random=True, differentiable=False, kind="factory",
    family="factory",
    samples=lambda make: [Sample(make(2, 3), 5), Sample(make(4, 3).t(), -2, 3),
                          Sample(make(3, dtype=int64), 7), Sample(make(), 1, 4)])
def randint_like(self, low=0, high=None, *, generator=None, dtype=None, layout=None, device=None,
                 requires_grad=False, memory_format=preserve_format):
    """Integers drawn uniformly from ``[low, high)`` (``randint_like(x, high)``: from 0)
    in a tensor shaped like ``self``, of its dtype unless ``dtype`` is given."""
    if layout is not None:
        _strided_only("randint_like", layout)
    if high is None:
        low, high = 0, low
    low, high = _integer_bound(low, "low"), _integer_bound(high, "high")
    t = _new_like(self, dtype, device, memory_format)
    _check_random_bounds(low, high, t._dtype)
    if t._numel:
        _fill_from_host(t, (generator or default_generator)._rng.integers(low, high, t._sizes))
    return finish(t, requires_grad)


def from_file(filename, shared=None, size=0, *, dtype=None, layout=None, device=None,
              pin_memory=False, requires_grad=False):
    """A 1-D tensor of ``size`` elements of ``dtype`` over the file's first bytes, mapped
    into memory: ``shared=True`` maps the file itself (writes reach it; a missing or
    shorter file is created or extended), otherwise a private copy-on-write mapping of an
    existing file (writes stay in the tensor)."""
    if layout is not None:
        _strided_only("from_file", layout)
    dt = pick_dtype(dtype, get_default_dtype())
    size = int_arg(size, "size")
    nbytes = size * dt.itemsize
    if nbytes >= 2 ** 63:    # refused before the file is touched (PyTorch's size wraps)
        raise RuntimeError(f"Storage size calculation overflowed with sizes=[{size}]")
    if size < 0:
        raise RuntimeError(f"unable to mmap {nbytes} bytes from file <{filename}>: Cannot "
                           f"allocate memory (12)")
    if shared:
        with open(filename, "ab") as f:      # created if missing; extended if shorter
            if f.tell() < nbytes:
                f.truncate(nbytes)
    elif not os.path.exists(filename):
        raise RuntimeError(f"unable to open file <{filename}> in read-only mode: No such file "
                           f"or directory (2)")
    elif os.path.getsize(filename) < nbytes:
        raise RuntimeError(f"file <{filename}> size <{os.path.getsize(filename)}> is smaller "
                           f"than the required mapping size <{nbytes}>")
    if size == 0:
        t = empty_contiguous((0,), dt, cpu)
    else:
        t = _alias_numpy(np.memmap(filename, dtype=dt.np, mode="r+" if shared else "c",
                                   shape=(size,)))
    return finish(t.to(on_device(device) or cpu), requires_grad)


__all__ += ["asarray", "frombuffer", "range_inclusive", "empty_permuted", "randint_like",
            "from_file"]
# --------------------------------------------------------------------------- windows
# PyTorch's signal windows: computed in the result's float type step by step as PyTorch
# does (so float32 windows round as its do); ``periodic`` computes one more point and
# drops it (the window of a periodic signal, for spectral analysis).

def _window(name, window_length, periodic, dtype, device, requires_grad, values):
    """The window ``values(n, compute)`` of ``n`` points (``n`` >= 2, NumPy in the
    ``compute`` type), after PyTorch's checks; length 0 is empty and length 1 is [1]."""
    if isinstance(window_length, bool) or not isinstance(window_length, numbers.Integral):
        raise TypeError(f"{name}(): argument 'window_length' (position 1) must be int, not "
                        f"{type(window_length).__name__}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={window_length}")
    dt = pick_dtype(dtype, get_default_dtype())
    if not dt.is_floating_point:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dt}")
    result = empty_contiguous((window_length,), dt, cpu)
    if window_length == 1:
        result._array()[...] = 1
    elif window_length:
        compute = dt.np if dt in (float32, float64) else np.dtype(np.float32)
        n = window_length + 1 if periodic else window_length
        result._array()[...] = values(n, compute.type)[:window_length]
    return finish(result, requires_grad).to(on_device(device) or cpu)


def _cosine_window(n, compute, alpha, beta):
    """alpha - beta cos(2 pi k / (n - 1))."""
    angles = np.arange(n, dtype=compute) * compute(2 * math.pi / (n - 1))
    return np.cos(angles) * compute(-beta) + compute(alpha)


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                requires_grad=False):
    """sin(pi k / (N - 1))^2 = 1/2 - cos(2 pi k / (N - 1)) / 2."""
    if layout is not None:
        _strided_only("hann_window", layout)
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, compute: _cosine_window(n, compute, 0.5, 0.5))


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, requires_grad=False):
    """alpha - beta cos(2 pi k / (N - 1))."""
    if layout is not None:
        _strided_only("hamming_window", layout)
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda n, compute: _cosine_window(n, compute, alpha, beta))


def _blackman(n, compute):
    angles = np.arange(n, dtype=compute) * compute(math.pi / (n - 1))
    return (np.cos(angles * compute(4)) * compute(0.08) -
            np.cos(angles * compute(2)) * compute(0.5) + compute(0.42))


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    requires_grad=False):
    """0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))."""
    if layout is not None:
        _strided_only("blackman_window", layout)
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   _blackman)


def _bartlett(n, compute):
    ramp = np.arange(n, dtype=compute) * compute(2.0 / (n - 1))
    half = (n - 1) // 2 + 1
    ramp[half:] = compute(2) - ramp[half:]
    return ramp


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    requires_grad=False):
    """The triangle 1 - |2k / (N - 1) - 1|."""
    if layout is not None:
        _strided_only("bartlett_window", layout)
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   _bartlett)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None,
                  device=None, requires_grad=False):
    """I0(beta sqrt(1 - ((k - a) / a)^2)) / I0(beta), a = (N - 1) / 2: the argument in the
    result's type (as PyTorch's), I0 in float64."""
    if layout is not None:
        _strided_only("kaiser_window", layout)
    def values(n, compute):
        half = compute((n - 1) / 2.0)
        ratio = (np.arange(n, dtype=compute) - half) / half
        argument = compute(beta) * np.sqrt(np.abs(compute(1) - ratio * ratio))
        return special_math.i0(argument) / special_math.i0(np.float64(compute(beta)))
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   values)


__all__ += ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
            "kaiser_window"]
