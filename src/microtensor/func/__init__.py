"""Function transforms (``torch.func``'s API): ``vmap``, ``grad``, ``grad_and_value``,
``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian`` and ``functional_call``.  They
compose in any order; see ``func.autodiff`` for how (autograd below vmap)."""
from microtensor.func.autodiff import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from microtensor.func.functional_call import functional_call
from microtensor.vmap import vmap

__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
           "functional_call"]
