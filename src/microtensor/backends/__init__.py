"""Storage backends other than NumPy on the CPU (today: CUDA through CuPy, ``backends.cuda``).

Nothing here imports an optional dependency at import time: the CPU path never needs it.
"""
