"""Weight normalization through a forward pre-hook, PyTorch's older form
(``nn.utils.weight_norm``, deprecated there in favour of
``nn.utils.parametrizations.weight_norm``): ``weight`` becomes ``weight_g * weight_v /
||weight_v||``, recomputed before each forward from the parameters ``weight_g`` (the
norms) and ``weight_v`` (the direction).  Also the two functions both forms compute with,
PyTorch's ``norm_except_dim`` and ``_weight_norm``."""
import warnings

from microtensor.nn.parameter import Parameter, UninitializedParameter

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


def norm_except_dim(v, pow=2, dim=0):
    """The ``pow``-norms of ``v`` over every dimension but ``dim``, kept as size-1
    dimensions; ``dim=-1`` (unlike any other negative dim): the norm of all of ``v``."""
    if dim == -1:
        return v.norm(pow)
    dim = dim + v.dim() if dim < 0 else dim
    others = [d for d in range(v.dim()) if d != dim]
    return v.norm(pow, dim=others, keepdim=True) if others else v.abs()


def _weight_norm(v, g, dim=0):
    """``v`` rescaled to the norms ``g`` (taken over every dimension but ``dim``)."""
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook that recomputes ``module.<name>`` from ``<name>_g`` and
    ``<name>_v``."""

    def __init__(self, name, dim):
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module):
        return _weight_norm(getattr(module, self.name + "_v"),
                            getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module, name, dim):
        warnings.warn("`microtensor.nn.utils.weight_norm` is deprecated in favor of "
                      "`microtensor.nn.utils.parametrizations.weight_norm`.", FutureWarning,
                      stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError("Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if isinstance(weight, UninitializedParameter):
            raise ValueError("The module passed to `WeightNorm` can't have uninitialized "
                             "parameters. Make sure to run the dummy forward before applying "
                             "weight normalization")
        del module._parameters[name]
        module.register_parameter(name + "_g",
                                  Parameter(norm_except_dim(weight, 2, fn.dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.data))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Replace the parameter ``name`` by ``<name>_g`` (its norms over every dimension but
    ``dim``; ``None``: one norm for the whole tensor) and ``<name>_v``; returns
    ``module``."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Undo ``weight_norm``: ``name`` is a parameter again, holding the current weight."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
