"""More hardening against PyTorch, the oracle: sizes, dims and counts past int64 (PyTorch's
TypeError for a list of ints, its ValueError for a single int, never an OverflowError), on
the C fast paths and on the ops behind them; empty (zero-size) inputs and results; indices
and counts that would reach outside a storage.  A refused call leaves its tensor as it was."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
fuzz = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HUGE = st.sampled_from([2 ** 63, 2 ** 63 + 1, 2 ** 64, 2 ** 100, -2 ** 63 - 1, -2 ** 70])
SMALL = st.integers(-3, 4)


def outcome(fn):
    """``("ok", result)`` or ``(exception type name, message)``."""
    try:
        return "ok", fn()
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return type(error).__name__, str(error)


def assert_same_outcome(ours, theirs):
    """Same exception type, or both results with the same shape and strides."""
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok" and hasattr(theirs[1], "shape"):
        assert tuple(ours[1].shape) == tuple(theirs[1].shape)
        assert tuple(ours[1].stride()) == tuple(theirs[1].stride())


# ------------------------------------------------------------------ sizes past int64

# each call takes a list of sizes: ``L`` is the library, ``x`` a (2, 3) tensor of it
SIZE_CALLS = {
    "view": lambda L, x, s: x.view(*s),
    "view tuple": lambda L, x, s: x.view(tuple(s)),
    "reshape": lambda L, x, s: x.reshape(*s),
    "expand": lambda L, x, s: x.expand(*s),
    "broadcast_to": lambda L, x, s: L.broadcast_to(x, tuple(s)),
    "empty": lambda L, x, s: L.empty(*s),
    "zeros": lambda L, x, s: L.zeros(s),
    "full": lambda L, x, s: L.full(s, 1.0),
    "new_empty": lambda L, x, s: x.new_empty(s),
    "new_ones": lambda L, x, s: x.new_ones(s),
    "as_strided size": lambda L, x, s: x.as_strided(tuple(s), (1,) * len(s)),
    "as_strided stride": lambda L, x, s: x.as_strided((1,) * len(s), tuple(s)),
    "new_empty_strided": lambda L, x, s: x.new_empty_strided(tuple(s), (1,) * len(s)),
    "empty_strided stride": lambda L, x, s: L.empty_strided((1,) * len(s), tuple(s)),
    "repeat": lambda L, x, s: x.repeat(*s),
}


@requires_torch
@pytest.mark.parametrize("call", sorted(SIZE_CALLS))
@fuzz
@given(sizes=st.lists(SMALL, min_size=1, max_size=3), huge=HUGE, data=st.data())
def test_a_size_past_int64_is_pytorchs_type_error(call, sizes, huge, data):
    """A size (or stride) past int64 anywhere in the list: PyTorch's TypeError naming the
    argument, from the fast path and from the op alike (a tensor that requires grad, and
    a subclass, which the fast paths hand to the op)."""
    sizes.insert(data.draw(st.integers(0, len(sizes)), label="position"), huge)
    theirs = outcome(lambda: SIZE_CALLS[call](torch, torch.zeros(2, 3), sizes))
    assert theirs[0] == "TypeError"
    for x in (mt.zeros(2, 3), mt.zeros(2, 3, requires_grad=True),
              mt.nn.Parameter(mt.zeros(2, 3))):
        ours = outcome(lambda: SIZE_CALLS[call](mt, x, sizes))
        assert ours[0] == "TypeError", (x, ours)
        assert "64 bits" in ours[1] and str(huge) in ours[1]


@requires_torch
@pytest.mark.parametrize("call", ["view", "reshape", "expand", "empty", "new_empty",
                                  "as_strided size", "as_strided stride", "repeat"])
@fuzz
@given(sizes=st.lists(SMALL, min_size=1, max_size=4))
def test_negative_and_small_sizes_match_pytorch(call, sizes):
    """-1 where it is allowed, other negative sizes refused with PyTorch's type."""
    ours = outcome(lambda: SIZE_CALLS[call](mt, mt.zeros(2, 3), sizes))
    theirs = outcome(lambda: SIZE_CALLS[call](torch, torch.zeros(2, 3), sizes))
    if theirs[0] == "ok" and min(theirs[1].shape, default=0) < 0:
        # PyTorch's as_strided lets a negative size through beside a 0 (a tensor of size
        # (0, -1)): refused here
        assert ours[0] == "RuntimeError" and "negative dimension" in ours[1]
        return
    assert_same_outcome(ours, theirs)


