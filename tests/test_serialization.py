"""mt.save / mt.load (PyTorch's zip checkpoint format, loaded without running code) and the
safetensors helpers, against torch.save / torch.load where PyTorch is installed."""
import collections
import io
import os
import pickle
import sys
import zipfile

import numpy as np
import pytest

import microtensor as mt
from microtensor import serialization

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def same_tensor(a, b):
    """Same values, dtype, sizes, strides, offset and requires_grad (across libraries)."""
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    assert tuple(a.shape) == tuple(b.shape) and tuple(a.stride()) == tuple(b.stride())
    assert a.storage_offset() == b.storage_offset()
    assert a.requires_grad == b.requires_grad
    assert a.detach().tolist() == b.detach().tolist()


def views_checkpoint(lib):
    """Views of one storage (offset, transposed, reshaped) and tensors of several dtypes."""
    base = lib.arange(12, dtype=lib.float64)
    return {"base": base, "offset": base[2:8].view(2, 3), "t": base.view(3, 4).t(),
            "float32": lib.tensor([[1.5, -2.0]], dtype=lib.float32),
            "int64": lib.tensor([1, 2 ** 40], dtype=lib.int64),
            "bool": lib.tensor([True, False, True]),
            "grad": lib.ones(2, requires_grad=True)}


def roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    mt.save(obj, buffer)
    buffer.seek(0)
    return mt.load(buffer, **load_kwargs)


# ---------------------------------------------------------------- save and load

def test_roundtrip_keeps_views_sharing_storage_and_their_geometry():
    saved = views_checkpoint(mt)
    loaded = roundtrip(saved)
    assert loaded.keys() == saved.keys()
    for name in saved:
        same_tensor(loaded[name], saved[name])
    storage = loaded["base"].untyped_storage()
    assert loaded["offset"].untyped_storage() is storage
    assert loaded["t"].untyped_storage() is storage
    assert loaded["float32"].untyped_storage() is not storage
    loaded["base"][3] = 100.0   # still views of one buffer after loading
    assert loaded["offset"][0, 1].item() == 100.0 and loaded["t"][3, 0].item() == 100.0


def test_roundtrip_of_containers_parameters_and_a_module(tmp_path):
    model = mt.nn.Linear(3, 2)
    state = model.state_dict()
    state._metadata = collections.OrderedDict({"": {"version": 1}})
    obj = {"model": state, "param": mt.nn.Parameter(mt.zeros(2)),
           "frozen": mt.nn.Parameter(mt.ones(1), requires_grad=False),
           "step": 7, "lr": 0.5, "name": "run", "flags": (True, None), "ids": {3: [1.0, -2]},
           "dtype": mt.float64, "dtypes": [mt.float64, mt.int64, mt.float64],
           "empty": [mt.zeros(0), mt.zeros(3, 0, dtype=mt.int64)], "size": mt.Size([2, 3]),
           "device": mt.device("cpu")}
    path = tmp_path / "checkpoint.pt"
    mt.save(obj, path)              # a path-like
    loaded = mt.load(str(path))     # a string path
    assert type(loaded["model"]) is collections.OrderedDict
    assert loaded["model"]._metadata == {"": {"version": 1}}
    assert list(loaded["model"]) == ["weight", "bias"]
    for name, value in state.items():
        same_tensor(loaded["model"][name], value)
    assert type(loaded["param"]) is mt.nn.Parameter and loaded["param"].requires_grad
    assert type(loaded["frozen"]) is mt.nn.Parameter and not loaded["frozen"].requires_grad
    assert {k: loaded[k] for k in ("step", "lr", "name", "flags", "ids")} == \
        {"step": 7, "lr": 0.5, "name": "run", "flags": (True, None), "ids": {3: [1.0, -2]}}
    assert loaded["dtype"] is mt.float64 and loaded["size"] == (2, 3)
    assert loaded["dtypes"] == [mt.float64, mt.int64, mt.float64]
    for got, want in zip(loaded["empty"], obj["empty"]):
        same_tensor(got, want)
    assert isinstance(loaded["size"], mt.Size) and loaded["device"] == mt.device("cpu")
    fresh = mt.nn.Linear(3, 2)
    fresh.load_state_dict(loaded["model"])
    x = mt.randn(4, 3)
    assert fresh(x).tolist() == model(x).tolist()


def test_optimizer_state_roundtrips():
    model = mt.nn.Linear(2, 1)
    opt = mt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(mt.ones(3, 2)).sum().backward()
    opt.step()
    state = opt.state_dict()
    loaded = roundtrip(state)
    assert loaded["param_groups"] == state["param_groups"]
    assert loaded["state"].keys() == state["state"].keys()
    for key, entry in state["state"].items():
        for name, value in entry.items():
            same_tensor(loaded["state"][key][name], value)


