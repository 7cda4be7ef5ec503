"""LSTM with proj_size against PyTorch: parameter names, shapes, order and init, repr, a
PyTorch state_dict loading unchanged, outputs and gradients in every layout (layers,
bidirectional, batch_first, no bias, unbatched, given states), state-size errors, and
per-sample gradients under vmap(grad) with no loop fallback."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn

torch = pytest.importorskip("torch")

rng = np.random.default_rng(0)


def twin(*args, **kwargs):
    theirs = torch.nn.LSTM(*args, **kwargs).double()
    ours = nn.LSTM(*args, **kwargs, dtype=mt.float64)
    ours.load_state_dict({k: mt.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


def close(ours, theirs):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10,
                               atol=1e-12)


def test_parameters_init_and_repr_match_torch():
    ours = nn.LSTM(5, 6, num_layers=2, bidirectional=True, proj_size=3)
    theirs = torch.nn.LSTM(5, 6, num_layers=2, bidirectional=True, proj_size=3)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(v.shape)) for k, v in ours.named_parameters()] == \
        [(k, tuple(v.shape)) for k, v in theirs.named_parameters()]
    assert len(ours.all_weights) == len(theirs.all_weights)
    assert [len(w) for w in ours.all_weights] == [len(w) for w in theirs.all_weights]
    bound = 1 / math.sqrt(6)
    for p in ours.parameters():
        values = p.detach().numpy()
        assert values.min() >= -bound and values.max() <= bound
    assert ours.weight_hr_l1_reverse.detach().numpy().std() > bound / 4


CONFIGS = [dict(), dict(num_layers=2), dict(bidirectional=True),
           dict(num_layers=2, bidirectional=True, batch_first=True),
           dict(bias=False, num_layers=2)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("given_states", [False, True])
def test_outputs_and_gradients_match_torch(config, given_states):
    ours, theirs = twin(4, 5, proj_size=2, **config)
    layers = config.get("num_layers", 1) * (2 if config.get("bidirectional") else 1)
    data = rng.standard_normal((3, 6, 4))
    x, tx = mt.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    args, targs = (x,), (tx,)
    if given_states:
        h, c = rng.standard_normal((layers, 3 if config.get("batch_first") else 6, 2)), \
            rng.standard_normal((layers, 3 if config.get("batch_first") else 6, 5))
        args += ((mt.tensor(h), mt.tensor(c)),)
        targs += ((torch.tensor(h), torch.tensor(c)),)
    out, (h_n, c_n) = ours(*args)
    tout, (th_n, tc_n) = theirs(*targs)
    for a, b in ((out, tout), (h_n, th_n), (c_n, tc_n)):
        assert tuple(a.shape) == tuple(b.shape)
        close(a, b)
    weights = [rng.standard_normal(tuple(t.shape)) for t in (tout, th_n, tc_n)]
    sum((t * mt.tensor(w)).sum() for t, w in zip((out, h_n, c_n), weights)).backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip((tout, th_n, tc_n), weights)).backward()
    close(x.grad, tx.grad)
    tparams = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, tparams[name].grad)


def test_unbatched_input_matches_torch():
    ours, theirs = twin(4, 5, proj_size=3, bidirectional=True)
    data = rng.standard_normal((7, 4))
    for a, b in zip((lambda o: [o[0], *o[1]])(ours(mt.tensor(data))),
                    (lambda o: [o[0], *o[1]])(theirs(torch.tensor(data)))):
        assert tuple(a.shape) == tuple(b.shape)
        close(a, b)


def test_state_size_errors_match_torch():
    ours, theirs = twin(4, 5, proj_size=2)
    x = rng.standard_normal((6, 3, 4))
    for h, c in (((1, 3, 5), (1, 3, 5)), ((1, 3, 2), (1, 3, 2))):
        with pytest.raises(RuntimeError) as expected:
            theirs(torch.tensor(x), (torch.zeros(h, dtype=torch.float64),
                                     torch.zeros(c, dtype=torch.float64)))
        with pytest.raises(RuntimeError) as got:
            ours(mt.tensor(x), (mt.zeros(h, dtype=mt.float64), mt.zeros(c, dtype=mt.float64)))
        assert str(got.value) == str(expected.value)


def test_per_sample_gradients_match_torch():
    """vmap(grad) against PyTorch's gradients of each sample (torch.func's vmap itself
    fails on PyTorch's LSTM with projections)."""
    ours, theirs = twin(3, 6, proj_size=2, num_layers=2, batch_first=True)
    data = rng.standard_normal((4, 5, 3))

    def loss(params, sequence):
        return mt.func.functional_call(ours, params, (sequence,))[0].pow(2).sum()

    params = {k: v.detach() for k, v in ours.named_parameters()}
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Batching rule not implemented")
        per_sample = mt.func.vmap(mt.func.grad(loss), in_dims=(None, 0))(params,
                                                                         mt.tensor(data))
    names = [name for name, _ in theirs.named_parameters()]
    assert list(per_sample) == names
    for i in range(len(data)):
        expected = torch.autograd.grad(theirs(torch.tensor(data[i]))[0].pow(2).sum(),
                                       list(theirs.parameters()))
        for name, grad in zip(names, expected):
            close(per_sample[name][i], grad)
