"""A stand-in for CuPy backed by host memory, so that the CUDA code paths run without a GPU.

It keeps the two properties of CuPy that the backend and the op kernels must respect:
arrays are a separate type that NumPy functions reach only through ``__array_ufunc__`` /
``__array_function__``, and mixing them with NumPy arrays (or converting them implicitly
with ``np.asarray``) raises ``TypeError``.  Memory is addressed through ``.data`` pointers
and ``ndarray(shape, dtype, memptr=..., strides=...)`` as in CuPy.  Only what
``microtensor.backends.cuda`` and the kernels use is here.
"""
import types

import numpy as np

try:
    import cupy as _real_cupy
except Exception:  # noqa: BLE001 - CuPy may be missing or unusable; the fake needs neither
    _real_cupy = None

_REFUSED = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")


class _Pointer:
    """``ndarray.data``: a byte offset into an allocation; ``+`` moves it like CuPy's."""

    def __init__(self, owner, offset):
        self.owner = owner
        self.offset = offset

    def __add__(self, nbytes):
        return _Pointer(self.owner, self.offset + nbytes)


def _owner(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _address(a):
    return a.__array_interface__["data"][0]


def _unwrap(x):
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y) for y in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(x):
    if isinstance(x, np.ndarray):
        return ndarray._of(x)
    if isinstance(x, np.generic):
        return ndarray._of(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(y) for y in x)
    if isinstance(x, list):
        return [_wrap(y) for y in x]
    return x


class ndarray(np.lib.mixins.NDArrayOperatorsMixin):  # noqa: N801 - CuPy's name
    """A "device" array: a NumPy array that refuses to be treated as one implicitly."""

    def __init__(self, shape, dtype=float, memptr=None, strides=None):
        if memptr is None:
            self._a = np.empty(shape, dtype)
        else:
            flat = memptr.owner.reshape(-1).view(np.uint8)
            self._a = np.ndarray(shape, dtype, buffer=flat, offset=memptr.offset,
                                 strides=strides)

    @classmethod
    def _of(cls, a):
        self = cls.__new__(cls)
        self._a = a
        return self

    def __array__(self, dtype=None, copy=None):
        raise TypeError(_REFUSED)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = _unwrap(kwargs["out"])
        return _wrap(getattr(ufunc, method)(*_unwrap(inputs), **kwargs))

    def __array_function__(self, func, types_, args, kwargs):
        if _real_cupy is not None and not hasattr(_real_cupy, func.__name__):
            return NotImplemented
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))

    def __getattr__(self, name):
        if name.startswith("__"):   # no __array_interface__ & co: NumPy must not see memory
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if callable(attr):
            return lambda *args, **kwargs: _wrap(attr(*_unwrap(args), **_unwrap(kwargs)))
        return _wrap(attr)

    def __getitem__(self, index):
        return _wrap(self._a[_unwrap(index)])

    def __setitem__(self, index, value):
        self._a[_unwrap(index)] = _unwrap(value)

    def __len__(self):
        return len(self._a)

    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __index__(self):
        return self._a.__index__()

    def __repr__(self):
        return "fake_cupy." + repr(self._a)

    @property
    def data(self):
        owner = _owner(self._a)
        return _Pointer(owner, _address(self._a) - _address(owner))

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    def get(self):
        return self._a.copy()

    def __dlpack_device__(self):
        return (2, 0)


# CuPy's own ufuncs (``cupy.add.at`` is what the scatter kernels call on the GPU; CuPy has
# ``at`` for maximum and minimum too, not for multiply: see ``multiply`` below)
add = np.add
maximum = np.maximum
minimum = np.minimum


def empty(shape, dtype=float):
    return ndarray(shape, dtype)


def asarray(x, dtype=None):
    if isinstance(x, ndarray):
        return x if dtype is None else x.astype(dtype)
    return ndarray._of(np.array(x, dtype=dtype))


def asnumpy(x):
    return x.get() if isinstance(x, ndarray) else np.asarray(x)


def ascontiguousarray(x):
    return ndarray._of(np.ascontiguousarray(x._a))


def broadcast_to(x, shape):
    return ndarray._of(np.broadcast_to(x._a, shape))


def may_share_memory(a, b):
    return np.may_share_memory(a._a, b._a)


def copyto(dst, src, casting="same_kind"):
    np.copyto(dst._a, _unwrap(src), casting=casting)


def arange(*args, **kwargs):
    return ndarray._of(np.arange(*args, **kwargs))


def zeros(shape, dtype=float):
    return ndarray._of(np.zeros(shape, dtype))


def where(condition, x, y):
    return _wrap(np.where(*_unwrap((condition, x, y))))


def _forwarded(name):
    """CuPy's function of that name, on the host arrays inside."""
    fn = getattr(np, name)
    return lambda *args, **kwargs: _wrap(fn(*_unwrap(args), **_unwrap(kwargs)))


abs, clip, moveaxis, pad, take = (_forwarded(name) for name in  # noqa: A001 - CuPy's names
                                  ("abs", "clip", "moveaxis", "pad", "take"))
multiply = _forwarded("multiply")   # a plain function: CuPy's multiply has no ``at``


def _forwarded_fft(name):
    fn = getattr(np.fft, name)
    return lambda *args, **kwargs: _wrap(fn(*_unwrap(args), **_unwrap(kwargs)))


# ``cupy.fft``: the transforms the FFT kernels call
fft = types.SimpleNamespace(**{name: _forwarded_fft(name)
                               for name in ("fftn", "ifftn", "rfftn", "irfftn")})


class _Device:
    def __init__(self, index=0):
        self.id = index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


cuda = types.SimpleNamespace(
    Device=_Device,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, getDevice=lambda: 0))

