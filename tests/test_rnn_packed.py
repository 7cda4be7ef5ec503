"""``nn.utils.rnn`` and packed sequences in RNN/LSTM/GRU against PyTorch: the results and
errors of pack/pad/unpad/unpack, ``PackedSequence`` conversions, gradients (gradcheck and
gradgradcheck) and ``vmap`` without the loop fallback through packing and padding; the
recurrent layers on packed input (outputs, final states in the caller's order, gradients
w.r.t. the input, the initial states and every weight) for sorted, unsorted, equal and
length-1 batches, bidirectional and stacked, and with random lengths (hypothesis), and
their per-sample gradients under vmap; the ``RNNBase``/``RNNCellBase`` hierarchy."""
import inspect
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import microtensor as mt
from microtensor import nn
from microtensor.nn.utils import rnn as R
from microtensor.testing.fuzzing import fuzz_settings
from test_cuda import dev  # noqa: F401 - the "cuda" fixture: fake CuPy, and the GPU if present
from test_rnn import FALLBACK, close, twin   # the shared recurrent-layer oracle

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TR = torch.nn.utils.rnn
rng = np.random.default_rng(0)


def pair(*shape, dtype=np.float64, grad=False):
    a = rng.standard_normal(shape).astype(dtype)
    ours, theirs = mt.tensor(a), torch.tensor(a)
    if grad:
        ours.requires_grad_()
        theirs.requires_grad_()
    return ours, theirs


def same_packed(ours, theirs):
    assert isinstance(ours, R.PackedSequence)
    close(ours.data, theirs.data)
    assert ours.data.dtype.is_floating_point == theirs.data.dtype.is_floating_point
    assert ours.batch_sizes.tolist() == theirs.batch_sizes.tolist()
    assert ours.batch_sizes.dtype == mt.int64 and ours.batch_sizes.device.type == "cpu"
    for mine, their in ((ours.sorted_indices, theirs.sorted_indices),
                        (ours.unsorted_indices, theirs.unsorted_indices)):
        assert (mine is None) == (their is None)
        if mine is not None:
            assert mine.tolist() == their.tolist()


# Lengths of at most 16 sequences, where PyTorch's sort is stable as ours (so the sorted
# indices agree even with ties); a batch's lengths, its longest step, whether sorted.
LENGTHS = {
    "sorted": [5, 3, 3, 1],
    "unsorted": [2, 5, 1, 3],
    "equal": [4, 4, 4],
    "all-one": [1, 1],
    "one-sequence": [3],
    "ties-unsorted": [2, 3, 2, 3, 1],
}


def is_sorted(lengths):
    return all(a >= b for a, b in zip(lengths, lengths[1:]))


# --------------------------------------------------------------------------- utilities

@pytest.mark.parametrize("pattern", LENGTHS)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("trailing", [(), (2,), (2, 3)])
def test_pack_and_pad_match_torch(pattern, batch_first, trailing):
    lengths = LENGTHS[pattern]
    steps, batch = max(lengths) + 1, len(lengths)       # one step of padding too
    shape = (batch, steps) if batch_first else (steps, batch)
    x, tx = pair(*shape, *trailing)
    enforce_sorted = is_sorted(lengths)
    for as_given in (lengths, tuple(lengths), torch.tensor(lengths)):
        ours_lengths = (mt.tensor(as_given.numpy()) if isinstance(as_given, torch.Tensor)
                        else as_given)
        packed = R.pack_padded_sequence(x, ours_lengths, batch_first, enforce_sorted)
        tpacked = TR.pack_padded_sequence(tx, as_given, batch_first, enforce_sorted)
        same_packed(packed, tpacked)
    for kw in (dict(), dict(padding_value=-2.5), dict(total_length=steps + 2),
               dict(batch_first=not batch_first, padding_value=7)):
        kw.setdefault("batch_first", batch_first)
        out, out_lengths = R.pad_packed_sequence(packed, **kw)
        tout, tlengths = TR.pad_packed_sequence(tpacked, **kw)
        assert tuple(out.shape) == tuple(tout.shape)
        close(out, tout)
        assert out_lengths.tolist() == tlengths.tolist() and out_lengths.dtype == mt.int64
    for mine, theirs in zip(R.unpack_sequence(packed), TR.unpack_sequence(tpacked),
                            strict=True):
        close(mine, theirs)


