"""Result strides (memory format) of layer ops against PyTorch: normalisation, pooling,
upsampling, padding, unfold, masked_fill and scalar arithmetic on channels_last(_3d)
inputs, the ambiguous shapes (C=1, H=W=1, N=1) included, and on contiguous ones.  Each
case compares sizes, strides and values with torch's, and, for the layouts whose strides
are not ambiguous, the input gradient's strides and values too."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of the strides")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny inputs: torch's thread start-ups would dominate on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def F(lib):
    return lib.nn.functional


def spatial(x):
    return x.dim() - 2


def by_rank(lib, x, name):
    """``F.<name>2d`` for a 4-D ``x``, ``F.<name>3d`` for a 5-D one."""
    return getattr(F(lib), f"{name}{spatial(x)}d")


def ones(lib, x):
    return lib.ones(x.shape[1], dtype=x.dtype)


def bn_module(lib, x, training):
    module = getattr(lib.nn, f"BatchNorm{spatial(x)}d")(x.shape[1]).to(x.dtype)
    return module.train(training)(x)


NORM_CASES = {
    "batch_norm": lambda lib, x: F(lib).batch_norm(x, None, None, training=True),
    "batch_norm_affine": lambda lib, x: F(lib).batch_norm(
        x, None, None, ones(lib, x), ones(lib, x) / 2, training=True),
    "batch_norm_eval": lambda lib, x: F(lib).batch_norm(
        x, ones(lib, x) / 4, ones(lib, x) * 2, ones(lib, x) * 3, ones(lib, x)),
    "batch_norm_eval_plain": lambda lib, x: F(lib).batch_norm(
        x, ones(lib, x) / 4, ones(lib, x) * 2),
    "BatchNorm_train": lambda lib, x: bn_module(lib, x, True),
    "BatchNorm_eval": lambda lib, x: bn_module(lib, x, False),
    "group_norm": lambda lib, x: F(lib).group_norm(x, 1, ones(lib, x) * 2, ones(lib, x)),
    "instance_norm": lambda lib, x: F(lib).instance_norm(x),
    "layer_norm": lambda lib, x: F(lib).layer_norm(x, x.shape[-1:]),
}


def pool_kernel(x):
    return (1,) * (spatial(x) - 1) + (2,)


def interp(mode, **options):
    return lambda lib, x: F(lib).interpolate(x, mode=mode, **options)


# each case with the ranks of the inputs it takes
LAYER_CASES = {     # pooling, upsampling, padding, unfold, pixel (un)shuffle
    "max_pool": (lambda lib, x: by_rank(lib, x, "max_pool")(x, pool_kernel(x)), (4, 5)),
    "max_pool_indices": (lambda lib, x: by_rank(lib, x, "max_pool")(
        x, pool_kernel(x), return_indices=True)[1], (4, 5)),
    "avg_pool": (lambda lib, x: by_rank(lib, x, "avg_pool")(x, pool_kernel(x)), (4, 5)),
    "adaptive_avg_pool_1": (lambda lib, x: F(lib).adaptive_avg_pool2d(x, 1), (4,)),
    "adaptive_avg_pool_2": (lambda lib, x: F(lib).adaptive_avg_pool2d(x, 2), (4,)),
    "adaptive_max_pool_1": (lambda lib, x: F(lib).adaptive_max_pool2d(x, 1), (4,)),
    "adaptive_max_pool_2": (lambda lib, x: F(lib).adaptive_max_pool2d(x, (2, 3)), (4,)),
    "nearest": (interp("nearest", scale_factor=2), (4, 5)),
    "nearest_same_size": (lambda lib, x: F(lib).interpolate(x, size=x.shape[2:]), (4, 5)),
    "nearest-exact": (interp("nearest-exact", scale_factor=2), (4, 5)),
    "bilinear": (interp("bilinear", scale_factor=2), (4,)),
    "bilinear_corners": (interp("bilinear", size=(3, 5), align_corners=True), (4,)),
    "bicubic": (interp("bicubic", scale_factor=2), (4,)),
    "trilinear": (interp("trilinear", scale_factor=2), (5,)),
    "area_1": (lambda lib, x: F(lib).interpolate(x, size=(1,) * spatial(x), mode="area"),
               (4, 5)),
    "area_2": (lambda lib, x: F(lib).interpolate(x, size=(2,) * spatial(x), mode="area"),
               (4, 5)),
    "pad_constant": (lambda lib, x: F(lib).pad(x, (1, 2) * spatial(x), value=0.5), (4, 5)),
    "pad_zero": (lambda lib, x: F(lib).pad(x, (0, 0) * spatial(x)), (4, 5)),
    "pad_crop": (lambda lib, x: F(lib).pad(x, (0, -1) + (1, 0) * (spatial(x) - 1)),
                 (4, 5)),
    "pad_crop_only": (lambda lib, x: F(lib).pad(x, (-1, 0)), (4, 5)),
    "pad_reflect": (lambda lib, x: F(lib).pad(x, (1, 0) * spatial(x), mode="reflect"),
                    (4, 5)),
    "pad_replicate": (lambda lib, x: F(lib).pad(x, (1, 2) * spatial(x), mode="replicate"),
                      (4, 5)),
    "pad_circular": (lambda lib, x: F(lib).pad(x, (1, 0) * spatial(x), mode="circular"),
                     (4, 5)),
    "unfold": (lambda lib, x: F(lib).unfold(x, (1, 1)), (4,)),
    "unfold_blocks": (lambda lib, x: F(lib).unfold(x, (1, 2), padding=(0, 1)), (4,)),
    "pixel_shuffle": (lambda lib, x: F(lib).pixel_shuffle(lib.cat([x] * 4, 1), 2), (4,)),
    "pixel_unshuffle": (lambda lib, x: F(lib).pixel_unshuffle(x, 2), (4,)),
    "pixel_unshuffle_repeated": (lambda lib, x: F(lib).pixel_unshuffle(
        x.repeat(1, 1, 2, 2), 2), (4,)),
}

# pointwise ops with a Python number: PyTorch's binary ops take it as a 0-d operand (the
# result follows the input's strides, size-1 dims included), ops with a number parameter
# (pow, clamp) and ``number / tensor`` (a reciprocal) do not; masked_fill is contiguous
SCALAR_CASES = {
    "add": lambda lib, x: x + 1,
    "radd": lambda lib, x: 1.5 + x,
    "rsub": lambda lib, x: 1 - x,
    "mul": lambda lib, x: x * 2.0,
    "div": lambda lib, x: x / 2,
    "rdiv": lambda lib, x: 2 / (x.abs() + 1),
    "add_method": lambda lib, x: x.add(1),
    "floor_divide": lambda lib, x: lib.div(x, 2, rounding_mode="floor"),
    "remainder": lambda lib, x: x % 2,
    "gt": lambda lib, x: x > 0.5,
    "where": lambda lib, x: lib.where(x > 0.5, x, 0.0),
    "where_first": lambda lib, x: lib.where(x > 0.5, 1.0, x),
    "bool_add": lambda lib, x: (x > 0.5) + 1,
    "int_and": lambda lib, x: (x * 10).to(lib.int32) & 3,
    "pow": lambda lib, x: x ** 2,
    "clamp": lambda lib, x: x.clamp(-0.5, 0.5),
    "masked_fill": lambda lib, x: x.masked_fill(x > 0.5, 0.0),
    "masked_fill_broadcast": lambda lib, x: x.masked_fill(
        lib.tensor([True, False] * (x.shape[-1] // 2) + [True] * (x.shape[-1] % 2)), 2.0),
    "masked_fill_": lambda lib, x: x.clone().masked_fill_(x > 0.5, 0.0),
}


def make_input(shape, layout):
    """The same float64 values for torch and microtensor, laid out in ``layout``."""
    values = np.random.default_rng(sum(shape)).standard_normal(shape)
    fmt = {"cl": "channels_last", "cl3d": "channels_last_3d", "contiguous": "contiguous_format"}
    pair = []
    for lib in (torch, mt):
        t = lib.tensor(values).to(memory_format=getattr(lib, fmt[layout]))
        pair.append(t)
    assert pair[0].stride() == pair[1].stride()
    return pair


# (shape, layout, whether the strides are unambiguous: then the gradient is compared too)
LAYOUTS = [((2, 3, 4, 4), "cl", True), ((1, 3, 4, 4), "cl", True), ((2, 1, 4, 4), "cl", False),
           ((2, 3, 1, 4), "cl", False), ((2, 3, 4, 1), "cl", False), ((2, 3, 1, 1), "cl", False),
           ((2, 3, 4, 4), "contiguous", True), ((2, 3, 2, 4, 4), "cl3d", True),
           ((2, 1, 2, 4, 4), "cl3d", False), ((2, 3, 1, 1, 1), "cl3d", False),
           ((2, 3, 2, 4, 4), "contiguous", True)]


def as_numpy(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def check_same(expected, actual, what):
    assert tuple(actual.shape) == tuple(expected.shape), what
    assert actual.stride() == expected.stride(), what
    np.testing.assert_allclose(as_numpy(actual), as_numpy(expected), rtol=1e-7, atol=1e-9,
                               err_msg=what)


def input_gradients(lib, fn, x, y):
    """``x``'s gradient from a contiguous upstream gradient, then from one laid out as
    ``y`` (as a layer's output gradient usually is)."""
    upstream = lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)) % 7)
    grads = []
    for g in (upstream, lib.empty_like(y).copy_(upstream)):
        x.grad = None
        fn(lib, x).backward(g)
        grads.append(x.grad)
    return grads


