"""PyTorch's global settings and queries that programs call at start-up: threads,
deterministic algorithms, float32 matmul precision, warn-always, flushing denormals,
anomaly mode, inference mode, ``typename``/``is_storage``, the deprecated
``set_default_tensor_type``, and the two that name machinery microtensor does not have:
``compile`` (no compiler: the callable itself, what ``backend="eager"`` amounts to) and
``autocast`` (no lower-precision autocasting: it warns and stays disabled, as PyTorch's
does on a device or dtype it cannot autocast).

Each setting takes PyTorch's arguments and refuses what PyTorch refuses; what it changes in
microtensor is said in its docstring (and in docs/porting.md).
"""
import functools
import os
import warnings

from microtensor._C.kernels import set_flush_denormal as _set_flush_denormal
from microtensor._C.tensor import Storage, TensorBase, bfloat16, float16
from microtensor._C.tensor import dtype as _dtype
from microtensor._C.tensor import set_default_dtype as _set_default_dtype
from microtensor._legacy import legacy_type
from microtensor.autograd import anomaly_mode as _anomaly
from microtensor.autograd.anomaly_mode import is_anomaly_check_nan_enabled
from microtensor.autograd.grad_mode import is_inference_mode_enabled
from microtensor.ops.factory import set_default_device

__all__ = [
    "get_num_threads", "set_num_threads", "get_num_interop_threads",
    "set_num_interop_threads", "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
    "set_deterministic_debug_mode", "get_deterministic_debug_mode",
    "set_float32_matmul_precision", "get_float32_matmul_precision", "set_warn_always",
    "is_warn_always_enabled", "set_flush_denormal", "set_anomaly_enabled",
    "is_anomaly_check_nan_enabled", "is_inference_mode_enabled", "typename", "is_storage",
    "set_default_tensor_type", "compile", "autocast", "is_autocast_enabled",
    "set_autocast_enabled", "get_autocast_dtype", "set_autocast_dtype",
    "is_autocast_cpu_enabled", "set_autocast_cpu_enabled", "get_autocast_cpu_dtype",
    "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "is_autocast_cache_enabled",
    "set_autocast_cache_enabled", "clear_autocast_cache",
]


def _check_bool(function, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{function}(): argument '{name}' (position 1) must be bool, not "
                        f"{type(value).__name__}")


# --------------------------------------------------------------------------- threads

