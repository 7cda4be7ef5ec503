"""The shortcuts a training step takes agree with the general paths they bypass.

* ``linear`` on a batch of rows (2-D input and weight, a 1-D bias or none, one floating
  dtype) skips the general checks: same results, and every refused call still refused
  with PyTorch's error.
* ``linear``'s ``unrecorded`` backward (``Op.def_unrecorded_backward``) computes only the
  gradients whose inputs require grad, equal to the differentiable formulas'.
* The engine hands a leaf a fresh gradient as its ``.grad`` in C when nothing else refers
  to it, and copies it otherwise (a hook keeping it, the caller's own tensor).
* ``Module.zero_grad`` walks each parameter once, shared or nested.
* A layer's product in either order (``rows @ W.T`` or ``(W @ rows.T).T``, whichever was
  measured faster) gives the same numbers; the order is measured once per kind of call,
  for float32 C-contiguous matrices only (the orders differ in the last bits otherwise).
* ``loss.backward()``'s shortcut keeps the general rules (retain_graph, create_graph,
  implicit gradients of scalars only, views).
"""
import itertools

import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import engine
from microtensor.ops import linalg
from microtensor.ops.registry import REGISTRY, op

F = mt.nn.functional

try:
    import torch
except ImportError:   # pragma: no cover - torch is installed where the suite runs
    torch = None


def _values(t):
    return t.detach().numpy()


@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
@pytest.mark.parametrize("rows", [0, 1, 5])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_rows_match_the_general_path(dtype, rows, bias):
    mt.manual_seed(rows)
    x, w = mt.randn(rows, 4, dtype=dtype), mt.randn(3, 4, dtype=dtype)
    b = mt.randn(3, dtype=dtype) if bias else None
    fast = F.linear(x, w, b)
    # a leading dim of 1 takes the general path (rows of a 3-D input)
    general = F.linear(x[None], w, b)[0]
    assert fast.shape == (rows, 3) and fast.is_contiguous() and fast.dtype == dtype
    np.testing.assert_allclose(_values(fast), _values(general), rtol=1e-6)
    expected = _values(x) @ _values(w).T + (_values(b) if bias else 0)
    np.testing.assert_allclose(_values(fast), expected, rtol=1e-5, atol=1e-6)


def test_linear_rows_with_transposed_and_expanded_operands():
    x = mt.randn(4, 5).t()                 # a transposed batch of rows
    w = mt.randn(1, 4).expand(3, 4)        # one row repeated: a zero stride
    b = mt.randn(3)
    out = F.linear(x, w, b)
    np.testing.assert_allclose(_values(out), _values(x) @ _values(w).T + _values(b),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("shapes, dtypes", [
    (((2, 4), (3, 5), (3,)), ("float32",) * 3),            # inner sizes differ
    (((2, 4), (3, 4), (3,)), ("float32", "float64", "float32")),
    (((2, 4), (3, 4), (3,)), ("float32", "float32", "float64")),
    (((2, 4), (3, 4), (4,)), ("float32",) * 3),             # bias of the wrong size
    (((2, 4), (3, 4), (2, 3, 1)), ("float32",) * 3),        # bias of too many dims
])
def test_linear_rows_refuse_what_pytorch_refuses(shapes, dtypes):
    args = [mt.zeros(s, dtype=getattr(mt, d)) for s, d in zip(shapes, dtypes)]
    targs = [torch.zeros(s, dtype=getattr(torch, d)) for s, d in zip(shapes, dtypes)]
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.functional.linear(*targs)
    with pytest.raises(type(theirs.value)):
        F.linear(*args)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("dtypes", ["fdf", "fdd", "ffd", "dfd", "dff", "bbf", "bbb", "hhf",
                                    "ffh", "fdh", "fd-", "bb-"])
@pytest.mark.parametrize("input_shape", [(3, 4), (2, 3, 4), (4,)])
def test_linear_dtype_errors_as_pytorch(dtypes, input_shape):
    """With a bias PyTorch's addmm checks the bias against the weight first ("self and
    mat2"), then the input ("mat1 and mat2"); without one, the product's message."""
    names = {"f": "float32", "d": "float64", "h": "float16", "b": "bool"}

    def call(lib, functional):
        input, weight = (lib.ones(*shape, dtype=getattr(lib, names[code]))
                         for shape, code in ((input_shape, dtypes[0]), ((5, 4), dtypes[1])))
        bias = None if dtypes[2] == "-" else lib.ones(5, dtype=getattr(lib, names[dtypes[2]]))
        functional.linear(input, weight, bias)
    with pytest.raises((RuntimeError, NotImplementedError)) as theirs:
        call(torch, torch.nn.functional)
    with pytest.raises(type(theirs.value)) as ours:
        call(mt, F)
    assert str(ours.value) == str(theirs.value)


def test_linear_integer_rows_take_the_general_path():
    # no BLAS for integers: the general path computes them exactly
    x = mt.tensor([[1, 2], [3, 4]])
    w = mt.tensor([[1, 1], [2, 0]])
    assert F.linear(x, w).tolist() == [[3, 2], [7, 6]]


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unrecorded_linear_backward_sums_half_precision_as_pytorch(dtype):
    # a bias's gradient sums the rows: PyTorch accumulates float16/bfloat16 in float32,
    # as the formulas do; summing in the dtype itself loses digits over many rows
    r = np.random.default_rng(0)
    x, w, b = (r.standard_normal(s).astype(np.float32) for s in ((4096, 8), (4, 8), (4,)))
    g = r.standard_normal((4096, 4)).astype(np.float32)
    results = []
    for lib in (torch, mt):
        leaves = [lib.tensor(a).to(getattr(lib, dtype)).requires_grad_() for a in (x, w, b)]
        lib.nn.functional.linear(*leaves).backward(lib.tensor(g).to(getattr(lib, dtype)))
        results.append([leaf.grad.float().numpy() for leaf in leaves])
    for theirs, ours in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-2, atol=2e-3 * np.abs(theirs).max())


