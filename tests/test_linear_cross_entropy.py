"""``F.linear_cross_entropy``, ``nn.LinearCrossEntropyLoss`` and
``nn.LinearCrossEntropyOptions`` against PyTorch: values and gradients of the reference
and the chunked forms over batched, unbatched and K-dimensional calls, class weights,
ignored targets, label smoothing and probability targets; the checks and their errors;
the module's repr, state_dict and loading in both directions; the chunked form keeps no
whole logits for the backward pass."""
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.autograd import gradcheck
from microtensor.func import grad, vmap

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def to_np(t):
    return np.array(t.detach()._array())


def both(array, requires_grad=False):
    ours = mt.tensor(array)
    theirs = torch.tensor(array)
    if requires_grad:
        ours.requires_grad_()
        theirs.requires_grad_()
    return ours, theirs


def _call(lib, input, linear_weight, target, options, **kwargs):
    if options is not None:
        options = lib.nn.LinearCrossEntropyOptions(**options)
    return lib.nn.functional.linear_cross_entropy(input, linear_weight, target,
                                                  options=options, **kwargs)


CASES = {
    "plain": dict(),
    "bias": dict(bias=True),
    "class weights": dict(class_weight=True),
    "ignored rows": dict(ignore=True),
    "weights and ignored": dict(class_weight=True, ignore=True, bias=True),
    "sum": dict(reduction="sum"),
    "none": dict(reduction="none", ignore=True),
    "unbatched": dict(unbatched=True),
    "unbatched none": dict(unbatched=True, reduction="none"),
}
OPTIONS = [None, dict(batch_chunk_size=1), dict(batch_chunk_size=3),
           dict(chunking_method="aspect_ratio"), dict()]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_match_torch(case, options):
    spec = CASES[case]
    rng = np.random.default_rng(0)
    n, features, classes = 7, 4, 5
    x, tx = both(rng.standard_normal(features if spec.get("unbatched") else (n, features)),
                 requires_grad=True)
    w, tw = both(rng.standard_normal((classes, features)), requires_grad=True)
    labels = rng.integers(0, classes, () if spec.get("unbatched") else n)
    if spec.get("ignore"):
        labels[::3] = -100
    y, ty = mt.tensor(labels), torch.tensor(labels)
    kwargs, tkwargs = {}, {}
    if spec.get("bias"):
        kwargs["linear_bias"], tkwargs["linear_bias"] = both(rng.standard_normal(classes),
                                                             requires_grad=True)
    if spec.get("class_weight"):
        kwargs["weight"], tkwargs["weight"] = both(rng.random(classes) + 0.5)
    if "reduction" in spec:
        kwargs["reduction"] = tkwargs["reduction"] = spec["reduction"]
    ours = _call(mt, x, w, y, options, **kwargs)
    theirs = _call(torch, tx, tw, ty, options, **tkwargs)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=1e-12, atol=1e-12)
    upstream = rng.standard_normal(tuple(theirs.shape))
    ours.backward(mt.tensor(upstream))
    theirs.backward(torch.tensor(upstream))
    pairs = [(x, tx), (w, tw)]
    if spec.get("bias"):
        pairs.append((kwargs["linear_bias"], tkwargs["linear_bias"]))
    for a, b in pairs:
        np.testing.assert_allclose(to_np(a.grad), b.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("extra", [dict(), dict(bias=True), dict(label_smoothing=0.2),
                                   dict(probabilities=True)], ids=str)
def test_k_dimensional_smoothing_and_probability_targets_match_torch(extra):
    """These take the reference form; with options PyTorch warns that they are ignored."""
    rng = np.random.default_rng(1)
    x, tx = both(rng.standard_normal((3, 4)), requires_grad=True)
    w, tw = both(rng.standard_normal((5, 2, 4)) if "probabilities" not in extra
                 else rng.standard_normal((5, 4)), requires_grad=True)
    kwargs, tkwargs = {}, {}
    if extra.get("bias"):
        kwargs["linear_bias"], tkwargs["linear_bias"] = both(rng.standard_normal((5, 2)))
    if "label_smoothing" in extra:
        kwargs["label_smoothing"] = tkwargs["label_smoothing"] = extra["label_smoothing"]
    if extra.get("probabilities"):
        p = rng.random((3, 5))
        y, ty = both(p / p.sum(1, keepdims=True))
    else:
        labels = rng.integers(0, 5, (3, 2) if "label_smoothing" not in extra else (3, 2))
        y, ty = mt.tensor(labels), torch.tensor(labels)
    for options in (None, dict(batch_chunk_size=2)):
        with warnings.catch_warnings(record=True) as ours_warned:
            warnings.simplefilter("always")
            ours = _call(mt, x, w, y, options, **kwargs)
        with warnings.catch_warnings(record=True) as theirs_warned:
            warnings.simplefilter("always")
            theirs = _call(torch, tx, tw, ty, options, **tkwargs)
        assert len(ours_warned) == len(theirs_warned)
        if ours_warned:
            assert "options`` ignored" in str(ours_warned[0].message)
        np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=1e-12)
        g, = mt.autograd.grad(ours, w)
        tg, = torch.autograd.grad(theirs, tw)
        np.testing.assert_allclose(to_np(g), tg.numpy(), rtol=1e-10, atol=1e-12)


