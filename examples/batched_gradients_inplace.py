"""Batched gradients through code that writes into views in place.

``autograd.grad(out, x, grad_outputs=V, is_grads_batched=True)`` treats the first dim of
``V`` as a batch: the result is one backward pass per row of ``V``, computed as a single
vmapped backward pass.  With ``V`` the identity, that is the full Jacobian.  The graph
below contains in-place writes into views (``CopySlices`` nodes), which run batched too.
"""
import microtensor as mt
from microtensor.func import jacrev


def cumulative_update(x):
    """Writes into slices of a buffer in place."""
    buf = x * 2.0
    buf[1:].add_(x[:-1].cos())        # in-place into a view of buf
    buf[::2].mul_(x[::2].sin())       # and into a strided view, overlapping the first
    return buf * x


x = mt.tensor([0.3, -0.7, 1.1, 0.4, -0.2], dtype=mt.float64, requires_grad=True)
out = cumulative_update(x)
print("grad_fn of the buffer chain:", out.grad_fn.name(),
      "<-", out.grad_fn.next_functions[0][0].name())

identity = mt.eye(5, dtype=mt.float64)
(jac,) = mt.autograd.grad(out, x, identity, retain_graph=True, is_grads_batched=True)

# one backward pass per row gives the same
for i in range(5):
    (row,) = mt.autograd.grad(out, x, identity[i], retain_graph=True)
    assert mt.allclose(jac[i], row)
# and so does jacrev, which vmaps the same backward pass
assert mt.allclose(jac, jacrev(cumulative_update)(x.detach()))
print("Jacobian through in-place view writes:\n", jac)

# batched vector-Hessian products: the backward graph itself, differentiated batched
(g,) = mt.autograd.grad(out.sum(), x, create_graph=True)
(hessian_rows,) = mt.autograd.grad(g, x, identity, is_grads_batched=True)
print("Hessian of sum(out) (symmetric):",
      bool(mt.allclose(hessian_rows, hessian_rows.t())))
assert mt.allclose(hessian_rows, hessian_rows.t())
