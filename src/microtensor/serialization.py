"""``save``/``load`` in PyTorch's checkpoint format, and the safetensors format.

``save`` writes the zip archive of ``torch.save`` (PyTorch >= 1.6): ``archive/data.pkl``, a
pickle of the object in which each tensor is a call to ``torch._utils._rebuild_tensor_v2``
over a storage named by key, and ``archive/data/<key>``, the raw little-endian bytes of
each storage.  Views of one storage refer to the same key, so they come back as views of
one storage.  ``torch.load`` reads these files, and ``load`` reads those of ``torch.save``
without PyTorch installed.

``load`` never runs code from a file: its unpickler resolves only the names below
(tensor and parameter rebuilds, storage types, dtypes, ``Size``, ``device``, and the
containers and scalars of ``torch.load(weights_only=True)``'s allow-list: ``OrderedDict``,
``Counter``, ``set``, ``complex``, ``bytes``, ``bytearray``) and refuses every other global.
These are what optimizer and scheduler state dicts hold, so a whole training run (model,
optimizer, scheduler, epoch) saves and resumes.
"""
import codecs
import collections
import io
import os
import pickle
import zipfile
from functools import lru_cache

import numpy as np

from microtensor import _dtype_table
from microtensor._C.tensor import DTYPES, Size, Storage, device, dtype
from microtensor._tensor import Tensor, _rebuild_tensor
from microtensor.cuda import is_available as cuda_is_available
from microtensor.nn.parameter import Parameter

# PyTorch's storage classes by the dtype of their elements
_STORAGE_CLASSES = {info.name: f"{info.scalar_name}Storage" for info in _dtype_table.DTYPES}
_DTYPE_OF_SAFETENSORS_CODE = {info.safetensors: DTYPES[info.name] for info in _dtype_table.DTYPES}

_NOT_ALLOWED = ("microtensor.load loads only tensors, numbers, strings, bytes, dtypes, devices "
                "and dicts, lists, tuples, sets and Counters of them, and never runs code from "
                "a file")

# The only globals other than PyTorch's names a checkpoint may name, as pickle's protocol 2
# writes them (which names builtins ``__builtin__``); each is a constructor of plain data
_SAFE_GLOBALS = {("collections", "OrderedDict"): collections.OrderedDict,
                 ("collections", "Counter"): collections.Counter,
                 ("__builtin__", "set"): set,
                 ("__builtin__", "complex"): complex,
                 ("__builtin__", "bytearray"): bytearray,
                 ("_codecs", "encode"): codecs.encode}


def _mt_dtype(name):
    """microtensor's dtype called ``name``, or None where microtensor has none."""
    import microtensor
    candidate = getattr(microtensor, name, None)
    return candidate if isinstance(candidate, dtype) else None


