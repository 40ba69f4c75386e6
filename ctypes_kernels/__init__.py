"""The bundled port: C kernels with four ISA paths, built on demand and loaded with ctypes."""