def _layer(requires):
    mt.manual_seed(0)
    leaves = [mt.randn(5, 4, dtype=mt.float64), mt.randn(3, 4, dtype=mt.float64),
              mt.randn(3, dtype=mt.float64)]
    for leaf, flag in zip(leaves, requires):
        leaf.requires_grad_(flag)
    return leaves


@pytest.mark.parametrize("requires", [r for r in itertools.product([False, True], repeat=3)
                                      if any(r)])
def test_unrecorded_linear_backward_gives_only_the_wanted_gradients(requires):
    grads = []
    for create_graph in (False, True):
        leaves = _layer(requires)
        (F.linear(*leaves).tanh() * 3).sum().backward(create_graph=create_graph)
        grads.append([leaf.grad for leaf in leaves])
    for fast, recorded, flag in zip(*grads, requires):
        assert (fast is None) == (not flag) and (recorded is None) == (not flag)
        if flag:
            assert not fast.requires_grad and recorded.requires_grad
            assert fast.stride() == recorded.stride()
            np.testing.assert_allclose(_values(fast), _values(recorded), rtol=1e-12)


def test_unrecorded_backward_is_refused_when_it_reads_what_no_formula_saves():
    @op("_shortcut_probe", inputs=("self",))
    def probe(self):
        return self.clone()

    @probe.def_derivative("self")
    def probe(grad):
        return grad

    try:
        with pytest.raises(TypeError, match="reads \\['self'\\], which no formula saves"):
            @probe.def_unrecorded_backward
            def probe(grad, wanted, self):
                return (grad,)
    finally:
        del REGISTRY["_shortcut_probe"]


def test_unrecorded_backward_declining_falls_back_to_the_formulas():
    # a 1-D weight: the shortcut declines, the formulas run
    x = mt.randn(5, 4, requires_grad=True)
    w = mt.randn(4, requires_grad=True)
    F.linear(x, w).sum().backward()
    np.testing.assert_allclose(_values(x.grad), np.broadcast_to(_values(w), (5, 4)))
    np.testing.assert_allclose(_values(w.grad), _values(x).sum(0), rtol=1e-5)


def _python_accumulations(monkeypatch):
    calls = []
    original = engine._accumulate_into_leaf

    def spy(variable, grad, create_graph):
        calls.append(variable)
        return original(variable, grad, create_graph)
    monkeypatch.setattr(engine, "_accumulate_into_leaf", spy)
    return calls


def test_a_fresh_gradient_becomes_grad_in_c(monkeypatch):
    calls = _python_accumulations(monkeypatch)
    x = mt.randn(5, 4)
    layer = mt.nn.Linear(4, 3)
    F.linear(x, layer.weight, layer.bias).sum().backward()
    assert calls == []                             # both stolen, in C
    np.testing.assert_allclose(_values(layer.bias.grad), [5.0] * 3)
    F.linear(x, layer.weight, layer.bias).sum().backward()
    assert len(calls) == 2                         # accumulation: the Python path
    np.testing.assert_allclose(_values(layer.bias.grad), [10.0] * 3)