def run_case(fn, shape, layout, unambiguous):
    """Sizes, strides and values of ``fn``'s result on torch and microtensor, and of the
    input gradients when the layout is unambiguous (else PyTorch's leaf-gradient rule
    keeps strides of size-1 dims that only mirror how its backward kernels allocate)."""
    outputs, grads = [], []
    for lib, x in zip((torch, mt), make_input(shape, layout)):
        x.requires_grad_()
        try:
            y = fn(lib, x)
        except Exception as e:       # the same refusal on both sides
            outputs.append(type(e))
            continue
        outputs.append(y)
        if unambiguous and y.dtype == lib.float64:
            grads.append(input_gradients(lib, fn, x, y))
    if isinstance(outputs[0], type):
        assert outputs[1] is outputs[0]
        return
    what = f"{shape} {layout}"
    check_same(outputs[0], outputs[1], what)
    if grads:
        for kind, expected, actual in zip(("contiguous", "result-shaped"), *grads):
            check_same(expected, actual, f"{what} input gradient ({kind} upstream)")


def run_layouts(fn, ranks=(4, 5)):
    for shape, layout, unambiguous in LAYOUTS:
        if len(shape) in ranks:
            run_case(fn, shape, layout, unambiguous)


@pytest.mark.parametrize("name", sorted(NORM_CASES))
def test_normalization_layout(name):
    run_layouts(NORM_CASES[name])


