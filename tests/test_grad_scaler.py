"""``amp.GradScaler`` against PyTorch's: the scale's trajectory, skipped steps and the
parameters over a training loop with non-finite losses, ``state_dict`` both ways, the
per-optimizer stages and their refusals."""
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch's GradScaler is the oracle")


def train(lib, steps=8, bad=(2, 5), growth_interval=2, unscale_first=False, dtype="float64"):
    """A least-squares loop with a GradScaler on the CPU; the losses of the steps in ``bad``
    are made infinite.  Returns the scales after each update, the weights and the state."""
    rng = np.random.default_rng(0)
    w = lib.tensor(rng.standard_normal((4, 3)), dtype=getattr(lib, dtype), requires_grad=True)
    opt = lib.optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=growth_interval)
    scales = []
    for i in range(steps):
        x = lib.tensor(rng.standard_normal((5, 4)), dtype=getattr(lib, dtype))
        loss = (x @ w).square().mean()
        if i in bad:
            loss = loss * float("inf")
        opt.zero_grad()
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_([w], 1.0)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, w.detach().numpy(), scaler.state_dict()


@pytest.mark.parametrize("unscale_first", [False, True], ids=["step", "unscale_clip_step"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_training_loop_as_torch(unscale_first, dtype):
    ours = train(mt, unscale_first=unscale_first, dtype=dtype)
    theirs = train(torch, unscale_first=unscale_first, dtype=dtype)
    assert ours[0] == theirs[0]
    assert ours[2] == theirs[2]
    if dtype == "float32":    # float32 sums in another order: rounding, on weights of about 1
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)


def test_a_skipped_step_leaves_the_parameters():
    w = mt.ones(3, requires_grad=True)
    opt = mt.optim.SGD([w], lr=1.0)
    scaler = mt.amp.GradScaler("cpu")
    scaler.scale((w * float("nan")).sum()).backward()
    assert scaler.step(opt) is None
    scaler.update()
    np.testing.assert_array_equal(w.detach().numpy(), 1.0)
    assert scaler.get_scale() == 2.0 ** 15


def test_a_float16_loss_is_scaled_in_float32_as_torch():
    for lib in (mt, torch):
        loss = lib.tensor(8.0, dtype=lib.float16)
        scaled = lib.amp.GradScaler("cpu").scale(loss)
        assert str(scaled.dtype).split(".")[-1] == "float32"
        assert float(scaled) == 8.0 * 2 ** 16


def test_state_dict_loads_both_ways():
    ours, theirs = mt.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    ours.load_state_dict(train(torch)[2])
    theirs.load_state_dict(train(mt)[2])
    assert ours.state_dict() == theirs.state_dict() == train(mt)[2]


def test_stages_and_refusals_as_torch():
    def check(lib):
        w = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([w], lr=1.0)
        scaler = lib.amp.GradScaler("cpu")
        scaler.scale(w.sum()).backward()
        outcomes = []
        for call in (lambda: scaler.unscale_(opt), lambda: scaler.unscale_(opt),
                     lambda: scaler.step(opt, closure=lambda: 0), lambda: scaler.step(opt),
                     lambda: scaler.step(opt), lambda: scaler.unscale_(opt),
                     lambda: scaler.update(), lambda: scaler.update(),
                     lambda: scaler.scale(3), lambda: lib.amp.GradScaler("cpu", 1.0, 0.5),
                     lambda: scaler.update(lib.ones(2))):
            try:
                call()
                outcomes.append("ok")
            except Exception as e:  # noqa: BLE001 - the exception is what is compared
                outcomes.append((type(e).__name__, str(e)))
        return outcomes
    ours, theirs = check(mt), check(torch)
    assert [o if o == "ok" else o[0] for o in ours] == \
        [o if o == "ok" else o[0] for o in theirs]
    for a, b in zip(ours, theirs):
        if a != "ok":
            assert a[1][:30] == b[1][:30]


def test_disabled_and_cuda_without_a_gpu():
    scaler = mt.amp.GradScaler("cpu", enabled=False)
    loss = mt.tensor(2.0)
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    assert scaler.state_dict() == {}
    if not mt.cuda.is_available():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not mt.amp.GradScaler().is_enabled()
        assert "CUDA is not available.  Disabling." in str(caught[0].message)
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        mt.amp.GradScaler("cpu").load_state_dict({})