def test_pack_with_float_lengths_and_integer_data_matches_torch():
    data = np.arange(12).reshape(4, 3)
    packed = R.pack_padded_sequence(mt.tensor(data), mt.tensor([3.7, 2.0, 1.2]))
    tpacked = TR.pack_padded_sequence(torch.tensor(data), torch.tensor([3.7, 2.0, 1.2]))
    same_packed(packed, tpacked)
    assert packed.data.dtype == mt.int64
    padded, _ = R.pad_packed_sequence(packed, padding_value=-1)
    assert padded.tolist() == TR.pad_packed_sequence(tpacked, padding_value=-1)[0].tolist()


def test_pack_padded_sequence_with_fewer_lengths_unsorted_packs_those_as_torch():
    """Unsorted, the batch is taken by the sorted lengths' indices before the count check:
    PyTorch packs the first sequences only, and so do we."""
    x, tx = pair(4, 3, 2)
    same_packed(R.pack_padded_sequence(x, [3, 2], enforce_sorted=False),
                TR.pack_padded_sequence(tx, [3, 2], enforce_sorted=False))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    shapes = [(2, 3), (5, 3), (1, 3), (0, 3)]
    pairs = [pair(*s) for s in shapes]
    kw = dict(batch_first=batch_first, padding_value=-1.5, padding_side=padding_side)
    out = R.pad_sequence([p[0] for p in pairs], **kw)
    tout = TR.pad_sequence([p[1] for p in pairs], **kw)
    assert tuple(out.shape) == tuple(tout.shape)
    close(out, tout)
    # the first sequence's dtype, a later one's trailing dims broadcast into the first's,
    # an iterable that is not a list, and a tensor (its rows are the sequences)
    mixed = [np.ones((2, 3)), np.arange(3.0).reshape(3, 1)]
    out = R.pad_sequence(iter([mt.tensor(mixed[0], dtype=mt.float32), mt.tensor(mixed[1])]),
                         **kw)
    tout = TR.pad_sequence(iter([torch.tensor(mixed[0], dtype=torch.float32),
                                 torch.tensor(mixed[1])]), **kw)
    assert out.dtype == mt.float32 and tout.dtype == torch.float32
    close(out, tout)
    x, tx = pair(3, 4)
    close(R.pad_sequence(x, **kw), TR.pad_sequence(tx, **kw))
    ints = [np.arange(3), np.arange(1)]
    assert (R.pad_sequence([mt.tensor(a) for a in ints], **kw).tolist()
            == TR.pad_sequence([torch.tensor(a) for a in ints], **kw).tolist())


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_sequence_and_unpack_sequence_match_torch(enforce_sorted):
    lengths = [4, 2, 2, 1] if enforce_sorted else [1, 4, 2, 3]
    pairs = [pair(n, 2) for n in lengths]
    packed = R.pack_sequence([p[0] for p in pairs], enforce_sorted)
    tpacked = TR.pack_sequence([p[1] for p in pairs], enforce_sorted)
    same_packed(packed, tpacked)
    unpacked = R.unpack_sequence(packed)
    for mine, (x, _) in zip(unpacked, pairs, strict=True):
        assert mine.tolist() == x.tolist()


