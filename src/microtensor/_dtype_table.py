"""The one table of dtypes: each dtype's storage type and every name PyTorch gives it.

``_C.tensor`` builds the dtype objects from this table; everything that spells a dtype
(``microtensor.half``, ``HalfTensor``, ``HalfStorage``, ``c10::Half`` in messages, the
safetensors code ``F16``) looks it up here instead of keeping its own list.
bfloat16 is stored as the ``ml_dtypes`` package's NumPy type (the one JAX uses).  That
package is an optional extra (NumPy is microtensor's only required dependency), and
importing it takes seconds (it registers hundreds of ufunc loops), so the table holds an
``OptionalStorage`` for bfloat16: ``microtensor.bfloat16`` exists from the start, and the
package is imported when the first bfloat16 tensor is made; without it that raises
(``dtype.np``).
"""
from typing import NamedTuple

import numpy as np


class OptionalStorage:
    """The storage type of a dtype that an optional package provides: what the dtype
    object needs before loading it (its size), how to load it, and what to install."""

    def __init__(self, name, itemsize, package, extra, load):
        self.name, self.itemsize, self.package, self.extra = name, itemsize, package, extra
        self._load = load
        self._failure = None   # the ImportError of the one failed attempt

    def load(self):
        """The NumPy type, or an ImportError that says what to install (the import is
        attempted once)."""
        if self._failure is None:
            try:
                return self._load()
            except ImportError as error:
                self._failure = error
        raise ImportError(
            f"microtensor.{self.name} tensors need the '{self.package}' package, which "
            f"provides NumPy's {self.name} type (NumPy has none) and is an optional extra: "
            f'pip install "microtensor[{self.extra}]"',
            name=self.package) from self._failure


def _load_bfloat16():
    from ml_dtypes import bfloat16
    return bfloat16


class DtypeInfo(NamedTuple):
    name: str            # microtensor.<name>, as torch.<name>
    numpy: object        # the NumPy type of the storage (or an OptionalStorage)
    kind: int            # promotion category: 0 bool, 1 integer, 2 floating, 3 complex
    scalar_name: str     # PyTorch's ScalarType ("Float"): FloatTensor, FloatStorage, messages
    cpp_name: str        # the C++ type PyTorch's messages print ("long int", "c10::Half")
    limit_name: str      # the type "value cannot be converted to type ... without overflow" names
    safetensors: str     # the safetensors file format's code
    aliases: tuple = ()  # more attribute names of the package (microtensor.half)


DTYPES = (
    DtypeInfo("float64", np.float64, 2, "Double", "double", "double", "F64", ("double",)),
    DtypeInfo("float32", np.float32, 2, "Float", "float", "float", "F32", ("float",)),
    DtypeInfo("float16", np.float16, 2, "Half", "c10::Half", "c10::Half", "F16", ("half",)),
    DtypeInfo("bfloat16", OptionalStorage("bfloat16", 2, "ml_dtypes", "bfloat16", _load_bfloat16), 2, "BFloat16", "c10::BFloat16", "c10::BFloat16",
              "BF16"),
    DtypeInfo("complex64", np.complex64, 3, "ComplexFloat", "c10::complex<float>",
              "c10::complex<float>", "C64", ("cfloat",)),
    DtypeInfo("complex128", np.complex128, 3, "ComplexDouble", "c10::complex<double>",
              "c10::complex<double>", "C128", ("cdouble",)),
    DtypeInfo("int64", np.int64, 1, "Long", "long int", "int64_t", "I64", ("long",)),
    DtypeInfo("int32", np.int32, 1, "Int", "int", "int", "I32", ("int",)),
    DtypeInfo("int16", np.int16, 1, "Short", "short int", "int16_t", "I16", ("short",)),
    DtypeInfo("int8", np.int8, 1, "Char", "signed char", "int8_t", "I8"),
    DtypeInfo("uint8", np.uint8, 1, "Byte", "unsigned char", "uint8_t", "U8"),
    DtypeInfo("bool", np.bool_, 0, "Bool", "bool", "bool", "BOOL"),
)

BY_NAME = {info.name: info for info in DTYPES}
