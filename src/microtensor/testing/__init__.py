"""Helpers for microtensor's own tests and for users testing code built on it: random
tensors for op samples (``make``) and non-contiguous variants of a tensor."""
from microtensor.testing.samples import (differentiable_places, make, maker, noncontiguous,
                                         transposed_layout, variants)

__all__ = ["make", "maker", "noncontiguous", "transposed_layout", "variants",
           "differentiable_places"]
