"""A tensor argument given as something else (a dict, a string, a list of numbers) raises
PyTorch's TypeError naming the argument and its position, not an AttributeError from
inside a kernel."""
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

CALLS = {
    "exp(dict)": lambda lib: lib.exp({}),
    "exp(list)": lambda lib: lib.exp([1.0, 2.0]),
    "sum(str)": lambda lib: lib.sum("abc"),
    "matmul(t, list)": lambda lib: lib.matmul(lib.ones(2, 2), [[1.0, 2.0], [3.0, 4.0]]),
    "linear(dict, w)": lambda lib: lib.nn.functional.linear({}, lib.ones(2, 2)),
    "mul(t, set)": lambda lib: lib.mul(lib.ones(2), {1}),
    "add(t, dict)": lambda lib: lib.add(lib.ones(2), {}),
}


@pytest.mark.parametrize("name", CALLS)
def test_non_tensor_inputs_raise_torchs_type_error(name):
    with pytest.raises(TypeError) as theirs:
        CALLS[name](torch)
    with pytest.raises(TypeError) as ours:
        CALLS[name](mt)
    assert str(ours.value) == str(theirs.value)


def test_a_kernels_own_attribute_error_is_not_renamed():
    class Odd:
        """A tensor whose kernel-side attribute is missing is not an argument's fault."""
    with pytest.raises(TypeError, match="must be Tensor, not Odd"):
        mt.exp(Odd())
