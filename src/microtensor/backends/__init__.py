"""Storage backends other than NumPy on the CPU (today: CUDA through CuPy, ``backends.cuda``).

Nothing here imports an optional dependency at import time: the CPU path never needs it.
``cudnn`` and ``mps`` hold PyTorch's switches and questions for backends microtensor lacks.
"""
from microtensor.backends import cudnn, mps  # noqa: F401,E402
