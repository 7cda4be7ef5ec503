"""PyTorch tutorial "Learning PyTorch with Examples": nn.

The polynomial fit of sin(x) on [-pi, pi] as a model from the nn package: a
Linear(3, 1) layer over the features (x, x^2, x^3), an MSELoss summed over the
points, and weights updated by hand.

Renames from the PyTorch code: only the import (``import torch`` ->
``import microtensor as torch``).
"""
import microtensor as torch
import math


# Inputs and targets.
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# The features (x, x^2, x^3): (2000, 1) ** (3,) broadcasts to (2000, 3).
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

# A linear layer, then Flatten(0, 1) to turn its (2000, 1) output into (2000,)
# like y.
model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)

# Sum of squared errors.
loss_fn = torch.nn.MSELoss(reduction='sum')

learning_rate = 1e-6
for t in range(2000):
    # Forward pass: call the model on the features.
    y_pred = model(xx)

    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())

    # Clear the gradients, then backpropagate.
    model.zero_grad()
    loss.backward()

    # Gradient descent on every parameter of the model.
    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad

# The layer is the model's first element.
linear_layer = model[0]

# y = bias + w0 x + w1 x^2 + w2 x^3
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
