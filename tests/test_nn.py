"""nn and optim: modules, losses and optimizers against PyTorch (and hand-derived values)."""
import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def to_torch(t, requires_grad=False):
    out = torch.tensor(np.array(t.detach().numpy()))
    return out.requires_grad_(requires_grad)


def close(a, b, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a.detach().numpy() if isinstance(a, mt.Tensor)
                                          else a.detach().numpy()),
                               b.detach().numpy(), rtol=1e-4, atol=atol)


def test_module_registers_parameters_buffers_and_children():
    class Net(mt.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = mt.nn.Linear(3, 2)
            self.register_buffer("scale", mt.ones(2))
            self.plain = 5

        def forward(self, x):
            return self.fc(x) * self.scale

    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["fc.weight", "fc.bias"]
    assert [n for n, _ in net.named_buffers()] == ["scale"]
    assert list(net.state_dict()) == ["scale", "fc.weight", "fc.bias"]   # PyTorch's order
    assert net.plain == 5
    assert net(mt.ones(4, 3)).shape == (4, 2)
    net.eval()
    assert not net.fc.training
    net.train()
    assert net.fc.training


def test_state_dict_round_trip_and_errors():
    a, b = mt.nn.Linear(3, 2), mt.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert mt.equal(a.weight, b.weight) and mt.equal(a.bias, b.bias)
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "bias"'):
        b.load_state_dict({"weight": a.weight})
    with pytest.raises(RuntimeError, match="size mismatch"):
        mt.nn.Linear(4, 2).load_state_dict(a.state_dict())


def test_zero_grad_and_parameter_is_leaf():
    lin = mt.nn.Linear(3, 2)
    assert lin.weight.is_leaf and lin.weight.requires_grad
    lin(mt.ones(1, 3)).sum().backward()
    assert lin.weight.grad is not None
    lin.zero_grad()
    assert lin.weight.grad is None


@needs_torch
def test_linear_matches_torch_forward_and_backward():
    lin = mt.nn.Linear(5, 3)
    tlin = torch.nn.Linear(5, 3)
    with torch.no_grad():
        tlin.weight.copy_(to_torch(lin.weight))
        tlin.bias.copy_(to_torch(lin.bias))
    x = mt.randn(4, 5)
    out, tout = lin(x), tlin(to_torch(x))
    close(out, tout)
    out.tanh().sum().backward()
    tout.tanh().sum().backward()
    close(lin.weight.grad, tlin.weight.grad)
    close(lin.bias.grad, tlin.bias.grad)


@needs_torch
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_torch(reduction):
    logits = mt.randn(6, 4, requires_grad=True)
    target = mt.tensor([0, 3, 1, 1, 2, 0])
    tlogits = to_torch(logits, True)
    ttarget = torch.tensor(target.numpy())
    pairs = [
        (F.cross_entropy(logits, target, reduction=reduction),
         torch.nn.functional.cross_entropy(tlogits, ttarget, reduction=reduction)),
        (F.nll_loss(logits.log_softmax(1), target, reduction=reduction),
         torch.nn.functional.nll_loss(tlogits.log_softmax(1), ttarget, reduction=reduction)),
        (F.mse_loss(logits, logits.detach() * 0.5, reduction=reduction),
         torch.nn.functional.mse_loss(tlogits, tlogits.detach() * 0.5, reduction=reduction)),
        (F.binary_cross_entropy_with_logits(logits, (logits.detach() > 0).float(),
                                            reduction=reduction),
         torch.nn.functional.binary_cross_entropy_with_logits(
             tlogits, (tlogits.detach() > 0).float(), reduction=reduction)),
    ]
    for ours, theirs in pairs:
        close(ours, theirs)
        (g,) = mt.autograd.grad(ours.sum(), logits)
        (tg,) = torch.autograd.grad(theirs.sum(), tlogits)
        close(g, tg)


@needs_torch
def test_cross_entropy_ignore_index_and_weight():
    logits = mt.randn(5, 3)
    target = mt.tensor([0, -100, 2, 1, 2])
    weight = mt.tensor([1.0, 2.0, 0.5])
    ours = F.cross_entropy(logits, target, weight=weight)
    theirs = torch.nn.functional.cross_entropy(to_torch(logits), torch.tensor(target.numpy()),
                                               weight=to_torch(weight))
    close(ours, theirs)


NLL_ERRORS = [
    ("target out of range", lambda L, x: L.nn.functional.nll_loss(x, L.tensor([1, 7, 2])),
     IndexError, "Target 7 is out of bounds."),
    ("batch mismatch", lambda L, x: L.nn.functional.nll_loss(x, L.tensor([1, 2])),
     ValueError, r"Expected input batch_size \(3\) to match target batch_size \(2\)"),
    ("weight size", lambda L, x: L.nn.functional.nll_loss(x, L.tensor([1, 4, 2]),
                                                         weight=L.ones(4)),
     RuntimeError, "weight tensor should be defined either for all 5 classes"),
    ("target dtype", lambda L, x: L.nn.functional.nll_loss(x, L.tensor([1., 4., 2.])),
     RuntimeError, "expected target dtype to be Long"),
    ("0-d input", lambda L, x: L.nn.functional.nll_loss(x[0, 0], L.tensor(1)),
     ValueError, r"Expected 1 or more dimensions \(got 0\)"),
    ("reduction", lambda L, x: L.nn.functional.nll_loss(x, L.tensor([1, 4, 2]),
                                                       reduction="bad"),
     ValueError, "bad is not a valid value for reduction"),
]


@pytest.mark.parametrize("name, call, error, message", NLL_ERRORS, ids=[e[0] for e in NLL_ERRORS])
def test_nll_loss_errors_match_torch(name, call, error, message):
    with pytest.raises(error, match=message):
        call(mt, mt.randn(3, 5))
    if torch is not None:
        with pytest.raises(error, match=message):
            call(torch, torch.randn(3, 5))


def test_nll_loss_is_one_node_and_ignores_targets_exactly():
    x = mt.tensor([[float("inf"), -1.0], [-2.0, -3.0]], requires_grad=True)
    loss = F.nll_loss(x, mt.tensor([-100, 1]), reduction="none")
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert loss.tolist() == [0.0, 3.0]          # an ignored row is 0, whatever it holds
    (g,) = mt.autograd.grad(loss.sum(), x)
    assert g.tolist() == [[0.0, 0.0], [0.0, -1.0]]
    every_ignored = F.nll_loss(x, mt.tensor([-100, -100]))
    assert np.isnan(every_ignored.item())
    (g,) = mt.autograd.grad(every_ignored, x)
    assert g.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_dropout_train_and_eval():
    mt.manual_seed(0)
    x = mt.ones(1000)
    y = F.dropout(x, 0.25, training=True)
    kept = (y != 0).float().mean().item()
    assert 0.65 < kept < 0.85
    assert np.allclose(y.numpy()[y.numpy() != 0], 1 / 0.75)
    assert F.dropout(x, 0.25, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        mt.nn.Dropout(1.5)


def test_embedding_looks_up_rows():
    emb = mt.nn.Embedding(10, 3)
    idx = mt.tensor([[1, 2], [9, 1]])
    out = emb(idx)
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[1, 1].detach().numpy(), emb.weight[1].detach().numpy())


@needs_torch
@pytest.mark.parametrize("make", [
    lambda p, lib: lib.optim.SGD(p, lr=0.1),
    lambda p, lib: lib.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda p, lib: lib.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    lambda p, lib: lib.optim.Adam(p, lr=0.01),
    lambda p, lib: lib.optim.Adam(p, lr=0.01, weight_decay=0.1, amsgrad=True),
    lambda p, lib: lib.optim.AdamW(p, lr=0.01),
])
def test_optimizers_match_torch(make):
    w0 = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    w = mt.nn.Parameter(mt.tensor(w0))
    tw = torch.nn.Parameter(torch.tensor(w0))
    opt, topt = make([w], mt), make([tw], torch)
    for _ in range(5):
        opt.zero_grad()
        topt.zero_grad()
        (mt.tensor(x) @ w).tanh().pow(2).sum().backward()
        (torch.tensor(x) @ tw).tanh().pow(2).sum().backward()
        opt.step()
        topt.step()
    close(w, tw, atol=1e-5)


def test_training_loop_reduces_loss():
    mt.manual_seed(0)
    x = mt.randn(64, 2)
    y = (x[:, 0] * x[:, 1] > 0).long()
    model = mt.nn.Sequential(mt.nn.Linear(2, 16), mt.nn.Tanh(), mt.nn.Linear(16, 2))
    opt = mt.optim.Adam(model.parameters(), lr=0.05)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first


def test_operations_on_parameters_give_plain_tensors_that_record():
    """Parameters take the C fast paths (arithmetic, views, sums) like tensors; their
    results are plain tensors with a graph, as in PyTorch."""
    p = mt.nn.Parameter(mt.randn(3, 4))
    results = [p * 2.0, p + p, p.t(), p.reshape(12), p.unsqueeze(0), p.sum(), p.sum(1)]
    for r in results:
        assert type(r) is mt.Tensor and r.requires_grad and r.grad_fn is not None
    sum(r.sum() for r in results).backward()
    # d/dp of 2p + 2p + 4 views and sums of p: 2 + 2 + 1 + 1 + 1 + 1 + 1
    np.testing.assert_allclose(p.grad.numpy(), np.full((3, 4), 9.0))