def test_save_refuses_what_load_could_not_read():
    for obj in ({"s": frozenset({1, 2})}, [object()], {"f": len}, {"s": {object()}}):
        with pytest.raises(TypeError, match="microtensor.save cannot save an object of type"):
            mt.save(obj, io.BytesIO())


def test_save_refuses_a_dtype_without_a_storage_class(monkeypatch):
    monkeypatch.delitem(serialization._STORAGE_CLASSES, "int32")
    buffer = io.BytesIO()
    with pytest.raises(TypeError, match="cannot save a tensor of dtype microtensor.int32"):
        mt.save({"x": mt.zeros(2, dtype=mt.int32)}, buffer)
    assert buffer.getvalue() == b""    # nothing written


def test_load_options():
    with pytest.raises(ValueError, match="supports only weights_only=True"):
        roundtrip([1], weights_only=False)
    loaded = roundtrip({"x": mt.ones(2)}, map_location={"cpu": "cpu"})
    assert loaded["x"].device == mt.device("cpu")
    assert roundtrip({"x": mt.ones(2)}, map_location="cpu")["x"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="map_location should be"):
        roundtrip({"x": mt.ones(2)}, map_location=3)


def test_a_cuda_checkpoint_loads_on_the_cpu_with_map_location(monkeypatch):
    buffer = io.BytesIO()
    mt.save({"x": mt.tensor([1.0, 2.0])}, buffer)
    moved = io.BytesIO()
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(moved, "w") as dst:
        for name in src.namelist():
            raw = src.read(name)
            if name == "archive/data.pkl":   # the storage's location, as torch.save on a GPU
                raw = raw.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
                assert b"cuda:0" in raw
            dst.writestr(name, raw)
    monkeypatch.setattr(serialization, "cuda_is_available", lambda: False)
    for map_location in ("cpu", mt.device("cpu"), {"cuda:0": "cpu"}):
        moved.seek(0)
        x = mt.load(moved, map_location=map_location)["x"]
        assert x.device == mt.device("cpu") and x.tolist() == [1.0, 2.0]
    moved.seek(0)
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device "
                                           "but microtensor.cuda.is_available.. is False"):
        mt.load(moved)


def test_cuda_tensors_roundtrip_on_their_device(monkeypatch):
    """On the fake CuPy of the CUDA tests (CuPy's rules over host memory)."""
    import fake_cupy
    from microtensor.backends import cuda as backend
    monkeypatch.setattr(backend, "_cupy", fake_cupy)
    base = mt.arange(6.0, device="cuda")
    saved = {"base": base, "view": base[1:5].view(2, 2).t()}
    loaded = roundtrip(saved)
    assert loaded["base"].device == mt.device("cuda:0")
    assert loaded["view"].untyped_storage() is loaded["base"].untyped_storage()
    on_cpu = roundtrip(saved, map_location="cpu")
    assert on_cpu["base"].device == mt.device("cpu")
    assert on_cpu["view"].untyped_storage() is on_cpu["base"].untyped_storage()
    for name in saved:
        same_tensor(loaded[name], saved[name])
        same_tensor(on_cpu[name], saved[name])


def test_big_endian_storages_are_read():
    buffer = io.BytesIO()
    mt.save({"x": mt.tensor([1.0, -2.5]), "n": mt.tensor([7, 2 ** 35])}, buffer)
    swapped = io.BytesIO()
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(swapped, "w") as dst:
        for name in src.namelist():
            raw = src.read(name)
            if name == "archive/byteorder":
                raw = b"big"
            elif name == "archive/data/0":
                raw = np.frombuffer(raw, "<f4").astype(">f4").tobytes()
            elif name == "archive/data/1":
                raw = np.frombuffer(raw, "<i8").astype(">i8").tobytes()
            dst.writestr(name, raw)
    swapped.seek(0)
    loaded = mt.load(swapped)
    assert loaded["x"].tolist() == [1.0, -2.5] and loaded["n"].tolist() == [7, 2 ** 35]


# ---------------------------------------------------------------- nothing runs on load

class RunsCode:
    def __reduce__(self):
        return os.system, ("echo pwned > " + MARKER,)


MARKER = ""


def checkpoint_with(pickled):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", "little")
    buffer.seek(0)
    return buffer