def _whole_storage(storage, dt):
    """A 1-D tensor over all of ``storage``."""
    return _rebuild_tensor(Tensor, storage, 0, (storage.nbytes() // dt.itemsize,), (1,), dt, False)


def _location(dev):
    return "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"


# --------------------------------------------------------------------------- writing

class _TorchName:
    """A global of PyTorch's, written into the pickle by name: PyTorch need not be
    installed to write it."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    # the pickler requires the head of a reduce to be callable; nothing calls it
    def __call__(self, *args):
        raise TypeError(f"{self.module}.{self.name} is a name in a checkpoint, not a function")


@lru_cache(maxsize=None)
def _torch_name(module, name):
    return _TorchName(module, name)


class _CheckpointPickler(pickle._Pickler):
    """Pickles the allowed objects as ``torch.save`` does; refuses everything else.

    The Python implementation of the pickler, because it lets ``_TorchName`` be written as
    a global that this process cannot import.
    """

    _plain_types = (type(None), bool, int, float, complex, str, bytes, bytearray, list,
                    tuple, dict, set, collections.OrderedDict, collections.Counter)
    _plain_globals = tuple(_SAFE_GLOBALS.values())
    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.storages = {}   # id(storage) -> (key, storage, dtype)

    def save_torch_name(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    def save_dtype(self, obj):
        self.save(_torch_name("torch", obj.name))   # through the memo: written once

    def save_bytes(self, obj):
        # as protocol 2 writes non-empty bytes; it writes b"" as a call of ``bytes``,
        # a global torch.load refuses
        self.save_reduce(codecs.encode, (str(obj, "latin1"), "latin1"), obj=obj)

    dispatch[_TorchName] = save_torch_name
    dispatch[dtype] = save_dtype
    dispatch[bytes] = save_bytes

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        key, _, dt = self.storages[id(obj)]
        return ("storage", _torch_name("torch", _STORAGE_CLASSES[dt.name]), key,
                _location(obj.device), obj.nbytes() // dt.itemsize)

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return self._reduce_tensor(obj)
        if isinstance(obj, Size):
            return _torch_name("torch", "Size"), (tuple(obj),)
        if isinstance(obj, device):
            return _torch_name("torch", "device"), (str(obj),)
        if type(obj) in self._plain_types or any(obj is g for g in self._plain_globals) \
                or isinstance(obj, (dtype, _TorchName)):
            return NotImplemented
        raise TypeError(f"microtensor.save cannot save an object of type "
                        f"{type(obj).__name__}: {_NOT_ALLOWED}")

    def _reduce_tensor(self, t):
        if t.dtype.name not in _STORAGE_CLASSES:
            raise TypeError(f"microtensor.save cannot save a tensor of dtype {t.dtype}")
        storage = t.untyped_storage()
        self.storages.setdefault(id(storage), (str(len(self.storages)), storage, t.dtype))
        if isinstance(t, Parameter):
            data = _rebuild_tensor(Tensor, storage, t.storage_offset(), tuple(t.shape),
                                   t.stride(), t.dtype, False)
            return (_torch_name("torch._utils", "_rebuild_parameter"),
                    (data, t.requires_grad, collections.OrderedDict()))
        return (_torch_name("torch._utils", "_rebuild_tensor_v2"),
                (storage, t.storage_offset(), tuple(t.shape), t.stride(), t.requires_grad,
                 collections.OrderedDict()))


def _storage_bytes(storage, dt):
    values = np.asarray(_whole_storage(storage, dt).cpu().numpy())
    return values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes()


def save(obj, f):
    """Save ``obj`` (tensors, and numbers, strings, bytes, dtypes, devices and dicts,
    lists, tuples, sets and Counters of them, at any depth: model, optimizer and scheduler
    state dicts) to ``f``, a path or a binary file object, in the format
    of ``torch.save``.  Views keep sharing their storage; Parameters stay Parameters; a
    tensor's ``.grad``, history and attributes are not saved."""
    pickled = io.BytesIO()
    pickler = _CheckpointPickler(pickled)
    pickler.dump(obj)
    with zipfile.ZipFile(_path_or_file(f), "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickled.getvalue())
        archive.writestr("archive/.format_version", "1")
        archive.writestr("archive/byteorder", "little")
        for key, storage, dt in pickler.storages.values():
            archive.writestr(f"archive/data/{key}", _storage_bytes(storage, dt))
        archive.writestr("archive/version", "3\n")


def _path_or_file(f):
    return os.fspath(f) if isinstance(f, (str, os.PathLike)) else f


# --------------------------------------------------------------------------- loading

class _StorageClass:
    """What ``torch.FloatStorage`` and the like stand for in a checkpoint: an element type."""

    def __init__(self, name, dtype_name):
        self.name, self.dtype_name = name, dtype_name


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    if not isinstance(storage, _LoadedStorage):
        raise pickle.UnpicklingError("Weights only load failed: a tensor must be rebuilt "
                                     "from a storage of the checkpoint")
    if backward_hooks:
        raise pickle.UnpicklingError("Weights only load failed: tensors with backward "
                                     "hooks cannot be loaded")
    # _rebuild_tensor checks the geometry against the storage's bounds
    return _rebuild_tensor(Tensor, storage.storage, int(storage_offset), tuple(map(int, size)),
                           tuple(map(int, stride)), storage.dtype, bool(requires_grad))


def _rebuild_parameter(data, requires_grad, backward_hooks):
    if not isinstance(data, Tensor) or backward_hooks:
        raise pickle.UnpicklingError("Weights only load failed: a Parameter must be rebuilt "
                                     "from a tensor, without backward hooks")
    return Parameter(data, bool(requires_grad))


class _LoadedStorage:
    """A storage read from the archive, with its element type."""

    def __init__(self, storage, dt):
        self.storage, self.dtype = storage, dt


def _allowed_globals():
    allowed = {**_SAFE_GLOBALS,
               ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
               ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
               ("torch", "Size"): Size,
               ("torch", "device"): device}
    for dtype_name, storage_name in _STORAGE_CLASSES.items():
        allowed[("torch", storage_name)] = _StorageClass(storage_name, dtype_name)
        if _mt_dtype(dtype_name) is not None:
            allowed[("torch", dtype_name)] = _mt_dtype(dtype_name)
    return allowed


class _WeightsUnpickler(pickle._Unpickler):
    """Unpickles only allowed globals, storages of the archive, and the ``OrderedDict``
    attributes of a state dict.

    The Python implementation of the unpickler, because its BUILD step (``__setstate__``,
    which on a tensor could set any attribute) must be restricted too.
    """

    dispatch = pickle._Unpickler.dispatch.copy()

    def __init__(self, data, read_storage):
        super().__init__(io.BytesIO(data))
        self._allowed = _allowed_globals()
        self._read_storage = read_storage
        self._storages = {}

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"Weights only load failed: unsupported global: GLOBAL {module}.{name} is not "
                f"an allowed global; {_NOT_ALLOWED}") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageClass) and isinstance(pid[2], str)
                and isinstance(pid[3], str) and isinstance(pid[4], int)):
            raise pickle.UnpicklingError(f"Weights only load failed: unsupported persistent "
                                         f"id {pid!r}; only storages can be loaded")
        _, storage_class, key, location, numel = pid
        if key not in self._storages:
            self._storages[key] = self._read_storage(storage_class, key, location, numel)
        return self._storages[key]

    def load_build(self):
        # a state dict is an OrderedDict carrying a _metadata attribute; nothing else
        # needs BUILD
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is not collections.OrderedDict or type(state) is not dict:
            raise pickle.UnpicklingError(f"Weights only load failed: cannot set the state of "
                                         f"a {type(inst).__name__}; {_NOT_ALLOWED}")
        inst.__dict__.update(state)

    dispatch[pickle.BUILD[0]] = load_build