ERRORS = {
    "3-d input": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 2, 3), lib.zeros(4, 3), lib.zeros(2, dtype=lib.int64)),
    "1-d weight": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 3), lib.zeros(3), lib.zeros(2, dtype=lib.int64)),
    "in_features": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 3), lib.zeros(4, 2), lib.zeros(2, dtype=lib.int64)),
    "bias shape": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 3), lib.zeros(4, 3), lib.zeros(2, dtype=lib.int64),
        linear_bias=lib.zeros(3)),
    "K-dim unbatched": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(3), lib.zeros(4, 2, 3), lib.zeros(2, dtype=lib.int64)),
    "ignore_index with probabilities": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 3), lib.zeros(4, 3), lib.zeros(2, 4), ignore_index=1),
    "module class weight": lambda lib: lib.nn.LinearCrossEntropyLoss(3, 4,
                                                                     weight=lib.ones(3)),
    "module smoothing": lambda lib: lib.nn.LinearCrossEntropyLoss(3, 4, label_smoothing=1.5),
    "reduction": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(2, 3), lib.zeros(4, 3), lib.zeros(2, dtype=lib.int64), reduction="bad"),
    "acc_policy": lambda lib: lib.nn.LinearCrossEntropyOptions(acc_policy="fast"),
    "chunking_method": lambda lib: lib.nn.LinearCrossEntropyOptions(
        chunking_method="aspect_ratio:0"),
    "batch_chunk_size": lambda lib: lib.nn.LinearCrossEntropyOptions(batch_chunk_size=0),
    "acc_dtype": lambda lib: lib.nn.LinearCrossEntropyOptions(acc_dtype=lib.int32),
    "two chunk sizes": lambda lib: lib.nn.functional.linear_cross_entropy(
        lib.zeros(8, 3), lib.zeros(4, 3), lib.zeros(8, dtype=lib.int64),
        options=lib.nn.LinearCrossEntropyOptions(batch_chunk_size=3,
                                                 chunking_method="aspect_ratio")),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_torch(case):
    with pytest.raises(Exception) as theirs:
        ERRORS[case](torch)
    with pytest.raises(type(theirs.value)) as ours:
        ERRORS[case](mt)
    expected = str(theirs.value).split("torch.")[0].split(",")[0][:40]
    assert expected in str(ours.value)


