"""Grad mode: whether operations are recorded for autograd, per thread.

``no_grad``, ``enable_grad`` and ``set_grad_enabled`` work as context managers and as
decorators, like PyTorch's.
"""
import functools

from microtensor._C import tensor as _core


class _GradState:
    """``state.enabled``: this thread's grad mode (kept in the core, where the fast paths
    read it)."""

    @property
    def enabled(self):
        return _core.is_grad_enabled()

    @enabled.setter
    def enabled(self, value):
        _core.set_grad_enabled(value)


state = _GradState()
is_grad_enabled = _core.is_grad_enabled


class _GradModeContext:
    """Base for the context managers: sets ``state.enabled`` on entry and restores it."""
    _target = True

    def __enter__(self):
        self._prev = state.enabled
        state.enabled = self._target

    def __exit__(self, *exc):
        state.enabled = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper

    def clone(self):
        return self.__class__()


class no_grad(_GradModeContext):
    _target = False


class enable_grad(_GradModeContext):
    _target = True


class set_grad_enabled(_GradModeContext):
    def __init__(self, mode):
        self._prev = state.enabled
        self._target = bool(mode)
        state.enabled = self._target   # takes effect as a plain call too, like PyTorch's

    def __enter__(self):
        pass

    def __call__(self, fn):
        state.enabled = self._prev
        mode = self._target

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper

    def clone(self):
        return set_grad_enabled(self._target)


class inference_mode(no_grad):
    def __init__(self, mode=True):
        self._target = not mode
