"""PyTorch tutorial "Learning PyTorch with Examples": custom nn Modules.

The polynomial fit of sin(x) on [-pi, pi] as a subclass of nn.Module holding the
four weights as Parameters, trained by SGD.

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``).
"""
import microtensor as torch
import math


class Polynomial3(torch.nn.Module):
    def __init__(self):
        """Four scalar Parameters, registered by assignment."""
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        """The polynomial at x."""
        return self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3

    def string(self):
        """A plain method, as on any Python class."""
        return f'y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3'


# Inputs and targets.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# The model.
model = Polynomial3()

# The loss and the optimizer; model.parameters() yields the four Parameters.
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
for t in range(2000):
    # Forward pass.
    y_pred = model(x)

    loss = criterion(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())

    # Clear the gradients, backpropagate, update.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f'Result: {model.string()}')
