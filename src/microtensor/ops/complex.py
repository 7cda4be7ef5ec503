"""Complex tensors: the ops that build them from real parts (``complex``, ``polar``) and
take them apart (``real``, ``imag``, ``view_as_real``, ``view_as_complex``, ``angle``);
``Tensor.real`` and ``Tensor.imag``.  (``conj`` is with the other elementwise ops, in
``ops.pointwise``: it is not lazy, PyTorch's sets a conjugate bit, so it returns a new
tensor and ``is_conj()`` is always False.)

A complex64 (complex128) element is a float32 (float64) pair in memory, so ``real``,
``imag`` and ``view_as_real`` are views reading a complex tensor's storage as floats
(strides doubled, the imaginary part one float further), and ``view_as_complex`` the
reverse: writes through them change the complex tensor, as in PyTorch.  Derivatives
follow PyTorch's convention for complex autograd: the gradient of a real loss ``L`` with
respect to ``z = x + iy`` is ``dL/dx + i dL/dy``.
"""
import numpy as np

from microtensor._C.tensor import TensorBase, complex128, float16, float32, float64, int64
from microtensor._dtype import info
from microtensor.ops.loops import pointwise
from microtensor.ops.pointwise import _zero_grad
from microtensor.ops.registry import Sample, op
from microtensor.vmap.helpers import call, to_front, wrap

__all__ = ["real", "imag", "view_as_real", "view_as_complex", "complex", "polar", "angle"]


def _require_complex(name, self):
    if not self._dtype.is_complex:
        raise RuntimeError(f"{name} is only supported for complex tensors")


def _part(self, which):
    """The real (``which`` 0) or imaginary (1) parts of a complex tensor, as a view."""
    return self._make_dtype_view(self._dtype.to_real(), self._sizes,
                                 tuple(2 * s for s in self._strides), 2 * self._offset + which)


def _complex_samples(make):
    return [Sample(make(3, 4, dtype=complex128)), Sample(make(4, 3, dtype=complex128).t()),
            Sample(make((), dtype=complex128))]


def _pair_samples(make):
    return [Sample(make(3, 2)), Sample(make(2, 3, 2)), Sample(make(3, 4, 2).transpose(0, 1))]


def _parts_samples(low=None):
    def samples(make):
        return [Sample(make(3, 4, low=low), make(3, 4)), Sample(make(3, 4, low=low), make(4)),
                Sample(make(3, low=low), make(()))]
    return samples


def _angle_samples(make):
    return _complex_samples(make) + [Sample(make(3, 4)), Sample(make(2, 3, dtype=int64))]


def _batch_first(op, level, args, kwargs):
    """The batch dim to the front, then the op: for ops that only read the last dims."""
    x = args[0]
    return wrap(call(op, (to_front(x._value, x._bdim),) + tuple(args[1:]), kwargs), 0, level)


# --------------------------------------------------------------------------- parts as views

@op("_real_part", kind="view", method=False, function=False, family="pointwise",
    samples=_complex_samples)
def _real_part(self):
    return _part(self, 0)


@_real_part.def_derivative("self")
def _real_part(grad):
    return grad          # the engine casts it to the complex input: grad + 0j


@op("_imag_part", kind="view", method=False, function=False, family="pointwise",
    samples=_complex_samples)
def _imag_part(self):
    return _part(self, 1)


@_imag_part.def_derivative("self")
def _imag_part(grad):
    return grad * 1j


_real_part.node_name, _imag_part.node_name = "RealBackward0", "ImagBackward0"


@op(kind="composite", method=False)
def real(self):
    """The real parts of a complex tensor (a view); a real tensor itself."""
    return _real_part(self) if self._dtype.is_complex else self


@op(kind="composite", method=False)
def imag(self):
    """The imaginary parts of a complex tensor (a view)."""
    if not self._dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return _imag_part(self)


@op(kind="view", method=False, batch_rule=_batch_first, samples=_complex_samples)
def view_as_real(self):
    """A complex tensor as a float tensor with a last dim of size 2 (real, imaginary)."""
    _require_complex("view_as_real", self)
    return self._make_dtype_view(self._dtype.to_real(), self._sizes + (2,),
                                 tuple(2 * s for s in self._strides) + (1,), 2 * self._offset)


@view_as_real.def_derivative("self")
def view_as_real(grad):
    return view_as_complex(grad.contiguous())


