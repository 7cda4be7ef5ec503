"""Factories and dtypes against PyTorch and hand-derived values: data factories (zero-copy
where PyTorch shares memory), size factories with dtype inference, ranges, random numbers
and seeding, ``*_like``, ``empty_strided``, the ``new_*`` methods, and type promotion
(``result_type`` over random tensor/scalar mixes, with Hypothesis)."""
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
fuzz = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DTYPES = ["float32", "float64", "int64", "int32", "bool"]


def described(t):
    """What a factory result must agree on: geometry, dtype name, requires_grad."""
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype).split(".")[-1],
            t.requires_grad)


def run_both(fn):
    out = []
    for lib in (mt, torch):
        try:
            out.append(fn(lib))
        except Exception as error:
            out.append(type(error))
    return out


# --------------------------------------------------------------- deterministic factories

FACTORIES = {
    "tensor float": lambda L: L.tensor([1.5, 2]),
    "tensor int": lambda L: L.tensor([[1, 2], [3, 4]]),
    "tensor bool": lambda L: L.tensor([True, False]),
    "tensor bool+int": lambda L: L.tensor([True, 2]),
    "tensor int+float": lambda L: L.tensor([1, 2.5]),
    "tensor 0-d": lambda L: L.tensor(3),
    "tensor 0-d float": lambda L: L.tensor(-2.5),
    "tensor empty": lambda L: L.tensor([]),
    "tensor empty 2-d": lambda L: L.tensor([[], []]),
    "tensor nested tuple": lambda L: L.tensor(((1, 2), (3, 4))),
    "tensor from ndarray int32": lambda L: L.tensor(np.arange(3, dtype=np.int32)),
    "tensor from ndarray f64": lambda L: L.tensor(np.ones((2, 2))),
    "tensor numpy scalar": lambda L: L.tensor(np.float64(2.5)),
    "tensor list with numpy scalar": lambda L: L.tensor([np.float64(1.0), 2]),
    "tensor dtype": lambda L: L.tensor([1, 2], dtype=L.float64),
    "tensor float to int": lambda L: L.tensor([1.7, -1.7], dtype=L.int32),
    "tensor requires_grad": lambda L: L.tensor([1.0, 2.0], requires_grad=True),
    "tensor of tensor": lambda L: L.tensor(L.ones(2, 3).t()),
    "tensor of 0-d tensors": lambda L: L.tensor([L.tensor(1.5), L.tensor(2.5)]),
    "as_tensor list": lambda L: L.as_tensor([1, 2]),
    "as_tensor dtype": lambda L: L.as_tensor([1, 2], dtype=L.float32),
    "zeros": lambda L: L.zeros(2, 3),
    "zeros tuple int32": lambda L: L.zeros((2, 3), dtype=L.int32),
    "zeros list": lambda L: L.zeros([2]),
    "zeros 0-d": lambda L: L.zeros(()),
    "zeros empty": lambda L: L.zeros(0, 3),
    "ones bool": lambda L: L.ones(2, dtype=L.bool),
    "ones requires_grad": lambda L: L.ones(2, requires_grad=True),
    "empty": lambda L: L.empty(2, 0, 3),
    "full int": lambda L: L.full((2,), 3),
    "full float": lambda L: L.full((2,), 3.5),
    "full bool": lambda L: L.full((2,), True),
    "full dtype": lambda L: L.full((2, 2), 3, dtype=L.float64),
    "full from 0-d tensor": lambda L: L.full((2,), L.tensor(4)),
    "arange int": lambda L: L.arange(5),
    "arange start end": lambda L: L.arange(1, 4),
    "arange float step": lambda L: L.arange(0, 1, 0.25),
    "arange negative step": lambda L: L.arange(5, 0, -2),
    "arange negative float step": lambda L: L.arange(5., 0, -1.5),
    "arange float end": lambda L: L.arange(1, 2.5),
    "arange float64": lambda L: L.arange(10, dtype=L.float64),
    "arange int32": lambda L: L.arange(3, dtype=L.int32),
    "arange empty": lambda L: L.arange(0),
    "arange symmetric": lambda L: L.arange(-2.5, 2.5, 0.5),
    "linspace int": lambda L: L.linspace(0, 10, 5, dtype=L.int64),
    "linspace one": lambda L: L.linspace(2, 3, 1),
    "linspace empty": lambda L: L.linspace(0, 1, 0),
    "eye": lambda L: L.eye(3),
    "eye rect": lambda L: L.eye(2, 4, dtype=L.int64),
    "eye 0": lambda L: L.eye(0),
    "eye bool": lambda L: L.eye(2, dtype=L.bool),
    "empty_strided": lambda L: L.empty_strided((2, 3), (1, 2)),
    "empty_strided gaps": lambda L: L.empty_strided((2, 3), (10, 3), dtype=L.int32),
    "empty_strided 0": lambda L: L.empty_strided((2, 0), (0, 0)),
    "new_empty": lambda L: L.ones(2, dtype=L.int32).new_empty(3),
    "new_empty kw": lambda L: L.ones(2).new_empty((2, 2), dtype=L.float64, requires_grad=True),
    "new_zeros": lambda L: L.ones(2, dtype=L.int32).new_zeros((2, 2), dtype=L.float64),
    "new_ones": lambda L: L.ones(2).new_ones(2, 1),
    "new_full": lambda L: L.ones(2, dtype=L.int32).new_full((2,), 1.7),
    "new_full bool": lambda L: L.ones(2).new_full((2,), True),
    "new_tensor": lambda L: L.ones(2, dtype=L.int32).new_tensor([1.5, 2.5]),
    "new_tensor keeps dtype": lambda L: L.ones(2).new_tensor([1, 2]),
    "new_tensor requires_grad": lambda L: L.ones(2).new_tensor([1, 2], requires_grad=True),
    "new_empty_strided": lambda L: L.ones(2).new_empty_strided((2, 3), (1, 2),
                                                             dtype=L.float64,
                                                             requires_grad=True),
    "zeros_like": lambda L: L.zeros_like(L.ones(2, 3).t(), dtype=L.int32),
    "ones_like requires_grad": lambda L: L.ones_like(L.ones(2), requires_grad=True),
    "full_like int from float": lambda L: L.full_like(L.ones(2, dtype=L.int32), 2.7),
    "empty_like gapped": lambda L: L.empty_like(L.ones(2, 6)[:, ::2]),
    "scalar_tensor": lambda L: L.scalar_tensor(3),
}
UNINITIALIZED = {"empty", "empty_strided", "empty_strided gaps", "empty_strided 0", "new_empty",
                 "new_empty kw", "new_empty_strided", "empty_like gapped"}


