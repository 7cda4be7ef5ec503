"""microtensor: a small, readable tensor runtime with PyTorch's API.

Strided tensors and views over shared storage (Cython core), reverse-mode autograd
including in-place writes into views, and the ``vmap``/``grad`` transforms.
"""
from microtensor._C import meta as _meta
from microtensor._C import tensor as _core
from microtensor._C.autograd import attach_node as _attach_node
from microtensor._C.meta import (channels_last, channels_last_3d, contiguous_format,
                                 memory_format, preserve_format)
from microtensor._C.tensor import (Size, Storage, device, dtype, get_default_dtype,
                                   set_default_dtype)
from microtensor._C.tensor import bool_ as bool
from microtensor._C.tensor import (bfloat16, complex64, complex128, float16, float32, float64,
                                   int8, int16, int32, int64, uint8)
from microtensor._dtype import can_cast, finfo, iinfo, promote_types, result_type
from microtensor import autograd  # before ops: autograd installs its hook into the dispatcher
from microtensor._tensor import Tensor, install_methods
from microtensor.autograd import grad_mode as _grad_mode
from microtensor.ops import dispatch as _dispatch
from microtensor.ops.registry import REGISTRY as _REGISTRY

from microtensor.ops import indexing as _indexing  # noqa: E402

_core._install(Tensor, _dispatch.binary, _dispatch.call_method, _indexing.getitem,
               _attach_node, {name: _REGISTRY[name] for name in (
                   "add", "sub", "mul", "div", "sum", "view", "transpose", "unsqueeze",
                   "expand", "matmul")}, _dispatch.call)

from microtensor import ops  # noqa: E402
from microtensor.autograd import tensor_methods as _autograd_methods  # noqa: E402
from microtensor.autograd.grad_mode import (enable_grad, inference_mode,  # noqa: E402
                                            is_grad_enabled, no_grad, set_grad_enabled)
from microtensor.autograd.anomaly_mode import is_anomaly_enabled  # noqa: E402
from microtensor.ops.factory import (Generator, arange, as_tensor, default_generator,  # noqa: E402
                                     empty, empty_strided, eye, from_dlpack, from_numpy, full,
                                     initial_seed, linspace, logspace, manual_seed, ones,
                                     scalar_tensor, seed, tensor, zeros)

install_methods(ops.REGISTRY, globals())
_autograd_methods.install(Tensor)
from microtensor.func import vmap  # noqa: E402  (also makes mt.func available)

from microtensor import (cuda, explain, linalg, nn, optim, privacy,  # noqa: E402
                         return_types, testing, utils)
from microtensor import amp  # noqa: E402
from microtensor import distributions  # noqa: E402
from microtensor import accelerator  # noqa: E402
from microtensor.serialization import (load, load_safetensors, save,  # noqa: E402
                                       save_safetensors)
from microtensor._legacy import TYPED_CONSTRUCTORS as _TYPED_CONSTRUCTORS  # noqa: E402
globals().update(_TYPED_CONSTRUCTORS)   # FloatTensor, LongTensor ...
from microtensor._printing import set_printoptions  # noqa: E402
from microtensor._toplevel import is_floating_point, is_tensor, numel  # noqa: E402
from microtensor._removed import eig, lstsq, matrix_rank, solve, symeig  # noqa: E402
from microtensor._removed import TENSOR_METHODS as _REMOVED_METHODS  # noqa: E402
for _name, _method in _REMOVED_METHODS.items():
    setattr(Tensor, _name, _method)
del _name, _method
from microtensor import _composite  # noqa: E402
_composite.install(Tensor, globals())
from microtensor import _tensor_extras  # noqa: E402
_tensor_extras.install(Tensor, globals())
from microtensor.ops import complex as _complex  # noqa: E402
_complex.install(Tensor)
from microtensor import special  # noqa: E402
from microtensor import fft  # noqa: E402
from microtensor import signal  # noqa: E402
from microtensor import random  # noqa: E402
from microtensor import storage  # noqa: E402
from microtensor.storage import TypedStorage, UntypedStorage  # noqa: E402
from microtensor.utils.dlpack import to_dlpack  # noqa: E402
from microtensor.control_flow import cond, while_loop  # noqa: E402
from microtensor._lowrank import pca_lowrank, svd_lowrank  # noqa: E402
from microtensor import jit  # noqa: E402
from microtensor import distributed  # noqa: E402
from microtensor import compiler, cpu, profiler  # noqa: E402
storage.install(Tensor)
from microtensor.ops.factory import (bartlett_window, blackman_window,  # noqa: E402
                                     hamming_window, hann_window, kaiser_window)
from microtensor.ops.factory import (get_default_device, get_rng_state,  # noqa: E402
                                     set_default_device, set_rng_state)
from microtensor.ops.shape import (broadcast_shapes, tril_indices,  # noqa: E402
                                   triu_indices)
from math import e, inf, nan, pi  # noqa: E402
from microtensor.ops.factory import (asarray, empty_permuted, from_file,  # noqa: E402
                                     frombuffer, range_inclusive as range)
from microtensor._aten_aliases import *  # noqa: E402,F401,F403  (kl_div, max_pool2d ...)
from microtensor._settings import *  # noqa: E402,F401,F403  (threads, determinism, compile ...)
from microtensor._foreach import *  # noqa: E402,F401,F403  (_foreach_add, _foreach_norm ...)

from microtensor import _dtype_table  # noqa: E402
# microtensor.half, .float, .long ...: the table's other names of each dtype
globals().update({alias: _core.DTYPES[info.name] for info in _dtype_table.DTYPES
                  for alias in info.aliases})
from microtensor import sparse  # noqa: E402
sparse.install(Tensor, globals())   # sparse_coo, sparse_coo_tensor, Tensor.to_sparse

__version__ = "0.1.0"
