"""Helpers for microtensor's own tests and for users testing code built on it:
``assert_close`` (PyTorch's), random tensors for op samples (``make``, ``samples_of``, one
seed convention: ``seed_for``) and non-contiguous variants of a tensor."""
from microtensor.testing._comparison import assert_close
from microtensor.testing.samples import (differentiable_places, make, maker, noncontiguous,
                                         sample_ids, samples_of, seed_for, transposed_layout,
                                         variants)

__all__ = ["assert_close", "make", "maker", "noncontiguous", "sample_ids", "samples_of",
           "seed_for", "transposed_layout", "variants", "differentiable_places"]