@requires_torch
@pytest.mark.parametrize("name", list(FACTORIES))
def test_factory_matches_torch(name):
    ours, theirs = run_both(FACTORIES[name])
    assert not isinstance(ours, type) or not issubclass(ours, Exception), ours
    assert described(ours) == described(theirs)
    if name not in UNINITIALIZED:
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


def test_hand_derived_values():
    assert mt.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert mt.arange(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert mt.arange(3).dtype is mt.int64 and mt.arange(3.0).dtype is mt.float32
    assert mt.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert mt.eye(2, 3).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert mt.full((2,), 7).dtype is mt.int64 and mt.full((2,), 7.0).dtype is mt.float32
    assert mt.full((1,), False).dtype is mt.bool
    assert mt.tensor([1, 2.0]).dtype is mt.float32 and mt.tensor([True, 1]).dtype is mt.int64
    assert mt.tensor([]).stride() == (1,) and mt.tensor([[], []]).stride() == (1, 1)
    assert mt.zeros(2, 3).stride() == (3, 1) and mt.zeros(2, 3).tolist() == [[0.0] * 3] * 2
    assert mt.empty_strided((2, 3), (1, 2)).stride() == (1, 2)
    assert mt.tensor([1.7, -1.7], dtype=mt.int32).tolist() == [1, -1]


LINSPACE_ENDS = [(0, 1), (-1, 1), (3, -2), (0.3, 7.1), (-3.7, 2.2), (-227.17, 226.3),
                 (1e-3, 1e3), (0, 6.283185307179586), (2, 2)]


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64",
                                   "int32", "int8", "uint8"])
