"""F.embedding_bag and nn.EmbeddingBag against PyTorch: every mode with offsets and 2-D
input, include_last_offset, per_sample_weights, padding_idx, max_norm and
scale_grad_by_freq, values and gradients; errors; the module's parameters, init and repr;
per-sample gradients against torch.func."""
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.func import functional_call, grad, vmap

torch = pytest.importorskip("torch")
TF = torch.nn.functional

INDEX = [1, 2, 4, 5, 4, 3, 2, 0, 4, 4]
OFFSETS = [0, 2, 2, 5]


def th(t):
    return torch.from_numpy(np.array(t.detach().numpy()))


def run(lib, weight, input, offsets, psw, kwargs):
    """The bags, and the gradients of a weighted sum of them."""
    w = weight.clone().requires_grad_()
    p = None if psw is None else psw.clone().requires_grad_()
    functional = F if lib is mt else TF
    out = functional.embedding_bag(input, w, offsets, per_sample_weights=p, **kwargs)
    scale = lib.arange(out.numel(), dtype=out.dtype).reshape(out.shape).cos()
    (out * scale).sum().backward()
    return [out.detach(), w.grad] + ([] if p is None else [p.grad])


def check(weight, input, offsets=None, psw=None, **kwargs):
    ours = run(mt, weight, input, offsets, psw, kwargs)
    # PyTorch's CPU embedding_bag misaligns the counts of scale_grad_by_freq when a row
    # is missing from the input (F.embedding's are right): the documented gradient is
    # the plain one divided by each row's count in the batch
    scaled = kwargs.pop("scale_grad_by_freq", False)
    theirs = run(torch, th(weight), th(input), None if offsets is None else th(offsets),
                 None if psw is None else th(psw), kwargs)
    if scaled:
        counts = torch.bincount(th(input).reshape(-1), minlength=weight.shape[0])
        theirs[1] = theirs[1] / counts.clamp(min=1).unsqueeze(1)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


CASES = [dict(mode="sum"), dict(mode="mean"), dict(mode="max"),
         dict(mode="mean", padding_idx=4), dict(mode="max", padding_idx=-2),
         dict(mode="sum", padding_idx=4, include_last_offset=True),
         dict(mode="mean", scale_grad_by_freq=True), dict(mode="sum", scale_grad_by_freq=True,
                                                          padding_idx=2)]


@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_bags_and_gradients_match_torch(kwargs):
    weight = mt.randn(6, 3, dtype=mt.float64)
    offsets = OFFSETS + [len(INDEX)] if kwargs.get("include_last_offset") else OFFSETS
    check(weight, mt.tensor(INDEX), mt.tensor(offsets), **kwargs)
    check(weight, mt.tensor(INDEX).reshape(5, 2), **kwargs)


def test_per_sample_weights_match_torch():
    weight = mt.randn(6, 3, dtype=mt.float64)
    check(weight, mt.tensor(INDEX), mt.tensor(OFFSETS), mt.randn(10, dtype=mt.float64),
          mode="sum", padding_idx=5)
    check(weight, mt.tensor(INDEX).reshape(2, 5), None, mt.randn(2, 5, dtype=mt.float64),
          mode="sum")


def test_max_norm_renormalises_the_used_rows_like_torch():
    weight = mt.randn(6, 3, dtype=mt.float64) * 3
    theirs = th(weight)
    out = F.embedding_bag(mt.tensor(INDEX[:6]), weight, mt.tensor([0, 3]), max_norm=1.5,
                          norm_type=1.0)
    expected = TF.embedding_bag(th(mt.tensor(INDEX[:6])), theirs, torch.tensor([0, 3]),
                                max_norm=1.5, norm_type=1.0)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)
    np.testing.assert_allclose(weight.numpy(), theirs.numpy(), rtol=1e-12)


def test_empty_bags_and_empty_input_give_zeros():
    weight = mt.randn(5, 2)
    for mode in ("sum", "mean", "max"):
        out = F.embedding_bag(mt.tensor([], dtype=mt.int64), weight, mt.tensor([0, 0]),
                              mode=mode)
        assert out.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def errors(lib, functional, make):
    w, i, o = make([[0.0, 1.0]] * 6), make([1, 2, 4]), make([0, 2])
    calls = [lambda: functional.embedding_bag(i, w, o, mode="mean",
                                              per_sample_weights=make([1.0, 1.0, 1.0])),
             lambda: functional.embedding_bag(i, w, o, mode="foo"),
             lambda: functional.embedding_bag(i.reshape(1, 3), w, o),
             lambda: functional.embedding_bag(i, w),
             lambda: functional.embedding_bag(i, w, make([1, 3])),
             lambda: functional.embedding_bag(i, w, make([0, 9])),
             lambda: functional.embedding_bag(make([7]), w, make([0])),
             lambda: functional.embedding_bag(make([1.0]), w, make([0])),
             lambda: functional.embedding_bag(i, w, o, per_sample_weights=make([1.0])),
             lambda: functional.embedding_bag(i, w, o, padding_idx=6),
             lambda: functional.embedding_bag(i, w, o, padding_idx=-7),
             lambda: functional.embedding_bag(i, w[0], o),
             lambda: functional.embedding_bag(i, w, o, mode="max", scale_grad_by_freq=True),
             lambda: functional.embedding_bag(i, w, o, mode="max", sparse=True),
             lambda: functional.embedding_bag(i, w, o, mode="sum",
                                              per_sample_weights=make([1.0, 2.0, 3.0]).double())]
    found = []
    for call in calls:
        with pytest.raises(Exception) as info:
            call()
        found.append((info.type, str(info.value).split("\n")[0].replace("torch.", "")))
    return found


