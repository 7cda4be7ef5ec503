"""nn.TransformerDecoderLayer, TransformerDecoder and Transformer, and the lazy modules
(LazyLinear, LazyConv*, LazyConvTranspose*, LazyBatchNorm*, LazyInstanceNorm*), against
PyTorch: a PyTorch model's state_dict loads and gives the same outputs and gradients
(float64, eval mode), the same repr, state_dict keys, initialisation and errors."""
import copy
import inspect
import re

import numpy as np
import pytest

import microtensor as mt
from microtensor.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from test_tutorials import close, copied   # the shared float64 model helpers

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the oracle of these "
                                            "tests)")
# PyTorch's own notices about its fast paths (nested tensors, mask types), not ours
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True",
                                        "ignore:Support for mismatched key_padding_mask")


def to_torch(t, requires_grad=False):
    out = torch.tensor(np.array(t.detach().numpy()))
    return out.requires_grad_(requires_grad)


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
    check_forward_backward(ours, reference, args, torch_args, src_mask=src_mask,
                           tgt_mask=causal(5), memory_mask=memory_mask,
                           src_key_padding_mask=padding(3, 6, [6, 5, 2]),
                           tgt_key_padding_mask=padding(3, 5, [5, 5, 3]),
                           memory_key_padding_mask=padding(3, 6, [6, 5, 2]),
                           tgt_is_causal=True, memory_is_causal=False)


def test_queries_with_every_key_masked_as_pytorch():
    """Left padding under a causal mask leaves a query no key: PyTorch's attention kernel
    (need_weights=False, as the transformer layers call it) gives it zero weights, not the
    NaN of a softmax over -inf only; with need_weights=True PyTorch's result is NaN."""
    reference = small_transformer(torch).double().eval()
    ours = copied(small_transformer(mt), reference).eval()
    args, torch_args = inputs((6, 2, 8), (5, 2, 8))
    left_padded = mt.tensor([[True, True, False, False, False], [False] * 5])
    check_forward_backward(ours, reference, args, torch_args, tgt_mask=causal(5),
                           tgt_key_padding_mask=left_padded)
    assert np.isfinite(ours(*args, tgt_mask=causal(5), tgt_key_padding_mask=left_padded)
                       .detach().numpy()).all()
    attention, theirs = pair("MultiheadAttention", 4, 2)
    x = mt.randn(3, 1, 4, dtype=mt.float64)
    every = mt.tensor([[True, True, True], [False, True, True], [False, False, True]])
    for need_weights in (False, True):
        out = attention(x, x, x, attn_mask=every, need_weights=need_weights)[0]
        expected = theirs(to_torch(x), to_torch(x), to_torch(x), attn_mask=to_torch(every),
                          need_weights=need_weights)[0]
        close(out, expected)
        assert np.isnan(out[0].detach().numpy()).all() == need_weights


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


# --------------------------------------------------------------------------- lazy modules

# (class, constructor arguments, input shape, the class it becomes)
LAZY = [
    ("LazyLinear", (3,), {}, (4, 5), "Linear"),
    ("LazyLinear", (3,), {"bias": False}, (2, 4, 5), "Linear"),
    ("LazyConv1d", (4, 3), {"padding": 1}, (2, 3, 7), "Conv1d"),
    ("LazyConv2d", (4, 3), {"stride": 2, "groups": 2, "padding_mode": "reflect",
                            "padding": 1}, (2, 6, 6, 5), "Conv2d"),
    ("LazyConv3d", (2, 2), {"bias": False}, (1, 3, 4, 4, 3), "Conv3d"),
    ("LazyConv2d", (4, 3), {}, (3, 6, 5), "Conv2d"),                 # unbatched
    ("LazyConvTranspose1d", (4, 3), {"stride": 2, "output_padding": 1}, (2, 3, 5),
     "ConvTranspose1d"),
    ("LazyConvTranspose2d", (4, 3), {"groups": 2, "dilation": 2}, (1, 6, 4, 4),
     "ConvTranspose2d"),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 2), "ConvTranspose3d"),
    ("LazyBatchNorm1d", (), {}, (4, 3), "BatchNorm1d"),
    ("LazyBatchNorm1d", (), {"affine": False}, (4, 3, 5), "BatchNorm1d"),
    ("LazyBatchNorm2d", (), {"momentum": None, "eps": 1e-3}, (2, 3, 4, 4), "BatchNorm2d"),
    ("LazyBatchNorm3d", (), {"bias": False}, (2, 3, 2, 3, 2), "BatchNorm3d"),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 6), "InstanceNorm1d"),
    ("LazyInstanceNorm2d", (), {"affine": True, "track_running_stats": True},
     (2, 3, 4, 5), "InstanceNorm2d"),
    ("LazyInstanceNorm3d", (), {"affine": True}, (2, 3, 3, 4, 2), "InstanceNorm3d"),
]
LAZY_IDS = [f"{case[0]}-{i}" for i, case in enumerate(LAZY)]