def test_module_repr_state_dict_and_loading_both_ways():
    for kwargs in (dict(bias=True), dict(out_features=(2,)), dict()):
        ours = mt.nn.LinearCrossEntropyLoss(4, 3, **kwargs)
        theirs = torch.nn.LinearCrossEntropyLoss(4, 3, **kwargs)
        assert repr(ours) == repr(theirs)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
        rng = np.random.default_rng(2)
        x = rng.standard_normal((6, 4)).astype(np.float32)
        labels = rng.integers(0, 3, (6, 2) if "out_features" in kwargs else 6)
        expected = theirs(torch.tensor(x), torch.tensor(labels))
        np.testing.assert_allclose(to_np(ours(mt.tensor(x), mt.tensor(labels))),
                                   expected.detach().numpy(), rtol=1e-6)
        back = torch.nn.LinearCrossEntropyLoss(4, 3, **kwargs)
        back.load_state_dict({k: torch.tensor(to_np(v)) for k, v in ours.state_dict().items()})
        for a, b in zip(back.parameters(), theirs.parameters()):
            assert torch.equal(a, b)


def test_module_with_options_and_class_weights_matches_torch():
    weight = np.array([1.0, 2.0, 0.5])
    options = dict(batch_chunk_size=2)
    ours = mt.nn.LinearCrossEntropyLoss(4, 3, weight=mt.tensor(weight), bias=True,
                                        options=mt.nn.LinearCrossEntropyOptions(**options))
    theirs = torch.nn.LinearCrossEntropyLoss(
        4, 3, weight=torch.tensor(weight), bias=True,
        options=torch.nn.LinearCrossEntropyOptions(**options), dtype=torch.float64)
    ours.to(mt.float64)
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(3)
    x, labels = rng.standard_normal((5, 4)), rng.integers(0, 3, 5)
    loss = ours(mt.tensor(x), mt.tensor(labels))
    expected = theirs(torch.tensor(x), torch.tensor(labels))
    np.testing.assert_allclose(to_np(loss), expected.detach().numpy(), rtol=1e-12)
    loss.backward()
    expected.backward()
    np.testing.assert_allclose(to_np(ours.linear.weight.grad),
                               theirs.linear.weight.grad.numpy(), rtol=1e-10)


def test_chunked_form_keeps_no_whole_logits():
    """Saved for the backward pass: nothing of the (rows, classes) logits' size, only
    the inputs the pieces recompute them from."""
    rows, features, classes = 64, 4, 50
    x = mt.randn(rows, features, requires_grad=True)
    w = mt.randn(classes, features, requires_grad=True)
    y = mt.randint(0, classes, (rows,))
    largest = []

    def pack(t):
        largest.append(t.numel())
        return t

    for options in (None, mt.nn.LinearCrossEntropyOptions(batch_chunk_size=8)):
        largest.clear()
        with mt.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = F.linear_cross_entropy(x, w, y, options=options)
        assert (max(largest) >= rows * classes) == (options is None)
        g, = mt.autograd.grad(loss, w)
        assert tuple(g.shape) == (classes, features)


def test_chunked_form_gradcheck_and_per_sample_gradients():
    x = mt.randn(6, 3, dtype=mt.float64, requires_grad=True)
    w = mt.randn(4, 3, dtype=mt.float64, requires_grad=True)
    b = mt.randn(4, dtype=mt.float64, requires_grad=True)
    y = mt.tensor([0, 3, 1, -100, 2, 3])
    options = mt.nn.LinearCrossEntropyOptions(batch_chunk_size=4)
    assert gradcheck(lambda x, w, b: F.linear_cross_entropy(x, w, y, linear_bias=b,
                                                            options=options), (x, w, b))

    def loss(w, x, y):
        return F.linear_cross_entropy(x, w, y)

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(w.detach(), x.detach(), y.clamp(0))
    for i in range(6):
        expected = grad(loss)(w.detach(), x.detach()[i], y.clamp(0)[i])
        np.testing.assert_allclose(to_np(per_sample[i]), to_np(expected), rtol=1e-12)
