"""Neural-network building blocks with PyTorch's API: ``Module`` (hooks, ``to``,
``state_dict``...), ``Parameter``, containers, layers and losses, ``functional``,
``init`` and ``utils``."""
from microtensor.nn import functional, init, utils
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
from microtensor.nn.attention import (MultiheadAttention, TransformerEncoder,  # noqa: E402
                                      TransformerEncoderLayer)
__all__ += ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder"]
from microtensor.nn.sparse import EmbeddingBag  # noqa: E402,F401
from microtensor.nn.upsampling import *  # noqa: E402,F401,F403
from microtensor.nn.bilinear import Bilinear  # noqa: E402,F401
