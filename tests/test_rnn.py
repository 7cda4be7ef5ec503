"""Recurrent layers against PyTorch: RNNCell/LSTMCell/GRUCell and RNN/LSTM/GRU (layers,
bidirectional, batch_first, unbatched input, given initial states, dropout), parameter names
and shapes, initialisation, repr, argument checks, gradients w.r.t. the input and every
parameter, and per-sample gradients under vmap(grad) with no loop fallback."""
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

FALLBACK = "Batching rule not implemented"
rng = np.random.default_rng(0)


def as_numpy(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def close(ours, theirs, tol=1e-10):
    np.testing.assert_allclose(as_numpy(ours), as_numpy(theirs), rtol=tol, atol=tol)


def twin(name, *args, **kwargs):
    """The same layer in microtensor and PyTorch (float64), with PyTorch's weights loaded."""
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs, dtype=mt.float64)
    ours.load_state_dict({k: mt.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


def pair(*shape, grad=False):
    a = rng.standard_normal(shape)
    ours, theirs = mt.tensor(a), torch.tensor(a)
    if grad:
        ours.requires_grad_()
        theirs.requires_grad_()
    return ours, theirs


def flat(out):
    """The tensors of a result, nested tuples flattened."""
    if isinstance(out, tuple):
        return [t for o in out for t in flat(o)]
    return [out]


def check_grads(ours, theirs, inputs, out, tout):
    """Backward of a weighted sum of every result: input and parameter gradients agree."""
    weights = [rng.standard_normal(tuple(t.shape)) for t in flat(tout)]
    loss = sum((o * mt.tensor(w)).sum() for o, w in zip(flat(out), weights))
    tloss = sum((o * torch.tensor(w)).sum() for o, w in zip(flat(tout), weights))
    loss.backward()
    tloss.backward()
    for x, tx in inputs:
        close(x.grad, tx.grad)
    tparams = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, tparams[name].grad)


# --------------------------------------------------------------------------- layers

CONFIGS = [
    dict(),
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False, batch_first=True),
]


@pytest.mark.parametrize("name,extra", [("RNN", {}), ("RNN", {"nonlinearity": "relu"}),
                                        ("LSTM", {}), ("GRU", {})])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in
                                                                   c.items()) or "default")
@pytest.mark.parametrize("given_state", [False, True])
def test_layer_outputs_states_and_gradients_match_torch(name, extra, config, given_state):
    ours, theirs = twin(name, 3, 4, **config, **extra)
    assert list(dict(ours.named_parameters())) == list(dict(theirs.named_parameters()))
    L, N = 5, 2
    x, tx = pair(*((N, L, 3) if config.get("batch_first") else (L, N, 3)), grad=True)
    inputs = [(x, tx)]
    hx = thx = None
    if given_state:
        layers = config.get("num_layers", 1) * (2 if config.get("bidirectional") else 1)
        states = [pair(layers, N, 4, grad=True) for _ in range(2 if name == "LSTM" else 1)]
        inputs += states
        hx = tuple(s[0] for s in states) if name == "LSTM" else states[0][0]
        thx = tuple(s[1] for s in states) if name == "LSTM" else states[0][1]
    out, tout = ours(x, hx), theirs(tx, thx)
    assert len(flat(out)) == len(flat(tout))
    for o, t in zip(flat(out), flat(tout)):
        assert tuple(o.shape) == tuple(t.shape)
        close(o, t)
    check_grads(ours, theirs, inputs, out, tout)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_unbatched_input_matches_torch(name, bidirectional):
    ours, theirs = twin(name, 3, 4, num_layers=2, bidirectional=bidirectional,
                        batch_first=True)
    x, tx = pair(5, 3, grad=True)
    layers = 4 if bidirectional else 2
    states = [pair(layers, 4, grad=True) for _ in range(2 if name == "LSTM" else 1)]
    hx = tuple(s[0] for s in states) if name == "LSTM" else states[0][0]
    thx = tuple(s[1] for s in states) if name == "LSTM" else states[0][1]
    for h, th in ((None, None), (hx, thx)):
        out, tout = ours(x, h), theirs(tx, th)
        for o, t in zip(flat(out), flat(tout)):
            assert tuple(o.shape) == tuple(t.shape)
            close(o, t)
    check_grads(ours, theirs, [(x, tx)] + states, out, tout)