def test_size_errors_name_the_argument():
    x = mt.zeros(2, 3)
    with pytest.raises(TypeError, match="'shape'.*9223372036854775808"):
        x.reshape(2 ** 63)
    with pytest.raises(TypeError, match="'size'.*18446744073709551616"):
        x.expand(2 ** 64, 2, 3)
    with pytest.raises(TypeError, match="'stride'"):
        x.as_strided((2,), (2 ** 63,))


@requires_torch
@pytest.mark.parametrize("call", [
    lambda L, x: x.as_strided((2,), (1,), 2 ** 63),
    lambda L, x: x.transpose(2 ** 63, 0),
    lambda L, x: x.transpose(0, -2 ** 63 - 1),
    lambda L, x: x.unsqueeze(2 ** 63),
    lambda L, x: x.sum(2 ** 63),
    lambda L, x: x.sum((0, 2 ** 64)),
    lambda L, x: x[2 ** 63],
    lambda L, x: x[0, 2 ** 63],
    lambda L, x: L.eye(2 ** 63),
], ids=["as_strided offset", "transpose", "transpose dim1", "unsqueeze", "sum dim",
        "sum dims", "getitem", "getitem 2nd", "eye"])
def test_an_index_dim_or_offset_past_int64_is_pytorchs_error(call):
    """A ValueError for an int, a TypeError for an int in a list (the dims of ``sum``), from
    the fast paths and the ops alike."""
    theirs = outcome(lambda: call(torch, torch.zeros(2, 3)))
    for x in (mt.zeros(2, 3), mt.zeros(2, 3, requires_grad=True)):
        ours = outcome(lambda: call(mt, x))
        assert ours[0] == theirs[0], (ours, theirs)
        assert "Overflow" in ours[1] or "64 bits" in ours[1]


def test_a_refused_resize_or_set_changes_nothing():
    x = mt.arange(6.0).view(2, 3)
    for huge in (2 ** 63, 2 ** 64, -2 ** 63 - 1):
        with pytest.raises(TypeError):
            x.resize_(huge, 1)
        with pytest.raises(TypeError):
            x.as_strided_((huge,), (1,))
    assert x.shape == (2, 3) and x.stride() == (3, 1)
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))


# ------------------------------------------------------------------ single ints past int64

