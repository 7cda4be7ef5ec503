"""``nonzero_static`` (a shape known before the values, so vmap batches it with a rule,
where PyTorch falls back to a loop) and the complex casts ``Tensor.cfloat()``/
``cdouble()``, against PyTorch."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


@pytest.mark.parametrize("values", [[[0, 1], [2, 0], [3, 4]], [[0.0, 0.0]], 5.0, [True, False],
                                    [[[1, 0], [0, 1]], [[0, 0], [2, 2]]]])
@pytest.mark.parametrize("size", [0, 1, 3, 7])
@pytest.mark.parametrize("fill_value", [-1, 9])
def test_nonzero_static_as_torch(values, size, fill_value):
    ours = mt.nonzero_static(mt.tensor(values), size=size, fill_value=fill_value)
    theirs = torch.nonzero_static(torch.tensor(values), size=size, fill_value=fill_value)
    assert ours.dtype == mt.int64 and tuple(ours.shape) == tuple(theirs.shape)
    assert tuple(ours.stride()) == tuple(theirs.stride())
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_nonzero_static_under_vmap_is_per_sample_and_refuses_negative_sizes():
    batch = [[0, 1, 1], [1, 0, 0], [0, 0, 0]]
    ours = mt.vmap(lambda r: mt.nonzero_static(r, size=2, fill_value=9), in_dims=1)(
        mt.tensor(batch).T)
    expected = [torch.nonzero_static(torch.tensor(row), size=2, fill_value=9) for row in batch]
    np.testing.assert_array_equal(ours.numpy(), torch.stack(expected).numpy())
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="'size' must be an non-negative integer"):
            lib.nonzero_static(lib.ones(2), size=-1)


@pytest.mark.parametrize("cast", ["cfloat", "cdouble"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "complex128"])
def test_complex_casts_as_torch(cast, dtype):
    ours = getattr(mt.tensor([1, 0, 2]).to(getattr(mt, dtype)), cast)()
    theirs = getattr(torch.tensor([1, 0, 2]).to(getattr(torch, dtype)), cast)()
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