def test_errors_match_torch():
    ours = errors(mt, F, mt.tensor)
    theirs = errors(torch, TF, torch.tensor)
    for (our_type, our_message), (type_, message) in zip(ours, theirs):
        assert our_type is type_, (our_message, message)
        assert our_message.replace("microtensor.", "") == message.replace(
            "[ LongTensor{} ]", "").strip(), (our_message, message)


def test_module_parameters_init_repr_and_state_dict_like_torch():
    bag = mt.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=-2, max_norm=1.0,
                             scale_grad_by_freq=True)
    reference = torch.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=-2, max_norm=1.0,
                                      scale_grad_by_freq=True)
    assert repr(bag) == repr(reference)
    assert repr(mt.nn.EmbeddingBag(4, 2)) == repr(torch.nn.EmbeddingBag(4, 2))
    assert list(bag.state_dict()) == ["weight"] and tuple(bag.weight.shape) == (10, 3)
    assert bag.weight[8].tolist() == [0.0, 0.0, 0.0]
    big = mt.nn.EmbeddingBag(200, 50)
    assert abs(big.weight.detach().numpy().std() - 1) < 0.05      # N(0, 1)
    bag.load_state_dict({"weight": mt.tensor(reference.weight.detach().numpy())})
    x, offsets = torch.tensor([1, 8, 3, 3, 0]), torch.tensor([0, 1, 4])
    np.testing.assert_allclose(bag(mt.tensor(x.numpy()), mt.tensor(offsets.numpy())).detach()
                               .numpy(), reference(x, offsets).detach().numpy(), rtol=1e-6)
    frozen = mt.nn.EmbeddingBag.from_pretrained(mt.ones(3, 2), mode="sum")
    assert not frozen.weight.requires_grad
    assert frozen(mt.tensor([[0, 2]])).tolist() == [[2.0, 2.0]]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_per_sample_gradients_match_torch_func(mode):
    """Per-sample gradients of an EmbeddingBag classifier, as Opacus computes them."""
    model = mt.nn.Sequential(mt.nn.EmbeddingBag(12, 4, mode=mode, padding_idx=0),
                             mt.nn.Linear(4, 3)).double()
    reference = torch.nn.Sequential(torch.nn.EmbeddingBag(12, 4, mode=mode, padding_idx=0),
                                    torch.nn.Linear(4, 3)).double()
    model.load_state_dict({k: mt.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    data = np.random.default_rng(0).integers(0, 12, (5, 2, 4))     # 2 bags of 4 a sample
    targets = np.array([[0, 2], [1, 1], [0, 0], [2, 1], [1, 0]])

    def loss(lib, module, functional, params, x, y):
        return lib.nn.functional.cross_entropy(functional(module, params, (x,)), y)

    params = {k: v.detach() for k, v in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Batching rule not implemented")
        ours = vmap(grad(lambda p, x, y: loss(mt, model, functional_call, p, x, y)),
                    in_dims=(None, 0, 0))(params, mt.tensor(data), mt.tensor(targets))
    theirs = torch.func.vmap(torch.func.grad(
        lambda p, x, y: loss(torch, reference, torch.func.functional_call, p, x, y)),
        in_dims=(None, 0, 0))(dict(reference.named_parameters()), torch.tensor(data),
                              torch.tensor(targets))
    for name in ours:
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].detach().numpy(),
                                   rtol=1e-10, atol=1e-12)


def test_vmap_over_weights_indices_and_offsets_matches_a_loop():
    """An ensemble: per-sample tables, bags and offsets, with no loop fallback."""
    weight = mt.randn(3, 6, 2, dtype=mt.float64)
    index = mt.tensor([[1, 2, 4, 5], [0, 0, 3, 1], [5, 4, 3, 2]])
    offsets = mt.tensor([[0, 2], [0, 1], [0, 3]])
    for mode in ("sum", "mean", "max"):
        def bags(w, i, o):
            return F.embedding_bag(i, w, o, mode=mode, padding_idx=0)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="Batching rule not implemented")
            batched = vmap(bags)(weight, index, offsets)
        looped = mt.stack([bags(weight[k], index[k], offsets[k]) for k in range(3)])
        np.testing.assert_allclose(batched.numpy(), looped.numpy(), rtol=1e-12)