def test_a_malicious_pickle_is_refused_without_running(tmp_path):
    global MARKER
    MARKER = str(tmp_path / "marker")
    for payload in ({"weights": RunsCode()}, [collections.OrderedDict(), RunsCode()]):
        with pytest.raises(pickle.UnpicklingError, match=r"unsupported global: GLOBAL "
                                                         r"(posix|nt|os)\.system"):
            mt.load(checkpoint_with(pickle.dumps(payload, protocol=2)))
    assert not os.path.exists(MARKER)
    path = tmp_path / "plain.pkl"     # a bare pickle, not a checkpoint archive
    path.write_bytes(pickle.dumps(RunsCode()))
    with pytest.raises(pickle.UnpicklingError, match="not a zip archive"):
        mt.load(path)
    assert not os.path.exists(MARKER)


def test_setting_state_on_a_loaded_tensor_is_refused():
    """BUILD on a rebuilt tensor could set its sizes past its storage: only a state dict's
    OrderedDict attributes may be set."""
    class Pickler(serialization._CheckpointPickler):
        def _reduce_tensor(self, t):
            return super()._reduce_tensor(t) + ({"_sizes": (10 ** 9,)},)
    pickled = io.BytesIO()
    pickler = Pickler(pickled)
    pickler.dump(mt.zeros(2))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickled.getvalue())
        archive.writestr("archive/data/0", np.zeros(2, np.float32).tobytes())
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="cannot set the state of a Tensor"):
        mt.load(buffer)


def test_tensor_geometry_is_checked_against_its_storage():
    pickled = io.BytesIO()
    serialization._CheckpointPickler(pickled).dump(mt.zeros(2))
    fake = pickled.getvalue().replace(b"K\x02\x85", b"K\x09\x85")   # sizes (2,) -> (9,)
    assert fake != pickled.getvalue()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", fake)
        archive.writestr("archive/data/0", np.zeros(2, np.float32).tobytes())
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 8"):
        mt.load(buffer)


# ---------------------------------------------------------------- PyTorch interoperability

@needs_torch
def test_loads_what_torch_save_wrote():
    saved = views_checkpoint(torch)
    torch.manual_seed(0)   # unseeded, an output near 0 could miss the relative tolerance
    linear = torch.nn.Linear(3, 2)
    saved["linear"] = linear.state_dict()
    saved["param"] = torch.nn.Parameter(torch.ones(2))
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = mt.load(buffer)
    for name in views_checkpoint(torch):
        same_tensor(loaded[name], saved[name])
    assert loaded["offset"].untyped_storage() is loaded["base"].untyped_storage()
    assert loaded["t"].untyped_storage() is loaded["base"].untyped_storage()
    assert type(loaded["param"]) is mt.nn.Parameter
    model = mt.nn.Linear(3, 2)
    model.load_state_dict(loaded["linear"])
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(model(mt.tensor(x)).detach().numpy(),
                               linear(torch.tensor(x)).detach().numpy(), rtol=1e-6)


@needs_torch
def test_torch_loads_what_save_wrote(tmp_path):
    saved = views_checkpoint(mt)
    saved["param"] = mt.nn.Parameter(mt.ones(2))
    saved["meta"] = {"dtype": mt.int64, "size": mt.Size([1, 2]), "step": 3}
    mt.save(saved, tmp_path / "mt.pt")
    loaded = torch.load(tmp_path / "mt.pt", weights_only=True)
    for name in views_checkpoint(mt):
        same_tensor(loaded[name], saved[name])
    assert loaded["offset"].untyped_storage().data_ptr() == \
        loaded["base"].untyped_storage().data_ptr()
    assert isinstance(loaded["param"], torch.nn.Parameter)
    assert loaded["meta"] == {"dtype": torch.int64, "size": torch.Size([1, 2]), "step": 3}


# ---------------------------------------------------------------- safetensors

def test_safetensors_roundtrip(tmp_path):
    pytest.importorskip("safetensors", reason="the optional 'safetensors' extra is not "
                                              "installed")
    tensors = {"w": mt.arange(6.0).reshape(2, 3).t(), "i": mt.tensor([1, 2]),
               "b": mt.tensor([True])}
    mt.save_safetensors(tensors, tmp_path / "m.safetensors", metadata={"format": "np"})
    loaded = mt.load_safetensors(tmp_path / "m.safetensors")
    assert loaded.keys() == tensors.keys()
    for name, t in tensors.items():
        assert loaded[name].dtype == t.dtype and loaded[name].tolist() == t.tolist()
    with pytest.raises(TypeError, match="expected a dict of tensors"):
        mt.save_safetensors({"x": [1.0]}, tmp_path / "bad.safetensors")


def test_safetensors_without_the_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(ImportError, match=r"microtensor\[safetensors\]"):
        mt.save_safetensors({"x": mt.ones(1)}, tmp_path / "x.safetensors")
    with pytest.raises(ImportError, match=r"microtensor\[safetensors\]"):
        mt.load_safetensors(tmp_path / "x.safetensors")
