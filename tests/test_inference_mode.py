"""``inference_mode`` and inference tensors, compared with PyTorch: which tensors are
inference tensors, what is refused outside the mode (in-place updates, ``requires_grad``,
saving for backward, the version counter) with PyTorch's messages, the mode's context
manager and decorator forms, and its nesting with grad mode and threads."""
import threading

import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

LIBS = [mt, torch] if torch is not None else [mt]
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def made_inside(lib):
    """Tensors made inside inference mode, by name, and a normal tensor ``n``."""
    n = lib.ones(3)
    with lib.inference_mode():
        made = {"ones": lib.ones(3), "tensor": lib.tensor([1.0, 2.0]), "arange": lib.arange(4),
                "randn": lib.randn(2), "op result": n * 2, "view of normal": n[:2],
                "transpose of normal": n.view(3, 1).t()}
        made["view of inference"] = made["ones"][1:]
        n.add_(1)                                   # in place on a normal tensor: allowed
        made["normal, updated inside"] = n
    made["clone outside"] = made["ones"].clone()
    made["detach outside"] = made["ones"].detach()
    made["op outside"] = made["ones"] + 1
    return made


@pytest.mark.parametrize("lib", LIBS, ids=lambda lib: lib.__name__)
def test_which_tensors_are_inference_tensors(lib):
    flags = {name: t.is_inference() for name, t in made_inside(lib).items()}
    assert flags == {"ones": True, "tensor": True, "arange": True, "randn": True,
                     "op result": True, "view of normal": False,
                     "transpose of normal": False, "view of inference": True,
                     "normal, updated inside": False, "clone outside": False,
                     "detach outside": True, "op outside": False}
    assert made_inside(lib)["normal, updated inside"].tolist() == [2.0, 2.0, 2.0]


INPLACE = {
    "add_": lambda lib, x, n: x.add_(1),
    "zero_": lambda lib, x, n: x.zero_(),
    "fill_": lambda lib, x, n: x.fill_(2.0),
    "copy_": lambda lib, x, n: x.copy_(n),
    "setitem": lambda lib, x, n: x.__setitem__(0, 5.0),
    "out=": lambda lib, x, n: lib.add(n, n, out=x),
    "mul_ on a view": lambda lib, x, n: x[1:].mul_(3.0),
    "clamp_": lambda lib, x, n: x.clamp_(min=2.0),
}


@needs_torch
@pytest.mark.parametrize("update", list(INPLACE.values()), ids=list(INPLACE))
def test_inplace_update_outside_the_mode_is_refused_as_torch(update):
    """PyTorch's error; microtensor refuses before writing (PyTorch's kernel has written
    by the time it raises)."""
    messages = []
    for lib in (mt, torch):
        n = lib.full((3,), 7.0)
        with lib.inference_mode():
            x = lib.ones(3)
        for context in (lambda: lib.inference_mode(False), lib.enable_grad):
            with context(), pytest.raises(RuntimeError) as info:
                update(lib, x, n)
            messages.append(str(info.value))
        if lib is mt:
            assert x.tolist() == [1.0, 1.0, 1.0]
        with lib.inference_mode():
            update(lib, x, n)                   # inside the mode: allowed
    assert len(set(messages)) == 1
    assert messages[0].startswith("Inplace update to inference tensor outside InferenceMode "
                                  "is not allowed.")


@needs_torch
def test_autograd_refuses_to_save_an_inference_tensor_as_torch():
    results = []
    for lib in (mt, torch):
        with lib.inference_mode():
            x = lib.tensor([1.0, 2.0, 3.0])
        w = lib.tensor([2.0, 0.5, 1.0], requires_grad=True)
        with pytest.raises(RuntimeError) as info:
            x * w                               # mul saves x for w's gradient
        (x + w).sum().backward()                # add saves nothing: allowed
        (x.clone() * w).sum().backward()        # a clone is a normal tensor
        with lib.no_grad():
            x * w                               # nothing recorded, nothing saved
        results.append((str(info.value), w.grad.tolist()))
    assert results[0] == results[1]
    assert results[0][0].startswith("Inference tensors cannot be saved for backward.")
    assert results[0][1] == [2.0, 3.0, 4.0]


@needs_torch
def test_requires_grad_and_version_of_an_inference_tensor_as_torch():
    outcomes = []
    for lib in (mt, torch):
        with lib.inference_mode():
            x = lib.ones(2)
            inside = lib.ones(2, requires_grad=True)   # allowed inside
        row = [inside.requires_grad, inside.is_inference()]
        for attempt in (lambda: x.requires_grad_(), lambda: setattr(x, "requires_grad", True),
                        lambda: x._version):
            with pytest.raises(RuntimeError) as info:
                attempt()
            row.append(str(info.value))
        row.append(x.requires_grad_(False).requires_grad)
        outcomes.append(row)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][2] == ("Setting requires_grad=True on inference tensor outside "
                              "InferenceMode is not allowed.")
    assert outcomes[0][4] == "Inference tensors do not track version counter."


def mode_report(lib):
    """The modes and flags seen by each way of entering and leaving inference mode."""
    def state():
        return (lib.is_inference_mode_enabled(), lib.is_grad_enabled(),
                lib.ones(1).is_inference())
    report = [state()]
    with lib.inference_mode():
        report.append(state())
        with lib.inference_mode(False):
            report.append(state())
        with lib.enable_grad():
            report.append(state())
        with lib.no_grad():
            report.append(state())
    with lib.no_grad(), lib.inference_mode(False):
        report.append(state())

    @lib.inference_mode
    def bare():
        return state()

    @lib.inference_mode()
    def called():
        return state()

    @lib.inference_mode(False)
    def off():
        return state()

    @lib.inference_mode()
    def generator():
        yield state()
        yield state()
    with lib.inference_mode():
        report.append(off())
    report += [bare(), called(), list(generator()), state()]
    try:
        with lib.inference_mode():
            raise ValueError
    except ValueError:
        report.append(state())
    mode = lib.inference_mode(False)
    report.append((mode.mode, mode.clone().mode))
    return report


@needs_torch
def test_modes_as_torch():
    assert mode_report(mt) == mode_report(torch)
    assert mode_report(mt)[1] == (True, False, True)


@pytest.mark.parametrize("lib", LIBS, ids=lambda lib: lib.__name__)
def test_the_mode_is_per_thread(lib):
    seen = []
    with lib.inference_mode():
        thread = threading.Thread(target=lambda: seen.append(
            (lib.is_inference_mode_enabled(), lib.ones(1).is_inference())))
        thread.start()
        thread.join()
        assert lib.ones(1).is_inference()
    assert seen == [(False, False)]
