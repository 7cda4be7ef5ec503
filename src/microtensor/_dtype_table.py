"""The one table of dtypes: each dtype's storage type and every name PyTorch gives it.

``_C.tensor`` builds the dtype objects from this table; everything that spells a dtype
(``microtensor.half``, ``HalfTensor``, ``HalfStorage``, ``c10::Half`` in messages, the
safetensors code ``F16``) looks it up here instead of keeping its own list.
bfloat16 is stored as the ``ml_dtypes`` package's NumPy type (the one JAX uses).  That
package is an optional extra (NumPy is microtensor's only required dependency): without
it the table holds a ``MissingStorage`` for bfloat16, so ``microtensor.bfloat16`` still
exists but making one of its tensors raises (``dtype.np``).
"""
from typing import NamedTuple

import numpy as np


class MissingStorage(NamedTuple):
    """The storage type of a dtype whose package is not installed: what the dtype object
    needs without it (its size) and what to install to get it."""
    itemsize: int
    package: str
    extra: str                 # microtensor's pip extra that installs ``package``
    reason: ImportError        # why importing it failed (not installed, or broken)


try:
    from ml_dtypes import bfloat16 as _bfloat16_storage
except ImportError as error:
    _bfloat16_storage = MissingStorage(2, "ml_dtypes", "bfloat16", error)


class DtypeInfo(NamedTuple):
    name: str            # microtensor.<name>, as torch.<name>
    numpy: object        # the NumPy type of the storage (or a MissingStorage)
    kind: int            # promotion category: 0 bool, 1 integer, 2 floating
    scalar_name: str     # PyTorch's ScalarType ("Float"): FloatTensor, FloatStorage, messages
    cpp_name: str        # the C++ type PyTorch's messages print ("long int", "c10::Half")
    limit_name: str      # the type "value cannot be converted to type ... without overflow" names
    safetensors: str     # the safetensors file format's code
    aliases: tuple = ()  # more attribute names of the package (microtensor.half)


DTYPES = (
    DtypeInfo("float64", np.float64, 2, "Double", "double", "double", "F64", ("double",)),
    DtypeInfo("float32", np.float32, 2, "Float", "float", "float", "F32", ("float",)),
    DtypeInfo("float16", np.float16, 2, "Half", "c10::Half", "c10::Half", "F16", ("half",)),
    DtypeInfo("bfloat16", _bfloat16_storage, 2, "BFloat16", "c10::BFloat16", "c10::BFloat16",
              "BF16"),
    DtypeInfo("int64", np.int64, 1, "Long", "long int", "int64_t", "I64", ("long",)),
    DtypeInfo("int32", np.int32, 1, "Int", "int", "int", "I32", ("int",)),
    DtypeInfo("int16", np.int16, 1, "Short", "short int", "int16_t", "I16", ("short",)),
    DtypeInfo("int8", np.int8, 1, "Char", "signed char", "int8_t", "I8"),
    DtypeInfo("uint8", np.uint8, 1, "Byte", "unsigned char", "uint8_t", "U8"),
    DtypeInfo("bool", np.bool_, 0, "Bool", "bool", "bool", "BOOL"),
)

BY_NAME = {info.name: info for info in DTYPES}
