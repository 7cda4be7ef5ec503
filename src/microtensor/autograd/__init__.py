"""Automatic differentiation: grad mode, the graph, the engine, Function, gradcheck,
``functional`` (jacobian, hessian, vjp, jvp, hvp, vhp), anomaly mode,
``graph.saved_tensors_hooks``, the legacy ``Variable``, and forward mode (``forward_ad``).
``microtensor.autograd.grad`` and ``backward`` are the entry points."""
from microtensor.autograd import recording  # noqa: F401  (installs the dispatcher hook)
from microtensor.autograd import forward_ad, function, functional, graph  # noqa: F401  (submodules)
from microtensor.autograd import profiler, profiler_util  # noqa: F401  (submodules)
from microtensor.autograd.anomaly_mode import detect_anomaly, set_detect_anomaly
from microtensor.autograd.engine import backward, grad
from microtensor.autograd.function import Function, FunctionCtx
from microtensor.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                            no_grad, set_grad_enabled)
from microtensor.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from microtensor.autograd.graph import Node
# As in PyTorch, ``autograd.variable`` is the old factory (refusing), shadowing its module.
from microtensor.autograd.variable import Variable, variable  # noqa: F401

# As in PyTorch, ``autograd.gradcheck`` is the function (it shadows its module); these
# attributes keep the module-style spelling ``autograd.gradcheck.gradcheck`` working too.
gradcheck.gradcheck = gradcheck
gradcheck.gradgradcheck = gradgradcheck
gradcheck.GradcheckError = GradcheckError

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "inference_mode", "Node", "Function", "FunctionCtx",
           "gradcheck", "gradgradcheck", "GradcheckError", "detect_anomaly",
           "set_detect_anomaly", "function", "functional", "graph"]
__all__ += ["Variable"]
