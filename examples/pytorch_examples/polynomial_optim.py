"""PyTorch tutorial "Learning PyTorch with Examples": optim.

The nn model of the polynomial fit of sin(x) on [-pi, pi], trained by the
RMSprop optimizer instead of by hand.

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``).
"""
import microtensor as torch
import math


# Inputs and targets.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# The features (x, x^2, x^3).
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

# The model and the loss.
model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)
loss_fn = torch.nn.MSELoss(reduction='sum')

# The optimizer updates the model's parameters for us.
learning_rate = 1e-3
optimizer = torch.optim.RMSprop(model.parameters(), lr=learning_rate)
for t in range(2000):
    # Forward pass.
    y_pred = model(xx)

    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())

    # Gradients accumulate: clear them before each backward pass.
    optimizer.zero_grad()

    # Backward pass.
    loss.backward()

    # One optimizer step.
    optimizer.step()


linear_layer = model[0]
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
