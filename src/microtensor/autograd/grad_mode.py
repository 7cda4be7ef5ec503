"""Grad mode: whether operations are recorded for autograd, per thread.

``no_grad``, ``enable_grad`` and ``set_grad_enabled`` work as context managers and as
decorators, like PyTorch's: a decorated generator function runs each of its steps (not
only the call that creates the generator) in the mode.
"""
import functools
import inspect

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
        return _decorate(fn, self.clone)

    def clone(self):
        return self.__class__()


def _decorate(fn, make_context):
    """``fn`` run inside a fresh ``make_context()`` per call (per step for a generator)."""
    if inspect.isgeneratorfunction(fn):
        return _decorate_generator(fn, make_context)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with make_context():
            return fn(*args, **kwargs)
    return wrapper


def _decorate_generator(fn, make_context):
    # PyTorch's ``_wrap_generator``: the mode is set around every resumption of the
    # generator and restored at each ``yield``, so the caller's mode is untouched
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with make_context():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with make_context():
                        gen.close()
                    raise
                except BaseException as exc:
                    with make_context():
                        response = gen.throw(exc)
                else:
                    with make_context():
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value
    return wrapper


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
        return _decorate(fn, self.clone)

    def clone(self):
        return set_grad_enabled(self._target)


# True inside ``inference_mode()`` (on this thread), as PyTorch's; kept in the core, which
# marks the storages made meanwhile as inference ones.
is_inference_mode_enabled = _core.is_inference_mode_enabled


class inference_mode(_GradModeContext):
    """PyTorch's inference mode, as a context manager or a decorator (``@inference_mode``,
    ``@inference_mode()``, ``@inference_mode(False)``): grad mode off, and every tensor
    made inside over new memory an inference tensor (``is_inference()``; views made inside
    of a normal tensor stay normal).  Outside the mode an inference tensor refuses
    in-place updates and ``requires_grad_()``, and autograd refuses to save it for
    backward.  ``inference_mode(False)`` turns the mode off (and grad mode on) inside."""

    def __new__(cls, mode=True):
        if mode is None or isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)      # used as a bare decorator: ``mode`` is the function

    def __init__(self, mode=True):
        self.mode = mode
        self._target = not mode

    def __enter__(self):
        self._prev_inference = _core.is_inference_mode_enabled()
        _core.set_inference_mode(self.mode)
        super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        _core.set_inference_mode(self._prev_inference)

    def clone(self):
        return inference_mode(self.mode)
