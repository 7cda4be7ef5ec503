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
modules.lazy = lazy     # PyTorch's path to the mixin: nn.modules.lazy.LazyModuleMixin
from microtensor.nn.bilinear import Bilinear  # noqa: E402,F401
from microtensor.nn.containers import Container  # noqa: E402,F401
from microtensor.nn.parameter import Buffer  # noqa: E402,F401
