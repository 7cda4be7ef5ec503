"""Neural-network building blocks with PyTorch's API: ``Module`` (hooks, ``to``,
``state_dict``...), ``Parameter``, containers, layers and losses, ``functional``,
``init`` and ``utils``."""
from microtensor.nn import functional, init, lazy, modules, utils  # noqa: F401
from microtensor.nn.conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d,  # noqa: F401
                                 ConvTranspose2d, ConvTranspose3d)
from microtensor.nn.containers import ModuleDict, ModuleList, ParameterDict, ParameterList
from microtensor.nn.modules import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, Dropout,
                                    Embedding, Flatten, Identity, L1Loss, Linear, LogSoftmax,
                                    Module, MSELoss, NLLLoss, ReLU, Sequential, Sigmoid,
                                    Softmax, Tanh, Unflatten)
from microtensor.nn.norm import *  # noqa: F401,F403
from microtensor.nn.parameter import Parameter
from microtensor.nn.pooling import *  # noqa: F401,F403

__all__ = ["Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
           "ParameterDict", "Identity", "Linear", "Flatten", "Unflatten", "ReLU", "Tanh",
           "Sigmoid", "Softmax", "LogSoftmax", "Dropout", "Embedding", "MSELoss", "L1Loss",
           "NLLLoss", "CrossEntropyLoss", "BCELoss", "BCEWithLogitsLoss", "functional", "init",
           "utils"]

from microtensor.nn.activation import *  # noqa: E402,F401,F403
from microtensor.nn.activation import __all__ as _activations  # noqa: E402
__all__ += _activations
from microtensor.nn.rnn import *  # noqa: E402,F401,F403
from microtensor.nn.rnn import __all__ as _recurrent  # noqa: E402
__all__ += _recurrent
from microtensor.nn.loss_modules import *  # noqa: E402,F401,F403
from microtensor.nn.loss_modules import __all__ as _losses  # noqa: E402
__all__ += _losses
from microtensor.nn.attention import *  # noqa: E402,F401,F403
from microtensor.nn.attention import __all__ as _attention  # noqa: E402
__all__ += _attention
from microtensor.nn.sparse import EmbeddingBag  # noqa: E402,F401
from microtensor.nn.upsampling import *  # noqa: E402,F401,F403
from microtensor.nn.dropout import *  # noqa: E402,F401,F403
from microtensor.nn.dropout import __all__ as _dropouts  # noqa: E402
__all__ += _dropouts
from microtensor.nn.padding import *  # noqa: E402,F401,F403
from microtensor.nn.padding import __all__ as _paddings  # noqa: E402
from microtensor.nn.shuffle import *  # noqa: E402,F401,F403
from microtensor.nn.shuffle import __all__ as _shuffles  # noqa: E402
from microtensor.nn.distance import *  # noqa: E402,F401,F403
from microtensor.nn.distance import __all__ as _distances  # noqa: E402
from microtensor.nn.fold import *  # noqa: E402,F401,F403
from microtensor.nn.fold import __all__ as _folds  # noqa: E402
__all__ += _paddings + _shuffles + _distances + _folds
from microtensor.nn.lazy import *  # noqa: E402,F401,F403
from microtensor.nn.lazy import __all__ as _lazy  # noqa: E402
from microtensor.nn.parameter import UninitializedBuffer, UninitializedParameter  # noqa: E402
__all__ += _lazy + ["UninitializedParameter", "UninitializedBuffer"]
from microtensor.nn.linear_cross_entropy import *  # noqa: E402,F401,F403
from microtensor.nn.linear_cross_entropy import __all__ as _linear_cross_entropy  # noqa: E402
__all__ += _linear_cross_entropy
modules.lazy = lazy     # PyTorch's path to the mixin: nn.modules.lazy.LazyModuleMixin
from microtensor.nn.bilinear import Bilinear  # noqa: E402,F401
from microtensor.nn.containers import Container  # noqa: E402,F401
from microtensor.nn.parameter import Buffer  # noqa: E402,F401
from microtensor.nn.adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: E402,F401
from microtensor.nn.parallel import DataParallel  # noqa: E402,F401
from microtensor.nn.parallel import DistributedDataParallel  # noqa: E402,F401


def _torch_module_paths():
    """PyTorch's paths to the layers, ``torch.nn.modules.<file>`` (``from
    torch.nn.modules.batchnorm import _BatchNorm``, ``nn.modules.loss._Loss``): here each
    such module finds a name among nn's own and then in the files that define the layers
    (private base classes included), wherever microtensor keeps it."""
    import importlib
    import sys
    import types
    files = [importlib.import_module(f"microtensor.nn.{name}") for name in (
        "modules", "activation", "attention", "bilinear", "containers", "conv", "distance",
        "dropout", "fold", "lazy", "loss_modules", "norm", "padding", "pooling", "rnn",
        "shuffle", "sparse", "upsampling", "adaptive")]
    here = sys.modules[__name__]

    def find(name):
        for source in [here] + files:
            if name in vars(source):
                return vars(source)[name]
        raise AttributeError(f"module 'microtensor.nn.modules' has no attribute '{name}'")
    for path in ("activation", "batchnorm", "channelshuffle", "container", "conv", "distance",
                 "dropout", "flatten", "fold", "instancenorm", "linear", "loss", "module",
                 "normalization", "padding", "pixelshuffle", "pooling", "rnn", "sparse",
                 "transformer", "upsampling", "adaptive", "linear_cross_entropy",
                 "linear_cross_entropy_options"):
        alias = types.ModuleType(f"{__name__}.modules.{path}",
                                 f"PyTorch's nn.modules.{path}: names found in microtensor.nn")
        alias.__getattr__ = find
        sys.modules[alias.__name__] = alias
        setattr(modules, path, alias)


_torch_module_paths()
