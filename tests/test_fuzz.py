"""Bad input: every refusal is a Python exception of PyTorch's type whose message names the
argument and the limit, raised before any memory is touched (a refused in-place op leaves
its target's values and version unchanged).  A fuzz loop throws random, mostly invalid,
arguments at every view op and factory and checks that only ordinary exceptions come out
(in a subprocess too, so that a crash would fail the test instead of killing the run).
``MICROTENSOR_FUZZ_EXAMPLES=N`` runs N random examples (chains) instead of the fixed
default, as in tests/test_differential.py."""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import microtensor as mt
from microtensor._C import meta
from microtensor.testing.fuzzing import examples, fuzz_settings

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
EXPECTED = (RuntimeError, IndexError, ValueError, TypeError, OverflowError, NotImplementedError)
HUGE = 2 ** 62

# name, call (same on both libraries), exception type, words the message must contain
BAD_INPUT = [
    ("zeros negative", lambda L, x: L.zeros(2, -3), RuntimeError, ["-3"]),
    ("empty overflowing", lambda L, x: L.empty(HUGE, 4), RuntimeError, ["overflow"]),
    ("ones not an int", lambda L, x: L.ones(2.5), TypeError, ["float"]),
    ("ones beyond 64 bits", lambda L, x: L.ones(2 ** 64), TypeError, []),
    ("full size not a tuple", lambda L, x: L.full(2, 1.0), TypeError, ["size"]),
    ("tensor dtype not a dtype", lambda L, x: L.tensor([1], dtype="float32"), TypeError,
     ["dtype"]),
    ("tensor ragged", lambda L, x: L.tensor([[1, 2], [3]]), ValueError, ["length 2", "dim 1"]),
    ("eye negative", lambda L, x: L.eye(-1), RuntimeError, ["n", "-1"]),
    ("arange wrong sign", lambda L, x: L.arange(0, 3, -1), RuntimeError, ["sign"]),
    ("arange zero step", lambda L, x: L.arange(0, 3, 0), RuntimeError, ["step"]),
    ("arange infinite", lambda L, x: L.arange(0, float("inf")), RuntimeError, ["inf"]),
    ("linspace negative steps", lambda L, x: L.linspace(0, 1, -1), RuntimeError, ["steps"]),
    ("randint empty range", lambda L, x: L.randint(5, 2, (3,)), RuntimeError, ["5", "2"]),
    ("rand int dtype", lambda L, x: L.rand(2, dtype=L.int64), NotImplementedError, []),
    ("empty_strided length", lambda L, x: L.empty_strided((2, 3), (1,)), RuntimeError, ["2", "1"]),
    ("empty_strided negative stride", lambda L, x: L.empty_strided((2, 3), (-1, 2)),
     RuntimeError, ["-1"]),
    ("empty_strided overflow", lambda L, x: L.empty_strided((HUGE, 4), (4, 1)), RuntimeError,
     ["overflow"]),
    ("new_empty_strided length", lambda L, x: x.new_empty_strided((2, 3), (1,)), RuntimeError,
     ["2", "1"]),
    ("new_empty_strided overflow", lambda L, x: x.new_empty_strided((HUGE, 2), (2, 1)),
     RuntimeError, ["overflow"]),
    ("new_zeros negative", lambda L, x: x.new_zeros(-1), RuntimeError, ["-1"]),
    ("new_full size not a tuple", lambda L, x: x.new_full(2, 1.0), TypeError, ["size"]),
    ("view impossible", lambda L, x: x.transpose(0, 1).view(-1), RuntimeError, ["view", "reshape"]),
    ("view wrong numel", lambda L, x: x.view(5, 5), RuntimeError, ["[5, 5]", "24"]),
    ("view two -1", lambda L, x: x.view(-1, -1), RuntimeError, ["one dimension"]),
    ("view negative", lambda L, x: x.view(-2, 12), RuntimeError, ["-2"]),
    ("view float size", lambda L, x: x.view(2.0, 12), TypeError, ["float"]),
    ("reshape wrong numel", lambda L, x: x.reshape(7, -1), RuntimeError, ["[7, -1]", "24"]),
    ("reshape not ints", lambda L, x: x.reshape("a"), TypeError, []),
    ("transpose out of range", lambda L, x: x.transpose(0, 3), IndexError, ["[-3, 2]", "3"]),
    ("transpose float dim", lambda L, x: x.transpose(0.0, 1), TypeError, ["dim0", "float"]),
    ("t of 3-d", lambda L, x: x.t(), RuntimeError, ["2 dimensions", "3"]),
    ("mT of 1-d", lambda L, x: x[0, 0].mT, RuntimeError, ["1"]),
    ("permute too few", lambda L, x: x.permute(0, 1), RuntimeError, ["3", "2"]),
    ("permute repeated", lambda L, x: x.permute(0, 0, 1), RuntimeError, ["duplicate"]),
    ("permute out of range", lambda L, x: x.permute(0, 1, 3), IndexError, ["3"]),
    ("permute float", lambda L, x: x.permute(0, 1, 2.0), TypeError, ["float"]),
    ("movedim repeated", lambda L, x: x.movedim((0, 0), (1, 2)), RuntimeError, ["repeated"]),
    ("movedim lengths", lambda L, x: x.movedim((0, 1), (1,)), RuntimeError, ["source"]),
    ("select out of range", lambda L, x: x.select(1, 3), IndexError, ["3", "1"]),
    ("select negative out of range", lambda L, x: x.select(1, -4), IndexError, ["-4"]),
    ("select bad dim", lambda L, x: x.select(3, 0), IndexError, ["3"]),
    ("select float index", lambda L, x: x.select(0, 1.0), TypeError, ["index"]),
    ("narrow past the end", lambda L, x: x.narrow(2, 3, 2), RuntimeError, ["3", "2", "4"]),
    ("narrow negative length", lambda L, x: x.narrow(2, 0, -1), RuntimeError, ["length"]),
    ("narrow start out of range", lambda L, x: x.narrow(2, 5, 0), IndexError, ["5"]),
    ("getitem out of range", lambda L, x: x[2], IndexError, ["2", "0", "size 2"]),
    ("getitem negative out of range", lambda L, x: x[-3], IndexError, ["-3"]),
    ("getitem too many", lambda L, x: x[0, 0, 0, 0], IndexError, ["too many"]),
    ("unsqueeze out of range", lambda L, x: x.unsqueeze(4), IndexError, ["[-4, 3]", "4"]),
    ("unsqueeze float", lambda L, x: x.unsqueeze(1.0), TypeError, ["dim"]),
    ("squeeze out of range", lambda L, x: x.squeeze(3), IndexError, ["3"]),
    ("flatten reversed", lambda L, x: x.flatten(2, 1), RuntimeError, ["start_dim"]),
    ("unflatten wrong product", lambda L, x: x.unflatten(2, (3, 2)), RuntimeError, ["[3, 2]", "4"]),
    ("unflatten empty", lambda L, x: x.unflatten(2, ()), RuntimeError, ["non-empty"]),
    ("expand mismatch", lambda L, x: x.expand(2, 3, 5), RuntimeError, ["5", "4"]),
    ("expand too few", lambda L, x: x.expand(3, 4), RuntimeError, ["2", "3"]),
    ("expand -1 leading", lambda L, x: x.expand(-1, 2, 3, 4), RuntimeError, ["-1"]),
    ("expand float", lambda L, x: x.expand(2, 3, 4.0), TypeError, []),
    ("broadcast_to mismatch", lambda L, x: x.broadcast_to((3, 3, 4)), RuntimeError, ["3", "2"]),
    ("diagonal same dims", lambda L, x: x.diagonal(0, 1, 1), RuntimeError, ["1"]),
    ("diagonal out of range", lambda L, x: x.diagonal(0, 0, 3), IndexError, ["3"]),
    ("unfold too big", lambda L, x: x.unfold(2, 5, 1), RuntimeError, ["4", "5"]),
    ("unfold zero step", lambda L, x: x.unfold(2, 2, 0), RuntimeError, ["step", "0"]),
    ("unfold negative size", lambda L, x: x.unfold(2, -1, 1), RuntimeError, ["-1"]),
    ("as_strided outside", lambda L, x: x.as_strided((5, 5), (5, 1)), RuntimeError,
     ["out of bounds"]),
    ("as_strided offset outside", lambda L, x: x.as_strided((1,), (1,), 24), RuntimeError,
     ["out of bounds"]),
    ("as_strided negative stride", lambda L, x: x.as_strided((2,), (-1,), 5), RuntimeError,
     ["-1"]),
    ("as_strided lengths", lambda L, x: x.as_strided((2, 2), (1,)), RuntimeError,
     ["length of strides"]),
    ("as_strided negative offset", lambda L, x: x.as_strided((2,), (1,), -1), RuntimeError,
     ["-1"]),
    ("as_strided negative size", lambda L, x: x.as_strided((-1,), (1,)), RuntimeError, ["-1"]),
    ("as_strided huge", lambda L, x: x.as_strided((HUGE,), (HUGE,)), RuntimeError, []),
    ("as_strided huge stride", lambda L, x: x.as_strided((2, 2), (2 ** 63 - 1, 1)), RuntimeError,
     []),
    ("as_strided float size", lambda L, x: x.as_strided((2.0,), (1,)), TypeError, []),
    ("expand numel overflow", lambda L, x: x[:, :, :1].expand(2, 3, HUGE), RuntimeError,
     ["overflow"]),
    ("item of many", lambda L, x: x.item(), RuntimeError, ["24"]),
    ("float of many", lambda L, x: float(x), ValueError, ["one element"]),
    ("bool of many", lambda L, x: bool(x), RuntimeError, ["ambiguous"]),
    ("len of 0-d", lambda L, x: len(x[0, 0, 0]), TypeError, ["0-d"]),
    ("requires_grad of ints", lambda L, x: L.ones(2, dtype=L.int64).requires_grad_(),
     RuntimeError, ["floating point"]),
    ("copy_ shape mismatch", lambda L, x: x.copy_(L.ones(3)), RuntimeError, ["3", "4"]),
    ("copy_ not a tensor", lambda L, x: x.copy_([1.0]), TypeError, ["list"]),
    ("copy_ into expanded", lambda L, x: x[:, :1].expand(2, 3, 4).copy_(L.ones(2, 3, 4)),
     RuntimeError, ["single memory location"]),
    ("copy_ partial overlap", lambda L, x: x.view(-1)[1:13].copy_(x.view(-1)[:12]), RuntimeError,
     ["single memory location"]),
    ("contiguous preserve", lambda L, x: x.transpose(0, 1).contiguous(
        memory_format=L.preserve_format), RuntimeError, ["preserve"]),
    ("channels_last on 3-d", lambda L, x: x.contiguous(memory_format=L.channels_last),
     RuntimeError, ["rank 4"]),
]