def test_dropout_between_layers_only_in_training():
    ours = nn.GRU(3, 4, num_layers=3, dropout=0.5)
    x = mt.randn(6, 2, 3)
    ours.eval()
    first, second = ours(x)[0], ours(x)[0]
    close(first, second, 0)
    ours.train()
    mt.manual_seed(0)
    a = ours(x)[0]
    mt.manual_seed(1)
    b = ours(x)[0]
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())
    # The last layer's output is not dropped: no exact zeros appear in it.
    assert (a.detach().numpy() != 0).all()
    # dropout=1 zeroes the input of layer 2 onwards: the output no longer depends on x.
    full = nn.LSTM(3, 4, num_layers=2, dropout=1.0)
    close(full(x)[0], full(mt.randn(6, 2, 3))[0], 0)


# --------------------------------------------------------------------------- cells

@pytest.mark.parametrize("name,extra", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}),
                                        ("LSTMCell", {}), ("GRUCell", {}),
                                        ("GRUCell", {"bias": False})])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("given_state", [False, True])
def test_cells_match_torch(name, extra, batched, given_state):
    ours, theirs = twin(name, 3, 4, **extra)
    lead = (2,) if batched else ()
    x, tx = pair(*lead, 3, grad=True)
    inputs = [(x, tx)]
    hx = thx = None
    if given_state:
        states = [pair(*lead, 4, grad=True) for _ in range(2 if name == "LSTMCell" else 1)]
        inputs += states
        hx = tuple(s[0] for s in states) if name == "LSTMCell" else states[0][0]
        thx = tuple(s[1] for s in states) if name == "LSTMCell" else states[0][1]
    out, tout = ours(x, hx), theirs(tx, thx)
    for o, t in zip(flat(out), flat(tout)):
        assert tuple(o.shape) == tuple(t.shape)
        close(o, t)
    check_grads(ours, theirs, inputs, out, tout)


# --------------------------------------------------------------------------- module API

@pytest.mark.parametrize("name,args,kwargs", [
    ("RNNCell", (3, 4), {}), ("RNNCell", (3, 4), {"bias": False, "nonlinearity": "relu"}),
    ("LSTMCell", (3, 4), {}), ("GRUCell", (3, 4), {"bias": False}),
    ("RNN", (3, 4), {}), ("RNN", (3, 4, 2), {"nonlinearity": "relu", "dropout": 0.25}),
    ("LSTM", (3, 4), {"num_layers": 2, "bias": False, "batch_first": True,
                      "bidirectional": True}),
    ("GRU", (3, 4), {"bidirectional": True})])