def _target_device(location, map_location):
    if map_location is None or callable(map_location):
        return device(location)
    if isinstance(map_location, dict):
        return device(map_location.get(location, location))
    if isinstance(map_location, (str, device)):
        return device(map_location)
    raise TypeError(f"map_location should be None, a string, a device, a dict of "
                    f"locations or a function, but got {type(map_location).__name__}")


class _Archive:
    """The storages of an open checkpoint archive, read on demand."""

    def __init__(self, archive, prefix, map_location):
        self.archive, self.prefix, self.map_location = archive, prefix, map_location
        names = set(archive.namelist())
        order = archive.read(prefix + "byteorder").decode().strip() \
            if prefix + "byteorder" in names else "little"
        self.byteorder = "<" if order == "little" else ">"

    def read_storage(self, storage_class, key, location, numel):
        dt = _mt_dtype(storage_class.dtype_name)
        if dt is None:
            raise pickle.UnpicklingError(f"Weights only load failed: the checkpoint holds a "
                                         f"{storage_class.name} of dtype "
                                         f"{storage_class.dtype_name}, which microtensor does "
                                         f"not support")
        raw = self.archive.read(f"{self.prefix}data/{key}")
        element = np.dtype(dt.np)
        if len(raw) != numel * element.itemsize:
            raise pickle.UnpicklingError(f"Weights only load failed: storage {key} holds "
                                         f"{len(raw)} bytes, not {numel} elements of "
                                         f"{dt.name}")
        values = np.frombuffer(raw, element.newbyteorder(self.byteorder)).astype(element)
        storage = Storage(values)
        if callable(self.map_location):
            # PyTorch's ``map_location(storage, location)``: the storage to use, or None
            # for the saved location (``lambda storage, loc: storage`` keeps it on the CPU)
            moved = self.map_location(storage, location)
            if moved is not None:
                return _LoadedStorage(moved, dt)
        target = _target_device(location, self.map_location)
        if target.type == "cuda" and not cuda_is_available():
            raise RuntimeError(
                "Attempting to deserialize object on a CUDA device but "
                "microtensor.cuda.is_available() is False. If you are running on a CPU-only "
                "machine, please use microtensor.load with map_location='cpu' to map your "
                "storages to the CPU.")
        if target.type != "cpu":
            storage = _whole_storage(storage, dt).to(target).untyped_storage()
        return _LoadedStorage(storage, dt)


