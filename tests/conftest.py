"""Conventions shared by every test file.

Random inputs: one sample maker, ``microtensor.testing.maker`` (``make(*shape, dtype=...,
low=, high=)``), and an op's registered samples through ``microtensor.testing.samples_of``
(``sample_ids`` for pytest parameters): every file that sweeps an op sees the same tensors.

Seeds: one convention, ``microtensor.testing.seed_for(text)`` (a stable hash of a name).
An op's samples are drawn with the seed of the op's name; before each test the global
generators (microtensor's, NumPy's legacy one and PyTorch's when installed) are seeded with
the seed of the test's node id, so a test draws the same numbers whether it runs alone or
after others.  A test that needs another stream makes its own ``maker(seed_for(...))`` or
``np.random.default_rng(...)``.
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor.testing import seed_for

try:
    import torch
except ImportError:
    torch = None


@pytest.fixture(autouse=True)
def _seeded(request):
    seed = seed_for(request.node.nodeid)
    mt.manual_seed(seed)
    np.random.seed(seed)
    if torch is not None:
        torch.manual_seed(seed)