def fresh(lib):
    return lib.arange(24.).reshape(2, 3, 4).clone()


@pytest.mark.parametrize("name, fn, error, words", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_raises_the_right_exception(name, fn, error, words):
    x = fresh(mt)
    with pytest.raises(error) as info:
        fn(mt, x)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)
    assert x._version == 0 and x.numpy().ravel().tolist() == list(range(24))


@requires_torch
@pytest.mark.parametrize("name, fn, error, words", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_torch_raises_the_same_type(name, fn, error, words):
    with pytest.raises(error):
        fn(torch, fresh(torch))


# --------------------------------------------------------------- refused in-place writes

REFUSED_WRITES = [
    ("copy_ from a wider tensor", lambda x: x.copy_(mt.ones(3, 2, 3, 4))),
    ("copy_ wrong size", lambda x: x.copy_(mt.ones(5))),
    ("copy_ into a stride-0 view", lambda x: x[:, :1].expand(2, 3, 4).copy_(mt.zeros(2, 3, 4))),
    ("copy_ from a shifted view of itself", lambda x: x.view(-1)[2:].copy_(x.view(-1)[:22])),
    ("copy_ transposed onto itself",
     lambda x: x.view(-1)[:16].view(4, 4).copy_(x.view(-1)[:16].view(4, 4).t())),
    ("add_ that would broadcast self", lambda x: x.add_(mt.ones(2, 2, 3, 4))),
    ("as_strided outside", lambda x: x.as_strided((30,), (1,)).zero_()),
    ("view impossible then write", lambda x: x.transpose(0, 2).view(24).zero_()),
    ("select out of range then write", lambda x: x.select(0, 5).zero_()),
]


@pytest.mark.parametrize("name, fn", REFUSED_WRITES, ids=[c[0] for c in REFUSED_WRITES])
def test_refused_in_place_ops_leave_the_target_unchanged(name, fn):
    x = fresh(mt)
    with pytest.raises(EXPECTED):
        fn(x)
    assert x._version == 0
    assert x.numpy().ravel().tolist() == list(range(24))


def test_copy_between_overlapping_views_that_pytorch_allows():
    x = mt.arange(10.)
    x[::2].copy_(x[1::2])                 # same storage, disjoint elements
    assert x.tolist() == [1, 1, 3, 3, 5, 5, 7, 7, 9, 9]
    y = mt.arange(9.).view(3, 3)
    y.copy_(y)                             # the very same tensor: nothing to do
    assert y.view(-1).tolist() == list(range(9))
    z = mt.arange(10.)
    z[2:10:2].copy_(z[0:8:2])              # overlapping, non-dense: reads see the old values
    assert z.tolist() == [0, 1, 0, 3, 2, 5, 4, 7, 6, 9]


# --------------------------------------------------------------- fuzz loop

junk = st.one_of(
    st.integers(-6, 6), st.integers(-2 ** 70, 2 ** 70), st.sampled_from([2 ** 62, -2 ** 63]),
    st.floats(allow_nan=True, allow_infinity=True), st.none(), st.booleans(),
    st.text(max_size=2), st.lists(st.integers(-3, 6), max_size=5).map(tuple),
    st.lists(st.integers(-2 ** 64, 2 ** 64), max_size=3))

CALLS = {
    "view": lambda x, a: x.view(*a), "reshape": lambda x, a: x.reshape(*a),
    "view_as": lambda x, a: x.view_as(mt.empty(*a[:1])), "transpose": lambda x, a: x.transpose(*a),
    "t": lambda x, a: x.t(), "T": lambda x, a: x.T, "mT": lambda x, a: x.mT,
    "permute": lambda x, a: x.permute(*a), "movedim": lambda x, a: x.movedim(*a),
    "select": lambda x, a: x.select(*a), "narrow": lambda x, a: x.narrow(*a),
    "getitem": lambda x, a: x[tuple(a)], "unsqueeze": lambda x, a: x.unsqueeze(*a),
    "squeeze": lambda x, a: x.squeeze(*a), "flatten": lambda x, a: x.flatten(*a),
    "unflatten": lambda x, a: x.unflatten(*a), "expand": lambda x, a: x.expand(*a),
    "broadcast_to": lambda x, a: x.broadcast_to(*a), "diagonal": lambda x, a: x.diagonal(*a),
    "unfold": lambda x, a: x.unfold(*a), "as_strided": lambda x, a: x.as_strided(*a),
    "detach": lambda x, a: x.detach(), "alias": lambda x, a: mt.alias(x),
    "contiguous": lambda x, a: x.contiguous(*a), "clone": lambda x, a: x.clone(),
    "copy_": lambda x, a: x.copy_(mt.tensor(a[0]) if a else x),
    "to": lambda x, a: x.to(*a),
    "zeros": lambda x, a: mt.zeros(*a), "ones": lambda x, a: mt.ones(*a),
    "empty": lambda x, a: mt.empty(*a), "full": lambda x, a: mt.full(*a),
    "arange": lambda x, a: mt.arange(*a), "linspace": lambda x, a: mt.linspace(*a),
    "eye": lambda x, a: mt.eye(*a), "rand": lambda x, a: mt.rand(*a),
    "randn": lambda x, a: mt.randn(*a), "randint": lambda x, a: mt.randint(*a),
    "empty_strided": lambda x, a: mt.empty_strided(*a), "tensor": lambda x, a: mt.tensor(a),
    "new_empty": lambda x, a: x.new_empty(*a), "new_zeros": lambda x, a: x.new_zeros(*a),
    "new_ones": lambda x, a: x.new_ones(*a), "new_full": lambda x, a: x.new_full(*a),
    "new_tensor": lambda x, a: x.new_tensor(a), "new_empty_strided":
        lambda x, a: x.new_empty_strided(*a), "empty_like": lambda x, a: mt.empty_like(x),
    "zeros_like": lambda x, a: mt.zeros_like(x, dtype=a[0] if a else None),
    "full_like": lambda x, a: mt.full_like(x, *a),
}


ALLOCATING = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "eye", "view_as",
              "new_empty", "new_zeros", "new_ones", "new_full", "arange", "linspace", "tensor",
              "new_tensor"}


