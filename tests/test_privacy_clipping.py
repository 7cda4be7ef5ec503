"""``privacy.clipped_grad_sum``: ghost norms and the vmap reference against torch.func
(per-sample gradients, clipped, summed) for models of every op with a norm rule, the
per-parameter fallback (a parameter used outside a layer, tied weights), that rule
parameters really take their rule and never hold a gradient per sample, and the errors."""
import tracemalloc

import numpy as np
import pytest

import microtensor as mt
from microtensor.privacy import clipped_grad_sum, clipping, ghost_plan

try:
    import torch
    import torch.nn.functional as TF
except ImportError:       # the vmap reference still checks ghost norms
    torch = None

RNG = np.random.default_rng(13)


def arrays(shapes):
    return {k: RNG.standard_normal(s) * 0.5 for k, s in shapes.items()}


def torch_reference(loss_fn, params, batch, max_grad_norm):
    """Per-sample gradients by torch.func, clipped with Opacus's factor, summed."""
    tparams = {k: torch.tensor(v) for k, v in params.items()}
    tbatch = [torch.tensor(b) for b in batch]
    per_sample = torch.func.vmap(torch.func.grad(lambda p, *s: loss_fn(p, *s, TF)),
                                 in_dims=(None,) + (0,) * len(batch))(tparams, *tbatch)
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in per_sample.values()], 1)
    norms = flat.norm(dim=1)
    factors = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    summed = {k: torch.einsum("i,i...->...", factors, g) for k, g in per_sample.items()}
    return {k: v.numpy() for k, v in summed.items()}, norms.numpy()


def check(loss_fn, shapes, batch, max_grad_norm=1.0, expect_clipping=None):
    """Ghost and vmap agree with each other and with torch.func; returns the norms."""
    params = arrays(shapes)
    ours = {k: mt.tensor(v) for k, v in params.items()}
    inputs = [mt.tensor(b) for b in batch]
    results = {}
    for method in ("ghost", "vmap"):
        summed, norms = clipped_grad_sum(lambda p, *s: loss_fn(p, *s, mt.nn.functional), ours,
                                         *inputs, max_grad_norm=max_grad_norm, method=method)
        assert set(summed) == set(params) and tuple(norms.shape) == (batch[0].shape[0],)
        results[method] = ({k: v.numpy() for k, v in summed.items()}, norms.numpy())
    references = [results["vmap"]]
    if torch is not None:
        references.append(torch_reference(loss_fn, params, batch, max_grad_norm))
    for summed, norms in references:
        np.testing.assert_allclose(results["ghost"][1], norms, rtol=1e-9, atol=1e-12)
        for k in params:
            assert results["ghost"][0][k].shape == params[k].shape
            np.testing.assert_allclose(results["ghost"][0][k], summed[k], rtol=1e-9,
                                       atol=1e-12, err_msg=k)
    norms = results["ghost"][1]
    if expect_clipping == "some":
        assert (norms > max_grad_norm).any() and (norms < max_grad_norm).any()
    elif expect_clipping == "none":
        assert (norms < max_grad_norm).all()
    return norms


def plan(loss_fn, shapes, batch):
    params = {k: mt.tensor(v) for k, v in arrays(shapes).items()}
    return ghost_plan(lambda p, *s: loss_fn(p, *s, mt.nn.functional), params,
                      *[mt.tensor(b) for b in batch])


# --------------------------------------------------------------------------- models

def mlp(p, x, y, F):
    h = F.relu(F.linear(x, p["w1"], p["b1"]))
    h = F.linear(h, p["w2"], p.get("b2")).tanh()
    return F.cross_entropy(F.linear(h, p["w3"], p["b3"]).unsqueeze(0), y.unsqueeze(0))


MLP = {"w1": (16, 10), "b1": (16,), "w2": (12, 16), "w3": (4, 12), "b3": (4,)}


def mlp_batch(size=7):
    return [RNG.standard_normal((size, 10)), RNG.integers(0, 4, size)]


