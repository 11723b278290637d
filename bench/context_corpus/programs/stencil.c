/* A grid solver that allocates its planes one at a time (malloc + memset: resident memory),
   20 MB a plane, until it holds N MB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLANE (20L << 20)

int main(int argc, char **argv) {
    long want = argc > 1 ? atol(argv[1]) : 200;
    char **planes = calloc(want / 20 + 1, sizeof *planes);
    for (long k = 0; k < want / 20; k++) {
        planes[k] = malloc(PLANE);
        if (!planes[k]) { fprintf(stderr, "stencil: out of memory at plane %ld\n", k); return 2; }
        memset(planes[k], (int)k, PLANE);
        printf("stencil: plane %ld ready, grid %ld MB\n", k + 1, (k + 1) * 20);
        fflush(stdout);
        usleep(200000);
    }
    printf("stencil: grid complete\n");
    return 0;
}
