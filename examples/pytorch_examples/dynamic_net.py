"""PyTorch tutorial "Learning PyTorch with Examples": control flow + weight sharing.

A polynomial of order three to five fitted to sin(x) on [-pi, pi]: each forward
pass draws the order at random and reuses the one weight ``e`` for the fourth
and fifth powers. The graph is rebuilt on every call, so Python control flow
and a shared parameter just work. Trained by SGD with momentum.

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``).
"""
import random
import microtensor as torch
import math


class DynamicNet(torch.nn.Module):
    def __init__(self):
        """Five scalar Parameters."""
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))
        self.e = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        """The cubic, plus e x^4 and maybe e x^5 (chosen at random each call)."""
        y = self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3
        for exp in range(4, random.randint(4, 6)):
            y = y + self.e * x ** exp
        return y

    def string(self):
        """A plain method, as on any Python class."""
        return f'y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3 + {self.e.item()} x^4 ? + {self.e.item()} x^5 ?'


# Inputs and targets.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# The model.
model = DynamicNet()

# Plain SGD struggles with this model; momentum helps.
criterion = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)
for t in range(30000):
    # Forward pass.
    y_pred = model(x)

    loss = criterion(y_pred, y)
    if t % 2000 == 1999:
        print(t, loss.item())

    # Clear the gradients, backpropagate, update.
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f'Result: {model.string()}')