def _largest(args):
    values = [abs(a) for a in args if isinstance(a, (int, float)) and a == a]
    values += [_largest(a) for a in args if isinstance(a, (list, tuple))]
    return max(values, default=0)


@given(st.sampled_from(sorted(CALLS)), st.lists(junk, max_size=4),
       st.sampled_from([(2, 3, 4), (0, 3), (), (5,), (1, 1, 2)]))
@fuzz_settings(1500)
def test_fuzz_only_ordinary_exceptions(name, args, shape):
    if name in ALLOCATING and _largest(args) > 4096:
        return  # a valid huge size would really allocate (and fill) that much memory
    x = mt.arange(float(int(np.prod(shape)))).reshape(shape).clone()
    before = x.numpy().copy()
    try:
        result = CALLS[name](x, args)
    except EXPECTED:
        assert x._version == 0 and np.array_equal(x.numpy(), before)
        return
    if isinstance(result, mt.Tensor) and result.numel() and \
            result.untyped_storage() is x.untyped_storage():
        # every element a view claims must lie inside the storage
        reach = result.storage_offset() + meta.storage_size_for(result.shape, result.stride())
        assert reach <= x.untyped_storage().nbytes() // x.element_size()
        if result.numel() <= 10 ** 6:  # NumPy cannot even describe larger expanded views
            np.asarray(result)


