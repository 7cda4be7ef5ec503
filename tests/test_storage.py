"""Storages as PyTorch's: ``Tensor.untyped_storage()`` (bytes: size, len, indexing,
tolist), ``Tensor.storage()`` (the deprecated ``TypedStorage``: elements), the
``UntypedStorage``/``TypedStorage`` constructors, sharing between views and
``Tensor.set_`` from a storage; against torch where PyTorch is installed."""
import warnings

import pytest

import microtensor as mt
from microtensor import storage as storage_module

from test_toplevel_more import needs_torch, outcome, torch


def quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def untyped_facts(lib, dtype):
    t = lib.arange(6, dtype=getattr(lib, dtype))
    u = t.untyped_storage()
    view = t[2:].t() if t.dim() == 2 else t[2:]
    return (u.size(), len(u), u.nbytes(), u.element_size(), str(u.device), u.tolist(),
            u[4], u[-1], view.untyped_storage().data_ptr() == u.data_ptr(),
            view.untyped_storage() is u, isinstance(u, lib.UntypedStorage))


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "int64", "float64", "int16"])
def test_untyped_storage_as_torch(dtype):
    assert untyped_facts(mt, dtype) == untyped_facts(torch, dtype)


def typed_facts(lib, dtype):
    t = lib.tensor([0, 1, 2, 0, 3, 1]).to(getattr(lib, dtype))
    s = quiet(t.storage)
    view_storage = quiet(t[3:].storage)
    return (s.size(), len(s), s.nbytes(), s.element_size(), str(s.dtype).split(".")[1],
            s.tolist(), s[1], s[-2], type(s[1]).__name__, s.data_ptr() == t.data_ptr(),
            view_storage.data_ptr() == s.data_ptr(), view_storage.size(),
            s.untyped() is t.untyped_storage(), isinstance(s, lib.TypedStorage),
            lib.is_storage(s), lib.is_storage(t.untyped_storage()), lib.is_storage(t))


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_typed_storage_as_torch(dtype):
    assert typed_facts(mt, dtype) == typed_facts(torch, dtype)


@needs_torch
def test_writes_through_storages_show_in_the_tensor():
    results = []
    for lib in (mt, torch):
        t = lib.zeros(4)
        s = quiet(t.storage)
        s[1] = 2.5
        t.untyped_storage()[15] = 64          # the last byte of element 3: 2.0 in float32
        results.append(t.tolist())
    assert results[0] == results[1] == [0.0, 2.5, 0.0, 2.0]


@needs_torch
def test_constructors_as_torch():
    for lib in (mt, torch):
        assert lib.UntypedStorage(5).size() == 5
        assert lib.UntypedStorage([1, 2, 255]).tolist() == [1, 2, 255]
        assert lib.UntypedStorage().size() == 0
        typed = quiet(lambda: lib.TypedStorage(3, dtype=lib.float64))
        assert typed.size() == 3 and typed.nbytes() == 24 and typed.dtype == lib.float64
        values = quiet(lambda: lib.TypedStorage([1.5, 2.0], dtype=lib.float64))
        assert values.tolist() == [1.5, 2.0]
        wrapped = quiet(lambda: lib.TypedStorage(wrap_storage=lib.UntypedStorage(8).fill_(0),
                                                 dtype=lib.int32))
        assert wrapped.size() == 2 and wrapped.tolist() == [0, 0]


ERRORS = [
    lambda lib: lib.arange(3.0).untyped_storage()[12],
    lambda lib: quiet(lib.arange(3.0).storage)[3],
    lambda lib: quiet(lib.arange(3.0).storage)[0:2],
    lambda lib: lib.tensor([], dtype=lib.float64).set_(quiet(lib.arange(3.0).storage)),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_as_torch(case):
    ours, theirs = outcome(lambda: ERRORS[case](mt)), outcome(lambda: ERRORS[case](torch))
    assert ours == theirs and ours[0] != "ok"


@needs_torch
def test_set_from_a_storage_as_torch():
    results = []
    for lib in (mt, torch):
        base = lib.arange(6.0)
        typed = quiet(base.storage)
        whole = lib.tensor([]).set_(base.untyped_storage())
        part = lib.tensor([]).set_(typed, 2, (2, 2), (1, 2))
        from_bytes = lib.tensor([]).set_(lib.UntypedStorage(10))   # 2 whole float32s
        part[0, 0] = 20.0
        results.append((whole.tolist(), part.tolist(), base.tolist(),
                        tuple(from_bytes.shape), whole.data_ptr() == base.data_ptr()))
    assert results[0] == results[1]


def test_set_grows_a_byte_storage_for_wider_elements():
    raw = mt.UntypedStorage(3)
    t = mt.tensor([], dtype=mt.int64).set_(raw, 0, (2,))
    t.copy_(mt.tensor([7, 9]))
    assert raw.size() == 16 and t.tolist() == [7, 9]
    assert raw.tolist()[:8] == [7, 0, 0, 0, 0, 0, 0, 0]


def test_storage_warns_once_as_torch(monkeypatch):
    monkeypatch.setattr(storage_module, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mt.zeros(2).storage()
        mt.zeros(2).storage()
        mt.TypedStorage(2)
    assert len(caught) == 1 and "TypedStorage is deprecated" in str(caught[0].message)
