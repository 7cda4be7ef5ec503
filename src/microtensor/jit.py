"""``microtensor.jit``: PyTorch's TorchScript names, for programs that decorate their code.

microtensor has no compiler and no TorchScript.  ``script`` and ``trace`` return what
they are given, which then runs eagerly (as ``microtensor.compile`` does), and the
decorators (``ignore``, ``unused``, ``export``, ``interface``) return the function as it
is; ``is_scripting()`` and ``is_tracing()`` are False, so code written for both paths
takes its Python one.  What needs a compiled program does not exist: ``save`` and
``load`` raise ``NotImplementedError`` (save a ``state_dict`` with ``microtensor.save``),
and a "scripted" module is the module itself, without ``.save``, ``.code`` or ``.graph``.
"""
import collections.abc
import typing
import warnings

from microtensor.nn.modules import Module

__all__ = ["script", "trace", "trace_module", "ignore", "unused", "export", "interface",
           "script_method", "is_scripting", "is_tracing", "annotate", "Final", "Attribute",
           "isinstance", "fork", "wait", "freeze", "optimize_for_inference", "save", "load",
           "ScriptModule", "ScriptFunction", "Error", "set_fusion_strategy", "strict_fusion",
           "enable_onednn_fusion", "onednn_fusion_enabled"]

_builtin_isinstance = isinstance

Final = typing.Final

_NO_COMPILER = ("microtensor has no TorchScript compiler: {what} needs a compiled program. "
                "Save the weights with microtensor.save(model.state_dict(), f) and rebuild "
                "the model in Python to load them.")


def _deprecated(name):
    """PyTorch 2.13's DeprecationWarning for the TorchScript entry points."""
    warnings.warn(f"`microtensor.jit.{name}` is deprecated, as PyTorch's. Please switch to "
                  f"`microtensor.compile`.", DeprecationWarning, stacklevel=3)


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """``obj`` itself (a module, function or class), run eagerly."""
    _deprecated("script")
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None,
          check_tolerance=1e-05, strict=True, _force_outplace=False, _module_class=None,
          _compilation_unit=None, example_kwarg_inputs=None, _store_inputs=True):
    """``func`` itself, run eagerly: its Python control flow stays live (a trace would
    freeze the path the example inputs take)."""
    if not callable(func):
        raise RuntimeError(f"trace expects a callable, got {type(func).__name__}")
    _deprecated("trace")
    return func


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None,
                 check_tolerance=1e-05, strict=True, _force_outplace=False, _module_class=None,
                 _compilation_unit=None, example_inputs_is_kwarg=False, _store_inputs=True):
    return mod


def ignore(drop=False, **kwargs):
    """``@ignore`` or ``@ignore(drop=True)``: the function, unchanged."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    return fn


def export(fn):
    return fn


def interface(obj):
    _deprecated("interface")
    return obj


def script_method(fn):
    return fn


def is_scripting():
    """False: nothing runs as TorchScript here."""
    return False


def is_tracing():
    return False


def annotate(the_type, the_value):
    """``the_value``: a type annotation for the compiler, which does not exist here."""
    return the_value


class Attribute(typing.NamedTuple):
    value: typing.Any
    type: typing.Any


def isinstance(obj, target_type):
    """Whether ``obj`` is a ``target_type``, which may be a parametrized container type
    (``list[int]``, ``Dict[str, Tensor]``, ``Optional[Tensor]``, ``Tuple[int, str]``),
    checked element by element as PyTorch's ``jit.isinstance`` (which has no variadic
    ``Tuple[int, ...]``: that is False)."""
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return _builtin_isinstance(obj, target_type)
    if origin is typing.Union:
        return any(isinstance(obj, arg) for arg in args)
    if origin in (list, collections.abc.Sequence) or origin is typing.List:
        return _builtin_isinstance(obj, list) and all(isinstance(x, args[0]) for x in obj)
    if origin is dict:
        key, value = args
        return _builtin_isinstance(obj, dict) and all(
            isinstance(k, key) and isinstance(v, value) for k, v in obj.items())
    if origin is tuple:
        if not _builtin_isinstance(obj, tuple):
            return False
        return len(obj) == len(args) and all(isinstance(x, t) for x, t in zip(obj, args))
    return _builtin_isinstance(obj, origin)


class _Future:
    """The result of ``fork``: the call has already run (eagerly)."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value

    def value(self):
        return self._value

    def done(self):
        return True


def fork(func, *args, **kwargs):
    """Run ``func(*args, **kwargs)`` now; ``wait`` returns its result."""
    _deprecated("fork")
    return _Future(func(*args, **kwargs))


def wait(future):
    return future.wait()


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    """``mod`` itself (in eval mode, as PyTorch requires)."""
    _deprecated("freeze")
    if mod.training:
        raise RuntimeError("Freezing is currently only implemented for modules in eval mode. "
                           "Please call .eval() on your module before freezing.")
    return mod


def optimize_for_inference(mod, other_methods=None):
    """``mod`` itself, put in eval mode."""
    return mod.eval()


def save(m, f, _extra_files=None):
    _deprecated("save")
    raise NotImplementedError(_NO_COMPILER.format(what="jit.save"))


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    _deprecated("load")
    raise NotImplementedError(_NO_COMPILER.format(what="jit.load"))


class ScriptModule(Module):
    """PyTorch's compiled-module class, for programs that subclass it: an ordinary
    module here, whose ``save`` refuses (nothing is compiled)."""

    def save(self, f, **kwargs):
        raise NotImplementedError(_NO_COMPILER.format(what="ScriptModule.save"))


class ScriptFunction:
    """PyTorch's compiled-function class; no object is one here (``script`` returns the
    function itself)."""


class Error(Exception):
    """PyTorch's TorchScript runtime error."""


_fusion_strategy = [("STATIC", 2), ("DYNAMIC", 10)]


def set_fusion_strategy(strategy):
    """Record ``strategy`` and return the previous one (no fuser here uses it)."""
    global _fusion_strategy
    previous, _fusion_strategy = _fusion_strategy, list(strategy)
    return previous


class strict_fusion:
    """A context manager that checks nothing: there is no fuser."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_onednn_fusion = False


def enable_onednn_fusion(enabled):
    global _onednn_fusion
    _onednn_fusion = bool(enabled)


def onednn_fusion_enabled():
    return _onednn_fusion