@pytest.mark.parametrize("steps", [0, 1, 2, 5, 8, 100, 1001, 4097])
def test_linspace_gives_torchs_bits(steps, dtype):
    """Each point rounded as PyTorch's kernel rounds it (a fused multiply-add in float32
    and float64, whose points near zero are exact where two roundings were off by the
    ends' last place); integer results from the ends truncated first."""
    for start, end in LINSPACE_ENDS:
        try:
            theirs = torch.linspace(start, end, steps, dtype=getattr(torch, dtype))
        except RuntimeError:   # an end the dtype cannot hold
            with pytest.raises(RuntimeError, match="without overflow"):
                mt.linspace(start, end, steps, dtype=getattr(mt, dtype))
            continue
        ours = mt.linspace(start, end, steps, dtype=getattr(mt, dtype))
        assert described(ours) == described(theirs)
        np.testing.assert_array_equal(ours.double().numpy(), theirs.double().numpy(),
                                      err_msg=f"{start}, {end}")


def test_linspace_integer_ends_are_checked_and_wrapped_as_torch():
    assert mt.linspace(-1, 1, 5, dtype=mt.uint8).tolist() == \
        torch.linspace(-1, 1, 5, dtype=torch.uint8).tolist() if torch else True
    with pytest.raises(RuntimeError, match="without overflow"):
        mt.linspace(2, 300, 3, dtype=mt.uint8)
    assert mt.linspace(2, 300, 1, dtype=mt.uint8).tolist() == [2]


@requires_torch
@pytest.mark.parametrize("value", [-1, -200, -255, -256, 255, 256, -255.0, -3.5, 3.5, True])
def test_unsigned_fill_values_as_torch(value):
    """PyTorch's uint8 takes the integers from -255 (wrapped: -1 is 255) to 255, and the
    floats from 0; beyond, its overflow error."""
    calls = [lambda lib: lib.full((2,), value, dtype=lib.uint8),
             lambda lib: lib.zeros(2, dtype=lib.uint8).fill_(value),
             lambda lib: lib.zeros(2, dtype=lib.uint8).masked_fill(lib.tensor([True, False]),
                                                                   value)]
    for call in calls:
        try:
            expected = call(torch).tolist()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="without overflow"):
                call(mt)
            continue
        assert call(mt).tolist() == expected


def test_from_numpy_and_as_tensor_share_memory():
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = mt.from_numpy(arr)
    assert t.dtype is mt.int32 and t.stride() == (3, 1)
    t[0, 0] = 100
    arr[1, 2] = -5
    assert arr[0, 0] == 100 and t[1, 2].item() == -5
    strided = mt.from_numpy(arr[:, ::2])
    assert strided.stride() == (3, 2) and strided.tolist() == [[100, 2], [3, -5]]
    same = mt.as_tensor(arr)
    same.add_(1)
    assert arr[0, 1] == 2
    assert mt.as_tensor(t) is t
    assert mt.as_tensor(arr, dtype=mt.float64).dtype is mt.float64 and arr.dtype == np.int32
    copy = mt.tensor(arr)
    copy.zero_()
    assert arr[0, 1] == 2


def test_from_numpy_refuses_what_pytorch_refuses():
    with pytest.raises(ValueError, match="negative"):
        mt.from_numpy(np.arange(3)[::-1])
    with pytest.raises(TypeError):
        mt.from_numpy([1, 2])
    with pytest.raises(TypeError, match="uint16"):
        mt.from_numpy(np.zeros(2, np.uint16))


def test_from_numpy_of_read_only_memory_refuses_writes():
    frozen = np.frombuffer(bytes(16), dtype=np.float32)
    t = mt.from_numpy(frozen)
    assert t.tolist() == [0.0] * 4
    with pytest.raises((ValueError, RuntimeError)):
        t.copy_(mt.ones(4))
    assert t._version == 0 and frozen.tolist() == [0.0] * 4


def test_new_methods_take_keywords():
    base = mt.ones(2, dtype=mt.int32)
    z = base.new_zeros(2, 3, dtype=mt.float64, requires_grad=True)
    assert z.dtype is mt.float64 and z.requires_grad and z.is_leaf
    assert base.new_ones((1,)).dtype is mt.int32
    assert base.new_full((2,), 3).tolist() == [3, 3]
    e = base.new_empty_strided((2, 2), (1, 2), dtype=mt.float32)
    assert e.stride() == (1, 2) and e.dtype is mt.float32
    assert base.new_tensor([1.9]).tolist() == [1] and base.new_tensor([1.9]).dtype is mt.int32
    assert str(base.new_empty(1, device="cpu").device) == "cpu"


# --------------------------------------------------------------- random numbers