# ``L`` is the library, ``x`` a (2, 3) float tensor of it, ``n`` the huge int
INT_CALLS = {
    "split": lambda L, x, n: x.split(n),
    "split_with_sizes": lambda L, x, n: x.split([n, 2 - n]),
    "chunk": lambda L, x, n: x.chunk(n),
    "tensor_split sections": lambda L, x, n: x.tensor_split(n),
    "tensor_split indices": lambda L, x, n: x.tensor_split([1, n]),
    "topk": lambda L, x, n: x.topk(n),
    "kthvalue": lambda L, x, n: x.kthvalue(n),
    "roll": lambda L, x, n: x.roll(n, 0),
    "roll dims": lambda L, x, n: x.roll(1, n),
    "roll list": lambda L, x, n: x.roll([n], [0]),
    "squeeze": lambda L, x, n: x.squeeze(n),
    "movedim": lambda L, x, n: x.movedim(n, 0),
    "tril": lambda L, x, n: x.tril(n),
    "triu": lambda L, x, n: x.triu(n),
    "tril_indices": lambda L, x, n: L.tril_indices(n, 2),
    "triu_indices offset": lambda L, x, n: L.triu_indices(2, 2, n),
    "diag": lambda L, x, n: x.diag(n),
    "diag_embed": lambda L, x, n: x.diag_embed(n),
    "rot90": lambda L, x, n: x.rot90(n),
    "rot90 dims": lambda L, x, n: x.rot90(1, [0, n]),
    "combinations": lambda L, x, n: L.combinations(L.tensor([1, 2]), n),
    "linspace": lambda L, x, n: L.linspace(0, 1, n),
    "logspace": lambda L, x, n: L.logspace(0, 1, n),
    "randperm": lambda L, x, n: L.randperm(n),
    "randint high": lambda L, x, n: L.randint(0, n, (2,)),
    "randint low": lambda L, x, n: L.randint(-n, 0, (2,)),
    "manual_seed": lambda L, x, n: L.manual_seed(n * 4),
    "multinomial": lambda L, x, n: L.ones(3).multinomial(n),
    "bincount": lambda L, x, n: L.tensor([1]).bincount(minlength=n),
    "histc": lambda L, x, n: L.ones(3).histc(n),
    "repeat_interleave": lambda L, x, n: x.repeat_interleave(n),
    "one_hot": lambda L, x, n: L.nn.functional.one_hot(L.tensor([1]), n),
    "pad": lambda L, x, n: L.nn.functional.pad(x, (n, 0)),
    "interpolate size": lambda L, x, n: L.nn.functional.interpolate(L.zeros(1, 1, 2), size=n),
    "avg_pool1d": lambda L, x, n: L.nn.functional.avg_pool1d(L.zeros(1, 1, 4), n),
    "max_pool2d stride": lambda L, x, n: L.nn.functional.max_pool2d(L.zeros(1, 1, 4, 4), 2, (1, n)),
    "conv1d stride": lambda L, x, n: L.nn.functional.conv1d(L.zeros(1, 1, 4), L.zeros(1, 1, 1),
                                                           stride=n),
    "unfold kernel": lambda L, x, n: L.nn.functional.unfold(L.zeros(1, 1, 4, 4), n),
    "nll_loss ignore_index": lambda L, x, n: L.nn.functional.nll_loss(
        x, L.tensor([0, 1]), ignore_index=n),
    "cross_entropy ignore_index": lambda L, x, n: L.nn.functional.cross_entropy(
        x, L.tensor([0, 1]), ignore_index=n),
    "pixel_shuffle": lambda L, x, n: L.nn.functional.pixel_shuffle(L.zeros(1, 4, 2, 2), n),
    "channel_shuffle": lambda L, x, n: L.nn.functional.channel_shuffle(L.zeros(1, 4, 2, 2), n),
}


@requires_torch
@pytest.mark.parametrize("call", sorted(INT_CALLS))
@pytest.mark.parametrize("huge", [2 ** 63, -2 ** 63 - 1, 2 ** 64])
def test_an_int_argument_past_int64_is_pytorchs_error(call, huge):
    """PyTorch's type: a ValueError for an int, a TypeError for an int in a list; never an
    OverflowError, a MemoryError or a result (a huge split, roll or stride is no answer)."""
    theirs = outcome(lambda: INT_CALLS[call](torch, torch.zeros(2, 3), huge))
    ours = outcome(lambda: INT_CALLS[call](mt, mt.zeros(2, 3), huge))
    if theirs[0] == "ok":    # PyTorch takes a seed up to 2**64 - 1 (a negative one wraps)
        assert ours[0] == "ok", ours
        return
    assert ours[0] == theirs[0], (ours, theirs)
    assert "Overflow" in ours[1] or "64 bits" in ours[1], ours


def test_manual_seed_wraps_a_negative_seed_as_pytorch():
    for seed, kept in ((-1, 2 ** 64 - 1), (-2 ** 63, 2 ** 63), (2 ** 64 - 1, 2 ** 64 - 1)):
        mt.manual_seed(seed)
        assert mt.initial_seed() == kept
    with pytest.raises(ValueError, match="Overflow"):
        mt.manual_seed(2 ** 64)