@pytest.mark.parametrize("batch_first", [False, True])
def test_unpad_sequence_matches_torch_and_leaves_its_input_alone(batch_first):
    x, tx = pair(3, 4, 2)
    lengths = [3, 1, 2] if batch_first else [2, 3, 1, 2]
    ours = R.unpad_sequence(x, mt.tensor(lengths), batch_first)
    theirs = TR.unpad_sequence(tx.clone(), torch.tensor(lengths), batch_first)
    assert len(ours) == len(theirs)
    for mine, their in zip(ours, theirs):
        assert tuple(mine.shape) == tuple(their.shape)
        close(mine, their)
    assert tuple(x.shape) == (3, 4, 2)     # PyTorch transposes its input in place here
    ours[0].mul_(0)                         # new tensors, as PyTorch's
    close(x, tx)
    assert [t.shape[0] for t in R.unpad_sequence(x, lengths, batch_first)] == lengths


def test_invert_permutation_matches_torch():
    for perm in ([2, 0, 1], [0], [3, 1, 0, 4, 2]):
        assert (R.invert_permutation(mt.tensor(perm)).tolist()
                == TR.invert_permutation(torch.tensor(perm)).tolist())
    assert R.invert_permutation(None) is None


def test_packed_sequence_is_torchs_named_tuple():
    seqs = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6])]
    packed = R.pack_sequence([mt.tensor(s) for s in seqs])
    tpacked = TR.pack_sequence([torch.tensor(s) for s in seqs])
    assert repr(packed) == repr(tpacked)
    assert isinstance(packed, tuple) and packed._fields == tpacked._fields
    data, batch_sizes, sorted_indices, unsorted_indices = packed
    assert data is packed.data and sorted_indices is None and unsorted_indices is None
    # built from (data, batch_sizes) and a sorted order, the inverse is computed
    again = R.PackedSequence((data, batch_sizes), sorted_indices=mt.tensor([1, 2, 0]))
    assert again.data is data and again.unsorted_indices.tolist() == [2, 0, 1]
    with pytest.raises(AssertionError, match="list or tuple of length 2"):
        R.PackedSequence(data)
    with pytest.raises(AssertionError, match="list or tuple of length 2"):
        TR.PackedSequence(tpacked.data)


def test_packed_sequence_conversions_match_torch():
    x, tx = pair(3, 2, 2)
    packed = R.pack_padded_sequence(x, [1, 3], enforce_sorted=False)
    tpacked = TR.pack_padded_sequence(tx, [1, 3], enforce_sorted=False)
    for method in ("float", "double", "half", "long", "int", "short", "char", "byte"):
        mine, theirs = getattr(packed, method)(), getattr(tpacked, method)()
        assert str(mine.data.dtype).split(".")[-1] == str(theirs.data.dtype).split(".")[-1]
        assert mine.data.tolist() == theirs.data.tolist()
        assert mine.batch_sizes is packed.batch_sizes
        assert mine.sorted_indices.tolist() == [1, 0]
    assert packed.to(mt.float64) is packed and packed.double() is packed
    assert packed.cpu() is packed
    assert packed.to(dtype=mt.float32).data.dtype == mt.float32
    assert packed.is_cuda is False and packed.is_pinned() is False
    assert tpacked.is_cuda is False and tpacked.is_pinned() is False


def test_packed_sequence_moves_data_and_indices_but_not_batch_sizes(dev):
    x = mt.tensor(rng.standard_normal((3, 2, 2)))
    packed = R.pack_padded_sequence(x, [1, 3], enforce_sorted=False)
    moved = packed.to(dev)
    assert moved.is_cuda and moved.data.device.type == "cuda"
    assert moved.sorted_indices.device.type == moved.unsorted_indices.device.type == "cuda"
    assert moved.batch_sizes.device.type == "cpu"
    assert moved.cuda() is moved and moved.cpu().data.tolist() == packed.data.tolist()
    with pytest.raises(ValueError, match="batch_sizes should always be on CPU"):
        R.PackedSequence(moved.data, moved.batch_sizes.to(dev))
    padded, lengths = R.pad_packed_sequence(moved, padding_value=-1)
    assert padded.device.type == "cuda" and lengths.device.type == "cpu"
    assert padded.cpu().tolist() == R.pad_packed_sequence(packed, padding_value=-1)[0].tolist()
    assert R.pack_padded_sequence(x.to(dev), [3, 1]).data.device.type == "cuda"


