"""``python -m microtensor demo``: a short, printed tour of what microtensor does."""
import argparse


def main(argv=()):
    parser = argparse.ArgumentParser(prog="python -m microtensor demo",
                                     description="A short tour of microtensor.")
    parser.parse_args(list(argv))
    import microtensor as mt

    def show(title, value):
        print(f"{title:<48} {value}")

    print("== strided tensors and views ==")
    x = mt.arange(12.0).reshape(3, 4)
    show("x = arange(12.).reshape(3, 4); x.stride()", x.stride())
    xt = x.t()
    show("x.t().stride(), is_contiguous()", (xt.stride(), xt.is_contiguous()))
    show("x.t() shares storage with x", xt.data_ptr() == x.data_ptr())
    show("x.t().contiguous().stride()", xt.contiguous().stride())
    row = x[1]
    row.mul_(10)
    show("after x[1].mul_(10): x[1]", x[1].tolist())
    show("x._version (shared by views)", x._version)

    print("\n== autograd, including in-place writes into views ==")
    w = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = w * 2
    b[1:].mul_(w[:2])
    show("b = w*2; b[1:].mul_(w[:2]); b.grad_fn", b.grad_fn.name())
    b.sum().backward()
    show("w.grad", w.grad.tolist())
    return 0
