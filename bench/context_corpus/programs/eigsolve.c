/* Built against libhpcblas.so.2 (hpcblas/2.0), no rpath. */
#include <stdio.h>
double hpcblas_ddot(const double *x, const double *y, int n);
int main(void) {
    double v[2] = {3, 4};
    printf("eigsolve: norm^2 %.1f\n", hpcblas_ddot(v, v, 2));
    return 0;
}