# --------------------------------------------------------------------------- errors

def _cases(R, T):
    """(what, call) of each refused call, written once for both libraries."""
    x = T.zeros(4, 3, 2)
    packed = R.pack_padded_sequence(x, [3, 2, 1])
    return [
        ("unsorted", lambda: R.pack_padded_sequence(x, [2, 3, 1])),
        ("zero length", lambda: R.pack_padded_sequence(x, [3, 2, 0])),
        ("zero length unsorted",
         lambda: R.pack_padded_sequence(x, [0, 2, 3], enforce_sorted=False)),
        ("negative length", lambda: R.pack_padded_sequence(x, [3, 2, -1])),
        ("too few lengths", lambda: R.pack_padded_sequence(x, [3, 2])),
        ("too many lengths", lambda: R.pack_padded_sequence(x, [3, 2, 1, 1])),
        ("batch_first count", lambda: R.pack_padded_sequence(x, [3, 2, 1], batch_first=True)),
        ("2-D lengths", lambda: R.pack_padded_sequence(x, T.tensor([[3, 2, 1]]))),
        ("0-D lengths", lambda: R.pack_padded_sequence(x, 3)),
        ("empty input", lambda: R.pack_padded_sequence(T.zeros(4, 0, 2), [])),
        ("1-D input", lambda: R.pack_padded_sequence(T.zeros(4), [3])),
        ("total_length", lambda: R.pad_packed_sequence(packed, total_length=2)),
        ("no sequences", lambda: R.pad_sequence([])),
        ("no sequences to pack", lambda: R.pack_sequence([])),
        ("not iterable", lambda: R.pad_sequence(5)),
        ("not a tensor", lambda: R.pad_sequence([T.ones(2), 3])),
        ("padding_side", lambda: R.pad_sequence([T.ones(2)], padding_side="middle")),
        ("trailing dims", lambda: R.pad_sequence([T.ones(2, 3), T.ones(3, 2)])),
        ("unsorted pack_sequence", lambda: R.pack_sequence([T.ones(2), T.ones(3)])),
        ("out of range permutation", lambda: R.invert_permutation(T.tensor([2, 0, 3]))),
        ("unpad count", lambda: R.unpad_sequence(T.ones(3, 2, 1), T.tensor([3, 1, 1]))),
    ]


GIST = {
    "unsorted": r"must be sorted in decreasing order when `enforce_sorted` is True",
    "zero length": r"has to be greater than 0",
    "zero length unsorted": r"has to be greater than 0",
    "negative length": r"has to be greater than 0",
    "too few lengths": r"Expected `len\(lengths\)` to be equal to batch_size, but got 2 "
                       r"\(batch_size=3\)",
    "too many lengths": r"Expected `len\(lengths\)` to be equal to batch_size, but got 4",
    "batch_first count": r"but got 3 \(batch_size=4\)",
    "2-D lengths": r"'lengths' argument should be a 1D CPU int64 tensor, but got 2D cpu",
    "0-D lengths": r"'lengths' argument should be a 1D CPU int64 tensor, but got 0D cpu",
    "empty input": r"Cannot pack empty tensors",
    "1-D input": r"Dimension out of range",
    "total_length": r"total_length=2 and max sequence length being 3",
    "no sequences": r"received an empty list of sequences",
    "no sequences to pack": r"received an empty list of sequences",
    "not iterable": r"Expected iterable for input sequences, but got arg of type: <class 'int'>",
    "not a tensor": r"expected Tensor as element 1 in argument 0, but got int",
    "padding_side": r"Expected padding_side to be one of left or right, but got middle",
    "trailing dims": r"size .*\(3\) must match .* size .*\(2\) at non-singleton dimension 1",
    "unsorted pack_sequence": r"must be sorted in decreasing order",
    "out of range permutation": r"index 3 is out of bounds for dimension 0 with size 3",
    "unpad count": r"is longer than",
}


