"""``microtensor.compiler``, as ``torch.compiler``: the switches and decorators programs
put around code that PyTorch may compile.  microtensor runs everything eagerly, which is
what PyTorch's "eager" backend computes, so ``compile`` returns its argument, the
decorators return the function they decorate, and nothing is ever being compiled
(``is_compiling()`` is False)."""
from microtensor._settings import compile

__all__ = ["allow_in_graph", "assume_constant_result", "compile", "cudagraph_mark_step_begin",
           "disable", "get_default_backend", "is_compiling", "is_dynamo_compiling",
           "is_exporting", "list_backends", "reset", "set_default_backend", "set_stance",
           "substitute_in_graph", "wrap_numpy"]

_default_backend = ["eager"]


def disable(fn=None, recursive=True, *, reason=None):
    """``fn`` itself (there is no compilation to keep it out of); a decorator without
    ``fn``."""
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


def wrap_numpy(fn):
    return fn


def substitute_in_graph(original_fn, *, can_constant_fold_through=False,
                        skip_signature_check=False):
    """A decorator giving back the function it decorates, as PyTorch's does outside
    compilation."""
    return lambda fn: fn


def is_compiling():
    return False


def is_dynamo_compiling():
    return False


def is_exporting():
    return False


def reset():
    """Nothing to clear: there are no compiled artefacts."""


def cudagraph_mark_step_begin():
    """Nothing to mark: there are no CUDA graphs."""


def set_stance(stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
    stances = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile",
               "eager_then_compile", "aot_eager_then_compile")
    if stance not in stances:
        raise RuntimeError(f"invalid torch.compile stance '{stance}'")


def list_backends(exclude_tags=("debug", "experimental")):
    """The one backend microtensor has: "eager"."""
    return ["eager"]


def get_default_backend():
    return _default_backend[0]


def set_default_backend(backend):
    _default_backend[0] = "eager" if backend is None else backend