ONE_HOT_CASES = [
    ([5], 3), ([-1], 3), ([-1], -1), ([2], -2), ([1], 0), ([], -1), ([], 0), ([], 4),
    ([[1, 0]], 2), ([3, 0, 2], -1), (1, 3)]


@requires_torch
@pytest.mark.parametrize("values, num_classes", ONE_HOT_CASES)
def test_one_hot_checks_the_classes_as_pytorch(values, num_classes):
    """A class outside ``[0, num_classes)`` is PyTorch's RuntimeError, not a row of zeros."""
    ours = outcome(lambda: mt.nn.functional.one_hot(mt.tensor(values, dtype=mt.int64),
                                                    num_classes))
    theirs = outcome(lambda: torch.nn.functional.one_hot(
        torch.tensor(values, dtype=torch.int64), num_classes))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        assert tuple(ours[1].shape) == tuple(theirs[1].shape)
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
    else:
        assert ours[1] == theirs[1]


def test_one_hot_refuses_a_float_tensor():
    with pytest.raises(RuntimeError, match="LongTensor"):
        mt.nn.functional.one_hot(mt.tensor([1.0]), 3)


def test_one_hot_under_vmap_with_num_classes():
    rows = mt.tensor([[0, 2], [1, 1]])
    out = mt.vmap(lambda r: mt.nn.functional.one_hot(r, 3))(rows)
    np.testing.assert_array_equal(out.numpy(), np.eye(3, dtype=np.int64)[[[0, 2], [1, 1]]])


# ------------------------------------------------------------------ empty inputs and results

def _both(call, *shapes, dtype="float64"):
    """``call(L, *tensors)`` on zeros of ``shapes`` in both libraries (ints 0..3 in a long
    tensor when ``dtype`` is "int64")."""
    def tensors(L):
        out = []
        for i, shape in enumerate(shapes):
            values = (np.arange(math.prod(shape)) * (i + 7) % 5).reshape(shape)
            out.append(L.tensor(values, dtype=getattr(L, dtype)))
        return out
    return outcome(lambda: call(mt, *tensors(mt))), outcome(lambda: call(torch, *tensors(torch)))


def assert_same_results(ours, theirs):
    """Same exception type, or results of the same shapes, dtypes and values."""
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        return
    pairs = zip(ours[1], theirs[1]) if isinstance(theirs[1], tuple) else [(ours[1], theirs[1])]
    for a, b in pairs:
        assert tuple(a.shape) == tuple(b.shape)
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), equal_nan=True)


SHAPES_WITH_A_ZERO = st.lists(st.integers(0, 3), min_size=2, max_size=4).filter(
    lambda s: 0 in s)


@requires_torch
@pytest.mark.parametrize("call", [
    lambda L, a: L.linalg.lu_factor_ex(a)[:2],
    lambda L, a: L.linalg.lu(a),
    lambda L, a: L.lu_unpack(*L.linalg.lu_factor(a)),
], ids=["lu_factor_ex", "lu", "lu_unpack"])
@fuzz
@given(shape=SHAPES_WITH_A_ZERO)
def test_lu_of_empty_matrices_matches_pytorch(call, shape):
    assert_same_results(*_both(call, tuple(shape)))