@pytest.mark.parametrize("name", sorted(LAYER_CASES))
def test_layer_layout(name):
    run_layouts(*LAYER_CASES[name])


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_scalar_pointwise_layout(name):
    run_layouts(SCALAR_CASES[name])


# ops whose backward allocates as PyTorch's does, so that PyTorch's leaf-gradient layout
# contract (a gradient that has the leaf's strides on all but its size-1 dims is kept as
# it is) gives the very same ``.grad`` strides on the ambiguous layouts
LEAF_CASES = {
    "relu": lambda lib, x: x.relu(),
    "add": lambda lib, x: x + 1,
    "mul": lambda lib, x: x * lib.tensor(2.0, dtype=x.dtype),
    "softmax": lambda lib, x: x.softmax(1),
    "layer_norm": NORM_CASES["layer_norm"],
    "instance_norm": NORM_CASES["instance_norm"],
    "pad": LAYER_CASES["pad_constant"][0],
    "nearest": LAYER_CASES["nearest"][0],
    "cat": lambda lib, x: lib.cat([x, x], 1),
    "masked_fill": SCALAR_CASES["masked_fill"],
}


@pytest.mark.parametrize("name", sorted(LEAF_CASES))
def test_leaf_gradient_layout_contract(name):
    for shape, layout, unambiguous in LAYOUTS:
        if unambiguous:
            continue
        grads = []
        for lib, x in zip((torch, mt), make_input(shape, layout)):
            x.requires_grad_()
            try:
                y = LEAF_CASES[name](lib, x)
            except Exception as e:     # the same refusal on both sides
                grads.append(type(e))
                continue
            (y * lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)))
             ).sum().backward()
            grads.append(x.grad)
        if isinstance(grads[0], type):
            assert grads[1] is grads[0]
            continue
        check_same(grads[0], grads[1], f"{name} {shape} {layout} .grad")


@pytest.mark.parametrize("shape", [(2, 1, 3), (1, 2, 1), (2, 3, 4, 5), (2, 1, 4, 1)])
def test_stack_and_cat_strides_match_torch_for_every_permutation(shape):
    """``stack`` joins along the dim and splits it, as PyTorch's: its layout follows the
    inputs' as ``cat`` lays them out, also where the unsqueezed inputs would suggest
    another memory format (size-1 dims) and for channels_last inputs."""
    import itertools
    data = np.random.default_rng(0).random(shape).astype(np.float32)
    for perm in itertools.permutations(range(len(shape))):
        ours, theirs = mt.tensor(data).permute(perm), torch.tensor(data).permute(perm)
        for dim in range(-len(shape) - 1, len(shape) + 1):
            got, expected = mt.stack([ours, ours], dim), torch.stack([theirs, theirs], dim)
            assert got.stride() == expected.stride(), (perm, dim)
            np.testing.assert_array_equal(got.numpy(), expected.numpy())
        got, expected = mt.cat([ours, ours], -1), torch.cat([theirs, theirs], -1)
        assert got.stride() == expected.stride(), perm
