"""``torch.nn.utils.stateless``: its ``functional_call``, deprecated there in favour of
``func.functional_call``, which it calls."""
import warnings

__all__ = ["functional_call"]


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with ``parameters_and_buffers`` in place of its own
    (deprecated: use ``microtensor.func.functional_call``)."""
    from microtensor.func import functional_call as call
    warnings.warn("`microtensor.nn.utils.stateless.functional_call` is deprecated and will be "
                  "removed in a future version. Please use `microtensor.func.functional_call` "
                  "instead which is a drop-in replacement.", FutureWarning, stacklevel=2)
    return call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights,
                strict=strict)