@pytest.mark.parametrize("index", range(len(GIST)), ids=list(GIST))
def test_errors_match_torch(index):
    what, call = _cases(R, mt)[index]
    _, tcall = _cases(TR, torch)[index]
    with pytest.raises(Exception) as theirs:
        tcall()
    with pytest.raises(type(theirs.value), match=GIST[what]) as ours:
        call()
    assert type(ours.value) is type(theirs.value)
    assert theirs.match(GIST[what])


def test_checks_where_torch_reads_garbage():
    """PyTorch does not check these and returns memory it should not read; we refuse."""
    x = mt.zeros(4, 3, 2)
    with pytest.raises(RuntimeError, match="length 5 does not fit in an input of 4 time"):
        R.pack_padded_sequence(x, [5, 2, 1])
    for sizes in ([2, 2], [1, 2], [3, 0]):
        with pytest.raises(RuntimeError, match="non-increasing batch sizes adding up to the "
                                               "3 rows"):
            R.pad_packed_sequence(R.PackedSequence(mt.ones(3), mt.tensor(sizes)))
    with pytest.raises(RuntimeError, match="at least one dimension"):
        R.pad_sequence([mt.tensor(1.0), mt.ones(3)])


# --------------------------------------------------------------------------- autograd, vmap

def test_gradients_through_pack_and_pad_match_torch():
    x, tx = pair(4, 3, 2, grad=True)
    seqs = [pair(n, 2, grad=True) for n in (1, 3, 2)]
    packed = R.pack_padded_sequence(x, [2, 4, 1], enforce_sorted=False)
    tpacked = TR.pack_padded_sequence(tx, [2, 4, 1], enforce_sorted=False)
    w, tw = pair(*packed.data.shape)
    padded = R.pad_sequence([s for s, _ in seqs], padding_side="left")
    tpadded = TR.pad_sequence([s for _, s in seqs], padding_side="left")
    v, tv = pair(*padded.shape)
    ((packed.data * w).sum() + (R.pad_packed_sequence(packed, True)[0] ** 2).sum()
     + (padded * v).sum()).backward()
    ((tpacked.data * tw).sum() + (TR.pad_packed_sequence(tpacked, True)[0] ** 2).sum()
     + (tpadded * tv).sum()).backward()
    close(x.grad, tx.grad)
    for s, ts in seqs:
        close(s.grad, ts.grad)


def test_gradcheck_and_gradgradcheck_through_pack_and_pad():
    x = mt.tensor(rng.standard_normal((3, 4, 2)), requires_grad=True)
    a, b = (mt.tensor(rng.standard_normal((n, 2)), requires_grad=True) for n in (2, 3))

    def round_trip(x):
        packed = R.pack_padded_sequence(x, [1, 3, 3, 2], batch_first=False,
                                        enforce_sorted=False)
        return R.pad_packed_sequence(packed, batch_first=True, padding_value=0.5)[0] ** 2

    def padded(a, b):
        return R.pad_sequence([a, b], batch_first=True, padding_side="left") ** 2

    for fn, inputs in ((round_trip, (x,)), (padded, (a, b))):
        assert mt.autograd.gradcheck(fn, inputs)
        assert mt.autograd.gradgradcheck(fn, inputs)


