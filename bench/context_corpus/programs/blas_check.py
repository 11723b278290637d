"""Check the BLAS library a Python package would use, through ctypes; argv[1] is the soname."""
import ctypes
import sys

soname = sys.argv[1] if len(sys.argv) > 1 else "libhpcblas.so.1"
print(f"blas_check: opening {soname}", flush=True)
lib = ctypes.CDLL(soname)
print("blas_check: ok", lib)
