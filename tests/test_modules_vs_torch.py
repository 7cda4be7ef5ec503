"""Every kind of nn layer built the same way in microtensor and PyTorch, compared as a
user meets it: the repr, the state_dict (keys, shapes, dtypes), then, with PyTorch's
weights loaded, the outputs in training and evaluation mode, the buffers a training
forward updates (running statistics), and the gradients of the inputs and of every
parameter for the same upstream gradient.  Float64 throughout, so that a difference is
a different formula, not rounding."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def _float(*shape):
    return ("float", shape)


def _long(high, *shape):
    return ("long", high, shape)


# name: (constructor taking the library, inputs, modes); modes: which of "train" / "eval"
# give deterministic results (dropout-like layers only in eval)
BOTH, EVAL = ("train", "eval"), ("eval",)
SPECS = {
    "Linear": (lambda nn: nn.Linear(4, 3), [_float(5, 4)], BOTH),
    "Linear-nobias-3d": (lambda nn: nn.Linear(4, 3, bias=False), [_float(2, 5, 4)], BOTH),
    "Bilinear": (lambda nn: nn.Bilinear(3, 4, 2), [_float(5, 3), _float(5, 4)], BOTH),
    "Identity": (lambda nn: nn.Identity(), [_float(3, 2)], BOTH),
    "Conv1d": (lambda nn: nn.Conv1d(2, 4, 3, stride=2, padding=1, dilation=1),
               [_float(2, 2, 9)], BOTH),
    "Conv2d-groups": (lambda nn: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=1, groups=2),
                      [_float(2, 4, 7, 6)], BOTH),
    "Conv2d-same-dilated": (lambda nn: nn.Conv2d(2, 3, 3, padding="same", dilation=2),
                            [_float(1, 2, 8, 7)], BOTH),
    "Conv2d-reflect": (lambda nn: nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
                       [_float(1, 2, 6, 5)], BOTH),
    "Conv2d-circular": (lambda nn: nn.Conv2d(2, 3, 3, padding=2, padding_mode="circular"),
                        [_float(1, 2, 6, 5)], BOTH),
    "Conv3d": (lambda nn: nn.Conv3d(2, 3, 2, stride=(1, 2, 1)), [_float(1, 2, 4, 5, 3)], BOTH),
    "ConvTranspose1d": (lambda nn: nn.ConvTranspose1d(3, 2, 3, stride=2, output_padding=1),
                        [_float(2, 3, 5)], BOTH),
    "ConvTranspose2d-groups": (lambda nn: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                             groups=2, dilation=2),
                               [_float(1, 4, 4, 3)], BOTH),
    "ConvTranspose3d": (lambda nn: nn.ConvTranspose3d(2, 2, 2, stride=2),
                        [_float(1, 2, 2, 3, 2)], BOTH),
    "MaxPool1d": (lambda nn: nn.MaxPool1d(3, stride=2, padding=1), [_float(2, 3, 9)], BOTH),
    "MaxPool2d-ceil": (lambda nn: nn.MaxPool2d(3, stride=2, ceil_mode=True, dilation=1),
                       [_float(1, 2, 8, 7)], BOTH),
    "MaxPool3d": (lambda nn: nn.MaxPool3d(2), [_float(1, 2, 4, 4, 4)], BOTH),
    "AvgPool1d": (lambda nn: nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False),
                  [_float(2, 3, 8)], BOTH),
    "AvgPool2d-ceil": (lambda nn: nn.AvgPool2d(3, stride=2, ceil_mode=True, padding=1),
                       [_float(1, 2, 8, 7)], BOTH),
    "AvgPool2d-divisor": (lambda nn: nn.AvgPool2d(2, divisor_override=3), [_float(1, 2, 4, 4)],
                          BOTH),
    "AvgPool3d": (lambda nn: nn.AvgPool3d(2, stride=1), [_float(1, 2, 3, 4, 3)], BOTH),
    "AdaptiveAvgPool1d": (lambda nn: nn.AdaptiveAvgPool1d(4), [_float(2, 3, 10)], BOTH),
    "AdaptiveAvgPool2d": (lambda nn: nn.AdaptiveAvgPool2d((3, None)), [_float(1, 2, 7, 5)],
                          BOTH),
    "AdaptiveAvgPool3d": (lambda nn: nn.AdaptiveAvgPool3d(2), [_float(1, 2, 5, 3, 4)], BOTH),
    "AdaptiveMaxPool1d": (lambda nn: nn.AdaptiveMaxPool1d(3), [_float(2, 3, 10)], BOTH),
    "AdaptiveMaxPool2d": (lambda nn: nn.AdaptiveMaxPool2d((2, 3)), [_float(1, 2, 7, 5)], BOTH),
    "AdaptiveMaxPool3d": (lambda nn: nn.AdaptiveMaxPool3d(2), [_float(1, 2, 5, 3, 4)], BOTH),
    "LPPool1d": (lambda nn: nn.LPPool1d(2, 3, stride=2), [_float(2, 3, 9)], BOTH),
    "LPPool2d": (lambda nn: nn.LPPool2d(3, 2), [_float(1, 2, 6, 5)], BOTH),
    "BatchNorm1d": (lambda nn: nn.BatchNorm1d(3), [_float(5, 3)], BOTH),
    "BatchNorm1d-3d": (lambda nn: nn.BatchNorm1d(3, momentum=None), [_float(4, 3, 5)], BOTH),
    "BatchNorm2d": (lambda nn: nn.BatchNorm2d(3, momentum=0.3, eps=1e-3),
                    [_float(2, 3, 4, 5)], BOTH),
    "BatchNorm2d-no-affine": (lambda nn: nn.BatchNorm2d(3, affine=False),
                              [_float(2, 3, 4, 5)], BOTH),
    "BatchNorm2d-no-stats": (lambda nn: nn.BatchNorm2d(3, track_running_stats=False),
                             [_float(2, 3, 4, 5)], BOTH),
    "BatchNorm3d": (lambda nn: nn.BatchNorm3d(2), [_float(2, 2, 3, 2, 3)], BOTH),
    "InstanceNorm1d": (lambda nn: nn.InstanceNorm1d(3, affine=True), [_float(2, 3, 6)], BOTH),
    "InstanceNorm2d-stats": (lambda nn: nn.InstanceNorm2d(3, affine=True,
                                                          track_running_stats=True),
                             [_float(2, 3, 4, 5)], BOTH),
    "InstanceNorm3d": (lambda nn: nn.InstanceNorm3d(2), [_float(2, 2, 3, 2, 3)], BOTH),
    "GroupNorm": (lambda nn: nn.GroupNorm(2, 4), [_float(2, 4, 3, 3)], BOTH),
    "LayerNorm": (lambda nn: nn.LayerNorm((3, 4)), [_float(2, 3, 4)], BOTH),
    "LayerNorm-nobias": (lambda nn: nn.LayerNorm(4, bias=False, eps=1e-3), [_float(3, 4)],
                         BOTH),
    "RMSNorm": (lambda nn: nn.RMSNorm(4), [_float(3, 4)], BOTH),
    "RMSNorm-eps": (lambda nn: nn.RMSNorm((2, 4), eps=1e-2), [_float(3, 2, 4)], BOTH),
    "LocalResponseNorm": (lambda nn: nn.LocalResponseNorm(3), [_float(2, 5, 3, 3)], BOTH),
    "CrossMapLRN2d": (lambda nn: nn.CrossMapLRN2d(3), [_float(2, 5, 3, 3)], BOTH),
    "Embedding": (lambda nn: nn.Embedding(10, 3, padding_idx=2), [_long(10, 4, 5)], BOTH),
    "Embedding-max-norm": (lambda nn: nn.Embedding(10, 3, max_norm=1.0), [_long(10, 6)], BOTH),
    "EmbeddingBag-mean": (lambda nn: nn.EmbeddingBag(10, 3), [_long(10, 4, 5)], BOTH),
    "EmbeddingBag-max": (lambda nn: nn.EmbeddingBag(10, 3, mode="max"), [_long(10, 4, 5)],
                         BOTH),
    "RNN": (lambda nn: nn.RNN(3, 4, num_layers=2, nonlinearity="relu"), [_float(5, 2, 3)],
            BOTH),
    "LSTM-bidirectional": (lambda nn: nn.LSTM(3, 4, bidirectional=True, batch_first=True),
                           [_float(2, 5, 3)], BOTH),
    "LSTM-proj": (lambda nn: nn.LSTM(3, 4, proj_size=2, num_layers=2), [_float(5, 2, 3)],
                  BOTH),
    "GRU": (lambda nn: nn.GRU(3, 4, num_layers=2, bias=False), [_float(5, 2, 3)], BOTH),
    "RNNCell": (lambda nn: nn.RNNCell(3, 4, nonlinearity="tanh"), [_float(2, 3)], BOTH),
    "LSTMCell": (lambda nn: nn.LSTMCell(3, 4), [_float(2, 3)], BOTH),
    "GRUCell": (lambda nn: nn.GRUCell(3, 4), [_float(2, 3)], BOTH),
    "MultiheadAttention": (lambda nn: nn.MultiheadAttention(8, 2),
                           [_float(4, 2, 8), _float(5, 2, 8), _float(5, 2, 8)], EVAL),
    "MultiheadAttention-kdim": (lambda nn: nn.MultiheadAttention(8, 2, kdim=3, vdim=5,
                                                                 batch_first=True, bias=False),
                                [_float(2, 4, 8), _float(2, 6, 3), _float(2, 6, 5)], EVAL),
    "TransformerEncoderLayer": (lambda nn: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
                                [_float(5, 2, 8)], BOTH),
    "TransformerEncoderLayer-norm-first": (
        lambda nn: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=True,
                                              activation="gelu", batch_first=True),
        [_float(2, 5, 8)], BOTH),
    "TransformerDecoderLayer": (lambda nn: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
                                [_float(4, 2, 8), _float(5, 2, 8)], BOTH),
    "Transformer": (lambda nn: nn.Transformer(8, 2, 1, 1, 16, dropout=0.0),
                    [_float(5, 2, 8), _float(4, 2, 8)], BOTH),
    "PReLU": (lambda nn: nn.PReLU(3, init=0.1), [_float(2, 3, 4)], BOTH),
    "RReLU": (lambda nn: nn.RReLU(0.1, 0.3), [_float(3, 4)], EVAL),
    "Dropout": (lambda nn: nn.Dropout(0.3), [_float(3, 4)], EVAL),
    "AlphaDropout": (lambda nn: nn.AlphaDropout(0.3), [_float(3, 4)], EVAL),
    "Dropout2d": (lambda nn: nn.Dropout2d(0.3), [_float(2, 3, 4, 4)], EVAL),
    "GLU": (lambda nn: nn.GLU(1), [_float(3, 4)], BOTH),
    "Softmax2d": (lambda nn: nn.Softmax2d(), [_float(2, 3, 4, 4)], BOTH),
    "Softmin": (lambda nn: nn.Softmin(1), [_float(3, 4)], BOTH),
    "LogSoftmax": (lambda nn: nn.LogSoftmax(0), [_float(3, 4)], BOTH),
    "Threshold": (lambda nn: nn.Threshold(0.1, -2.0), [_float(3, 4)], BOTH),
    "Hardtanh": (lambda nn: nn.Hardtanh(-0.5, 0.7), [_float(3, 4)], BOTH),
    "ELU": (lambda nn: nn.ELU(0.7), [_float(3, 4)], BOTH),
    "CELU": (lambda nn: nn.CELU(1.3), [_float(3, 4)], BOTH),
    "SELU": (lambda nn: nn.SELU(), [_float(3, 4)], BOTH),
    "GELU-tanh": (lambda nn: nn.GELU("tanh"), [_float(3, 4)], BOTH),
    "Softplus": (lambda nn: nn.Softplus(2.0, 1.5), [_float(3, 4)], BOTH),
    "Softshrink": (lambda nn: nn.Softshrink(0.3), [_float(3, 4)], BOTH),
    "Hardshrink": (lambda nn: nn.Hardshrink(0.3), [_float(3, 4)], BOTH),
    "LeakyReLU": (lambda nn: nn.LeakyReLU(0.2), [_float(3, 4)], BOTH),
    "Mish": (lambda nn: nn.Mish(), [_float(3, 4)], BOTH),
    "Hardswish": (lambda nn: nn.Hardswish(), [_float(3, 4)], BOTH),
    "Hardsigmoid": (lambda nn: nn.Hardsigmoid(), [_float(3, 4)], BOTH),
    "LogSigmoid": (lambda nn: nn.LogSigmoid(), [_float(3, 4)], BOTH),
    "Tanhshrink": (lambda nn: nn.Tanhshrink(), [_float(3, 4)], BOTH),
    "Softsign": (lambda nn: nn.Softsign(), [_float(3, 4)], BOTH),
    "ReLU6": (lambda nn: nn.ReLU6(), [_float(3, 4)], BOTH),
    "SiLU": (lambda nn: nn.SiLU(), [_float(3, 4)], BOTH),
    "Flatten": (lambda nn: nn.Flatten(1, 2), [_float(2, 3, 4, 2)], BOTH),
    "Unflatten": (lambda nn: nn.Unflatten(1, (2, 2)), [_float(3, 4)], BOTH),
    "Fold": (lambda nn: nn.Fold((4, 5), 2, stride=1), [_float(2, 8, 12)], BOTH),
    "Unfold": (lambda nn: nn.Unfold(2, dilation=1, padding=1, stride=2), [_float(2, 2, 4, 5)],
               BOTH),
    "PixelShuffle": (lambda nn: nn.PixelShuffle(2), [_float(1, 8, 2, 3)], BOTH),
    "PixelUnshuffle": (lambda nn: nn.PixelUnshuffle(2), [_float(1, 2, 4, 6)], BOTH),
    "ChannelShuffle": (lambda nn: nn.ChannelShuffle(2), [_float(1, 4, 2, 3)], BOTH),
    "Upsample-nearest": (lambda nn: nn.Upsample(scale_factor=2), [_float(1, 2, 3, 4)], BOTH),
    "Upsample-bilinear": (lambda nn: nn.Upsample(size=(5, 7), mode="bilinear"),
                          [_float(1, 2, 3, 4)], BOTH),
    "Upsample-bicubic-corners": (lambda nn: nn.Upsample(scale_factor=1.5, mode="bicubic",
                                                        align_corners=True),
                                 [_float(1, 2, 4, 4)], BOTH),
    "Upsample-trilinear": (lambda nn: nn.Upsample(scale_factor=(1, 2, 2), mode="trilinear"),
                           [_float(1, 1, 2, 3, 3)], BOTH),
    "UpsamplingBilinear2d": (lambda nn: nn.UpsamplingBilinear2d(scale_factor=2),
                             [_float(1, 2, 3, 3)], BOTH),
    "ReflectionPad2d": (lambda nn: nn.ReflectionPad2d((1, 2, 0, 1)), [_float(1, 2, 3, 4)],
                        BOTH),
    "ReplicationPad3d": (lambda nn: nn.ReplicationPad3d(1), [_float(1, 1, 2, 3, 2)], BOTH),
    "CircularPad1d": (lambda nn: nn.CircularPad1d((2, 1)), [_float(2, 3, 4)], BOTH),
    "ConstantPad2d": (lambda nn: nn.ConstantPad2d((1, 0, 2, 1), 1.5), [_float(1, 2, 3, 3)],
                      BOTH),
    "ZeroPad2d": (lambda nn: nn.ZeroPad2d(1), [_float(1, 2, 3, 3)], BOTH),
    "CosineSimilarity": (lambda nn: nn.CosineSimilarity(1), [_float(3, 4), _float(3, 4)], BOTH),
    "PairwiseDistance": (lambda nn: nn.PairwiseDistance(3.0, keepdim=True),
                         [_float(3, 4), _float(3, 4)], BOTH),
    "Sequential": (lambda nn: nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                            nn.Linear(4, 3)),
                   [_float(2, 2, 5, 5)], BOTH),
}


# Where PyTorch's float64 gradient is not the derivative, or not to float64 precision: the
# gradients are checked by gradcheck (ours) and against PyTorch's to the tolerance given.
GRADIENTS_DIFFER = {
    # its legacy backward fails PyTorch's own gradcheck; microtensor's passes it
    "CrossMapLRN2d": None,
    # PyTorch's float64 backward kernels compute with a float32 constant (1/6; 1/alpha):
    # about 1e-8 off the exact derivative, which microtensor gives
    "Hardsigmoid": 1e-7, "CELU": 1e-7,
}


def _inputs(lib, specs, rng):
    made = []
    for spec in specs:
        if spec[0] == "long":
            made.append(lib.tensor(rng.integers(0, spec[1], spec[2])))
        else:
            made.append(lib.tensor(rng.standard_normal(spec[1])).requires_grad_())
    return made


def _tensors(output):
    """The tensors of a module's output (tuples of tensors and of tuples, None left out)."""
    if output is None:
        return []
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in _tensors(item)]
    return [output]


