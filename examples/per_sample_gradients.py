"""Per-sample gradients of a model: ``vmap(grad(loss))`` over ``functional_call``.

``grad`` differentiates a function of the parameters; ``functional_call`` turns the model
into one; ``vmap`` with ``in_dims=(None, 0, 0)`` runs it for every sample of the batch at
once, with the same parameters.  The result has one gradient per sample for every
parameter, the same as one ``backward()`` per sample, computed in one pass.
"""
import microtensor as mt
from microtensor import nn
from microtensor.func import functional_call, grad, vmap

mt.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
x = mt.randn(32, 8)
y = mt.randint(0, 3, (32,))


def loss(params, sample, target):
    logits = functional_call(model, params, (sample.unsqueeze(0),))
    return nn.functional.cross_entropy(logits, target.unsqueeze(0))


params = {name: p.detach() for name, p in model.named_parameters()}
per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
for name, g in per_sample.items():
    print(f"{name:<10} per-sample gradient shape {tuple(g.shape)}")

# the same thing, one sample at a time
for i in range(x.shape[0]):
    model.zero_grad()
    nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
    for name, p in model.named_parameters():
        assert mt.allclose(per_sample[name][i], p.grad, atol=1e-6), (name, i)

norms = sum((g.reshape(32, -1) ** 2).sum(1) for g in per_sample.values()).sqrt()
print("largest per-sample gradient norms:", [round(v, 3) for v in sorted(norms.tolist())[-3:]])
print("per-sample gradients equal single-sample backward(): yes")
