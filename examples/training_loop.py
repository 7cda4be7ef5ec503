"""A plain training loop: ``nn.Module``, a loss, ``backward()`` and an optimizer.

Fits a small MLP to a noisy sine wave with Adam, exactly as one would in PyTorch.
"""
import math

import microtensor as mt
from microtensor import nn

mt.manual_seed(0)
x = mt.linspace(-math.pi, math.pi, 256).unsqueeze(1)
y = x.sin() + 0.05 * mt.randn(256, 1)

model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                      nn.Linear(32, 1))
optimizer = mt.optim.Adam(model.parameters(), lr=0.01)
for step in range(300):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(f"step {step:>3}  loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
assert loss.item() < 0.02
