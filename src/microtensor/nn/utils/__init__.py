"""``nn.utils``, as PyTorch's: gradient clipping, parameters <-> one flat vector, the
packed and padded sequences of ``nn.utils.rnn``, parametrizations (``parametrize``,
``parametrizations``) and the older hook-based weight and spectral norms, conv/linear +
batch-norm fusion, weight memory formats, ``skip_init`` and ``stateless.functional_call``."""
from microtensor.nn.utils import (fusion, init, memory_format, parametrizations,  # noqa: F401
                                  parametrize, rnn, stateless)
from microtensor.nn.utils.clip_grad import (clip_grad_norm, clip_grad_norm_, clip_grad_value_,
                                            clip_grads_with_norm_, get_total_norm)
from microtensor.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from microtensor.nn.utils.fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights,
                                         fuse_linear_bn_eval, fuse_linear_bn_weights)
from microtensor.nn.utils.init import skip_init
from microtensor.nn.utils.memory_format import (convert_conv2d_weight_memory_format,
                                                convert_conv3d_weight_memory_format)
from microtensor.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from microtensor.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters"]
__all__ += ["rnn"]
__all__ += ["clip_grad_norm", "convert_conv2d_weight_memory_format",
            "convert_conv3d_weight_memory_format", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
            "fuse_linear_bn_eval", "fuse_linear_bn_weights", "remove_spectral_norm",
            "remove_weight_norm", "skip_init", "spectral_norm", "weight_norm"]