@requires_torch
@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
@fuzz
@given(shape=SHAPES_WITH_A_ZERO, data=st.data())
def test_unique_along_a_dim_with_empty_dims_matches_pytorch(name, shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    ours, theirs = _both(lambda L, a: getattr(L, name)(a, dim=dim, return_counts=True),
                         tuple(shape), dtype="int64")
    assert_same_results(ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]


@requires_torch
@pytest.mark.parametrize("name, d", [
    ("adaptive_avg_pool1d", 1), ("adaptive_max_pool1d", 1), ("adaptive_avg_pool2d", 2),
    ("adaptive_max_pool2d", 2), ("adaptive_avg_pool3d", 3), ("adaptive_max_pool3d", 3)])
@fuzz
@given(data=st.data())
def test_adaptive_pooling_of_empty_inputs_matches_pytorch(name, d, data):
    """PyTorch lets only the first dim be empty (and the channels too for average pooling
    in 1-d and 2-d), with its message."""
    shape = data.draw(st.lists(st.integers(0, 3), min_size=d + 1, max_size=d + 2), label="shape")
    ours, theirs = _both(lambda L, a: getattr(L.nn.functional, name)(a, 2), tuple(shape))
    assert_same_results(ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]


@requires_torch
@pytest.mark.parametrize("shape", [(4, 0), (2, 0, 3, 2), (0, 3), (0, 3, 2)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_input_is_an_empty_result(shape, training):
    c = shape[1]
    stats = lambda L: (L.zeros(c, dtype=L.float64), L.ones(c, dtype=L.float64))  # noqa: E731
    ours, theirs = _both(lambda L, x: L.nn.functional.batch_norm(x, *stats(L),
                                                                 training=training), shape)
    assert_same_results(ours, theirs)


@requires_torch
def test_native_batch_norm_refuses_an_empty_batch_when_training():
    for L in (mt, torch):
        with pytest.raises(RuntimeError, match="at least one element"):
            L.native_batch_norm(L.zeros(0, 3), None, None, L.zeros(3), L.ones(3), True, 0.1,
                                1e-5)


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_an_empty_head_dim_averages_the_values(causal):
    """Scores of 0 (an empty dot product), not a division by zero."""
    ours, theirs = _both(
        lambda L, q, k, v: L.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=causal),
        (2, 3, 0), (2, 3, 0), (2, 3, 4))
    assert_same_results(ours, theirs)


EMPTY_CALLS = {
    "aminmax over an empty dim": lambda L: L.zeros(2, 0).aminmax(dim=1),
    "aminmax of an empty vector": lambda L: L.zeros(0).aminmax(dim=0),
    "aminmax of all": lambda L: L.zeros(0, 3).aminmax(),
    "aminmax over a full dim": lambda L: L.zeros(2, 0).aminmax(dim=0),
    "kthvalue over an empty dim": lambda L: L.zeros(2, 0).kthvalue(1),
    "inf norm over a full dim": lambda L: L.zeros(3, 0).norm(float("inf"), dim=0),
    "inf norm over an empty dim": lambda L: L.zeros(3, 0).norm(float("inf"), dim=1),
    "-inf norm over dims": lambda L: L.linalg.vector_norm(L.zeros(0, 3), float("-inf"), dim=1),
    "inf norm of all": lambda L: L.linalg.vector_norm(L.zeros(0, 3), float("inf")),
    "embedding_renorm_ of empty rows": lambda L: L.embedding_renorm_(
        L.zeros(3, 0), L.tensor([0, 1]), 1.0, float("inf")),
    "index_select from an empty dim": lambda L: L.zeros(0, 3).index_select(0, L.tensor([0])),
    "index_select from an empty vector": lambda L: L.zeros(0).index_select(0, L.tensor(1)),
    "embedding_renorm_ of an empty table": lambda L: L.embedding_renorm_(
        L.zeros(0, 3), L.tensor([0]), 1.0, 2.0),
    "index_select nothing": lambda L: L.zeros(0, 3).index_select(0, L.tensor([],
                                                                               dtype=L.long)),
    "embedding of an empty table": lambda L: L.nn.functional.embedding(L.tensor([0]),
                                                                       L.zeros(0, 3)),
    "linear with no features": lambda L: L.nn.functional.linear(L.ones(2, 3, 0), L.ones(5, 0),
                                                                L.ones(5)),
    "linear to no features": lambda L: L.nn.functional.linear(L.ones(2, 3, 4), L.ones(0, 4)),
    "constant pad crops an empty dim": lambda L: L.nn.functional.pad(L.zeros(3, 0), (2, -1)),
    "constant pad crops then pads": lambda L: L.nn.functional.pad(L.zeros(3, 1), (-2, 3)),
    "constant pad crops both sides": lambda L: L.nn.functional.pad(L.zeros(3, 4), (-1, -1)),
    "replicate pad of no channels": lambda L: L.nn.functional.pad(L.zeros(2, 0, 4), (1, 1),
                                                                  "replicate"),
    "reflect pad of an empty batch": lambda L: L.nn.functional.pad(L.zeros(0, 3, 4), (1, 1),
                                                                   "reflect"),
    "circular pad of no channels": lambda L: L.nn.functional.pad(L.zeros(2, 0, 4), (1, 1),
                                                                 "circular"),
}


# PyTorch's message names an internal select here; the type is the same
OWN_MESSAGE = {"embedding_renorm_ of an empty table"}


@requires_torch
@pytest.mark.parametrize("call", sorted(EMPTY_CALLS))
def test_empty_inputs_match_pytorch(call):
    ours = outcome(lambda: EMPTY_CALLS[call](mt))
    theirs = outcome(lambda: EMPTY_CALLS[call](torch))
    assert_same_results(ours, theirs)
    if ours[0] != "ok" and call not in OWN_MESSAGE:
        assert ours[1] == theirs[1]


@requires_torch
@pytest.mark.parametrize("in_features, out_features, lead", [(0, 5, (2, 3)), (4, 0, (2, 3)),
                                                              (4, 5, (0, 3)), (0, 5, ())])
def test_linear_with_empty_sizes_differentiates_as_pytorch(in_features, out_features, lead):
    """No ``reshape(-1, 0)`` (ambiguous) in the forward or the backward."""
    grads = []
    for L in (mt, torch):
        x = L.ones(lead + (in_features,), dtype=L.float64, requires_grad=True)
        w = L.ones(out_features, in_features, dtype=L.float64, requires_grad=True)
        b = L.ones(out_features, dtype=L.float64, requires_grad=True)
        L.nn.functional.linear(x, w, b).sum().backward()
        grads.append([t.grad.detach().numpy() for t in (x, w, b)])
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ sizes a storage cannot hold

BIG_CALLS = {
    "affine_grid overflowing": lambda L: L.nn.functional.affine_grid(
        L.zeros(1, 2, 3), (1, 1, 2 ** 31, 2 ** 31), align_corners=False),
    "affine_grid 3-d overflowing": lambda L: L.nn.functional.affine_grid(
        L.zeros(1, 3, 4), (1, 1, 2 ** 21, 2 ** 21, 2 ** 21), align_corners=False),
    "adaptive_avg_pool2d overflowing": lambda L: L.nn.functional.adaptive_avg_pool2d(
        L.ones(1, 1, 4, 4), 2 ** 40),
    "adaptive_max_pool2d overflowing": lambda L: L.nn.functional.adaptive_max_pool2d(
        L.ones(1, 1, 4, 4), 2 ** 40),
    "adaptive_max_pool3d overflowing": lambda L: L.nn.functional.adaptive_max_pool3d(
        L.ones(1, 1, 2, 2, 2), 2 ** 40),
    "adaptive_avg_pool2d negative": lambda L: L.nn.functional.adaptive_avg_pool2d(
        L.ones(1, 1, 4, 4), -1),
    "adaptive_max_pool2d negative": lambda L: L.nn.functional.adaptive_max_pool2d(
        L.ones(1, 1, 4, 4), (2, -1)),
    "adaptive_avg_pool1d to nothing": lambda L: L.nn.functional.adaptive_avg_pool1d(
        L.ones(1, 1, 4), 0),
    "adaptive_avg_pool2d to nothing": lambda L: L.nn.functional.adaptive_avg_pool2d(
        L.ones(1, 1, 4, 4), (0, 2)),
    "adaptive_max_pool2d to nothing": lambda L: L.nn.functional.adaptive_max_pool2d(
        L.ones(1, 1, 4, 4), (2, 0), return_indices=True),
    "resize_ overflowing": lambda L: L.zeros(4).resize_(2 ** 62),
    "set_ overflowing": lambda L: L.zeros(4).set_(L.zeros(2).untyped_storage(), 0, (2 ** 62,),
                                                  (1,)),
    "index_add out of range": lambda L: L.zeros(3).index_add(0, L.tensor([3]), L.ones(1)),
    "index_add negative": lambda L: L.zeros(3).index_add(0, L.tensor([-1]), L.ones(1)),
    "index_add rows out of range": lambda L: L.zeros(3, 2).index_add(0, L.tensor([7]),
                                                                     L.ones(1, 2)),
    "polygamma n past int64": lambda L: L.special.polygamma(2 ** 63, L.tensor([1.0])),
    "matrix_power n past int64": lambda L: L.linalg.matrix_power(L.eye(2), 2 ** 63),
    "arange end past uint64": lambda L: L.arange(0, 2 ** 64),
    "arange end past int64": lambda L: L.arange(0, 2 ** 63),
    "arange step past int64": lambda L: L.arange(0, 10, 2 ** 63),
    "arange start below int64": lambda L: L.arange(-2 ** 63 - 1, 0),
}


@requires_torch
@pytest.mark.parametrize("call", sorted(BIG_CALLS))
def test_sizes_no_storage_holds_are_refused_as_pytorch(call):
    """Refused before any memory is asked for, with PyTorch's type (the process used to
    be killed building affine_grid's 2**62 coordinates)."""
    ours = outcome(lambda: BIG_CALLS[call](mt))
    theirs = outcome(lambda: BIG_CALLS[call](torch))
    assert_same_results(ours, theirs)


def test_refused_resize_and_set_leave_the_tensor_alone():
    x = mt.arange(4.0)
    storage = x._storage.data
    for call in (lambda: x.resize_(2 ** 62), lambda: x.resize_(2 ** 40, 2 ** 30),
                 lambda: x.set_(mt.zeros(2).untyped_storage(), 0, (2 ** 62,), (1,))):
        with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
            call()
    assert x.shape == (4,) and x._storage.data is storage
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))


