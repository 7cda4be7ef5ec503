"""Every two-input elementwise op written in place, on every pair of dtypes, against
PyTorch.

An in-place op keeps ``self``'s dtype: PyTorch first checks that the inputs' promoted
type casts into it (``int_tensor.add_(0.5)`` is refused, not truncated), then runs the
kernel and casts its result in.  A mismatch is a silently truncated or wrapped value, or
a refusal of the wrong type, so each op runs on ``self`` of eight dtypes with tensors,
0-d tensors and Python numbers of every kind, in both libraries: where PyTorch answers,
``self`` ends with the same values; where it refuses, microtensor raises the same
exception type and leaves ``self`` as it was.
"""
import warnings

import pytest

import microtensor as mt
from microtensor.ops import REGISTRY
from test_promotion_vs_torch import (DTYPES, _known_difference, _operand, _operands,
                                     outcome_problem)

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

OPS = sorted(name for name, op in REGISTRY.items()
             if op.kind == "inplace" and op.inplace_of is not None and
             op.inplace_of.family == "pointwise" and len(op.inputs) >= 2 and
             torch is not None and hasattr(torch.Tensor, name))


@pytest.mark.parametrize("name", OPS)
def test_every_dtype_pair_in_place_matches_torch(name):
    failures = []
    for dtype in DTYPES:
        for other, t_other, label in _operands():
            ours, theirs = _operand(mt, dtype, False), _operand(torch, dtype, False)
            before = ours.tolist()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    getattr(theirs, name)(t_other)
                    t_error = None
                except Exception as error:   # noqa: BLE001 (compared below)
                    t_error = error
                try:
                    getattr(ours, name)(other)
                    error = None
                except Exception as e:   # noqa: BLE001
                    error = e
            problem = outcome_problem(ours, error, theirs, t_error) or (
                "refused, but self changed" if error is not None and ours.tolist() != before
                else None)
            if problem and _known_difference(ours, other, theirs, t_error) is None:
                failures.append(f"{dtype}.{name}({label}): {problem}")
    assert not failures, "\n".join(failures[:20])