def test_random_factories_shapes_dtypes_and_ranges():
    r = mt.rand(100, 3)
    assert r.shape == (100, 3) and r.dtype is mt.float32
    values = r.numpy()
    assert values.min() >= 0 and values.max() < 1
    n = mt.randn(2000, dtype=mt.float64).numpy()
    assert n.dtype == np.float64 and abs(n.mean()) < 0.15 and 0.85 < n.std() < 1.15
    i = mt.randint(3, 7, (500,)).numpy()
    assert i.dtype == np.int64 and i.min() >= 3 and i.max() <= 6 and len(set(i.tolist())) == 4
    assert mt.randint(5, (2, 2)).shape == (2, 2)
    assert mt.randint(0, 5, (3,), dtype=mt.int32).dtype is mt.int32
    assert mt.rand_like(mt.ones(2, 3).t()).stride() == (1, 3)
    assert mt.randn_like(mt.ones(4, dtype=mt.float64)).dtype is mt.float64


def test_manual_seed_reproduces_and_generators_are_independent():
    mt.manual_seed(1234)
    first = (mt.rand(5).tolist(), mt.randn(3).tolist(), mt.randint(0, 100, (4,)).tolist())
    mt.manual_seed(1234)
    again = (mt.rand(5).tolist(), mt.randn(3).tolist(), mt.randint(0, 100, (4,)).tolist())
    assert first == again
    assert mt.initial_seed() == 1234
    g = mt.Generator().manual_seed(7)
    a = mt.rand(4, generator=g).tolist()
    mt.rand(10)                                  # the default generator does not disturb g
    b = mt.rand(4, generator=g).tolist()
    g2 = mt.Generator().manual_seed(7)
    assert mt.rand(4, generator=g2).tolist() == a and mt.rand(4, generator=g2).tolist() == b
    state = g.get_state()
    c = mt.randn(3, generator=g).tolist()
    g.set_state(state)
    assert mt.randn(3, generator=g).tolist() == c


def test_random_factories_refuse_non_float_dtypes():
    with pytest.raises(NotImplementedError):
        mt.rand(2, dtype=mt.int64)
    with pytest.raises(NotImplementedError):
        mt.randn_like(mt.ones(2, dtype=mt.int32))
    with pytest.raises(RuntimeError, match="from"):
        mt.randint(5, 2, (3,))


# --------------------------------------------------------------- type promotion

def _make_operand(lib, kind, dtype):
    if kind == "scalar":
        return {"bool": True, "int64": 3, "int32": 3, "float32": 2.5, "float64": 2.5}[dtype]
    shape = () if kind == "0-d" else (2,)
    return lib.ones(shape, dtype=getattr(lib, dtype))


operand = st.tuples(st.sampled_from(["tensor", "0-d", "scalar"]), st.sampled_from(DTYPES))


@requires_torch
@given(operand, operand)
@fuzz
def test_result_type_matches_torch(a, b):
    ours = mt.result_type(_make_operand(mt, *a), _make_operand(mt, *b))
    theirs = torch.result_type(_make_operand(torch, *a), _make_operand(torch, *b))
    assert str(ours).split(".")[-1] == str(theirs).split(".")[-1]


@requires_torch
@given(st.lists(st.tuples(st.sampled_from(["tensor", "0-d"]), st.sampled_from(DTYPES)),
                min_size=3, max_size=3))
@fuzz
def test_result_type_of_three_tensors_matches_torch(spec):
    ours = mt.result_type(*[_make_operand(mt, *x) for x in spec])
    if all(dtype == "bool" for _, dtype in spec):
        assert ours is mt.bool
        return
    # addcmul promotes its three tensor operands together (it has no bool kernel)
    theirs = torch.addcmul(*[_make_operand(torch, *x) for x in spec], value=1)
    assert str(ours).split(".")[-1] == str(theirs.dtype).split(".")[-1]


def test_result_type_by_hand():
    f32, i64 = mt.ones(2), mt.ones(2, dtype=mt.int64)
    assert mt.result_type(i64, 2.5) is mt.float32           # a float scalar: default float
    assert mt.result_type(f32, mt.tensor(1.0, dtype=mt.float64)) is mt.float32  # 0-d loses
    assert mt.result_type(i64, mt.tensor(1.0, dtype=mt.float64)) is mt.float64  # category wins
    assert mt.result_type(mt.ones(2, dtype=mt.int32), 5) is mt.int32
    assert mt.result_type(mt.ones(2, dtype=mt.bool), 5) is mt.int64
    assert mt.result_type(mt.ones(2, dtype=mt.bool), True) is mt.bool
    assert mt.promote_types(mt.int32, mt.float32) is mt.float32
    assert mt.promote_types(mt.bool, mt.int32) is mt.int32
    assert mt.can_cast(mt.float32, mt.int32) is False and mt.can_cast(mt.int32, mt.float32)