@pytest.mark.parametrize("shared", [False, True])
def test_from_file_refuses_an_overflowing_size_before_touching_the_file(tmp_path, shared):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(16))
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        mt.from_file(str(path), shared=shared, size=2 ** 62, dtype=mt.float32)
    with pytest.raises(ValueError, match="64 bits"):
        mt.from_file(str(path), shared=shared, size=2 ** 63, dtype=mt.float32)
    assert path.stat().st_size == 16


@requires_torch
@pytest.mark.parametrize("dtype, value, index", [
    ("int32", 2 ** 40, (0, 0)), ("int8", 300, 5), ("float32", 1e300, 7), ("int32", 1.5, 9)])
def test_setitem_converts_the_value_before_reading_the_index(dtype, value, index):
    """PyTorch's order: a value the tensor cannot hold is the error even at a bad index."""
    def call(L):
        x = L.zeros((), dtype=getattr(L, dtype)) if len(np.shape(index)) else \
            L.zeros(2, dtype=getattr(L, dtype))
        x[index] = value
    ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
    assert ours[0] == theirs[0], (ours, theirs)


@pytest.mark.parametrize("call", [lambda L, x: L.bitwise_and(x, 2 ** 80),
                                  lambda L, x: L.bitwise_or(x, -2 ** 70),
                                  lambda L, x: L.bitwise_left_shift(x, 2 ** 80),
                                  lambda L, x: x.clone().bitwise_xor_(2 ** 64),
                                  lambda L, x: 2 ** 80 & x])
def test_bitwise_ops_parse_their_scalar_before_refusing_floats(call):
    # PyTorch refuses an int past its scalar range before it looks at the float dtype
    with pytest.raises(OverflowError, match="int too big to convert"):
        call(mt, mt.tensor([-2.0, 1.0]))
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        mt.bitwise_and(mt.tensor([-2.0, 1.0]), 3)
