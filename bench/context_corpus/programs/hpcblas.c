/* The library modules hpcblas/1.0 (libhpcblas.so.1) and hpcblas/2.0 (libhpcblas.so.2) provide. */
double hpcblas_ddot(const double *x, const double *y, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}