def test_a_gradient_someone_holds_is_copied(monkeypatch):
    calls = _python_accumulations(monkeypatch)
    w = mt.randn(3, requires_grad=True)
    held = []
    w.register_hook(held.append)
    (w * 2).sum().backward()
    assert calls == [w]
    assert w.grad.data_ptr() != held[0].data_ptr()
    w.grad.add_(1)                                 # must not write into the hook's tensor
    np.testing.assert_allclose(_values(held[0]), [2.0] * 3)
    # the caller's own gradient, passed through unchanged
    y = mt.randn(3, requires_grad=True)
    g = mt.ones(3)
    y.backward(g)
    assert y.grad.data_ptr() != g.data_ptr()


def test_a_gradient_in_another_layout_than_the_leaf_is_copied_into_its_layout(monkeypatch):
    calls = _python_accumulations(monkeypatch)
    w = mt.randn(4, 3).t().detach().requires_grad_()      # a transposed leaf
    (w * 2).sum().backward()
    assert calls == [w]
    assert w.grad.stride() == w.stride()


def test_create_graph_accumulates_in_python(monkeypatch):
    calls = _python_accumulations(monkeypatch)
    w = mt.randn(3, requires_grad=True)
    (w * w).sum().backward(create_graph=True)
    assert calls == [w] and w.grad.requires_grad


def test_zero_grad_walks_every_parameter_once():
    shared = mt.nn.Linear(2, 2)
    model = mt.nn.Sequential(shared, mt.nn.Tanh(), mt.nn.Sequential(shared, mt.nn.Linear(2, 1)))
    model[2][1].register_parameter("extra", None)
    assert model._unique_parameters() == list(model.parameters())
    F.mse_loss(model(mt.randn(3, 2)), mt.zeros(3, 1)).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
@pytest.mark.parametrize("rows, inputs, features", [(4, 16, 24), (9, 16, 24), (16, 16, 200),
                                                    (37, 254, 53), (167, 59, 23)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed input", "transposed weight"])
def test_both_orders_of_a_layer_product_give_the_same_numbers(monkeypatch, dtype, rows,
                                                             inputs, features, layout):
    # the order is chosen by timing: a result that depended on it would change between
    # runs (BLAS's two orders differ in the last bits for float64, and for float32 when
    # one operand is transposed)
    mt.manual_seed(rows)
    x = mt.randn(inputs, rows, dtype=dtype).t() if layout == "transposed input" else \
        mt.randn(rows, inputs, dtype=dtype)
    w = mt.randn(inputs, features, dtype=dtype).t() if layout == "transposed weight" else \
        mt.randn(features, inputs, dtype=dtype)
    b = mt.randn(features, dtype=dtype)
    key = (x.numpy().dtype, (features, inputs), (rows - 1).bit_length())
    results = []
    for through in (False, True):
        monkeypatch.setitem(linalg._ORDER_MEASURED, key, through)
        results.append(F.linear(x, w, b).numpy())
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_allclose(results[0], x.numpy() @ w.numpy().T + b.numpy(), rtol=1e-4,
                               atol=1e-4)


def test_the_order_is_measured_once_per_kind_of_call(monkeypatch):
    measured = []

    def measure(rows, weights):
        measured.append((rows.shape, weights.shape))
        return True
    monkeypatch.setattr(linalg, "_ORDER_MEASURED", {})
    monkeypatch.setattr(linalg, "_measure_order", measure)
    w = mt.randn(7, 5)
    for rows in (3, 5, 6, 8, 9, 3):
        F.linear(mt.randn(rows, 5), w)
    F.linear(mt.randn(6, 5, dtype=mt.float16), w.half())
    F.linear(mt.randn(6, 5, dtype=mt.float64), w.double())
    # fewer than 4 rows: never; 5 to 8 rows: one kind; 9: another; other dtypes: never
    # (float64's orders give different numbers, float16 has no BLAS product)
    assert measured == [((5, 5), (7, 5)), ((9, 5), (7, 5))]


def test_measuring_the_order_compares_the_two_products():
    r = np.random.default_rng(0)
    rows, weights = r.random((8, 6), np.float32), r.random((5, 6), np.float32)
    assert linalg._measure_order(rows, weights) in (True, False)


def test_loss_backward_shortcut_keeps_the_general_rules():
    w = mt.randn(3, requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    loss.backward()                                 # retained once: runs again
    np.testing.assert_allclose(_values(w.grad), 4 * _values(w), rtol=1e-6)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    w.grad = None
    (w * w).sum().backward(create_graph=True)
    assert w.grad.requires_grad
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        (w * 2).backward()
    v = mt.randn(3, requires_grad=True)
    (v * 3)[1].backward()                           # a view: the general path
    np.testing.assert_allclose(_values(v.grad), [0.0, 3.0, 0.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.ones(()).backward()