def test_vmap_of_pack_and_pad_matches_loop_without_fallback():
    x = mt.tensor(rng.standard_normal((5, 4, 3, 2)))
    lengths = [2, 4, 1]

    def round_trip(x):
        packed = R.pack_padded_sequence(x, lengths, enforce_sorted=False)
        return packed.data.sin(), R.pad_packed_sequence(packed, True, -1.0, 6)[0]

    def padded(x):
        return R.pad_sequence([x[:3, 0], x[:, 1], x[:1, 2]], padding_side="left")

    def loss(x):
        return round_trip(x)[1].tanh().sum() + padded(x).square().sum()

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        batched = mt.func.vmap(round_trip)(x) + (mt.func.vmap(padded)(x),)
        grads = mt.func.vmap(mt.func.grad(loss))(x)
    for i in range(x.shape[0]):
        for got, expected in zip(batched, round_trip(x[i]) + (padded(x[i]),), strict=True):
            close(got[i], expected)
        close(grads[i], mt.func.grad(loss)(x[i]))


# --------------------------------------------------------------------------- recurrent layers

def weighted(tensors, lib, weights):
    return sum((t * lib.tensor(w)).sum() for t, w in zip(tensors, weights))


def run_packed(ours, theirs, lengths, batch_first, given_state, steps=None):
    """Both layers on the same padded batch, packed (unsorted lengths: not enforced); the
    packed outputs, final states, and gradients of a weighted sum of them all w.r.t. the
    padded input, the initial states and every weight agree."""
    lstm = isinstance(ours, nn.LSTM)
    steps = steps or max(lengths)
    shape = (len(lengths), steps) if batch_first else (steps, len(lengths))
    x, tx = pair(*shape, ours.input_size, grad=True)
    sorted_ = is_sorted(lengths)
    packed = R.pack_padded_sequence(x, lengths, batch_first, sorted_)
    tpacked = TR.pack_padded_sequence(tx, lengths, batch_first, sorted_)
    states = []
    if given_state:
        layers = ours.num_layers * (2 if ours.bidirectional else 1)
        states = [pair(layers, len(lengths), ours.proj_size or ours.hidden_size, grad=True)]
        if lstm:
            states.append(pair(layers, len(lengths), ours.hidden_size, grad=True))
    hx = None if not states else (tuple(s[0] for s in states) if lstm else states[0][0])
    thx = None if not states else (tuple(s[1] for s in states) if lstm else states[0][1])
    out, h_n = ours(packed, hx)
    tout, th_n = theirs(tpacked, thx)
    same_packed(out, tout)
    finals, tfinals = (list(h_n), list(th_n)) if lstm else ([h_n], [th_n])
    for mine, their in zip(finals, tfinals, strict=True):
        assert tuple(mine.shape) == tuple(their.shape)
        close(mine, their)
    results, tresults = [out.data] + finals, [tout.data] + tfinals
    weights = [rng.standard_normal(tuple(t.shape)) for t in tresults]
    weighted(results, mt, weights).backward()
    weighted(tresults, torch, weights).backward()
    close(x.grad, tx.grad)
    for s, ts in states:
        close(s.grad, ts.grad)
    tparams = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, tparams[name].grad)


LAYERS = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {})]
STACKS = [dict(), dict(num_layers=2, bidirectional=True)]


@pytest.mark.parametrize("name,extra", LAYERS, ids=lambda v: v if isinstance(v, str)
                         else ",".join(map(str, v.values())))
