"""PyTorch tutorial "Learning PyTorch with Examples": defining new autograd Functions.

Fits y = a + b P3(c + d x) to sin(x) on [-pi, pi], where P3(x) = (5x^3 - 3x) / 2
is the Legendre polynomial of degree three, written as a custom
``autograd.Function`` with its own backward P3'(x) = 1.5 (5x^2 - 1).

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``).
"""
import microtensor as torch
import math


class LegendrePolynomial3(torch.autograd.Function):
    """P3 as an autograd Function: forward and backward on Tensors."""

    @staticmethod
    def forward(ctx, input):
        """Return P3(input); keep the input for the backward pass."""
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        """Chain rule: the incoming gradient times P3'(input)."""
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0")  # Uncomment this to run on GPU

# Inputs and targets need no gradient.
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

# Weights, started near the answer so that the fit converges.
a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)

learning_rate = 5e-6
for t in range(2000):
    # A Function is applied through its apply method.
    P3 = LegendrePolynomial3.apply

    # Forward pass through the custom Function.
    y_pred = a + b * P3(c + d * x)

    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())

    # Backward pass: calls LegendrePolynomial3.backward.
    loss.backward()

    # Gradient descent step outside the graph.
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} * P3({c.item()} + {d.item()} x)')