@op(kind="view", method=False, batch_rule=_batch_first, samples=_pair_samples)
def view_as_complex(self):
    """A float tensor whose last dim (size 2, stride 1) holds (real, imaginary) pairs, as
    a complex tensor without that dim."""
    if self._dtype is float16:
        raise NotImplementedError("microtensor has no complex32 (chalf)")
    if self._dtype not in (float32, float64):
        raise RuntimeError("view_as_complex is only supported for half, float and double "
                           "tensors, but got a tensor of scalar type: "
                           f"{info(self._dtype).scalar_name}")
    if not self._sizes or self._sizes[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if self._strides[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in self._strides[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last "
                           "dimension")
    if self._offset % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return self._make_dtype_view(self._dtype.to_complex(), self._sizes[:-1],
                                 tuple(s // 2 for s in self._strides[:-1]), self._offset // 2)


@view_as_complex.def_derivative("self")
def view_as_complex(grad):
    return view_as_real(grad.contiguous())


# --------------------------------------------------------------------------- building

def _check_parts(first, second, first_name="real", second_name="imag"):
    for name, t in ((first_name, first), (second_name, second)):
        if not isinstance(t, TensorBase):
            raise TypeError(f"complex(): argument '{name}' must be Tensor, not "
                            f"{type(t).__name__}")
    if first._dtype is float16 and second._dtype is float16:
        # PyTorch's result is complex32 (its ``polar`` has no half kernel)
        if first_name == "abs":
            raise NotImplementedError("\"polar_cpu\" not implemented for 'Half'")
        raise NotImplementedError("microtensor has no complex32 (chalf)")
    if first._dtype not in (float32, float64) or second._dtype not in (float32, float64):
        raise RuntimeError("Expected both inputs to be Half, Float or Double tensors but got "
                           f"{info(first._dtype).scalar_name} and "
                           f"{info(second._dtype).scalar_name}")
    if first._dtype is not second._dtype:
        raise RuntimeError(f"Expected object of scalar type {info(first._dtype).scalar_name} "
                           f"but got scalar type {info(second._dtype).scalar_name} for second "
                           "argument")


def _complex_loop(re, im, *, out, dtype, casting):
    # ufuncs, which GPU arrays take too
    return np.add(re, np.multiply(im, 1j), out=out, casting="unsafe")


@op(out_casting=False, inputs=("real", "imag"), method=False, family="pointwise",
    samples=_parts_samples())
def complex(real, imag, *, out=None):
    """The complex tensor ``real + i imag`` (both float32 or both float64)."""
    _check_parts(real, imag)
    return pointwise(_complex_loop, real, imag, out=out, dtype=real._dtype.to_complex())


@complex.def_derivative("real")
def complex(grad):
    return grad.real


@complex.def_derivative("imag")
def complex(grad):
    return grad.imag


def _polar_loop(r, theta, *, out, dtype, casting):
    return np.add(np.multiply(r, np.cos(theta)), np.multiply(np.multiply(r, np.sin(theta)), 1j),
                  out=out, casting="unsafe")


@op(out_casting=False, inputs=("abs", "angle"), method=False, family="pointwise",
    samples=_parts_samples(low=0.5))
def polar(abs, angle, *, out=None):
    """The complex tensor with magnitudes ``abs`` and phases ``angle``."""
    _check_parts(abs, angle, "abs", "angle")
    return pointwise(_polar_loop, abs, angle, out=out, dtype=abs._dtype.to_complex())


@polar.def_derivative("abs")
def polar(grad, angle):
    # z = r e^{i theta}: dL/dr = Re(conj(g) dz/dr) with dz/dr = e^{i theta}
    return (grad.conj() * complex(angle.cos(), angle.sin())).real


@polar.def_derivative("angle")
def polar(grad, result):
    # dz/dtheta = i z
    return (grad.conj() * result * 1j).real


# --------------------------------------------------------------------------- measuring

def _angle_loop(a, *, out, dtype, casting):
    if not np.iscomplexobj(a):
        # PyTorch's angle of a real number: pi for the negative ones, NaN kept, else 0
        a = np.where(np.isnan(a), a, np.where(a < 0, np.pi, 0.0))
    return np.copyto(out, np.angle(a) if np.iscomplexobj(a) else a, casting=casting)


@op(family="pointwise", out_layout="contiguous", samples=_angle_samples)
def angle(self, *, out=None):
    """The phase of each element (``atan2(imag, real)``); of a real tensor 0 or pi."""
    dt = self._dtype.to_real() if self._dtype.is_complex else (
        self._dtype if self._dtype.is_floating_point else float32)
    return pointwise(_angle_loop, self, out=out, dtype=dt, compute_dtype=self._dtype)


@angle.def_derivative("self")
def angle(grad, self):
    if not self._dtype.is_complex:
        return _zero_grad(grad)
    # d angle = Im(dz / z): the gradient is i z / |z|^2, and 0 at z = 0
    magnitude = self.abs()
    return (grad * self * 1j / (magnitude * magnitude)).masked_fill(magnitude == 0, 0)


# --------------------------------------------------------------------------- Tensor attributes

def _part_property(fn):
    def write(self, value):
        fn(self).copy_(value)
    return property(fn, write, doc=fn.__doc__)


def install(tensor_class):
    """``Tensor.real`` and ``Tensor.imag``: attributes (views) that can be assigned to."""
    tensor_class.real = _part_property(real)
    tensor_class.imag = _part_property(imag)