FUZZ_SCRIPT = textwrap.dedent("""
    import random, sys
    import numpy as np
    import microtensor as mt
    random.seed(int(sys.argv[1]))
    count = int(sys.argv[2])
    EXPECTED = (RuntimeError, IndexError, ValueError, TypeError, OverflowError,
                NotImplementedError)
    def junk():
        if random.random() < 0.7:  # mostly plausible arguments, so that chains get deep
            return random.choice([random.randint(-2, 4), tuple(
                random.randint(-1, 4) for _ in range(random.randint(0, 3)))])
        return random.choice([
            lambda: random.randint(-6, 6), lambda: random.randint(-2 ** 66, 2 ** 66),
            lambda: random.choice([2 ** 62, -2 ** 63, 2 ** 63 - 1]), lambda: random.random() * 4,
            lambda: None, lambda: tuple(random.randint(-3, 6) for _ in range(random.randint(0, 4))),
            lambda: [random.randint(-3, 2 ** 40) for _ in range(random.randint(0, 3))]])()
    x0 = mt.arange(24.).reshape(2, 3, 4).clone()
    ops = [lambda x, a: x.as_strided(*a), lambda x, a: x.view(*a), lambda x, a: x.expand(*a),
           lambda x, a: x.unfold(*a), lambda x, a: x.narrow(*a), lambda x, a: x.diagonal(*a),
           lambda x, a: x.select(*a), lambda x, a: x.permute(*a), lambda x, a: x[tuple(a)],
           lambda x, a: x.unflatten(*a), lambda x, a: x.movedim(*a),
           lambda x, a: x.new_empty_strided(*a), lambda x, a: mt.empty_strided(*a)]
    calls = failed = 0
    for _ in range(count):
        x = x0
        for _ in range(random.randint(1, 3)):  # chains: fuzz views of views
            args = [junk() for _ in range(random.randint(0, 4))]
            calls += 1
            try:
                y = random.choice(ops)(x, args)
            except EXPECTED:
                failed += 1
                break
            if y.numel() and y.numel() < 10 ** 6 and y.untyped_storage() is x0.untyped_storage():
                np.asarray(y).sum()  # reads every element the view claims
                y.clone()
            x = y
    print("calls", calls, "refused", failed)
""")


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzz_chains_in_a_subprocess_never_crash(seed):
    src = str(pathlib.Path(mt.__file__).parent.parent)
    env = dict(os.environ, PYTHONPATH=src)
    proc = subprocess.run([sys.executable, "-c", FUZZ_SCRIPT, str(seed), str(examples(3000))],
                          capture_output=True, text=True, env=env,
                          timeout=120 * max(1, examples(3000) // 3000))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "calls" in proc.stdout


def test_dimension_limit_is_checked_before_memory_is_touched():
    # kernels and ndarray views have room for 64 dims: the 65th must be refused, not written
    x = mt.ones(1)
    for _ in range(63):
        x = x.unsqueeze(0)
    assert x.dim() == 64
    with pytest.raises(RuntimeError, match="at most 64 dimensions"):
        x.unsqueeze(0)
    with pytest.raises(RuntimeError, match="at most 64 dimensions"):
        mt.empty((1,) * 65)
    assert x.transpose(0, 63).contiguous().numpy().shape == (1,) * 64