def lazy_pair(name, args, kwargs):
    return getattr(mt.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)


def torch_state(reference):
    return {k: mt.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()}


@pytest.mark.parametrize("name,args,kwargs,shape,becomes", LAZY, ids=LAZY_IDS)
def test_lazy_module_materializes_on_first_forward_as_pytorch(name, args, kwargs, shape,
                                                               becomes):
    ours, reference = lazy_pair(name, args, kwargs)
    assert repr(ours) == repr(reference)
    assert list(ours.state_dict()) == list(reference.state_dict())
    assert ours.has_uninitialized_params() == reference.has_uninitialized_params()
    assert [type(v).__name__ for v in ours.state_dict().values()] == \
        [type(v).__name__ for v in reference.state_dict().values()]
    x = mt.randn(*shape)
    ours(x)
    reference(to_torch(x))
    assert type(ours) is getattr(mt.nn, becomes) and type(reference).__name__ == becomes
    assert repr(ours) == repr(reference)
    assert not ours._forward_pre_hooks and not ours._load_state_dict_pre_hooks
    assert [(k, tuple(v.shape), type(v).__name__) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape), type(v).__name__) for k, v in reference.state_dict().items()]
    assert all(type(p) is mt.nn.Parameter for p in ours.parameters())
    # with PyTorch's values, the same output, in training and in eval mode
    ours.load_state_dict(torch_state(reference))
    close(ours(x), reference(to_torch(x)), rtol=1e-5, atol=1e-6)
    close(ours.eval()(x), reference.eval()(to_torch(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,args,kwargs,shape,becomes", LAZY, ids=LAZY_IDS)
def test_lazy_module_loads_a_state_dict_as_pytorch(name, args, kwargs, shape, becomes):
    """Loading initialized tensors materializes the uninitialized ones with their shapes;
    the module stays lazy until its first forward, which then keeps the loaded values
    (PyTorch's norm layers keep num_features=0 then, so instance norm with affine
    parameters refuses that forward: the same here)."""
    reference = getattr(torch.nn, name)(*args, **kwargs)
    x = mt.randn(*shape)
    reference(to_torch(x))
    ours, theirs = lazy_pair(name, args, kwargs)
    assert repr(ours.load_state_dict(torch_state(reference))) == \
        repr(theirs.load_state_dict(reference.state_dict()))
    assert type(ours).__name__ == name and not ours.has_uninitialized_params()
    assert repr(ours) == repr(theirs)
    try:
        expected = theirs.eval()(to_torch(x))
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            ours.eval()(x)
        return
    close(ours.eval()(x), expected, rtol=1e-5, atol=1e-6)
    assert type(ours) is getattr(mt.nn, becomes) and repr(ours) == repr(theirs)


@pytest.mark.parametrize("name,args,kwargs,shape,becomes", LAZY, ids=LAZY_IDS)
def test_lazy_module_initialisation_as_its_ordinary_layer(name, args, kwargs, shape,
                                                          becomes):
    """After the first forward the parameters hold what the ordinary layer's
    reset_parameters gives (same shapes, so the same distribution; bounds checked)."""
    ours = getattr(mt.nn, name)(*args, **kwargs)
    ours.eval()(mt.randn(*shape))
    if hasattr(ours, "running_mean") and ours.running_mean is not None:
        assert (ours.running_mean.numpy() == 0).all() and (ours.running_var.numpy() == 1).all()
    if "Norm" in name:
        if ours.weight is not None:
            assert (ours.weight.detach().numpy() == 1).all()
        if ours.bias is not None:
            assert (ours.bias.detach().numpy() == 0).all()
        return
    weight = ours.weight.detach().numpy()
    fan_in = weight.shape[1] * int(np.prod(weight.shape[2:]))
    bound = 1 / np.sqrt(fan_in)            # kaiming_uniform_(a=sqrt(5)) and the bias bound
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.5 * bound
    if ours.bias is not None:
        assert np.abs(ours.bias.detach().numpy()).max() <= bound


def test_lazy_state_dict_holds_the_uninitialized_tensors_as_pytorch():
    model = mt.nn.LazyBatchNorm1d()
    state = model.state_dict()
    assert state["weight"] is model.weight and state["running_mean"] is model.running_mean
    assert type(state["weight"]) is UninitializedParameter
    assert type(state["running_var"]) is UninitializedBuffer and state["running_var"].persistent
    assert repr(state["bias"]) == "<UninitializedParameter>"
    assert state["num_batches_tracked"].item() == 0
    assert is_lazy(state["weight"]) and not is_lazy(state["num_batches_tracked"])
    # a lazy state into a lazy module: loads, nothing is materialized
    fresh = mt.nn.LazyBatchNorm1d()
    assert repr(fresh.load_state_dict(state)) == "<All keys matched successfully>"
    assert fresh.has_uninitialized_params() and type(fresh) is mt.nn.LazyBatchNorm1d
    # a lazy state into an initialized module: PyTorch's error
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized "
                                               "parameter or buffer"):
            lib.nn.Linear(2, 3).load_state_dict(lib.nn.LazyLinear(3).state_dict())


def test_lazy_linear_loaded_then_called_with_other_features_as_pytorch():
    for lib in (mt, torch):
        model = lib.nn.LazyLinear(3)
        model.load_state_dict(lib.nn.Linear(2, 3).state_dict())
        assert model.in_features == 0 and tuple(model.weight.shape) == (3, 2)
        with pytest.raises(AssertionError, match="The in_features inferred from input: 5 is "
                                                 "not equal to in_features from "
                                                 "self.weight: 2"):
            model(lib.randn(1, 5))
        model(lib.randn(4, 2))
        assert model.in_features == 2 and type(model).__name__ == "Linear"


def test_uninitialized_parameter_refuses_use_as_pytorch():
    for lib in (mt, torch):
        weight = lib.nn.LazyLinear(3).weight
        for use in (weight.numel, weight.dim, weight.detach, weight.sum, weight.tolist,
                    weight.zero_, weight.requires_grad_, lambda: weight + 1,
                    lambda: weight == weight, lambda: weight[0], lambda: len(weight),
                    lambda: bool(weight), lambda: lib.nn.init.zeros_(weight)):
            with pytest.raises(ValueError, match="Attempted to use an uninitialized "
                                                 "parameter in .*LazyModules Call `forward` "
                                                 "with a dummy batch"):
                use()
        with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
            weight.shape
        with pytest.raises(RuntimeError, match="Can't share memory on an uninitialized"):
            weight.share_memory_()
        # what it still answers
        assert weight.requires_grad and weight.is_leaf and weight.grad is None
        assert tuple(weight.size()) == (0,) and weight.is_floating_point()
        assert str(weight.dtype).endswith("float32") and weight.data.numel() == 0
        assert repr(weight) == "<UninitializedParameter>" and hash(weight) == hash(weight)
        assert weight in [weight]


def test_uninitialized_tensors_materialize_in_place():
    for lib in (mt, torch):
        p = lib.nn.parameter.UninitializedParameter(requires_grad=False,
                                                    dtype=lib.float64)
        same = p
        p.materialize((2, 3))
        assert p is same and type(p) is lib.nn.Parameter and not p.requires_grad
        assert tuple(p.shape) == (2, 3) and p.dtype == lib.float64
        b = lib.nn.parameter.UninitializedBuffer()
        assert not b.requires_grad and b.persistent and repr(b) == "<UninitializedBuffer>"
        b.materialize((4,), dtype=lib.float16)
        assert type(b) is lib.Tensor and tuple(b.shape) == (4,) and b.dtype == lib.float16


def test_lazy_module_conversions_before_the_first_forward():
    model = mt.nn.LazyLinear(3).double()
    assert model.weight.dtype == mt.float64 and is_lazy(model.weight)
    model(mt.randn(2, 4, dtype=mt.float64))
    assert model.weight.dtype == mt.float64 and tuple(model.weight.shape) == (3, 4)
    assert mt.nn.LazyConv1d(2, 3, dtype=mt.float64).weight.dtype == mt.float64
    with pytest.raises(ValueError, match="uninitialized parameter"):
        mt.nn.LazyLinear(3).requires_grad_(False)    # PyTorch refuses it too


def test_optimizer_built_before_the_first_forward_trains_as_pytorch():
    """The parameters are materialized in place, so an optimizer holding them before the
    first forward steps the real ones."""
    x = mt.randn(8, 5)
    model = mt.nn.Sequential(mt.nn.LazyLinear(4), mt.nn.ReLU(), mt.nn.LazyLinear(1))
    optimizer = mt.optim.Adam(model.parameters(), lr=0.1)
    reference = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU(),
                                    torch.nn.LazyLinear(1))
    torch_optimizer = torch.optim.Adam(reference.parameters(), lr=0.1)
    reference(to_torch(x))
    model(x)
    model.load_state_dict(torch_state(reference))
    for _ in range(3):
        optimizer.zero_grad()
        torch_optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        reference(to_torch(x)).pow(2).mean().backward()
        optimizer.step()
        torch_optimizer.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        close(p, q, rtol=1e-5, atol=1e-6)
    assert all(type(m).__name__ in ("Linear", "ReLU") for m in model)


def test_lazy_module_deep_copy_initializes_on_its_own():
    original = mt.nn.LazyConv2d(4, 3)
    twin = copy.deepcopy(original)
    assert is_lazy(twin.weight) and twin.weight is not original.weight
    twin(mt.randn(1, 2, 5, 5))
    assert type(twin) is mt.nn.Conv2d and tuple(twin.weight.shape) == (4, 2, 3, 3)
    # the copy's hook handles removed the copy's hooks, not the original's
    assert not twin._forward_pre_hooks and not twin._load_state_dict_pre_hooks
    assert len(original._forward_pre_hooks) == len(original._load_state_dict_pre_hooks) == 1
    assert type(original) is mt.nn.LazyConv2d and is_lazy(original.weight)
    original(mt.randn(1, 3, 5, 5))
    assert type(original) is mt.nn.Conv2d and tuple(original.weight.shape) == (4, 3, 3, 3)


def test_lazy_module_input_errors_as_pytorch():
    cases = [(lambda lib: lib.nn.LazyConv2d(4, 3, groups=2), (1, 5, 5, 5), ValueError,
              "in_channels must be divisible by groups"),
             (lambda lib: lib.nn.LazyConv2d(4, 3), (5, 5), RuntimeError,
              r"Expected 3D \(unbatched\) or 4D \(batched\) input to LazyConv2d, but got "
              "input of size"),
             (lambda lib: lib.nn.LazyConvTranspose1d(4, 3), (1, 2, 3, 5), RuntimeError,
              r"Expected 2D \(unbatched\) or 3D \(batched\) input to LazyConvTranspose1d"),
             # unbatched instance-norm input: PyTorch takes num_features from dim 1
             (lambda lib: lib.nn.LazyInstanceNorm1d(affine=True), (3, 5), ValueError,
              r"expected input's size at dim=0 to match num_features \(5\), but got: 3"),
             (lambda lib: lib.nn.LazyBatchNorm2d(), (2, 3, 4), ValueError,
              r"expected 4D input \(got 3D input\)")]
    for build, shape, error, message in cases:
        states = []
        for lib in (mt, torch):
            model = build(lib)
            with pytest.raises(error, match=message):
                model(lib.randn(*shape))
            # whether the pre-hook got through (it did if forward itself refused)
            states.append((type(model).__name__, repr(model)))
        assert states[0] == states[1]


def test_custom_lazy_module_with_the_mixin():
    """A user's own lazy module: initialize_parameters shapes it; with no cls_to_become it
    keeps its class; without initialize_parameters the first call says so."""
    LazyModuleMixin = mt.nn.modules.lazy.LazyModuleMixin

    class Scale(LazyModuleMixin, mt.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = UninitializedParameter()

        def initialize_parameters(self, x):
            self.scale.materialize(x.shape[-1:])
            with mt.no_grad():
                self.scale.fill_(2.0)

        def forward(self, x):
            return x * self.scale

    model = Scale()
    assert model.has_uninitialized_params()
    out = model(mt.ones(2, 3))
    assert type(model) is Scale and out.tolist() == [[2.0] * 3] * 2
    assert not model._forward_pre_hooks

    class Unfinished(LazyModuleMixin, mt.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = UninitializedParameter()

    with pytest.raises(NotImplementedError, match="initialize_parameters is not implemented "
                                                  "for Unfinished"):
        Unfinished()(mt.ones(1))

    class Forgetful(Unfinished):
        def initialize_parameters(self, x):
            pass

    with pytest.raises(RuntimeError, match="module Forgetful has not been fully "
                                           "initialized"):
        Forgetful()(mt.ones(1))


@pytest.mark.parametrize("name", sorted({case[0] for case in LAZY}))
def test_lazy_signatures_as_pytorch(name):
    ours = inspect.signature(getattr(mt.nn, name)).parameters
    theirs = inspect.signature(getattr(torch.nn, name)).parameters
    assert [(k, p.default, p.kind) for k, p in ours.items()] == \
        [(k, p.default, p.kind) for k, p in theirs.items()]