@pytest.mark.parametrize("args", [(0, 1, 5), (0, 3, 4), (-2, 2, 7), (1, 1, 1), (0, 1, 0),
                                  (0, 2, 5, 2.0), (0, 1, 6, 0.5), (0, 2, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@requires_torch
def test_logspace_matches_pytorch(args, dtype):
    ours = mt.logspace(*args, dtype=getattr(mt, dtype))
    theirs = torch.logspace(*args, dtype=getattr(torch, dtype))
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_linspace_and_logspace_refuse_what_cannot_be_allocated_as_pytorch():
    for make in (mt.linspace, mt.logspace):
        with pytest.raises(RuntimeError, match="can't allocate memory"):
            make(0, 1, 2 ** 48)


LAYOUT_FACTORIES = {
    "zeros": lambda lib, **kw: lib.zeros(2, 3, **kw),
    "ones": lambda lib, **kw: lib.ones(2, **kw),
    "empty": lambda lib, **kw: lib.empty(2, **kw).zero_(),
    "full": lambda lib, **kw: lib.full((2,), 1.5, **kw),
    "empty_strided": lambda lib, **kw: lib.empty_strided((2, 2), (1, 2), **kw).zero_(),
    "eye": lambda lib, **kw: lib.eye(3, **kw),
    "arange": lambda lib, **kw: lib.arange(4, **kw),
    "linspace": lambda lib, **kw: lib.linspace(0, 1, 5, **kw),
    "logspace": lambda lib, **kw: lib.logspace(0, 1, 3, **kw),
    "scalar_tensor": lambda lib, **kw: lib.scalar_tensor(2.0, **kw),
    "randperm": lambda lib, **kw: lib.randperm(4, **kw).sort().values,
    "zeros_like": lambda lib, **kw: lib.zeros_like(lib.ones(2), **kw),
    "ones_like": lambda lib, **kw: lib.ones_like(lib.ones(2), **kw),
    "full_like": lambda lib, **kw: lib.full_like(lib.ones(2), 3.0, **kw),
    "empty_like": lambda lib, **kw: lib.empty_like(lib.ones(2), **kw).zero_(),
    "new_zeros": lambda lib, **kw: lib.ones(2).new_zeros(3, **kw),
    "new_full": lambda lib, **kw: lib.ones(2).new_full((2,), 4.0, **kw),
    "hann_window": lambda lib, **kw: lib.hann_window(4, **kw),
}


@requires_torch
@pytest.mark.parametrize("name", list(LAYOUT_FACTORIES))
def test_factories_take_pytorchs_layout_argument(name):
    """``layout=torch.strided`` (as in ``zeros(shape, dtype=t.dtype, layout=t.layout,
    device=t.device)``) is accepted; another layout or a non-layout is refused."""
    make = LAYOUT_FACTORIES[name]
    ours, theirs = make(mt, layout=mt.strided), make(torch, layout=torch.strided)
    assert described(ours) == described(theirs)
    assert ours.tolist() == theirs.tolist()
    with pytest.raises(Exception) as refusal:
        make(torch, layout=torch.sparse_coo)
        pytest.skip("PyTorch makes a sparse tensor here")
    with pytest.raises(type(refusal.value), match="sparse_coo_tensor"):
        make(mt, layout=mt.sparse_coo)
    with pytest.raises(TypeError, match="layout"):
        make(mt, layout="strided")


def test_random_factories_take_the_strided_layout():
    for make in (lambda **kw: mt.rand(2, **kw), lambda **kw: mt.randn(2, **kw),
                 lambda **kw: mt.randint(0, 3, (2,), **kw),
                 lambda **kw: mt.rand_like(mt.ones(2), **kw),
                 lambda **kw: mt.randn_like(mt.ones(2), **kw),
                 lambda **kw: mt.randint_like(mt.ones(2), 3, **kw)):
        assert make(layout=mt.strided).layout is mt.strided
        with pytest.raises(NotImplementedError):
            make(layout=mt.sparse_coo)
