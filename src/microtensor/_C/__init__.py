"""The Cython core: stride math (meta), kernels, the tensor object and the autograd graph."""