def load(f, map_location=None, *, weights_only=True, mmap=None):
    """Load what ``save`` or ``torch.save`` wrote (the zip format of PyTorch >= 1.6) to
    ``f``, a path or a binary file object, without running any code from the file: only
    tensors, Parameters, numbers, strings, bytes, dtypes, devices and dicts, lists, tuples,
    sets and Counters of them are accepted, and anything else raises ``pickle.UnpicklingError``.
    ``map_location`` (a device, a dict from saved to new locations, or a function of the
    loaded CPU storage and its saved location returning the storage to use) moves
    storages."""
    if not weights_only:
        raise ValueError("microtensor.load supports only weights_only=True: it never "
                         "unpickles arbitrary objects, which can run code on load; "
                         "tensors, numbers, strings and containers of them load as they are")
    if mmap:
        raise ValueError("microtensor.load does not support mmap=True")
    f = _path_or_file(f)
    if not zipfile.is_zipfile(f):
        raise pickle.UnpicklingError(
            "microtensor.load reads the zip checkpoint format (microtensor.save, and "
            "torch.save since PyTorch 1.6); this file is not a zip archive (a legacy "
            "torch.save file, or not a checkpoint)")
    if not isinstance(f, str):
        f.seek(0)
    with zipfile.ZipFile(f) as archive:
        pickles = [n for n in archive.namelist()
                   if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise pickle.UnpicklingError("microtensor.load: the archive has no "
                                         "<name>/data.pkl record: not a checkpoint")
        prefix = pickles[0][:-len("data.pkl")]
        reader = _Archive(archive, prefix, map_location)
        return _WeightsUnpickler(archive.read(pickles[0]), reader.read_storage).load()


# --------------------------------------------------------------------------- safetensors

def _safetensors_numpy():
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError("the safetensors format needs the 'safetensors' package: "
                          "pip install 'microtensor[safetensors]'") from None
    return safetensors.numpy


def save_safetensors(tensors, filename, metadata=None):
    """Save a dict of name -> tensor in the safetensors format (via ``safetensors.numpy``);
    ``metadata`` is an optional dict of strings stored in the header."""
    st = _safetensors_numpy()
    arrays = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"save_safetensors: expected a dict of tensors, but {name!r} is a "
                            f"{type(t).__name__}")
        arrays[name] = np.ascontiguousarray(t.detach().cpu().numpy())
    st.save_file(arrays, os.fspath(filename), metadata=metadata)


def load_safetensors(filename, device="cpu"):
    """The dict of name -> tensor saved in a safetensors file, on ``device``.  The header's
    dtypes are checked first, so a dtype whose optional package is missing (bfloat16)
    refuses with microtensor's message before any tensor is read."""
    from microtensor.ops.factory import from_numpy
    st = _safetensors_numpy()
    from safetensors import safe_open
    filename = os.fspath(filename)
    with safe_open(filename, framework="np") as f:
        for name in f.keys():
            dt = _DTYPE_OF_SAFETENSORS_CODE.get(f.get_slice(name).get_dtype())
            if dt is not None:
                dt.np       # raises for a dtype whose package is missing
    arrays = st.load_file(filename)
    return {name: from_numpy(a if a.flags.writeable else a.copy()).to(device)
            for name, a in arrays.items()}
