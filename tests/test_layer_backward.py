"""The unrecorded backward of the layers of a training step agrees with the recorded one.

When a backward pass builds no graph (grad mode off, no vmap), ``linear``'s derivative
works on NumPy arrays directly (one BLAS call per product, the bias's gradient as one row
sum) and ``tanh``'s is one C pass (``nnkernels.tanh_backward``).  With
``create_graph=True`` the same derivatives run as differentiable ops.  Both must give the
same gradients, with the same shapes, dtypes and strides (the strides decide whether
``.grad`` takes the gradient without a copy), for every layout Hypothesis draws: leading
dims, a transposed or expanded weight, biases that broadcast.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def linear_cases(draw):
    dtype = draw(st.sampled_from([mt.float32, mt.float64]))
    lead = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
    n_in, n_out = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    weight_layout = draw(st.sampled_from(["contiguous", "transposed", "expanded"]))
    bias = draw(st.sampled_from([None, "full", "one", "scalar"]))
    seed = draw(st.integers(0, 2 ** 16))
    return dtype, lead, n_in, n_out, weight_layout, bias, seed


def _leaves(case):
    dtype, lead, n_in, n_out, weight_layout, bias, seed = case
    r = np.random.default_rng(seed)
    x = mt.tensor(r.standard_normal(lead + (n_in,)), dtype=dtype, requires_grad=True)
    if weight_layout == "contiguous":
        w = mt.tensor(r.standard_normal((n_out, n_in)), dtype=dtype, requires_grad=True)
        weight = w
    elif weight_layout == "transposed":
        w = mt.tensor(r.standard_normal((n_in, n_out)), dtype=dtype, requires_grad=True)
        weight = w.t()
    else:   # one row repeated: a zero stride, which BLAS refuses
        w = mt.tensor(r.standard_normal((1, n_in)), dtype=dtype, requires_grad=True)
        weight = w.expand(n_out, n_in)
    shapes = {None: None, "full": (n_out,), "one": (1,), "scalar": ()}
    b = None if bias is None else \
        mt.tensor(r.standard_normal(shapes[bias]), dtype=dtype, requires_grad=True)
    return x, w, weight, b


@SETTINGS
@given(linear_cases())
def test_linear_backward_unrecorded_matches_recorded(case):
    results = []
    for create_graph in (False, True):
        x, w, weight, b = _leaves(case)
        out = mt.nn.functional.linear(x, weight, b)
        (out * out).sum().backward(create_graph=create_graph)
        results.append([t.grad for t in (x, w, b) if t is not None])
    fast, recorded = results
    assert not any(g.requires_grad for g in fast)
    for g, ref in zip(fast, recorded):
        assert g.shape == ref.shape and g.dtype == ref.dtype
        assert g.stride() == ref.stride()
        tol = 1e-5 if g.dtype == mt.float32 else 1e-12
        np.testing.assert_allclose(g.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)


def test_linear_backward_under_vmap_takes_the_recorded_path():
    # per-sample gradients: the backward runs on batched tensors, never on raw arrays
    w, b = mt.randn(3, 4), mt.randn(3)
    x = mt.randn(5, 4)

    def loss(w, b, x):
        return mt.nn.functional.linear(x, w, b).tanh().sum()
    per_sample = mt.func.vmap(mt.func.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0))(w, b, x)
    for i in range(5):
        ws, bs = mt.func.grad(loss, argnums=(0, 1))(w, b, x[i])
        np.testing.assert_allclose(per_sample[0][i].numpy(), ws.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(per_sample[1][i].numpy(), bs.numpy(), rtol=1e-5, atol=1e-6)


@SETTINGS
@given(st.sampled_from([mt.float32, mt.float64, mt.float16]),
       st.lists(st.integers(0, 4), min_size=0, max_size=3), st.booleans(),
       st.integers(0, 2 ** 16))
def test_tanh_backward_unrecorded_matches_recorded(dtype, shape, transposed, seed):
    values = np.random.default_rng(seed).standard_normal(shape) * 2
    results = []
    for create_graph in (False, True):
        x = mt.tensor(values, dtype=dtype, requires_grad=True)
        y = (x.mT if transposed and x.dim() >= 2 else x).tanh()
        (y * y.detach().flip(tuple(range(y.dim())))).sum().backward(create_graph=create_graph)
        results.append(x.grad)
    fast, recorded = results
    assert not fast.requires_grad
    assert fast.shape == recorded.shape and fast.dtype == recorded.dtype
    assert fast.stride() == recorded.stride()
    tol = {mt.float16: 1e-3, mt.float32: 1e-6, mt.float64: 1e-14}[dtype]
    np.testing.assert_allclose(fast.numpy().astype(np.float64),
                               recorded.detach().numpy().astype(np.float64), rtol=tol, atol=tol)