def sequence_model(p, tokens, F):
    """Embedding, a linear layer over every token, a layer norm, a mean: several rows per
    sample for each layer (the padding token gets no gradient)."""
    h = F.embedding(tokens, p["emb"], padding_idx=0)
    h = F.layer_norm(F.linear(h, p["w"], p["b"]).tanh(), (6,), p["ln_w"], p["ln_b"])
    return (F.linear(h, p["out"]) ** 2).mean()


SEQUENCE = {"emb": (9, 5), "w": (6, 5), "b": (6,), "ln_w": (6,), "ln_b": (6,),
            "out": (3, 6)}


def sequence_batch(size=6, length=5):
    return [RNG.integers(0, 9, (size, length))]


def cnn(p, x, y, F):
    h = F.conv2d(x.unsqueeze(0), p["c1"], p["c1b"], padding=1)
    h = F.relu(F.group_norm(h, 2, p["gn_w"], p["gn_b"]))
    h = F.conv2d(h, p["c2"], None, stride=2, groups=2)
    return F.cross_entropy(F.linear(h.flatten(1), p["fc"], p["fcb"]), y.unsqueeze(0))


CNN = {"c1": (4, 1, 3, 3), "c1b": (4,), "gn_w": (4,), "gn_b": (4,), "c2": (4, 2, 2, 2),
       "fc": (3, 36), "fcb": (3,)}


def conv1d_model(p, x, F):
    h = F.conv1d(x, p["w"], p["b"], stride=2, padding=1, dilation=2).tanh()
    return (F.rms_norm(h.transpose(0, 1), (4,), p["g"]) ** 2).sum()


def conv3d_model(p, x, F):
    return (F.conv3d(x, p["w"], p["b"], padding="same") ** 2).mean()


# --------------------------------------------------------------------------- agreement

def test_mlp_matches_torch_func_with_some_samples_clipped():
    batch = mlp_batch()
    norms = check(mlp, MLP, batch, max_grad_norm=1.0)
    check(mlp, MLP, batch, max_grad_norm=float(np.median(norms)), expect_clipping="some")
    check(mlp, MLP, batch, max_grad_norm=float(norms.max()) * 2, expect_clipping="none")


def test_mlp_takes_rules_for_every_parameter():
    assert plan(mlp, MLP, mlp_batch()) == {k: "linear" for k in MLP}


def test_sequence_model_matches_torch_func():
    batch = sequence_batch()
    batch[0][0, :2] = 0                   # padding tokens
    check(sequence_model, SEQUENCE, batch, max_grad_norm=0.05)
    assert plan(sequence_model, SEQUENCE, batch) == {
        "emb": "embedding", "w": "linear", "b": "linear", "ln_w": "layer_norm",
        "ln_b": "layer_norm", "out": "linear"}


@pytest.mark.parametrize("rows", [2, 40])
def test_linear_over_many_rows_both_ways(rows):
    """Few rows: the Gram matrices; many rows (T² > in·out): the per-sample product."""
    def model(p, x, F):
        return (F.linear(x, p["w"], p["b"]).sin()).sum()
    check(model, {"w": (2, 3), "b": (2,)}, [RNG.standard_normal((4, rows, 3))], 0.5)


def test_cnn_with_group_norm_matches_torch_func():
    batch = [RNG.standard_normal((5, 1, 6, 6)), RNG.integers(0, 3, 5)]
    check(cnn, CNN, batch, max_grad_norm=0.5)
    assert plan(cnn, CNN, batch) == {"c1": "convolution", "c1b": "convolution",
                                     "gn_w": "group_norm", "gn_b": "group_norm",
                                     "c2": "convolution", "fc": "linear", "fcb": "linear"}


