"""Build script: compiles the Cython core (src/microtensor/_C/*.pyx) against NumPy's headers."""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# nnkernels' loops carry `omp simd` reductions (vectorised without OpenMP's runtime) and
# selects that GCC if-converts only when comparisons are taken not to trap
NNKERNELS_FLAGS = ["-fopenmp-simd", "-fno-trapping-math"]

extensions = [
    Extension(
        "microtensor._C." + os.path.splitext(os.path.basename(path))[0],
        [path],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"] + (NNKERNELS_FLAGS if path.endswith("nnkernels.pyx") else []),
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
