"""nn.TransformerDecoderLayer, TransformerDecoder and Transformer, and the lazy modules
(LazyLinear, LazyConv*, LazyConvTranspose*, LazyBatchNorm*, LazyInstanceNorm*), against
PyTorch: a PyTorch model's state_dict loads and gives the same outputs and gradients
(float64, eval mode), the same repr, state_dict keys, initialisation and errors."""
import inspect

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the oracle of these "
                                            "tests)")
# PyTorch's own notices about its fast paths (nested tensors, mask types), not ours
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True",
                                        "ignore:Support for mismatched key_padding_mask")


def to_torch(t, requires_grad=False):
    out = torch.tensor(np.array(t.detach().numpy()))
    return out.requires_grad_(requires_grad)


def copied(model, reference):
    """``model`` (microtensor) holding ``reference``'s (PyTorch) state, in float64."""
    model.double()
    model.load_state_dict({k: mt.tensor(v.detach().double().numpy())
                           for k, v in reference.state_dict().items()})
    return model


def close(ours, theirs, rtol=1e-9, atol=1e-11):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()), theirs.detach().numpy(),
                               rtol=rtol, atol=atol)


def pair(name, *args, **kwargs):
    """The same module built by both libraries, ours holding PyTorch's (float64) weights,
    both in eval mode."""
    reference = getattr(torch.nn, name)(*args, **kwargs).double().eval()
    ours = getattr(mt.nn, name)(*args, **kwargs)
    return copied(ours, reference).eval(), reference


def inputs(*shapes):
    """Random float64 inputs requiring grad: ours and PyTorch's copies of them."""
    ours = [mt.randn(*s, dtype=mt.float64, requires_grad=True) for s in shapes]
    return ours, [to_torch(x, requires_grad=True) for x in ours]


def check_forward_backward(ours, reference, args, torch_args, **masks):
    """Outputs, then the gradients of every parameter and input, equal to PyTorch's."""
    torch_masks = {k: v if v is None or isinstance(v, bool) else to_torch(v)
                   for k, v in masks.items()}
    out, expected = ours(*args, **masks), reference(*torch_args, **torch_masks)
    close(out, expected)
    weights = mt.randn(*out.shape, dtype=mt.float64)
    (out * weights).sum().backward()
    (expected * to_torch(weights)).sum().backward()
    theirs = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, theirs[name].grad)
    for x, tx in zip(args, torch_args):
        close(x.grad, tx.grad)


def causal(n):
    return mt.nn.Transformer.generate_square_subsequent_mask(n, dtype=mt.float64)


def padding(batch, length, lengths):
    """A bool key-padding mask: True past each sequence's length."""
    return mt.arange(length).unsqueeze(0) >= mt.tensor(lengths).unsqueeze(1)


# --------------------------------------------------------------------------- decoder layer

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_pytorch(norm_first, batch_first, activation):
    ours, reference = pair("TransformerDecoderLayer", 8, 2, dim_feedforward=12,
                           activation=activation, norm_first=norm_first,
                           batch_first=batch_first)
    shape = (lambda n, length: (n, length, 8)) if batch_first else \
        (lambda n, length: (length, n, 8))
    args, torch_args = inputs(shape(3, 5), shape(3, 4))
    check_forward_backward(ours, reference, args, torch_args)


def test_decoder_layer_masks_match_pytorch():
    ours, reference = pair("TransformerDecoderLayer", 8, 2, dim_feedforward=12,
                           batch_first=True)
    args, torch_args = inputs((3, 5, 8), (3, 4, 8))
    memory_mask = mt.rand(5, 4) > 0.7                     # bool: True is not attended
    memory_mask[:, 0] = False                             # each row attends something
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5),
                           memory_mask=memory_mask,
                           tgt_key_padding_mask=padding(3, 5, [5, 3, 1]),
                           memory_key_padding_mask=padding(3, 4, [2, 4, 3]),
                           tgt_is_causal=True)


def test_decoder_layer_callable_activation_bias_and_eps():
    reference = torch.nn.TransformerDecoderLayer(
        8, 4, dim_feedforward=6, activation=torch.nn.functional.gelu, bias=False,
        layer_norm_eps=1e-3).double().eval()
    ours = copied(mt.nn.TransformerDecoderLayer(
        8, 4, dim_feedforward=6, activation=mt.nn.functional.gelu, bias=False,
        layer_norm_eps=1e-3), reference).eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    assert ours.norm3.eps == 1e-3 and ours.self_attn.in_proj_bias is None
    args, torch_args = inputs((5, 2, 8), (3, 2, 8))
    check_forward_backward(ours, reference, args, torch_args)