@pytest.mark.parametrize("stack", STACKS, ids=["single", "2-layer-bidirectional"])
@pytest.mark.parametrize("pattern", LENGTHS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_layers_on_packed_input_match_torch(name, extra, stack, pattern, batch_first):
    ours, theirs = twin(name, 3, 4, **extra, **stack, batch_first=batch_first)
    run_packed(ours, theirs, LENGTHS[pattern], batch_first, given_state=pattern != "equal")


@pytest.mark.parametrize("stack", [dict(num_layers=2), dict(bidirectional=True),
                                   dict(num_layers=2, bidirectional=True, bias=False)])
@pytest.mark.parametrize("given_state", [False, True])
def test_lstm_with_projections_on_packed_input_matches_torch(stack, given_state):
    ours, theirs = twin("LSTM", 3, 5, proj_size=2, **stack)
    run_packed(ours, theirs, [2, 4, 1, 4], False, given_state, steps=5)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_packed_equal_lengths_give_the_padded_results(name):
    """Independent of PyTorch: a packed batch of equal lengths is the padded batch."""
    layer = getattr(nn, name)(3, 4, num_layers=2, bidirectional=True, dtype=mt.float64)
    x = mt.tensor(rng.standard_normal((5, 3, 3)))
    out, h_n = layer(R.pack_padded_sequence(x, [5, 5, 5]))
    padded_out, padded_h_n = layer(x)
    close(R.pad_packed_sequence(out)[0], padded_out)
    if name != "LSTM":
        h_n, padded_h_n = (h_n,), (padded_h_n,)
    for mine, theirs in zip(h_n, padded_h_n, strict=True):
        close(mine, theirs)


def test_dropout_on_packed_input_acts_between_layers_in_training_only():
    layer = nn.GRU(3, 4, num_layers=2, dropout=0.5, dtype=mt.float64)
    packed = R.pack_sequence([mt.tensor(rng.standard_normal((n, 3))) for n in (4, 2)])
    layer.eval()
    first, second = layer(packed)[0].data, layer(packed)[0].data
    assert first.tolist() == second.tolist()
    layer.train()
    mt.manual_seed(0)
    dropped = layer(packed)[0].data
    assert dropped.tolist() != first.tolist()


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_vmap_grad_through_a_packed_layer_matches_loop_without_fallback(name):
    """Per-sample gradients where each sample is a padded batch, packed inside."""
    layer = getattr(nn, name)(3, 4, bidirectional=True, dtype=mt.float64)
    params = {k: v.detach() for k, v in layer.named_parameters()}
    x = mt.tensor(rng.standard_normal((3, 5, 3, 3)))

    def loss(params, x):
        packed = R.pack_padded_sequence(x, [2, 5, 3], enforce_sorted=False)
        out, state = mt.func.functional_call(layer, params, (packed,))
        h_n = state[0] if name == "LSTM" else state
        return out.data.tanh().sum() + (h_n * h_n).sum()

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        grads = mt.func.vmap(mt.func.grad(loss), in_dims=(None, 0))(params, x)
    for i in range(x.shape[0]):
        expected = mt.func.grad(loss)(params, x[i])
        for key in params:
            close(grads[key][i], expected[key])


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=6),
       name=st.sampled_from(["RNN", "LSTM", "GRU"]), batch_first=st.booleans(),
       bidirectional=st.booleans(), given_state=st.booleans())
