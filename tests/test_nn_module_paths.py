"""PyTorch's module paths to the layers (``torch.nn.modules.<file>.<name>``) resolve here,
with the same subclass relations between layers and their private bases."""
import inspect

import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch's nn.modules lists the paths")

PATHS = ["activation", "batchnorm", "channelshuffle", "container", "conv", "distance",
         "dropout", "flatten", "fold", "instancenorm", "linear", "loss", "module",
         "normalization", "padding", "pixelshuffle", "pooling", "rnn", "sparse",
         "transformer", "upsampling"]


@pytest.mark.parametrize("path", PATHS)
def test_every_public_layer_of_a_torch_path_is_found_there(path):
    theirs = getattr(torch.nn.modules, path)
    names = [n for n, v in vars(theirs).items() if inspect.isclass(v)
             and v.__module__ == theirs.__name__ and hasattr(mt.nn, n)]
    assert names
    module = __import__(f"microtensor.nn.modules.{path}", fromlist=names)
    for name in names:
        assert getattr(module, name) is getattr(mt.nn, name)


@pytest.mark.parametrize("path,base,layers", [
    ("batchnorm", "_BatchNorm", ["BatchNorm1d", "BatchNorm2d", "SyncBatchNorm"]),
    ("batchnorm", "_NormBase", ["BatchNorm3d", "InstanceNorm2d"]),
    ("instancenorm", "_InstanceNorm", ["InstanceNorm1d", "InstanceNorm3d"]),
    ("conv", "_ConvNd", ["Conv1d", "Conv2d", "ConvTranspose2d"]),
    ("loss", "_Loss", ["MSELoss", "L1Loss", "CrossEntropyLoss"]),
    ("loss", "_WeightedLoss", ["CrossEntropyLoss", "NLLLoss", "BCELoss"]),
    ("pooling", "_MaxPoolNd", ["MaxPool1d", "MaxPool2d"]),
    ("pooling", "_AvgPoolNd", ["AvgPool2d"]),
    ("dropout", "_DropoutNd", ["Dropout", "Dropout2d"]),
    ("module", "Module", ["Linear", "Sequential"])])
def test_private_bases_as_torch(path, base, layers):
    ours = getattr(getattr(mt.nn.modules, path), base)
    theirs = getattr(getattr(torch.nn.modules, path), base)
    for layer in layers:
        assert issubclass(getattr(mt.nn, layer), ours) == \
            issubclass(getattr(torch.nn, layer), theirs), layer


def test_an_unknown_name_is_an_import_error():
    with pytest.raises(ImportError, match="cannot import name 'Bogus'"):
        from microtensor.nn.modules.loss import Bogus  # noqa: F401
