"""PyTorch tutorial "Learning PyTorch with Examples": Tensors and autograd.

Fits y = a + b x + c x^2 + d x^3 to sin(x) on [-pi, pi]; autograd computes the
gradients and the weights are updated by hand under ``no_grad``.

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``). This is the CPU form of the script
(``device = torch.device("cpu")``); the newest tutorial picks the device with
``torch.accelerator`` and ``torch.set_default_device`` instead.
"""
import microtensor as torch
import math


dtype = torch.float
device = torch.device("cpu")

# Inputs and targets need no gradient.
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

# Weights: requires_grad=True asks autograd for their gradients.
a = torch.randn((), device=device, dtype=dtype, requires_grad=True)
b = torch.randn((), device=device, dtype=dtype, requires_grad=True)
c = torch.randn((), device=device, dtype=dtype, requires_grad=True)
d = torch.randn((), device=device, dtype=dtype, requires_grad=True)

learning_rate = 1e-6
for t in range(2000):
    # Forward pass with Tensor operations.
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    # The loss is a 0-dim Tensor; item() gives its Python number.
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())

    # Backward pass: fills a.grad, b.grad, c.grad and d.grad.
    loss.backward()

    # Update the weights without recording the update in the graph.
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        # Clear the gradients for the next step.
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
