/* Built against libhpcblas.so.1 (hpcblas/1.0), no rpath: it starts only when LD_LIBRARY_PATH finds it. */
#include <stdio.h>
double hpcblas_ddot(const double *x, const double *y, int n);
int main(void) {
    double x[3] = {1, 2, 3};
    printf("dgemm_bench: ddot %.1f\n", hpcblas_ddot(x, x, 3));
    return 0;
}