@fuzz_settings(25)
def test_random_lengths_match_torch(lengths, name, batch_first, bidirectional, given_state):
    ours, theirs = twin(name, 2, 3, num_layers=2, bidirectional=bidirectional,
                        batch_first=batch_first)
    run_packed(ours, theirs, lengths, batch_first, given_state, steps=max(lengths) + 1)
    x, tx = pair(max(lengths), len(lengths), 2)
    packed = R.pack_padded_sequence(x, lengths, enforce_sorted=False)
    close(R.pad_packed_sequence(packed, total_length=6)[0],
          TR.pad_packed_sequence(TR.pack_padded_sequence(tx, lengths, enforce_sorted=False),
                                 total_length=6)[0])


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_forward_checks_on_packed_input_match_torch(name):
    ours, theirs = twin(name, 3, 4)
    lstm = name == "LSTM"
    seqs = [pair(n, 3) for n in (3, 2)]
    packed = R.pack_sequence([s for s, _ in seqs])
    tpacked = TR.pack_sequence([s for _, s in seqs])

    def state(batch, lib):
        h = lib.zeros(1, batch, 4, dtype=lib.float64)
        return (h, h) if lstm else h

    def refused(call, tcall, error, message):
        with pytest.raises(error, match=message):
            call()
        if not lstm:     # PyTorch's LSTM leaves these to its kernel's own messages
            with pytest.raises(error, match=message):
                tcall()

    refused(lambda: ours(packed, state(3, mt)), lambda: theirs(tpacked, state(3, torch)),
            RuntimeError, r"Expected hidden(\[0\])? size \(1, 2, 4\), got \[1, 3, 4\]")
    refused(lambda: ours(R.PackedSequence(mt.zeros(5, 1, 3, dtype=mt.float64),
                                          packed.batch_sizes)),
            lambda: theirs(TR.PackedSequence(torch.zeros(5, 1, 3, dtype=torch.float64),
                                             tpacked.batch_sizes)),
            RuntimeError, "input must have 2 dimensions, got 3")
    refused(lambda: ours(R.PackedSequence(mt.zeros(5, 2, dtype=mt.float64),
                                          packed.batch_sizes)),
            lambda: theirs(TR.PackedSequence(torch.zeros(5, 2, dtype=torch.float64),
                                             tpacked.batch_sizes)),
            RuntimeError, "input.size\\(-1\\) must be equal to input_size. Expected 3, got 2")
    refused(lambda: ours(packed.float()), lambda: theirs(tpacked.float()), ValueError,
            r"RNN input dtype \(.*float32\) does not match weight dtype \(.*float64\)")
    with pytest.raises(TypeError, match="input must be a Tensor or a PackedSequence, got list"):
        ours([1, 2])


# --------------------------------------------------------------------------- class hierarchy

def test_rnn_base_classes_match_torch():
    for name in ("RNN", "LSTM", "GRU"):
        assert issubclass(getattr(nn, name), nn.RNNBase)
        assert isinstance(getattr(nn, name)(2, 3), nn.RNNBase)
    for name in ("RNNCell", "LSTMCell", "GRUCell"):
        assert issubclass(getattr(nn, name), nn.RNNCellBase)
        assert not issubclass(getattr(nn, name), nn.RNNBase)
    for ours_cls, theirs_cls in ((nn.RNNBase, torch.nn.RNNBase),
                                 (nn.RNNCellBase, torch.nn.RNNCellBase)):
        assert (list(inspect.signature(ours_cls.__init__).parameters)
                == list(inspect.signature(theirs_cls.__init__).parameters))
    base, tbase = nn.RNNBase("GRU", 3, 4, 2), torch.nn.RNNBase("GRU", 3, 4, 2)
    assert repr(base) == repr(tbase)
    assert ({k: tuple(v.shape) for k, v in base.state_dict().items()}
            == {k: tuple(v.shape) for k, v in tbase.state_dict().items()})
    cell, tcell = nn.RNNCellBase(3, 4, False, 2), torch.nn.RNNCellBase(3, 4, False, 2)
    assert ({k: tuple(v.shape) for k, v in cell.state_dict().items()}
            == {k: tuple(v.shape) for k, v in tcell.state_dict().items()})
    assert repr(cell) == repr(tcell)
    for module in (nn, torch.nn):
        with pytest.raises(ValueError, match="Unrecognized RNN mode: FOO"):
            module.RNNBase("FOO", 3, 4)


def test_utils_names_and_signatures_match_torch():
    assert mt.nn.utils.rnn is R
    assert "rnn" in mt.nn.utils.__all__
    assert R.__all__ == TR.__all__
    for name in TR.__all__:
        if name == "PackedSequence":
            continue
        assert (inspect.signature(getattr(R, name)).parameters.keys()
                == inspect.signature(getattr(TR, name)).parameters.keys()), name
        for key, param in inspect.signature(getattr(TR, name)).parameters.items():
            assert inspect.signature(getattr(R, name)).parameters[key].default == param.default
    for method in ("to", "cuda", "cpu", "double", "float", "half", "long", "int", "short",
                   "char", "byte", "is_pinned"):
        assert callable(getattr(R.PackedSequence, method))