def test_decoder_layer_module_activation_is_a_child():
    reference = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=6,
                                                 activation=torch.nn.GELU())
    ours = mt.nn.TransformerDecoderLayer(8, 2, dim_feedforward=6, activation=mt.nn.GELU())
    assert repr(ours) == repr(reference)
    assert "activation" in dict(ours.named_children())


def test_decoder_layer_unbatched_matches_pytorch():
    ours, reference = pair("TransformerDecoderLayer", 8, 2, dim_feedforward=12)
    args, torch_args = inputs((5, 8), (4, 8))
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5),
                           tgt_key_padding_mask=mt.tensor([False] * 4 + [True]))


def test_decoder_layer_causal_hint_needs_a_mask():
    layer = mt.nn.TransformerDecoderLayer(8, 2, dim_feedforward=12)
    tgt, memory = mt.randn(5, 1, 8), mt.randn(4, 1, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal"):
        layer(tgt, memory, tgt_is_causal=True)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal"):
        layer(tgt, memory, memory_is_causal=True)


def test_unknown_activation_name_is_refused_as_pytorch():
    for cls in ("TransformerDecoderLayer", "TransformerEncoderLayer"):
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.nn, cls)(8, 2, activation="tanh")
        with pytest.raises(RuntimeError) as e:
            getattr(mt.nn, cls)(8, 2, activation="tanh")
        assert str(e.value) == str(theirs.value)


# --------------------------------------------------------------------------- decoder stack

def test_decoder_matches_pytorch():
    layer = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=12, norm_first=True)
    reference = torch.nn.TransformerDecoder(layer, 3, norm=torch.nn.LayerNorm(8)).double()
    ours = mt.nn.TransformerDecoder(mt.nn.TransformerDecoderLayer(8, 2, dim_feedforward=12,
                                                                  norm_first=True), 3,
                                    norm=mt.nn.LayerNorm(8))
    copied(ours, reference.eval()).eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    assert ours.num_layers == 3 and len(ours.layers) == 3
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    args, torch_args = inputs((5, 2, 8), (4, 2, 8))
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5),
                           memory_key_padding_mask=padding(2, 4, [4, 2]))


def test_decoder_detected_causal_mask_gives_pytorch_result():
    """tgt_is_causal=None: PyTorch looks whether tgt_mask is causal; the result is the
    masked one either way."""
    layer = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=12)
    reference = torch.nn.TransformerDecoder(layer, 2).double().eval()
    ours = copied(mt.nn.TransformerDecoder(mt.nn.TransformerDecoderLayer(8, 2, 12), 2),
                  reference).eval()
    args, torch_args = inputs((5, 3, 8), (4, 3, 8))
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5),
                           tgt_is_causal=None)


# --------------------------------------------------------------------------- Transformer

def small_transformer(lib, **kwargs):
    options = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                   dim_feedforward=12)
    options.update(kwargs)
    return lib.nn.Transformer(**options)


@pytest.mark.parametrize("options", [{}, {"batch_first": True, "norm_first": True},
                                     {"activation": "gelu", "bias": False,
                                      "layer_norm_eps": 1e-4}])
def test_transformer_matches_pytorch(options):
    reference = small_transformer(torch, **options).double().eval()
    ours = copied(small_transformer(mt, **options), reference).eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    n_src, n_tgt = 6, 5
    shape = (lambda n, length: (n, length, 8)) if options.get("batch_first") else \
        (lambda n, length: (length, n, 8))
    args, torch_args = inputs(shape(2, n_src), shape(2, n_tgt))
    check_forward_backward(ours, reference, args, torch_args)


def test_transformer_masks_match_pytorch():
    reference = small_transformer(torch).double().eval()
    ours = copied(small_transformer(mt), reference).eval()
    args, torch_args = inputs((6, 3, 8), (5, 3, 8))
    memory_mask = mt.zeros(5, 6, dtype=mt.float64)
    memory_mask[:, 4:] = -1.5                             # float: added to the scores
    src_mask = mt.rand(6, 6) > 0.7
    src_mask[:, 0] = False      # a row masked throughout is NaN here, 0 in PyTorch's SDPA
    check_forward_backward(ours, reference, args, torch_args, src_mask=src_mask,
                           tgt_mask=causal(5), memory_mask=memory_mask,
                           src_key_padding_mask=padding(3, 6, [6, 5, 2]),
                           tgt_key_padding_mask=padding(3, 5, [5, 5, 3]),
                           memory_key_padding_mask=padding(3, 6, [6, 5, 2]),
                           tgt_is_causal=True, memory_is_causal=False)


def test_transformer_unbatched_matches_pytorch():
    reference = small_transformer(torch).double().eval()
    ours = copied(small_transformer(mt), reference).eval()
    args, torch_args = inputs((6, 8), (5, 8))
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5))


