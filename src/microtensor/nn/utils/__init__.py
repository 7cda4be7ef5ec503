"""``nn.utils``, as PyTorch's: gradient clipping, parameters <-> one flat vector, and the
packed and padded sequences of ``nn.utils.rnn``."""
from microtensor.nn.utils.clip_grad import (clip_grad_norm_, clip_grad_value_,
                                            clip_grads_with_norm_, get_total_norm)
from microtensor.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from microtensor.nn.utils import rnn  # noqa: F401

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters"]
__all__ += ["rnn"]