def test_chunked_rules_agree(monkeypatch):
    """The unfolded input of a convolution, formed a few samples at a time when larger than
    the input: one sample at a time here (the first layer's patches are 9 times its input),
    the same results."""
    from microtensor.ops import ghost
    chunks = []
    original = ghost.by_chunks

    def counted(fn, per_sample, budget, *tensors):
        chunks.append(max(1, max(ghost._CHUNK_ELEMENTS, budget) // per_sample))
        return original(fn, per_sample, budget, *tensors)
    monkeypatch.setattr(ghost, "_CHUNK_ELEMENTS", 1)
    monkeypatch.setattr(ghost, "by_chunks", counted)
    check(cnn, CNN, [RNG.standard_normal((5, 1, 6, 6)), RNG.integers(0, 3, 5)], 0.5)
    assert 1 in chunks


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")   # PyTorch's
def test_conv1d_with_rms_norm_and_conv3d_match_torch_func():
    check(conv1d_model, {"w": (4, 2, 3), "b": (4,), "g": (4,)},
          [RNG.standard_normal((5, 2, 7))], 1.0)
    assert plan(conv1d_model, {"w": (4, 2, 3), "b": (4,), "g": (4,)},
                [RNG.standard_normal((5, 2, 7))]) == {"w": "convolution", "b": "convolution",
                                                      "g": "rms_norm"}
    check(conv3d_model, {"w": (2, 2, 2, 3, 2), "b": (2,)},
          [RNG.standard_normal((3, 1, 2, 4, 4, 3))], 1.0)


def test_parameter_outside_any_layer_falls_back_alone():
    def model(p, x, y, F):
        h = F.linear(x * p["scale"], p["w"], p["b"])
        return F.cross_entropy(h.unsqueeze(0), y.unsqueeze(0))
    shapes = {"scale": (10,), "w": (4, 10), "b": (4,)}
    check(model, shapes, mlp_batch(), max_grad_norm=0.3)
    assert plan(model, shapes, mlp_batch()) == {"scale": "vmap", "w": "linear",
                                                "b": "linear"}


def test_tied_weights_fall_back_exactly():
    """An embedding tied to the output layer: two rules' calls, whose parts (the embedding's
    norms, the linear layer's rows) do not combine."""
    def model(p, tokens, F):
        h = F.embedding(tokens, p["emb"]).tanh()
        logits = F.linear(F.linear(h, p["w"], p["b"]), p["emb"])
        return F.cross_entropy(logits, tokens.roll(1, 0))
    shapes = {"emb": (7, 4), "w": (4, 4), "b": (4,)}
    batch = [RNG.integers(0, 7, (5, 6))]
    check(model, shapes, batch, max_grad_norm=0.2)
    assert plan(model, shapes, batch) == {"emb": "vmap", "w": "linear", "b": "linear"}


def test_output_modified_in_place_keeps_the_layers_gradient():
    """An in-place activation moves the output tensor's graph edge: the rule must read the
    gradient the layer's node received."""
    def model(p, x, F):
        h = F.relu(F.linear(x, p["w"], p["b"]), inplace=True)
        return (F.linear(h, p["v"]) ** 2).sum()
    shapes = {"w": (5, 3), "b": (5,), "v": (2, 5)}
    check(model, shapes, [RNG.standard_normal((4, 3))], 0.7)
    assert plan(model, shapes, [RNG.standard_normal((4, 3))]) == {k: "linear" for k in shapes}


def test_layer_used_twice_stacks_its_rows():
    """Two calls of one linear layer: the weight's gradient is the sum of two outer-product
    sums, one sum over both calls' rows."""
    def model(p, x, F):
        return (F.linear(F.linear(x, p["w"], p["b"]).tanh(), p["w"], p["b"]) ** 2).sum()
    shapes = {"w": (3, 3), "b": (3,)}
    check(model, shapes, [RNG.standard_normal((4, 3))], 0.7)
    assert plan(model, shapes, [RNG.standard_normal((4, 3))]) == {"w": "linear",
                                                                   "b": "linear"}


def recurrent(p, xs, F):
    """A tanh RNN written as a loop: the recurrent weight serves every step."""
    h = F.linear(xs[0], p["wx"], p["bx"]).tanh()
    for x in xs[1:]:
        h = (F.linear(x, p["wx"], p["bx"]) + F.linear(h, p["wh"], p["bh"])).tanh()
    return (F.linear(h, p["out"]) ** 2).sum()


RECURRENT = {"wx": (5, 3), "bx": (5,), "wh": (5, 5), "bh": (5,), "out": (2, 5)}


def test_recurrent_loop_takes_rules():
    batch = [RNG.standard_normal((4, 6, 3))]
    check(recurrent, RECURRENT, batch, 0.5)
    assert plan(recurrent, RECURRENT, batch) == {k: "linear" for k in RECURRENT}


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_recurrent_modules_take_rules(kind):
    """The zero initial state is not batched: the observer batches it (every sample the
    same), so the recurrent weights' first step is recorded per sample too."""
    mt.manual_seed(0)
    module = getattr(mt.nn, kind)(3, 4, batch_first=True)
    params = {k: v.detach() for k, v in module.named_parameters()}

    def loss(p, seq):
        out = mt.func.functional_call(module, p, (seq.unsqueeze(0),))[0]
        return out.pow(2).sum()
    seqs = mt.randn(4, 5, 3, dtype=mt.float32)
    assert ghost_plan(loss, params, seqs) == {k: "linear" for k in params}
    ghost = clipped_grad_sum(loss, params, seqs, max_grad_norm=0.3)
    reference = clipped_grad_sum(loss, params, seqs, max_grad_norm=0.3, method="vmap")
    assert mt.allclose(ghost[1], reference[1], rtol=1e-5)
    for k in params:
        assert mt.allclose(ghost[0][k], reference[0][k], rtol=1e-4, atol=1e-6), k


def test_parameter_used_through_a_view_falls_back():
    """A weight that a convolution uses through a view and a linear layer directly: the
    view's edge into it belongs to no rule's call."""
    def model(p, x, F):
        h = F.conv1d(x, p["w"].unsqueeze(-1))
        return (F.linear(h.transpose(0, 1), p["w"]) ** 2).sum()
    check(model, {"w": (3, 3)}, [RNG.standard_normal((4, 3, 5))], 0.7)
    assert plan(model, {"w": (3, 3)}, [RNG.standard_normal((4, 3, 5))]) == {"w": "vmap"}


def test_parameter_that_does_not_reach_the_loss_gets_zeros():
    def model(p, x, F):
        F.linear(x, p["unused"])
        return (F.linear(x, p["w"]) ** 2).sum()
    check(model, {"unused": (2, 3), "w": (2, 3)}, [RNG.standard_normal((4, 3))], 0.7)


# --------------------------------------------------------------------------- ghost path

def test_ghost_never_calls_the_fallback_for_rule_parameters(monkeypatch):
    calls = []
    original = clipping._fallback_norms

    def counted(loss_fn, leaves, batch, keys):
        calls.append(sorted(keys))
        return original(loss_fn, leaves, batch, keys)
    monkeypatch.setattr(clipping, "_fallback_norms", counted)
    params = {k: mt.tensor(v) for k, v in arrays(MLP).items()}
    batch = [mt.tensor(b) for b in mlp_batch()]
    clipped_grad_sum(lambda p, *s: mlp(p, *s, mt.nn.functional), params, *batch,
                     max_grad_norm=1.0)
    assert calls == []
    params["scale"] = mt.ones(10, dtype=mt.float64)
    clipped_grad_sum(lambda p, x, y: mlp(p, x * p["scale"], y, mt.nn.functional), params,
                     *batch, max_grad_norm=1.0)
    assert calls == [["scale"]]


def test_ghost_holds_no_per_sample_gradients():
    """A batch × parameters tensor would be 36 MB here; ghost clipping's peak stays under a
    quarter of that (its activations and output gradients take about 1.4 MB), while the
    vmap reference's peak exceeds it."""
    mt.manual_seed(0)
    params = {"w1": mt.randn(256, 128) * 0.05, "b1": mt.zeros(256),
              "w2": mt.randn(10, 256) * 0.05, "b2": mt.zeros(10)}
    x, y = mt.randn(256, 128), mt.randint(0, 10, (256,))
    per_sample_bytes = 256 * sum(p.numel() for p in params.values()) * 4

    def loss(p, x, y):
        h = mt.nn.functional.linear(x, p["w1"], p["b1"]).relu()
        logits = mt.nn.functional.linear(h, p["w2"], p["b2"])
        return mt.nn.functional.cross_entropy(logits.unsqueeze(0), y.unsqueeze(0))

    peaks = {}
    for method in ("ghost", "vmap"):
        tracemalloc.start()
        clipped_grad_sum(loss, params, x, y, max_grad_norm=1.0, method=method)
        peaks[method] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["vmap"] > per_sample_bytes
    assert peaks["ghost"] < per_sample_bytes / 4, (peaks, per_sample_bytes)


def test_observer_is_removed_even_when_the_loss_fails():
    def broken(p, x):
        mt.nn.functional.linear(x, p["w"])
        raise KeyError("boom")
    with pytest.raises(KeyError):
        clipped_grad_sum(broken, {"w": mt.randn(2, 3)}, mt.randn(4, 3), max_grad_norm=1.0)
    assert clipping._observers == 0 and clipping._local.tape is None


def test_user_parameters_are_left_alone():
    params = {"w": mt.randn(2, 3, requires_grad=True)}
    summed, _ = clipped_grad_sum(lambda p, x: (mt.nn.functional.linear(x, p["w"]) ** 2).sum(),
                                 params, mt.randn(4, 3), max_grad_norm=1.0)
    assert params["w"].grad is None and not summed["w"].requires_grad


def test_rules_are_declared_on_their_ops():
    from microtensor import explain
    with_rules = {name for name, op in mt.ops.REGISTRY.items() if op.norm_rule is not None}
    assert with_rules >= {"linear", "convolution", "embedding", "layer_norm", "group_norm",
                          "rms_norm"}
    text = explain.op("embedding")
    assert "norm rule      embedding  " in text and "ops/embedding.py:" in text
    assert "activation indices, for weight" in text


# --------------------------------------------------------------------------- errors

def _loss(p, x):
    return (mt.nn.functional.linear(x, p["w"]) ** 2).sum()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(max_grad_norm=0.0), ValueError, "max_grad_norm must be positive, got 0.0"),
    (dict(max_grad_norm=-1), ValueError, "max_grad_norm must be positive"),
    (dict(max_grad_norm="1"), TypeError, "max_grad_norm must be a number"),
    (dict(max_grad_norm=1.0, method="loop"), ValueError, "method must be one of"),
])
def test_bad_options_raise(kwargs, error, message):
    with pytest.raises(error, match=message):
        clipped_grad_sum(_loss, {"w": mt.randn(2, 3)}, mt.randn(4, 3), **kwargs)