def _default_threads():
    """PyTorch's default: ``OMP_NUM_THREADS`` when it is a positive integer, else the
    CPUs this process may run on."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


_threads = {"intra": _default_threads(), "interop": None}


def _thread_count(function, n):
    if not isinstance(n, int) or isinstance(n, bool):
        raise RuntimeError(f"{function} expects an int, but got {type(n).__name__}")
    if n <= 0:
        raise RuntimeError(f"{function} expects a positive integer")
    return n


def get_num_threads():
    """The intra-op thread count last set (PyTorch's default at first).  microtensor's
    kernels run on the calling thread whatever it says; NumPy's BLAS (matmul, conv)
    takes its thread count from ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` at start-up."""
    return _threads["intra"]


def set_num_threads(n):
    """Record the intra-op thread count ``get_num_threads`` returns (see there: it does
    not change how many threads microtensor's kernels use, which is one)."""
    _threads["intra"] = _thread_count("set_num_threads", n)


def get_num_interop_threads():
    """The inter-op thread count: microtensor has no inter-op pool (ops run one after the
    other on the calling thread); this is the count set, else PyTorch's default."""
    return _threads["interop"] or _default_threads()


def set_num_interop_threads(n):
    """Record the inter-op thread count; as in PyTorch it can be set once only."""
    n = _thread_count("set_num_interop_threads", n)
    if _threads["interop"] is not None:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work "
                           "has started or set_num_interop_threads called")
    _threads["interop"] = n


# --------------------------------------------------------------------------- determinism

_DEBUG_MODES = ("default", "warn", "error")
_deterministic = {"mode": False, "warn_only": False}


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Ask for deterministic algorithms.  Every microtensor kernel already is one (single
    threaded, in a fixed order: the same inputs give the same bits), so no op ever warns
    or raises under it; the setting is kept for the queries."""
    _check_bool("_set_deterministic_algorithms", "mode", mode)
    _check_bool("_set_deterministic_algorithms", "warn_only", warn_only)
    _deterministic["mode"], _deterministic["warn_only"] = mode, warn_only


def are_deterministic_algorithms_enabled():
    return _deterministic["mode"]


def is_deterministic_algorithms_warn_only_enabled():
    return _deterministic["warn_only"]


def set_deterministic_debug_mode(debug_mode):
    """``use_deterministic_algorithms`` by level: 0/"default" off, 1/"warn" warn only,
    2/"error" on."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, "
                               f"`warn`, `error`, but got {debug_mode}")
        debug_mode = _DEBUG_MODES.index(debug_mode)
    elif not isinstance(debug_mode, int):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got "
                           f"{debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    if not _deterministic["mode"]:
        return 0
    return 1 if _deterministic["warn_only"] else 2


# --------------------------------------------------------------------------- numerics

_matmul_precision = {"value": "highest"}


def set_float32_matmul_precision(precision):
    """Record the float32 matmul precision ("highest", "high" or "medium"; another value
    warns and changes nothing, as in PyTorch).  microtensor's float32 products always run
    in float32 (NumPy's BLAS), which is "highest": "high" and "medium" permit, and do not
    require, lower internal precision, so they change no result."""
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"setFloat32MatmulPrecision call has no effect.", UserWarning,
                      stacklevel=2)
        return
    _matmul_precision["value"] = precision


def get_float32_matmul_precision():
    return _matmul_precision["value"]


def set_flush_denormal(mode):
    """Flush denormal floats to zero (and read denormal operands as zero) on the calling
    thread, in every loop it runs (microtensor's, NumPy's, BLAS's).  True where the CPU
    supports it (x86-64), else False and nothing changes."""
    if not isinstance(mode, bool):
        raise RuntimeError(f"flush_denormal expects a bool, but got {type(mode).__name__}")
    return _set_flush_denormal(mode)


_warn_always = {"value": False}


def set_warn_always(b, /):
    """Record the flag ``is_warn_always_enabled`` returns.  microtensor's warnings go
    through Python's ``warnings`` module, whose filters decide whether a repeated warning
    shows (``warnings.simplefilter("always")`` shows every one); this flag does not
    change them."""
    if not isinstance(b, bool):
        raise RuntimeError(f"setWarnOnlyOnce expects a bool, but got {type(b).__name__}")
    _warn_always["value"] = b


def is_warn_always_enabled():
    return _warn_always["value"]


# --------------------------------------------------------------------------- autograd

def set_anomaly_enabled(enabled, check_nan=True):
    """Turn anomaly mode on or off for good (``autograd.set_detect_anomaly`` as a plain
    call)."""
    _check_bool("set_anomaly_enabled", "enabled", enabled)
    _check_bool("set_anomaly_enabled", "check_nan", check_nan)
    _anomaly._set(enabled, check_nan)


# --------------------------------------------------------------------------- types

def typename(obj, /):
    """A string naming ``obj``'s type: a tensor's legacy type name
    (``'microtensor.FloatTensor'``), else the module-qualified name."""
    if isinstance(obj, TensorBase):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = obj.__class__.__module__ or ""
        qualname = obj.__class__.__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def is_storage(obj, /):
    """True if ``obj`` is a storage (``Tensor.untyped_storage()`` or a ``TypedStorage``)."""
    from microtensor.storage import TypedStorage
    return isinstance(obj, (Storage, TypedStorage))


def set_default_tensor_type(t, /):
    """Deprecated (as in PyTorch): set the default floating dtype from a legacy type or its
    name (``"torch.DoubleTensor"``; a ``cuda.`` one also makes "cuda" the default device).
    Use ``set_default_dtype`` and ``set_default_device``."""
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.",
                  UserWarning, stacklevel=2)
    cls, on_cuda = legacy_type(t)
    if not cls.dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _set_default_dtype(cls.dtype)
    set_default_device("cuda" if on_cuda else None)


# --------------------------------------------------------------------------- compile

_COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs",
                  "max-autotune")


def compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None,
            options=None, name=None, disable=False, recompile_limit=None,
            isolate_recompiles=False, shapes_spec=None):
    """``model`` itself: microtensor has no compiler, so every call runs eagerly, which is
    what PyTorch's ``backend="eager"`` computes.  Takes PyTorch's arguments (and refuses
    what it refuses: a non-callable, or both ``mode`` and ``options``); without ``model``
    it is a decorator (``@mt.compile(mode="max-autotune")``).  A module comes back as the
    same module, not wrapped."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if mode is not None and mode not in _COMPILE_MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: "
                           f"{', '.join(_COMPILE_MODES)}")
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                  mode=mode, options=options, name=name, disable=disable,
                                  recompile_limit=recompile_limit,
                                  isolate_recompiles=isolate_recompiles,
                                  shapes_spec=shapes_spec)
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)} is "
                             f"provided.")
    return model


# --------------------------------------------------------------------------- autocast

_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip",
                 "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
                 "privateuseone")
_autocast_dtypes = {"cpu": bfloat16}          # PyTorch's defaults: bfloat16 on the CPU,
_autocast_cache = {"enabled": True}           # float16 on every other device type
_NO_AUTOCAST = ("microtensor has no autocasting: operations run in the dtypes of their "
                "inputs. Disabling autocast.")


def _device_type(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type.split(":")[0] not in _DEVICE_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start "
                           f"of device string: {device_type}")
    return device_type.split(":")[0]


def is_autocast_enabled(device_type="cuda"):
    """Always False: microtensor never autocasts (see ``autocast``)."""
    _device_type(device_type)
    return False


def set_autocast_enabled(device_type, enabled=None):
    """``set_autocast_enabled(device_type, enabled)`` (or the older ``(enabled)``, for
    "cuda"): enabling warns that microtensor has no autocasting and changes nothing."""
    if enabled is None:
        device_type, enabled = "cuda", device_type
    _device_type(device_type)
    if enabled:
        warnings.warn(_NO_AUTOCAST, UserWarning, stacklevel=2)


def get_autocast_dtype(device_type):
    """The dtype autocast would use on ``device_type`` (kept, never applied)."""
    return _autocast_dtypes.get(_device_type(device_type), float16)


def set_autocast_dtype(device_type, dtype):
    _autocast_dtypes[_device_type(device_type)] = dtype


def _deprecated_device_alias(old, device_type, fn):
    @functools.wraps(fn)
    def alias(*args):
        warnings.warn(f"torch.{old}() is deprecated. Please use torch.{fn.__name__}"
                      f"('{device_type}') instead.", DeprecationWarning, stacklevel=2)
        return fn(device_type, *args)
    alias.__name__ = alias.__qualname__ = old
    return alias


is_autocast_cpu_enabled = _deprecated_device_alias("is_autocast_cpu_enabled", "cpu",
                                                   is_autocast_enabled)
set_autocast_cpu_enabled = _deprecated_device_alias("set_autocast_cpu_enabled", "cpu",
                                                    set_autocast_enabled)
get_autocast_cpu_dtype = _deprecated_device_alias("get_autocast_cpu_dtype", "cpu",
                                                  get_autocast_dtype)
set_autocast_cpu_dtype = _deprecated_device_alias("set_autocast_cpu_dtype", "cpu",
                                                  set_autocast_dtype)
get_autocast_gpu_dtype = _deprecated_device_alias("get_autocast_gpu_dtype", "cuda",
                                                  get_autocast_dtype)


def is_autocast_cache_enabled():
    return _autocast_cache["enabled"]


def set_autocast_cache_enabled(enabled):
    _check_bool("set_autocast_cache_enabled", "enabled", enabled)
    _autocast_cache["enabled"] = enabled


def clear_autocast_cache():
    """Nothing to clear: autocast never casts, so it caches nothing."""


class autocast:
    """PyTorch's ``autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``,
    as a context manager or decorator.  microtensor has no lower-precision autocasting:
    an enabled autocast warns so and disables itself (as PyTorch's does on a device or
    dtype it cannot autocast), and the code inside runs exactly as outside, every op in
    its inputs' dtypes.  Cast explicitly (``x.to(mt.bfloat16)``) where lower precision
    is wanted."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.device = _device_type(device_type)
        if dtype is not None and not isinstance(dtype, _dtype):
            raise TypeError(f"dtype must be a microtensor.dtype, not {type(dtype).__name__}")
        self.fast_dtype = dtype if dtype is not None else get_autocast_dtype(self.device)
        self._cache_enabled = is_autocast_cache_enabled() if cache_enabled is None \
            else bool(cache_enabled)
        if enabled:
            warnings.warn(_NO_AUTOCAST, UserWarning, stacklevel=2)
        self._enabled = False

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return decorated
