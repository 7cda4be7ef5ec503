"""Function transforms (``torch.func``'s API): ``vmap``, ``grad``, ``grad_and_value``,
``vjp``, ``jvp``, ``linearize``, ``jacrev``, ``jacfwd``, ``hessian``, ``functional_call``,
``stack_module_state`` and ``replace_all_batch_norm_modules_``.  They compose in any order;
see ``func.autodiff`` for how (autograd below vmap)."""
from microtensor.func.autodiff import (grad, grad_and_value, hessian, jacfwd, jacrev, jvp,
                                       linearize, vjp)
from microtensor.func.batch_norm_replacement import replace_all_batch_norm_modules_
from microtensor.func.functional_call import functional_call, stack_module_state
from microtensor.vmap import vmap

__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd",
           "hessian", "functional_call", "stack_module_state",
           "replace_all_batch_norm_modules_"]