def _numpy(t):
    return np.array(t.detach()._array()) if isinstance(t, mt.Tensor) else t.detach().numpy()


def _pair(name):
    build = SPECS[name][0]
    torch.manual_seed(0)
    theirs = build(torch.nn).double()
    ours = build(mt.nn).double()
    return ours, theirs


@pytest.mark.parametrize("name", list(SPECS))
def test_repr_and_state_dict_match_torch(name):
    ours, theirs = _pair(name)
    assert repr(ours) == repr(theirs)
    ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
    assert list(ours_state) == list(theirs_state)
    for key, value in theirs_state.items():
        assert tuple(ours_state[key].shape) == tuple(value.shape), key
        assert ours_state[key].dtype.name == str(value.dtype).split(".")[-1], key


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", list(SPECS))
def test_outputs_buffers_and_gradients_match_torch(name, mode):
    build, input_specs, modes = SPECS[name]
    if mode not in modes:
        pytest.skip(f"{name} draws random numbers in training mode")
    ours, theirs = _pair(name)
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    getattr(ours, mode)()
    getattr(theirs, mode)()
    rng = np.random.default_rng(1)
    ours_in = _inputs(mt, input_specs, rng)
    theirs_in = _inputs(torch, input_specs, np.random.default_rng(1))
    ours_out, theirs_out = _tensors(ours(*ours_in)), _tensors(theirs(*theirs_in))
    assert len(ours_out) == len(theirs_out)
    for a, b in zip(ours_out, theirs_out):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-10, atol=1e-12)
    for (key, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-10, atol=1e-12,
                                   err_msg=f"buffer {key} after the forward")
    differentiable = [i for i, t in enumerate(theirs_out) if t.requires_grad]
    assert [i for i, t in enumerate(ours_out) if t.requires_grad] == differentiable
    if not differentiable:
        return
    rtol = GRADIENTS_DIFFER.get(name, 1e-9)
    if rtol is None:
        assert mt.autograd.gradcheck(lambda *xs: _tensors(ours(*xs))[0], tuple(ours_in))
        return
    upstream = [rng.standard_normal(tuple(theirs_out[i].shape)) for i in differentiable]
    mt.autograd.backward([ours_out[i] for i in differentiable],
                         [mt.tensor(g) for g in upstream])
    torch.autograd.backward([theirs_out[i] for i in differentiable],
                            [torch.tensor(g) for g in upstream])
    for a, b in zip(ours_in, theirs_in):
        if b.grad is not None:
            np.testing.assert_allclose(_numpy(a.grad), b.grad.numpy(), rtol=rtol, atol=1e-11)
    ours_params = dict(ours.named_parameters())
    for key, b in theirs.named_parameters():
        a = ours_params[key]
        assert (a.grad is None) == (b.grad is None), key
        if b.grad is not None:
            np.testing.assert_allclose(_numpy(a.grad), b.grad.numpy(), rtol=rtol, atol=1e-11,
                                       err_msg=f"gradient of {key}")
