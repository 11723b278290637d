/* The library a module provides: libhpcfft.so.1 (module hpcfft/1.0) or .so.2 (hpcfft/2.0). */
int hpcfft_plan(int n) { return n * 2; }
