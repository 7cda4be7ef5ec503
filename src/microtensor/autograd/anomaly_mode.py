"""Anomaly mode (``detect_anomaly``, ``set_detect_anomaly``): while on, every node records
the stack trace of the forward call that made it, and a backward that fails (raises, or
with ``check_nan`` returns NaN) warns with that trace and the node's name, as PyTorch
does.  Off, the engine and recording pay one C test each (``_C.autograd``).
"""
import os
import traceback
import warnings

from microtensor._C import autograd as _C_autograd
from microtensor._C.autograd import validate_outputs
from microtensor._C.tensor import TensorBase

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_state = {"enabled": False, "check_nan": True}


def is_anomaly_enabled():
    return _state["enabled"]


def is_anomaly_check_nan_enabled():
    return _state["check_nan"]


def _set(enabled, check_nan):
    _state["enabled"], _state["check_nan"] = bool(enabled), bool(check_nan)
    if enabled:
        _C_autograd.set_anomaly_callbacks(_record, _apply)
    else:
        _C_autograd.set_anomaly_callbacks(None, None)


def _record(node):
    """Keep the forward's stack trace (the caller's frames, not microtensor's own) in the
    node's metadata, under PyTorch's key."""
    frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.startswith(_PACKAGE)]
    node.metadata["traceback_"] = "".join(traceback.format_list(frames))


def _apply(node, grads):
    """Run ``node`` in the engine; on failure warn with the forward trace it recorded."""
    try:
        outputs = validate_outputs(node, node.apply(tuple(grads)))
        if _state["check_nan"]:
            for i, g in enumerate(outputs):
                if _has_nan(g):
                    raise RuntimeError(f"Function '{node.name()}' returned nan values in its "
                                       f"{i}th output.")
        return outputs
    except Exception:
        trace = node.metadata.get("traceback_")
        if trace is None:
            warnings.warn(f"Error detected in {node.name()}. No forward pass information "
                          "available. Enable detect anomaly during forward pass for more "
                          "information.", UserWarning, stacklevel=2)
        else:
            warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that "
                          f"caused the error:\n{trace}", UserWarning, stacklevel=2)
        raise


def _has_nan(g):
    # a batched gradient (under vmap) cannot be read as one value: not checked
    if not isinstance(g, TensorBase) or hasattr(g, "_level"):
        return False
    return bool(g.isnan().any())


class set_detect_anomaly:
    """Turn anomaly mode on or off (``check_nan``: a backward returning NaN is an error).
    Used as a function it stays so; used as a context manager the previous mode comes back
    on exit."""

    def __init__(self, mode, check_nan=True):
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        _set(mode, check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _set(self.prev, self.prev_check_nan)


class detect_anomaly:
    """Context manager (or decorator) that turns anomaly mode on; it warns that it is on,
    since it slows every op down."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the "
                      "runtime and should only be enabled for debugging.", UserWarning,
                      stacklevel=2)
        self.prev = is_anomaly_enabled()
        self.prev_check_nan = is_anomaly_check_nan_enabled()
        _set(True, self.check_nan)

    def __exit__(self, *exc):
        _set(self.prev, self.prev_check_nan)

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return func(*args, **kwargs)
        return wrapper
