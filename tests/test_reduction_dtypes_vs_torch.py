"""Ops that take a ``dtype`` argument (``sum``, ``mean``, ``cumsum``, ``norm``, ``softmax``
...), on every input dtype with every ``dtype`` asked for, against PyTorch.

PyTorch casts the input to ``dtype`` before it reduces (a complex tensor summed into
float32 sums its real parts), refuses what it has no kernel for (a cumulative sum in
bool) and checks that ``dtype`` fits the op (``norm`` wants a real ``dtype`` for a real
input, and no narrowing).  A mismatch is a wrong dtype or value, or a refusal of the
wrong type, so each combination runs in both libraries: where PyTorch answers,
microtensor gives the same dtype and values; where it refuses, the same exception type.
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.ops import REGISTRY
from test_promotion_vs_torch import outcome_problem

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128"]
ALONG_ONLY = ("cumsum", "cumprod", "softmax", "log_softmax")   # a dim is required
VALUES = np.array([[1, 2, 0], [3, 1, 2]])

OPS = sorted(name for name, op in REGISTRY.items()
             if "dtype" in op.param_names and op.function and op.kind not in
             ("inplace", "factory") and not name.startswith(("_", "new_"))
             and not name.endswith("_like") and torch is not None and hasattr(torch, name))


def _outcome(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args, **kwargs), None
        except Exception as error:   # noqa: BLE001 (compared with PyTorch's)
            return None, error


def test_the_ops_with_a_dtype_argument_are_swept():
    assert {"sum", "mean", "prod", "cumsum", "cumprod", "nansum", "nanmean", "norm",
            "softmax", "log_softmax"} <= set(OPS)


@pytest.mark.parametrize("name", OPS)
def test_every_input_and_asked_dtype_matches_torch(name):
    t_fn, mt_fn = getattr(torch, name), getattr(mt, name)
    failures = []
    for source in DTYPES:
        values = VALUES.astype(bool) if source == "bool" else VALUES
        x = mt.tensor(values, dtype=getattr(mt, source))
        tx = torch.tensor(values, dtype=getattr(torch, source))
        for asked in [None] + DTYPES:
            kwargs = {} if asked is None else {"dtype": getattr(mt, asked)}
            t_kwargs = {} if asked is None else {"dtype": getattr(torch, asked)}
            for dims in ([(1,)] if name in ALONG_ONLY else [(), (1,)]):
                expected, t_error = _outcome(t_fn, tx, *dims, **t_kwargs)
                ours, error = _outcome(mt_fn, x, *dims, **kwargs)
                problem = outcome_problem(ours, error, expected, t_error, rtol=1e-2)
                if problem:
                    failures.append(f"{name}({source}, {dims}, dtype={asked}): {problem}")
    assert not failures, "\n".join(failures[:20])
