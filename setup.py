"""Build script: compiles the Cython core (src/microtensor/_C/*.pyx) against NumPy's headers."""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# nnkernels' loops carry `omp simd` reductions (vectorised without OpenMP's runtime), and
# they and the kernels' softmax along a strided dim have selects (and nnmath.h's exp) that
# GCC if-converts only when comparisons are taken not to trap
SIMD_FLAGS = ["-fopenmp-simd", "-fno-trapping-math"]
SIMD_MODULES = ("nnkernels.pyx", "kernels.pyx")

extensions = [
    Extension(
        "microtensor._C." + os.path.splitext(os.path.basename(path))[0],
        [path],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"] + (SIMD_FLAGS if path.endswith(SIMD_MODULES) else []),
    )
    for path in sorted(glob.glob("src/microtensor/_C/*.pyx"))
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        nthreads=2,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                             "initializedcheck": False},
    ),
)
