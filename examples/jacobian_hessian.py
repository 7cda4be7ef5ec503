"""Jacobians and Hessians: ``jacrev``, ``jacfwd``, ``hessian``, and a Newton step.

``jacrev`` computes rows of the Jacobian with reverse mode (``vmap`` of a vjp over the
identity); ``jacfwd`` columns with forward mode (here exact reverse-over-reverse);
``hessian`` is ``jacfwd(jacrev(f))``.  All of them also work inside ``vmap``.
"""
import microtensor as mt
from microtensor.func import hessian, jacfwd, jacrev, vmap


def f(x):
    """R^3 -> R^2."""
    return mt.stack([(x * x).sum(), x[0] * x[1].sin() + x[2]])


def rosenbrock(x):
    return ((1 - x[:-1]) ** 2 + 100 * (x[1:] - x[:-1] ** 2) ** 2).sum()


x = mt.tensor([0.5, -1.0, 2.0], dtype=mt.float64)
jr = jacrev(f)(x)
jf = jacfwd(f)(x)
print("Jacobian of f at x:\n", jr)
assert mt.allclose(jr, jf)

# finite differences agree
eps = 1e-6
for j in range(3):
    step = mt.zeros(3, dtype=mt.float64)
    step[j] = eps
    column = (f(x + step) - f(x - step)) / (2 * eps)
    assert mt.allclose(jr[:, j], column, atol=1e-6)

# Newton's method on the Rosenbrock function: x <- x - H^-1 g, with H from hessian().
# (A 2-D problem, so the 2x2 system is solved by hand.)
z = mt.tensor([-1.2, 1.0], dtype=mt.float64)
for it in range(8):
    g = jacrev(rosenbrock)(z)
    h = hessian(rosenbrock)(z)
    det = h[0, 0] * h[1, 1] - h[0, 1] * h[1, 0]
    inverse = mt.stack([mt.stack([h[1, 1], -h[0, 1]]), mt.stack([-h[1, 0], h[0, 0]])]) / det
    z = z - inverse @ g
print("Newton on Rosenbrock from (-1.2, 1):", [round(v, 6) for v in z.tolist()])
assert mt.allclose(z, mt.tensor([1.0, 1.0], dtype=mt.float64), atol=1e-6)

# a batch of Hessians at once
points = mt.randn(5, 2, dtype=mt.float64)
hs = vmap(hessian(rosenbrock))(points)
print("vmap(hessian) shape:", tuple(hs.shape))
for i in range(5):
    assert mt.allclose(hs[i], hessian(rosenbrock)(points[i]))