def test_transformer_structure_and_repr_as_pytorch():
    reference, ours = small_transformer(torch), small_transformer(mt)
    assert repr(ours) == repr(reference)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in reference.state_dict().items()]
    assert (ours.d_model, ours.nhead, ours.batch_first) == (8, 2, False)
    custom = mt.nn.Transformer(8, 2, custom_encoder=mt.nn.Identity(),
                               custom_decoder=mt.nn.Linear(8, 8))
    assert isinstance(custom.encoder, mt.nn.Identity)
    assert list(custom.state_dict()) == ["decoder.weight", "decoder.bias"]


def test_transformer_initialisation_as_pytorch():
    """Every parameter of more than one dimension is Xavier-uniform; the others keep their
    layer's initialisation (LayerNorm ones and zeros, attention biases zero, Linear biases
    uniform in +-1/sqrt(fan_in))."""
    model = small_transformer(mt, num_encoder_layers=1, num_decoder_layers=1,
                              d_model=16, dim_feedforward=32)
    for name, p in model.named_parameters():
        values = np.abs(p.detach().numpy())
        if p.dim() > 1:
            bound = np.sqrt(6.0 / (p.shape[0] + p.shape[1]))
            assert values.max() <= bound and values.max() > 0.8 * bound, name
        elif "norm" in name:
            assert (values == (1.0 if name.endswith("weight") else 0.0)).all(), name
        elif "in_proj_bias" in name or "out_proj.bias" in name:
            assert (values == 0).all(), name
        else:       # linear1.bias, linear2.bias
            fan_in = 16 if "linear1" in name else 32
            assert values.max() <= 1 / np.sqrt(fan_in) and values.max() > 0, name


def test_transformer_refuses_mismatched_inputs_as_pytorch():
    for lib in (mt, torch):
        model = small_transformer(lib)
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be "
                                               "equal"):
            model(lib.randn(6, 2, 8), lib.randn(5, 3, 8))
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be "
                                               "equal to d_model"):
            model(lib.randn(6, 2, 8), lib.randn(5, 2, 6))
    batch_first = small_transformer(mt, batch_first=True)
    with pytest.raises(RuntimeError, match="batch number"):
        batch_first(mt.randn(2, 6, 8), mt.randn(3, 5, 8))


def test_generate_square_subsequent_mask_as_pytorch():
    for kwargs, torch_kwargs in (({}, {}), ({"dtype": mt.float64}, {"dtype": torch.float64})):
        mask = mt.nn.Transformer.generate_square_subsequent_mask(4, **kwargs)
        expected = torch.nn.Transformer.generate_square_subsequent_mask(4, **torch_kwargs)
        assert str(mask.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
        np.testing.assert_array_equal(mask.numpy(), expected.numpy())


def test_transformer_trains_with_dropout():
    """Training mode: dropout makes two calls differ, gradients reach every parameter;
    with dropout=0 a training-mode call equals the eval-mode one."""
    model = small_transformer(mt, dropout=0.3)
    src, tgt = mt.randn(6, 2, 8), mt.randn(5, 2, 8)
    first, second = model(src, tgt, tgt_mask=causal(5).float()), model(src, tgt)
    assert not np.allclose(first.detach().numpy(), second.detach().numpy())
    (first * mt.randn(5, 2, 8)).sum().backward()    # (a LayerNorm'd output's norm is fixed)
    assert all(p.grad is not None and np.isfinite(p.grad.numpy()).all()
               for p in model.parameters())
    optimizer = mt.optim.SGD(model.parameters(), lr=0.1)
    before = model.decoder.layers[0].linear1.weight.detach().clone()
    optimizer.step()
    assert not np.allclose(before.numpy(),
                           model.decoder.layers[0].linear1.weight.detach().numpy())
    still = small_transformer(mt, dropout=0.0)
    train = still(src, tgt).detach().numpy()
    np.testing.assert_allclose(still.eval()(src, tgt).detach().numpy(), train, rtol=1e-6)


@pytest.mark.parametrize("name", ["TransformerDecoderLayer", "TransformerDecoder",
                                  "Transformer", "TransformerEncoderLayer",
                                  "TransformerEncoder"])
def test_transformer_signatures_as_pytorch(name):
    for method in ("__init__", "forward"):
        ours = inspect.signature(getattr(getattr(mt.nn, name), method)).parameters
        theirs = inspect.signature(getattr(getattr(torch.nn, name), method)).parameters
        assert list(ours) == list(theirs), (name, method)
        for arg, p in theirs.items():
            if p.default is not inspect.Parameter.empty and not callable(p.default):
                assert ours[arg].default == p.default, (name, method, arg)
