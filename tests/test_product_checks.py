"""The refusals of the matrix products and of ``linear`` against PyTorch: which kernel's
message a product of two dtypes gets (``dot``, ``addmv``, ``mm``, ``bmm``, by the operands'
ranks), bool operands, and ``linear``'s two ways of adding a bias (PyTorch's ``addmm`` for
a 2-D input or a contiguous input with a 1-D bias, else a product and an in-place add that
casts the bias), for every rank and dtype combination: the same exception type, message,
result shape and dtype."""
import itertools

import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

RANKS = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 3), (3, 2)), ((4, 2, 3), (3,)),
         ((4, 2, 3), (3, 2)), ((3,), (4, 3, 2)), ((2, 3), (4, 3, 2)), ((4, 2, 3), (4, 3, 2))]
DTYPES = ["float32", "float64", "int64", "bool"]


def outcome(fn, lib):
    """What ``fn(lib)`` gives: a result's shape and dtype, or the exception's type and
    first line."""
    try:
        result = fn(lib)
    except Exception as error:  # noqa: BLE001 (the type is what is compared)
        return type(error).__name__, str(error).splitlines()[0]
    return tuple(result.shape), str(result.dtype).split(".")[-1]


def same_outcome(fn):
    assert outcome(fn, mt) == outcome(fn, torch)


@pytest.mark.parametrize("left,right", RANKS)
@pytest.mark.parametrize("left_dtype,right_dtype", itertools.product(DTYPES, DTYPES))
def test_matmul_refuses_as_pytorch(left, right, left_dtype, right_dtype):
    same_outcome(lambda lib: lib.ones(left, dtype=getattr(lib, left_dtype))
                 @ lib.ones(right, dtype=getattr(lib, right_dtype)))


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("int64", "float32"),
                                    ("bool", "bool"), ("float64", "bool")])
def test_mv_refuses_as_pytorch(dtypes):
    same_outcome(lambda lib: lib.mv(lib.ones(2, 3, dtype=getattr(lib, dtypes[0])),
                                    lib.ones(3, dtype=getattr(lib, dtypes[1]))))


LINEAR_SHAPES = [  # input, weight, bias
    ((2, 3), (3,), None), ((2, 3), (3,), ()), ((2, 3), (3,), (2,)), ((3,), (3,), ()),
    ((3,), (3,), (1,)), ((3,), (4, 3), (4,)), ((4, 2, 3), (5, 3), (5,)),
    ((4, 2, 3), (3,), ()), ((2, 3), (4, 3), (4,)), ((2, 3), (4, 3), (2, 4)),
    ((4, 2, 3), (5, 3), (2, 5)), ((4, 2, 3), (5, 3), ()), ((4, 2, 3), (5, 3), (3, 5))]


@pytest.mark.parametrize("shapes", LINEAR_SHAPES)
@pytest.mark.parametrize("dtypes", itertools.product(["float32", "float64"],
                                                     ["float32", "float64"],
                                                     ["float32", "float64", "int64"]))
def test_linear_checks_and_result_dtype_as_pytorch(shapes, dtypes):
    input_shape, weight_shape, bias_shape = shapes
    if bias_shape is None and dtypes[2] != "float32":
        pytest.skip("no bias: one bias dtype is enough")

    def linear(lib):
        input = lib.ones(input_shape, dtype=getattr(lib, dtypes[0]))
        weight = lib.ones(weight_shape, dtype=getattr(lib, dtypes[1]))
        bias = None if bias_shape is None else lib.ones(bias_shape, dtype=getattr(lib, dtypes[2]))
        return lib.nn.functional.linear(input, weight, bias)
    same_outcome(linear)


def test_linear_of_a_non_contiguous_input_adds_the_bias_in_place():
    """A non-contiguous 3-D input with a 1-D bias of another dtype: PyTorch multiplies, then
    adds the bias into the product (cast to its dtype), and the bias's gradient has the
    bias's dtype."""
    results = []
    for lib in (mt, torch):
        x = lib.arange(24.).reshape(3, 4, 2).transpose(0, 1).requires_grad_()
        w = lib.ones(5, 2, requires_grad=True)
        b = lib.arange(5, dtype=lib.float64).requires_grad_()
        y = lib.nn.functional.linear(x, w, b)
        y.sum().backward()
        results.append((y.detach().tolist(), str(y.dtype).split(".")[-1], b.grad.tolist(),
                        str(b.grad.dtype).split(".")[-1]))
    assert results[0] == results[1]


@pytest.mark.parametrize("shapes", [((2, 3, 4), (4, 2)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3))])
@pytest.mark.parametrize("dtypes", [("bool", "float32"), ("float32", "float64"),
                                    ("float32", "bool"), ("int64", "float32")])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("smaller_requires_grad", [False, True])
def test_a_stack_times_a_matrix_refuses_as_the_kernel_pytorch_folds_it_into(
        shapes, dtypes, transposed, smaller_requires_grad):
    """PyTorch folds a stack into one matrix product (mm or mv messages) when its leading
    dims merge without a copy or the smaller operand requires grad, else runs bmm."""
    left, right = shapes
    stacked_left = len(left) == 3
    smaller_dtype = dtypes[1] if stacked_left else dtypes[0]
    if smaller_requires_grad and smaller_dtype not in ("float32", "float64"):
        pytest.skip("only floating tensors require grad")

    def product(lib):
        def stack(shape, dtype):
            if not transposed:
                return lib.ones(shape, dtype=getattr(lib, dtype))
            swapped = lib.ones((shape[1], shape[0], shape[2]), dtype=getattr(lib, dtype))
            return swapped.transpose(0, 1)   # leading dims that do not merge

        def small(shape, dtype):
            return lib.ones(shape, dtype=getattr(lib, dtype),
                            requires_grad=smaller_requires_grad)
        if stacked_left:
            return stack(left, dtypes[0]) @ small(right, dtypes[1])
        return small(left, dtypes[0]) @ stack(right, dtypes[1])
    same_outcome(product)