def test_bad_params_and_batches_raise():
    with pytest.raises(TypeError, match="params must be a dict of tensors"):
        clipped_grad_sum(_loss, [mt.randn(2, 3)], mt.randn(4, 3), max_grad_norm=1.0)
    with pytest.raises(TypeError, match="params must be a dict of tensors, got a dict of"):
        clipped_grad_sum(_loss, {"w": np.zeros((2, 3))}, mt.randn(4, 3), max_grad_norm=1.0)
    with pytest.raises(ValueError, match=r"same first size, got sizes \[4, 5\]"):
        clipped_grad_sum(_loss, {"w": mt.randn(2, 3)}, mt.randn(4, 3), mt.randn(5),
                         max_grad_norm=1.0)
    with pytest.raises(ValueError, match="at least one batch tensor"):
        clipped_grad_sum(_loss, {"w": mt.randn(2, 3)}, max_grad_norm=1.0)


@pytest.mark.parametrize("method", ["ghost", "vmap"])
def test_loss_must_be_a_scalar_per_sample(method):
    with pytest.raises(RuntimeError, match="to return a scalar Tensor, got tensor with 1 dims"):
        clipped_grad_sum(lambda p, x: mt.nn.functional.linear(x, p["w"]), {"w": mt.randn(2, 3)},
                         mt.randn(4, 3), max_grad_norm=1.0, method=method)
