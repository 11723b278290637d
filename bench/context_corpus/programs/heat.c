/* A long heat-equation run: one iteration a second, far longer than any time limit here. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 900;
    double residual = 1.0;
    for (long i = 1; i <= iterations; i++) {
        residual *= 0.97;
        printf("heat: iteration %ld residual %.3e\n", i, residual);
        fflush(stdout);
        sleep(1);
    }
    return 0;
}
