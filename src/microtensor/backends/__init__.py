"""Storage backends other than NumPy on the CPU (today: CUDA through CuPy, ``backends.cuda``),
and PyTorch's ``torch.backends`` flags (``cudnn``, ``mps``, ``mha``, ``cuda.matmul``: see flags.py).

Nothing here imports an optional dependency at import time: the CPU path never needs it.
"""
from microtensor.backends import cuda, cudnn, mha, mps  # noqa: F401  (torch.backends.<name>)
