"""Open the FFT library at run time, as Python bindings do (ctypes)."""
import ctypes

lib = ctypes.CDLL("libhpcfft.so.1")
print("plan", lib.hpcfft_plan(64))
