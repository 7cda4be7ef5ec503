"""The normalisations and ``nll_loss`` on dtypes they have no kernel for, and with
parameters of another dtype, against PyTorch: integer, bool and complex inputs raise its
NotImplementedError (not a NumPy casting error); float32 parameters beside a float16 or
bfloat16 input are PyTorch's one allowed mix, the result in the input's dtype; any other
mix raises its "mixed dtype (CPU)" RuntimeError."""
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def outcome(fn):
    try:
        return "ok", str(fn().dtype).split(".")[-1]
    except Exception as error:  # noqa: BLE001 - the type and message are what is compared
        return type(error).__name__, str(error)


REFUSED = {
    "nll_loss (N, C, d)": lambda lib: lib.nn.functional.nll_loss(
        lib.ones(2, 3, 4, dtype=lib.long), lib.zeros(2, 4, dtype=lib.long)),
    "nll_loss (N, C)": lambda lib: lib.nn.functional.nll_loss(
        lib.ones(2, 3, dtype=lib.long), lib.zeros(2, dtype=lib.long)),
    "nll_loss (C,)": lambda lib: lib.nn.functional.nll_loss(lib.ones(3, dtype=lib.long),
                                                            lib.tensor(0)),
    "layer_norm long": lambda lib: lib.nn.functional.layer_norm(lib.ones(2, 3, dtype=lib.long),
                                                                (3,)),
    "layer_norm bool": lambda lib: lib.nn.functional.layer_norm(lib.ones(2, 3, dtype=lib.bool),
                                                                (3,)),
    "layer_norm complex": lambda lib: lib.nn.functional.layer_norm(
        lib.ones(2, 3, dtype=lib.complex64), (3,)),
    "LayerNorm module, long input": lambda lib: lib.nn.LayerNorm(3)(
        lib.ones(2, 3, dtype=lib.long)),
    "instance_norm long": lambda lib: lib.nn.functional.instance_norm(
        lib.ones(2, 3, 4, dtype=lib.long)),
    "batch_norm long": lambda lib: lib.nn.functional.batch_norm(
        lib.ones(2, 3, dtype=lib.long), None, None, training=True),
    "BatchNorm1d module, long input": lambda lib: lib.nn.BatchNorm1d(3)(
        lib.ones(2, 3, dtype=lib.long)),
    "group_norm long": lambda lib: lib.nn.functional.group_norm(lib.ones(2, 4, dtype=lib.long),
                                                                2),
    "rms_norm long": lambda lib: lib.nn.functional.rms_norm(lib.ones(2, 3, dtype=lib.long),
                                                            (3,)),
}


@pytest.mark.parametrize("case", REFUSED)
def test_no_kernel_for_the_dtype_as_torch(case):
    assert outcome(lambda: REFUSED[case](mt)) == outcome(lambda: REFUSED[case](torch))


FLOATS = ["float16", "bfloat16", "float32", "float64"]


def _normalisations(lib, a, w):
    F = lib.nn.functional
    return {
        "layer_norm": lambda: F.layer_norm(lib.ones(2, 3, dtype=a), (3,), lib.ones(3, dtype=w)),
        "group_norm": lambda: F.group_norm(lib.ones(2, 4, dtype=a), 2, lib.ones(4, dtype=w)),
        "batch_norm eval": lambda: F.batch_norm(lib.ones(2, 3, dtype=a), lib.zeros(3, dtype=w),
                                                lib.ones(3, dtype=w), lib.ones(3, dtype=w)),
        "batch_norm train": lambda: F.batch_norm(lib.ones(2, 3, dtype=a),
                                                 lib.zeros(3, dtype=w), lib.ones(3, dtype=w),
                                                 None, None, True),
        "instance_norm": lambda: F.instance_norm(lib.ones(2, 3, 4, dtype=a), None, None,
                                                 lib.ones(3, dtype=w)),
        "rms_norm": lambda: F.rms_norm(lib.ones(2, 3, dtype=a), (3,), lib.ones(3, dtype=w)),
    }


@pytest.mark.parametrize("name", list(_normalisations(mt, mt.float32, mt.float32)))
@pytest.mark.parametrize("input_dtype", FLOATS)
@pytest.mark.parametrize("parameter_dtype", FLOATS)
def test_parameter_dtype_rules_as_torch(name, input_dtype, parameter_dtype):
    ours = _normalisations(mt, getattr(mt, input_dtype), getattr(mt, parameter_dtype))[name]
    theirs = _normalisations(torch, getattr(torch, input_dtype),
                             getattr(torch, parameter_dtype))[name]
    assert outcome(ours) == outcome(theirs)