def test_names_shapes_init_and_repr_match_torch(name, args, kwargs):
    ours = getattr(nn, name)(*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    tparams = dict(theirs.named_parameters())
    assert list(dict(ours.named_parameters())) == list(tparams)
    for key, p in ours.named_parameters():
        assert tuple(p.shape) == tuple(tparams[key].shape) and p.dtype == mt.float32
    # Every parameter ~ U(-1/sqrt(hidden), 1/sqrt(hidden)): std bound/sqrt(3) = 0.29.
    values = np.concatenate([p.detach().numpy().ravel() for p in ours.parameters()])
    assert np.abs(values).max() <= 1 / math.sqrt(4) and 0.2 < values.std() < 0.38


def test_lstm_gate_order_is_torchs():
    """Only the forget gate open (i, f, g, o = 0, +inf, 0, +inf): the cell state is kept."""
    cell = nn.LSTMCell(2, 3, bias=True)
    with mt.no_grad():
        cell.weight_ih.zero_()
        cell.weight_hh.zero_()
        cell.bias_hh.zero_()
        cell.bias_ih.copy_(mt.tensor([-50.0] * 3 + [50.0] * 3 + [0.0] * 3 + [50.0] * 3))
    c = mt.tensor([[0.5, -0.25, 1.0]])
    h, c_next = cell(mt.randn(1, 2), (mt.zeros(1, 3), c))
    close(c_next, c, 1e-6)
    close(h, np.tanh(c.numpy()), 1e-6)


def test_argument_checks_match_torch():
    for kwargs, error in [({"dropout": 1.5}, ValueError), ({"dropout": True}, ValueError),
                          ({"num_layers": 0}, ValueError), ({"bias": 1}, TypeError),
                          ({"batch_first": None}, TypeError)]:
        with pytest.raises(error):
            torch.nn.GRU(3, 4, **kwargs)
        with pytest.raises(error):
            nn.GRU(3, 4, **kwargs)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNNCell(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        nn.LSTM(3, 4, proj_size=-1)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.5)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_forward_checks_match_torch(name):
    ours, theirs = twin(name, 3, 4, num_layers=2)
    lstm = name == "LSTM"

    def both(error, match, x_shape, *h_shapes):
        x, tx = pair(*x_shape)
        states = [pair(*s) for s in h_shapes]
        h = (tuple(s[0] for s in states) if lstm else states[0][0]) if states else None
        th = (tuple(s[1] for s in states) if lstm else states[0][1]) if states else None
        with pytest.raises(error, match=match):
            theirs(tx, th)
        with pytest.raises(error, match=match):
            ours(x, h)

    both(ValueError, "Expected input to be 2D or 3D, got 4D", (1, 5, 2, 3))
    both(RuntimeError, "input.size\\(-1\\) must be equal to input_size. Expected 3, got 2",
         (5, 2, 2))
    states = 2 if lstm else 1
    both(RuntimeError, "should also be 3-D", (5, 2, 3), *[(2, 4)] * states)
    both(RuntimeError, "should also be 2-D", (5, 3), *[(2, 2, 4)] * states)
    both(RuntimeError, "Expected hidden(\\[0\\])? size \\(2, 2, 4\\), got \\[1, 2, 4\\]", (5, 2, 3),
         *[(1, 2, 4)] * states)
    with pytest.raises(ValueError, match="does not match weight dtype"):
        ours(mt.randn(5, 2, 3))


def test_cell_checks_match_torch():
    cell, tcell = twin("LSTMCell", 3, 4)
    for shape, match in [((2, 2, 3), "LSTMCell: Expected input to be 1D or 2D, got 3D"),
                         ((2, 5), "input has inconsistent input_size: got 5 expected 3")]:
        x, tx = pair(*shape)
        with pytest.raises((ValueError, RuntimeError), match=match):
            tcell(tx)
        with pytest.raises((ValueError, RuntimeError), match=match):
            cell(x)
    with pytest.raises(ValueError, match="GRUCell: Expected hidden to be 1D or 2D, got 3D"):
        nn.GRUCell(3, 4)(mt.randn(2, 3), mt.randn(1, 2, 4))


# --------------------------------------------------------------------------- vmap(grad)

@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_per_sample_gradients_match_torch_func_without_fallback(name):
    ours, theirs = twin(name, 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x, tx = pair(6, 5, 3)
    h, th = pair(6, 4, 1, 4)
    lstm = name == "LSTM"

    def call(functional_call, module, params, x, h):
        state = (h, h.tanh()) if lstm else h
        return functional_call(module, params, (x, state))[0].tanh().sum()

    def loss(params, x, h):
        return call(mt.func.functional_call, ours, params, x.unsqueeze(0), h)

    def tloss(params, x, h):
        return call(torch.func.functional_call, theirs, params, x.unsqueeze(0), h)

    def default_state_loss(params, x):
        """Unbatched samples, as the per-sample-gradients tutorial passes them, and the
        initial state left to the layer (zeros)."""
        return mt.func.functional_call(ours, params, (x,))[0].tanh().sum()

    params = {k: v.detach() for k, v in ours.named_parameters()}
    tparams = {k: v.detach() for k, v in theirs.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads = mt.func.vmap(mt.func.grad(loss), in_dims=(None, 0, 0))(params, x, h)
        unbatched = mt.func.vmap(mt.func.grad(default_state_loss), in_dims=(None, 0))(params, x)
    # torch.func needs the initial state batched (its default zeros break its batching).
    expected = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(tparams, tx, th)
    expected_unbatched = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tparams, tx, torch.zeros_like(th))
    assert set(grads) == set(expected) == set(unbatched)
    for key in expected:
        assert tuple(grads[key].shape) == tuple(expected[key].shape)
        close(grads[key], expected[key])
        close(unbatched[key], expected_unbatched[key])


def test_vmap_of_a_cell_over_samples_has_no_fallback():
    cell, tcell = twin("GRUCell", 3, 4)
    x, tx = pair(5, 3)
    h, th = pair(5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = mt.func.vmap(cell)(x, h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.func itself loops over samples for gru_cell
        close(out, torch.func.vmap(tcell)(tx, th))
